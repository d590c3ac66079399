"""Issue #50, wave 6: a by-hand test for each planted bug in this wave's code that the suite missed.

Each test fails with its bug planted and passes without it; the expected values are worked out here,
not read back from the code under test:

- the report channel refuses a signed record that does not start its line (``report._records``);
- the reporter removes its key file before the graded code runs (``pytest_reporter._start``);
- an outside-package file that a working copy removes is recorded in ``ignored_edits``;
- the policy's ``run_tests`` log hides every line that holds a record mark (``without_records``);
- ``board_lock`` takes the folder's lock again after an earlier block released it;
- ``sao-env leaderboard`` with bad runs and a table writes the table's board (not "no board");
- a reply of exactly the byte cap is read whole (``_http._read_body``);
- ``stop_all`` ends a request waiting out a ``Retry-After`` at once (``post_json``'s back-off);
- ``samples.jsonl``'s lines, appended as each sample is graded, name the sample graded when some
  samples were known beforehand (``grade_and_keep``);
- a run that filled its work dir is not ``ok`` even with exit status 0 (``ExecResult.ok``).
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import threading
import time
from pathlib import Path

import httpx
import pytest

from sao_env.sandbox import ExecResult
from sao_env.tasks import build_source
from sao_env.tasks.forge import grading, report
from sao_env.types import GradeResult, Task

TIMEOUT_S = 2.0
KEY = b"fedcba9876543210fedcba9876543210"


@pytest.fixture(scope="module")
def reference():
    return build_source("forge_repo", dict(repo_seed=0, head=0, modules=2)).task(1, phase="p").reference


def _gold(ref) -> dict[str, str]:
    files, error = grading.apply_patch(ref["files"], ref["patch"])
    assert files is not None, error
    return files


def _signed(record: dict, seq: int) -> str:
    body = json.dumps(dict(record, seq=seq, run="r1"), sort_keys=True, separators=(",", ":"))
    return f"{report.MARK} {body} {hmac.new(KEY, body.encode(), hashlib.sha256).hexdigest()}"


# --- forge grading -------------------------------------------------------------------------------

def test_a_signed_record_that_does_not_start_its_line_is_refused():
    """Every record is well signed, but one is printed after other text on its line: forged."""
    phases = [{"kind": "report", "nodeid": "t::a", "when": when, "outcome": "passed", "xfail": False}
              for when in ("setup", "call", "teardown")]
    finish = {"kind": "finish", "exitstatus": 0, "failed": 0, "testsfailed": 0, "collected": 1, "changes": []}
    lines = [_signed(r, i) for i, r in enumerate([{"kind": "start", "pid": 1}, *phases, finish])]
    whole = report.judge_stream("\n".join(lines) + "\n", 0, KEY)
    assert (whole.problem, whole.statuses) == (None, {"t::a": "PASSED"})
    lines[2] = "tests/test_a.py ." + lines[2]
    verdict = report.judge_stream("\n".join(lines) + "\n", 0, KEY)
    assert (verdict.problem, verdict.detail) == ("report-forged", "a report line not in the reporter's form")


def test_the_graded_code_cannot_read_the_reporters_key(reference):
    """The gold fix, whose package refuses to load where the key file is still in the tree: resolved,
    since the reporter removes the key file before any test module (or the package) is imported."""
    grading.clear_caches()
    files = _gold(reference)
    files[reference["package"] + "/__init__.py"] += (
        "\nimport os as _os\n"
        "_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))\n"
        "for _where in (_root, _os.getcwd()):\n"
        "    if _os.path.exists(_os.path.join(_where, '.sao-grade-key')):\n"
        "        raise RuntimeError('the grader key is readable')\n")
    verdict = grading.grade_files(reference, files, timeout_s=TIMEOUT_S)
    assert (verdict.reward, verdict.details["reason"]) == (1.0, "resolved"), verdict.details


def test_an_outside_file_the_working_copy_removes_is_an_ignored_edit(reference):
    """The gold fix with one of the instance's test files deleted: the base's file is graded (so the
    fix still resolves), and the deletion is recorded."""
    grading.clear_caches()
    files = _gold(reference)
    removed = sorted(p for p in reference["files"] if p.startswith("tests/") and p.endswith(".py"))[0]
    del files[removed]
    assert grading.ignored_edits(reference, files) == [removed]
    verdict = grading.grade_files(reference, files, timeout_s=TIMEOUT_S)
    assert (verdict.reward, verdict.details["ignored_edits"]) == (1.0, [removed])


def test_run_tests_output_hides_every_line_with_a_record_mark():
    from sao_env.envs.swebench_env import without_records

    log = ("collected 2 items\n"
           f"{report.MARK} {{\"kind\":\"start\"}} {'a' * 64}\n"
           f"tests/test_a.py .{report.MARK} {{\"kind\":\"report\"}} {'b' * 64}\n"
           "2 passed in 0.01s\n")
    assert without_records(log) == "collected 2 items\n2 passed in 0.01s\n"


# --- leaderboards --------------------------------------------------------------------------------

def _held_elsewhere(path: Path) -> bool:
    """Whether a lock is held on ``path`` (probed through a descriptor of its own)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_board_lock_is_taken_again_after_an_earlier_block(tmp_path):
    from sao_env.leaderboard import board_lock

    lock = tmp_path / ".board.lock"
    with board_lock(tmp_path):
        with board_lock(tmp_path):  # re-entrant: no wait on itself
            assert _held_elsewhere(lock)
    assert not lock.exists()
    with board_lock(tmp_path):
        assert lock.is_file() and _held_elsewhere(lock)
    assert not lock.exists()


