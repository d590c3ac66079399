"""A pool's workers die with their parent, however it ends (kill -9 included), and the runs they
finished count when the command runs again.

Left alone, a worker whose parent was killed moved to PPID 1, went on making every queued run (none
of them reported, the grid's ledger never written) and then waited forever for work, holding its memory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import shrink_overrides

FAKE_RUNS = r"""
import os, sys, time
from pathlib import Path
import sao_env.experiment.drivers as drivers

out = Path(sys.argv[1])

def fake_run_plan(plan, **kwargs):
    (out / f"started-{plan}").write_text(str(os.getpid()))
    time.sleep(0.4)
    (out / f"done-{plan}").write_text("")
    return {}, 0.4

drivers.run_plan = fake_run_plan
drivers._train_warm_starts = drivers._check_run_folders = lambda *a, **k: None
drivers.run_many(list(range(40)), jobs=2, code={"fixed": True}, on_done=lambda *a: None)
"""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    end = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _kill_and_watch(parent: subprocess.Popen, workers: list[int]) -> float:
    """kill -9 ``parent``; seconds until every worker has ended (the workers are ended by pid, and the
    test fails, when that takes over 10 s)."""
    parent.kill()
    parent.wait()
    start = time.monotonic()
    try:
        _wait_for(lambda: not any(_alive(w) for w in workers), 10.0, "the orphaned workers to end")
    finally:
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
    return time.monotonic() - start


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_killed_parents_workers_end_within_seconds(tmp_path):
    """40 queued runs of 0.4 s in 2 workers; the parent is killed after the second run ends: both
    workers are gone within seconds and start no further run."""
    parent = subprocess.Popen([sys.executable, "-c", FAKE_RUNS, str(tmp_path)], start_new_session=True)
    try:
        _wait_for(lambda: len(list(tmp_path.glob("done-*"))) >= 2, 60.0, "two runs to end")
        workers = _children(parent.pid)
        assert len(workers) == 2
    except BaseException:
        parent.kill()
        raise
    assert _kill_and_watch(parent, workers) < 5.0
    started = len(list(tmp_path.glob("started-*")))
    time.sleep(1.0)
    assert len(list(tmp_path.glob("started-*"))) == started < 10


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_killed_grid_leaves_no_worker_and_its_finished_runs_reach_the_ledger(tmp_path):
    """``sao-env grid --jobs 2`` of 4 short runs, killed (SIGKILL) once a run has finished: its workers
    end within seconds, and the grid run again records every run in its ledger, the runs finished
    before the kill reused from their directories, each run once."""
    short = tuple(f"env.phases.{i}.duration_h=0.001" for i in range(3))
    spec = {"title": "orphans", "scenarios": ["style-drift"], "seeds": [0, 1], "baseline": "grpo",
            "cut": [*shrink_overrides("grpo"), *short],
            "rows": [{"label": "grpo", "agent": "grpo"}, {"label": "running mean", "agent": "running_mean"}]}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    runs, out = tmp_path / "runs", tmp_path / "out"
    args = ["grid", str(path), "--out", str(out), "--runs-dir", str(runs), "--jobs", "2"]
    from sao_env.experiment import resolve_config
    from sao_env.policy.warmstart import load_warm_started
    from sao_env.scenario import Scenario

    config = resolve_config("style-drift", "grpo", 0, spec["cut"])  # the session's warm start, trained once
    load_warm_started(config.agent.model, Scenario(config.env), show_progress=False)
    parent = subprocess.Popen([sys.executable, "-m", "sao_env.cli", *args], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(lambda: any(runs.rglob("summary.json")), 300.0, "a run to finish")
        workers = _children(parent.pid)
        assert workers
    except BaseException:
        parent.kill()
        raise
    assert _kill_and_watch(parent, workers) < 5.0
    finished = {p.parent for p in runs.rglob("summary.json")}
    assert 1 <= len(finished) < 4
    # Run again with the code the killed grid recorded (others may edit the package meanwhile, and the code
    # decides reuse): the finished runs are reused from their directories, the others made.
    from sao_env.grid import LEDGER, Ledger, load_grid, plan_grid, run_grid

    code = json.loads((next(iter(finished)) / "summary.json").read_text())["provenance"]["code"]
    grid = plan_grid(load_grid(path), source=path, runs_dir=runs)
    report = run_grid(grid, jobs=1, code=code, ledger=Ledger(out / LEDGER))
    assert {r.plan.out.resolve() for r in report.reused} == {p.resolve() for p in finished}
    assert len(report.made) == 4 - len(finished)
    ledger = [json.loads(line) for line in (out / "finished.jsonl").read_text().splitlines()]
    assert len(ledger) == 4 and len({e["config_hash"] for e in ledger}) == 4
    assert {Path(e["row"]["run_dir"]).resolve() for e in ledger} >= {p.resolve() for p in finished}


SIGNALLED_RUNS = r"""
import os, signal, sys, time
from pathlib import Path
import sao_env.experiment.drivers as drivers
from sao_env.experiment import RunInterrupted

