"""Rewards the graded code cannot write: the hostile-patch battery against the forge grader, under
bubblewrap and Docker, the signed report channel against hand-made records, and tool-drift's reward.

Each attack (``forgery_patches.ATTACKS``) leaves the instance's bug in place and tries to make the
verdict say resolved: printed PASSED lines, added conftest/pytest configuration, site hooks, exits at
import, monkeypatched runner, reports or assertions, registered hooks, deselection, skips, rewritten
tests, forged report lines and exit codes, a hang. Every one must grade 0 with the reason the grader
gives for it, in both sandboxes, and the gold patch must still grade 1. Several of the attacks graded
1.0 under the grader's previous reading (swebench's pytest log parser over the printed log): that is
asserted too, so that the battery is known to contain forgeries that worked.
"""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from forgery_patches import ATTACKS, FORGED_LOG, OUTSIDE_EDITS
from sao_env.sandbox import ExecResult
from sao_env.tasks import build_source
from sao_env.tasks.forge import grading, report

TIMEOUT_S = 2.0
HANG_TIMEOUT_S = 1.0
"""The hanging attack's limit under bubblewrap, all of which it waits: it hangs at import, and a whole run of the
other attacks in a fork of the warm pytest takes 0.2-0.4 s (Docker's cold runs, interpreter and pytest
started per run, keep ``TIMEOUT_S``)."""
INTEGRITY_REASONS = {"report-missing", "report-forged", "runner-tampered", "pytest-aborted", "exit-status-mismatch"}
"""The report's own verdicts (``report.judge``): the grader adds their detail (``integrity``) when one is the reason,
and only then: a hung run's report also lacks its last record, and its reason is the timeout."""


@pytest.fixture(scope="module")
def reference():
    return build_source("forge_repo", dict(repo_seed=0, head=0, modules=2)).task(1, phase="p").reference


def _gold_files(ref):
    files, error = grading.apply_patch(ref["files"], ref["patch"])
    assert files is not None, error
    return files


def _expect_zero(ref, name, executor):
    make, reason = ATTACKS[name]
    files = make(ref)
    timeout_s = HANG_TIMEOUT_S if reason == "timeout" and executor is None else TIMEOUT_S
    verdict = grading.grade_files(ref, files, timeout_s=timeout_s, executor=executor)
    assert (verdict.reward, verdict.details["reason"]) == (0.0, reason), (name, verdict.details)
    assert verdict.details["resolved"] is False and verdict.details["resolution"] == "RESOLVED_NO"
    assert ("integrity" in verdict.details) == (reason in INTEGRITY_REASONS), (name, verdict.details)
    assert "PASSED" not in {verdict.details["fail_to_pass"][t] for t in ref["FAIL_TO_PASS"]}
    outside = OUTSIDE_EDITS.get(name, [])
    if outside is None:
        outside = sorted(p for p in ref["files"] if p.startswith("tests/"))
    assert verdict.details.get("ignored_edits", []) == outside, name


def test_the_battery_has_at_least_twelve_attacks_and_the_old_reading_was_fooled(reference):
    """The forgeries in FORGED_LOG graded RESOLVED_FULL when the verdict was swebench's parse of the log."""
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status

    assert len(ATTACKS) >= 12
    f2p, p2p = list(reference["FAIL_TO_PASS"]), list(reference["PASS_TO_PASS"])
    targets = sorted({test.split("::")[0] for test in f2p + p2p})
    for name in FORGED_LOG:
        tree, _ = grading.with_test_patch(reference, grading.graded_tree(reference, ATTACKS[name][0](reference)))
        log = grading.run_pytest(tree, targets, timeout_s=TIMEOUT_S).stdout
        old = get_eval_tests_report(grading._statuses(log), {FAIL_TO_PASS: f2p, PASS_TO_PASS: p2p})
        assert get_resolution_status(old) == "RESOLVED_FULL", name


@pytest.mark.parametrize("name", list(ATTACKS))
def test_every_attack_grades_zero_under_bubblewrap(reference, name):
    grading.clear_caches()
    _expect_zero(reference, name, None)


def test_the_gold_patch_still_resolves_and_outside_edits_are_recorded_not_used(reference):
    grading.clear_caches()
    gold = _gold_files(reference)
    verdict = grading.grade_files(reference, gold, timeout_s=TIMEOUT_S)
    assert (verdict.reward, verdict.details["reason"]) == (1.0, "resolved")
    assert set(verdict.details["fail_to_pass"].values()) == {"PASSED"}
    assert "ignored_edits" not in verdict.details
    # the gold fix plus a conftest that would fail every test: the instance's own configuration is used
    hostile = dict(gold, **{"conftest.py": "def pytest_runtest_setup(item):\n    raise RuntimeError('no')\n"})
    verdict = grading.grade_files(reference, hostile, timeout_s=TIMEOUT_S)
    assert (verdict.reward, verdict.details["ignored_edits"]) == (1.0, ["conftest.py"])
    # printing does not hurt an honest fix either
    noisy = dict(gold)
    noisy[reference["package"] + "/__init__.py"] += "\nprint('FAILED tests/test_text.py::test_boosted')\n"
    assert grading.grade_files(reference, noisy, timeout_s=TIMEOUT_S).reward == 1.0


