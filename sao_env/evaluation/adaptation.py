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
- AUC: time-weighted mean of the current accuracy over the run (trapezoids).
"""

from __future__ import annotations

import math

import numpy as np

from sao_env.scenario import Scenario


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
