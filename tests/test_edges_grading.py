"""Edge values of forge grading: the signed report channel, the reporter plugin, and the reward.

Covers what the hostile-patch battery and the record-by-record tests leave out: each malformed-record
detail (no signature, not JSON, a sequence gap named by its numbers, spaces inside a test id), a first
record that is not ``start`` and a record after ``finish``, collector records, the status of every
combination of phases, exit statuses 4, 5 and unknown ones, tampering that outranks an abort and is
shown by its first five changes, and the exit-status cross-checks' details. For the plugin: how it
resolves guarded names, its hook table and the checks that run before collection, the import system,
the cap on changes, collector reports, the writer (sequence, run id, short writes, a forked child),
the key file's length, and real in-process pytest sessions read back through the judge. For the reward:
which run and tree are graded, what each status, missing test and untrusted run earns and shows, the
order of the reasons, the verdict cache, the graded tree and ignored edits, and patches read from a
response.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
import types
import unittest
from collections import OrderedDict
from pathlib import Path

import pytest
from conftest import reporter_plugin

from sao_env.sandbox import ExecResult
from sao_env.tasks.forge import grading, report
from sao_env.types import Task

KEY = b"fedcba98765432100123456789abcdef"
START = {"kind": "start", "pid": 1}


def _signed(record: dict, key: bytes = KEY) -> str:
    body = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return f"{report.MARK} {body} {hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}"


def _stream(*records: dict, key: bytes = KEY, run: str = "r1") -> str:
    return "".join(_signed(dict(r, seq=i, run=run), key) + "\n" for i, r in enumerate(records))


def _phase(nodeid: str, when: str, outcome: str = "passed", xfail: bool = False) -> dict:
    return {"kind": "report", "nodeid": nodeid, "when": when, "outcome": outcome, "xfail": xfail}


def _test(nodeid: str, call: str = "passed", xfail: bool = False) -> list[dict]:
    return [_phase(nodeid, "setup"), _phase(nodeid, "call", call, xfail), _phase(nodeid, "teardown")]


def _finish(exitstatus: int, failed: int = 0, testsfailed: int | None = None, changes=()) -> dict:
    return {"kind": "finish", "exitstatus": exitstatus, "failed": failed,
            "testsfailed": failed if testsfailed is None else testsfailed, "collected": 1, "changes": list(changes)}


def _judge(*records: dict, returncode: int | None) -> report.Verdict:
    return report.judge_stream(_stream(*records), returncode, KEY)


# --- the judge: malformed records ------------------------------------------------------------------

def test_a_marked_line_without_a_signature_is_not_in_the_reporters_form():
    """A record mark followed by a body and no mac (or by nothing) has one part, not two: forged by form."""
    body = json.dumps(dict(START, seq=0, run="r1"), sort_keys=True, separators=(",", ":"))
    for line in (f"{report.MARK} {body}", report.MARK):
        verdict = report.judge_stream(line + "\n", 0, KEY)
        assert verdict == report.Verdict(problem="report-forged", detail="a report line not in the reporter's form")


def test_a_line_signed_with_another_key_is_named_by_its_signature():
    """A well-formed record under another key: refused with the signature detail, not the form detail."""
    verdict = report.judge_stream(_stream(START, *_test("t::a"), _finish(0), key=b"x" * 32), 0, KEY)
    assert (verdict.problem, verdict.detail, verdict.statuses) == (
        "report-forged", "a report line whose signature does not match this run's key", {})


def test_a_signed_line_that_is_not_json_is_forged():
    """A body signed with the run's key that does not parse as JSON is refused, not skipped."""
    body = "not-json"
    line = f"{report.MARK} {body} {hmac.new(KEY, body.encode(), hashlib.sha256).hexdigest()}"
    verdict = report.judge_stream(_stream(START) + line + "\n", 0, KEY)
    assert (verdict.problem, verdict.detail) == ("report-forged", "a signed report line that is not JSON")


def test_a_record_out_of_sequence_names_the_number_seen_and_the_number_due():
    """The sequence check's detail: a skipped number, a stream that starts at 1, and a record without one."""
    gap = _signed(dict(START, seq=0, run="r1")) + "\n" + _signed(dict(_finish(0), seq=2, run="r1")) + "\n"
    assert report.judge_stream(gap, 0, KEY).detail == "report 2 where 1 was due"
    late = _signed(dict(START, seq=1, run="r1")) + "\n"
    assert report.judge_stream(late, 0, KEY).detail == "report 1 where 0 was due"
    unnumbered = _signed(dict(START, run="r1")) + "\n"
    verdict = report.judge_stream(unnumbered, 0, KEY)
    assert (verdict.problem, verdict.detail) == ("report-forged", "report None where 0 was due")


def test_a_test_id_with_spaces_and_noise_between_records_are_read_whole():
    """The mac is split off at the last space (a parametrized id may hold spaces); trailing blanks, CRLF
    endings and unmarked lines (even ones that look like outcomes or a partial mark) change nothing."""
    nodeid = "t.py::test_x[a b c]"
    lines = [_signed(dict(r, seq=i, run="r1")) for i, r in enumerate([START, *_test(nodeid), _finish(0)])]
    text = ("PASSED t.py::test_y\r\n@@sao-grade not a record\r\n" + lines[0] + "  \t\r\n" + "\r\n".join(lines[1:])
            + "\r\n")
    assert report.judge_stream(text, 0, KEY) == report.Verdict(statuses={nodeid: "PASSED"}, exitstatus=0)


