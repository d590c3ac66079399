"""Benchmark metrics: avg@k, unbiased pass@k, a 95% confidence interval, per-category breakdown.

Conventions (``correct_P`` holds one entry per problem: its number of correct samples, ``n_P``
its number of samples):

- avg@k = mean over problems of ``c_i / n_i`` (pass@1 estimated from k samples, then averaged).
- pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1):
  ``1 - C(n-c, k) / C(n, k)`` per problem, averaged; computed as a product to stay exact for
  large n. Undefined when k > n.
- 95% CI: Student-t interval over problems, ``mean +- t(0.975, P-1) * s / sqrt(P)`` where ``s`` is
  the sample standard deviation (ddof=1) of the per-problem accuracies ``c_i / n_i``. It treats
  problems as the sampled unit (the benchmark is a sample of possible problems) and ignores the
  within-problem sampling noise, which k samples already average down. Clipped to [0, 1].
  Undefined (None) with fewer than 2 problems.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, Sequence


def avg_at_k(correct_P: Sequence[int], n_P: Sequence[int]) -> float:
    """Mean over problems of the fraction of correct samples."""
    _check(correct_P, n_P)
    return sum(c / n for c, n in zip(correct_P, n_P)) / len(correct_P)


def pass_at_k_one(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with ``c`` correct among ``n`` samples."""
    if not 0 <= c <= n or k < 1:
        raise ValueError(f"need 0 <= c <= n and k >= 1, got n={n} c={c} k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{j=n-c+1}^{n} (1 - k/j)
    return 1.0 - math.prod(1.0 - k / j for j in range(n - c + 1, n + 1))


def pass_at_k(correct_P: Sequence[int], n_P: Sequence[int], k: int) -> float:
    """Mean unbiased pass@k over problems."""
    _check(correct_P, n_P)
    return sum(pass_at_k_one(n, c, k) for c, n in zip(correct_P, n_P)) / len(correct_P)


def pass_at_k_table(correct_P: Sequence[int], n_P: Sequence[int]) -> dict[str, float]:
    """pass@k for k = 1, 2, 4, ... up to the smallest per-problem sample count, and that count."""
    smallest = min(n_P)
    ks, k = [], 1
    while k <= smallest:
        ks.append(k)
        k *= 2
    if smallest not in ks:
        ks.append(smallest)
    return {str(k): pass_at_k(correct_P, n_P, k) for k in ks}


def t_quantile_975(df: int) -> float:
    """The 0.975 quantile of Student's t with ``df`` degrees of freedom (bisection on the CDF)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    lo, hi = 0.0, 20.0
    while _t_cdf(hi, df) < 0.975:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_cdf(mid, df) < 0.975:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _t_cdf(t: float, df: int) -> float:
    """CDF of Student's t via the regularised incomplete beta function I_x(df/2, 1/2)."""
    x = df / (df + t * t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def _betainc(a: float, b: float, x: float) -> float:
    """Regularised incomplete beta I_x(a, b) by Lentz's continued fraction (Numerical Recipes 6.4)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300
    f, c, d = 1.0, 1.0, 0.0
    for i in range(0, 400):
        m = i // 2
        if i == 0:
            numerator = 1.0
        elif i % 2 == 0:
            numerator = (m * (b - m) * x) / ((a + 2.0 * m - 1.0) * (a + 2.0 * m))
        else:
            numerator = -((a + m) * (a + b + m) * x) / ((a + 2.0 * m) * (a + 2.0 * m + 1.0))
        d = 1.0 + numerator * d
        d = tiny if abs(d) < tiny else d
        d = 1.0 / d
        c = 1.0 + numerator / c
        c = tiny if abs(c) < tiny else c
        f *= c * d
        if abs(1.0 - c * d) < 1e-15:
            break
    return math.exp(log_front) * (f - 1.0) / a


def confidence_interval_95(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Student-t 95% interval of the mean of ``values`` (one per problem), clipped to [0, 1]."""
    count = len(values)
    if count < 2:
        return None, None
    mean = sum(values) / count
    variance = sum((v - mean) ** 2 for v in values) / (count - 1)
    half = t_quantile_975(count - 1) * math.sqrt(variance / count)
    return max(0.0, mean - half), min(1.0, mean + half)


def ci_half_width_95(values: Sequence[float]) -> float | None:
    """Half-width of the unclipped Student-t interval (for ``mean +- half`` displays)."""
    count = len(values)
    if count < 2:
        return None
    mean = sum(values) / count
    variance = sum((v - mean) ** 2 for v in values) / (count - 1)
    return t_quantile_975(count - 1) * math.sqrt(variance / count)


def summarize_scores(rewards_by_problem: Mapping[str, Sequence[float]]) -> dict:
    """accuracy (avg@k), CI, pass@k table and counts for ``{problem id: [reward per sample]}``.

    A reward counts as correct when it is >= 0.5 (graders here give 0 or 1).
    """
    ids = list(rewards_by_problem)
    if not ids:
        return {"accuracy": None, "n": 0, "problems": 0, "ci95_low": None, "ci95_high": None,
                "ci95_half_width": None, "pass_at_k": {}}
    n_P = [len(rewards_by_problem[i]) for i in ids]
    if min(n_P) == 0:
        raise ValueError("every problem needs at least one graded sample")
    correct_P = [sum(1 for r in rewards_by_problem[i] if r >= 0.5) for i in ids]
    per_problem = [c / n for c, n in zip(correct_P, n_P)]
    low, high = confidence_interval_95(per_problem)
    return {
        "accuracy": avg_at_k(correct_P, n_P),
        "n": sum(n_P),
        "problems": len(ids),
        "ci95_low": low,
        "ci95_high": high,
        "ci95_half_width": ci_half_width_95(per_problem),
        "pass_at_k": pass_at_k_table(correct_P, n_P),
    }


def by_category(rewards_by_problem: Mapping[str, Sequence[float]], category_of: Mapping[str, str | None]) -> dict:
    """:func:`summarize_scores` per category (problems without a category are left out)."""
    groups: dict[str, dict[str, Sequence[float]]] = {}
    for problem, rewards in rewards_by_problem.items():
        category = category_of.get(problem)
        if category:
            groups.setdefault(str(category), {})[problem] = rewards
    return {name: summarize_scores(group) for name, group in sorted(groups.items())}


def token_stats(tokens: Iterable[int | None]) -> dict:
    """Total and mean completion tokens (unknown counts are skipped)."""
    known = [t for t in tokens if t is not None]
    return {
        "completion_tokens": sum(known),
        "mean_completion_tokens": (sum(known) / len(known)) if known else None,
    }


def _check(correct_P: Sequence[int], n_P: Sequence[int]) -> None:
    if len(correct_P) != len(n_P) or not correct_P:
        raise ValueError("need one (correct, samples) pair per problem, at least one problem")
