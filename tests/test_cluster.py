"""`sao-env grid --cluster`: a grid's runs as tasks on a local Ray cluster of two worker nodes (one CPU
each, beside a head with none), against the same grid made with ``--jobs 1``: the same tables byte for
byte (rows sent back from the nodes' own run folders, or the folders shipped back), a node killed
mid-grid and a driver killed mid-grid costing only their runs in flight (every run once in the
ledger), a run that cannot run reported once, and no Ray process left behind. A tiny cut of
style-drift (2 rows x 1 seed, runs of a few seconds, a 20-step warm start)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import session_env
from sao_env.cli import main
from sao_env.experiment import progress
from sao_env.grid import LEDGER

FIXED_CODE = {"git_commit": "0" * 40, "dirty": False, "diff_sha256": None, "sao_env": "test"}
"""The code version recorded by every grid here: edits to the tree during the tests decide nothing."""
CUT = ["env.warm_start.steps=20", "env.warm_start.batch_size=8", "env.max_new_tokens=20",
       *(f"env.phases.{i}.sources.0.params.operators=[+]" for i in range(3)),
       *(f"env.phases.{i}.duration_h=0.005" for i in range(3)),
       "env.eval.interval_h=0.005", "env.eval.prompts_per_phase=4", "env.rollout_slots=8"]
SPEC = {"title": "cluster grid", "scenarios": ["style-drift"], "seeds": [0], "baseline": "grpo", "cut": CUT,
        "rows": [{"label": "grpo", "agent": "grpo"}, {"label": "running mean", "agent": "running_mean"}]}
TABLES = ("per-seed.csv", "style-drift.csv", "style-drift.md", "grid.json")
DRIVER = """import os, signal, sys
from sao_env import cluster, grid, provenance
provenance.code_version = lambda: {code!r}
cluster.expected_code = lambda code: None
add = grid.Ledger.add

def add_then_die(self, *args, **kwargs):
    add(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)

grid.Ledger.add = add_then_die
from sao_env.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""A grid's driver in a process of its own, the code version fixed as in-process, that kills itself
(SIGKILL) as soon as it has written the first line of its ledger."""


def ray_processes() -> dict[int, str]:
    """This process's descendants that are Ray's (raylets, GCS, workers, agents): pid -> command line."""
    from sao_env.runtime.reaper import descendants

    found = {}
    for pid in descendants(os.getpid()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "ray" in command:
            found[pid] = command
    return found


def alive(pids) -> list[int]:
    from sao_env.runtime.reaper import start_time

    return [pid for pid in pids if start_time(pid) is not None]


def wait_until(check, seconds: float, what: str):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"waited {seconds} s for {what}")


FAST_NODE_DEATH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_timeout_ms": "2000",
                   "RAY_health_check_failure_threshold": "3"}
"""Ray's GCS health checks, read by the cluster's processes when they start: a killed node is declared dead
after about 3-5 s instead of Ray's default 15-25 s (measured: the node-killing test 28 s -> 15 s on a
loaded machine). The case is the same, a node dies without notice and its run in flight is made again."""
KEEP_IDLE_WORKERS = {"RAY_num_workers_soft_limit": "2"}
"""Idle workers a node keeps (Ray's default: one per CPU, here one). The killed driver's job starts a worker of
its own on the node, and with one kept the module's idle worker (its imports done) was killed, so the run made
again after the driver's death started a cold worker: 9.6 s for a run of 2 s, 1.7 s with two kept (measured on a
loaded machine). Which worker makes a run decides nothing the tests check."""


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster: a head node without CPUs and two worker nodes of one CPU each; shut down
    after the module, and every Ray process it started checked gone."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    seen: dict[int, str] = {}
    with contextlib.ExitStack() as settings:
        # restored after the cluster starts: later Ray starts keep the defaults
        for name, value in (FAST_NODE_DEATH | KEEP_IDLE_WORKERS).items():
            settings.enter_context(session_env(name, value))
        made = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        try:
            for _ in range(2):
                made.add_node(num_cpus=1)
        except BaseException:
            made.shutdown()
            raise
    try:
        made.wait_for_nodes()
        made.seen = seen
        ray.init(address=made.address, log_to_driver=False)  # one job: its workers serve every grid run here
        yield made
    finally:
        seen.update(ray_processes())
        ray.shutdown()
        made.shutdown()
        wait_until(lambda: not alive(seen), 20, f"the cluster's processes to end: {sorted(alive(seen))}")


@pytest.fixture
def fixed_code(monkeypatch):
    from sao_env import cluster as on_cluster, provenance

    monkeypatch.setattr(provenance, "code_version", lambda: FIXED_CODE)
    monkeypatch.setattr(on_cluster, "expected_code", lambda code: None)  # the nodes run the real tree's code


@pytest.fixture(scope="module")
def expected(tmp_path_factory):
    """The grid made with ``--jobs 1`` in a folder of its own: its tables' bytes and the folder."""
    from sao_env import provenance

    root = tmp_path_factory.mktemp("jobs1")
    (root / "grid.yaml").write_text(yaml.safe_dump(SPEC, sort_keys=False))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(provenance, "code_version", lambda: FIXED_CODE)
        patch.chdir(root)
        assert main(["grid", "grid.yaml", "--out", "out", "--runs-dir", "runs", "--jobs", "1"]) == 0
    return {name: (root / "out" / name).read_bytes() for name in TABLES}, root