# --- the judge: the shape of a run ------------------------------------------------------------------

def test_a_run_whose_first_record_is_not_start_never_started():
    """Well-signed, well-numbered records that do not open with ``start`` (a test report first, or a lone
    finish) are a missing report."""
    expected = report.Verdict(problem="report-missing", detail="the reporter never started")
    assert _judge(*_test("t::a"), _finish(0), returncode=0) == expected
    assert _judge(_finish(0), returncode=0) == expected


def test_a_record_after_finish_is_a_run_cut_short():
    """``finish`` must be the last record: a test report after it is a missing report, not an extra test."""
    verdict = _judge(START, *_test("t::a"), _finish(0), _phase("t::b", "setup"), returncode=0)
    assert verdict == report.Verdict(problem="report-missing", detail="the run ended before the reporter's last record")


def test_collector_records_are_not_tests():
    """``collect`` records (a skipped module, a failed one) give no status of their own."""
    skipped = {"kind": "collect", "nodeid": "t_skipped.py", "outcome": "skipped"}
    verdict = _judge(START, skipped, *_test("t::a"), _finish(0), returncode=0)
    assert verdict == report.Verdict(statuses={"t::a": "PASSED"}, exitstatus=0)


PASSED = {"outcome": "passed"}
FAILED = {"outcome": "failed"}


@pytest.mark.parametrize("phases, status", [
    ({"setup": FAILED}, "ERROR"),
    ({"setup": FAILED, "teardown": PASSED}, "ERROR"),
    ({"setup": PASSED, "call": PASSED, "teardown": FAILED}, "ERROR"),
    ({"setup": PASSED, "call": FAILED, "teardown": FAILED}, "FAILED"),
    ({"setup": PASSED, "call": {"outcome": "failed", "xfail": True}, "teardown": PASSED}, "FAILED"),
    ({"setup": PASSED, "teardown": PASSED}, "SKIPPED"),
    ({"setup": PASSED, "call": {"outcome": "skipped", "xfail": False}, "teardown": PASSED}, "SKIPPED"),
    ({"setup": PASSED, "call": {"outcome": "passed", "xfail": True}}, "XPASS"),
    ({"setup": PASSED, "call": PASSED, "teardown": {"outcome": "skipped"}}, "INCOMPLETE"),
    ({"setup": {"outcome": "rerun"}, "call": PASSED, "teardown": PASSED}, "INCOMPLETE"),
])
def test_each_combination_of_phases_has_its_status(phases, status):
    """A failure anywhere is FAILED only when the call failed (else ERROR, also with no call record); no call
    record without a failure is SKIPPED; an xfail-marked call that passed is XPASS even without a teardown;
    PASSED needs the setup and the teardown to read exactly ``passed``."""
    assert report._status(phases) == status


# --- the judge: exit statuses --------------------------------------------------------------------------

def test_nothing_collected_with_exit_status_5_is_a_clean_empty_run():
    """pytest's "no tests collected" (5) is one of the three ordinary exit statuses."""
    assert _judge(START, _finish(5), returncode=5) == report.Verdict(exitstatus=5)


def test_a_usage_error_and_an_unknown_exit_status_are_aborts_that_keep_the_statuses():
    """Exit status 4 is named "usage error", one pytest does not define is "unknown"; the statuses read so far
    stay in the verdict with its exit status."""
    records = (START, *_test("t::a"))
    assert _judge(*records, _finish(4), returncode=4) == report.Verdict(
        statuses={"t::a": "PASSED"}, problem="pytest-aborted",
        detail="pytest ended with exit status 4 (usage error)", exitstatus=4)
    assert _judge(*records, _finish(6), returncode=6).detail == "pytest ended with exit status 6 (unknown)"


def test_tampering_outranks_an_abort_and_is_shown_by_its_first_five_changes():
    """A run with both changes and an abnormal exit status is ``runner-tampered``; six changes show as five."""
    changes = [f"hook h{i} changed (t::a)" for i in range(6)]
    verdict = _judge(START, *_test("t::a"), _finish(2, changes=changes), returncode=2)
    assert (verdict.problem, verdict.exitstatus) == ("runner-tampered", 2)
    assert verdict.detail == "; ".join(changes[:5])
    assert verdict.detail.count(";") == 4 and "h5" not in verdict.detail


def test_the_process_exit_status_must_equal_pytests():
    """A run pytest finished with 5 whose process exited 0 (a package's ``os._exit(0)`` at the end) is a mismatch."""
    verdict = _judge(START, _finish(5), returncode=0)
    assert verdict == report.Verdict(problem="exit-status-mismatch", exitstatus=5,
                                     detail="pytest finished with 5, the process exited with 0")


def test_failures_must_come_with_exit_status_1_and_no_failure_without_it():
    """Two failures under exit status 1 agree; a failure under 5, or none under 1, does not."""
    two = [START, *_test("t::a", "failed"), *_test("t::b", "failed")]
    assert _judge(*two, _finish(1, 2), returncode=1) == report.Verdict(
        statuses={"t::a": "FAILED", "t::b": "FAILED"}, exitstatus=1)
    assert _judge(START, _finish(5, 1), returncode=5).detail == "1 failures reported, pytest counted 1, exit status 5"
    verdict = _judge(START, *_test("t::a"), _finish(1, 0), returncode=1)
    assert (verdict.problem, verdict.detail, verdict.statuses) == (
        "exit-status-mismatch", "0 failures reported, pytest counted 0, exit status 1", {"t::a": "PASSED"})


