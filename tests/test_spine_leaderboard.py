"""Leaderboard numbers against hand computations: the 95% CI over seeds, a run's adaptation
metrics (final accuracy, recovery time, AUC by trapezoids) and the per-agent table."""

from __future__ import annotations

import math

import pytest

from sao_env.evaluation.adaptation import adaptation_summary, current_accuracy
from sao_env.evaluation.stats import mean_ci95, paired_difference
from sao_env.leaderboard.board import leaderboard_frame
from sao_env.scenario import Scenario, ScenarioSpec

NAN = float("nan")


# -- mean_ci95 ------------------------------------------------------------------------------------


def test_mean_ci95_three_values():
    # [1, 2, 3]: mean 2, sample sd 1, half-width t(0.975, df=2) * 1 / sqrt(3)
    #          = 4.302653 / 1.7320508 = 2.484138
    mean, half = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(2.484138, abs=1e-6)


def test_mean_ci95_eight_values():
    # [2, 4, 4, 4, 5, 5, 7, 9]: mean 5, sum of squares 9+1+1+1+0+0+4+16 = 32, sd = sqrt(32/7) = 2.138090,
    # t(0.975, df=7) = 2.364624, half-width 2.364624 * 2.138090 / sqrt(8) = 1.787488
    mean, half = mean_ci95([2, 4, 4, 4, 5, 5, 7, 9])
    assert mean == 5.0
    assert half == pytest.approx(1.787488, abs=1e-6)


def test_mean_ci95_two_values():
    # [1, 3]: sd sqrt(2), half-width t(0.975, 1) * sqrt(2) / sqrt(2) = 12.706205
    assert mean_ci95([1.0, 3.0]) == pytest.approx((2.0, 12.706205), abs=1e-6)


def test_mean_ci95_single_value_has_nan_half_width():
    mean, half = mean_ci95([0.7])
    assert mean == 0.7 and math.isnan(half)


def test_mean_ci95_drops_nans_and_nones():
    assert mean_ci95([1.0, NAN, 2.0, None, 3.0]) == pytest.approx(mean_ci95([1.0, 2.0, 3.0]))
    mean, half = mean_ci95([NAN, 4.0])
    assert mean == 4.0 and math.isnan(half)
    mean, half = mean_ci95([NAN, NAN])
    assert math.isnan(mean) and math.isnan(half)
    mean, half = mean_ci95([])
    assert math.isnan(mean) and math.isnan(half)


def test_mean_ci95_constant_values_have_zero_width():
    assert mean_ci95([0.5, 0.5, 0.5]) == (0.5, 0.0)


# -- adaptation_summary ---------------------------------------------------------------------------


def two_phase_scenario(threshold: float = 0.8) -> Scenario:
    source = {"name": "styled_arithmetic", "params": {"digits": 1}}
    return Scenario(ScenarioSpec(
        name="two-phase",
        phases=[{"name": "a", "duration_h": 1.0, "sources": [source]},
                {"name": "b", "duration_h": 1.0, "sources": [source]}],
        eval={"recovery_threshold": threshold},
    ))


def evals_from(rows):
    return [{"sim_time_s": t, "eval/a/accuracy": a, "eval/b/accuracy": b} for t, a, b in rows]


# Drift at t = 3600 s; evaluations at uneven times.
#   t      acc(a)  acc(b)   current phase -> current accuracy
#   0      0.50    0.10     a  0.50
#   1200   0.90    0.20     a  0.90   <- a reaches 0.8: time to threshold 1200 s = 1/3 h
#   3600   0.85    0.30     b  0.30   (the drift instant belongs to b; last eval of a's window)
#   4800   0.60    0.70     b  0.70
#   6000   0.50    0.80     b  0.80   <- b reaches 0.8 (>=): recovery 2400 s = 2/3 h
#   7200   0.40    0.95     b  0.95
EVALS = evals_from([(0, .50, .10), (1200, .90, .20), (3600, .85, .30), (4800, .60, .70), (6000, .50, .80),
                    (7200, .40, .95)])


def test_current_accuracy_follows_the_active_phase():
    curve = current_accuracy(EVALS, two_phase_scenario())
    assert curve == [(0, .50), (1200, .90), (3600, .30), (4800, .70), (6000, .80), (7200, .95)]