out = Path(sys.argv[1])

def fake_run_plan(plan, **kwargs):
    asked = []
    signal.signal(signal.SIGTERM, lambda signum, frame: asked.append(signum))  # as a sim run's ``ask_stop``
    (out / f"started-{plan}").write_text(str(os.getpid()))
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if asked:
            (out / f"stopped-{plan}").write_text("")
            raise RunInterrupted("SIGTERM", f"run{plan}", f"run{plan}/checkpoint", 360.0 * (plan + 1))
        time.sleep(0.02)
    return {}, 60.0

drivers.run_plan = fake_run_plan
drivers._train_warm_starts = drivers._check_run_folders = lambda *a, **k: None
try:
    drivers.run_many(list(range(6)), jobs=2, code={"fixed": True}, on_done=lambda *a: None)
except RunInterrupted as err:
    print(err, flush=True)
    sys.exit(err.exit_code)
except KeyboardInterrupt as err:
    print("KeyboardInterrupt", err, flush=True)
    sys.exit(99)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")
def test_a_signalled_pool_stops_its_runs_at_checkpoints_and_starts_no_queued_run(tmp_path):
    """6 queued runs of a minute in 2 workers, SIGTERM once two have started, sent to the parent alone
    (``kill PID``, as a scheduler does; a signal to the process group also reaches the workers, which
    then stop on their own as well). Before, the pool waited for the runs in flight, the workers never
    heard of the signal, and a worker that one run left started the next queued one: minutes, with
    nothing said. Now both runs stop at their checkpoint at once, no queued run starts, the parent
    names both and exits 143, and no worker is left."""
    # the parent's SIGTERM handler is the one ``sao-env`` installs (``cli.app.main``)
    script = "import signal\nfrom sao_env.cli.app import _stop\nsignal.signal(signal.SIGTERM, _stop)\n" + SIGNALLED_RUNS
    parent = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], start_new_session=True,
                              stdout=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: len(list(tmp_path.glob("started-*"))) == 2, 60.0, "two runs to start")
        workers = _children(parent.pid)
        assert len(workers) == 2
        parent.send_signal(signal.SIGTERM)
        out, _ = parent.communicate(timeout=15)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    assert parent.returncode == 143, out
    assert out.splitlines() == ["SIGTERM: 2 runs stopped at a checkpoint (run0 at simulated 0.100 h; "
                                "run1 at simulated 0.200 h)"]
    assert sorted(p.name for p in tmp_path.glob("stopped-*")) == ["stopped-0", "stopped-1"]
    time.sleep(0.5)
    assert sorted(p.name for p in tmp_path.glob("started-*")) == ["started-0", "started-1"]
    assert not any(_alive(w) for w in workers)


FAILING_RUN = r"""
import sys
import sao_env.experiment.drivers as drivers
from sao_env.errors import UserError

def fake_run_plan(plan, **kwargs):
    if plan == 3:
        raise UserError(f"run {plan}: cannot write runs/x: Permission denied")
    return {}, 0.0

drivers.run_plan = fake_run_plan
drivers._train_warm_starts = drivers._check_run_folders = lambda *a, **k: None
try:
    drivers.run_many(list(range(6)), jobs=2, code={"fixed": True}, on_done=lambda *a: None)
except UserError as err:
    print(type(err).__name__, err)
    sys.exit(2)
"""


def test_a_user_error_raised_in_a_worker_reaches_the_parent_as_itself():
    """A run's UserError (a one-line error for the command to print) crosses the pool unchanged."""
    done = subprocess.run([sys.executable, "-c", FAILING_RUN], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stdout.splitlines() == ["UserError run 3: cannot write runs/x: Permission denied"]
