"""The statistics a board states: its power, which orders the seeds support, and the ranks that follow.

Pure functions of per-seed numbers (no tables, no files). Every comparison is paired by seed: two
recipes' runs with the same seed share the seeded task and latency streams and the held-out
prompts, so the difference of the two runs takes out what a seed does to both alike.

- **Power** (``min_detectable_difference``): the smallest true paired mean difference that the
  board's own rule detects with probability ``power`` at n seeds, from the observed standard
  deviation of the paired differences. The rule is a two-sided paired test of each of ``m``
  comparisons with Holm's correction over them, so the difference is stated at level ``alpha / m``,
  the level of Holm's first and most stringent step (Bonferroni's)::

      MDE = (t_{1-alpha/(2m), n-1} + t_{power, n-1}) * sd_diff / sqrt(n)

  A p at most ``alpha / m`` is rejected by Holm at whatever step it falls (every earlier step's
  level is at least as large), so a difference of this size is detected with about ``power``
  whatever the other comparisons show; when other comparisons are rejected first, a smaller one
  can be too. This is the textbook normal-theory formula ``(z_{1-alpha/2} + z_{1-beta}) * sd /
  sqrt(n)`` (Cohen 1988, *Statistical Power Analysis for the Behavioral Sciences*, ch. 2; Julious
  2004, *Stat. Med.* 23:1921) at the Bonferroni-adjusted level (Leon 2004, *J. Clin. Psychiatry*
  65:1511; Senn and Bretz 2007, *Pharm. Stat.* 6:161), with Student-t quantiles on n-1 degrees of
  freedom in place of the normal ones, which keeps it honest at the handful of seeds a board has
  (at m=1 the t form is 1.91 times the normal one at n=3, 1.12 times at n=10). At n=10 the level
  alpha/m makes it 1.35 times the uncorrected figure with m=6 and 1.52 times with m=14. It is an
  approximation: the exact power of the paired t-test at that difference (non-central t) is 0.77
  at n=3, 0.78 at n=4 and 0.80 from n=10 (m=1). It is the t-test's power, and the sign-flip test
  that decides the ranks is discrete: its smallest p is ``2 / 2^n``, so below the fewest seeds at
  which ``2 / 2^n <= alpha / m`` (``min_seeds``: 6 for one comparison, 8 for 6, 10 for 14) it
  cannot reject at all and there is no detectable difference (``math.inf``; the tables say
  "none"). The MDE is a property of the design (n, spread, family), not a bound on an effect: a
  pair left a tie may differ by more than it (its interval says by how much it may).
- **Paired test** (``sign_flip_pvalue``): the exact paired sign-flip permutation test of
  "no difference" (Fisher 1935; Good 2005, *Permutation, Parametric and Bootstrap Tests of
  Hypotheses*, sec. 3.6): under the null each seed's difference is as likely to have either sign,
  so the p-value is the share of the 2^n sign patterns whose ``|mean|`` is at least the observed
  one. Exact for n <= ``EXACT_MAX_N`` seeds; beyond, ``MC_DRAWS`` random sign patterns from a
  fixed seed (``MC_SEED``) and ``p = (1 + hits) / (1 + draws)`` (Phipson and Smyth 2010). It
  assumes nothing about the differences' distribution, and its smallest attainable p is
  ``2 / 2^n``: 0.25 with 3 seeds, 0.0625 with 5, 0.0156 with 7.
- **Paired t-test** (``paired_t_pvalue``), chosen per grid (``test: t``): the two-sided one-sample
  Student-t test of the paired differences on n-1 degrees of freedom (Student 1908). It assumes
  roughly normal differences, which a collapsed run breaks, and in return its p is not bounded
  below: it is the test for grids whose cells have too few seeds for the sign-flip test to reach
  ``alpha`` after Holm's correction (5 seeds: the regime map). The tables say which test they use.
- **Multiplicity** (``holm``): Holm's step-down correction (Holm 1979, *Scand. J. Stat.* 6:65)
  over the comparisons made on one board and one metric (every pair of rows sharing at least
  ``MIN_PAIRED`` seeds).
- **Ranks** (``rank_ranges``): a row's rank is the range ``1 + (rows that beat it)`` to
  ``k - (rows it beats)``, where "beats" means a Holm-supported paired difference in the metric's
  better direction. A single number is an order the seeds support; ``2–3`` is a tie.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Hashable

import numpy as np
from scipy import stats as sps

ALPHA = 0.05
"""Two-sided level of every test on the boards."""
POWER = 0.8
"""Power at which the minimum detectable difference is stated."""
EXACT_MAX_N = 16
"""Up to this many paired seeds the sign-flip test enumerates all 2^n patterns (65,536 at 16)."""
MC_DRAWS = 20_000
"""Random sign patterns of the Monte Carlo test beyond ``EXACT_MAX_N`` seeds."""
MC_SEED = 0
"""Seed of the Monte Carlo sign patterns: the same table gives the same p-values."""
MIN_PAIRED = 2
"""A comparison is made (and counted by Holm) when the two rows share at least this many seeds."""
TESTS = ("sign-flip", "t")
"""The paired tests a board can use: the exact sign-flip permutation test (default) or the paired t-test."""


def min_seeds(m: int = 1, *, alpha: float = ALPHA, test: str = "sign-flip") -> int:
    """The fewest seeds at which ``test`` can give a p of at most ``alpha / m`` (Holm's first step
    over ``m`` comparisons): for the exact sign-flip test the smallest n with ``2 / 2^n <= alpha / m``
    (its smallest p, Good 2005, sec. 3.6); the paired t-test's p has no floor, so 2 (a spread)."""
    if test not in TESTS:
        raise ValueError(f"unknown paired test {test!r} (known: {', '.join(TESTS)})")
    if test == "t":
        return 2
    level = alpha / max(1, m)
    n = 1
    while smallest_p(n) > level:
        n += 1
    return n


