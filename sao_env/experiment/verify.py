"""Re-run a committed result and say whether it reproduces (``sao-env verify``).

A committed per-seed row (a board's ``<scenario>-runs.csv``, a grid's ``per-seed.csv``) or a run
directory names one run: scenario, recipe, overrides, seed. ``verify`` makes that run again, here,
in a scratch directory, and compares:

* every number of the row (or of the run's ``summary.json``) with the re-run's, as the tables print
  them (``%.6g``): equal everywhere is **identical**;
* for a run directory, the sha256 of its three logs (metrics, evals, episodes) too;
* where something differs, each headline metric against the 95 % prediction interval for one more
  seed of that row, ``mean ± t(0.975, n-1) · sd · √(1 + 1/n)`` over the row's n committed seeds:
  inside it, the re-run is a plausible seed of the row; outside it, the row does not reproduce.

Under the pinned numerics (``sao_env.numerics``) a run is the same bytes on any x86-64 machine with
AVX2 of the vendor that made it (AMD and Intel's MKL kernels differ), so "identical" is the expected
verdict there; elsewhere (the other vendor, unpinned, ARM) the interval decides.
The row's configuration hash must equal the one the current recipe and scenario resolve to:
otherwise the recipe changed since the row was made and nothing can be verified (a ``UserError``).
A row or run recorded under another evaluation version than the current default (``eval_version`` 2,
its held-out set drawn from its seed) is made again under that version (``env.eval.version``); version 1
cannot be made again, and its evaluation numbers differ.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sao_env.errors import UserError
from sao_env.experiment.config import expand_config, load_run_config
from sao_env.experiment.files import LOGS
from sao_env.experiment.plan import RunPlan, plan_run
from sao_env.provenance import config_hash, short

HEADLINE = ("online_reward", "auc")
"""The metrics whose prediction interval is reported when a re-run is not identical."""
NOT_COMPARED = {"env", "label", "agent", "recipe", "algorithm", "overrides", "seed", "config_hash", "code_version",
                "run_dir", "row", "scenario", "phases", "drift_times_h", "collapsed_phases"}
"""Identity and text columns: they name the run, they are not its results."""


@dataclass(frozen=True)
class Target:
    """One run to re-make: its plan and what was recorded of it."""

    plan: RunPlan
    recorded: dict[str, str]
    """The recorded numbers as printed (``%.6g``), by column."""
    peers: dict[str, list[float]] = field(default_factory=dict)
    """Per headline metric, the committed values of every seed of the same row (the interval's sample)."""
    log_hashes: dict[str, str] = field(default_factory=dict)
    """sha256 of the recorded logs (a run directory only)."""
    name: str = ""
    note: str = ""
    """Why identical bytes are not expected here (the run was made under other numerics), or empty."""


@dataclass(frozen=True)
class Verdict:
    target: Target
    differing: list[tuple[str, str, str]]
    """(column, recorded, re-run) for every number that differs."""
    logs_differing: list[str]
    intervals: list[tuple[str, float, float, float]]
    """(metric, re-run value, low, high) of the prediction interval, when not identical and n >= 2."""

    @property
    def identical(self) -> bool:
        return not self.differing and not self.logs_differing

    @property
    def plausible(self) -> bool:
        return bool(self.intervals) and all(low <= value <= high for _, value, low, high in self.intervals)


def remade_version(recorded) -> int | None:
    """The evaluation version a recorded run is made again under where it is not the default: its recorded
    ``eval_version`` when that is 2 or 3 and not ``EVAL_VERSION``; None otherwise."""
    from sao_env.scenario import EVAL_VERSION

    try:
        version = int(float(recorded.get("eval_version", "")))
    except (TypeError, ValueError):
        return None
    return version if version in (2, 3) and version != EVAL_VERSION else None


def printed(value) -> str:
    """A number as the tables print it (``%.6g``; empty for a missing one)."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return ""
    try:
        return "%.6g" % float(value)
    except (TypeError, ValueError):
        return str(value)


def targets_from_table(path: Path, *, label: str | None = None, seeds: list[int] | None = None,
                       scratch: Path) -> list[Target]:
    """The rows of a per-seed table to verify (all, or those of ``label`` and ``seeds``)."""
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read the per-seed table {path} ({err})") from None
    scenario_column = "env" if "env" in table.columns else "scenario"
    label_column = "label" if "label" in table.columns else "row"
    missing = {scenario_column, label_column, "agent", "overrides", "seed", "config_hash"} - set(table.columns)
    if missing:
        raise UserError(f"{path} is not a per-seed table (no column {', '.join(sorted(missing))})")
    chosen = table
    if label is not None:
        chosen = chosen[(chosen[label_column] == label) | (chosen["agent"] == label)]
        if chosen.empty:
            raise UserError(f"{path} has no row labelled {label!r} (labels: {', '.join(sorted(set(table[label_column])))})")
    if seeds is not None:
        chosen = chosen[chosen["seed"].astype(int).isin(seeds)]
        if chosen.empty:
            raise UserError(f"{path} has no such seed{' of ' + label if label else ''}: {', '.join(map(str, seeds))}")
    targets = []
    for _, row in chosen.iterrows():
        recipe = row.get("recipe") or row["agent"].split("+")[0]
        separator = "; " if scenario_column == "env" else " "  # a board's per-seed table, a grid's
        overrides = [o for o in row["overrides"].split(separator) if o] if row["overrides"] not in ("", "?") else []
        seed = int(row["seed"])
        out = scratch / row[scenario_column] / row["agent"] / f"seed{seed}"
        plan = plan_run(row[scenario_column], recipe, seed, overrides, out=out)
        expanded = expand_config(plan.config)
        now = short(config_hash({k: v for k, v in expanded.items() if k not in ("seed", "provenance")}))
        if now != row["config_hash"]:
            raise UserError(f"{row[label_column]} seed {seed}: the recipe and scenario now resolve to configuration "
                            f"{now}, the row was made with {row['config_hash']}: they changed since, nothing to verify")
        version = remade_version(row)
        if version:
            plan = plan_run(row[scenario_column], recipe, seed, [*overrides, f"env.eval.version={version}"], out=out)
        same_row = table[(table[label_column] == row[label_column]) & (table[scenario_column] == row[scenario_column])]
        peers = {m: [float(v) for v in same_row[m] if v != ""] for m in HEADLINE if m in table.columns}
        recorded = {c: row[c] for c in table.columns if c not in NOT_COMPARED and "." not in c}  # a grid's axes: keys
        targets.append(Target(plan, recorded, peers, name=f"{row['agent'] if label_column == 'label' else row['row']} seed {seed} on {row[scenario_column]}"))
    return targets


def target_from_run(run_dir: Path, *, scratch: Path) -> Target:
    """A finished run directory to make again from its own ``config.yaml``."""
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file() or not (run_dir / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a finished run directory (no summary.json and config.yaml)")
    summary = json.loads(summary_path.read_text())
    config = load_run_config(run_dir)
    version = remade_version(summary)
    if version and config.env.eval.version is None:
        config = config.model_copy(update={"env": config.env.model_copy(
            update={"eval": config.env.eval.model_copy(update={"version": version})})})
    provenance = summary.get("provenance") or {}
    out = scratch / config.env.name / (summary.get("agent") or config.agent.name) / f"seed{config.seed}"
    plan = RunPlan(config, summary.get("agent") or config.agent.name, tuple(provenance.get("overrides") or ()),
                   config_hash(expand_config(config)), out)
    recorded = {k: printed(v) for k, v in summary.items()
                if k not in NOT_COMPARED and isinstance(v, (int, float)) and not isinstance(v, bool)}
    hashes = {log: _sha256(run_dir / log) for log in LOGS if (run_dir / log).is_file()}
    return Target(plan, recorded, {}, hashes, name=str(run_dir), note=numerics_note(provenance))


def numerics_note(provenance: dict) -> str:
    """Why a run directory's bytes are not expected here: it was made under several machines' numerics (resumed
    on another), or under numerics other than this process's; empty where its bits are this machine's."""
    from sao_env.numerics import describe_numerics, numerics_record, same_bits

    segments = provenance.get("numerics_segments") or []
    if len(segments) > 1:
        return ("made under " + " then ".join(describe_numerics(s) for s in segments)
                + ": no machine makes its bytes alone")
    recorded = provenance.get("numerics")
    if recorded and not same_bits(recorded, numerics_record()):
        return f"made on {describe_numerics(recorded)}, re-made on {describe_numerics(numerics_record())}"
    return ""


def judge(target: Target, summary: dict, record: dict) -> Verdict:
    """Compare a re-run (its ``summary.json`` and its per-seed ``record``) with what was recorded."""
    rerun = {**{k: v for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}, **record}
    differing = [(column, value, printed(rerun.get(column))) for column, value in target.recorded.items()
                 if printed(rerun.get(column)) != value]
    logs = [log for log, digest in target.log_hashes.items() if _sha256(target.plan.out / log) != digest]
    intervals = []
    if differing or logs:
        for metric, values in target.peers.items():
            if len(values) >= 2 and metric in rerun:
                low, high = prediction_interval(values)
                intervals.append((metric, float(rerun[metric]), low, high))
    return Verdict(target, differing, logs, intervals)


def prediction_interval(values: list[float]) -> tuple[float, float]:
    """95 % prediction interval for one more draw: mean ± t(0.975, n-1)·sd·√(1 + 1/n)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


def describe(verdict: Verdict) -> str:
    """One line, then the differences (at most a few), for the command's output."""
    name = verdict.target.name
    if verdict.identical:
        compared = len(verdict.target.recorded)
        logs = f" and its {len(verdict.target.log_hashes)} logs byte for byte" if verdict.target.log_hashes else ""
        return f"identical: {name} ({compared} numbers as printed{logs})"
    lines = []
    if verdict.intervals:
        parts = [f"{m} {v:.4g} {'inside' if lo <= v <= hi else 'OUTSIDE'} [{lo:.4g}, {hi:.4g}]"
                 for m, v, lo, hi in verdict.intervals]
        head = "within the seed interval" if verdict.plausible else "does not reproduce"
        lines.append(f"{head}: {name} differs in {len(verdict.differing)} numbers"
                     f"{' and ' + ', '.join(verdict.logs_differing) if verdict.logs_differing else ''}; "
                     f"95% prediction interval of its row's seeds: {'; '.join(parts)}")
    else:
        lines.append(f"differs: {name} differs in {len(verdict.differing)} numbers"
                     f"{' and ' + ', '.join(verdict.logs_differing) if verdict.logs_differing else ''} "
                     f"(no interval: fewer than 2 committed seeds of its row)")
    if verdict.target.note:
        lines.append(f"  not expected to be identical: {verdict.target.note}")
    for column, recorded, rerun in verdict.differing[:8]:
        lines.append(f"  {column}: recorded {recorded or 'none'}, re-run {rerun or 'none'}")
    if len(verdict.differing) > 8:
        lines.append(f"  ... and {len(verdict.differing) - 8} more")
    return "\n".join(lines)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