def grid_folder(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "grid.yaml").write_text(yaml.safe_dump(SPEC, sort_keys=False))
    return root


def ledger_hashes(out: Path) -> list[str]:
    return [json.loads(line)["config_hash"] for line in (out / LEDGER).read_text().splitlines()]


def same_tables(out: Path, expected: dict[str, bytes]) -> None:
    for name, data in expected.items():
        assert (out / name).read_bytes() == data, name


@pytest.mark.slow
def test_a_node_killed_mid_grid_costs_only_its_runs_in_flight(cluster, expected, fixed_code, tmp_path, monkeypatch,
                                                               capsys):
    """The second worker node's raylet is killed while both nodes make a run: its run is made again on
    the other node, every run is in the ledger once, the tables are unchanged, the folders shipped back.
    While it waits, the driver says on stderr (not in grid.log) how many runs are finished and how many
    are on the cluster."""
    tables, _ = expected
    monkeypatch.chdir(grid_folder(tmp_path))
    monkeypatch.setattr(progress, "RUN_AMONG_OTHERS_EVERY_S", 2.0)
    node_dir = tmp_path / "node"
    victim = cluster.list_all_nodes()[2]
    killed: list[str] = []

    def kill_when_both_nodes_run() -> None:
        wait_until(lambda: len(list(node_dir.glob("*/*/seed*"))) >= 2, 180, "two runs under way")  # 60 s was too short on 2 loaded cores
        cluster.seen.update(ray_processes())  # the killed node's workers included: checked gone at the end
        cluster.remove_node(victim, allow_graceful=False)
        killed.append(victim.unique_id)

    killer = threading.Thread(target=kill_when_both_nodes_run, daemon=True)
    killer.start()
    assert main(["grid", "grid.yaml", "--out", "out", "--runs-dir", "runs", "--cluster", cluster.address,
                 "--node-runs-dir", str(node_dir), "--ship-runs"]) == 0
    killer.join(5)
    assert killed, "the node was not killed mid-grid"
    waiting = [re.fullmatch(r"sao-env: (\d+) of 2 runs finished, (\d+) on the cluster \((\d+) s\)", line)
               for line in capsys.readouterr().err.splitlines() if " on the cluster (" in line]
    assert waiting and all(waiting), waiting
    counts = [(int(m[1]), int(m[2]), int(m[3])) for m in waiting]
    assert counts[0][:2] == (0, 2) and all(done + left == 2 and left > 0 for done, left, _ in counts), counts
    assert [s for *_, s in counts] == sorted(s for *_, s in counts) and counts[-1][2] >= 2 * (len(counts) - 1), counts
    assert " on the cluster (" not in (tmp_path / "out" / "grid.log").read_text()
    hashes = ledger_hashes(tmp_path / "out")
    assert len(hashes) == 2 and len(set(hashes)) == 2
    same_tables(tmp_path / "out", tables)
    shipped = sorted((tmp_path / "runs").glob("*/*/seed*"))
    assert len(shipped) == 2 and all((d / "summary.json").is_file() and (d / "checkpoints" / "final").is_dir()
                                     and not (d / "checkpoints" / "resume").exists() for d in shipped)


