"""Wave 6, the sixth by-hand round (bench/mutants.py --planted bench/planted/wave6-hand6.jsonl: 30 slips planted by a
helper who read only the package's diff): one test per survivor. Each names its change, fails with it and passes
without it, and asserts values worked out here."""

from __future__ import annotations

import math

import pytest


def test_class_rewards_leave_out_infinite_rewards_as_well_as_nan():
    """Changed: ``math.isfinite(r)`` -> ``not math.isnan(r)`` in ``variance.class_rewards``: an infinite reward (a
    grader's overflow) is left out like NaN, so one such episode does not make its class's mean infinite."""
    from sao_env.evaluation.variance import class_rewards

    records = [{"task": "a", "reward": 1.0, "difficulty_class": "easy"},
               {"task": "b", "reward": math.inf, "difficulty_class": "easy"},
               {"task": "c", "reward": -math.inf, "difficulty_class": "hard"},
               {"task": "d", "reward": 0.0, "difficulty_class": "hard"},
               {"task": "e", "reward": 0.0, "difficulty_class": "easy"}]
    got = class_rewards(records, late_fraction=0.4)
    assert got["all"] == {"easy": 0.5, "hard": 0.0}
    assert got["late"] == {"hard": 0.0, "easy": 0.0}  # the last ceil(0.4 * 5) = 2 records: d and e


def test_a_blank_line_in_a_runs_log_is_not_a_cut_off_line(tmp_path):
    """Changed: ``line.strip() and`` -> ``line and`` in ``tables._check_lines`` (now ``records._check_lines``): a blank line between records is
    skipped (as the readers skip it), while a line cut off mid-record is refused by its number."""
    from sao_env.leaderboard.records import _check_lines, BadRun

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1}\n\n   \n{"step": 2}\n')
    _check_lines(log, "metrics.jsonl")
    log.write_text('{"step": 1}\n\n{"step": 2}\n{"st')
    with pytest.raises(BadRun, match=r"^metrics\.jsonl line 4 is cut off or not a JSON object$"):
        _check_lines(log, "metrics.jsonl")


def test_a_seed_that_is_a_boolean_is_not_a_whole_number(tmp_path):
    """Changed: ``isinstance(value, bool) or`` dropped in ``predictions._seed``: ``true`` in a ledger is not seed 1."""
    from pathlib import Path

    from sao_env.errors import UserError
    from sao_env.leaderboard.predictions import _seed

    assert _seed("3", Path("per-seed.csv"), 0) == 3 and _seed(2.0, Path("finished.jsonl"), 4) == 2
    with pytest.raises(UserError, match=r"^finished\.jsonl: record 5: the seed is True, not a whole number$"):
        _seed(True, Path("finished.jsonl"), 4)
    with pytest.raises(UserError, match=r"^per-seed\.csv: line 3: the seed is 1\.5, not a whole number$"):
        _seed(1.5, Path("per-seed.csv"), 1)


def test_a_server_is_healthy_only_on_200():
    """Changed: ``reply.status == 200`` -> ``< 500`` in ``Server.healthy``: a /health that answers 204 (or any other
    success without the 200 both servers give when ready) is not taken for a ready server. A real local HTTP server."""
    from http.server import BaseHTTPRequestHandler
    from types import SimpleNamespace

    from local_http import LocalServer

    from sao_env.engine.process import Server

    codes = {"/ok/health": 200, "/empty/health": 204, "/down/health": 503}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(codes.get(self.path, 404))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    with LocalServer(Handler) as local:
        seen = {name: Server.healthy(SimpleNamespace(url=f"{local.url}/{name}")) for name in ("ok", "empty", "down", "gone")}
    assert seen == {"ok": True, "empty": False, "down": False, "gone": False}


def test_a_test_passes_only_with_its_setup_and_teardown_reported_passed():
    """Changed: the setup clause dropped from ``report._status``'s PASSED rule: a test whose records show its call and
    teardown passed but no setup is INCOMPLETE (the reporter writes all three phases of a test that ran)."""
    from sao_env.tasks.forge import report

    passed = {"outcome": "passed"}
    assert report._status({"setup": passed, "call": passed, "teardown": passed}) == "PASSED"
    assert report._status({"call": passed, "teardown": passed}) == "INCOMPLETE"
    assert report._status({"setup": passed, "call": passed}) == "INCOMPLETE"


# --- the last four survivors of the round's first half ---------------------------------------------

XFAIL_BY_A_PLUGIN = '''
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when == "call":
        report.wasxfail = "marked by a plugin"
'''