def test_adaptation_summary_by_hand():
    out = adaptation_summary(EVALS, two_phase_scenario())
    assert out["final_accuracy/1_a"] == 0.85  # last evaluation in [0, 3600]
    assert out["final_accuracy/2_b"] == 0.95
    assert out["time_to_threshold_h/1_a"] == pytest.approx(1 / 3)
    assert out["recovery_h/2_b"] == pytest.approx(2 / 3)
    assert out["forgetting/1_a"] == pytest.approx(0.90 - 0.40)  # best during a, minus at the end
    assert "forgetting/2_b" not in out
    # AUC: trapezoids of the current accuracy, divided by the span 7200 s
    #   (.5+.9)/2*1200 = 840; (.9+.3)/2*2400 = 1440; (.3+.7)/2*1200 = 600;
    #   (.7+.8)/2*1200 = 900; (.8+.95)/2*1200 = 1050; total 4830 / 7200 = 0.6708333
    assert out["auc"] == pytest.approx(4830 / 7200)


def test_adaptation_summary_never_recovered_is_nan():
    evals = evals_from([(0, .9, .1), (3600, .9, .2), (5400, .5, .79), (7200, .5, .6)])
    out = adaptation_summary(evals, two_phase_scenario())
    assert out["time_to_threshold_h/1_a"] == 0.0  # already there at t = 0
    assert math.isnan(out["recovery_h/2_b"])
    assert out["final_accuracy/2_b"] == 0.6
    # AUC (current accuracy: a at t=0, then b from the drift instant t=3600 on):
    #   (.9+.2)/2*3600 = 1980; (.2+.79)/2*1800 = 891; (.79+.6)/2*1800 = 1251; total 4122 / 7200
    assert out["auc"] == pytest.approx(4122 / 7200)


def test_adaptation_summary_threshold_is_the_scenarios():
    out = adaptation_summary(EVALS, two_phase_scenario(threshold=0.95))
    assert math.isnan(out["time_to_threshold_h/1_a"])
    assert out["recovery_h/2_b"] == pytest.approx(1.0)  # 0.95 reached at 7200 s


def test_paired_difference_by_hand():
    # seeds 0, 1, 2: differences .1, .3, .2 (seed 3 only in a, seed 4's b is NaN: left out)
    # mean .2, sd .1, half 4.302653 * .1 / sqrt(3) = .248414
    a = {0: 0.5, 1: 0.7, 2: 0.4, 3: 0.9, 4: 0.1}
    b = {0: 0.4, 1: 0.4, 2: 0.2, 4: NAN}
    mean, half, n = paired_difference(a, b)
    assert n == 3 and mean == pytest.approx(0.2) and half == pytest.approx(0.248414, abs=1e-6)
    # Pairing matters: unpaired intervals of a and b would be far wider than the paired one.
    assert half < mean_ci95([0.5, 0.7, 0.4])[1]


def test_paired_difference_one_seed_and_none():
    mean, half, n = paired_difference({0: 0.5}, {0: 0.2, 1: 0.3})
    assert n == 1 and mean == pytest.approx(0.3) and math.isnan(half)
    mean, half, n = paired_difference({0: NAN}, {0: 0.2})
    assert n == 0 and math.isnan(mean) and math.isnan(half)


# -- leaderboard table ----------------------------------------------------------------------------


def test_leaderboard_frame_aggregates_seeds():
    summaries = [
        {"agent": "x", "algorithm": "sao", "seed": 0, "online_reward": 0.2, "auc": 0.5, "recovery_h/2_b": 0.5},
        {"agent": "x", "algorithm": "sao", "seed": 1, "online_reward": 0.4, "auc": 0.7, "recovery_h/2_b": NAN},
        {"agent": "y", "algorithm": "grpo", "seed": 0, "online_reward": 0.1, "auc": 0.2, "recovery_h/2_b": 0.25},
    ]
    frame = leaderboard_frame(summaries)
    assert list(frame["agent"]) == ["x", "y"]  # sorted by online reward, best first
    x = frame.iloc[0]
    assert x["seeds"] == 2
    assert x["online_reward"] == pytest.approx(0.3)
    # [0.2, 0.4]: sd 0.141421, half-width 12.706205 * 0.141421 / sqrt(2) = 1.270620
    assert x["online_reward_ci95"] == pytest.approx(1.270620, abs=1e-6)
    assert x["recovery_h/2_b"] == 0.5 and math.isnan(x["recovery_h/2_b_ci95"])
    assert x["recovery_h/2_b_missed"] == 1
    assert frame.iloc[1]["recovery_h/2_b_missed"] == 0
