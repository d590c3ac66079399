"""What the committed tables say about each hidden class's mean reward in the critic map's classed runs.

The runs' per-class rewards were never committed (they are in each run's ``episodes.jsonl``, in the frozen
worktree's run folders), but ``per-seed.csv`` holds two numbers per run that bound them: the run's mean
reward ``m`` and the share of the reward's variance its classes explain, ``variance_share/class_eta2``
(``sao_env.evaluation.variance``: SS_between / SS_total over the run's episodes). The reward is 0 or 1
(``sao_env.graders.style``: correct x style-match), so the episodes' variance is ``m (1 - m)`` and, with
class frequencies ``f`` and class means ``mu``,

    sum_c f_c mu_c = m,    sum_c f_c (mu_c - m)^2 = eta2 m (1 - m),    0 <= mu_c <= 1.

Three unknowns and two equations: each class's mean is not determined, but it is confined to an interval.
This script writes, for every run of the cells with classes, the interval of each class's mean over the
whole run that these constraints allow, widened for what is not known exactly: the easy and learnable
classes' frequencies are their scenario weights (time-weighted over phases) within ``FREQUENCY_SLACK``, the
hard class's within twice that (each episode draws its class by weight: 0.025 is over 4 standard
deviations at the runs' 7,000 or more episodes), and the episodes' mean lies within the share of episodes
completed but not consumed of the consumed episodes' mean (``online_reward``; the shares are computed on
every completed episode). The union is taken over a grid of 5 x 5 frequencies and 5 means.

    python leaderboards/critic/class_bounds.py     # writes leaderboards/critic/per-class-bounds.csv

Bounds, not measurements: a lower bound above 0 says the class earned at least that much reward on
average over the run, whatever the other classes did.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CLASSES = ("easy", "learnable", "hard")
CELLS = ("critic-map-s50", "critic-map-s75", "critic-map-s50-drift")
"""The map's cells with more than one class (critic-map-s0 has one; the horizon cells none)."""
STEP = 5e-4
"""Resolution of the scan over a class's mean."""
FREQUENCY_SLACK = 0.025
"""How far a run's realized class frequency may be from the scenario's weight."""
OUT = HERE / "per-class-bounds.csv"


def class_weights(scenario: str, root: Path = ROOT) -> dict[str, float]:
    """Each class's expected share of a run's episodes: its weight within each phase, weighted by the
    phase's duration (``envs/<scenario>.yaml``)."""
    env = yaml.safe_load((root / "envs" / f"{scenario}.yaml").read_text())
    total = sum(p["duration_h"] for p in env["phases"])
    weights = dict.fromkeys(CLASSES, 0.0)
    for phase in env["phases"]:
        phase_total = sum(s["weight"] for s in phase["sources"])
        for source in phase["sources"]:
            weights[source["params"]["difficulty_class"]] += phase["duration_h"] / total * source["weight"] / phase_total
    return weights


def feasible_range(mean: float, eta2: float, freq: dict[str, float], target: str) -> tuple[float, float]:
    """The smallest and largest mean of class ``target`` in [0, 1] for which the other two classes' means
    can lie in [0, 1] with the classes averaging ``mean`` and explaining ``eta2`` of the variance
    ``mean (1 - mean)`` (module docstring); NaN, NaN where none can."""
    a, b = (c for c in CLASSES if c != target)
    fa, fb, ft = freq[a], freq[b], freq[target]
    second = eta2 * mean * (1 - mean) + mean * mean  # sum_c f_c mu_c^2
    xs = np.arange(0.0, 1.0 + STEP / 2, STEP)
    s = mean - ft * xs  # fa mu_a + fb mu_b
    q = second - ft * xs * xs  # fa mu_a^2 + fb mu_b^2
    # mu_b = (s - fa mu_a) / fb into the second line: A mu_a^2 + B mu_a + C = 0
    qa, qb, qc = fa + fa * fa / fb, -2 * s * fa / fb, s * s / fb - q
    disc = qb * qb - 4 * qa * qc
    root = np.sqrt(np.clip(disc, 0.0, None))
    tol = 1e-9
    ok = np.zeros(xs.shape, dtype=bool)
    for sign in (-1.0, 1.0):
        mu_a = (-qb + sign * root) / (2 * qa)
        mu_b = (s - fa * mu_a) / fb
        ok |= (disc >= -tol) & (mu_a >= -tol) & (mu_a <= 1 + tol) & (mu_b >= -tol) & (mu_b <= 1 + tol)
    if not ok.any():
        return math.nan, math.nan
    return float(xs[ok].min()), float(xs[ok].max())


def run_bounds(mean: float, eta2: float, weights: dict[str, float], mean_slack: float,
               frequency_slack: float = FREQUENCY_SLACK) -> dict[str, tuple[float, float]]:
    """Each class's interval (``feasible_range``) widened over class frequencies within ``frequency_slack``
    of ``weights`` and a mean within ``mean_slack`` of ``mean``: the union of the intervals over a grid of
    both."""
    shifts = np.linspace(-frequency_slack, frequency_slack, 5)
    means = np.clip(np.linspace(mean - mean_slack, mean + mean_slack, 5), 0.0, 1.0)
    out = {}
    for target in CLASSES:
        lows, highs = [], []
        for da, db, m in itertools.product(shifts, shifts, means):
            freq = dict(weights)
            freq[CLASSES[0]] += da
            freq[CLASSES[1]] += db
            freq[CLASSES[2]] -= da + db
            if min(freq.values()) <= 0:
                continue
            lo, hi = feasible_range(float(m), eta2, freq, target)
            if math.isfinite(lo):
                lows.append(lo)
                highs.append(hi)
        out[target] = (min(lows), max(highs)) if lows else (math.nan, math.nan)
    return out


def bounds_table(per_seed: pd.DataFrame, root: Path = ROOT) -> pd.DataFrame:
    """One row per run of ``CELLS``: its mean reward, class eta^2 and each class's interval."""
    rows = []
    for scenario in CELLS:
        weights = class_weights(scenario, root)
        runs = per_seed[per_seed["scenario"] == scenario].sort_values(["row", "seed"])
        for row in runs.to_dict("records"):
            mean, eta2 = float(row["online_reward"]), float(row["variance_share/class_eta2"])
            completed = float(row["episodes_completed"])
            slack = (completed - float(row["episodes_consumed"])) / completed if completed else 0.0
            found = run_bounds(mean, eta2, weights, slack)
            out = {"scenario": scenario, "row": row["row"], "seed": int(row["seed"]), "online_reward": mean,
                   "class_eta2": eta2}
            for c in CLASSES:
                out[f"{c}_min"], out[f"{c}_max"] = found[c]
            rows.append(out)
    return pd.DataFrame(rows)


def main() -> None:
    table = bounds_table(pd.read_csv(HERE / "per-seed.csv"))
    table.to_csv(OUT, index=False, float_format="%.4g")
    summary = table.groupby(["scenario", "row"], sort=False)[["hard_min", "hard_max"]].mean()
    print(summary.round(3).to_string())
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
