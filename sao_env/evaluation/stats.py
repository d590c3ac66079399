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
