"""Lossless resume: a run killed with SIGKILL at any moment and resumed writes the logs of an
uninterrupted run byte for byte; torn or corrupt checkpoints are passed over; SIGTERM stops cleanly.

The killed runs are forked children of the test process. Each child patches one function to send
itself SIGKILL on its Nth call: a turn of the rollouts' generation, an optimizer step (inside an
update), a held-out evaluation's play, or the write of a checkpoint file (half written). The parent
then resumes the run in-process and compares metrics.jsonl, evals.jsonl and episodes.jsonl with a
run that was never interrupted.
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import multiprocessing
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import _shrunk_config, scenario_config, shrink_overrides
from sao_env import experiment
from sao_env.errors import UserError
from sao_env.runtime import checkpoint as ckpt
from sao_env.runtime.checkpoint import CheckpointEvery, CorruptCheckpoint

LOGS = ("metrics.jsonl", "evals.jsonl", "episodes.jsonl")
CODE = {"commit": "resume-test", "dirty": False}
"""A fixed code version: the working tree may change between a kill and its resume."""
EVERY = CheckpointEvery(updates=2)


# -- the file format ------------------------------------------------------------------------------


def test_checkpoint_roundtrip_and_checksum(tmp_path):
    state = {"config_hash": "abc", "weights": torch.arange(6.0), "counter": 3}
    data = ckpt.encode(state)
    assert data.startswith(b"SAO-CKPT1 ") and data.index(b"\n") == len(b"SAO-CKPT1 ") + 64
    back = ckpt.decode(data)
    assert back["counter"] == 3 and torch.equal(back["weights"], torch.arange(6.0))
    flipped = bytearray(data)
    flipped[-5] ^= 0x01
    with pytest.raises(CorruptCheckpoint, match="checksum"):
        ckpt.decode(bytes(flipped))
    with pytest.raises(CorruptCheckpoint):
        ckpt.decode(data[: len(data) // 2])
    with pytest.raises(CorruptCheckpoint, match="header"):
        ckpt.decode(b"")


def test_a_written_checkpoint_is_the_encoding_streamed_to_its_file(tmp_path):
    """``write`` streams the body to the file and puts the header over a blank first (no copy of a real model's
    gigabytes in memory): the file is ``encode``'s bytes exactly, so every checkpoint written before reads back,
    and the checksum is the body's. A state with tensors of several dtypes and shared storage, and a big one."""
    weights = torch.arange(300_000, dtype=torch.float32)
    state = {"config_hash": "abc", "weights": weights, "view": weights[10:20], "ids": torch.arange(5), "n": 3,
             "nested": {"rng": torch.get_rng_state(), "text": "é"}}
    path = ckpt.write(tmp_path, 7, state)
    data = path.read_bytes()
    assert data == ckpt.encode(state)
    header, body = data[:ckpt.HEADER_BYTES], data[ckpt.HEADER_BYTES:]
    assert header == b"SAO-CKPT1 " + hashlib.sha256(body).hexdigest().encode() + b"\n"
    back = ckpt.decode(data)
    assert torch.equal(back["weights"], weights) and torch.equal(back["view"], weights[10:20]) and back["n"] == 3
    assert back["nested"]["text"] == "é" and torch.equal(back["nested"]["rng"], state["nested"]["rng"])
    assert back["format"] == ckpt.FORMAT


def test_write_keeps_the_last_two_and_newest_good_falls_back(tmp_path):
    for i in range(1, 5):
        ckpt.write(tmp_path, i, {"i": i})
    assert [p.name for p in ckpt.checkpoints(tmp_path)] == ["ckpt-000004.pt", "ckpt-000003.pt"]
    assert not list(tmp_path.glob(".*tmp*"))
    newest = ckpt.checkpoints(tmp_path)[0]
    newest.write_bytes(newest.read_bytes()[:-10])  # torn
    found = [(p.name, None if s is None else s["i"]) for p, s, _ in ckpt.newest_good(tmp_path)]
    assert found == [("ckpt-000004.pt", None), ("ckpt-000003.pt", 3)]


def test_a_failed_write_leaves_the_earlier_checkpoints(tmp_path, monkeypatch):
    ckpt.write(tmp_path, 1, {"i": 1})

    def full_disk(path, state):
        Path(path).write_bytes(ckpt.encode(state)[:10])
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(ckpt, "_write_streamed", full_disk)
    with pytest.raises(OSError):
        ckpt.write(tmp_path, 2, {"i": 2})
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-000001.pt"]
    assert ckpt.decode((tmp_path / "ckpt-000001.pt").read_bytes())["i"] == 1


