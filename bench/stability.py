"""The SAO paper's stability claim at CPU scale: a long run (>= 1,000 learner updates) of each agent.

Runs each agent on style-drift with every phase lengthened ``--scale`` times (held-out evaluations
every ``--eval-interval-h`` to keep the run cheap), through the ordinary run machinery (the runs
land in ``runs/style-drift/<agent>+<hash>/seed<N>`` and are reused when finished with the same
configuration and code), then

- plots training reward, policy entropy and actor grad-norm against the learner update for every
  agent (``sao_env.leaderboard.plots.plot_training``) into ``--out``;
- prints, per agent, the numbers a verdict needs: updates and episodes per update; training reward
  over the first 100 updates, the last 200 updates of each phase and the last 200 of the run;
  entropy at the start, its lowest rolling mean and at the end; grad-norm median, 99th percentile and
  maximum; steps skipped as non-finite; held-out accuracy at the end of each phase; and a collapse
  test: the first update after which the rolling mean reward (``--window`` updates) stays below half
  of the first 100 updates' mean until the end of the run (drifts make reward drop by design; a
  collapse is a drop that never recovers), or the entropy's rolling mean falls under 0.01 nats.

Run: ``python bench/stability.py [--agents sao,grpo] [--seed 0] [--scale 4] [--jobs 2]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from sao_env.experiment import plan_run, reuse_check, run_many
from sao_env.leaderboard.plots import load_updates, plot_training
from sao_env.specs import find_spec, load_yaml

ENV = "style-drift"


def cut(scale: float, eval_interval_h: float) -> list[str]:
    """The overrides of the long variant: every phase ``scale`` times longer, evaluations sparser."""
    phases = load_yaml(find_spec("envs", ENV))["phases"]
    return [f"env.phases.{i}.duration_h={p['duration_h'] * scale:g}" for i, p in enumerate(phases)] + \
        [f"env.eval.interval_h={eval_interval_h:g}"]


def verdict_numbers(run_dir: Path, window: int) -> dict:
    """The numbers of one run that the written verdict quotes (see the module doc)."""
    updates = load_updates(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    reward = pd.to_numeric(updates["train/reward_mean"], errors="coerce")
    entropy = pd.to_numeric(updates.get("actor/entropy"), errors="coerce")
    grad = pd.to_numeric(updates.get("actor/grad_norm"), errors="coerce").dropna()
    rolling = reward.rolling(window, min_periods=window).mean()
    start = float(reward.iloc[:100].mean())
    below = (rolling < start / 2).to_numpy()
    collapse = None
    for i in range(100, len(below)):
        if below[i:].all() and not np.isnan(rolling.iloc[i]):
            collapse = int(updates["update"].iloc[i])
            break
    ent_rolling = entropy.rolling(window, min_periods=window).mean()
    if collapse is None and (ent_rolling < 0.01).any():
        collapse = int(updates["update"][ent_rolling < 0.01].iloc[0])
    edges = [0.0, *[t * 3600 for t in summary["drift_times_h"]], float("inf")]
    per_phase = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = reward[(updates["sim_time_s"] >= lo) & (updates["sim_time_s"] < hi)]
        per_phase.append(round(float(inside.iloc[-200:].mean()), 3))
    final = {k.split("/", 1)[1]: round(v, 3) for k, v in summary.items() if k.startswith("final_accuracy/")}
    return {
        "updates": len(updates), "episodes_per_update": round(summary.get("episodes_per_update", float("nan")), 2),
        "reward_first_100": round(start, 3), "reward_last_200_per_phase": per_phase,
        "reward_last_200": round(float(reward.iloc[-200:].mean()), 3),
        "entropy_first_100": round(float(entropy.iloc[:100].mean()), 3),
        "entropy_min_rolling": round(float(ent_rolling.min()), 3), "entropy_last_200": round(float(entropy.iloc[-200:].mean()), 3),
        "grad_norm_median": round(float(grad.median()), 3), "grad_norm_p99": round(float(grad.quantile(0.99)), 3),
        "grad_norm_max": round(float(grad.max()), 3),
        "skipped_nonfinite": int(pd.to_numeric(updates.get("actor/skipped_nonfinite"), errors="coerce").max()),
        "heldout_final_accuracy": final, "online_reward": round(summary["online_reward"], 3),
        "collapse_at_update": collapse,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="sao,grpo")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=4.0, help="Every phase this many times longer.")
    parser.add_argument("--eval-interval-h", type=float, default=0.1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--window", type=int, default=50, help="Rolling window (updates) of the plot and the collapse test.")
    parser.add_argument("--min-updates", type=int, default=1000)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    parser.add_argument("--out", type=Path, default=Path("leaderboards/stability-style-drift.png"))
    args = parser.parse_args()

    overrides = cut(args.scale, args.eval_interval_h)
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    plans = [plan_run(ENV, agent, args.seed, overrides, runs_dir=args.runs_dir) for agent in agents]
    todo = [p for p in plans if not reuse_check(p)[0]]
    print(f"overrides: {' '.join(overrides)}", flush=True)
    run_many(todo, jobs=args.jobs, show_progress=False,
             on_done=lambda plan, summary, s: print(f"{plan.out} finished in {s:.0f} s", flush=True))
    runs = {p.config.agent.name: p.out for p in plans}
    plot_training(runs, args.out, title=f"{ENV}, phases x{args.scale:g}, seed {args.seed}: training over learner updates",
                  window=args.window)
    print(f"plot: {args.out}")
    short = False
    for name, run_dir in runs.items():
        numbers = verdict_numbers(run_dir, args.window)
        print(json.dumps({"agent": name, "run_dir": str(run_dir), **numbers}))
        short |= numbers["updates"] < args.min_updates
    if short:
        print(f"fewer than {args.min_updates} updates in a run: raise --scale", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
