"""Olympiad-style generators and the benchmark stream, checked with the real math grader and real rows."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sao_env.errors import UserError
from sao_env.graders.math import grade_math_batch
from sao_env.tasks import build_source
from sao_env.tasks.benchmark_stream import BenchmarkSource, split_ids
from sao_env.tasks.olympiad import (
    CATEGORIES,
    TEMPLATES,
    OlympiadSource,
    heron_area,
    polynomial_from_roots,
    render_fraction,
    render_polynomial,
    slipped_answer,
)

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark rows not found at {DATA} (../shared/data)")


def olympiad(**params) -> OlympiadSource:
    return build_source("olympiad", params)


def draw(source, seed: int, count: int) -> list:
    rng = np.random.default_rng(seed)
    return [source.sample(rng, phase="p0", created_at=1.5, index=i) for i in range(count)]


def wrong_answer(answer: str) -> str:
    return str(int(answer) + 1) if re.fullmatch(r"-?\d+", answer) else f"{answer}+1"


# ----------------------------------------------------------------------------- olympiad generators


def test_every_generated_problem_grades_one_when_right_and_zero_when_wrong():
    tasks = []
    for difficulty in (1, 2):
        for seed, category in enumerate(CATEGORIES):
            tasks += draw(olympiad(categories=[category], difficulty=difficulty), 100 * difficulty + seed, 40)
    assert {t.metadata["category"] for t in tasks} == set(CATEGORIES)
    rng = np.random.default_rng(0)
    right = [(t, olympiad().demonstrate(t, rng)) for t in tasks]
    wrong = [(t, f"\\boxed{{{wrong_answer(t.reference['answer'])}}}") for t in tasks]
    results = grade_math_batch(right + wrong)
    failures = [(t.prompt, t.reference["answer"], r.details["reason"])
                for (t, _), r in zip(right, results[: len(tasks)]) if r.reward != 1.0]
    assert not failures, failures[:5]
    accepted = [(t.prompt, response) for (t, response), r in zip(wrong, results[len(tasks):]) if r.reward != 0.0]
    assert not accepted, accepted[:5]


# An independent solver: reads each prompt's text and answers it by brute force or sympy, so a
# generator whose reference answer is wrong fails here (the demonstration alone is the reference).

def _expr(text: str):
    """Parse ``x^3-6x^2+11x-6`` (implicit products, ``^`` as power) with sympy."""
    from sympy.parsing.sympy_parser import (
        convert_xor,
        implicit_multiplication_application,
        parse_expr,
        standard_transformations,
    )

    transformations = standard_transformations + (implicit_multiplication_application, convert_xor)
    return parse_expr(text, transformations=transformations)


def _ints(prompt: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", prompt)]


def _roots_with_multiplicity(prompt: str) -> list:
    import sympy

    polynomial = _expr(re.search(r"roots of (.+)=0\?", prompt).group(1))
    return [r for r, m in sympy.roots(sympy.Poly(polynomial, sympy.Symbol("x"))).items() for _ in range(m)]


def solve_independently(template: str, prompt: str):
    import itertools

    import sympy

    x, numbers = sympy.Symbol("x"), _ints(prompt)
    if template == "sum_of_roots":
        return sum(_roots_with_multiplicity(prompt))
    if template == "product_of_roots":
        return sympy.prod(_roots_with_multiplicity(prompt))
    if template == "linear_equation":
        left, right = re.search(r"Solve (.+) for x", prompt).group(1).split("=")
        return sympy.solve(sympy.Eq(_expr(left), _expr(right)), x)[0]
    if template == "polynomial_value":
        body, at = re.search(r"f\(x\)=(.+)\. Find f\((-?\d+)\)", prompt).groups()
        return _expr(body).subs(x, int(at))
    if template == "arithmetic_series":
        count, a, b = numbers[0], numbers[1], numbers[2]
        return sum(a + i * (b - a) for i in range(count))
    if template == "geometric_term":
        position = numbers[0]
        terms = [int(t) for t in re.search(r"sequence (.+), \.\.\.", prompt).group(1).split(", ")]
        return terms[0] * sympy.Rational(terms[1], terms[0]) ** (position - 1)
    if template == "binomial":
        n, k = numbers
        return sum(1 for _ in itertools.combinations(range(n), k))
    if template == "arrangements":
        if "books" in prompt:
            return sympy.factorial(numbers[0])
        word = re.search(r"letters (\w+)\?", prompt).group(1)
        return sympy.factorial(len(word)) / sympy.prod([sympy.factorial(word.count(c)) for c in set(word)])
    if template == "grid_paths":
        a, b = numbers[2], numbers[3]
        ways = [[1] * (b + 1) for _ in range(a + 1)]
        for i, j in itertools.product(range(1, a + 1), range(1, b + 1)):
            ways[i][j] = ways[i - 1][j] + ways[i][j - 1]
        return ways[a][b]
    if template == "handshakes":
        return sum(1 for _ in itertools.combinations(range(numbers[0]), 2))
    if template == "nonempty_subsets":
        return sum(1 for size in range(1, numbers[0] + 1) for _ in itertools.combinations(range(numbers[0]), size))
    if template == "divisible_by_either":
        _, n, a, b = numbers
        return sum(1 for i in range(1, n + 1) if i % a == 0 or i % b == 0)
    if template == "right_triangle_area":
        return sympy.Rational(numbers[0] * numbers[1], 2)
    if template == "hypotenuse":
        return sympy.sqrt(numbers[0] ** 2 + numbers[1] ** 2)
    if template == "interior_angles":
        return (numbers[0] - 2) * 180
    if template == "diagonals":
        n = numbers[0]
        return sum(1 for i, j in itertools.combinations(range(n), 2) if (j - i) % n not in (1, n - 1))
    if template == "circle_area":
        radii = numbers
        return sympy.pi * (radii[0] ** 2 if len(radii) == 1 else radii[1] ** 2 - radii[0] ** 2)
    if template == "heron":
        a, b, c = numbers
        s = sympy.Rational(a + b + c, 2)
        return sympy.sqrt(s * (s - a) * (s - b) * (s - c))
    if template == "gcd":
        return sympy.gcd(numbers)
    if template == "lcm":
        return sympy.lcm(numbers)
    if template in ("remainder",):
        return numbers[0] % numbers[1]
    if template == "divisor_count":
        return len(sympy.divisors(numbers[0]))
    if template in ("power_mod", "power_last_digits"):
        base, exponent, modulus = numbers
        return sympy.Integer(base) ** exponent % modulus
    if template == "digit_sum":
        return sum(int(ch) for ch in str(numbers[0]))
    if template == "count_multiples":
        n, k = numbers[1], numbers[2]
        excluded = numbers[3] if "but not" in prompt else None
        return sum(1 for i in range(1, n + 1) if i % k == 0 and (excluded is None or i % excluded))
    if template == "fraction_sum":
        a, b, c, d = numbers[:4]
        total = sympy.Rational(a, b) + sympy.Rational(c, d)
        return total.p + total.q
    if template == "triangular_mod":
        total = sum(range(1, numbers[2] + 1))
        return total % 1000 if "Remainder" in prompt else total
    if template == "divisor_sum":
        return sum(sympy.divisors(numbers[0]))
    raise AssertionError(f"no independent solver for template {template!r}")


def test_reference_answers_agree_with_an_independent_solver():
    import sympy

    tasks = []
    for difficulty in (1, 2, 3):
        tasks += draw(olympiad(difficulty=difficulty), 40 + difficulty, 250)
    assert {t.metadata["template"] for t in tasks} == {n for templates in TEMPLATES.values() for n in templates}
    pairs = [(t, f"\\boxed{{{sympy.latex(solve_independently(t.metadata['template'], t.prompt))}}}") for t in tasks]
    disagreements = [(t.prompt, t.reference["answer"], response)
                     for (t, response), r in zip(pairs, grade_math_batch(pairs)) if r.reward != 1.0]
    assert not disagreements, disagreements[:5]


def test_task_fields_prompt_shape_and_aime_range():
    tasks = draw(olympiad(), 7, 300)
    for task in tasks:
        assert task.grader == "math" and task.env == "text"
        assert set(task.metadata) == {"source", "phase", "created_at", "category", "template", "difficulty"}
        assert task.metadata["source"] == "olympiad" and task.metadata["phase"] == "p0"
        assert task.metadata["created_at"] == 1.5 and task.metadata["difficulty"] == 1
        assert task.metadata["template"] in TEMPLATES[task.metadata["category"]]
        assert isinstance(task.prompt, str) and task.prompt.endswith("\n") and len(task.prompt) <= 120
        assert set(task.reference) == {"answer"} and isinstance(task.reference["answer"], str)
        assert olympiad().demonstrate(task, np.random.default_rng(0)) == f"\\boxed{{{task.reference['answer']}}}"
        if task.metadata["category"] == "aime":
            assert 0 <= int(task.reference["answer"]) <= 999
    assert len({t.id for t in tasks}) == len(tasks)
    for difficulty in (2, 3, 5):
        for task in draw(olympiad(categories=["aime"], difficulty=difficulty), difficulty, 200):
            assert 0 <= int(task.reference["answer"]) <= 999, task.prompt


def test_every_template_is_drawn_and_categories_follow_the_weights():
    tasks = draw(olympiad(), 3, 1000)
    seen = Counter((t.metadata["category"], t.metadata["template"]) for t in tasks)
    assert set(seen) == {(c, name) for c, templates in TEMPLATES.items() for name in templates}
    assert all(len(templates) >= 5 for templates in TEMPLATES.values())
    weighted = draw(olympiad(categories=["geometry", "aime"], weights=[3.0, 0.0]), 3, 50)
    assert {t.metadata["category"] for t in weighted} == {"geometry"}


def test_same_seed_same_tasks_and_another_seed_other_tasks():
    source = olympiad(difficulty=2)
    assert draw(source, 11, 60) == draw(source, 11, 60)
    assert [t.prompt for t in draw(source, 11, 60)] != [t.prompt for t in draw(source, 12, 60)]


def _largest_number(prompt: str) -> int:
    return max((int(n) for n in re.findall(r"\d+", prompt)), default=0)


def test_difficulty_changes_the_numbers():
    for category in CATEGORIES:
        sizes = {}
        for difficulty in (1, 3):
            tasks = draw(olympiad(categories=[category], difficulty=difficulty), 5, 150)
            sizes[difficulty] = np.mean([_largest_number(t.prompt) for t in tasks])
            assert all(t.metadata["difficulty"] == difficulty for t in tasks)
        assert sizes[3] > sizes[1], (category, sizes)
    easy = draw(olympiad(categories=["algebra"], difficulty=1), 9, 100)
    hard = draw(olympiad(categories=["algebra"], difficulty=3), 9, 100)
    assert not any("x^3" in t.prompt for t in easy)
    assert any("x^3" in t.prompt for t in hard)  # more steps: cubics instead of quadratics


def test_params_are_validated():
    with pytest.raises(ValueError, match="categories"):
        olympiad(categories=["topology"])
    with pytest.raises(ValueError, match="weights"):
        olympiad(categories=["algebra", "geometry"], weights=[1.0])
    with pytest.raises(ValueError):
        olympiad(difficulty=0)
    with pytest.raises(ValueError, match="Extra inputs"):
        olympiad(level=2)
    with pytest.raises(ValueError, match="slip_share"):
        olympiad(slip_share=1.0)


def test_slips_are_each_categorys_own_and_written_like_answers():
    # combinatorics +1, number theory -1, geometry x2, algebra sign, aime +1
    assert slipped_answer("combinatorics", "10") == "11" and slipped_answer("number_theory", "6") == "5"
    assert slipped_answer("geometry", "9\\pi") == "18\\pi" and slipped_answer("geometry", "\\pi") == "2\\pi"
    assert slipped_answer("geometry", "\\frac{15}{2}") == "15"  # the dropped 1/2 of a triangle's area
    assert slipped_answer("algebra", "\\frac{10}{3}") == "-\\frac{10}{3}" and slipped_answer("algebra", "-3") == "3"
    assert slipped_answer("aime", "999") == "1000"


def test_slipped_demonstrations_grade_zero_at_the_stated_share():
    source = olympiad(categories=["combinatorics", "geometry", "number_theory"], slip_share=0.6)
    tasks = draw(source, 3, 400)
    rng = np.random.default_rng(0)
    results = grade_math_batch([(t, source.demonstrate(t, rng)) for t in tasks])
    right = sum(r.reward for r in results) / len(tasks)
    assert 0.33 <= right <= 0.47, right  # 0.4 expected; binomial sd 0.024 over 400
    slips = [(t, r) for t, r in zip(tasks, results) if r.reward == 0.0]
    rng = np.random.default_rng(0)
    demos = [source.demonstrate(t, rng) for t in tasks]
    assert all(d == f"\\boxed{{{slipped_answer(t.metadata['category'], t.reference['answer'])}}}"
               for (t, _), d in zip(slips, [demos[tasks.index(t)] for t, _ in slips]))
    assert all(olympiad().demonstrate(t, rng) == f"\\boxed{{{t.reference['answer']}}}" for t in tasks[:50])


def test_rendering_helpers():
    assert render_polynomial(polynomial_from_roots([2, 3])) == "x^2-5x+6"
    assert render_polynomial(polynomial_from_roots([1, 2, 3])) == "x^3-6x^2+11x-6"
    assert render_polynomial([1, 0, -1]) == "x^2-1" and render_polynomial([-1, 1]) == "-x+1"
    assert render_fraction(6) == "6" and render_fraction(-5) == "-5"
    from fractions import Fraction

    assert render_fraction(Fraction(-5, 3)) == "-\\frac{5}{3}"
    assert heron_area(13, 14, 15) == 84
    with pytest.raises(ValueError):
        heron_area(2, 3, 4)


# ----------------------------------------------------------------------------- benchmark stream


def stream(**params) -> BenchmarkSource:
    return build_source("benchmark", {"data": str(DATA), **params})


@needs_data
@pytest.mark.parametrize("suite, rows", [("imo_answerbench", 400), ("beyondaime", 100), ("hmmt", 90),
                                         ("hmmt_feb_2025", 30)])
def test_split_is_disjoint_complete_and_sized(suite, rows):
    source = stream(suite=suite)
    manifest = source.manifest()
    train, heldout = set(manifest["train_ids"]), set(manifest["heldout_ids"])
    assert manifest["suite"] == suite and manifest["split_seed"] == 0
    assert not train & heldout
    assert len(train) + len(heldout) == rows == len(train | heldout) == len(source.tasks)
    assert len(heldout) == round(0.2 * rows)


@needs_data
def test_split_is_fixed_by_the_seed_and_independent_of_row_order():
    first, again = stream(suite="imo_answerbench"), stream(suite="imo_answerbench")
    other = stream(suite="imo_answerbench", split_seed=1)
    assert first.manifest() == again.manifest()
    assert set(first.heldout_ids) != set(other.heldout_ids)
    tasks = list(first.tasks.values())
    _, heldout_reversed = split_ids(tasks[::-1], 0.2, 0)
    assert set(heldout_reversed) == set(first.heldout_ids)
    per_category = Counter(first.tasks[i].metadata["category"] for i in first.heldout_ids)
    assert per_category == {"Algebra": 20, "Combinatorics": 20, "Geometry": 20, "Number theory": 20}


@needs_data
def test_sample_draws_train_and_sample_heldout_cycles_the_heldout_split():
    source = stream(suite="hmmt")
    rng = np.random.default_rng(0)
    drawn = [source.sample(rng, phase="train", created_at=2.0, index=i) for i in range(300)]
    assert {t.id for t in drawn} <= set(source.train_ids)
    assert len({t.id for t in drawn}) > len(source.train_ids) // 2
    held = [source.sample_heldout(rng, phase="eval", created_at=0.0, index=i) for i in range(len(source.heldout_ids))]
    assert [t.id for t in held] == source.heldout_ids
    assert source.sample_heldout(rng, phase="eval", created_at=0.0, index=len(held)).id == held[0].id
    task = drawn[0]
    assert task.grader == "math" and task.env == "text" and set(task.reference) == {"answer"}
    assert task.metadata["source"] == "benchmark" and task.metadata["phase"] == "train"
    assert task.metadata["created_at"] == 2.0 and task.metadata["suite"].startswith("hmmt")
    assert task.id.split("/")[0] in {"hmmt_feb_2024", "hmmt_feb_2025", "hmmt_nov_2025"}
    assert "\\boxed{}" in task.prompt


@needs_data
def test_category_filter_keeps_only_those_rows():
    source = stream(suite="imo_answerbench", categories=["number_theory", "Geometry"])
    categories = Counter(t.metadata["category"] for t in source.tasks.values())
    assert categories == {"Number theory": 100, "Geometry": 100}
    rng = np.random.default_rng(1)
    assert all(source.sample(rng, phase="p", created_at=0.0, index=i).metadata["category"] in categories
               for i in range(50))
    with pytest.raises(UserError, match="categories present: algebra"):
        stream(suite="imo_answerbench", categories=["topology"])


@needs_data
def test_demonstrations_grade_one():
    source = stream(suite="beyondaime")
    rng = np.random.default_rng(0)
    tasks = [source.tasks[i] for i in source.train_ids]
    results = grade_math_batch([(t, source.demonstrate(t, rng)) for t in tasks])
    assert all(r.reward == 1.0 for r in results)


@needs_data
def test_no_heldout_when_the_fraction_is_zero():
    source = stream(suite="beyondaime", heldout_fraction=0.0)
    assert len(source.train_ids) == 100 and source.heldout_ids == []
    with pytest.raises(ValueError, match="holds out no rows"):
        source.sample_heldout(np.random.default_rng(0), phase="p", created_at=0.0, index=0)


def test_missing_data_and_unknown_suites_are_user_errors(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="no such file or folder"):
        build_source("benchmark", {"suite": "beyond_aime", "data": str(tmp_path / "absent")})
    with pytest.raises(UserError, match="unknown benchmark suite"):
        build_source("benchmark", {"suite": "aime_1983"})
    with pytest.raises(UserError, match="math grader"):
        build_source("benchmark", {"suite": "swebench_verified"})
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    monkeypatch.delenv("SAO_ENV_DATA", raising=False)  # the tests' local mirror would answer instead
    with pytest.raises(UserError, match="cannot reach the Hugging Face hub") as caught:
        build_source("benchmark", {"suite": "hmmt_feb_2024"})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("scenario_name", ["topic-drift", pytest.param("benchmark-stream", marks=needs_data)])
def test_grader_agrees_with_the_reference_on_every_held_out_problem(scenario_name):
    from sao_env.envs.text_env import load_scenario

    scenario = load_scenario(scenario_name)
    tasks = [t for tasks in scenario.eval_sets.values() for t in tasks]
    results = grade_math_batch([(t, f"\\boxed{{{t.reference['answer']}}}") for t in tasks])
    disagree = [(t.id, t.reference["answer"]) for t, r in zip(tasks, results) if r.reward != 1.0]
    assert not disagree, disagree


@needs_data
def test_benchmark_stream_run_never_evaluates_on_training_problems(tmp_path):
    import json

    from sao_env.experiment import resolve_config, run_experiment

    overrides = ["env.warm_start.steps=0", "env.max_new_tokens=4", "env.eval.prompts_per_phase=2",
                 "env.eval.interval_h=1", *(f"env.phases.{i}.duration_h=0.002" for i in range(6))]
    config = resolve_config("benchmark-stream", "grpo", 0, overrides)
    run_experiment(config, tmp_path, show_progress=False, save_checkpoint=False)
    splits = json.loads((tmp_path / "splits.json").read_text())
    assert len(splits) == 6
    for manifest in splits.values():
        assert manifest["train_ids"] and manifest["heldout_ids"]
        assert not set(manifest["train_ids"]) & set(manifest["heldout_ids"])
    by_phase = {}
    for line in (tmp_path / "episodes.jsonl").read_text().splitlines():
        episode = json.loads(line)
        by_phase.setdefault(episode["phase"], set()).add(episode["task"])
    assert by_phase
    from sao_env.scenario import Scenario

    eval_sets = Scenario(config.env).eval_sets
    for key, manifest in splits.items():
        phase = key.split("/")[0]
        assert by_phase.get(phase, set()) <= set(manifest["train_ids"])
        assert {t.id for t in eval_sets[phase]} <= set(manifest["heldout_ids"])