def test_judge_reads_the_records_from_stderr_only():
    """Records on stdout (where the tested code's prints go) are not read; stderr's are, with the returncode."""
    stream = _stream(START, *_test("t::a"), _finish(0))
    on_stdout = ExecResult(0, stream, "", False, None, 0.1, False)
    assert report.judge(on_stdout, KEY) == report.Verdict(problem="report-missing", detail="the reporter never started")
    assert report.judge(ExecResult(0, "", stream, False, None, 0.1, False), KEY).statuses == {"t::a": "PASSED"}
    assert report.judge(ExecResult(1, "", stream, False, None, 0.1, False), KEY).detail == (
        "pytest finished with 0, the process exited with 1")


def test_the_process_key_is_one_64_character_hex_key():
    """Runs whose key cannot travel share one 32-byte key per process, written as 64 hex digits."""
    key = report.process_key()
    assert key is report.process_key()
    assert len(key) == 64 and int(key, 16) >= 0


# --- the reporter plugin -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def plugin():
    return reporter_plugin("reporter_edges")


class _Caller:
    def __init__(self, *impls):
        self.impls = list(impls)

    def get_hookimpls(self):
        return list(self.impls)


class _NoFinder:
    def find_spec(self, name, path=None, target=None):
        return None


def _impl(plugin_name: str, function, hookwrapper=False, wrapper=False):
    return types.SimpleNamespace(plugin_name=plugin_name, function=function, hookwrapper=hookwrapper, wrapper=wrapper)


def test_resolve_takes_class_attributes_from_the_class_itself(plugin):
    """A classmethod resolves to the same object each time (a bound method would be new at every check and read
    as replaced); an inherited property resolves to the base class's; an absent name is None."""
    from _pytest.reports import BaseReport
    from _pytest.runner import CallInfo

    first = plugin._resolve("_pytest.runner:CallInfo.from_call")
    assert first is CallInfo.__dict__["from_call"] and plugin._resolve("_pytest.runner:CallInfo.from_call") is first
    assert plugin._resolve("_pytest.reports:TestReport.passed") is BaseReport.__dict__["passed"]
    assert plugin._resolve("os:write") is os.write
    assert plugin._resolve("os:no_such_name") is None
    assert plugin._resolve("_pytest.runner:CallInfo.no_such_name") is None


def test_a_guarded_name_that_cannot_be_resolved_is_none_and_unittest_asserts_are_added(plugin, monkeypatch):
    """A missing module and a missing holder both give None (not an error); every ``assert*`` of TestCase is
    guarded by its own function, other TestCase names are not."""
    monkeypatch.setattr(plugin, "_CRITICAL", ("no_such_module_for_grading:f", "os:no_such_holder.name", "os:getpid"))
    found = plugin._callables()
    assert {spec: found[spec] for spec in plugin._CRITICAL} == {
        "no_such_module_for_grading:f": None, "os:no_such_holder.name": None, "os:getpid": os.getpid}
    assert found["unittest.case:TestCase.assertEqual"] is unittest.TestCase.__dict__["assertEqual"]
    assert found["unittest.case:TestCase.assertRaises"] is unittest.TestCase.__dict__["assertRaises"]
    assert "unittest.case:TestCase.addCleanup" not in found and "unittest.case:TestCase.fail" not in found


def test_the_hook_table_holds_callers_only_with_each_impls_two_flags(plugin):
    """Attributes without ``get_hookimpls`` are left out; each impl is (plugin, function id, hookwrapper,
    wrapper) with the flags as booleans."""
    def one():
        return None

    def two():
        return None

    hook = types.SimpleNamespace(pytest_a=_Caller(_impl("p1", one, hookwrapper=1), _impl("p2", two, wrapper=True)),
                                 pytest_b=_Caller(), not_a_hook=3)
    table = plugin._hook_table(types.SimpleNamespace(hook=hook))
    assert table == {"pytest_a": (("p1", id(one), True, False), ("p2", id(two), False, True)), "pytest_b": ()}


def test_a_removed_hook_and_a_changed_wrapper_flag_are_changes(plugin):
    """Hooks that disappear are seen as well as hooks that appear, and a wrapper flag flipped on the same
    function is a change; the changes come in the hooks' name order."""
    def function():
        return None

    impl = _impl("runner", function)
    hook = types.SimpleNamespace(pytest_a=_Caller(impl), pytest_b=_Caller(_impl("main", function)))
    reporter = plugin._Reporter(lambda record: None)
    reporter._pluginmanager = types.SimpleNamespace(hook=hook)
    reporter._hooks = plugin._hook_table(reporter._pluginmanager)
    reporter._check("t::a")
    assert reporter._changes == []
    del hook.pytest_b
    impl.wrapper = True
    reporter._check("t::b")
    assert reporter._changes == ["hook pytest_a changed (t::b)", "hook pytest_b changed (t::b)"]


def test_before_collection_only_the_guarded_callables_are_checked(plugin, monkeypatch):
    """With no hook table or import system recorded yet, a changed import system is not compared against
    nothing; a replaced guarded callable is still seen."""
    reporter = plugin._Reporter(lambda record: None)
    reporter._pluginmanager = types.SimpleNamespace(hook=types.SimpleNamespace(pytest_a=_Caller()))
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, _NoFinder()])
    reporter._check("early")
    assert reporter._changes == []
    monkeypatch.setattr(unittest.TestCase, "fail", lambda self, msg=None: None)
    reporter._check("early")
    assert reporter._changes == ["unittest.case:TestCase.fail replaced (early)"]


