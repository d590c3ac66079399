"""bench/bench_eval_noise.py: the evaluation noise that reaches a run's AUC, against hand cases and a
simulation through the AUC's own code."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from sao_env.evaluation.adaptation import area_under

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "bench_eval_noise.py"
spec = importlib.util.spec_from_file_location("bench_eval_noise", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_the_schedule_is_the_runs():
    assert bench.eval_times(360.0, 100.0) == [0.0, 100.0, 200.0, 300.0, 360.0]


def test_trapezoid_weights_by_hand():
    # gaps 1, 1, 2 over a range of 4: (0.5, 0.5 + 0.5, 0.5 + 1, 1) / 4
    assert bench.trapezoid_weights([0, 1, 2, 4]).tolist() == [0.125, 0.25, 0.375, 0.25]
    a = [0.2, 0.7, 0.1, 0.9]
    assert float(bench.trapezoid_weights([0, 1, 2, 4]) @ np.array(a)) == pytest.approx(area_under(list(zip([0, 1, 2, 4], a))))


def test_auc_sd_by_hand():
    # 0.125^2 * 0.01 + 0.25^2 * 0.01 + 0.375^2 * 0.04 + 0.25^2 * 0.04 = 0.00890625
    sd = bench.auc_sd_from_phases([0, 1, 2, 4], ["a", "a", "b", "b"], {"a": 0.01, "b": 0.04})
    assert sd == pytest.approx(math.sqrt(0.00890625), rel=1e-12)


def test_auc_sd_matches_a_simulation_through_area_under():
    times = bench.eval_times(2340.0, 72.0)
    phases = ["x" if t < 1000 else "y" for t in times]
    sd = {"x": 0.06, "y": 0.03}
    rng = np.random.default_rng(0)
    aucs = [area_under([(t, 0.5 + rng.normal(0, sd[p])) for t, p in zip(times, phases)]) for _ in range(4000)]
    expected = bench.auc_sd_from_phases(times, phases, {k: v ** 2 for k, v in sd.items()})
    assert float(np.std(aucs, ddof=1)) == pytest.approx(expected, rel=0.05)


def test_prompts_for_a_third_of_the_seeds_sd_by_hand():
    # rest 0.014: the evaluation may add 0.014 / sqrt(8) = 0.0049497; 0.0135 at 64 prompts falls as 1/sqrt(n):
    # n = 64 * (0.0135 / 0.0049497)^2 = 476.08 -> 477
    assert bench.prompts_for_a_third(0.0135, 64, 0.014) == 477
    n = bench.prompts_for_a_third(0.0256, 32, 0.029)
    eval_at_n = 0.0256 * math.sqrt(32 / n)
    assert eval_at_n <= math.sqrt(0.029 ** 2 + eval_at_n ** 2) / 3 < 0.0256 * math.sqrt(32 / (n - 1))
    assert bench.prompts_for_a_third(0.0087, 64, 0.057) == 64  # already under: never fewer than now
    assert bench.prompts_for_a_third(0.01, 64, math.nan) is None and bench.prompts_for_a_third(0.01, 64, 0.0) is None


def test_the_seeds_sd_without_the_evaluation():
    assert bench.rest_of_seeds_sd(0.014, 0.0135, "1") == 0.014  # version 1: the seeds shared the streams
    assert bench.rest_of_seeds_sd(0.05, 0.03, "2") == pytest.approx(0.04, rel=1e-12)
    assert math.isnan(bench.rest_of_seeds_sd(0.02, 0.03, "3"))