def test_interval_parsing():
    assert CheckpointEvery.parse("10u") == CheckpointEvery(updates=10, sim_minutes=None)
    assert CheckpointEvery.parse("10u,2.5m") == CheckpointEvery(updates=10, sim_minutes=2.5)
    assert not CheckpointEvery.parse("off").enabled
    every = CheckpointEvery(updates=None, sim_minutes=1.0)
    assert every.due(updates=0, now=60.0, last_updates=0, last_now=0.0)
    assert not every.due(updates=99, now=59.0, last_updates=0, last_now=0.0)
    for bad in ("10", "0u", "xm", "5s"):
        with pytest.raises(ValueError):
            CheckpointEvery.parse(bad)


def test_resume_refuses_a_checkpoint_of_another_configuration(tmp_path, capsys):
    from sao_env.cli import main

    out = tmp_path / "run"
    ckpt.write(out / ckpt.FOLDER, 1, {"config_hash": "0" * 64, "code_key": "x", "sim_time_s": 1.0, "offsets": {}})
    code = main(["run", "--out", str(out), "--resume", *shrink_overrides("grpo")])
    err = capsys.readouterr().err
    assert code == 2 and "sao-env: error: the checkpoint in" in err and "without --resume" in err
    assert main(["run", "--out", str(out), "--checkpoint-every", "7s", "--dry-run"]) == 2


# -- kill -9 and resume ---------------------------------------------------------------------------


def _kill_on(n: int):
    calls = [0]

    def tick() -> None:
        calls[0] += 1
        if calls[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)

    return tick


