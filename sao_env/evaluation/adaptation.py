"""Adaptation-curve metrics of one run: how fast and how well an agent follows each drift.

Inputs are the run's held-out evaluations (``evals.jsonl``: ``sim_time_s`` and
``eval/<phase>/accuracy``) and the scenario's phase windows. Definitions (docs/metrics.md):
- current accuracy: accuracy on the held-out set of the phase active at the evaluation's time;
- final accuracy of phase k: accuracy on phase k's set at the last evaluation inside phase k;
- recovery time after drift k: simulated time from the drift to the first evaluation where the
  new phase's accuracy reaches ``eval.recovery_threshold`` (NaN when it never does: censored);
- time to threshold: the same from t=0 for the first phase (learning from the warm start);
- forgetting of phase k: best accuracy on phase k's set during phase k minus its accuracy at the
  end of the run (positive = forgotten);
- AUC: time-weighted mean of the current accuracy over the run (trapezoids); ``auc_episodes`` and
  ``auc_updates`` weight it by consumed episodes and by learner updates instead (the axes of
  ``accuracy_curve``), so an agent that learns more per trajectory scores higher there.

Metrics that credit time (``credit_summary``, from a run directory's logs):
- reward per hour: the reward of every episode completed during the run over its simulated hours
  (cumulative: what the agent earned; ``reward_rate_curve`` is the same up to each episode's end);
- completion-order bias: the mean over updates of ``async/completion_bias`` (``sim``; the
  reward mean of each batch minus that of the batch start order would have formed,
  ``sao_env.runtime.core.completion_order_bias``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import numpy as np

from sao_env.scenario import Scenario


AXES: dict[str, str] = {"time": "sim_time_s", "episodes": "episodes", "updates": "updates"}
"""Axes of an adaptation curve and the evals.jsonl field behind each: simulated seconds, episodes
consumed by the learner, learner updates (all recorded at each evaluation)."""


def accuracy_curve(evals: list[dict], scenario: Scenario,
                   axis: Literal["time", "episodes", "updates"] = "time") -> list[tuple[float, float]]:
    """(x, accuracy on the active phase's set) per evaluation, x on ``axis`` (``AXES``); the phase is
    always the one active at the evaluation's simulated time."""
    if axis not in AXES:
        raise ValueError(f"unknown axis {axis!r}; known: {', '.join(AXES)}")
    return [(float(record[AXES[axis]]), a) for record, (_, a) in zip(evals, current_accuracy(evals, scenario))]


def area_under(curve: list[tuple[float, float]]) -> float:
    """Mean of the curve over its x range (trapezoids); NaN with fewer than two points or an empty range."""
    if len(curve) < 2 or curve[-1][0] == curve[0][0]:
        return math.nan
    x, y = np.array([c[0] for c in curve]), np.array([c[1] for c in curve])
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def reward_rate_curve(episodes: list[dict]) -> list[tuple[float, float]]:
    """(simulated hours t, reward earned by the episodes completed by t, divided by t) at each episode's
    end (episodes.jsonl records: ``sim_end``, ``reward``); cumulative reward per simulated hour."""
    out, total = [], 0.0
    for e in sorted(episodes, key=lambda e: e["sim_end"]):
        total += e["reward"]
        t_h = e["sim_end"] / 3600
        if t_h > 0:
            out.append((t_h, total / t_h))
    return out


def credit_summary(run_dir: Path, scenario: Scenario) -> dict[str, float]:
    """Summary metrics that credit time and samples, from a run directory's three logs (module docstring):
    ``reward_per_hour``, ``completion_bias_mean`` (NaN where no update recorded it), ``auc_episodes``,
    ``auc_updates``, ``learner_idle_frac`` (the share of the run the learner waited for a batch: in ``sim``
    1 - the simulated seconds its updates cost, ``perf/update_sim_s`` summed, over the run's length; in
    real time the last ``perf/learner_idle_frac``; NaN where neither was recorded)."""
    run_dir = Path(run_dir)

    def read(name: str) -> list[dict]:
        return [json.loads(line) for line in (run_dir / name).read_text().splitlines() if line]

    episodes = read("episodes.jsonl")
    evals = read("evals.jsonl")
    updates = [r for r in read("metrics.jsonl") if r.get("kind") != "eval"]
    bias = [r["async/completion_bias"] for r in updates if "async/completion_bias" in r]
    busy = [r["perf/update_sim_s"] for r in updates if "perf/update_sim_s" in r]
    idle = [r["perf/learner_idle_frac"] for r in updates if "perf/learner_idle_frac" in r]
    if busy:
        idle_frac = 1.0 - min(math.fsum(busy), scenario.duration_s) / scenario.duration_s
    else:
        idle_frac = float(idle[-1]) if idle else math.nan
    return {
        "reward_per_hour": math.fsum(e["reward"] for e in episodes) / (scenario.duration_s / 3600),
        "completion_bias_mean": float(np.mean(bias)) if bias else math.nan,
        "auc_episodes": area_under(accuracy_curve(evals, scenario, "episodes")),
        "auc_updates": area_under(accuracy_curve(evals, scenario, "updates")),
        "learner_idle_frac": idle_frac,
    }


def current_accuracy(evals: list[dict], scenario: Scenario) -> list[tuple[float, float]]:
    """(simulated seconds, accuracy on the active phase's set) per evaluation."""
    curve = []
    for record in evals:
        t = record["sim_time_s"]
        phase = scenario.phase_at(min(t, scenario.duration_s - 1e-9)).name
        curve.append((t, record[f"eval/{phase}/accuracy"]))
    return curve


def adaptation_summary(evals: list[dict], scenario: Scenario) -> dict[str, float]:
    threshold = scenario.spec.eval.recovery_threshold
    out: dict[str, float] = {}
    windows = scenario.windows
    for k, w in enumerate(windows):
        key = f"eval/{w.name}/accuracy"
        inside = [r for r in evals if w.start_s <= r["sim_time_s"] <= w.end_s]
        label = f"{k + 1}_{w.name}"
        out[f"final_accuracy/{label}"] = inside[-1][key] if inside else math.nan
        reached = [r["sim_time_s"] for r in inside if r[key] >= threshold]
        name = "time_to_threshold_h" if k == 0 else "recovery_h"
        out[f"{name}/{label}"] = (reached[0] - w.start_s) / 3600 if reached else math.nan
        if k < len(windows) - 1 and inside and evals:
            out[f"forgetting/{label}"] = max(r[key] for r in inside) - evals[-1][key]
    curve = current_accuracy(evals, scenario)
    if len(curve) >= 2:
        t, a = np.array([c[0] for c in curve]), np.array([c[1] for c in curve])
        out["auc"] = float(np.sum((a[1:] + a[:-1]) / 2 * np.diff(t)) / (t[-1] - t[0]))
    return out
