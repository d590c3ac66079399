"""Resumable real-time runs: a ``threads`` or ``ray`` run killed with SIGKILL halfway through and resumed
with ``--resume`` keeps every record it had written up to its checkpoint, plays the requests that were
in flight again, and ends with each completed episode in episodes.jsonl once and its accounting
consistent; the killed driver's Ray processes do not outlive it.

Each backend is run once (module fixture): ``sao-env run`` as its own process on the shrunken
style-drift scenario with ``LONGER`` phases at ``time_scale`` 0.05 (108 scenario seconds, about 5 s of wall clock),
checkpointing every 2 updates, SIGKILLed once it has logged an update past the scenario's middle,
then resumed by a second process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import LONGER, shrink_overrides
from sao_env.runtime import checkpoint as ckpt

pytestmark = pytest.mark.slow  # two real-time runs and their resumes per backend: about a minute

G = 4
"""grpo's group size (agents/grpo.yaml)."""
HALF = 54.0
"""The run's middle, in scenario seconds (3 ``LONGER`` phases of 36 s)."""


def _argv(out: Path, backend: str) -> list[str]:
    extra = [f"agent.runtime.backend={backend}", "agent.runtime.time_scale=0.05", "agent.runtime.max_staleness=4"]
    if backend == "ray":
        extra += ["agent.runtime.ray_num_cpus=2", "agent.runtime.workers=1"]  # one actor: its start is most of the cost
    return [sys.executable, "-m", "sao_env.cli", "run", "--agent", "grpo", "--out", str(out), "--checkpoint-every", "2u",
            *shrink_overrides("grpo", [*LONGER, *extra])]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _written(path: Path) -> list[dict]:
    """The complete lines of a log a running process is writing (none before it exists)."""
    text = path.read_text() if path.is_file() else ""
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line]


def _process_tree(root: int) -> dict[int, str]:
    """``root``'s live descendants as ``{pid: command}``, from ``ps`` (not the reaper's own /proc reading)."""
    rows = subprocess.run(["ps", "-e", "-o", "pid=,ppid=,stat=,args="], capture_output=True, text=True, check=True)
    children: dict[int, list[tuple[int, str, str]]] = {}
    for row in rows.stdout.splitlines():
        pid, ppid, stat, *args = row.split(None, 3)
        children.setdefault(int(ppid), []).append((int(pid), stat, args[0] if args else ""))
    found, todo = {}, [root]
    while todo:
        for pid, stat, command in children.get(todo.pop(), []):
            if not stat.startswith("Z"):
                found[pid] = command
                todo.append(pid)
    return found


def _alive(pids) -> set[int]:
    """Those of ``pids`` still alive (not zombies), from one ``ps`` call."""
    rows = subprocess.run(["ps", "-o", "pid=,stat=", "-p", ",".join(map(str, pids))], capture_output=True, text=True)
    return {int(pid) for pid, stat in (row.split() for row in rows.stdout.splitlines()) if not stat.startswith("Z")}


@pytest.fixture(scope="module")
def warm(sao_env_cache):
    """The shrunken scenario's warm start, trained here so that the run processes start at once."""
    from sao_env.experiment import resolve_config
    from sao_env.policy.warmstart import load_warm_started
    from sao_env.scenario import Scenario

    config = resolve_config("style-drift", "grpo", 0, shrink_overrides("grpo"))
    load_warm_started(config.agent.model, Scenario(config.env), show_progress=False)


@pytest.fixture(scope="module", params=["threads", "ray"])
def resumed(request, warm, tmp_path_factory):
    """Kill a run past its middle with SIGKILL, resume it; what both processes left behind."""
    backend = request.param
    if backend == "ray":
        pytest.importorskip("ray")
    tmp = tmp_path_factory.mktemp(f"resume-{backend}")
    out, argv = tmp / "run", _argv(tmp / "run", backend)
    with (tmp / "killed.err").open("w") as err:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline, tree, listed = time.monotonic() + 180, {}, 0.0
        while time.monotonic() < deadline and process.poll() is None:
            records = _written(out / "metrics.jsonl")
            if ckpt.checkpoints(out / ckpt.FOLDER) and records and records[-1]["sim_time_s"] >= HALF:
                break
            if time.monotonic() - listed >= 1.0:  # a ``ps`` of every process costs 5 ms of CPU: once a second, not 20 times
                tree, listed = _process_tree(process.pid) or tree, time.monotonic()
            time.sleep(0.05)
        assert process.poll() is None, f"the run ended before the kill: {(tmp / 'killed.err').read_text()}"
        tree = _process_tree(process.pid) or tree
        process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    survived: dict[int, float] = {}
    while len(survived) < len(tree) and time.monotonic() - killed_at < 60:
        alive = _alive([pid for pid in tree if pid not in survived])
        for pid in tree:
            if pid not in survived and pid not in alive:
                survived[pid] = time.monotonic() - killed_at
        time.sleep(0.1)
    lingering = {pid: tree[pid] for pid in tree if pid not in survived}
    for pid in lingering:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)

    assert not (out / "summary.json").exists()
    path, state, _ = next(iter(ckpt.newest_good(out / ckpt.FOLDER)))
    killed = {name: (out / name).read_bytes() for name in ("metrics.jsonl", "evals.jsonl", "episodes.jsonl")}
    resume = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert resume.returncode == 0, resume.stderr
    return {"backend": backend, "out": out, "state": state, "killed": killed, "stderr": resume.stderr,
            "tree": tree, "survived": survived, "lingering": lingering}


