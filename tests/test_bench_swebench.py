"""SWE-bench Verified without a Docker engine: test specs, swebench's log parsers and grading, predictions."""

from __future__ import annotations

import json

import pytest

from sao_env.benchmarks import swebench as sb
from sao_env.errors import UserError
from sao_env.types import Task

pytest.importorskip("swebench.harness.test_spec.test_spec", reason="the optional swebench extra (4.x) is not installed")

START = "+ : '>>>>> Start Test Output'"
END = "+ : '>>>>> End Test Output'"

# A realistic SWE-bench Verified row written by hand (astropy__astropy-12907's shape and values).
ASTROPY_TEST_PATCH = """diff --git a/astropy/modeling/tests/test_separable.py b/astropy/modeling/tests/test_separable.py
--- a/astropy/modeling/tests/test_separable.py
+++ b/astropy/modeling/tests/test_separable.py
@@ -28,6 +28,13 @@
 p1 = models.Polynomial1D(1, name='p1')
 
 
+cm_4d_expected = (np.array([False, False, True, True]),
+                  np.array([[True,  True,  False, False],
+                            [True,  True,  False, False],
+                            [False, False, True,  False],
+                            [False, False, False, True]]))
+
+
 compound_models = {
     'cm1': (map3 & sh1 | rot & sh1 | sh1 & sh2 & sh1,
             (np.array([False, False, True]),
"""
F2P = [
    "astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]",
    "astropy/modeling/tests/test_separable.py::test_separable[compound_model9-result9]",
]
P2P = [
    "astropy/modeling/tests/test_separable.py::test_coord_matrix",
    "astropy/modeling/tests/test_separable.py::test_cdot",
    "astropy/modeling/tests/test_separable.py::test_cstack",
    "astropy/modeling/tests/test_separable.py::test_arith_oper",
    "astropy/modeling/tests/test_separable.py::test_separable[compound_model0-result0]",
]
ASTROPY_ROW = {
    "repo": "astropy/astropy",
    "instance_id": "astropy__astropy-12907",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "patch": "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n",
    "test_patch": ASTROPY_TEST_PATCH,
    "problem_statement": "Modeling's `separability_matrix` does not compute separability correctly for nested CompoundModels",
    "hints_text": "",
    "created_at": "2022-03-03T15:14:54Z",
    "version": "4.3",
    "FAIL_TO_PASS": json.dumps(F2P),  # the hub stores both lists as JSON strings
    "PASS_TO_PASS": json.dumps(P2P),
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    "difficulty": "15 min - 1 hour",
}

DJANGO_ROW = {
    "repo": "django/django",
    "instance_id": "django__django-11099",
    "base_commit": "d26b2424437dabeeca94d7900b37d2df4410da0c",
    "patch": "",
    "test_patch": (
        "diff --git a/tests/auth_tests/test_validators.py b/tests/auth_tests/test_validators.py\n"
        "--- a/tests/auth_tests/test_validators.py\n+++ b/tests/auth_tests/test_validators.py\n"
        "@@ -237,7 +237,7 @@ def test_unicode_validator(self):\n"
        "         invalid_usernames = [\n"
        "-            \"o'connell\", \"عبد ال\",\n"
        "+            \"o'connell\", \"عبد ال\", \"zerowidth\\u200Bspace\", \"nonbreaking\\u00A0space\", \"en\\u2013dash\", 'trailingnewline\\u000A',\n"
    ),
    "problem_statement": "UsernameValidator allows trailing newline in usernames",
    "hints_text": "",
    "created_at": "2019-03-20T03:46:18Z",
    "version": "3.0",
    "FAIL_TO_PASS": json.dumps([
        "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)",
        "test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests)",
    ]),
    "PASS_TO_PASS": json.dumps(["test_help_text (auth_tests.test_validators.UserAttributeSimilarityValidatorTest)"]),
    "environment_setup_commit": "419a78300f7cd27611196e1e464d50fd0385ff27",
    "difficulty": "<15 min fix",
}


def _task(row: dict) -> Task:
    return Task(id=row["instance_id"], prompt=row["problem_statement"], reference={"instance": row}, grader="swebench")


def _pytest_log(statuses: dict[str, str]) -> str:
    lines = ["+ git apply -v -", "Checking patch astropy/modeling/tests/test_separable.py...", START,
             "+ pytest -rA astropy/modeling/tests/test_separable.py",
             "============================= test session starts ==============================",
             "collected 7 items", "", "=========================== short test summary info ============================"]
    lines += [f"{status} {name}" for name, status in statuses.items()]
    lines += ["========================= 7 passed in 0.45s =========================", END,
              "+ git checkout d16bfe05a744909de4b27f5875fe0d4ed41ce607 astropy/modeling/tests/test_separable.py"]
    return "\n".join(lines) + "\n"