def test_the_reporter_counts_failures_by_pytests_own_rule(tmp_path, monkeypatch):
    """Changed: ``report.failed and not hasattr(report, "wasxfail")`` -> ``report.failed`` in the reporter plugin:
    a failed report that a plugin marked as an expected failure is not a failure to pytest (``testsfailed``,
    exit status 0), so the reporter does not count it either and the judge sees no exit-status mismatch. Run
    in a real pytest session with the reporter registered; that session imports its own ``conftest.py`` as
    ``conftest`` and puts its folder on ``sys.path``, so both are restored after it for the worker's later
    tests (which import the suite's ``conftest``)."""
    import sys

    from conftest import reporter_plugin

    monkeypatch.setitem(sys.modules, "conftest", sys.modules["conftest"])
    monkeypatch.setattr(sys, "path", list(sys.path))

    module = reporter_plugin("reporter_wave6g")
    written = []
    reporter = module._Reporter(written.append)
    (tmp_path / "conftest.py").write_text(XFAIL_BY_A_PLUGIN)
    (tmp_path / "test_marked.py").write_text("def test_fails():\n    assert 1 == 2\n\ndef test_passes():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    status = pytest.main([str(tmp_path), "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
                          "--rootdir", str(tmp_path), "-c", str(tmp_path / "pytest.ini")], plugins=[reporter])
    finish = [record for record in written if record["kind"] == "finish"]
    assert int(status) == 0 and len(finish) == 1
    assert (finish[0]["exitstatus"], finish[0]["failed"], finish[0]["testsfailed"]) == (0, 0, 0)
    marked = [r for r in written if r["kind"] == "report" and r["nodeid"].endswith("test_fails") and r["when"] == "call"]
    assert [(r["outcome"], r["xfail"]) for r in marked] == [("failed", True)]


def _mount_tmpfs(folder, size: str) -> None:
    from sao_env.sandbox.workdir import _libc

    assert _libc().mount(b"sao-test", str(folder).encode(), b"tmpfs", 0, f"size={size}".encode()) == 0


def _unmount(folder) -> None:
    import subprocess

    subprocess.run(["umount", "-l", str(folder)], check=True)


def _needs_root():
    from sao_env.sandbox.workdir import cap_available

    if not cap_available():
        pytest.skip("mounts a tmpfs: run as root")


def test_a_cap_is_full_below_two_free_pages_and_not_at_two(tmp_path):
    """Changed: ``< 2 * _PAGE`` -> ``< _PAGE`` in ``local.cap_full`` (now ``workdir.cap_full``): a tmpfs with
    exactly one page left is full (the next file's first page plus its entry would not fit); with two pages left
    it is not."""
    import os

    from sao_env.sandbox.workdir import _PAGE, cap_full

    _needs_root()
    folder = tmp_path / "cap"
    folder.mkdir()
    _mount_tmpfs(folder, "1m")
    try:
        free = os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize
        with open(folder / "fill", "wb") as handle:
            handle.write(b"x" * (free - 2 * _PAGE))
        assert os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize == 2 * _PAGE
        assert not cap_full(folder)
        with open(folder / "fill", "ab") as handle:
            handle.write(b"y" * _PAGE)
        assert os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize == _PAGE
        assert cap_full(folder)
    finally:
        _unmount(folder)


FD_ZERO_CAP = '''
import os, sys
from pathlib import Path
from sao_env.sandbox import ExecResult
from sao_env.sandbox.workdir import WorkdirCap

work = Path(sys.argv[1])
os.close(0)
cap = WorkdirCap(work, 1)
cap.open()
assert cap._below == 0, cap._below
try:
    with open(work / "fill", "wb") as handle:
        while True:
            handle.write(b"x" * 65536)
            handle.flush()
except OSError:
    pass
print(cap.judge(ExecResult(0, "", "", False, None, 0.1, False)).reason)
cap.close()
'''