def min_detectable_difference(sd_diff: float, n: int, *, alpha: float = ALPHA, power: float = POWER, m: int = 1,
                              test: str = "sign-flip") -> float:
    """The minimum detectable paired mean difference at ``n`` seeds under a two-sided ``test`` with
    Holm's correction over ``m`` comparisons, stated at level ``alpha / m`` (module doc). ``math.inf``
    when ``test`` cannot reach ``alpha / m`` at this n (``min_seeds``); NaN for n < 2 or a missing
    spread; 0 for a spread of 0."""
    if n is None or n < 2 or sd_diff is None or not math.isfinite(sd_diff):
        return math.nan
    if n < min_seeds(m, alpha=alpha, test=test):
        return math.inf
    df = n - 1
    level = alpha / max(1, m)
    return float((sps.t.ppf(1 - level / 2, df) + sps.t.ppf(power, df)) * sd_diff / math.sqrt(n))


def seeds_for_difference(sd_diff: float, delta: float, *, alpha: float = ALPHA, power: float = POWER, m: int = 1,
                         test: str = "sign-flip", max_n: int = 10_000) -> int | None:
    """The fewest seeds at which ``min_detectable_difference(sd_diff, n, m=m, test=test) <= delta``:
    never fewer than ``min_seeds(m, test=test)``; None when the spread is unknown or more than
    ``max_n`` seeds would be needed."""
    if sd_diff is None or not math.isfinite(sd_diff) or delta <= 0:
        return None
    floor = max(2, min_seeds(m, alpha=alpha, test=test))
    if sd_diff == 0:
        return floor
    z = sps.norm.ppf(1 - alpha / max(1, m) / 2) + sps.norm.ppf(power)
    n = max(floor, int((z * sd_diff / delta) ** 2))  # the normal formula's n; the t form needs as many or more
    while n <= max_n:
        if min_detectable_difference(sd_diff, n, alpha=alpha, power=power, m=m, test=test) <= delta:
            return n
        n += 1
    return None


