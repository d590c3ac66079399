"""Exit codes that tell the truth: a command stopped by SIGINT exits 130 and by SIGTERM 143 (128 + the
signal's number, as a shell reports a process the signal ended) and says so in one line, on every
backend. ``sim`` runs write a resume checkpoint first; ``threads`` and ``ray`` runs stop and say
what is left unfinished."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import shrink_overrides
from sao_env.cli import main

LONG = tuple(f"env.phases.{i}.duration_h=0.2" for i in range(3))
"""Phases long enough that no backend finishes before the signal (0.6 simulated hours; 108 s of wall
clock for a real-time run at time_scale 0.05)."""


def test_ctrl_c_inside_a_command_is_130_and_one_line(monkeypatch, capsys):
    """typer turns a KeyboardInterrupt into a returned 130, which ``main`` used to drop (exit 0, silent)."""
    import sao_env.specs

    def interrupted(kind):
        raise KeyboardInterrupt

    monkeypatch.setattr(sao_env.specs, "available", interrupted)
    assert main(["list"]) == 130
    out, err = capsys.readouterr()
    assert err.splitlines() == ["sao-env: stopped by SIGINT (exit 130)"]


def test_a_typer_exit_code_is_not_dropped(monkeypatch):
    """Exit codes a command raises through typer (here ``typer.Exit(3)``) reach the shell."""
    import typer

    import sao_env.specs

    def stop(kind):
        raise typer.Exit(3)

    monkeypatch.setattr(sao_env.specs, "available", stop)
    assert main(["list"]) == 3


@pytest.fixture(scope="module")
def warm(sao_env_cache):
    """Train the shrunken scenario's warm start here, so that the run processes start at once."""
    from sao_env.experiment import resolve_config
    from sao_env.policy.warmstart import load_warm_started
    from sao_env.scenario import Scenario

    config = resolve_config("style-drift", "grpo", 0, shrink_overrides("grpo"))
    load_warm_started(config.agent.model, Scenario(config.env), show_progress=False)


def _signal_a_run(tmp_path, backend: str, signum: int) -> tuple[int, list[str]]:
    """Start ``sao-env run`` of a long shrunken grpo run on ``backend`` as its own process, send it
    ``signum`` once it has logged an update, and return its exit code and stderr lines."""
    out = tmp_path / "run"
    # ray: one actor (measured: the first logged line 22 s after the start instead of 25 s with the recipe's 2)
    extra = [f"agent.runtime.backend={backend}"] + (["agent.runtime.ray_num_cpus=2", "agent.runtime.workers=1"]
                                                    if backend == "ray" else [])
    argv = [sys.executable, "-m", "sao_env.cli", "run", "--agent", "grpo", "--out", str(out),
            *shrink_overrides("grpo", (*LONG, *extra))]
    err_path = tmp_path / "stderr"
    with err_path.open("w") as err:
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ})
        try:
            deadline = time.monotonic() + 300
            metrics = out / "metrics.jsonl"
            while time.monotonic() < deadline and process.poll() is None:
                if metrics.is_file() and metrics.read_text().count("\n") >= 1:
                    break
                time.sleep(0.1)
            assert process.poll() is None, f"the run ended before the signal: {err_path.read_text()}"
            process.send_signal(signum)
            code = process.wait(timeout=180)
        finally:
            if process.poll() is None:
                process.kill()
    assert not (out / "summary.json").exists()
    return code, err_path.read_text().splitlines()


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "signum"), [
    ("sim", signal.SIGINT), ("sim", signal.SIGTERM), ("threads", signal.SIGINT), ("ray", signal.SIGTERM),
], ids=["sim-SIGINT", "sim-SIGTERM", "threads-SIGINT", "ray-SIGTERM"])
def test_a_run_process_stopped_by_a_signal_exits_128_plus_it_with_one_line(warm, tmp_path, backend, signum):
    """Both signals reach a command through one handler (``cli.app``: each becomes a ``Stopped``
    KeyboardInterrupt), and a real-time run stops on that exception whichever signal raised it, so
    the sim path sees both signals and each real-time backend one of them (a Ray cluster's scheduler
    sends SIGTERM), instead of the whole cross product (two Ray starts of 25 s each)."""
    if backend == "ray":
        pytest.importorskip("ray")
    code, lines = _signal_a_run(tmp_path, backend, signum)
    name = signal.Signals(signum).name
    assert code == 128 + signum == {"SIGINT": 130, "SIGTERM": 143}[name]
    assert not any("Traceback" in line for line in lines), "\n".join(lines)
    said = [line for line in lines if name in line]
    assert len(said) == 1, "\n".join(lines)
    if backend == "sim":  # said at once what happens, then a checkpoint and the command that resumes from it
        assert said[0].startswith(f"sao-env: {name}: stopped at simulated") and said[0].endswith("--resume")
        acknowledged = [i for i, line in enumerate(lines) if line.startswith(
            "sao-env: stopping: the update in progress finishes, then a checkpoint is written")]
        assert len(acknowledged) == 1 and acknowledged[0] < lines.index(said[0])
        assert lines[acknowledged[0]].endswith("; signal again to stop at once without it")
    else:
        assert said[0].startswith(f"sao-env: stopped by {name}; {tmp_path / 'run'} is unfinished (no summary.json); "
                                  "resume with: sao-env run ") and said[0].endswith(f" --resume (exit {128 + signum})")


def test_a_stop_signal_is_acknowledged_at_once_and_a_second_one_stops_without_waiting(tmp_path, capsys):
    """A real model's update and checkpoint take tens of seconds (37 s for a 135M GRPO run, measured), during
    which a signalled sim run said nothing: the first signal now says at once what happens next, and a second
    one stops the run at once (it resumes from the last checkpoint written)."""
    from sao_env.experiment.run import _Checkpoints
    from sao_env.runtime.checkpoint import CheckpointEvery

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (test runners differ)
    try:
        checkpoints = _Checkpoints(tmp_path, CheckpointEvery(), {"config_hash": "h", "code": None}, None, [])
        with checkpoints.signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert checkpoints.stop_signal == "SIGTERM"
            said = capsys.readouterr().err.splitlines()
            assert said == ["sao-env: stopping: the update in progress finishes, then a checkpoint is written; "
                            "signal again to stop at once without it"]
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
        assert checkpoints.stop_signal == "SIGTERM"
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_second_signal_goes_to_the_callers_handler_with_its_own_number(tmp_path, capsys):
    """The command's handler (``cli.app``) turns the second SIGTERM into its exit 143, not 130."""
    from sao_env.experiment.run import _Checkpoints
    from sao_env.runtime.checkpoint import CheckpointEvery

    received = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
    try:
        checkpoints = _Checkpoints(tmp_path, CheckpointEvery(), {"config_hash": "h", "code": None}, None, [])
        with checkpoints.signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert received == []
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert received == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)