def test_a_patch_through_grade_forge_is_judged_the_same(reference):
    """The diff path: the printed-at-exit forgery as a unified diff."""
    from sao_env.tasks.forge.instances import unified_diff
    from sao_env.types import Task

    grading.clear_caches()
    hostile = ATTACKS["printed_at_exit"][0](reference)
    init = reference["package"] + "/__init__.py"
    patch = unified_diff(init, reference["files"][init], hostile[init])
    task = Task(id="forge-attack", prompt="", reference=reference, grader="forge", env="repo")
    verdict = grading.grade_forge(task, patch)
    assert (verdict.reward, verdict.details["reason"]) == (0.0, "tests-failed")
    gold = grading.grade_forge(task, reference["patch"])
    assert (gold.reward, gold.details["reason"]) == (1.0, "resolved")


# --- the report channel, record by record ------------------------------------------------------

KEY = b"0123456789abcdef0123456789abcdef"


def _line(record: dict, key: bytes = KEY) -> str:
    body = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return f"{report.MARK} {body} {hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}"


def _run(*records: dict, returncode: int = 1, key: bytes = KEY, extra: str = "") -> ExecResult:
    lines = [_line(dict(r, seq=i), key) for i, r in enumerate(records)]
    return ExecResult(returncode, "", extra + "\n".join(lines) + "\n", False, None, 0.1, False)


def _phases(nodeid: str, call: str = "passed", setup: str = "passed", xfail: bool = False) -> list[dict]:
    return [{"kind": "report", "nodeid": nodeid, "when": "setup", "outcome": setup, "xfail": False},
            {"kind": "report", "nodeid": nodeid, "when": "call", "outcome": call, "xfail": xfail},
            {"kind": "report", "nodeid": nodeid, "when": "teardown", "outcome": "passed", "xfail": False}]


def _finish(exitstatus: int, failed: int, changes=()) -> dict:
    return {"kind": "finish", "exitstatus": exitstatus, "failed": failed, "testsfailed": failed,
            "collected": 3, "changes": list(changes)}


START = {"kind": "start", "pid": 7}


def test_judge_reads_statuses_from_signed_records():
    # a passes; b fails in its call; c is skipped at setup; d xfails (call "skipped" with wasxfail)
    records = [START, *_phases("t::a"), *_phases("t::b", call="failed"),
               {"kind": "report", "nodeid": "t::c", "when": "setup", "outcome": "skipped", "xfail": False},
               {"kind": "report", "nodeid": "t::c", "when": "teardown", "outcome": "passed", "xfail": False},
               *_phases("t::d", call="skipped", xfail=True), *_phases("t::e", xfail=True), _finish(1, 1)]
    verdict = report.judge(_run(*records, extra="PASSED t::b\nPASSED t::c\n"), KEY)
    assert verdict.problem is None
    assert verdict.statuses == {"t::a": "PASSED", "t::b": "FAILED", "t::c": "SKIPPED", "t::d": "SKIPPED",
                                "t::e": "XPASS"}


def test_judge_refuses_a_wrong_key_a_gap_a_duplicate_and_a_missing_finish():
    good = [START, *_phases("t::a"), _finish(0, 0)]
    assert report.judge(_run(*good, returncode=0), KEY).statuses == {"t::a": "PASSED"}
    assert report.judge(_run(*good, returncode=0, key=b"x" * 32), KEY).problem == "report-forged"
    lines = [_line(dict(r, seq=i)) for i, r in enumerate(good)]
    gap = ExecResult(0, "", "\n".join(lines[:1] + lines[2:]), False, None, 0.1, False)
    assert report.judge(gap, KEY).problem == "report-forged"
    twice = [START, *_phases("t::a"), _phases("t::a")[1], _finish(0, 0)]
    assert report.judge(_run(*twice, returncode=0), KEY).detail == "t::a call reported twice"
    assert report.judge(_run(*good[:-1], returncode=0), KEY).problem == "report-missing"
    assert report.judge(_run(returncode=0), KEY).problem == "report-missing"
    bare = ExecResult(0, "", f"{report.MARK} not signed\n", False, None, 0.1, False)
    assert report.judge(bare, KEY).problem == "report-forged"


