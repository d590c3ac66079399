"""Hyper-parameter sweeps: a grid of overrides on a stated cut of a scenario, every trial x seed a run.

A sweep is the tuning budget of one recipe on one scenario (equal tuning budgets, docs/leaderboard.md):

- the *cut* is a list of overrides applied to every trial (a shorter scenario, e.g.
  ``env.phases.0.duration_h=0.25``), stated in the table so the same cut can be given to every recipe;
- the *grid* is one or more ``key=v1,v2,...`` axes; the trials are their Cartesian product, in the
  order given (first axis slowest);
- each trial runs at every seed through the run machinery of ``sao_env.experiment`` (run directories
  keyed by configuration hash, finished runs with the same configuration and code reused, ``jobs``
  worker processes);
- trials are ranked by the mean of the *objective* over seeds (``auc`` or ``online_reward``, higher
  is better), with the half-width of its 95% Student-t interval.

Outputs, in the tuning folder (``runs/leaderboards/tuning`` by default, outside the tracked tree; the
committed tables are written only when asked, ``--out leaderboards/tuning``):

- ``<env>-<agent>.csv``: one row per trial x seed: trial number, one column per grid key, the
  trial's overrides, the cut, seed, config hash (12 hex digits of the configuration without its
  seed, as in the per-seed leaderboard tables), code version, run directory, the objective and
  every headline and throughput metric of the run's ``summary.json``;
- ``<env>-<agent>.md``: the trials ranked, with the cut, the grid, the sweep size and the command.
"""

from __future__ import annotations

import itertools
import json
import shlex
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import yaml

from sao_env.errors import UserError
from sao_env.evaluation.stats import mean_ci95
from sao_env.experiment import RunPlan, expand_config, plan_run, progress, resolve_config, reuse_check, run_many, writing
from sao_env.leaderboard.columns import metric_columns
from sao_env.leaderboard.records import recipe_hash
from sao_env.provenance import code_key, code_version

OBJECTIVES = ("auc", "online_reward")
"""Metrics a sweep may rank by (both higher is better; docs/metrics.md)."""


@dataclass(frozen=True)
class Axis:
    """One grid axis: an override key and the values it takes (as written, parsed as YAML by the run)."""

    key: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class Trial:
    """One point of the grid: its number (1-based, grid order) and its overrides."""

    number: int
    overrides: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.overrides)


@dataclass(frozen=True)
class Sweep:
    """A planned sweep: what runs, on which cut, at which seeds."""

    env: str
    agent: str
    axes: tuple[Axis, ...]
    cut: tuple[str, ...]
    seeds: tuple[int, ...]
    objective: str
    trials: tuple[Trial, ...]
    plans: dict[tuple[int, int], RunPlan]
    """(trial number, seed) -> its run."""

    @property
    def size(self) -> int:
        return len(self.trials) * len(self.seeds)

    @property
    def name(self) -> str:
        """``<scenario>-<recipe>``, the tables' file name (names from the configuration, not the paths given)."""
        config = next(iter(self.plans.values())).config
        return f"{config.env.name}-{config.agent.name}"


def split_values(text: str) -> list[str]:
    """``1e-4,2e-4`` -> ``['1e-4', '2e-4']``; commas inside brackets or quotes do not split
    (``[+,-],[+]`` -> ``['[+,-]', '[+]']``)."""
    values, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            values.append(text[start:i].strip())
            start = i + 1
    values.append(text[start:].strip())
    return values


def parse_axis(item: str) -> Axis:
    """``agent.hparams.lr=5e-5,1e-4`` -> Axis; a UserError for anything else."""
    if "=" not in item:
        raise UserError(f"--grid {item!r} is not of the form key=v1,v2,...")
    key, text = (part.strip() for part in item.split("=", 1))
    if not key:
        raise UserError(f"--grid {item!r} has no key")
    if key == "seed":
        raise UserError("--grid seed=...: seeds are not a hyper-parameter; give them with --seeds")
    values = split_values(text)
    if not text or any(v == "" for v in values):
        raise UserError(f"--grid {key}: empty value in {text!r}")
    for value in values:
        try:
            yaml.safe_load(value)
        except yaml.YAMLError:
            raise UserError(f"--grid {key}: value {value!r} is not valid YAML") from None
    if len(set(values)) != len(values):
        raise UserError(f"--grid {key}: a value is listed twice in {text!r}")
    return Axis(key, tuple(values))


def parse_seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UserError(f"--seeds must be comma-separated integers, got {text!r}") from None
    if not seeds or any(s < 0 for s in seeds) or len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds must list distinct non-negative integers, got {text!r}")
    return seeds