def test_a_cap_whose_folder_descriptor_is_zero_still_judges_a_full_run(tmp_path):
    """Changed: ``self._below >= 0`` -> ``self._below > 0`` in ``WorkdirCap.judge``: descriptor 0 is a valid
    descriptor (a harness started with stdin closed gets it for the folder beneath), so a run that filled
    the cap is still a disk limit."""
    import subprocess
    import sys

    _needs_root()
    work = tmp_path / "work"
    work.mkdir()
    (work / "kept.txt").write_text("kept\n")
    done = subprocess.run([sys.executable, "-c", FD_ZERO_CAP, str(work)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout == "disk limit\n"
    assert (work / "kept.txt").read_text() == "kept\n"


FILL_THE_DISK = '''
try:
    with open("fill.bin", "wb") as handle:
        while True:
            handle.write(b"x" * 65536)
            handle.flush()
except OSError as exc:
    print("the program saw", exc.strerror)
'''


def test_an_uncapped_warm_run_is_never_judged_at_a_disk_limit(tmp_path, monkeypatch):
    """Changed: ``self._capped and cap_full(self._run)`` -> ``cap_full(self._run)`` in ``WarmInterpreter.run``:
    without a work-dir cap the run's folder lies on the host's temporary filesystem; when that filesystem
    fills, the program sees the error (here it reports it and exits 0), and the sandbox does not turn the
    run into a "disk limit" failure it never imposed."""
    import tempfile

    from sao_env.sandbox import Limits, LocalExecutor
    from sao_env.sandbox.local import INSTALL_HINT, _bwrap_check
    from sao_env.sandbox.warm import WarmInterpreter

    _needs_root()
    bwrap, detail = _bwrap_check()
    if bwrap is None:
        pytest.skip(f"{detail}: {INSTALL_HINT}")
    small = tmp_path / "small-tmp"
    small.mkdir()
    _mount_tmpfs(small, "4m")
    monkeypatch.setattr(tempfile, "tempdir", str(small))
    warm = WarmInterpreter(LocalExecutor(Limits(workdir_mb=None)))
    try:
        result = warm.run(["prog.py"], {"prog.py": FILL_THE_DISK}, timeout_s=20)
        assert not warm._capped
        assert (result.returncode, result.reason, result.ok) == (0, None, True), (result.reason, result.stderr[-300:])
        assert result.stdout == "the program saw No space left on device\n"
    finally:
        warm.close()
        _unmount(small)


# --- survivors of the round's second half -------------------------------------------------------

def _signed(records: list[dict], key: bytes) -> str:
    import hashlib
    import hmac
    import json

    from sao_env.tasks.forge import report

    lines = []
    for seq, record in enumerate(records):
        body = json.dumps(dict(record, seq=seq), sort_keys=True, separators=(",", ":"))
        lines.append(f"{report.MARK} {body} {hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}")
    return "\n".join(lines) + "\n"


def test_a_swebench_forge_instance_is_resolved_only_when_every_named_test_passed():
    """Changed: ``all(value == "PASSED" ...)`` -> ``any(...)`` in ``swebench._judge_forge_log``: with the fail-to-pass
    test passed and a pass-to-pass test failed, the instance is not resolved, and the details say which."""
    import types

    from sao_env.benchmarks.swebench import EXIT_LINE, _judge_forge_log
    from sao_env.tasks.forge import report

    def phases(nodeid, call="passed"):
        return [{"kind": "report", "nodeid": nodeid, "when": when, "outcome": outcome, "xfail": False}
                for when, outcome in (("setup", "passed"), ("call", call), ("teardown", "passed"))]

    spec = types.SimpleNamespace(FAIL_TO_PASS=["t.py::fixed"], PASS_TO_PASS=["t.py::kept"])
    records = [{"kind": "start", "pid": 7}, *phases("t.py::fixed"), *phases("t.py::kept", "failed"),
               {"kind": "finish", "exitstatus": 1, "failed": 1, "testsfailed": 1, "collected": 2, "changes": []}]
    details = {}
    log = _signed(records, report.process_key()) + f"{EXIT_LINE}1\n"
    assert _judge_forge_log(spec, log, details) is False
    assert details == {"verdict": "wrong", "reason": "tests-failed", "fail_to_pass": {"t.py::fixed": "PASSED"},
                       "pass_to_pass": {"t.py::kept": "FAILED"}}
    records[-4:-1] = phases("t.py::kept")
    records[-1] = dict(records[-1], exitstatus=0, failed=0, testsfailed=0)
    details = {}
    assert _judge_forge_log(spec, _signed(records, report.process_key()) + f"{EXIT_LINE}0\n", details) is True
    assert details["reason"] == "resolved"


def test_a_scratch_folder_is_in_memory_only_where_it_can_be_written(monkeypatch, tmp_path):
    """Changed: ``shm.is_dir() and os.access(shm, os.W_OK)`` -> ``shm.is_dir()`` in ``generator.scratch_folder``:
    where /dev/shm exists but this user may not write it (a container's read-only /dev/shm), the folder goes to
    the temporary folder instead of failing."""
    import os
    import tempfile
    from pathlib import Path

    from sao_env.engine import generator

    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    real_access = os.access
    monkeypatch.setattr(generator.os, "access", lambda path, mode: False if str(path) == "/dev/shm" else real_access(path, mode))
    folder = generator.scratch_folder("sao-test-")
    assert folder.parent == tmp_path and folder.name.startswith("sao-test-") and folder.is_dir()
    monkeypatch.setattr(generator.os, "access", real_access)
    in_memory = generator.scratch_folder("sao-test-")
    try:
        assert in_memory.parent == Path("/dev/shm")
    finally:
        in_memory.rmdir()


def test_the_warm_starts_batch_helper_runs_only_beside_a_one_thread_forward(monkeypatch):
    """Changed: ``forward == 1`` -> ``forward >= 1`` in ``warmstart._train``: the process that makes the next batch
    takes the spare core, so it runs only when the forward pass uses one thread; with two it is not started."""
    import types

    from sao_env.policy import warmstart

    asked = []

    def batches(tokenizer, scenario, spec, *, helper):
        asked.append(helper)
        return iter(())

    monkeypatch.setattr(warmstart, "fork_is_safe", lambda: True)
    monkeypatch.setattr(warmstart, "demonstration_batches", batches)
    progress = types.SimpleNamespace(add_task=lambda *a, **k: 0)
    for forward in (1, 2, 3):
        warmstart._train(None, None, None, types.SimpleNamespace(steps=4), None, None, [], progress, None, print,
                         0.0, forward, 2)
    assert asked == [True, False, False]