def format_mde(value: float | None, decimals: int = 3) -> str:
    """A minimum detectable difference as the tables print it: ``0.022``; ``none`` where the test
    cannot reach its level after Holm at that n (``math.inf``); ``n/a`` where it is unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if math.isinf(value):
        return "none"
    return f"{value:.{decimals}f}"


def pooled_sd(spreads: list[tuple[float, int]]) -> tuple[float, int]:
    """Pooled standard deviation of several samples given as ``(sd, n)`` pairs
    (``sqrt(sum (n_i - 1) sd_i^2 / sum (n_i - 1))``) and its degrees of freedom; samples of fewer
    than two values or without a spread add nothing. ``(NaN, 0)`` without any."""
    ss, df = 0.0, 0
    for sd, n in spreads:
        if n is not None and n >= 2 and sd is not None and math.isfinite(sd):
            ss += (n - 1) * sd ** 2
            df += n - 1
    return (math.sqrt(ss / df), df) if df else (math.nan, 0)


def sign_flip_pvalue(diffs: list[float], *, exact_max_n: int = EXACT_MAX_N, draws: int = MC_DRAWS,
                     seed: int = MC_SEED) -> tuple[float, str]:
    """Two-sided p-value of the paired sign-flip permutation test on ``diffs`` (one paired
    difference per seed) and the method (``"exact"`` or ``"monte carlo"``); NaN for no seeds.

    The statistic is ``|mean(d)|``; a pattern counts when its ``|mean|`` reaches the observed one
    up to rounding (1e-9 relative), so that ties in exact arithmetic count as ties here too.
    """
    d = np.asarray([x for x in diffs if x is not None and math.isfinite(x)], dtype=float)
    n = len(d)
    if n == 0:
        return math.nan, "exact"
    observed = abs(d.sum())
    bar = observed - 1e-9 * max(observed, float(np.abs(d).sum()), 1e-300)
    if n <= exact_max_n:
        patterns = np.arange(2 ** n)[:, None] >> np.arange(n)[None, :] & 1  # (2^n, n): bit i flips seed i
        sums = np.abs((1 - 2 * patterns) @ d)  # (2^n,)
        return float((sums >= bar).mean()), "exact"
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(draws, n))  # (draws, n)
    hits = int((np.abs(signs @ d) >= bar).sum())
    return (1 + hits) / (1 + draws), "monte carlo"


def paired_t_pvalue(diffs: list[float]) -> tuple[float, str]:
    """Two-sided p-value of the paired t-test on ``diffs`` (one paired difference per seed) and the
    method (``"paired t"``): ``t = mean / (sd / sqrt(n))`` on n-1 degrees of freedom. With no spread
    p is 0 for a non-zero mean and 1 for a zero one; NaN below two seeds."""
    d = np.asarray([x for x in diffs if x is not None and math.isfinite(x)], dtype=float)
    n = len(d)
    if n < 2:
        return math.nan, "paired t"
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    if sd == 0.0:
        return (0.0 if mean != 0.0 else 1.0), "paired t"
    t = mean / (sd / math.sqrt(n))
    return float(2.0 * sps.t.sf(abs(t), n - 1)), "paired t"


def paired_pvalue(diffs: list[float], test: str = "sign-flip") -> tuple[float, str]:
    """The p-value of ``test`` (one of ``TESTS``) on the paired differences, and its method."""
    if test == "sign-flip":
        return sign_flip_pvalue(diffs)
    if test == "t":
        return paired_t_pvalue(diffs)
    raise ValueError(f"unknown paired test {test!r} (known: {', '.join(TESTS)})")


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the input's order: the i-th smallest p times (m - i + 1), made
    non-decreasing along the sorted order and capped at 1 (NaN entries stay NaN and are not counted)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(len(p), math.nan)
    idx = [i for i in np.argsort(p, kind="stable") if not math.isnan(p[i])]
    m, running = len(idx), 0.0
    for k, i in enumerate(idx):
        running = max(running, min(1.0, (m - k) * p[i]))
        out[i] = running
    return out.tolist()


@dataclass(frozen=True)
class Comparison:
    """One paired comparison of rows ``a`` and ``b`` on one metric (differences are ``a - b``)."""

    a: str
    b: str
    n: int
    """Seeds both rows have a value for."""
    mean: float
    """Mean of the paired differences ``a - b``."""
    sd: float
    """Standard deviation of the paired differences (ddof 1; NaN with one seed)."""
    p: float
    """Two-sided p-value of the paired test (NaN when the comparison was not made: fewer than MIN_PAIRED seeds)."""
    p_holm: float
    """``p`` Holm-adjusted over the comparisons made on the board and metric."""
    method: str
    winner: str | None
    """The better row when the adjusted p is at most alpha (direction of the metric), else None."""
    mde: float
    """Minimum detectable paired difference at this pair's n under Holm over the comparisons made
    (``min_detectable_difference`` at ``alpha / m``; ``math.inf`` where the test cannot reach it)."""

    @property
    def made(self) -> bool:
        return not math.isnan(self.p)


def pairwise(values: dict[str, dict[Hashable, float | None]], *, higher_is_better: bool = True,
             alpha: float = ALPHA, power: float = POWER, test: str = "sign-flip") -> list[Comparison]:
    """Every pair of rows (in the given order, ``a`` before ``b``) compared paired by seed:
    ``values`` maps a row label to ``{seed: value}``; missing or NaN values leave their seed out.
    ``test`` is the paired test (``TESTS``). Holm's correction runs over the pairs with at least
    ``MIN_PAIRED`` shared seeds, and each pair's detectable difference is stated for that family."""
    raw = []
    for a, b in combinations(list(values), 2):
        va, vb = values[a], values[b]
        seeds = sorted((s for s in set(va) & set(vb) if _finite(va[s]) and _finite(vb[s])), key=str)
        d = [float(va[s]) - float(vb[s]) for s in seeds]
        n = len(d)
        mean = float(np.mean(d)) if n else math.nan
        sd = float(np.std(d, ddof=1)) if n >= 2 else math.nan
        p, method = paired_pvalue(d, test) if n >= MIN_PAIRED else (math.nan, "not made")
        raw.append((a, b, n, mean, sd, p, method))
    adjusted = holm([r[5] for r in raw])
    m = sum(1 for r in raw if not math.isnan(r[5]))
    out = []
    for (a, b, n, mean, sd, p, method), ph in zip(raw, adjusted):
        winner = None
        if not math.isnan(ph) and ph <= alpha and mean != 0:
            winner = a if (mean > 0) == higher_is_better else b
        out.append(Comparison(a, b, n, mean, sd, p, ph, method, winner,
                              min_detectable_difference(sd, n, alpha=alpha, power=power, m=m, test=test)))
    return out


