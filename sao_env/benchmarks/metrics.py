"""Benchmark metrics: avg@k, unbiased pass@k, a 95% confidence interval, per-category breakdown.

Conventions (``correct_P`` holds one entry per problem: its number of correct samples, ``n_P``
its number of samples):

- avg@k = mean over problems of ``c_i / n_i`` (pass@1 estimated from k samples, then averaged).
- pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1):
  ``1 - C(n-c, k) / C(n, k)`` per problem, averaged; computed as a product to stay exact for
  large n. Undefined when k > n.
- 95% CI: the Wilson score interval (Wilson 1927, *JASA* 22:209; recommended for small n by Brown,
  Cai and DasGupta 2001, *Stat. Sci.* 16:101) of avg@k over the P problems::

      (p + z^2/(2P) +- z sqrt(p(1-p)/P + z^2/(4P^2))) / (1 + z^2/P),   z = 1.959964

  It treats problems as the sampled unit (the benchmark is a sample of possible problems). A
  problem's accuracy ``c_i / n_i`` lies in [0, 1], so its variance is at most p(1-p) (Bhatia and
  Davis 2000): the binomial variance over P problems bounds the variance of avg@k, and the interval
  is conservative when k > 1 averages the within-problem noise down. Unlike a Student-t interval
  over per-problem accuracies it stays honest at small P and at 0 or 100 %: 0 of 3 problems gives
  [0, 0.56], not [0, 0]. Inside [0, 1] by construction; undefined (None) with no problem.
  ``ci95_half_width`` is half its width, for ``±`` displays.
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


CI_METHOD = "Wilson score interval of the per-problem accuracies (95 %)"
"""What ``confidence_interval_95`` computes, in words: the ``ci_method`` of a suite's summary.json."""

Z95 = 1.959963984540054
"""The two-sided 95 % normal quantile of the Wilson interval."""


def confidence_interval_95(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Wilson score 95% interval (module doc) of the mean of ``values``, one accuracy in [0, 1] per
    problem; (None, None) for no values."""
    n = len(values)
    if n == 0:
        return None, None
    p = min(1.0, max(0.0, sum(values) / n))
    z2 = Z95 ** 2
    center = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, center - half), min(1.0, center + half)


def ci_half_width_95(values: Sequence[float]) -> float | None:
    """Half the width of the Wilson interval of ``values`` (``confidence_interval_95``), for ``±``
    displays; None for no values."""
    low, high = confidence_interval_95(values)
    return None if low is None else (high - low) / 2


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