def plan_sweep(env: str, agent: str, grid: list[str], seeds: tuple[int, ...], cut: list[str] = (), *,
               objective: str = "auc", runs_dir: Path = Path("runs")) -> Sweep:
    """Parse and check the grid and the cut, then plan every trial x seed run.

    Each grid value is checked alone on the cut before anything runs, so a bad key or value is one
    UserError naming it; a key given twice (in two axes, or in an axis and the cut) is refused.
    """
    if objective not in OBJECTIVES:
        raise UserError(f"--objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if not grid:
        raise UserError("a sweep needs at least one --grid key=v1,v2,...")
    axes = tuple(parse_axis(item) for item in grid)
    cut = tuple(cut)
    keys = [a.key for a in axes]
    cut_keys = [c.split("=", 1)[0].strip() for c in cut]
    for key in keys:
        if keys.count(key) > 1:
            raise UserError(f"--grid {key} is given twice")
        if key in cut_keys:
            raise UserError(f"--grid {key} is also set by --cut; a key is either swept or cut, not both")
    for item in cut:
        _check(env, agent, [*cut], f"--cut {item}")
    for axis in axes:
        for value in axis.values:
            _check(env, agent, [*cut, f"{axis.key}={value}"], f"--grid {axis.key}={value}")
    trials = tuple(Trial(i + 1, tuple(f"{a.key}={v}" for a, v in zip(axes, combo)))
                   for i, combo in enumerate(itertools.product(*(a.values for a in axes))))
    plans = {(t.number, s): plan_run(env, agent, s, [*cut, *t.overrides], runs_dir=runs_dir)
             for t in trials for s in seeds}
    hashes: dict[str, int] = {}
    for t in trials:
        h = plans[(t.number, seeds[0])].config_hash
        if h in hashes:
            raise UserError(f"trials {hashes[h]} and {t.number} resolve to the same configuration "
                            f"({t.text}); a grid value repeats another in a different spelling")
        hashes[h] = t.number
    return Sweep(env, agent, axes, cut, tuple(seeds), objective, trials, plans)


def _check(env: str, agent: str, overrides: list[str], what: str) -> None:
    try:
        resolve_config(env, agent, 0, overrides)
    except UserError as err:
        raise UserError(f"{what}: {err}") from None


def run_sweep(sweep: Sweep, *, jobs: int = 1, skip_existing: bool = True,
              report: Callable[[str], None] = lambda line: None, cluster: Any = None) -> pd.DataFrame:
    """Make (or reuse) every run of the sweep, in ``jobs`` worker processes or as tasks on ``cluster``
    (a ``sao_env.cluster.Cluster``); returns the per-seed table (``sweep_table``)."""
    code = code_version()
    todo = []
    for (number, seed), plan in sweep.plans.items():
        reuse, why = reuse_check(plan, code) if skip_existing else (False, "rerun asked")
        if reuse:
            report(f"reuse trial {number} seed {seed}: {plan.out} ({why})")
        else:
            todo.append(plan)
    done = 0

    def on_done(plan: RunPlan, summary: dict, seconds: float) -> None:
        nonlocal done
        done += 1
        report(f"[{done}/{len(todo)}] {plan.out} in {seconds:.0f} s: {sweep.objective} {summary.get(sweep.objective, float('nan')):.3f}")

    if cluster is not None:
        from sao_env import cluster as on_cluster

        on_cluster.run_many(todo, cluster=cluster, code=code, on_done=on_done, report=report)
    else:
        run_many(todo, jobs=jobs, code=code, show_progress=progress.RUN_AMONG_OTHERS_EVERY_S, on_done=on_done,
                 on_warm_start=report)
    return sweep_table(sweep)


def sweep_table(sweep: Sweep) -> pd.DataFrame:
    """One row per trial x seed from the finished runs' ``summary.json``."""
    rows = []
    summaries = {}
    for key, plan in sweep.plans.items():
        path = plan.out / "summary.json"
        if not path.is_file():
            raise UserError(f"{plan.out}: the run did not finish (no summary.json)")
        summaries[key] = json.loads(path.read_text())
    metrics = [m for m in metric_columns(list(summaries.values())) if m != sweep.objective]
    for trial in sweep.trials:
        for seed in sweep.seeds:
            plan, summary = sweep.plans[(trial.number, seed)], summaries[(trial.number, seed)]
            row: dict[str, Any] = {"trial": trial.number}
            row |= {a.key: o.split("=", 1)[1] for a, o in zip(sweep.axes, trial.overrides)}
            row |= {"overrides": " ".join(trial.overrides), "cut": " ".join(sweep.cut), "seed": seed,
                    "config_hash": recipe_hash(expand_config(plan.config)),
                    "code_version": code_key((summary.get("provenance") or {}).get("code")),
                    "run_dir": str(plan.out), "objective": sweep.objective,
                    sweep.objective: summary.get(sweep.objective)}
            row |= {m: summary.get(m) for m in metrics}
            for m in ("episodes_per_update", "episodes_per_update_nominal"):
                if m in summary:
                    row[m] = summary[m]
            rows.append(row)
    return pd.DataFrame(rows)


def rank_trials(table: pd.DataFrame, objective: str) -> pd.DataFrame:
    """One row per trial: overrides, config hash, seeds, objective mean and 95% half-width, the
    per-seed values; ranked by the mean (highest first, ties in grid order)."""
    rows = []
    for number, runs in table.groupby("trial", sort=True):
        runs = runs.sort_values("seed")
        mean, half = mean_ci95([float(v) for v in runs[objective]])
        row = {"trial": int(number), "overrides": runs["overrides"].iloc[0], "config_hash": runs["config_hash"].iloc[0],
               "seeds": len(runs), "seed_list": ", ".join(str(int(s)) for s in runs["seed"]),
               "mean": mean, "ci95": half, "per_seed": ", ".join(f"{float(v):.3f}" for v in runs[objective])}
        for other in ("online_reward", "auc"):
            if other != objective and other in runs:
                row[other] = mean_ci95([float(v) for v in runs[other]])[0]
        rows.append(row)
    frame = pd.DataFrame(rows).sort_values(["mean", "trial"], ascending=[False, True], na_position="last", kind="stable")
    frame = frame.reset_index(drop=True)
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame


def sweep_command(sweep: Sweep, jobs: int | None = None) -> str:
    """The ``sao-env sweep`` command line that makes this sweep."""
    parts = ["sao-env", "sweep", "--env", sweep.env, "--agent", sweep.agent]
    for axis in sweep.axes:
        parts += ["--grid", f"{axis.key}={','.join(axis.values)}"]
    parts += ["--seeds", ",".join(map(str, sweep.seeds))]
    for item in sweep.cut:
        parts += ["--cut", item]
    parts += ["--objective", sweep.objective]
    if jobs is not None:
        parts += ["--jobs", str(jobs)]
    return shlex.join(parts)


def sweep_markdown(sweep: Sweep, table: pd.DataFrame, ranked: pd.DataFrame, *, command: str, csv_name: str) -> str:
    """The tuning page: what was swept on which cut, the budget, the command, and the trials ranked."""
    from sao_env.leaderboard.columns import column_format

    title = column_format(sweep.objective).title
    versions = sorted(set(table["code_version"].astype(str)))
    lines = [f"# Tuning: {sweep.agent} on {sweep.env}", "",
             "- **grid**: " + "; ".join(f"`{a.key}` in {{{', '.join(a.values)}}} (recipe: {recipe_value(sweep, a.key)})"
                                         for a in sweep.axes),
             "- **cut**: " + (", ".join(f"`{c}`" for c in sweep.cut) if sweep.cut else "none (the full scenario)"),
             f"- **seeds**: {', '.join(map(str, sweep.seeds))}",
             f"- **sweep size**: {len(sweep.trials)} trials x {len(sweep.seeds)} seeds = {sweep.size} runs",
             f"- **objective**: {title} (`{sweep.objective}`), mean over seeds, highest first; ± half-width of the "
             "95% Student-t interval over seeds (none with one seed)",
             f"- **code version**: {', '.join(versions)}",
             f"- **command**: `{command}`",
             f"- **per-seed table**: `{csv_name}`", ""]
    best = ranked.iloc[0]
    lines += [f"Winner: trial {int(best['trial'])}, `{best['overrides']}` ({title} "
              f"{_cell(best['mean'], best['ci95'])}).", ""]
    others = [c for c in ("online_reward", "auc") if c in ranked.columns]
    header = ["rank", "trial", "overrides", "config hash", f"{title} (mean ± CI)", "per seed"]
    header += [f"{column_format(c).title} (mean)" for c in others]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join("---:" if h in ("rank", "trial") or "mean" in h else "---" for h in header) + "|")
    for _, r in ranked.iterrows():
        cells = [str(int(r["rank"])), str(int(r["trial"])), f"`{r['overrides']}`", f"`{r['config_hash']}`",
                 _cell(r["mean"], r["ci95"]), r["per_seed"]] + [f"{r[c]:.3f}" for c in others]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Generated on {date.today().isoformat()}."]
    return "\n".join(lines) + "\n"


def recipe_value(sweep: Sweep, key: str) -> str:
    """The value the recipe itself gives ``key`` (every default expanded), as YAML; ``unset`` when it has none."""
    node: Any = expand_config(resolve_config(sweep.env, sweep.agent, 0, list(sweep.cut)))
    for part in key.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return "unset"
    return yaml.safe_dump(node, default_flow_style=True).strip().removesuffix("...").strip()


def _cell(mean: float, half: float) -> str:
    if pd.isna(mean):
        return "n/a"
    return f"{mean:.3f}" + ("" if pd.isna(half) else f" ± {half:.3f}")


def write_sweep(sweep: Sweep, table: pd.DataFrame, out_dir: Path, *, command: str) -> tuple[Path, Path]:
    """Write ``<env>-<agent>.csv`` and ``.md`` into ``out_dir``; returns their paths."""
    out_dir = Path(out_dir)
    csv, md = out_dir / f"{sweep.name}.csv", out_dir / f"{sweep.name}.md"
    ranked = rank_trials(table, sweep.objective)
    with writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
        table.to_csv(csv, index=False, float_format="%.6g")
        md.write_text(sweep_markdown(sweep, table, ranked, command=command, csv_name=csv.name))
    return md, csv