def _arm(point: str, n: int) -> None:
    """In the child: SIGKILL at the Nth generation / optimizer step / evaluation play / checkpoint write."""
    tick = _kill_on(n)
    if point == "generate":  # a turn's generation of the runtime's rollouts (multi-turn: between turns)
        import sao_env.runtime.sim as sim
        from sao_env.policy.generate import sample

        play = sim.play
        sim.play = lambda *a, **k: play(*a, sampler=lambda *b, **c: (tick(), sample(*b, **c))[1], **k)
    elif point == "update":
        step = torch.optim.Adam.step
        torch.optim.Adam.step = lambda self, *a, **k: (step(self, *a, **k), tick())[0]
    elif point == "eval":
        import sao_env.evaluation.heldout as heldout

        play = heldout.play
        heldout.play = lambda *a, **k: (tick(), play(*a, **k))[1]
    elif point == "checkpoint":
        write_streamed, writes = ckpt._write_streamed, [0]

        def half_then_kill(path, state):
            writes[0] += 1
            if writes[0] == n:
                data = ckpt.encode(state)
                Path(path).write_bytes(data[: len(data) // 2])
                os.kill(os.getpid(), signal.SIGKILL)
            write_streamed(path, state)

        ckpt._write_streamed = half_then_kill


def _forget_parents_workers() -> None:
    """In a forked child: the parent's math-grading workers and their fork server are not its own."""
    from multiprocessing import forkserver

    from sao_env.graders import math as math_grader

    math_grader._POOLS.clear()
    server = forkserver._forkserver
    server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None


def _killed_run(config, out: Path, point: str, n: int, **options) -> None:
    def child() -> None:
        _forget_parents_workers()
        _arm(point, n)
        experiment.run_experiment(config, out, show_progress=False, code=CODE, checkpoint_every=EVERY, **options)
        os._exit(0)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join()
    assert process.exitcode == -signal.SIGKILL, f"the run was not killed at {point} #{n} (exit {process.exitcode})"


def _same_logs(a: Path, b: Path) -> None:
    for name in LOGS:
        assert filecmp.cmp(a / name, b / name, shallow=False), f"{name} differs from the uninterrupted run"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Uninterrupted runs (checkpointing at the same pace as the killed ones, which must not matter)."""
    done: dict[str, Path] = {}

    def run(key: str, config) -> Path:
        if key not in done:
            out = tmp_path_factory.mktemp(f"ref-{key}")
            experiment.run_experiment(config, out, show_progress=False, code=CODE, save_checkpoint=False,
                                      checkpoint_every=CheckpointEvery(updates=None))
            done[key] = out
        return done[key]

    return run


CASES = {
    "sao-update": (lambda: _shrunk_config("sao"), "update", 21),
    "sao-eval": (lambda: _shrunk_config("sao"), "eval", 3),
    "grpo-generate": (lambda: _shrunk_config("grpo"), "generate", 13),
    "grpo-checkpoint": (lambda: _shrunk_config("grpo"), "checkpoint", 3),
    "tool-drift-generate": (lambda: scenario_config("tool-drift", "grpo"), "generate", 15),
}
"""Run, kill point and the call it dies on (each after the first checkpoint, before the run's end). Counted on
the shrunken runs: sao makes 25 generations, 25 optimizer steps, 4 evaluations and checkpoints after steps
4, 10, 16, 22; grpo 16 generations, 6 updates and checkpoints after generations 5, 11, 14."""


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_sigkill_then_resume_gives_the_same_bytes(case, reference, tmp_path):
    make, point, n = CASES[case]
    config = make()
    ref = reference(case.rsplit("-", 1)[0], config)
    out = tmp_path / "run"
    _killed_run(config, out, point, n)
    saved = ckpt.checkpoints(out / ckpt.FOLDER)
    assert saved, "killed before its first checkpoint: the case tests nothing"
    assert not (out / "summary.json").exists()
    if point == "checkpoint":  # the torn file never took a checkpoint's name
        assert list((out / ckpt.FOLDER).glob(".*tmp*")) and all(ckpt.decode(p.read_bytes()) for p in saved)
    summary = experiment.run_experiment(config, out, show_progress=False, code=CODE, checkpoint_every=EVERY,
                                        resume=True)
    _same_logs(ref, out)
    assert summary["provenance"]["config_hash"] and (out / "summary.json").is_file()
    assert not (out / ckpt.FOLDER).exists()


@pytest.mark.slow
def test_compare_resumes_an_unfinished_run_past_a_corrupt_checkpoint(reference, tmp_path, monkeypatch, capsys):
    """``compare`` meets a killed run of its own configuration and code: it resumes it from the
    previous checkpoint (the newest is corrupt) and the logs end as an uninterrupted run's."""
    from sao_env import provenance
    from sao_env.cli import main

    monkeypatch.setattr(provenance, "code_version", lambda: CODE)
    overrides = shrink_overrides("grpo")
    plan = experiment.plan_run("style-drift", "grpo", 0, overrides, runs_dir=tmp_path / "runs")
    ref = reference("grpo", plan.config)
    _killed_run(plan.config, plan.out, "generate", 13)  # after its second checkpoint
    newest, previous = ckpt.checkpoints(plan.out / ckpt.FOLDER)
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF
    newest.write_bytes(bytes(data))
    compare = ["compare", "--agents", "grpo", "--runs-dir", str(tmp_path / "runs"), "--leaderboard-dir",
               str(tmp_path / "boards"), "--jobs", "1", "--checkpoint-every", "2u", *overrides]
    capsys.readouterr()
    assert main([*compare, "--dry-run"]) == 0
    planned = capsys.readouterr().out
    assert f"run    {plan.out}  unfinished; resumes from its checkpoint at simulated" in planned
    assert main(compare) == 0
    err = capsys.readouterr().err
    assert f"checkpoint {newest} is unusable (checksum mismatch" in err
    assert f"resuming {plan.out} from simulated" in err
    _same_logs(ref, plan.out)


@pytest.mark.slow
def test_sigterm_writes_a_checkpoint_and_says_how_to_resume(reference, tmp_path, monkeypatch):
    """The CLI gets SIGTERM mid-run: exit 143, one line naming the resume command, which then finishes
    the run with the bytes of an uninterrupted one."""
    from sao_env import provenance
    from sao_env.cli import main

    monkeypatch.setattr(provenance, "code_version", lambda: CODE)
    ref = reference("grpo", _shrunk_config("grpo"))
    out = tmp_path / "run"
    argv = ["run", "--agent", "grpo", "--out", str(out), "--checkpoint-every", "off", *shrink_overrides("grpo")]
    err_path = tmp_path / "stderr"

    def child() -> None:
        _forget_parents_workers()
        sys.stderr = open(err_path, "w", buffering=1)
        code = main(argv)
        sys.stderr.flush()
        os._exit(code)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.is_alive():
        metrics = out / "metrics.jsonl"
        if metrics.is_file() and metrics.read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGTERM)
    process.join()
    assert process.exitcode == 128 + signal.SIGTERM
    lines = [line for line in err_path.read_text().splitlines() if "resume with:" in line]
    assert len(lines) == 1 and lines[0].startswith("sao-env: SIGTERM: stopped at simulated")
    assert len(ckpt.checkpoints(out / ckpt.FOLDER)) == 1
    command = shlex.split(lines[0].split("resume with: ", 1)[1])
    assert command[:2] == ["sao-env", "run"] and command[-1] == "--resume"
    assert main(command[1:]) == 0
    _same_logs(ref, out)
    summary = (out / "summary.json").read_bytes()
    assert main(command[1:]) == 0  # finished: nothing to resume, nothing rerun
    assert (out / "summary.json").read_bytes() == summary


@pytest.mark.slow
def test_a_resumed_run_mirrors_the_whole_log_to_tensorboard(tmp_path):
    """The tracker mirror of a resumed run holds each metrics.jsonl record once: the kept records
    are replayed into a fresh event file, the rest follow as the run goes on."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sao_env.trackers import scalars

    config, out = _shrunk_config("grpo"), tmp_path / "run"
    _killed_run(config, out, "generate", 13, loggers=("tensorboard",))
    experiment.run_experiment(config, out, show_progress=False, code=CODE, checkpoint_every=EVERY, resume=True,
                              loggers=("tensorboard",), save_checkpoint=False)
    expected: dict[str, list[tuple[int, float]]] = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        for name, value in scalars(record).items():
            expected.setdefault(name, []).append((round(record["sim_time_s"]), value))
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert set(events.Tags()["scalars"]) == set(expected)
    for name, points in expected.items():
        got = [(e.step, e.value) for e in events.Scalars(name)]
        assert [step for step, _ in got] == [step for step, _ in points], name
        assert [v for _, v in got] == pytest.approx([v for _, v in points], rel=1e-6, nan_ok=True), name


OTHER_MACHINE = {"cpu": "Hygon C86 7285 32-core Processor", "vendor": "HygonGenuine", "pinned": True,
                 "mkl_cbwr": "AVX2,STRICT"}
"""A machine of a third vendor, so that the record differs from this one's whichever vendor runs the suite."""


def _stopped_after_first_checkpoint(config, out: Path, monkeypatch) -> None:
    """Run until the second checkpoint's write hits a full disk (half a file written): a UserError naming the
    file, and the first checkpoint left to resume from."""
    write_streamed, writes = ckpt._write_streamed, [0]

    def full_on_second(path, state):
        writes[0] += 1
        if writes[0] == 2:
            Path(path).write_bytes(ckpt.encode(state)[:100])
            raise OSError(28, "No space left on device", str(path))
        write_streamed(path, state)

    monkeypatch.setattr(ckpt, "_write_streamed", full_on_second)
    with pytest.raises(UserError, match=r"^cannot write .*/checkpoints/resume/\.ckpt-000002\.pt\.tmp\d+: No space left on device$"):
        experiment.run_experiment(config, out, show_progress=False, code=CODE, checkpoint_every=EVERY)
    monkeypatch.setattr(ckpt, "_write_streamed", write_streamed)


@pytest.mark.slow
def test_a_run_resumed_under_other_numerics_says_so_and_records_each_segment(reference, tmp_path, monkeypatch,
                                                                            capsys):
    """A checkpoint made on a machine of the other vendor (its numerics record relabelled so) still resumes, but
    stderr says the run's bytes are now neither machine's, the provenance keeps both segments (the second from
    the checkpoint's simulated time), and ``verify`` says why no re-run is identical."""
    from sao_env.experiment.verify import numerics_note
    from sao_env.numerics import describe_numerics, numerics_record

    config, out = _shrunk_config("grpo"), tmp_path / "run"
    ref = reference("grpo", config)
    _stopped_after_first_checkpoint(config, out, monkeypatch)
    path = ckpt.checkpoints(out / ckpt.FOLDER)[0]
    state = ckpt.decode(path.read_bytes())
    here = json.loads(json.dumps(numerics_record()))
    assert state["numerics"] == [{"from_sim_s": 0.0, **here}]  # what the machine that wrote it was
    other = {**here, **OTHER_MACHINE}
    state["numerics"] = [{"from_sim_s": 0.0, **other}]
    path.write_bytes(ckpt.encode({k: v for k, v in state.items() if k != "format"}))
    capsys.readouterr()
    experiment.run_experiment(config, out, show_progress=False, code=CODE, checkpoint_every=EVERY, resume=True)
    err = capsys.readouterr().err
    at_s = state["sim_time_s"]
    assert at_s > 0 and (f"resuming under other numerics than the checkpoint's: it was made on Hygon C86 "
                         f"7285 32-core Processor (HygonGenuine, pinned, MKL_CBWR=AVX2,STRICT), this machine is "
                         f"{describe_numerics(here)}; from simulated {at_s / 3600:.3f} h on") in err
    _same_logs(ref, out)  # computed here throughout: only the checkpoint's label said otherwise
    provenance = json.loads((out / "summary.json").read_text())["provenance"]
    assert provenance["numerics_segments"] == [{"from_sim_s": 0.0, **other}, {"from_sim_s": at_s, **here}]
    assert provenance["numerics"] == here
    assert numerics_note(provenance) == (f"made under Hygon C86 7285 32-core Processor (HygonGenuine, "
                                         f"pinned, MKL_CBWR=AVX2,STRICT) then {describe_numerics(here)}: no machine makes "
                                         f"its bytes alone")


def test_numerics_have_the_same_bits_on_one_vendor_pinned_and_only_on_one_cpu_unpinned():
    from sao_env.numerics import resumed_segments, same_bits

    amd = {"pinned": True, "vendor": "AuthenticAMD", "machine": "x86_64", "dispatch": "AVX2", "blas": "mkl",
           "mkl_cbwr": "AVX2", "onednn_max_isa": "AVX2", "numpy_simd": ["X86_V3"], "cpu": "AMD EPYC 7B13"}
    assert same_bits(amd, {**amd, "cpu": "AMD EPYC 9B14"})  # the pin's claim: any AVX2 machine of the vendor
    assert not same_bits(amd, {**amd, **OTHER_MACHINE})
    assert not same_bits(amd, {**amd, "numpy_simd": ["X86_V3", "X86_V4"]})
    native = {**amd, "pinned": False, "dispatch": "AVX512"}
    assert same_bits(native, dict(native)) and not same_bits(native, {**native, "cpu": "AMD EPYC 9B14"})
    intel = {**amd, **OTHER_MACHINE}
    one = resumed_segments(None, amd, 5.0)
    assert one == [{"from_sim_s": 0.0, **amd}]
    assert resumed_segments(one, {**amd, "cpu": "AMD EPYC 9B14"}, 9.0) == one
    two = resumed_segments(one, intel, 9.0)
    assert two == [{"from_sim_s": 0.0, **amd}, {"from_sim_s": 9.0, **intel}]
    assert resumed_segments(two, amd, 20.0)[-1] == {"from_sim_s": 20.0, **amd} and len(resumed_segments(two, amd, 20.0)) == 3


def test_verify_says_when_a_run_was_made_under_other_numerics_than_this_machines():
    from sao_env.experiment.verify import numerics_note
    from sao_env.numerics import describe_numerics, numerics_record

    here = json.loads(json.dumps(numerics_record()))
    assert numerics_note({"numerics": here}) == ""
    other = {**here, **OTHER_MACHINE}
    assert numerics_note({"numerics": other}) == (f"made on Hygon C86 7285 32-core Processor (HygonGenuine, "
                                                  f"pinned, MKL_CBWR=AVX2,STRICT), re-made on {describe_numerics(here)}")


@pytest.mark.slow
def test_a_full_disk_mid_run_is_one_line_and_keeps_the_last_checkpoint(reference, tmp_path, monkeypatch, capsys):
    """The second checkpoint hits a full disk: a UserError naming the file, the first checkpoint
    intact, and the run resumes from it to the bytes of an uninterrupted run (on the machine that made the
    checkpoint: one numerics segment, nothing said about numerics)."""
    from sao_env.experiment.verify import numerics_note

    config, out = _shrunk_config("grpo"), tmp_path / "run"
    ref = reference("grpo", config)
    _stopped_after_first_checkpoint(config, out, monkeypatch)
    assert [p.name for p in (out / ckpt.FOLDER).iterdir()] == ["ckpt-000001.pt"]
    capsys.readouterr()
    experiment.run_experiment(config, out, show_progress=False, code=CODE, checkpoint_every=EVERY, resume=True)
    _same_logs(ref, out)
    assert "numerics" not in capsys.readouterr().err
    provenance = json.loads((out / "summary.json").read_text())["provenance"]
    assert "numerics_segments" not in provenance and numerics_note(provenance) == ""