def test_the_resumed_run_keeps_what_was_written_up_to_its_checkpoint(resumed):
    out, state = resumed["out"], resumed["state"]
    assert f"sao-env: resuming {out} from simulated {state['sim_time_s'] / 3600:.3f} h" in resumed["stderr"]
    assert state["sim_time_s"] >= HALF / 2 and state["runtime"]["backend"] == resumed["backend"]
    for name, size in state["offsets"].items():
        now = (out / name).read_bytes()
        assert len(resumed["killed"][name]) >= size and now[:size] == resumed["killed"][name][:size], name
        assert len(now) > size, f"{name}: nothing written after the resume"
    assert (out / "summary.json").is_file() and not (out / ckpt.FOLDER).exists()


def test_the_checkpoint_is_at_a_version_boundary_and_its_accounting_holds(resumed):
    state = resumed["state"]
    runtime, core = state["runtime"], state["runtime"]["core"]
    counts = runtime["state"]
    cut = {name: resumed["killed"][name][:size] for name, size in state["offsets"].items()}
    updates = [r for r in map(json.loads, cut["metrics.jsonl"].splitlines()) if r.get("kind") != "eval"]
    assert updates[-1]["update"] == counts.updates and updates[-1]["episodes"] == counts.consumed
    assert updates[-1]["version"] == runtime["agent"].version
    assert len(cut["episodes.jsonl"].splitlines()) == counts.completed
    kept = sum(len(r.group) for r in core.buffer + core.blocked) + sum(G - r.pending for r in core.running.values())
    assert counts.completed == counts.consumed + counts.dropped + kept
    assert counts.started * G == counts.completed + sum(r.pending for r in core.running.values())


def test_every_episode_once_and_the_accounting_holds(resumed):
    out = resumed["out"]
    summary = json.loads((out / "summary.json").read_text())
    records = [r for r in _lines(out / "metrics.jsonl") if r.get("kind") != "eval"]
    assert [r["update"] for r in records] == list(range(1, len(records) + 1))
    cumulative = [0] + [r["episodes"] for r in records]
    batches = [b - a for a, b in zip(cumulative, cumulative[1:])]
    assert all(b >= G and b % G == 0 for b in batches), batches  # at least one whole group of 4 per update
    assert sum(batches) == summary["episodes_consumed"] == sum(summary["staleness_hist"])
    episodes = _lines(out / "episodes.jsonl")
    assert len(episodes) == summary["episodes_completed"]
    per_group = Counter(e["group"] for e in episodes)
    assert max(per_group.values()) <= G, "an episode was logged twice"
    assert all(len({e["task"] for e in episodes if e["group"] == g}) == 1 for g in per_group)
    complete = sum(1 for n in per_group.values() if n == G)
    assert summary["episodes_consumed"] + summary["dropped"] <= complete * G  # only whole groups are consumed


def test_requests_in_flight_at_the_checkpoint_are_played_after_the_resume(resumed):
    out, state = resumed["out"], resumed["state"]
    core = state["runtime"]["core"]
    pending = {r.id: r.pending for r in core.running.values()}
    assert pending, "no request was in flight at the checkpoint: the case tests nothing"
    kept = state["offsets"]["episodes.jsonl"]
    data = (out / "episodes.jsonl").read_bytes()
    before = Counter(json.loads(line)["group"] for line in data[:kept].splitlines())
    after = [json.loads(line) for line in data[kept:].splitlines()]
    version = state["runtime"]["agent"].version
    for request_id, n in pending.items():
        assert before[request_id] == G - n, request_id
        replayed = [e for e in after if e["group"] == request_id]
        assert len(replayed) <= n and all(e["version"] >= version for e in replayed), request_id
    oldest = min(pending)
    assert len([e for e in after if e["group"] == oldest]) == pending[oldest], "the oldest re-queued request did not finish"
    timings = json.loads((out / "timings.json").read_text())
    assert timings["replayed_requests"] == len(pending) and timings["resumed_at_sim_s"] == state["sim_time_s"]


def test_a_killed_drivers_ray_processes_are_gone_within_seconds(resumed):
    if resumed["backend"] != "ray":
        pytest.skip("Ray processes only")
    tree, survived = resumed["tree"], resumed["survived"]
    assert any("RolloutWorker" in command for command in tree.values()), tree
    assert not resumed["lingering"], f"alive 60 s after the driver's SIGKILL: {resumed['lingering']}"
    assert max(survived.values()) <= 5.0, {tree[pid]: round(s, 1) for pid, s in survived.items()}
