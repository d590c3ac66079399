"""The critic's fit over a run, and how long it takes to come back after each drift (summary.json).

A drift makes the critic's values stale: the returns change while V(s) still predicts the old ones,
so its explained variance drops: ``critic/explained_variance_prefit`` in metrics.jsonl, one value per
update, of the values before the critic's steps on the batch (the ones the actor's advantages use, out of
sample; ``sao_env.algos.value_diagnostics``). For each drift into phase p:

    pre-drift level  = the mean of the last ``k`` explained variances logged before the drift;
    ev_recovery_h/p  = the simulated hours from the drift to the first update after it at which the mean
                       of the last ``k`` explained variances (all logged after the drift) is back at or
                       above the pre-drift level; NaN where that never happens inside the phase, or where
                       no update before the drift logged one.

Averaging ``k`` updates (10 by default: 80 episodes at 8 per update) smooths the batch-to-batch noise
of an 8-episode explained variance; the earliest possible recovery is therefore the ``k``-th update
after the drift. Runs of agents without a critic log no explained variance and get no such keys.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from sao_env.evaluation.variance import class_rewards, episode_variance_shares

EV_KEY = "critic/explained_variance_prefit"
EV_WINDOW = 10
"""Updates averaged on either side of a drift (module docstring)."""


def ev_recovery(updates: list[dict], windows: list, *, k: int = EV_WINDOW, key: str = EV_KEY) -> dict[str, float]:
    """``ev_pre_drift/<label>``, ``ev_recovery_h/<label>`` for every phase after the first, and
    ``ev_mean/<label>`` for every phase (label ``<index from 1>_<phase name>``, as the adaptation summary's),
    from metrics.jsonl update records (``sim_time_s`` and ``key``) and the scenario's phase windows
    (``index``, ``name``, ``start_s``, ``end_s``). Empty when no record holds ``key``."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    series = [(float(r["sim_time_s"]), float(r[key])) for r in updates
              if key in r and r[key] is not None and math.isfinite(float(r[key]))]
    if not series:
        return {}
    out: dict[str, float] = {}
    for w in windows:
        label = f"{w.index + 1}_{w.name}"
        inside = [ev for t, ev in series if w.start_s <= t < w.end_s]
        out[f"ev_mean/{label}"] = float(np.mean(inside)) if inside else math.nan
        if w.index == 0:
            continue
        before = [ev for t, ev in series if t < w.start_s][-k:]
        after = [(t, ev) for t, ev in series if w.start_s <= t < w.end_s]
        pre = float(np.mean(before)) if before else math.nan
        out[f"ev_pre_drift/{label}"] = pre
        recovered = math.nan
        if before:
            for j in range(k - 1, len(after)):
                if np.mean([ev for _, ev in after[j - k + 1:j + 1]]) >= pre:
                    recovered = (after[j][0] - w.start_s) / 3600
                    break
        out[f"ev_recovery_h/{label}"] = recovered
    return out


def critic_summary(run_dir: str | Path, scenario) -> dict[str, float]:
    """The summary's critic and variance-share figures from a run directory's logs: ``ev_recovery`` of
    metrics.jsonl, and where episodes.jsonl records prompt identities (``prompt_id``) the run's shares of
    reward variance explained by the prompt and by the difficulty class (``variance_share/prompt_eta2``,
    ``variance_share/prompt_epsilon2``, ``variance_share/class_eta2``; ``sao_env.evaluation.variance``), and
    where episodes carry a hidden class each class's mean reward over the run and over its last quarter of
    episodes (``class_reward/<class>``, ``class_reward_late/<class>``; ``variance.class_rewards``)."""
    run_dir = Path(run_dir)

    def read(name: str) -> list[dict]:
        return [json.loads(line) for line in (run_dir / name).read_text().splitlines() if line]

    out = ev_recovery([r for r in read("metrics.jsonl") if r.get("kind") != "eval"], scenario.windows)
    episodes = read("episodes.jsonl")
    if any("prompt_id" in e for e in episodes):
        shares = episode_variance_shares(episodes, by_phase=False)["all"]
        nan = lambda x: math.nan if x is None else float(x)  # noqa: E731
        out["variance_share/prompt_eta2"] = nan(shares["prompt"]["eta2"])
        out["variance_share/prompt_epsilon2"] = nan(shares["prompt"]["epsilon2"])
        if shares["class"] is not None:
            out["variance_share/class_eta2"] = nan(shares["class"]["eta2"])
            out["variance_share/class_epsilon2"] = nan(shares["class"]["epsilon2"])
    by_class = class_rewards(episodes)
    for c, mean in by_class["all"].items():
        out[f"class_reward/{c}"] = mean
    for c, mean in by_class["late"].items():
        out[f"class_reward_late/{c}"] = mean
    return out
