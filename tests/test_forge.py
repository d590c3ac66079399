"""The repository forge: instances resolve with their gold patch (real sandbox, swebench's parser),
fail without it, are reproducible, and drift keeps the repositories' own tests green."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sao_env.tasks import build_source
from sao_env.tasks.forge import (
    BUG_KINDS,
    ForgeConfig,
    ForgeSource,
    build_instance,
    materialize,
)
from sao_env.tasks.forge.drift import history
from sao_env.tasks.forge.grading import (
    apply_patch,
    clear_caches,
    grade_files,
    grade_forge,
    patched_paths,
    run_pytest,
    with_test_patch,
)
from sao_env.tasks.forge.instances import unified_diff
from sao_env.tasks.forge.repo import compiled, render, run_tests_in_process

SWEBENCH_FIELDS = {"instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch",
                   "FAIL_TO_PASS", "PASS_TO_PASS", "created_at", "version", "environment_setup_commit"}


def _source(**params) -> ForgeSource:
    return build_source("forge_repo", params)


@pytest.fixture(scope="module")
def tasks():
    """15 tasks: every bug kind three times, at heads 0 and 2, over two repository seeds."""
    out = []
    for k, kind in enumerate(BUG_KINDS):
        for j, head in enumerate((0, 2, 2 if k % 2 else 0)):
            source = _source(repo_seed=k % 2, head=head, bug_kinds=[kind], modules=2 + (j == 2))
            out.append(source.task(1000 * k + j, phase="p"))
    return out


@pytest.fixture(scope="module")
def verdicts(tasks):
    """(gold verdict, empty-patch verdict) per task, graded in the sandbox two at a time."""
    with ThreadPoolExecutor(2) as pool:
        gold = list(pool.map(lambda t: grade_forge(t, t.reference["patch"]), tasks))
        empty = list(pool.map(lambda t: grade_forge(t, ""), tasks))
    return list(zip(gold, empty))


def test_tasks_cover_every_bug_kind_and_two_heads(tasks):
    assert {t.metadata["bug_kind"] for t in tasks} == set(BUG_KINDS)
    assert {t.metadata["head"] for t in tasks} == {0, 2}
    assert len({t.reference["base_commit"] for t in tasks}) == len(tasks)


def test_gold_patch_resolves_every_instance(tasks, verdicts):
    for task, (gold, _) in zip(tasks, verdicts):
        assert gold.reward == 1.0, (task.id, gold.details)
        assert gold.details["reason"] == "resolved"
        assert set(gold.details["fail_to_pass"].values()) == {"PASSED"}


def test_empty_patch_resolves_none_and_every_kind_fails_a_fail_to_pass_test(tasks, verdicts):
    failing_kinds = set()
    for task, (_, empty) in zip(tasks, verdicts):
        assert empty.reward == 0.0, (task.id, empty.details)
        assert empty.details["reason"] == "tests-failed"
        assert "FAILED" in empty.details["fail_to_pass"].values()
        assert set(empty.details["pass_to_pass"].values()) <= {"PASSED"}
        failing_kinds.add(task.metadata["bug_kind"])
    assert failing_kinds == set(BUG_KINDS)


def test_the_test_patch_applied_once_per_instance_equals_applying_it_to_each_tree(tasks):
    for task in tasks[:6]:
        ref = task.reference
        bug, package = ref["bug"], ref["package"]
        lines = ref["files"][bug["path"]].splitlines()
        lines[bug["line"] - 1] = bug["fixed"]
        trees = [dict(ref["files"]), {**ref["files"], bug["path"]: "\n".join(lines) + "\n"},
                 {**ref["files"], f"{package}/extra.py": "X = 1\r\nY = 2\r"}]
        assert patched_paths(ref["test_patch"]) == {ref["test_patch"].split("\n")[0].split(" b/")[-1]}
        for tree in trees:
            assert with_test_patch(ref, tree) == apply_patch(tree, ref["test_patch"])
    ref = tasks[0].reference
    inside = dict(ref, test_patch=unified_diff(ref["bug"]["path"], ref["files"][ref["bug"]["path"]], "x = 1\n"))
    assert with_test_patch(inside, ref["files"]) == apply_patch(ref["files"], inside["test_patch"])
    broken = dict(ref, instance_id="broken", test_patch="--- a/tests/none.py\n+++ b/tests/none.py\n@@ -1 +1 @@\n-a\n+b\n")
    files, error = with_test_patch(broken, ref["files"])
    assert files is None and error
    assert patched_paths('diff --git "a/x y" "b/x y"\n--- "a/x y"\n+++ "b/x y"\n') is None


def test_a_verdict_holds_no_wall_clock_and_regrading_gives_the_same(tasks):
    ref = tasks[3].reference
    first = grade_files(ref, ref["files"])
    clear_caches()
    assert grade_files(ref, ref["files"]) == first
    assert first.reward == 0.0 and "duration_s" not in first.details


def test_fail_to_pass_fails_in_process_before_the_fix_and_passes_after(tasks):
    for task in tasks[:5]:
        ref = task.reference
        test_path = ref["test_patch"].split("\n")[0].split(" b/")[-1]
        issue = "\n".join(line[1:] for line in ref["test_patch"].splitlines() if line.startswith("+") and
                          not line.startswith("+++")) + "\n"
        broken = {**ref["files"], test_path: ref["files"][test_path] + issue}
        results = run_tests_in_process(broken, ref["package"])
        assert all(not results[t] for t in ref["FAIL_TO_PASS"])
        assert all(results[t] for t in ref["PASS_TO_PASS"])
        bug = ref["bug"]
        fixed_lines = broken[bug["path"]].splitlines()
        assert fixed_lines[bug["line"] - 1] == bug["buggy"]
        fixed_lines[bug["line"] - 1] = bug["fixed"]
        fixed = {**broken, bug["path"]: "\n".join(fixed_lines) + "\n"}
        assert all(run_tests_in_process(fixed, ref["package"]).values())


def test_instances_follow_swebench_schema_and_name_file_and_function(tasks):
    for task in tasks:
        ref = task.reference
        assert SWEBENCH_FIELDS <= set(ref)
        assert len(ref["base_commit"]) == 40 and ref["environment_setup_commit"] == ref["base_commit"]
        assert ref["patch"].startswith(f"diff --git a/{ref['bug']['path']} b/{ref['bug']['path']}\n")
        assert ref["test_patch"].startswith("diff --git a/tests/test_")
        assert all("::test_" in t and t.startswith("tests/test_") for t in ref["FAIL_TO_PASS"] + ref["PASS_TO_PASS"])
        assert any(t.endswith("_issue") for t in ref["FAIL_TO_PASS"])
        assert ref["bug"]["path"] in task.prompt and f"`{ref['bug']['function']}`" in task.prompt
        assert "expected" in ref["problem_statement"]
        assert len(task.prompt) < 400
        assert task.grader == "forge_tests" and task.env == "repo"
        assert {"source", "phase", "created_at", "bug_kind", "head"} <= set(task.metadata)
        assert all(len(text) < 600 for path, text in ref["files"].items() if not path.startswith("tests/"))
    row = ForgeSource(ForgeSource.Params()).instance(3).swebench_row()
    assert isinstance(json.loads(row["FAIL_TO_PASS"]), list) and row["created_at"].endswith("Z")


def test_forge_is_deterministic_per_seed(tmp_path):
    config = ForgeConfig(repo_seed=5, modules=3, functions_per_module=3)
    first = build_instance(config, 1, BUG_KINDS, 42)
    build_instance.cache_clear()
    history.cache_clear()
    render.cache_clear()
    compiled.cache_clear()
    again = build_instance(config, 1, BUG_KINDS, 42)
    assert first == again and first is not again
    assert build_instance(ForgeConfig(repo_seed=6, modules=3), 1, BUG_KINDS, 42).base_commit != first.base_commit
    assert build_instance(config, 1, BUG_KINDS, 43).base_commit != first.base_commit

    a = _source(repo_seed=5, head=1).sample(np.random.default_rng(9), phase="x", created_at=1.0, index=0)
    b = _source(repo_seed=5, head=1).sample(np.random.default_rng(9), phase="x", created_at=1.0, index=0)
    assert a == b

    shas = []
    for name in ("one", "two"):
        repo = materialize(first, tmp_path / name)
        shas.append(subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True,
                                   check=True).stdout.strip())
        log = subprocess.run(["git", "log", "--format=%s"], cwd=repo, capture_output=True, text=True,
                             check=True).stdout.splitlines()
        assert len(log) == 3 and log[-1].startswith("Initial commit")
        status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True,
                                check=True).stdout
        assert status == ""
    assert shas == [first.base_commit, first.base_commit]
    applied = subprocess.run(["git", "apply", "--check", "-"], input=first.patch, cwd=tmp_path / "one",
                             capture_output=True, text=True, check=False)
    assert applied.returncode == 0, applied.stderr


def test_drift_keeps_the_repository_tests_green_at_each_head():
    config = ForgeConfig(repo_seed=2)
    trees = [render(spec).files for spec, _ in history(config, 3)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda files: run_pytest(files, ["tests"], timeout_s=30), trees))
    for files, result in zip(trees, results):
        assert result.returncode == 0, result.stdout[-800:]
        count = sum(text.count("\ndef test_") for path, text in files.items() if path.startswith("tests/"))
        assert f"{count} passed" in result.stdout
        assert all(run_tests_in_process(files, next(iter(files)).split("/")[0]).values())


def test_drift_commits_rename_change_signatures_add_and_move_modules():
    config = ForgeConfig(repo_seed=4)
    commits = history(config, 4)
    messages = [commit.message for _, commit in commits[1:]]
    assert [m.split()[0] for m in messages[:1]] == ["Rename"]
    assert {m.split()[0] for m in messages} == {"Rename", "Add", "Move"}
    assert any(m.startswith("Add parameter") for m in messages) and any(m.startswith("Add module") for m in messages)

    old, new = messages[0].split()[1], messages[0].split()[3]
    before, after = render(commits[0][0]).files, render(commits[1][0]).files
    module, old_name = old.split(".")
    new_name = new.split(".")[1]
    assert f"def {old_name}(" in before[f"{commits[0][0].package}/{module}.py"]
    assert all(f"{old_name}(" not in text for text in after.values())
    assert f"def test_{new_name}(" in after[f"tests/test_{module}.py"]
    assert [c.parent for _, c in commits[1:]] == [c.sha for _, c in commits[:-1]]


def test_unknown_bug_kind_is_refused():
    with pytest.raises(ValueError):
        ForgeSource.Params(bug_kinds=["typo"])
    with pytest.raises(ValueError):
        ForgeSource.Params(frobnicate=1)


def test_a_repository_without_bugs_of_the_listed_kind_is_refused_when_built():
    params = {"repo_seed": 0, "head": 0, "modules": 2, "functions_per_module": 2}
    refused = []
    for seed in range(12):
        try:
            _source(**{**params, "repo_seed": seed, "bug_kinds": ["swapped_args"]})
        except ValueError as err:
            refused.append(str(err))
    assert refused and all("list more bug_kinds" in text for text in refused)
    assert _source(**{**params, "repo_seed": 0}).task(1).metadata["bug_kind"] in BUG_KINDS


def test_unified_diff_round_trips_through_git_apply(tmp_path):
    before, after = "a\nb\nc\n", "a\nB\nc\n"
    (tmp_path / "f.txt").write_text(before)
    patch = unified_diff("f.txt", before, after)
    subprocess.run(["git", "apply", "-"], input=patch, cwd=tmp_path, check=True, text=True)
    assert (tmp_path / "f.txt").read_text() == after
