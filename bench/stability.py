"""The SAO paper's stability claim at CPU scale: long runs (>= 1,000 learner updates) of each agent, several seeds.

Runs each agent on style-drift with every phase lengthened ``--scale`` times (held-out evaluations
every ``--eval-interval-h`` to keep the runs cheap), once per seed of ``--seeds``, through the
ordinary run machinery (the runs land in ``runs/style-drift/<agent>+<hash>/seed<N>`` and are reused
when finished with the same configuration and code), then writes into ``--out``:

- ``stability-style-drift.png``: training reward, policy entropy, actor grad-norm, the loss's
  clipped/masked share, the effective sample size and KL(rollout || current) against the learner
  update, one line per run (``sao_env.leaderboard.plots.plot_training``);
- ``stability-style-drift.csv``: one row per run with the numbers of ``verdict_numbers``;
- ``stability-style-drift-table.md``: per agent, each number's mean and 95 % Student-t interval
  over the seeds, and the collapse counts.

The numbers per run: learner updates and episodes per update; training reward over the first 100
updates and the last 200 of each phase; online reward and AUC; entropy at the start, its lowest
rolling mean and at the end; grad-norm median, 99th percentile, maximum and the updates above
``SPIKE``; steps skipped as non-finite; updates whose gradient is exactly zero (every advantage 0,
as when every GRPO group's rewards are equal) and their longest stretch; the off-policy diagnostics of docs/metrics.md
(``actor/masked_fraction``, ``actor/ess_token_frac``, ``actor/kl_k3``, ``actor/logp_gap``, the
staleness histogram ``async/staleness_frac_*``); held-out accuracy at the end of each phase; and two
collapse verdicts: the leaderboards' rule (``sao_env.evaluation.collapse``: the 64-episode rolling
training reward of a phase under half its peak until the phase ends) and entropy collapse (the
rolling entropy under ``ENTROPY_FLOOR`` nats/token).

Run: ``python bench/stability.py --out DIR [--agents sao,grpo] [--seeds 0,1,2] [--scale 2.2] [--jobs 2]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import pandas as pd

from sao_env.evaluation.collapse import collapse_record
from sao_env.evaluation.stats import mean_ci95
from sao_env.experiment import plan_run, reuse_check, run_many
from sao_env.leaderboard.plots import TRAINING_PANELS, load_updates, plot_training
from sao_env.specs import find_spec, load_yaml

ENV = "style-drift"
SPIKE = 5.0
"""An actor grad-norm above this (before clipping; the recipes clip at 1.0) is counted as a spike."""
ENTROPY_FLOOR = 0.01
"""Entropy collapse: the rolling mean entropy under this many nats per token."""
STALENESS_BINS = ("0", "1", "2_3", "4_7", "8_15", "16_up")
"""The bins of ``async/staleness_frac_*`` (docs/metrics.md)."""
PANELS = TRAINING_PANELS + (("actor/masked_fraction", "clipped/masked share"),
                            ("actor/ess_token_frac", "ESS / N (tokens)"),
                            ("actor/kl_k3", "KL(rollout||current), k3"))


def cut(scale: float, eval_interval_h: float) -> list[str]:
    """The overrides of the long variant: every phase ``scale`` times longer, evaluations sparser."""
    phases = load_yaml(find_spec("envs", ENV))["phases"]
    return [f"env.phases.{i}.duration_h={p['duration_h'] * scale:g}" for i, p in enumerate(phases)] + \
        [f"env.eval.interval_h={eval_interval_h:g}"]


def _series(updates: pd.DataFrame, key: str) -> pd.Series:
    """A per-update metric as floats, updates without it (SAO's critic-only warm-up) left out."""
    if key not in updates:
        return pd.Series(dtype=float)
    return pd.to_numeric(updates[key], errors="coerce").dropna()


def _longest_run(flags: pd.Series) -> int:
    """The longest stretch of consecutive True values (0 for none)."""
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def verdict_numbers(run_dir: Path, window: int) -> dict:
    """The numbers of one run (see the module doc), flat: one scalar per key."""
    updates = load_updates(run_dir)
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    reward = pd.to_numeric(updates["train/reward_mean"], errors="coerce")
    entropy, grad = _series(updates, "actor/entropy"), _series(updates, "actor/grad_norm")
    ent_rolling = entropy.rolling(window, min_periods=window).mean()
    low_entropy = ent_rolling[ent_rolling < ENTROPY_FLOOR]
    out: dict = {
        "updates": len(updates), "episodes_per_update": summary.get("episodes_per_update", math.nan),
        "reward_first_100": float(reward.iloc[:100].mean()),
    }
    edges = [0.0, *[t * 3600 for t in summary["drift_times_h"]], float("inf")]
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        inside = reward[(updates["sim_time_s"] >= lo) & (updates["sim_time_s"] < hi)]
        out[f"reward_last_200_phase{i + 1}"] = float(inside.iloc[-200:].mean())
    out |= {
        "online_reward": summary["online_reward"], "auc": summary["auc"],
        "entropy_first_100": float(entropy.iloc[:100].mean()), "entropy_min_rolling": float(ent_rolling.min()),
        "entropy_last_200": float(entropy.iloc[-200:].mean()),
        "grad_norm_median": float(grad.median()), "grad_norm_p99": float(grad.quantile(0.99)),
        "grad_norm_max": float(grad.max()), "grad_spikes": int((grad > SPIKE).sum()),
        "skipped_nonfinite": int(_series(updates, "actor/skipped_nonfinite").sum()),
        "zero_grad_updates": int((grad == 0).sum()), "zero_grad_longest": _longest_run(grad == 0),
    }
    masked, ess = _series(updates, "actor/masked_fraction"), _series(updates, "actor/ess_token_frac")
    kl, gap = _series(updates, "actor/kl_k3"), _series(updates, "actor/logp_gap")
    out |= {
        "masked_fraction_mean": float(masked.mean()), "masked_fraction_max": float(masked.max()),
        "ess_token_frac_mean": float(ess.mean()), "ess_token_frac_min": float(ess.min()),
        "kl_k3_mean": float(kl.mean()), "kl_k3_p99": float(kl.quantile(0.99)), "logp_gap_mean": float(gap.mean()),
        "staleness_mean": summary.get("staleness_mean", math.nan), "staleness_p95": summary.get("staleness_p95", math.nan),
    }
    for b in STALENESS_BINS:
        out[f"staleness_share_{b}"] = float(_series(updates, f"async/staleness_frac_{b}").mean())
    for k, v in summary.items():
        if k.startswith("final_accuracy/"):
            out[f"heldout_final/{k.split('/', 1)[1]}"] = v
    record = collapse_record(Path(run_dir))
    out |= {"collapsed": int(record.get("collapsed", 0)), "collapsed_phases": record.get("collapsed_phases", ""),
            "entropy_collapse_at_update": int(updates.loc[low_entropy.index[0], "update"]) if len(low_entropy) else None}
    return out


ROWS: tuple[tuple[str, str, str], ...] = (
    ("learner updates", "updates", ",.0f"),
    ("episodes per update (nominal 8)", "episodes_per_update", ".2f"),
    ("online reward", "online_reward", ".3f"),
    ("AUC", "auc", ".3f"),
    ("training reward, first 100 updates", "reward_first_100", ".3f"),
    ("training reward, last 200 updates of phase 1 (boxed)", "reward_last_200_phase1", ".3f"),
    ("training reward, last 200 updates of phase 2 (sentence)", "reward_last_200_phase2", ".3f"),
    ("training reward, last 200 updates of phase 3 (tag)", "reward_last_200_phase3", ".3f"),
    ("entropy, first 100 updates (nats/token)", "entropy_first_100", ".3f"),
    ("entropy, lowest rolling mean", "entropy_min_rolling", ".3f"),
    ("entropy, last 200 updates", "entropy_last_200", ".3f"),
    ("actor grad-norm before clipping, median", "grad_norm_median", ".2f"),
    ("actor grad-norm, p99", "grad_norm_p99", ".2f"),
    ("actor grad-norm, max", "grad_norm_max", ".2f"),
    (f"updates with grad-norm above {SPIKE:g}", "grad_spikes", ".1f"),
    ("steps skipped as non-finite", "skipped_nonfinite", ".1f"),
    ("updates with a zero gradient (every advantage 0: no learning signal)", "zero_grad_updates", ".1f"),
    ("longest stretch of zero-gradient updates", "zero_grad_longest", ".1f"),
    ("share of tokens clipped/masked by the loss, mean over updates", "masked_fraction_mean", ".4f"),
    ("share clipped/masked, largest update", "masked_fraction_max", ".3f"),
    ("ESS of the token ratios / N, mean", "ess_token_frac_mean", ".4f"),
    ("ESS / N, smallest update", "ess_token_frac_min", ".3f"),
    ("KL(rollout || current) per token (k3), mean", "kl_k3_mean", ".2e"),
    ("KL (k3), p99 over updates", "kl_k3_p99", ".2e"),
    ("mean \\|logp_rollout - logp_train\\|", "logp_gap_mean", ".4f"),
    ("staleness, mean (versions)", "staleness_mean", ".2f"),
    ("staleness, p95", "staleness_p95", ".1f"),
    *((f"share of episodes with staleness {b.replace('_up', '+').replace('_', '-')}", f"staleness_share_{b}", ".3f")
      for b in STALENESS_BINS),
)
"""The table's rows: words, the ``verdict_numbers`` key, the format of its mean and half-width."""


def cell(values: list, fmt: str) -> str:
    """``mean ± half-width`` of the 95 % interval over seeds (the mean alone for one seed)."""
    mean, half = mean_ci95([float(v) for v in values])
    if math.isnan(mean):
        return "–"
    return f"{mean:{fmt}}" + ("" if math.isnan(half) else f" ± {half:{fmt}}")


def markdown_table(frame: pd.DataFrame, agents: list[str]) -> str:
    """The aggregate table: one column per agent, mean ± 95 % interval over its seeds, then the
    held-out accuracies and the collapse counts."""
    groups = {a: frame[frame["agent"] == a] for a in agents}
    seeds = {a: len(g) for a, g in groups.items()}
    lines = ["| | " + " | ".join(f"{a} ({seeds[a]} seed{'s' * (seeds[a] != 1)})" for a in agents) + " |",
             "|---|" + "---:|" * len(agents)]
    for words, key, fmt in ROWS:
        lines.append(f"| {words} | " + " | ".join(cell(groups[a][key].tolist(), fmt) for a in agents) + " |")
    for key in sorted(c for c in frame.columns if c.startswith("heldout_final/")):
        lines.append(f"| held-out accuracy at the end of {key.split('/', 1)[1]} | "
                     + " | ".join(cell(groups[a][key].tolist(), ".3f") for a in agents) + " |")
    lines.append("| collapsed runs (leaderboards' rule, docs/metrics.md) | "
                 + " | ".join(f"{int(groups[a]['collapsed'].sum())} of {seeds[a]}" for a in agents) + " |")
    lines.append(f"| runs whose rolling entropy fell under {ENTROPY_FLOOR:g} nats/token | "
                 + " | ".join(f"{int(groups[a]['entropy_collapse_at_update'].notna().sum())} of {seeds[a]}"
                              for a in agents) + " |")
    return "\n".join(lines) + "\n"


def seeds_list(text: str) -> list[int]:
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise SystemExit(f"--seeds {text!r}: give comma-separated integers, e.g. 0,1,2") from None
    if not seeds:
        raise SystemExit("--seeds: give at least one seed")
    return seeds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="Folder for the plot, the per-seed CSV and the table.")
    parser.add_argument("--agents", default="sao,grpo")
    parser.add_argument("--seeds", default="0,1,2", help="Comma-separated seeds.")
    parser.add_argument("--scale", type=float, default=2.2, help="Every phase this many times longer.")
    parser.add_argument("--eval-interval-h", type=float, default=0.1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--window", type=int, default=50, help="Rolling window (updates) of the plot and the entropy test.")
    parser.add_argument("--min-updates", type=int, default=1000)
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"))
    args = parser.parse_args()

    overrides = cut(args.scale, args.eval_interval_h)
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    seeds = seeds_list(args.seeds)
    plans = [plan_run(ENV, agent, seed, overrides, runs_dir=args.runs_dir) for agent in agents for seed in seeds]
    todo = [p for p in plans if not reuse_check(p)[0]]
    print(f"overrides: {' '.join(overrides)}; {len(plans) - len(todo)} of {len(plans)} runs reused", flush=True)
    run_many(todo, jobs=args.jobs, show_progress=False,
             on_done=lambda plan, summary, s: print(f"{plan.out} finished in {s:.0f} s", flush=True))
    args.out.mkdir(parents=True, exist_ok=True)
    runs = {f"{p.config.agent.name} s{p.config.seed}": p.out for p in plans}
    plot = plot_training(runs, args.out / f"stability-{ENV}.png", window=args.window, panels=PANELS,
                         title=f"{ENV}, phases x{args.scale:g}, seeds {args.seeds}: training over learner updates")
    rows = [{"agent": p.config.agent.name, "seed": p.config.seed, "run_dir": str(p.out),
             **verdict_numbers(p.out, args.window)} for p in plans]
    frame = pd.DataFrame(rows)
    frame.to_csv(args.out / f"stability-{ENV}.csv", index=False)
    table = markdown_table(frame, agents)
    (args.out / f"stability-{ENV}-table.md").write_text(table)
    print(f"plot: {plot}\nper-seed: {args.out / f'stability-{ENV}.csv'}\n\n{table}")
    short = frame[frame["updates"] < args.min_updates]
    if len(short):
        print(f"{len(short)} run(s) with fewer than {args.min_updates} updates: raise --scale", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
