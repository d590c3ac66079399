"""A run directory has one writer and is never replaced by surprise (issue #22, items 3 and 4).

* ``--resume`` on a finished run whose override changed is a one-line refusal (exit 2) that names
  the key that differs and leaves every file of the finished run as it was (it used to delete
  summary.json, timings.json and adaptation.png and rewrite config.yaml);
* a plain ``run`` into a directory holding another configuration's run is refused the same way,
  unless ``--overwrite``;
* a second process cannot write a directory that a live process holds (``RunLock``): ``run`` says
  who holds it; ``compare``'s driver waits for the holder and reuses its finished run; the lock of
  a process killed with SIGKILL is taken over at once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHRINK
from sao_env.cli import main
from sao_env.errors import UserError
from sao_env.experiment import RunBusy, RunLock, differing_keys, plan_run, run_plan

RUN = ["run", "--agent", "running_mean", *SHRINK]
HOLD = """
import sys, time
from sao_env.experiment import RunLock
lock = RunLock(sys.argv[1]); lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _error_line(capsys, argv) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, (code, err)
    lines = [line for line in err.splitlines() if line.startswith("sao-env: error: ")]
    assert len(lines) == 1 and err.rstrip().endswith(lines[0]) and "Traceback" not in out + err, err
    return lines[0]


def _files(folder: Path) -> dict[str, bytes]:
    """Every file of a run directory but its lock (which names the last process that took it)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.mark.slow
def test_resume_with_a_changed_override_refuses_and_keeps_the_finished_run(capsys, tmp_path):
    out = tmp_path / "run"
    assert main([*RUN, "--out", str(out)]) == 0
    capsys.readouterr()
    before = _files(out)
    assert {"summary.json", "timings.json", "adaptation.png", "config.yaml"} <= set(before)
    line = _error_line(capsys, [*RUN, "--out", str(out), "env.phases.0.duration_h=0.02", "--resume"])
    assert line == (f"sao-env: error: {out} holds a finished run of another configuration (differs at "
                    f"env.phases.0.duration_h); use another --out, or --overwrite to replace it")
    assert _files(out) == before
    # The same without --resume: a plain run does not replace it either.
    line = _error_line(capsys, [*RUN, "--out", str(out), "env.phases.0.duration_h=0.02"])
    assert "holds a finished run of another configuration (differs at env.phases.0.duration_h)" in line
    assert _files(out) == before
    # --resume with the same configuration on a finished run has nothing to do and touches nothing.
    assert main([*RUN, "--out", str(out), "--resume"]) == 0
    assert "has nothing to resume" in capsys.readouterr().err
    assert _files(out) == before
    # --overwrite replaces it: the new run's configuration is recorded.
    assert main([*RUN, "--out", str(out), "env.phases.0.duration_h=0.02", "--overwrite"]) == 0
    config = (out / "config.yaml").read_text()
    assert "duration_h: 0.02" in config
    assert json.loads((out / "summary.json").read_text())["provenance"]["config_hash"] != \
        json.loads(before["summary.json"])["provenance"]["config_hash"]


def test_differing_keys_names_the_first_dotted_paths():
    a = {"env": {"phases": [{"duration_h": 0.1}, {"duration_h": 0.2}]}, "agent": {"hparams": {"lr": 1e-4}}, "seed": 0}
    b = {"env": {"phases": [{"duration_h": 0.1}, {"duration_h": 0.3}]}, "agent": {"hparams": {"lr": 2e-4}}, "seed": 0}
    assert differing_keys(a, b) == ["agent.hparams.lr", "env.phases.1.duration_h"]
    assert differing_keys(a, a) == []
    assert differing_keys({"x": [1, 2]}, {"x": [1]}) == ["x"]  # lists of other lengths differ as a whole
    assert differing_keys({"a": 1, "b": 1, "c": 1, "d": 1}, {"a": 2, "b": 2, "c": 2, "d": 2}, limit=2) == ["a", "b"]


def _holder(folder: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_directory_is_refused_naming_its_owner(tmp_path):
    folder = tmp_path / "run"
    holder = _holder(folder, 60)
    try:
        lock = RunLock(folder)
        assert lock.held_by_another()
        with pytest.raises(RunBusy) as err:
            lock.acquire()
        assert str(err.value) == (f"run directory {folder} is being written by pid {holder.pid} on host "
                                  f"{socket.gethostname()} since {lock.owner().split(' since ')[1]}; "
                                  f"wait for it to finish or use another --out")
        assert isinstance(err.value, UserError)
    finally:
        holder.kill()
        holder.wait()
    # SIGKILL dropped the dead holder's lock: taken over at once, and the file names the new owner.
    lock = RunLock(folder)
    assert not lock.held_by_another()
    with lock:
        assert lock.owner().startswith(f"pid {os.getpid()} on host ")
        assert RunLock(folder).held_by_another()  # a second Run in the same process is kept out too
    assert not (folder / ".lock").exists()  # released: a finished run keeps no stale lock file


def test_the_cli_refuses_a_run_directory_another_process_writes(capsys, tmp_path):
    out = tmp_path / "run"
    holder = _holder(out, 60)
    try:
        line = _error_line(capsys, [*RUN, "--out", str(out)])
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert line.startswith(f"sao-env: error: run directory {out} is being written by pid {holder.pid} on host ")
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing was written


@pytest.mark.slow
def test_compare_waits_for_the_process_making_the_same_run_and_reuses_it(capsys, tmp_path):
    """Two drivers on one configuration: the second waits for the holder of the run's lock; when the
    holder finished the run, the second reuses it instead of making it twice."""
    plan = plan_run("style-drift", "running_mean", 0, list(SHRINK), runs_dir=tmp_path / "runs")
    first, seconds = run_plan(plan, show_progress=False)
    made = (plan.out / "summary.json").stat().st_mtime_ns
    holder = _holder(plan.out, 2.0)

    again, _ = run_plan(plan, show_progress=False)

    holder.wait()
    err = capsys.readouterr().err
    assert f"{plan.out} is being made by pid {holder.pid} on host" in err
    assert f"reuse {plan.out}: the other process finished it" in err
    assert json.dumps(again, sort_keys=True) == json.dumps(first, sort_keys=True)  # (NaN != NaN in a dict)
    assert (plan.out / "summary.json").stat().st_mtime_ns == made
