"""bench/mutants.py's ``--operators hand``: the well-typed slips a person plants, each checked on a hand case."""

from __future__ import annotations

import ast
import json
import subprocess

import pytest

from conftest import load_bench

mutants = load_bench("mutants")

SOURCE = '''\
def pick(spec, window, global_window, rows):
    ready = spec.enabled and window > 0 or spec.forced
    head = rows[window:global_window]
    total = scale(window, global_window, lo=spec.min_tokens, hi=spec.max_tokens)
    return head, total, spec.max_new_tokens, len(rows)
'''


@pytest.fixture(scope="module")
def made():
    found = mutants.slips("m.py", SOURCE, set(range(1, 6)))
    return {(m.line, m.operator, mutants.apply(SOURCE, m).splitlines()[m.line - 1].strip()) for m in found}


def test_a_clause_of_and_or_is_left_out(made):
    assert (2, "drop clause", "ready = spec.enabled and window > 0") in made
    assert (2, "drop clause", "ready = spec.forced") in made
    assert (2, "drop clause", "ready = window > 0 or spec.forced") in made
    assert (2, "drop clause", "ready = spec.enabled or spec.forced") in made


def test_arguments_and_slice_bounds_are_swapped(made):
    assert (3, "swap slice", "head = rows[global_window:window]") in made
    assert (4, "swap args", "total = scale(global_window, window, lo=spec.min_tokens, hi=spec.max_tokens)") in made
    assert (4, "swap lo=/hi=", "total = scale(window, global_window, lo=spec.max_tokens, hi=spec.min_tokens)") in made


def test_a_name_or_attribute_becomes_the_most_similar_one_that_exists(made):
    assert (3, "other name", "head = rows[global_window:global_window]") in made
    assert (3, "other name", "head = rows[window:window]") in made
    assert (5, "other attribute", "return head, total, spec.max_tokens, len(rows)") in made
    assert (4, "other attribute", "total = scale(window, global_window, lo=spec.min_tokens, hi=spec.max_new_tokens)") in made


def test_only_names_the_function_binds_are_replaced():
    found = mutants.slips("m.py", SOURCE, {5})
    assert {m.old for m in found if m.operator == "other name"} <= {"head", "total", "rows"}
    assert not any(m.old == "len" for m in found)


def test_every_slip_changes_the_tree_and_only_its_own_line():
    tree = ast.dump(ast.parse(SOURCE))
    found = mutants.slips("m.py", SOURCE, {3})
    assert found and all(m.line == 3 for m in found)
    for m in found:
        changed = mutants.apply(SOURCE, m)
        assert mutants.changes_the_tree(tree, changed)
        assert [a for a, b in zip(SOURCE.splitlines(), changed.splitlines()) if a != b] == [SOURCE.splitlines()[2]]


def test_columns_count_characters_after_non_ascii_text():
    source = 'def f(alpha, alphas):\n    note = "é→"; return g(alpha, alphas)\n'
    found = mutants.slips("m.py", source, {2})
    swapped = [m for m in found if m.operator == "swap args"]
    assert swapped and mutants.apply(source, swapped[0]).splitlines()[1].endswith("return g(alphas, alpha)")


def test_bugs_planted_by_hand_are_read_against_the_named_commit(tmp_path):
    """``--planted``: each change is checked against the file at the commit; ``old`` once on its line."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    source = subprocess.run(["git", "show", f"{head}:sao_env/errors.py"], capture_output=True, text=True,
                            check=True).stdout.splitlines()
    line = next(i for i, text in enumerate(source, 1) if "n=3, cutoff=0.6" in text)
    planted = tmp_path / "planted.jsonl"
    good = {"file": "sao_env/errors.py", "line": line, "old": "cutoff=0.6", "new": "cutoff=0.9", "why": "stricter"}
    planted.write_text(json.dumps(good) + "\n")
    [mutant] = mutants.read_planted(planted, head)
    assert (mutant.line, mutant.old, mutant.new, mutant.operator) == (line, "cutoff=0.6", "cutoff=0.9", "planted: stricter")
    assert source[line - 1][mutant.col:].startswith("cutoff=0.6")
    for bad, message in (({**good, "old": "cutoff=0.7"}, "is not once"), ({**good, "old": "n", "new": "m"}, "is not once"),
                         ({**good, "new": "cutoff=0.6 "}, "does not change")):
        planted.write_text(json.dumps(bad) + "\n")
        with pytest.raises(ValueError, match=message):
            mutants.read_planted(planted, head)


def test_a_catch_is_a_test_that_passes_without_the_change(tmp_path):
    """A test that fails on the unchanged code too (a missing data folder, say) is no catch: it is deselected and
    the tests run again, so only a test that the change breaks catches it."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a_broken.py").write_text("def test_needs_data():\n    assert False\n")
    (tmp_path / "tests" / "test_b_value.py").write_text("from value import VALUE\n\n\ndef test_value():\n"
                                                        "    assert VALUE == 1\n")
    target = tmp_path / "value.py"
    original = "VALUE = 1\n"
    target.write_text(original)
    tests = ["tests/test_a_broken.py", "tests/test_b_value.py"]
    outcome, tail, broken = mutants._caught_by(tests, target, original, "VALUE = 2\n", tmp_path, 120)
    assert (outcome, broken) == ("caught", ["tests/test_a_broken.py::test_needs_data"])
    assert "tests/test_b_value.py::test_value" in tail and target.read_text() == original
    outcome, _, broken = mutants._caught_by(tests, target, original, "VALUE = 1  # same\n", tmp_path, 120)
    assert (outcome, broken) == ("survived", ["tests/test_a_broken.py::test_needs_data"])


def test_a_resumed_round_first_undoes_the_change_a_killed_round_left_planted(tmp_path):
    def git(*args):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    git("init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("X = 1\n")
    (tmp_path / "pkg" / "b.py").write_text("Y = 2\n")
    git("add", "-A")
    git("commit", "-qm", "c")
    assert mutants.restore_worktree(tmp_path) == []
    (tmp_path / "pkg" / "b.py").write_text("Y = 3\n")
    (tmp_path / "stray.txt").write_text("not tracked")
    assert mutants.restore_worktree(tmp_path) == ["pkg/b.py"]
    assert (tmp_path / "pkg" / "b.py").read_text() == "Y = 2\n" and (tmp_path / "pkg" / "a.py").read_text() == "X = 1\n"
    assert (tmp_path / "stray.txt").exists()