def test_a_finder_or_a_path_hook_added_is_a_change_of_the_import_system(plugin, monkeypatch):
    """Both ``sys.meta_path`` and ``sys.path_hooks`` are part of the import system the reporter records."""
    reporter = plugin._Reporter(lambda record: None)
    reporter._imports = plugin._import_system()
    meta_path, path_hooks = list(sys.meta_path), list(sys.path_hooks)
    monkeypatch.setattr(sys, "meta_path", [*meta_path, _NoFinder()])
    reporter._check("t::a")
    monkeypatch.setattr(sys, "meta_path", meta_path)
    reporter._check("t::b")
    monkeypatch.setattr(sys, "path_hooks", [*path_hooks, lambda path: None])
    reporter._check("t::c")
    assert reporter._changes == ["import system changed (t::a)", "import system changed (t::c)"]


def test_changes_are_kept_once_each_and_at_most_fifty(plugin):
    """A change seen again is not repeated; the 51st distinct change is dropped."""
    reporter = plugin._Reporter(lambda record: None)
    for i in range(60):
        reporter._note(f"change {i}")
        reporter._note("change 0")
    assert reporter._changes == [f"change {i}" for i in range(50)]


def _read_all(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_the_writer_numbers_from_zero_under_one_run_id_through_short_writes(plugin, tmp_path, monkeypatch):
    """Each record gets the next sequence number and the run's id over any it carries, and a write that takes
    a few bytes at a time is finished: the judge reads the records back."""
    real_write = os.write
    target = tmp_path / "records"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with monkeypatch.context() as patched:
            patched.setattr(os, "write", lambda fd, data: real_write(fd, bytes(data[:5])))
            write = plugin._writer(KEY, fd)
        write({"kind": "start", "pid": 1})
        write({"kind": "report", "seq": 99, "run": "forged"})
        write({"kind": "finish"})
    finally:
        os.close(fd)
    text = _read_all(target)
    records, problem, _ = report._records(text, KEY)
    assert problem is None and text.startswith("\n" + report.MARK + " ")
    assert [(r["kind"], r["seq"]) for r in records] == [("start", 0), ("report", 1), ("finish", 2)]
    runs = {r["run"] for r in records}
    assert len(runs) == 1 and len(runs.pop()) == 32


def test_the_writer_writes_nothing_from_another_process_and_keeps_its_numbering(plugin, tmp_path, monkeypatch):
    """A write from a process the tested code forked is dropped without using a sequence number."""
    target = tmp_path / "records"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
    pid = os.getpid()
    try:
        write = plugin._writer(KEY, fd)
        write({"kind": "start"})
        with monkeypatch.context() as patched:
            patched.setattr(os, "getpid", lambda: pid + 1)
            write({"kind": "forked"})
        write({"kind": "finish"})
    finally:
        os.close(fd)
    records, problem, _ = report._records(_read_all(target), KEY)
    assert problem is None
    assert [(r["kind"], r["seq"]) for r in records] == [("start", 0), ("finish", 1)]


def test_the_key_file_must_hold_sixteen_bytes_and_is_removed_either_way(plugin, tmp_path, monkeypatch):
    """No key file: no reporter. 15 bytes: no reporter, file gone. 16 bytes: a reporter that signs with them on
    a duplicate of fd 2, file gone."""
    monkeypatch.chdir(tmp_path)
    assert plugin._start() is None
    key_file = tmp_path / plugin.KEY_FILE
    key_file.write_bytes(b"k" * 15)
    assert plugin._start() is None and not key_file.exists()
    key = b"0123456789abcdef"
    key_file.write_bytes(key)
    fd = os.open(tmp_path / "records", os.O_WRONLY | os.O_CREAT, 0o600)
    duplicated = []
    try:
        with monkeypatch.context() as patched:
            patched.setattr(os, "dup", lambda n: duplicated.append(n) or fd)
            reporter = plugin._start()
        assert not key_file.exists() and duplicated == [2]
        reporter._write({"kind": "start", "pid": 1})
    finally:
        os.close(fd)
    records, problem, _ = report._records(_read_all(tmp_path / "records"), key)
    assert problem is None and [r["kind"] for r in records] == ["start"]


def test_pytest_configure_registers_the_reporter_only_when_it_started(plugin, monkeypatch):
    """Without a key there is nothing to register; with one, the reporter is registered under its name."""
    registered = []
    config = types.SimpleNamespace(pluginmanager=types.SimpleNamespace(register=lambda *a: registered.append(a)))
    monkeypatch.setattr(plugin, "_reporter", None)
    plugin.pytest_configure(config)
    assert registered == []
    started = object()
    monkeypatch.setattr(plugin, "_reporter", started)
    plugin.pytest_configure(config)
    assert registered == [(started, "sao-grade-reporter")]


# --- the reporter in real pytest sessions ---------------------------------------------------------

MIXED = '''
import pytest

@pytest.fixture
def broken_setup():
    raise RuntimeError("setup")

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown")

def test_pass():
    pass

def test_fail():
    assert 1 == 2

def test_skip_in_call():
    pytest.skip("no")

@pytest.mark.skip(reason="no")
def test_skip_mark():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert 0

@pytest.mark.xfail(reason="known")
def test_xpass():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_xpass_strict():
    pass

def test_setup_error(broken_setup):
    pass

def test_teardown_error(broken_teardown):
    pass
'''

REGISTERS_A_HOOK = '''
def test_registers(pytestconfig):
    class Sneaky:
        def pytest_runtest_logreport(self, report):
            pass

    pytestconfig.pluginmanager.register(Sneaky(), "sneaky")

def test_after():
    pass
'''


def _session(plugin, project: Path, files: dict[str, str], monkeypatch, *args: str) -> tuple[int, str]:
    """pytest in this process on ``files``, the reporter writing to a file: (exit status, its records)."""
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    for name, text in files.items():
        (project / name).write_text(text)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setitem(sys.modules, "conftest", sys.modules["conftest"])  # the session may import its own
    monkeypatch.setattr(sys, "path", list(sys.path))  # and put the project on the path
    fd = os.open(project.parent / "records", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        reporter = plugin._Reporter(plugin._writer(KEY, fd))
        status = pytest.main([str(project), "-q", "-p", "no:cacheprovider", "-p", "no:unraisableexception",
                              "--rootdir", str(project), "-c", str(project / "pytest.ini"), *args], plugins=[reporter])
    finally:
        os.close(fd)
    return int(status), _read_all(project.parent / "records")


def test_a_real_session_gives_each_outcome_its_status(plugin, tmp_path, monkeypatch):
    """Pass, fail, skip in the call and by mark, xfail, xpass, strict xpass, setup and teardown errors: the
    statuses the judge reads from the plugin's records, and the four failures counted as pytest counts them."""
    status, text = _session(plugin, tmp_path / "project", {"test_grading_mix.py": MIXED}, monkeypatch)
    finish = report._records(text, KEY)[0][-1]
    assert (status, finish["failed"], finish["testsfailed"], finish["collected"], finish["changes"]) == (1, 4, 4, 9, [])
    names = ["pass", "fail", "skip_in_call", "skip_mark", "xfail", "xpass", "xpass_strict", "setup_error",
             "teardown_error"]
    shown = ["PASSED", "FAILED", "SKIPPED", "SKIPPED", "SKIPPED", "XPASS", "FAILED", "ERROR", "ERROR"]
    expected = {f"test_grading_mix.py::test_{name}": status for name, status in zip(names, shown)}
    assert report.judge_stream(text, 1, KEY) == report.Verdict(statuses=expected, exitstatus=1)


def test_collection_errors_are_reported_and_counted_and_skipped_modules_only_reported(plugin, tmp_path, monkeypatch):
    """A module that does not compile is one failure (as pytest counts it) with its ``collect`` record; two modules
    skipped at import have a record each but are no failures; the remaining test passes and the run is trusted."""
    files = {"test_grading_ok.py": "def test_ok():\n    pass\n", "test_grading_broken.py": "def test_(:\n",
             "test_grading_later.py": "import pytest\npytest.skip('later', allow_module_level=True)\n",
             "test_grading_never.py": "import pytest\npytest.skip('never', allow_module_level=True)\n"}
    status, text = _session(plugin, tmp_path / "project", files, monkeypatch, "--continue-on-collection-errors")
    records = report._records(text, KEY)[0]
    collected = [(r["nodeid"], r["outcome"]) for r in records if r["kind"] == "collect"]
    assert sorted(collected) == [("test_grading_broken.py", "failed"), ("test_grading_later.py", "skipped"),
                                 ("test_grading_never.py", "skipped")]
    assert (status, records[-1]["failed"], records[-1]["testsfailed"]) == (1, 1, 1)
    assert report.judge_stream(text, 1, KEY) == report.Verdict(statuses={"test_grading_ok.py::test_ok": "PASSED"},
                                                               exitstatus=1)


def test_a_hook_registered_by_a_test_is_seen_at_that_test_and_every_later_check(plugin, tmp_path, monkeypatch):
    """A plugin a test registers changes the hook table from that test's call on: one change per place it is
    seen (that test, the next one, the finish), and the judge refuses the run though both tests passed."""
    status, text = _session(plugin, tmp_path / "project", {"test_grading_hooks.py": REGISTERS_A_HOOK}, monkeypatch)
    changes = ["hook pytest_runtest_logreport changed (test_grading_hooks.py::test_registers)",
               "hook pytest_runtest_logreport changed (test_grading_hooks.py::test_after)",
               "hook pytest_runtest_logreport changed (finish)"]
    assert status == 0
    assert report.judge_stream(text, 0, KEY) == report.Verdict(
        statuses={"test_grading_hooks.py::test_registers": "PASSED", "test_grading_hooks.py::test_after": "PASSED"},
        problem="runner-tampered", detail="; ".join(changes), exitstatus=0)


# --- the reward ---------------------------------------------------------------------------------------

F2P = "tests/test_core.py::test_new"
P2P = ["tests/test_core.py::test_old", "tests/test_more.py::test_other"]
BASE = {"pkg/__init__.py": "", "pkg/core.py": "X = 1\n", "setup.cfg": "[tool]\n",
        "tests/test_core.py": "def test_new():\n    pass\n\ndef test_old():\n    pass\n",
        "tests/test_more.py": "def test_other():\n    pass\n"}


def _reference(**extra) -> dict:
    return {"instance_id": "pkg__pkg-7", "base_commit": "c" * 40, "package": "pkg", "test_patch": "",
            "files": dict(BASE), "FAIL_TO_PASS": [F2P], "PASS_TO_PASS": list(P2P), **extra}


@pytest.fixture
def sandbox(monkeypatch):
    """``run_pytest`` replaced by a run that signs records with the key the grader put in the tree: ``plan``
    maps a test to its call outcome (``"xpass"`` for an xfail-marked pass; absent: never reported) and may set
    the run's exit statuses and what the sandbox says about it."""
    monkeypatch.setattr(grading, "_grades", OrderedDict())
    state = types.SimpleNamespace(calls=[], plan={}, returncode="pytest", exitstatus=None, timed_out=False,
                                  reason=None, records=True)

    def run_pytest(files, targets, *, timeout_s, executor=None, parent=None, extra_args=()):
        state.calls.append({"files": dict(files), "targets": list(targets), "timeout_s": timeout_s,
                            "extra_args": tuple(extra_args)})
        assert files[report.PLUGIN_PATH] == report.plugin_source()
        records = [START]
        for test, call in state.plan.items():
            records += _test(test, "passed" if call == "xpass" else call, xfail=call == "xpass")
        failed = sum(call == "failed" for call in state.plan.values())
        exitstatus = state.exitstatus if state.exitstatus is not None else int(failed > 0)
        records.append(_finish(exitstatus, failed))
        stream = _stream(*records, key=files[report.KEY_FILE].encode()) if state.records else ""
        returncode = exitstatus if state.returncode == "pytest" else state.returncode
        return ExecResult(returncode, "", stream, state.timed_out, state.reason, 0.1, False)

    monkeypatch.setattr(grading, "run_pytest", run_pytest)
    return state


def _all(status: str) -> dict[str, str]:
    return {test: status for test in [F2P, *P2P]}


def test_every_listed_test_passing_earns_one_from_a_run_of_the_graded_tree(sandbox):
    """The run gets the base tree with the plugin and a key, the listed test files once each in order, the
    reporter's ``-p`` and the default timeout; all passed: 1.0 with the full details."""
    sandbox.plan = _all("passed")
    graded = grading.grade_files(_reference(), dict(BASE))
    assert graded.reward == 1.0
    assert dict(graded.details) == {"instance_id": "pkg__pkg-7", "resolved": True, "reason": "resolved",
                                    "resolution": "RESOLVED_FULL", "fail_to_pass": {F2P: "PASSED"},
                                    "pass_to_pass": {P2P[0]: "PASSED", P2P[1]: "PASSED"}}
    (call,) = sandbox.calls
    assert (call["targets"], call["timeout_s"], call["extra_args"]) == (
        ["tests/test_core.py", "tests/test_more.py"], 10.0, ("-p", "_sao_grade_report"))
    assert sorted(call["files"]) == sorted([*BASE, report.PLUGIN_PATH, report.KEY_FILE])
    assert len(call["files"][report.KEY_FILE]) == 64


def test_a_skipped_fail_to_pass_test_or_an_xpassing_one_earns_nothing(sandbox):
    """A skip would count as neither pass nor fail to swebench (and an empty fail-to-pass set is full
    resolution): the grader counts it as failed, as it does an xpass, and shows the status the run gave."""
    sandbox.plan = dict(_all("passed"), **{F2P: "skipped"})
    graded = grading.grade_files(_reference(), dict(BASE))
    assert (graded.reward, graded.details["reason"], graded.details["resolution"]) == (
        0.0, "tests-failed", "RESOLVED_NO")
    assert graded.details["fail_to_pass"] == {F2P: "SKIPPED"}
    sandbox.plan = dict(_all("passed"), **{P2P[1]: "xpass"})
    graded = grading.grade_files(_reference(instance_id="pkg__pkg-8"), dict(BASE))
    assert (graded.reward, graded.details["resolution"]) == (0.0, "RESOLVED_NO")
    assert graded.details["pass_to_pass"] == {P2P[0]: "PASSED", P2P[1]: "XPASS"}


def test_half_the_fail_to_pass_tests_is_a_partial_resolution_worth_nothing(sandbox):
    """One of two fail-to-pass tests fixed, pass-to-pass intact: RESOLVED_PARTIAL, reward 0."""
    second = "tests/test_core.py::test_newer"
    sandbox.plan = dict(_all("passed"), **{second: "failed"})
    graded = grading.grade_files(_reference(FAIL_TO_PASS=[F2P, second]), dict(BASE))
    assert (graded.reward, graded.details["resolved"], graded.details["reason"], graded.details["resolution"]) == (
        0.0, False, "tests-failed", "RESOLVED_PARTIAL")
    assert graded.details["fail_to_pass"] == {F2P: "PASSED", second: "FAILED"}


def test_a_listed_test_the_run_never_reported_is_missing_and_not_passed(sandbox):
    """A pass-to-pass test absent from the records (deselected, renamed) shows MISSING and fails the grade."""
    sandbox.plan = {F2P: "passed", P2P[0]: "passed"}
    graded = grading.grade_files(_reference(), dict(BASE))
    assert (graded.reward, graded.details["resolution"]) == (0.0, "RESOLVED_NO")
    assert graded.details["pass_to_pass"] == {P2P[0]: "PASSED", P2P[1]: "MISSING"}


def test_an_untrusted_run_shows_every_test_untrusted_with_the_integrity_detail(sandbox):
    """Every test passed by the records, but the process exited 1: no reward, RESOLVED_NO whatever the statuses
    say, UNTRUSTED statuses and the judge's detail under ``integrity``."""
    sandbox.plan, sandbox.returncode = _all("passed"), 1
    graded = grading.grade_files(_reference(), dict(BASE))
    assert graded.reward == 0.0
    assert dict(graded.details) == {"instance_id": "pkg__pkg-7", "resolved": False, "reason": "exit-status-mismatch",
                                    "resolution": "RESOLVED_NO", "fail_to_pass": {F2P: "UNTRUSTED"},
                                    "pass_to_pass": {P2P[0]: "UNTRUSTED", P2P[1]: "UNTRUSTED"},
                                    "integrity": "pytest finished with 0, the process exited with 1"}


def test_a_timeout_outranks_the_missing_report_and_carries_no_integrity_detail(sandbox):
    """A run killed at its timeout has no records: the reason is ``timeout``, not the judge's problem."""
    sandbox.plan, sandbox.records, sandbox.timed_out, sandbox.returncode, sandbox.reason = (
        _all("passed"), False, True, None, "timeout")
    graded = grading.grade_files(_reference(), dict(BASE))
    assert (graded.reward, dict(graded.details)) == (0.0, {
        "instance_id": "pkg__pkg-7", "resolved": False, "reason": "timeout", "resolution": "RESOLVED_NO",
        "fail_to_pass": {F2P: "UNTRUSTED"}, "pass_to_pass": {P2P[0]: "UNTRUSTED", P2P[1]: "UNTRUSTED"}})


def test_a_sandbox_failure_is_named_by_the_sandbox_and_other_reasons_by_the_judge(sandbox):
    """A reason starting with "sandbox" becomes ``sandbox-error: <reason>``; another one (a memory limit) leaves
    the judge's problem as the reason, with its detail."""
    sandbox.plan, sandbox.records, sandbox.returncode = _all("passed"), False, None
    sandbox.reason = "sandbox setup failed: no bwrap"
    graded = grading.grade_files(_reference(), dict(BASE))
    assert (graded.reward, graded.details["reason"], "integrity" in graded.details) == (
        0.0, "sandbox-error: sandbox setup failed: no bwrap", False)
    sandbox.reason = "memory limit"
    graded = grading.grade_files(_reference(instance_id="pkg__pkg-8"), dict(BASE))
    assert (graded.reward, graded.details["reason"], graded.details["integrity"]) == (
        0.0, "report-missing", "the reporter never started")


def test_a_run_at_the_disk_limit_earns_nothing_though_every_test_passed(sandbox):
    """A trusted run whose working copy filled its cap: reward 0, reason ``disk-limit``, the passes shown."""
    sandbox.plan, sandbox.reason = _all("passed"), "disk limit"
    graded = grading.grade_files(_reference(), dict(BASE))
    assert (graded.reward, graded.details["resolved"], graded.details["reason"]) == (0.0, False, "disk-limit")
    assert (graded.details["fail_to_pass"], "integrity" in graded.details) == ({F2P: "PASSED"}, False)


def test_the_timeout_is_the_callers_else_the_references(sandbox):
    """``timeout_s`` given wins over the reference's own (which replaces the 10-s default); each is a float."""
    sandbox.plan = _all("passed")
    grading.grade_files(_reference(timeout_s=3), dict(BASE))
    grading.grade_files(_reference(timeout_s=3), dict(BASE), timeout_s=1.5)
    assert [(call["timeout_s"], type(call["timeout_s"])) for call in sandbox.calls] == [(3.0, float), (1.5, float)]


def test_a_verdict_is_cached_per_working_copy_not_only_per_graded_tree(sandbox):
    """The same state is graded once; a state that differs only outside the package grades the same tree but
    is graded again, so that its ignored edit is recorded (and the base's file is what runs)."""
    sandbox.plan = _all("passed")
    first = grading.grade_files(_reference(), dict(BASE))
    assert grading.grade_files(_reference(), dict(BASE)) is first and len(sandbox.calls) == 1
    edited = dict(BASE, **{"setup.cfg": "[tool]\naddopts = -p no:python\n"})
    graded = grading.grade_files(_reference(), edited)
    assert len(sandbox.calls) == 2 and sandbox.calls[1]["files"]["setup.cfg"] == "[tool]\n"
    assert (graded.reward, graded.details["ignored_edits"]) == (1.0, ["setup.cfg"])


def test_grade_forge_refuses_a_response_without_a_diff_and_grades_an_empty_one(sandbox):
    """Text with no diff is ``patch-not-applied`` with its error and empty status maps; an empty response is no
    change at all, so the base tree is graded (the bug still there: tests-failed)."""
    task = Task(id="forge-edge", prompt="", reference=_reference(), grader="forge", env="repo")
    refused = grading.grade_forge(task, "I would rewrite core.py.")
    assert (refused.reward, dict(refused.details)) == (0.0, {
        "instance_id": "pkg__pkg-7", "resolved": False, "reason": "patch-not-applied", "resolution": "RESOLVED_NO",
        "fail_to_pass": {}, "pass_to_pass": {}, "error": "no unified diff in the response"})
    assert sandbox.calls == []
    sandbox.plan = dict(_all("passed"), **{F2P: "failed"})
    graded = grading.grade_forge(task, "  \n")
    assert (graded.reward, graded.details["reason"], graded.details["fail_to_pass"]) == (
        0.0, "tests-failed", {F2P: "FAILED"})
    assert sandbox.calls[0]["files"]["pkg/core.py"] == "X = 1\n"


# --- trees, caches and patches --------------------------------------------------------------------------

def test_the_graded_tree_takes_the_package_folder_and_nothing_that_only_starts_like_it():
    """The package is ``pkg/``: a sibling ``pkgextra/`` or ``pkg.py`` is outside it, as are tests and
    configuration; a package file the working copy removed is gone; keys come sorted."""
    files = {"pkg/core.py": "X = 2\n", "pkg/new.py": "Y = 1\n", "pkgextra/x.py": "Z = 1\n", "pkg.py": "",
             "tests/test_core.py": "def test_new():\n    assert False\n",
             "tests/test_more.py": BASE["tests/test_more.py"]}
    tree = grading.graded_tree(_reference(), files)
    assert list(tree) == ["pkg/core.py", "pkg/new.py", "setup.cfg", "tests/test_core.py", "tests/test_more.py"]
    assert tree == {"pkg/core.py": "X = 2\n", "pkg/new.py": "Y = 1\n", "setup.cfg": "[tool]\n",
                    "tests/test_core.py": BASE["tests/test_core.py"], "tests/test_more.py": BASE["tests/test_more.py"]}
    assert grading.ignored_edits(_reference(), files) == ["pkg.py", "pkgextra/x.py", "setup.cfg", "tests/test_core.py"]


def test_a_cache_drops_its_oldest_entry_beyond_its_size_and_an_update_makes_an_entry_new(monkeypatch):
    """With room for two: a third entry drops the first; storing an entry again moves it to the newest place."""
    monkeypatch.setattr(grading, "CACHE_SIZE", 2)
    cache: OrderedDict = OrderedDict()
    for key in ("a", "b", "c"):
        assert grading._remember(cache, (key,), key.upper()) == key.upper()
    assert list(cache) == [("b",), ("c",)]
    grading._remember(cache, ("b",), "B2")
    grading._remember(cache, ("d",), "D")
    assert dict(cache) == {("b",): "B2", ("d",): "D"}
    assert grading._recall(cache, ("c",)) is None


def test_a_tree_digest_separates_paths_from_contents_and_ignores_order():
    """``{"ab": "c"}`` and ``{"a": "bc"}`` differ; the same files listed in another order do not."""
    assert grading.digest({"a": "bc"}) != grading.digest({"ab": "c"})
    assert grading.digest({"x": "1", "y": "2"}) == grading.digest({"y": "2", "x": "1"})
    assert grading.digest({"x": "1"}) == hashlib.sha256(b"x\x001\x00").hexdigest()


HUNK = "--- a/pkg/core.py\n+++ b/pkg/core.py\n@@ -1 +1 @@\n-X = 1\n+X = 2\n"


def test_a_patch_is_read_from_the_first_fenced_block_with_a_hunk_or_from_a_diff_line():
    """A fenced block without ``@@`` is passed over for a later one; a block or a bare diff without a final
    newline gets one; a diff at the very start of the response counts; text with no diff is None."""
    fenced = f"```\nprint(1)\n```\nthen\n```diff\n{HUNK.rstrip()}```"
    assert grading.extract_patch(fenced) == HUNK
    assert grading.extract_patch("diff --git a/pkg/core.py b/pkg/core.py\n" + HUNK.rstrip()) == (
        "diff --git a/pkg/core.py b/pkg/core.py\n" + HUNK)
    assert grading.extract_patch("Fix:\n" + HUNK) == HUNK
    assert grading.extract_patch("no diff here, a--- b") is None
    assert grading.extract_patch(" \n\t") == ""


def test_patched_paths_strips_the_sides_and_refuses_headers_it_cannot_read():
    """``a/``/``b/`` and a tab's timestamp are stripped, ``/dev/null`` skipped, a bare name kept; renames,
    copies and binary patches give None."""
    patch = ("--- /dev/null\n+++ b/pkg/new.py\n--- a/pkg/old.py\t2024-01-01 00:00\n+++ /dev/null\n"
             "--- setup.cfg\n+++ setup.cfg\n")
    assert grading.patched_paths(patch) == {"pkg/new.py", "pkg/old.py", "setup.cfg"}
    for header in ("rename from a.py\n", "copy to b.py\n", "Binary files a/x and b/x differ\n", "GIT binary patch\n"):
        assert grading.patched_paths(HUNK + header) is None, header


def test_the_run_tests_observation_of_a_run_that_never_reached_pytest():
    """A timeout is named with its limit, a sandbox failure with its reason, and a run with no output by its
    exit status."""
    timed_out = ExecResult(None, "", "", True, "timeout", 2.5, False)
    assert grading.summarize(timed_out, 2.5) == "timeout: the tests ran longer than 2.5s\n"
    broken = ExecResult(None, "", "", False, "sandbox unavailable: no bwrap", 0.0, False)
    assert grading.summarize(broken, 10.0) == "error: sandbox unavailable: no bwrap\n"
    silent = ExecResult(4, "", "", False, None, 0.1, False)
    assert grading.summarize(silent, 10.0) == "no output (exit status 4)\n"


def test_the_patch_starts_at_the_first_line_that_opens_a_diff_not_at_the_first_marker_in_prose():
    """A response whose prose says ``---`` before its diff: the patch is the text from the first line that starts
    with ``--- `` (or ``diff --git``), not nothing because the first ``--- `` sat mid-line."""
    diff = "--- a/pkg/x.py\n+++ b/pkg/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    assert grading.extract_patch("Keep the -- and --- separators.\n" + diff) == diff
    git = "diff --git a/pkg/x.py b/pkg/x.py\n" + diff
    assert grading.extract_patch("See diff --git below.\n" + git) == git
    assert grading.extract_patch("no diff here, only --- dashes") is None
