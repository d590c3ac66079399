"""Statistics for comparing agents across seeds: mean and a 95% confidence interval."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """Mean and half-width of the two-sided 95% Student-t interval over seeds (NaN half-width for n < 2).

    NaN entries (e.g. a recovery that never happened) are left out.
    """
    x = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(x) == 0:
        return float("nan"), float("nan")
    if len(x) == 1:
        return float(x[0]), float("nan")
    half = stats.t.ppf(0.975, df=len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(half)


def paired_difference(a: dict, b: dict) -> tuple[float, float, int]:
    """Mean, 95% half-width and n of ``a[s] - b[s]`` over the seeds ``s`` both have a number for.

    ``a`` and ``b`` map seed -> metric value. Pairing by seed takes out what a seed does to both
    recipes alike (the held-out prompts are the same for all; seeded task and latency streams): the
    interval is the Student-t interval of the n differences (NaN half-width for n < 2, NaN mean for
    n = 0). Seeds where either value is missing or NaN (a recovery that never happened) are left out,
    and n says how many remain.
    """
    diffs = [float(a[s]) - float(b[s]) for s in sorted(set(a) & set(b), key=str)
             if a[s] is not None and b[s] is not None and not math.isnan(float(a[s])) and not math.isnan(float(b[s]))]
    mean, half = mean_ci95(diffs)
    return mean, half, len(diffs)