def test_test_spec_is_built_from_a_full_row():
    spec = sb.make_test_spec(ASTROPY_ROW)
    assert spec.instance_id == "astropy__astropy-12907"
    assert spec.FAIL_TO_PASS == F2P and spec.PASS_TO_PASS == P2P
    assert "astropy__astropy-12907" in spec.instance_image_key
    script = spec.eval_script
    assert "git apply -v -" in script and "cm_4d_expected" in script  # the test patch is applied
    assert "astropy/modeling/tests/test_separable.py" in script  # and that test file is run
    assert ">>>>> Start Test Output" in script and ">>>>> End Test Output" in script
    assert "d16bfe05a744909de4b27f5875fe0d4ed41ce607" in spec.install_repo_script
    assert "python -m pip install -e .[test]" in spec.eval_script  # astropy's install step, from swebench's specs


def test_grading_spec_needs_no_scripts_and_no_network():
    spec = sb.grading_spec(DJANGO_ROW)  # django's full spec would fetch its requirements from GitHub
    assert spec.repo == "django/django" and spec.version == "3.0"
    assert spec.FAIL_TO_PASS[0].startswith("test_ascii_validator") and spec.eval_script_list == []


def test_a_row_without_tests_cannot_be_graded():
    partial = {k: ASTROPY_ROW[k] for k in ("instance_id", "repo", "base_commit", "problem_statement", "patch")}
    with pytest.raises(UserError, match="lacks version, test_patch, FAIL_TO_PASS, PASS_TO_PASS"):
        sb.make_test_spec(partial)
    with pytest.raises(UserError, match="environment_setup_commit"):
        sb.grade_swebench(_task(partial), "log")


def test_swebench_log_parser_reads_the_test_statuses():
    statuses = {name: "PASSED" for name in F2P + P2P}
    statuses[F2P[1]] = "FAILED"
    parsed, usable = sb.parse_test_log(ASTROPY_ROW, _pytest_log(statuses))
    assert usable
    assert parsed == statuses


def test_resolved_when_every_fail_to_pass_and_pass_to_pass_test_passes():
    task = _task(ASTROPY_ROW)
    all_pass = sb.grade_swebench(task, _pytest_log({name: "PASSED" for name in F2P + P2P}))
    assert all_pass.reward == 1.0
    assert all_pass.details["verdict"] == "correct" and all_pass.details["reason"] == "resolved"
    assert all_pass.details["fail_to_pass"]["success"] == F2P

    one_fails = {name: "PASSED" for name in F2P + P2P} | {F2P[0]: "FAILED"}
    result = sb.grade_swebench(task, _pytest_log(one_fails))
    assert result.reward == 0.0 and result.details["reason"] == "tests-failed"
    assert result.details["fail_to_pass"]["failure"] == [F2P[0]]

    regression = {name: "PASSED" for name in F2P + P2P} | {P2P[2]: "FAILED"}
    assert sb.grade_swebench(task, _pytest_log(regression)).reward == 0.0

    not_run = {name: "PASSED" for name in F2P + P2P[:-1]}  # a PASS_TO_PASS test missing from the log
    assert sb.grade_swebench(task, _pytest_log(not_run)).reward == 0.0


def test_a_patch_that_does_not_apply_is_not_resolved():
    log = "+ git apply -v -\nerror: patch failed: astropy/modeling/separable.py:242\n>>>>> Patch Apply Failed\n"
    result = sb.grade_swebench(_task(ASTROPY_ROW), log)
    assert result.reward == 0.0 and result.details["reason"] == "patch-not-applied"


def test_django_log_graded_with_the_django_parser():
    log = "\n".join([
        START,
        "test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests) ... ok",
        "test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests) ... ok",
        "test_help_text (auth_tests.test_validators.UserAttributeSimilarityValidatorTest) ... ok",
        "", "Ran 3 tests in 0.004s", "", "OK", END,
    ])
    assert sb.grade_swebench(_task(DJANGO_ROW), log).reward == 1.0
    failing = log.replace("test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests) ... ok",
                          "test_unicode_validator (auth_tests.test_validators.UsernameValidatorsTests) ... FAIL")
    assert sb.grade_swebench(_task(DJANGO_ROW), failing).reward == 0.0


def test_predictions_in_swebench_format(tmp_path):
    response = "Here is the fix.\n```diff\ndiff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n```\nDone."
    patch = sb.extract_patch(response)
    assert patch.startswith("diff --git a/x.py") and patch.endswith("+b\n")
    assert sb.extract_patch("diff --git a/y b/y\n--- a/y\n+++ b/y\n") .startswith("diff --git a/y")
    assert sb.extract_patch("I cannot fix this.") is None
    path = sb.write_predictions(tmp_path / "predictions.jsonl",
                                [sb.prediction("astropy__astropy-12907", "my/model", patch),
                                 sb.prediction("django__django-11099", "my/model", None)])
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"instance_id": "astropy__astropy-12907", "model_name_or_path": "my/model", "model_patch": patch}
    assert lines[1]["model_patch"] == ""


def test_no_docker_engine_is_one_user_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    with pytest.raises(UserError) as caught:
        sb.require_docker()
    message = str(caught.value)
    assert message.startswith("no Docker engine reachable (") and message.endswith("SWE-bench evaluation needs one")
    assert "\n" not in message