def test_leaderboard_with_bad_runs_and_a_table_writes_the_tables_board(tmp_path, capsys):
    """A cut-off run beside a per-seed table: the run is left out with a warning, the table's board is
    written (an error "no board written" is only for inputs that leave nothing to write)."""
    from sao_env.cli import main
    from test_leaderboard_site import fake_run

    for seed in (0, 1):
        fake_run(tmp_path / "good", "grpo", seed, 0.4 + 0.01 * seed, 0.7)
    assert main(["leaderboard", str(tmp_path / "good"), "--out", str(tmp_path / "first")]) == 0
    bad = fake_run(tmp_path / "bad", "sao", 0, 0.5, 0.7)
    evals = bad / "evals.jsonl"
    evals.write_text(evals.read_text()[:-20])
    capsys.readouterr()
    table = tmp_path / "first" / "style-drift-runs.csv"
    assert main(["leaderboard", str(bad), str(table), "--out", str(tmp_path / "second")]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sao-env:")]
    assert len(err) == 1 and err[0].startswith(f"sao-env: warning: 1 run left out: {bad} (evals.jsonl line "), err
    import pandas as pd

    assert sorted(pd.read_csv(tmp_path / "second" / "style-drift-runs.csv")["seed"]) == [0, 1]


# --- requests to a server ------------------------------------------------------------------------

def test_a_reply_of_exactly_the_byte_cap_is_read_whole():
    from sao_env.benchmarks import _http

    body = b'{"ok": "' + b"x" * 92 + b'"}'
    assert len(body) == 102
    deadline = time.monotonic() + 30
    assert _http._read_body(httpx.Response(200, content=body), deadline, 102) == body
    with pytest.raises(_http._Capped):
        _http._read_body(httpx.Response(200, content=body), deadline, 101)


def test_stop_all_ends_a_request_waiting_out_a_retry_after(monkeypatch):
    """A 503 asking for 30 s: stopping the command ends the wait at once, with reason "stopped"."""
    from sao_env.benchmarks import _http

    monkeypatch.setattr(_http, "_one_try", lambda *args: (503, {"retry-after": "30"}, b"busy"))
    _http.reset_stop()
    outcome: dict[str, str] = {}

    def call() -> None:
        try:
            _http.post_json("http://127.0.0.1:9/v1/chat/completions", {}, policy=_http.RetryPolicy(3, 1.0, 60.0))
        except _http.RequestFailed as err:
            outcome["reason"] = err.reason

    worker = threading.Thread(target=call, daemon=True)
    started = time.monotonic()
    worker.start()
    try:
        time.sleep(0.3)
        _http.stop_all()
        worker.join(5)
        assert not worker.is_alive() and outcome == {"reason": "stopped"}
        assert time.monotonic() - started < 3
    finally:
        _http.reset_stop()


def test_kept_sample_lines_name_the_sample_graded_when_some_were_known(tmp_path):
    """Three samples, the first failed at generation (known); the judge grades the other two. Each line
    appended to samples.jsonl as a sample is graded (what a kill mid-grading leaves) is that sample's."""
    from sao_env.benchmarks.evaluate import EvalOptions, SuiteRun, _Progress, grade_and_keep
    from sao_env.benchmarks.llm_grader import failed_grade
    from sao_env.benchmarks.suites import load_suite

    class Judge:
        name = "llm:by-hand"

        def grade_batch(self, pairs):
            return [GradeResult(float(ok), {"verdict": "correct" if ok else "wrong", "reason": "judge",
                                            "grader": self.name})
                    for ok in (response == f"\\boxed{{{task.reference['answer']}}}" for task, response in pairs)]

    tasks = [Task(id=f"q{i}", prompt=f"problem {i}", reference={"answer": str(i)}, grader="math") for i in range(3)]
    samples = [(tasks[0], 0, None), (tasks[1], 0, "\\boxed{1}"), (tasks[2], 0, "\\boxed{7}")]
    run = SuiteRun(load_suite("imo_answerbench"), tasks, 3, "by hand")
    known = {0: failed_grade("generation failed: HTTP 400", grader=Judge.name)}
    with _Progress(False) as bars:
        grades = grade_and_keep(run, samples, EvalOptions(grader="llm", judge=Judge()), model_name="m",
                                out_dir=tmp_path, bars=bars, known=known, tokens=[None] * 3, finished=[None] * 3)
    assert [g.details["verdict"] for g in grades] == ["failed", "correct", "wrong"]
    lines = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [(r["id"], r["response"], r["verdict"]) for r in lines] == [
        ("q0", None, "failed"), ("q1", "\\boxed{1}", "correct"), ("q2", "\\boxed{7}", "wrong")]


# --- the sandbox ---------------------------------------------------------------------------------

def test_a_run_at_the_disk_limit_is_not_ok_whatever_its_exit_status():
    from sao_env.sandbox.base import at_disk_limit

    clean = ExecResult(0, "", "", False, None, 0.1, False)
    assert clean.ok
    full = at_disk_limit(clean)
    assert (full.returncode, full.reason, full.ok) == (0, "disk limit", False)
    assert not ExecResult(0, "", "", False, "disk limit", 0.1, False).ok
