"""swebench's own evaluation, run for real on a procedural instance: the forge's repository in SWE-bench
form, its instance image built from the local sandbox image (no registry), the patch applied and the
tests run in a container by ``swebench.harness.run_evaluation``, the log graded by swebench's parser and
report. The one step of SWE-bench Verified these tests do not run is the registry pull of its images
(docs/coding.md). Needs an engine as tests/test_docker_sandbox.py does (make test provides one).
"""

from __future__ import annotations


import pytest

from sao_env.errors import UserError
from docker_support import built_image, require_engine  # noqa: E402

pytest.importorskip("swebench.harness.run_evaluation", reason="the optional swebench extra (4.x) is not installed")
require_engine()

from sao_env.benchmarks import swebench as sb  # noqa: E402
from sao_env.sandbox.images import client  # noqa: E402
from sao_env.tasks.forge.grading import grade_forge  # noqa: E402
from sao_env.tasks.forge.source import ForgeParams, ForgeSource  # noqa: E402


@pytest.fixture(scope="module")
def instance():
    """A head-1 operator bug of the codebase-drift repository, as a SWE-bench task with its image."""
    built_image()
    task = ForgeSource(ForgeParams(repo_seed=0, head=1, bug_kinds=["operator_swap"])).task(11)
    swe = sb.forge_task(task)
    return task, swe, sb.build_forge_image(swe)


def test_swebench_harness_evaluates_a_forge_instance_in_a_container(instance, tmp_path):
    task, swe, image = instance
    assert image == f"sao-env/sweb.eval.x86_64.{task.id.replace('__', '_1776_')}:latest"
    ref = task.reference
    wrong = ref["patch"].replace("\n+" + ref["bug"]["fixed"], "\n+    return None")
    assert wrong != ref["patch"]
    for name, patch in (("gold", ref["patch"]), ("wrong", wrong)):
        graded = sb.run_harness([swe], [sb.prediction(swe.id, name, patch)], workdir=tmp_path / name, run_id=name,
                                max_workers=1, timeout_s=120)[swe.id]
        log = tmp_path / name / "logs" / "run_evaluation" / name / name / swe.id / "test_output.txt"
        assert ">>>>> Start Test Output" in log.read_text()  # swebench's own eval script ran in the container
        assert (graded.reward, graded.details["patch_applied"]) == (1.0 if name == "gold" else 0.0, True)
        assert graded.reward == grade_forge(task, patch).reward  # the forge grader (bubblewrap) agrees
    assert client().containers.list(all=True, filters={"name": f"sweb.eval.{swe.id}"}) == []


def test_swebench_env_plays_a_forge_instance_in_its_container(instance):
    from sao_env.envs.swebench_env import SWEBenchEnv

    task, swe, _ = instance
    bug = task.reference["bug"]
    env = SWEBenchEnv(max_turns=6)
    try:
        env.reset(seed=0, options={"task": swe})
        assert env.step(f"view {bug['path']}")[0].splitlines()[bug["line"] - 1] == f"{bug['line']}|{bug['buggy']}"
        assert env.step(f"edit {bug['path']} {bug['line']}\n{bug['fixed']}")[0].startswith("ok\n")
        assert "passed" in env.step("run_tests")[0]
        _, reward, terminated, _, info = env.step("submit")
    finally:
        env.close()
    assert terminated and reward == 1.0 and info["grade"]["reason"] == "resolved"
    assert bug["fixed"].strip() in info["grade"]["model_patch"]


def test_a_missing_verified_image_is_one_line_naming_it():
    image = "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest"
    with pytest.raises(UserError) as caught:
        sb.require_instance_image(client(), image)
    assert str(caught.value) == (f"the SWE-bench instance image {image} is not here: docker pull {image} "
                                 "(from the SWE-bench registry on Docker Hub)")


def test_the_harness_grades_forgeries_of_a_forge_instance_zero(instance, tmp_path):
    """Through swebench's own harness: printed PASSED lines, a conftest that passes every report and a
    patched runner grade 0 (the reporter's signed records decide), the gold patch 1."""
    from forgery_patches import ATTACKS
    from sao_env.tasks.forge import report

    task, swe, _ = instance
    ref = task.reference
    expected = {"printed_at_exit": "tests-failed", "conftest_added": "tests-failed", "report_patched": "runner-tampered"}
    for name, reason in expected.items():
        hostile = ATTACKS[name][0](ref)
        patch = "".join(_diff(path, ref["files"].get(path), text) for path, text in sorted(hostile.items())
                        if ref["files"].get(path) != text)
        graded = sb.run_harness([swe], [sb.prediction(swe.id, name, patch)], workdir=tmp_path / name, run_id=name,
                                max_workers=1, timeout_s=120)[swe.id]
        log = (tmp_path / name / "logs" / "run_evaluation" / name / name / swe.id / "test_output.txt").read_text()
        assert (graded.reward, graded.details["reason"], graded.details["patch_applied"]) == (0.0, reason, True), name
        if name == "printed_at_exit":  # swebench's parser alone would have called it resolved
            assert sb.parse_test_log(sb.instance_row(swe), log)[0][ref["FAIL_TO_PASS"][0]] == "PASSED"
        assert report.process_key().decode() not in log  # the key is written untraced


def _diff(path: str, before: str | None, after: str) -> str:
    """A git diff of one file, a new file when ``before`` is None."""
    import difflib

    from sao_env.tasks.forge.instances import unified_diff

    if before is not None:
        return unified_diff(path, before, after)
    body = "".join(difflib.unified_diff([], after.splitlines(keepends=True), fromfile="/dev/null", tofile=f"b/{path}"))
    return f"diff --git a/{path} b/{path}\nnew file mode 100644\n{body}"