def rank_ranges(labels: list[str], comparisons: list[Comparison]) -> dict[str, tuple[int, int]]:
    """``{label: (best rank, worst rank)}`` (module doc): 1 + the rows that beat it, k - the rows it beats."""
    k = len(labels)
    beaten_by = {x: 0 for x in labels}
    beats = {x: 0 for x in labels}
    for c in comparisons:
        if c.winner is not None and c.a in beats and c.b in beats:
            loser = c.b if c.winner == c.a else c.a
            beats[c.winner] += 1
            beaten_by[loser] += 1
    return {x: (1 + beaten_by[x], k - beats[x]) for x in labels}


def format_rank(low: int, high: int) -> str:
    """``2`` for a supported rank, ``1–3`` for a tie over those ranks."""
    return str(low) if low == high else f"{low}–{high}"


def supported_leader(labels: list[str], comparisons: list[Comparison]) -> str | None:
    """The row that beats every other row with support (rank range (1, 1)); None when there is none
    or the board has a single row."""
    if len(labels) < 2:
        return None
    ranges = rank_ranges(labels, comparisons)
    leaders = [x for x in labels if ranges[x] == (1, 1)]
    return leaders[0] if leaders else None


def smallest_p(n: int) -> float:
    """The smallest p-value the exact sign-flip test can give with n seeds (2 / 2^n); NaN for n < 1."""
    return 2.0 / 2 ** n if n >= 1 else math.nan


def _finite(value: Any) -> bool:
    try:
        return value is not None and math.isfinite(float(value))
    except (TypeError, ValueError):
        return False
