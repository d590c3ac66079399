"""Benchmark metrics against hand-computed values (the arithmetic is in the comments)."""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np

import pytest

from sao_env.benchmarks.metrics import (
    avg_at_k,
    by_category,
    ci_half_width_95,
    confidence_interval_95,
    pass_at_k,
    pass_at_k_one,
    pass_at_k_table,
    summarize_scores,
    token_stats,
)


def test_avg_at_k_is_the_mean_of_per_problem_accuracies():
    # problems: 3/4, 1/4, 0/4 correct -> (0.75 + 0.25 + 0) / 3 = 1/3
    assert avg_at_k([3, 1, 0], [4, 4, 4]) == pytest.approx(1 / 3)
    # uneven sample counts: (1/2 + 2/2) / 2 = 0.75 (each problem weighs the same)
    assert avg_at_k([1, 2], [2, 2]) == pytest.approx(0.75)


def test_pass_at_k_by_hand():
    # n=4, c=1, k=2: 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    assert pass_at_k_one(4, 1, 2) == pytest.approx(0.5)
    # n=5, c=2, k=3: 1 - C(3,3)/C(5,3) = 1 - 1/10 = 0.9
    assert pass_at_k_one(5, 2, 3) == pytest.approx(0.9)
    # n=4, c=3, k=2: n - c = 1 < k -> every pair holds a correct sample
    assert pass_at_k_one(4, 3, 2) == 1.0
    assert pass_at_k_one(4, 0, 4) == 0.0
    # pass@1 equals the fraction correct
    assert pass_at_k_one(16, 5, 1) == pytest.approx(5 / 16)
    with pytest.raises(ValueError):
        pass_at_k_one(2, 1, 3)


def test_pass_at_k_matches_enumerating_all_k_subsets():
    # reference: the fraction of k-subsets of the n samples that contain a correct one
    for n in range(1, 8):
        for c in range(0, n + 1):
            samples = [1] * c + [0] * (n - c)
            for k in range(1, n + 1):
                subsets = list(combinations(samples, k))
                expected = sum(1 for s in subsets if any(s)) / len(subsets)
                assert pass_at_k_one(n, c, k) == pytest.approx(expected)


def test_pass_at_k_table_and_average():
    # problems (n=4): c = 4, 2, 0 -> pass@1 = (1 + .5 + 0)/3 = .5
    # pass@2: 1, 1 - C(2,2)/C(4,2) = 1 - 1/6 = 5/6, 0 -> (1 + 5/6 + 0)/3 = 11/18
    # pass@4: 1, 1, 0 -> 2/3
    table = pass_at_k_table([4, 2, 0], [4, 4, 4])
    assert list(table) == ["1", "2", "4"]
    assert table["1"] == pytest.approx(0.5)
    assert table["2"] == pytest.approx(11 / 18)
    assert table["4"] == pytest.approx(2 / 3)
    assert pass_at_k([4, 2, 0], [4, 4, 4], 2) == pytest.approx(11 / 18)
    assert list(pass_at_k_table([1], [6])) == ["1", "2", "4", "6"]


def test_the_wilson_interval_by_hand():
    # z = 1.959964, z^2 = 3.841459. p = 0, n = 3 (0 of 3 problems): centre = (z^2 / 6) / (1 + z^2 / 3)
    # = 0.640243 / 2.280486 = 0.280748 = half-width, so [0, 0.561497], not the t-interval's [0, 0]
    assert confidence_interval_95([0.0, 0.0, 0.0]) == (0.0, pytest.approx(0.5614970, abs=1e-6))
    # p = .5, n = 3: centre .5, half = z / 2.280486 * sqrt(.25 / 3 + z^2 / 36) = .859451 * .435936 = .374666
    low, high = confidence_interval_95([1.0, 0.5, 0.0])
    assert (low, high) == (pytest.approx(0.1253345, abs=1e-6), pytest.approx(0.8746655, abs=1e-6))
    assert ci_half_width_95([1.0, 0.5, 0.0]) == pytest.approx(0.3746655, abs=1e-6)
    # all correct on 2 problems: [1 / (1 + z^2 / 2), 1] = [0.342380, 1]
    assert confidence_interval_95([1.0, 1.0]) == (pytest.approx(1 / (1 + 1.959963984540054 ** 2 / 2), abs=1e-9), 1.0)
    # p = .5 at n = 10 and 30 (a HMMT suite): half = z / (1 + z^2/n) * sqrt(.25 / n + z^2 / (4 n^2))
    for n, expected in ((10, 0.7634069), (30, 0.6684587)):
        assert confidence_interval_95([0.0, 1.0] * (n // 2))[1] == pytest.approx(expected, abs=1e-6)
    assert confidence_interval_95([]) == (None, None) and ci_half_width_95([]) is None
    # one problem still has an interval: [0.5] -> centre .5, half = z / (1 + z^2) * sqrt(.25 + z^2 / 4)
    assert ci_half_width_95([0.5]) == pytest.approx(1.959964 / 4.841459 * math.sqrt(0.25 + 3.841459 / 4), abs=1e-6)


def test_the_interval_covers_at_least_its_level_where_the_t_interval_does_not():
    """Coverage of avg@k's interval over 2,000 simulated benchmarks of 5 problems, 2 samples each, at a
    true accuracy of 0.1: the Wilson interval covers 0.1 at least 95 % of the time."""
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(2000):
        per_problem = rng.binomial(2, 0.1, size=5) / 2
        low, high = confidence_interval_95(list(per_problem))
        hits += low <= 0.1 <= high
    assert hits / 2000 >= 0.95


def test_summarize_scores_and_categories():
    rewards = {"a": [1.0, 1.0], "b": [1.0, 0.0], "c": [0.0, 0.0], "d": [1.0, 0.0]}
    summary = summarize_scores(rewards)
    # per problem 1, .5, 0, .5 -> mean .5, n = 8 samples, 4 problems
    assert summary["accuracy"] == pytest.approx(0.5)
    assert (summary["n"], summary["problems"]) == (8, 4)
    # pass@2: 1, 1, 0, 1 -> .75
    assert summary["pass_at_k"] == {"1": pytest.approx(0.5), "2": pytest.approx(0.75)}
    # Wilson at p = .5, n = 4 problems: half = z / (1 + z^2 / 4) * sqrt(.0625 + z^2 / 64) = .349961
    assert summary["ci95_half_width"] == pytest.approx(0.3499610, abs=1e-6)
    assert (summary["ci95_low"], summary["ci95_high"]) == (pytest.approx(0.1500390, abs=1e-6),
                                                           pytest.approx(0.8499610, abs=1e-6))
    categories = by_category(rewards, {"a": "Algebra", "b": "Algebra", "c": "Geometry", "d": None})
    assert list(categories) == ["Algebra", "Geometry"]
    assert categories["Algebra"]["accuracy"] == pytest.approx(0.75)  # (1 + .5) / 2
    assert categories["Geometry"]["accuracy"] == 0.0
    # one problem, none correct: the Wilson interval [0, z^2 / (1 + z^2)] = [0, 0.793446]
    assert (categories["Geometry"]["ci95_low"], categories["Geometry"]["ci95_high"]) == (0.0, pytest.approx(0.7934507, abs=1e-6))


def test_token_stats_skip_unknown_counts():
    assert token_stats([10, None, 20]) == {"completion_tokens": 30, "mean_completion_tokens": 15.0}
    assert token_stats([None]) == {"completion_tokens": 0, "mean_completion_tokens": None}