def test_judge_cross_checks_the_exit_status_and_reports_tampering():
    passed = [START, *_phases("t::a")]
    assert report.judge(_run(*passed, _finish(0, 0), returncode=1), KEY).problem == "exit-status-mismatch"
    assert report.judge(_run(*passed, _finish(1, 0), returncode=1), KEY).problem == "exit-status-mismatch"
    failing = [START, *_phases("t::a", call="failed")]
    assert report.judge(_run(*failing, _finish(0, 1), returncode=0), KEY).problem == "exit-status-mismatch"
    assert report.judge(_run(*failing, _finish(1, 1), returncode=1), KEY).problem is None
    aborted = report.judge(_run(*passed, _finish(3, 0), returncode=3), KEY)
    assert (aborted.problem, aborted.detail) == ("pytest-aborted", "pytest ended with exit status 3 (internal error)")
    tampered = report.judge(_run(*passed, _finish(0, 0, ["hook x changed (t::a)"]), returncode=0), KEY)
    assert (tampered.problem, tampered.detail) == ("runner-tampered", "hook x changed (t::a)")


def test_prepare_writes_the_plugin_and_a_fresh_key_over_the_trees_own():
    tree = {"pkg/a.py": "x = 1\n", report.PLUGIN_PATH: "evil = True\n", report.KEY_FILE: "0" * 64}
    files, key = report.prepare(tree)
    again, other = report.prepare(tree)
    assert files[report.PLUGIN_PATH] == report.plugin_source() and "evil" not in files[report.PLUGIN_PATH]
    assert files[report.KEY_FILE] == key.decode() and len(key) == 64 and key != other
    assert files["pkg/a.py"] == "x = 1\n"


# --- tool-drift: the reward reads the model's answer, never the tool's output ----------------------

def test_a_tool_call_that_prints_the_answer_does_not_earn_the_reward():
    from sao_env.envs.python_tool import PythonToolEnv
    from sao_env.tasks.tool_math import ToolArithmeticParams, ToolArithmeticSource
    import numpy as np

    task = ToolArithmeticSource(ToolArithmeticParams(digits=2, operations=["+"], api="v1")).sample(
        np.random.default_rng(0), phase="v1", created_at=0.0, index=0)
    answer = task.reference["answer"]
    env = PythonToolEnv(max_turns=3)
    env.reset(options={"task": task})
    observation, reward, done, _, _ = env.step(f"<py>print('\\\\boxed{{{answer}}}'); open('reward', 'w').write('1')</py>")
    assert f"\\boxed{{{answer}}}" in observation and (reward, done) == (0.0, False)
    _, reward, done, _, info = env.step("the answer is above")
    assert (reward, done) == (0.0, True) and info["grade"]["tool_calls"] == 1
    env.reset(options={"task": task})
    _, reward, _, _, _ = env.step(f"\\boxed{{{answer}}}")
    assert reward == 1.0


def test_records_of_another_run_are_refused():
    records = [START, *_phases("t::a"), _finish(0, 0)]
    lines = [_line(dict(r, seq=i, run="a" if i < 2 else "b")) for i, r in enumerate(records)]
    mixed = ExecResult(0, "", "\n".join(lines), False, None, 0.1, False)
    assert (report.judge(mixed, KEY).problem, report.judge(mixed, KEY).detail) == ("report-forged",
                                                                                    "records of another run")


def test_a_fix_that_fills_the_work_dir_grades_zero(reference):
    """The gold fix, plus a package that writes past the work dir's cap at import: 0, reason disk-limit."""
    from sao_env.sandbox import Limits, LocalExecutor
    from sao_env.sandbox.workdir import cap_available

    if not cap_available():
        pytest.skip("the work dir cap needs root (it mounts a tmpfs)")
    grading.clear_caches()
    files = _gold_files(reference)
    files[reference["package"] + "/__init__.py"] += (
        "\ntry:\n    open('fill.bin', 'wb').write(b'x' * (9 << 20))\nexcept OSError:\n    pass\n")
    verdict = grading.grade_files(reference, files, timeout_s=TIMEOUT_S, executor=LocalExecutor(Limits(workdir_mb=8)))
    assert (verdict.reward, verdict.details["reason"]) == (0.0, "disk-limit")
    assert set(verdict.details["fail_to_pass"].values()) == {"PASSED"}  # the tests themselves passed


def test_every_callable_the_reporter_guards_exists_in_this_pytest():
    """A guarded name that no longer resolves (pytest renamed it) would be None before and after: never seen
    replaced. Every entry must resolve here, and the unittest assertions must be among them."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("reporter_under_test",
                                                  Path(report.__file__).with_name("pytest_reporter.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # no key file here: it reports nothing, but its tables are there
    found = module._callables()
    assert [name for name, value in found.items() if value is None] == []
    assert {"unittest.case:TestCase.assertEqual", "_pytest.reports:TestReport.from_item_and_call"} <= set(found)
    assert module._reporter is None
