"""Benchmark metrics against hand-computed values (the arithmetic is in the comments)."""

from __future__ import annotations

import math
from itertools import combinations

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


def test_half_widths_use_the_textbook_t_quantiles():
    # two values 0, 1: s = sqrt(.5), se = s / sqrt(2) = .5, half = t(.975, 1) * .5 = 12.7062 * .5
    assert ci_half_width_95([0.0, 1.0]) == pytest.approx(12.7062 * 0.5, abs=1e-4)
    # values 0, 1 repeated to n = 10: s = sqrt(10 * .25 / 9) = .527046, se = .166667,
    # half = t(.975, 9) * se = 2.2622 * .166667 = .377033
    assert ci_half_width_95([0.0, 1.0] * 5) == pytest.approx(2.2622 * math.sqrt(2.5 / 9) / math.sqrt(10), abs=1e-4)
    # n = 30 (a HMMT suite): t(.975, 29) = 2.0452
    values = [0.0, 1.0] * 15
    assert ci_half_width_95(values) == pytest.approx(2.0452 * math.sqrt(7.5 / 29) / math.sqrt(30), abs=1e-4)
    assert ci_half_width_95([0.4]) is None


def test_confidence_interval_by_hand():
    # values 1, .5, 0: mean .5, s = sqrt(((.5)^2 + 0 + (.5)^2) / 2) = .5, se = .5/sqrt(3) = .288675
    # half = 4.302653 * .288675 = 1.242069 -> (-.742, 1.742) clipped to (0, 1)
    assert confidence_interval_95([1.0, 0.5, 0.0]) == (0.0, 1.0)
    # values .25 x2, .75 x2: mean .5, s = sqrt(4 * .0625 / 3) = .288675, se = .144338
    # half = 3.182446 * .144338 = .459347 -> (.040653, .959347)
    low, high = confidence_interval_95([0.25, 0.25, 0.75, 0.75])
    assert low == pytest.approx(0.5 - 3.182446 * math.sqrt(0.0625 * 4 / 3) / 2, abs=1e-6)
    assert (low, high) == (pytest.approx(0.040653, abs=2e-6), pytest.approx(0.959347, abs=2e-6))
    assert confidence_interval_95([0.3]) == (None, None)
    assert confidence_interval_95([0.5, 0.5]) == (0.5, 0.5)


def test_summarize_scores_and_categories():
    rewards = {"a": [1.0, 1.0], "b": [1.0, 0.0], "c": [0.0, 0.0], "d": [1.0, 0.0]}
    summary = summarize_scores(rewards)
    # per problem 1, .5, 0, .5 -> mean .5, n = 8 samples, 4 problems
    assert summary["accuracy"] == pytest.approx(0.5)
    assert (summary["n"], summary["problems"]) == (8, 4)
    # pass@2: 1, 1, 0, 1 -> .75
    assert summary["pass_at_k"] == {"1": pytest.approx(0.5), "2": pytest.approx(0.75)}
    # s = sqrt((.25 + 0 + .25 + 0) / 3) = .408248, se = .204124, half = 3.182446 * .204124 = .649614
    assert summary["ci95_half_width"] == pytest.approx(0.649614, abs=2e-6)
    assert summary["ci95_low"] == 0.0 and summary["ci95_high"] == 1.0
    categories = by_category(rewards, {"a": "Algebra", "b": "Algebra", "c": "Geometry", "d": None})
    assert list(categories) == ["Algebra", "Geometry"]
    assert categories["Algebra"]["accuracy"] == pytest.approx(0.75)  # (1 + .5) / 2
    assert categories["Geometry"]["accuracy"] == 0.0
    assert categories["Geometry"]["ci95_low"] is None  # one problem: no interval


def test_token_stats_skip_unknown_counts():
    assert token_stats([10, None, 20]) == {"completion_tokens": 30, "mean_completion_tokens": 15.0}
    assert token_stats([None]) == {"completion_tokens": 0, "mean_completion_tokens": None}
