"""How much of the reward's variance a prompt-dependent baseline could remove: ANOVA eta^2 by group.

A baseline b(x) that depends on the prompt x lowers the policy gradient's variance by at most the
share of the reward's variance that x explains: with a perfect value V(x) = E[R | x], the residual
R - V(x) keeps only the within-prompt variance. That share is the one-way ANOVA's eta^2 (Pearson
1905; Cohen 1973, "Eta-squared and partial eta-squared in fixed factor ANOVA designs"):

    eta^2 = SS_between / SS_total,  SS_between = sum_g n_g (mean_g - mean)^2,  SS_total = sum_i (r_i - mean)^2.

With few rewards per group eta^2 is biased upwards (each group's sample mean fits part of its own
noise: a prompt seen once explains its reward entirely), so ``epsilon2`` corrects it (Kelley 1935):

    epsilon^2 = (SS_between - (G - 1) MS_within) / SS_total,  MS_within = SS_within / (N - G),

unbiased for the population share when the groups' variances are equal; it may be negative, and is
None where N = G (no within-group degree of freedom).

The groups here are a prompt's identity (``prompt_id`` in ``episodes.jsonl``, logged for sources with
a pool or a difficulty class, else the task id: then every episode is its own group) and its hidden
difficulty class (``difficulty_class``; episodes without one are left out of that share).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Hashable, Iterable, Sequence


def variance_share(rewards: Sequence[float], groups: Sequence[Hashable]) -> dict[str, float | int | None]:
    """eta^2 and epsilon^2 of ``rewards`` grouped by ``groups`` (module docstring).

    Returns ``{"eta2", "epsilon2", "n", "groups", "var"}``: ``var`` is the population variance of the
    rewards; ``eta2`` is None when there are no rewards or they are all equal (nothing to explain),
    ``epsilon2`` also when every group has one reward. Non-finite rewards are left out.
    """
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards for {len(groups)} groups")
    by_group: dict[Hashable, list[float]] = defaultdict(list)
    for r, g in zip(rewards, groups):
        if math.isfinite(r):
            by_group[g].append(float(r))
    values = [r for rs in by_group.values() for r in rs]
    n, k = len(values), len(by_group)
    if n == 0:
        return {"eta2": None, "epsilon2": None, "n": 0, "groups": 0, "var": None}
    mean = math.fsum(values) / n
    ss_total = math.fsum((r - mean) ** 2 for r in values)
    ss_between = math.fsum(len(rs) * (math.fsum(rs) / len(rs) - mean) ** 2 for rs in by_group.values())
    out: dict[str, float | int | None] = {"eta2": None, "epsilon2": None, "n": n, "groups": k, "var": ss_total / n}
    if ss_total <= 1e-12 * n:
        return out
    ss_within = max(ss_total - ss_between, 0.0)
    out["eta2"] = min(max(ss_between / ss_total, 0.0), 1.0)
    if n > k:
        out["epsilon2"] = (ss_between - (k - 1) * ss_within / (n - k)) / ss_total
    return out


def episode_variance_shares(records: Iterable[dict], *, by_phase: bool = True) -> dict[str, dict]:
    """Variance shares of ``episodes.jsonl`` records (``reward``, ``task``, optional ``prompt_id``,
    ``difficulty_class`` and ``phase``): ``{"all": {"prompt": ..., "class": ...}, "<phase>": {...}}``,
    each value ``variance_share``'s dict. ``prompt`` groups by ``prompt_id`` (else the task id); ``class``
    uses only the records that carry a ``difficulty_class`` (None where none does)."""
    records = list(records)
    scopes = {"all": records}
    if by_phase:
        for r in records:
            if "phase" in r:
                scopes.setdefault(str(r["phase"]), []).append(r)
    out = {}
    for scope, rs in scopes.items():
        classed = [r for r in rs if r.get("difficulty_class") is not None]
        out[scope] = {
            "prompt": variance_share([float(r["reward"]) for r in rs], [r.get("prompt_id", r["task"]) for r in rs]),
            "class": variance_share([float(r["reward"]) for r in classed], [r["difficulty_class"] for r in classed])
            if classed else None,
        }
    return out


def class_rewards(records: Iterable[dict], *, late_fraction: float = 0.25) -> dict[str, dict[str, float]]:
    """Each hidden class's mean reward over ``episodes.jsonl`` records that carry a ``difficulty_class``:
    ``{"all": {class: mean}, "late": {class: mean}}``, ``late`` over the last ``late_fraction`` of those
    records in file order (completion order). Non-finite rewards are left out; a class with none in a scope
    is absent from it. These are the numbers the class shares summarize, committed so that statements
    about one class's reward can be checked."""
    if not 0 < late_fraction <= 1:
        raise ValueError(f"late_fraction must be in (0, 1], got {late_fraction}")
    classed = [(r["difficulty_class"], float(r["reward"])) for r in records if r.get("difficulty_class") is not None]
    late_start = len(classed) - math.ceil(late_fraction * len(classed))
    out: dict[str, dict[str, float]] = {}
    for scope, rows in (("all", classed), ("late", classed[late_start:])):
        by_class: dict[str, list[float]] = defaultdict(list)
        for c, r in rows:
            if math.isfinite(r):
                by_class[str(c)].append(r)
        out[scope] = {c: math.fsum(rs) / len(rs) for c, rs in sorted(by_class.items())}
    return out


def run_variance_shares(run_dir: str | Path, **options) -> dict[str, dict]:
    """``episode_variance_shares`` of a run directory's ``episodes.jsonl``."""
    path = Path(run_dir) / "episodes.jsonl"
    return episode_variance_shares((json.loads(line) for line in path.read_text().splitlines() if line), **options)