@pytest.mark.slow
def test_a_run_that_cannot_run_is_reported_once_and_not_retried(cluster, expected, fixed_code, monkeypatch, capsys):
    """A row whose group does not fit its rollout slots fails on its node: one line names it, the
    grid exits 2, the runs that finished stay in the ledger."""
    _, root = expected
    spec = SPEC | {"seeds": [0], "rows": [SPEC["rows"][0], {"label": "bad", "agent": "grpo",
                                                            "overrides": ["env.rollout_slots=2"]}]}
    (root / "bad.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.chdir(root)
    assert main(["grid", "bad.yaml", "--out", "bad", "--runs-dir", "runs", "--cluster", cluster.address]) == 2
    err = capsys.readouterr().err
    failed = [line for line in err.splitlines() if line.startswith("failed on the cluster")]
    assert failed == ["failed on the cluster, not retried: style-drift | bad | seed 0: group size 4 exceeds the "
                      "scenario's 2 rollout slots"], err
    assert "1 of 1 runs failed on the cluster" in err
    assert len(ledger_hashes(root / "bad")) == 1  # the grpo run, reused from its run directory


@pytest.mark.slow
def test_a_killed_driver_run_again_submits_only_what_its_ledger_lacks(cluster, expected, fixed_code, tmp_path,
                                                                     monkeypatch, capsys):
    """A driver in a process of its own, run folders on the nodes' own path, is killed (SIGKILL) as
    soon as the first run is in its ledger. Run again, it reuses the listed runs and makes the rest; the tables
    come from the rows the nodes sent back (no run folder where the driver looks), byte for byte those
    of --jobs 1, and every run is in the ledger once. --dry-run and --tables-only read the same ledger."""
    tables, _ = expected
    monkeypatch.chdir(grid_folder(tmp_path))
    (tmp_path / "driver.py").write_text(DRIVER.format(code=FIXED_CODE))
    args = ["grid", "grid.yaml", "--out", "out", "--runs-dir", "runs", "--cluster", cluster.address,
            "--node-runs-dir", str(tmp_path / "node")]
    driver = subprocess.run([sys.executable, "driver.py", *args], capture_output=True, text=True, timeout=240)
    assert driver.returncode == -signal.SIGKILL, driver.stderr
    listed = len(ledger_hashes(tmp_path / "out"))
    assert listed == 1
    assert main(args) == 0
    log = (tmp_path / "out" / "grid.log").read_text().splitlines()
    reused = [line for line in log if line.startswith("reusing ")]
    assert reused == [f"reusing {listed} of 2 runs (finished with the same configuration and code); {listed} of them "
                      "from out/finished.jsonl, their run directories absent"], log
    hashes = ledger_hashes(tmp_path / "out")
    assert len(hashes) == 2 and len(set(hashes)) == 2
    same_tables(tmp_path / "out", tables)
    assert not (tmp_path / "runs").exists() and len(list((tmp_path / "node").glob("*/*/seed*/summary.json"))) == 2
    capsys.readouterr()
    assert main([*args, "--dry-run"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "2 runs: 0 to run, 2 to reuse"
    assert main(args[:6] + ["--tables-only"]) == 0
    same_tables(tmp_path / "out", tables)
    assert main([*args, "--jobs", "2"]) == 2
    assert "--jobs and --cluster do not go together" in capsys.readouterr().err
