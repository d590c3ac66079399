"""Scenario leaderboards: per-seed records, their aggregation per recipe, and the tables people read.

The rule (docs/leaderboard.md): every agent runs the same scenario for the same simulated time
on the same number of rollout slots, with the seeds listed; simulated time is what counts, wall
time is reported apart. Cells are mean ± half-width of a 95% Student-t interval over seeds.
Recovery times that never happened are left out of the mean and their count is shown.

Three tables per scenario, all in the leaderboard folder:

- ``<env>-runs.csv``, the per-seed table: one row per (recipe, seed) with the recipe's label,
  agent, algorithm, overrides, seed, config hash, code version, the scenario's budget
  (``duration_h``, ``rollout_slots``, ``eval_interval_h``, ``recovery_threshold``, ``phases``,
  ``drift_times_h``) and every numeric summary metric. ``<env>-curves.csv`` beside it holds the
  adaptation curves (label, seed, sim_time_h, accuracy). The leaderboard can be rebuilt from
  these two files alone.
- ``<env>.csv``: one row per recipe, ``<metric>``, ``<metric>_ci95`` and ``<metric>_missed``.
- ``<env>.md``: the header facts and the headline columns, consistently formatted.

A recipe is an agent recipe plus its overrides: runs whose resolved configuration (seed aside)
hashes the same are seeds of one row; a run with overrides is its own row, labelled with them.
"""

from __future__ import annotations

import io
import json
import math
import sys
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from sao_env.errors import UserError
from sao_env.evaluation.stats import mean_ci95, paired_difference
from sao_env.experiment.files import replacing
from sao_env.leaderboard.stats import (ALPHA, EXACT_MAX_N, MC_DRAWS, MC_SEED, MIN_PAIRED, POWER, Comparison, format_mde,
                                       format_rank, min_detectable_difference, min_seeds, pairwise, pooled_sd, rank_ranges,
                                       seeds_for_difference, smallest_p, supported_leader)
from sao_env.provenance import code_key, config_hash, short

SORT_KEY = "online_reward"
"""Rows are ranked by this metric, best (highest) first."""
LEADING = ["online_reward", "auc"]
TRAILING = ["episodes_per_hour", "updates_per_hour", "episodes_per_update", "staleness_mean", "staleness_p95",
            "masked_fraction"]
PHASE_METRICS = ("final_accuracy", "time_to_threshold_h", "recovery_h", "forgetting")
FACT_COLUMNS = ["duration_h", "rollout_slots", "eval_interval_h", "recovery_threshold", "phases", "drift_times_h"]
ID_COLUMNS = ["env", "label", "agent", "recipe", "algorithm", "overrides", "seed", "config_hash", "code_version",
              "eval_version"]
"""Per-seed identity: ``label`` is what tables show (the recipe, with its overrides when they change
the configuration); ``agent`` the run's own label (its directory name, ``sao+<hash>`` with overrides);
``recipe`` the agent recipe's name."""
UNKNOWN = "?"
"""What a table shows for a fact its input did not record (tolerant reading of older CSVs)."""
REFERENCE = "grpo"
"""The recipe every other row is compared with, seed by seed, when both are on the board."""
NO_COLLAPSE = "online_reward_without_collapsed"
"""The sort key's mean over the seeds that did not collapse (``sao_env.evaluation.collapse``)."""


# ----------------------------------------------------------------------------- metric columns


EVAL_METRICS = ("auc", "auc_episodes", "auc_updates")
"""Summary metrics read from the held-out evaluations (besides the per-phase ones, ``EVAL_PHASE_METRICS``)."""
EVAL_PHASE_METRICS = ("final_accuracy", "time_to_threshold_h", "recovery_h", "forgetting")
EVAL_VERSIONS = {
    1: "held-out prompts and sampling streams shared by every seed at a time point, so seed intervals of "
       "evaluation metrics leave out the evaluation's own noise",
    2: "held-out prompts and sampling streams keyed by the run's seed: shared by every recipe at a seed, "
       "independent across seeds",
    3: "one held-out set per phase fixed by the scenario, shared by every seed and recipe; sampling streams "
       "keyed by the run's seed: shared by every recipe at a seed, independent across seeds",
}
"""What each evaluation version means (``sao_env.evaluation.heldout.EVAL_VERSION``; runs that do not
record one are version 1)."""


def is_eval_metric(name: str) -> bool:
    """Whether a summary metric comes from the held-out evaluations (its value depends on the evaluation version)."""
    return name in EVAL_METRICS or name.split("/", 1)[0] in EVAL_PHASE_METRICS and "/" in name


def eval_versions(values: Any) -> list[int]:
    """The evaluation versions among per-run ``eval_version`` values (missing or NaN: 1), sorted."""
    found = set()
    for value in values:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        found.add(1 if math.isnan(number) else int(number))
    return sorted(found)


def evaluation_text(versions: list[int]) -> str:
    """``version 2 (what it means)`` for the versions that made a table's evaluation metrics."""
    return "; ".join(f"version {v} ({EVAL_VERSIONS.get(v, 'unknown')})" for v in versions) or UNKNOWN


def metric_columns(summaries: list[dict]) -> list[str]:
    """Metric names in table order: online reward, AUC, per phase (final accuracy, time to
    threshold or recovery, forgetting), then throughput, staleness and masked fraction."""
    keys = {k for s in summaries for k, v in s.items() if _is_number(v)}
    phase_keys = [k for k in keys if "/" in k and k.split("/")[0] in PHASE_METRICS]
    phase_keys.sort(key=lambda k: (k.split("/", 1)[1], PHASE_METRICS.index(k.split("/")[0])))
    return [k for k in LEADING if k in keys] + phase_keys + [k for k in TRAILING if k in keys]


def headline_columns(columns: list[str]) -> list[str]:
    """The few columns shown first: online reward, AUC and the recovery time after each drift."""
    return [c for c in columns if c in LEADING or c.startswith("recovery_h/")]


@dataclass(frozen=True)
class ColumnFormat:
    """How one metric is titled and printed."""

    title: str
    decimals: int
    higher_is_better: bool | None
    """None: neither direction is better (e.g. staleness)."""


def column_format(column: str) -> ColumnFormat:
    """Title, decimals and direction of a metric column (phase metrics name their phase)."""
    if "/" in column:
        kind, phase = column.split("/", 1)
        phase = phase.split("_", 1)[1] if "_" in phase else phase
        titles = {"final_accuracy": (f"final accuracy, {phase}", 3, True),
                  "time_to_threshold_h": (f"time to threshold, {phase} (h)", 3, False),
                  "recovery_h": (f"recovery to {phase} (h)", 3, False),
                  "forgetting": (f"forgetting, {phase}", 3, False)}
        if kind in titles:
            return ColumnFormat(*titles[kind])
    fixed = {"online_reward": ("online reward", 3, True), "auc": ("AUC", 3, True),
             "episodes_per_hour": ("episodes / h", 0, None), "updates_per_hour": ("updates / h", 0, None),
             "episodes_per_update": ("episodes / update", 2, None),
             "staleness_mean": ("staleness, mean", 2, None), "staleness_p95": ("staleness, p95", 1, None),
             "masked_fraction": ("DIS-masked fraction", 3, None),
             "reward_per_hour": ("reward / h", 1, True), "completion_bias_mean": ("completion-order bias", 3, None),
             "learner_wait_s": ("straggler wait (s)", 0, None), "learner_idle_frac": ("learner idle", 3, None),
             NO_COLLAPSE: ("online reward, collapsed runs left out", 3, True)}
    title, decimals, better = fixed.get(column, (column, 3, None))
    return ColumnFormat(title, decimals, better)


def format_cell(mean: float, half: float, missed: int, seeds: int, column: str) -> str:
    """``0.445 ± 0.012``; ``never`` when no seed got there; ``0.070 (1 of 3 never)`` when some did not."""
    missed = 0 if missed is None or (isinstance(missed, float) and math.isnan(missed)) else int(missed)
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "never" if missed else "n/a"
    decimals = column_format(column).decimals
    text = f"{mean:,.{decimals}f}"
    if half is not None and not math.isnan(half):
        text += f" ± {half:,.{decimals}f}"
    if missed:
        text += f" ({missed} of {int(seeds)} never)"
    return text


# ----------------------------------------------------------------------------- per-seed records


def load_summaries(run_dirs: list[Path], left_out: list[tuple[Path, str]] | None = None) -> list[dict]:
    """``summary.json`` of each finished run directory, with ``run_dir`` added. A run that ``read_run``
    refuses is left out: appended to ``left_out`` as (run directory, why), or without that list said in
    one line on stderr."""
    out = []
    for d in run_dirs:
        if not (Path(d) / "summary.json").is_file():
            continue
        try:
            out.append(read_run(Path(d)))
        except BadRun as err:
            if left_out is None:
                print(f"sao-env: warning: {d}: {err}; the run is left out of the board", file=sys.stderr)
            else:
                left_out.append((Path(d), str(err)))
    return out


class BadRun(ValueError):
    """A finished run's files that cannot be read whole (cut off, not JSON, a number that is not finite)."""


RUN_LOGS = ("evals.jsonl", "episodes.jsonl")
"""A run's logs that boards read, one JSON object a line."""


def read_run(run_dir: Path) -> dict:
    """``run_dir``'s summary with ``run_dir`` added, once its ``summary.json`` is a JSON object with an
    agent, a finite sort key and no infinite number, and each line of ``RUN_LOGS`` it holds is a JSON
    object; otherwise ``BadRun`` naming the file and the place."""
    summary = _json(run_dir / "summary.json", "summary.json")
    if not isinstance(summary, dict) or "agent" not in summary:
        raise BadRun("summary.json is not a run's summary (a JSON object with its agent)")
    for key, value in summary.items():
        if isinstance(value, float) and (math.isinf(value) or (key == SORT_KEY and math.isnan(value))):
            raise BadRun(f"summary.json: {key} is {value}, not a finite number")
    for name in RUN_LOGS:
        path = run_dir / name
        if path.is_file():
            _check_lines(path, name)
    return summary | {"run_dir": str(run_dir)}


def _json(path: Path, name: str):
    """The JSON document at ``path``; ``BadRun`` when it is cut off or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise BadRun(f"{name} is cut off or not JSON at line {err.lineno}, column {err.colno}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise BadRun(f"{name} cannot be read ({getattr(err, 'strerror', None) or err})") from None


def _check_lines(path: Path, name: str) -> None:
    """``BadRun`` naming the first line of ``path`` that is not a JSON object (a log cut off mid-line)."""
    try:
        with path.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.strip() and not isinstance(_line(line), dict):
                    raise BadRun(f"{name} line {number} is cut off or not a JSON object")
    except (OSError, UnicodeDecodeError) as err:
        raise BadRun(f"{name} cannot be read ({getattr(err, 'strerror', None) or err})") from None


def _line(text: str):
    """The JSON value of one line, or None where it is not JSON."""
    try:
        return json.loads(text)
    except ValueError:
        return None


def scenario_facts(spec_env: dict) -> dict[str, Any]:
    """The budget and rule facts of a scenario spec (``config.yaml``'s ``env`` mapping)."""
    from sao_env.scenario import Scenario, ScenarioSpec

    scenario = Scenario(ScenarioSpec(**spec_env))
    return {
        "duration_h": round(scenario.duration_s / 3600, 6),
        "rollout_slots": scenario.spec.rollout_slots,
        "eval_interval_h": scenario.spec.eval.interval_h,
        "recovery_threshold": scenario.spec.eval.recovery_threshold,
        "phases": ";".join(w.name for w in scenario.windows),
        "drift_times_h": ";".join(f"{t / 3600:g}" for t in scenario.drift_times_s),
    }


def auc_eval_sd(curve: list[tuple[float, float]], prompts: int) -> float:
    """The standard deviation that the held-out evaluation's own sampling adds to a run's AUC:
    ``sqrt(sum_i w_i^2 a_i (1 - a_i) / prompts)`` over the run's evaluations, ``a_i`` the current
    phase's accuracy at evaluation i and ``w_i`` its trapezoid weight in the AUC (the weights sum to
    1). Binomial over the prompts, each evaluation independent (evaluation versions 2 and 3; under
    version 3, whose set is fixed, an upper bound, reached where the prompts share one success rate); on
    the scenarios' warm starts the sd measured over 16 seeds' streams agrees with it
    (bench/bench_eval_noise.py, docs/metrics.md). NaN with fewer than two evaluations."""
    if len(curve) < 2 or curve[-1][0] == curve[0][0] or prompts < 1:
        return math.nan
    t = np.array([c[0] for c in curve], dtype=float)
    a = np.clip(np.array([c[1] for c in curve], dtype=float), 0.0, 1.0)
    w = np.zeros(len(t))
    w[:-1] += np.diff(t) / 2
    w[1:] += np.diff(t) / 2
    w /= t[-1] - t[0]
    return float(math.sqrt(float(np.sum(w ** 2 * a * (1 - a))) / prompts))


def recipe_hash(config: dict) -> str:
    """Short hash of a run's resolved configuration without its seed (and provenance): the runs
    that share it are seeds of one recipe on one scenario."""
    return short(config_hash({k: v for k, v in config.items() if k not in ("seed", "provenance")}))


def run_record(summary: dict) -> tuple[dict, list[tuple[float, float]]]:
    """One per-seed row and its adaptation curve (simulated hours, current accuracy) from a
    summary that carries ``run_dir``; a summary without one (a test's dict) has no curve and
    takes its facts from the summary itself.

    A run directory with ``episodes.jsonl`` adds ``collapsed`` (1 or 0) and ``collapsed_phases``
    (``sao_env.evaluation.collapse``, docs/metrics.md "Collapse").

    Identity comes from the run's provenance (``summary.json``/``config.yaml``: the overrides as
    given, the code version); runs written before provenance was recorded show ``?`` for both.
    """
    from sao_env.evaluation.adaptation import current_accuracy
    from sao_env.evaluation.collapse import collapse_record
    from sao_env.scenario import Scenario, ScenarioSpec

    run_dir = summary.get("run_dir")
    config = None
    if run_dir and (Path(run_dir) / "config.yaml").is_file():
        config = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    provenance = summary.get("provenance") or (config or {}).get("provenance") or {}
    recipe = summary.get("recipe") or summary["agent"]
    record: dict[str, Any] = {"env": summary.get("env", UNKNOWN), "agent": summary["agent"], "recipe": recipe,
                              "algorithm": summary.get("algorithm", UNKNOWN), "seed": summary.get("seed"),
                              "eval_version": int(summary.get("eval_version", 1))}
    if provenance:
        record["overrides"] = "; ".join(provenance.get("overrides") or [])
        record["code_version"] = code_key(provenance.get("code"))
    else:
        record["overrides"] = summary.get("overrides", UNKNOWN if config is not None else "")
        record["code_version"] = summary.get("code_version", UNKNOWN)
    curve: list[tuple[float, float]] = []
    if config is not None:
        record["config_hash"] = recipe_hash(config)
        record |= scenario_facts(config["env"])
        evals_path = Path(run_dir) / "evals.jsonl"
        if evals_path.is_file():
            evals = [json.loads(line) for line in evals_path.read_text().splitlines() if line]
            scenario = Scenario(ScenarioSpec(**config["env"]))
            curve = [(t / 3600, acc) for t, acc in current_accuracy(evals, scenario)]
            record["auc_eval_sd"] = auc_eval_sd(curve, scenario.spec.eval.prompts_per_phase)
        record |= collapse_record(Path(run_dir))
    else:
        record["config_hash"] = summary.get("config_hash", "")
    changed = summary["agent"] != recipe  # the run's label carries a hash: overrides changed the configuration
    record["label"] = summary.get("label") or (_label(recipe, record["overrides"]) if changed else recipe)
    for key, value in summary.items():
        if key not in record and _is_number(value) and key != "seed":
            record[key] = float(value)
    return record, curve


def _label(agent: str, overrides: str) -> str:
    """``sao (agent.hparams.lr=3e-5)``: a recipe run with overrides is labelled with them."""
    return f"{agent} ({overrides})" if overrides and overrides != UNKNOWN else agent


def records_frame(records: list[dict]) -> pd.DataFrame:
    """The per-seed table: identity and budget columns first, then the metrics in table order."""
    metrics = metric_columns(records)
    rest = sorted({k for r in records for k in r} - set(ID_COLUMNS) - set(FACT_COLUMNS) - set(metrics))
    columns = [c for c in ID_COLUMNS + FACT_COLUMNS if any(c in r for r in records)] + metrics + rest
    frame = pd.DataFrame(records, columns=columns)
    return frame.sort_values(["label", "seed"], kind="stable").reset_index(drop=True)


# ----------------------------------------------------------------------------- aggregation


def leaderboard_frame(summaries: list[dict]) -> pd.DataFrame:
    """One row per recipe (``label``, default the agent name): seeds, mean, 95% CI and, for times
    that can fail to happen, the count of seeds that never got there; ranked by ``SORT_KEY``.

    ``rank`` is the order of the means; ``rank_low``/``rank_high`` the range of ranks the seeds
    support (``rank_ranges``: equal when a paired test supports the row's place, else a tie); the
    ranks in ``online_reward_without_collapsed`` are ``ScenarioBoard.comparisons``' on that column.
    When the runs recorded a collapse verdict, ``collapses`` counts the collapsed seeds,
    ``collapse_checked`` the seeds with a verdict, and ``online_reward_without_collapsed`` (with
    its ``_ci95``) is the sort key over the seeds that did not collapse."""
    columns = metric_columns(summaries)
    with_collapse = any(finite_float(s.get("collapsed")) is not None for s in summaries)
    rows = []
    for label in sorted({s.get("label") or s["agent"] for s in summaries}):
        runs = [s for s in summaries if (s.get("label") or s["agent"]) == label]
        seeds = [s.get("seed") for s in runs]
        known = all(_is_number(x) for x in seeds)
        row = {"label": label, "agent": runs[0]["agent"], "recipe": runs[0].get("recipe", runs[0]["agent"]),
               "algorithm": runs[0].get("algorithm", UNKNOWN),
               "overrides": runs[0].get("overrides", ""), "seeds": len(runs),
               "seed_list": ", ".join(str(int(x)) for x in sorted(seeds)) if known else UNKNOWN,
               "config_hash": ", ".join(sorted({str(s.get("config_hash") or "") for s in runs} - {""})),
               "code_version": ", ".join(sorted({str(s.get("code_version") or "") for s in runs} - {""}))}
        if with_collapse:
            verdicts = [finite_float(s.get("collapsed")) for s in runs]
            row["collapses"] = sum(1 for v in verdicts if v)
            row["collapse_checked"] = sum(1 for v in verdicts if v is not None)
        for c in columns:
            values = [s.get(c, math.nan) for s in runs]
            values = [math.nan if v is None else float(v) for v in values]
            mean, half = mean_ci95(values)
            row[c], row[f"{c}_ci95"] = mean, half
            if c.startswith(("recovery_h", "time_to_threshold_h")):
                row[f"{c}_missed"] = sum(1 for v in values if math.isnan(v))
            if c == SORT_KEY and with_collapse:
                kept = [float(s.get(c, math.nan)) for s in runs if finite_float(s.get("collapsed")) == 0.0]
                row[NO_COLLAPSE], row[f"{NO_COLLAPSE}_ci95"] = mean_ci95(kept)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if SORT_KEY in frame:
        frame = frame.sort_values(SORT_KEY, ascending=False, kind="stable", na_position="last")
    frame = frame.reset_index(drop=True)
    frame.insert(0, "rank", range(1, len(frame) + 1))
    labels = [str(x) for x in frame["label"]]
    ranges = rank_ranges(labels, pairwise(per_seed_values(summaries, labels, SORT_KEY))) if SORT_KEY in frame \
        else {x: (1, len(labels)) for x in labels}
    frame.insert(1, "rank_low", [ranges[x][0] for x in labels])
    frame.insert(2, "rank_high", [ranges[x][1] for x in labels])
    return frame


def per_seed_values(records, labels: list[str], metric: str) -> dict[str, dict]:
    """``{label: {seed: value}}`` of one metric from per-seed records (dicts or a DataFrame), in
    ``labels``' order; missing or NaN values are None. ``NO_COLLAPSE`` is the sort key of the seeds
    whose collapse verdict is 0 (None for a collapsed seed or one without a verdict), as the
    aggregate's mean of that column takes it."""
    rows = records.to_dict("records") if isinstance(records, pd.DataFrame) else records
    out: dict[str, dict] = {x: {} for x in labels}
    for r in rows:
        label = str(r.get("label") or r["agent"])
        if label in out:
            if metric == NO_COLLAPSE:
                value = finite_float(r.get(SORT_KEY)) if finite_float(r.get("collapsed")) == 0.0 else None
            else:
                value = finite_float(r.get(metric))
            out[label][_seed_key(r.get("seed"))] = value
    return out


def distinct_labels(records: list[dict]) -> None:
    """Make labels unique per configuration: recipes whose overrides could not be recovered but
    whose configurations differ get their config hash appended."""
    hashes: dict[str, set[str]] = {}
    for r in records:
        hashes.setdefault(r["label"], set()).add(str(r.get("config_hash") or ""))
    for r in records:
        if len(hashes[r["label"]]) > 1:
            r["label"] = f"{r['label']} [{r.get('config_hash') or 'no hash'}]"


# ----------------------------------------------------------------------------- one scenario


def code_versions(boards: list["ScenarioBoard"]) -> list[str]:
    """The code versions that made the boards' runs (each row's ``code_version`` cell lists them), sorted."""
    return sorted({v for b in boards for cell in b.frame["code_version"].astype(str) for v in cell.split(", ")
                   if v and v != "nan"})


@dataclass
class ScenarioBoard:
    """Everything the outputs of one scenario are made from."""

    env: str
    facts: dict[str, Any]
    """Budget and rule facts (FACT_COLUMNS), plus ``description``; ``facts_from`` says where they were read."""
    frame: pd.DataFrame
    """Aggregated rows (``leaderboard_frame``)."""
    records: pd.DataFrame | None = None
    """Per-seed rows; None when the input held aggregated rows only."""
    curves: pd.DataFrame | None = None
    """label, seed, sim_time_h, accuracy; None when unknown."""
    source: str = "run directories"
    notes: list[str] = field(default_factory=list)
    reference: str = REFERENCE
    """Label of the row the paired differences are taken against (``paired_frame``)."""
    apart: list["ScenarioBoard"] = field(default_factory=list)
    """Boards of the same scenario's rows at other budgets: each its own table, ranked apart."""
    full_budget: bool | None = None
    """Whether the budget is the scenario file's (envs/<env>.yaml): False for a cut, None when
    there is no such file to check against or the rows did not record their budget."""
    records_all: pd.DataFrame | None = None
    """Per-seed rows of this board and of ``apart`` together (what ``<env>-runs.csv`` holds)."""
    curves_all: pd.DataFrame | None = None
    """Curves of this board and of ``apart`` together (what ``<env>-curves.csv`` holds)."""
    _tests: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def metrics(self) -> list[str]:
        return [c for c in self.frame.columns if f"{c}_ci95" in self.frame.columns]

    def comparisons(self, metric: str = SORT_KEY) -> list[Comparison]:
        """Every pair of rows compared paired by seed on ``metric`` (``stats.pairwise``, Holm over
        the pairs made), rows in rank order; empty without per-seed rows or a direction. On
        ``NO_COLLAPSE`` a pair is compared over the seeds where neither run collapsed."""
        if metric not in self._tests:
            better = column_format(metric).higher_is_better
            source = "collapsed" if metric == NO_COLLAPSE else metric
            if self.records is None or self.records.empty or better is None or source not in self.records.columns:
                self._tests[metric] = []
            else:
                labels = [str(x) for x in self.frame["label"]]
                self._tests[metric] = pairwise(per_seed_values(self.records, labels, metric), higher_is_better=better)
        return self._tests[metric]

    def supported_best(self, metric: str) -> str | None:
        """The row whose lead in ``metric`` every paired test supports (``stats.supported_leader``)."""
        return supported_leader([str(x) for x in self.frame["label"]], self.comparisons(metric))


def budget_key(facts: dict) -> tuple[str, ...]:
    """The budget of a row or a scenario as comparable text: one entry per ``FACT_COLUMNS``
    (numbers as ``%g``, so that ``16`` and ``16.0`` read from a CSV are the same budget)."""
    def text(value: Any) -> str:
        value = _from_csv(value)
        if value is None:
            return UNKNOWN
        x = finite_float(value) if not isinstance(value, str) else None
        return f"{x:g}" if x is not None else str(value)

    return tuple(text(facts.get(c)) for c in FACT_COLUMNS)


def spec_budget(env: str) -> tuple[str, ...] | None:
    """``budget_key`` of the scenario file ``envs/<env>.yaml`` as it is now; None without one."""
    from sao_env.specs import find_spec, load_yaml

    try:
        return budget_key(scenario_facts(load_yaml(find_spec("envs", env))))
    except UserError:
        return None


def budget_words(facts: dict) -> str:
    """``0.65 simulated hours, 16 rollout slots, evaluation every 0.02 h``."""
    return (f"{_num(facts.get('duration_h'))} simulated hours, {_num(facts.get('rollout_slots'))} rollout slots, "
            f"evaluation every {_num(facts.get('eval_interval_h'))} h")


def shared_overrides(records: list[dict]) -> list[str]:
    """The overrides every row was run with (a cut of the scenario that all rows share), in the first
    row's order; none unless there are several rows, each with its overrides recorded and labelled by
    them (``_label``, as recorded or already without the shared ones)."""
    if len({r.get("label") for r in records}) < 2:
        return []
    items = [[x for x in str(r.get("overrides") or "").split("; ") if x] for r in records]
    if any(str(r.get("overrides")) == UNKNOWN for r in records) or not all(items):
        return []
    shared = [x for x in dict.fromkeys(items[0]) if all(x in mine for mine in items[1:])]
    if not shared:
        return []
    for r, mine in zip(records, items):
        recipe = str(r.get("recipe") or r.get("agent"))
        if r.get("label") not in (_label(recipe, "; ".join(mine)), _label(recipe, "; ".join(x for x in mine if x not in shared))):
            return []
    return shared


def factor_shared(records: list[dict], curves: list[tuple[str, Any, float, float]]):
    """``(records, curves, shared)``: the overrides every row shares (``shared_overrides``) left out of
    the labels (``sao (env.phases.0.duration_h=0.02; ...)`` -> ``sao``), so that a board, its pairs and
    its legend name what differs and a note says what all rows share. Unchanged where nothing is shared
    or where leaving it out would give two rows one label."""
    shared = shared_overrides(records)
    if not shared:
        return records, curves, []
    renamed = {}
    for r in records:
        rest = "; ".join(x for x in str(r["overrides"]).split("; ") if x and x not in shared)
        renamed[r["label"]] = _label(str(r.get("recipe") or r.get("agent")), rest)
    if len(set(renamed.values())) != len(renamed):
        return records, curves, []
    records = [r | {"label": renamed[r["label"]]} for r in records]
    curves = [(renamed.get(c[0], c[0]), *c[1:]) for c in curves]
    return records, curves, shared


def board_from_records(env: str, records: list[dict], curves: list[tuple[str, Any, float, float]],
                       *, source: str) -> ScenarioBoard:
    """A scenario's board from per-seed records and curve points ``(label, seed, hours, accuracy)``.

    A board ranks one budget (docs/leaderboard.md): rows are grouped by ``budget_key``; the board
    is the group at the scenario file's budget when there is one, else the largest group (the
    first of equal ones), and every other group is a board of its own in ``apart`` (ordered by
    budget), ranked apart and named in a note. Overrides that every row shares are left out of the
    labels and said once, in a note (``factor_shared``)."""
    distinct_labels(records)
    records, curves, shared = factor_shared(records, curves)
    known = [r for r in records if any(c in r for c in FACT_COLUMNS)]
    groups: dict[tuple[str, ...], list[dict]] = {}
    for r in records:
        groups.setdefault(budget_key(r) if known else (), []).append(r)
    spec = spec_budget(env) if known else None
    main_key = spec if spec in groups else max(groups, key=lambda k: len(groups[k]))
    boards = {}
    for key, rows in groups.items():
        labels = {r["label"] for r in rows}
        facts, notes = _common_facts(env, rows)
        mine = [c for c in curves if c[0] in labels]
        curve_frame = pd.DataFrame(mine, columns=["label", "seed", "sim_time_h", "accuracy"]) if mine else None
        boards[key] = ScenarioBoard(env, facts, leaderboard_frame(rows), records_frame(rows), curve_frame, source, notes,
                                    full_budget=None if spec is None or not known else key == spec)
    main = boards[main_key]
    main.apart = [boards[k] for k in sorted(groups) if k != main_key]
    main.records_all = records_frame(records)
    main.curves_all = pd.DataFrame(curves, columns=["label", "seed", "sim_time_h", "accuracy"]) if curves else None
    if main.apart:
        main.notes.append("Rows at another budget are not ranked with these: "
                          + "; ".join(f"{', '.join(map(str, b.frame['label']))} ({budget_words(b.facts)})"
                                      for b in main.apart) + ", each in its own table below.")
    if shared:
        main.notes.append(f"Every row was run with {'; '.join(shared)} (shared by all rows, so left out of their "
                          "labels; the per-seed table's overrides column keeps each run's whole list).")
    if main.full_budget is False:
        main.notes.append(f"Not the budget of envs/{env}.yaml ({budget_words(dict(zip(FACT_COLUMNS, spec)))}): "
                          "a cut of the scenario; the cross-scenario summary lists it apart from full-budget boards.")
    return main


def board_from_run_dirs(run_dirs: list[Path], env: str | None = None) -> ScenarioBoard:
    """The board of finished run directories (one scenario)."""
    summaries = load_summaries(run_dirs)
    if not summaries:
        raise UserError(f"no finished run (summary.json) in {', '.join(map(str, run_dirs))}")
    envs = sorted({s.get("env", UNKNOWN) for s in summaries})
    if len(envs) > 1:
        raise UserError(f"runs of several scenarios ({', '.join(envs)}) in one leaderboard; pass one scenario's runs")
    records, curves = records_and_curves(summaries)
    return board_from_records(env or envs[0], records, curves, source="run directories")


def records_and_curves(summaries: list[dict]) -> tuple[list[dict], list[tuple[str, Any, float, float]]]:
    """Per-seed records of run summaries (labels made distinct) and their curve points
    ``(label, seed, hours, accuracy)``."""
    pairs = [run_record(s) for s in summaries]
    records = [r for r, _ in pairs]
    distinct_labels(records)
    return records, [(r["label"], r["seed"], t, a) for r, curve in pairs for t, a in curve]


def read_table(path: Path, **options) -> pd.DataFrame:
    """A leaderboard CSV table (``options`` go to ``pd.read_csv``); a UserError naming ``path`` when it is
    empty, cut short (its last line unfinished, as a write killed midway leaves it), without rows or not
    CSV, so that a board that cannot be read is never merged as a board without rows."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(f"{path}: cannot read the table ({err.strerror or err})") from None
    fix = "restore it or delete it, and write the board again"
    if not data.strip():
        raise UserError(f"{path}: an empty table ({len(data)} bytes); {fix}")
    if not data.endswith(b"\n"):
        raise UserError(f"{path}: a truncated table (its last line is unfinished); {fix}")
    try:
        table = pd.read_csv(io.BytesIO(data), **options)
    except ValueError as err:  # pandas' ParserError and EmptyDataError, a UnicodeDecodeError
        raise UserError(f"{path}: not a readable CSV table ({type(err).__name__}); {fix}") from None
    if not len(table):
        raise UserError(f"{path}: a table without rows; {fix}")
    return table


def board_from_csv(path: Path) -> ScenarioBoard:
    """The board of a per-seed table (``<env>-runs.csv``, with ``<env>-curves.csv`` beside it when
    present) or of an aggregated one (``<env>.csv``, older files included: missing labels,
    overrides, seeds, hashes or versions are shown as unknown, budget facts come from the
    scenario spec of that name)."""
    path = Path(path)
    table = read_table(path, keep_default_na=True)
    env_from_name = path.stem.removesuffix("-runs")
    if "agent" not in table.columns:
        raise UserError(f"{path}: no 'agent' column; expected a leaderboard table written by sao-env")
    if "seed" in table.columns:
        text_columns = set(ID_COLUMNS) | set(FACT_COLUMNS)
        records = [{k: _from_csv(v) if k in text_columns else v for k, v in row.items()}
                   for row in table.to_dict("records")]
        envs = sorted({str(r.get("env") or env_from_name) for r in records})
        if len(envs) > 1:
            raise UserError(f"{path}: rows of several scenarios ({', '.join(envs)})")
        for r in records:
            r.setdefault("overrides", UNKNOWN)
            r["overrides"] = "" if r["overrides"] is None else r["overrides"]
            r["label"] = r.get("label") or _label(r.get("recipe") or r["agent"], r["overrides"])
        curves_path = path.with_name(f"{envs[0]}-curves.csv")
        curves = []
        if curves_path.is_file():
            c = read_table(curves_path)
            curves = list(c[["label", "seed", "sim_time_h", "accuracy"]].itertuples(index=False, name=None))
        return board_from_records(envs[0], records, curves, source=path.name)
    return _board_from_aggregated(table, env_from_name, path)


def _board_from_aggregated(table: pd.DataFrame, env: str, path: Path) -> ScenarioBoard:
    if "budget" in table.columns and table["budget"].nunique(dropna=False) > 1:
        raise UserError(f"{path}: rows of {table['budget'].nunique(dropna=False)} budgets, which one board does not rank "
                        f"together; rebuild from {env}-runs.csv, which records each row's budget")
    frame = table.drop(columns=["budget"], errors="ignore")
    for column, default in (("label", None), ("overrides", UNKNOWN), ("seed_list", UNKNOWN),
                            ("config_hash", ""), ("code_version", "")):
        if column not in frame.columns:
            frame[column] = frame["agent"] if column == "label" else default
        frame[column] = frame[column].map(lambda v, d=default: d if _from_csv(v) is None else v)
    if "algorithm" not in frame.columns:
        frame["algorithm"] = UNKNOWN
    if "recipe" not in frame.columns:
        frame["recipe"] = frame["agent"]
    metrics = [c for c in frame.columns if f"{c}_ci95" in frame.columns]
    if SORT_KEY in frame.columns:
        frame = frame.sort_values(SORT_KEY, ascending=False, kind="stable", na_position="last")
    frame = frame.drop(columns=["rank"], errors="ignore").reset_index(drop=True)
    frame.insert(0, "rank", range(1, len(frame) + 1))
    if not {"rank_low", "rank_high"} <= set(frame.columns):  # no per-seed rows to test: every rank a tie
        frame["rank_low"], frame["rank_high"] = 1, len(frame)
    ordered = ["rank", "rank_low", "rank_high", "label", "agent", "recipe", "algorithm", "overrides", "seeds",
               "seed_list", "config_hash", "code_version", "collapses", "collapse_checked"]
    known_order = metric_columns([dict.fromkeys(metrics, 0.0)])
    metric_part = [x for c in known_order + [m for m in metrics if m not in known_order]
                   for x in (c, f"{c}_ci95", f"{c}_missed") if x in frame.columns]
    frame = frame[[c for c in ordered if c in frame.columns] + metric_part]
    facts, notes = _spec_facts(env)
    notes.append(f"{path.name} holds one row per recipe, without seeds, overrides, hashes or code versions "
                 f"where the older format lacked them ({UNKNOWN}); per-seed tables ({env}-runs.csv) have them all.")
    return ScenarioBoard(env, facts, frame, None, None, path.name, notes)


def _spec_facts(env: str) -> tuple[dict[str, Any], list[str]]:
    from sao_env.specs import find_spec, load_yaml

    try:
        spec = load_yaml(find_spec("envs", env))
        facts = scenario_facts(spec) | {"description": " ".join(str(spec.get("description", "")).split())}
        return facts | {"facts_from": f"envs/{env}.yaml"}, [f"Budget and threshold read from envs/{env}.yaml as it is now."]
    except UserError:
        return {c: UNKNOWN for c in FACT_COLUMNS} | {"description": "", "facts_from": UNKNOWN}, []


def _common_facts(env: str, records: list[dict]) -> tuple[dict[str, Any], list[str]]:
    """The budget facts of rows that share one budget (``budget_key``), and no notes; the scenario
    file's when the rows did not record theirs."""
    if not any(all(c in r for c in FACT_COLUMNS) for r in records):
        return _spec_facts(env)
    keyed = [tuple(_from_csv(r.get(c)) for c in FACT_COLUMNS) for r in records]
    common = max(set(keyed), key=keyed.count)
    facts = dict(zip(FACT_COLUMNS, common)) | {"facts_from": "the runs' configurations"}
    try:
        from sao_env.specs import find_spec, load_yaml

        facts["description"] = " ".join(str(load_yaml(find_spec("envs", env)).get("description", "")).split())
    except UserError:
        facts["description"] = ""
    return facts, []


# ----------------------------------------------------------------------------- writing


def header_facts(board: ScenarioBoard, generator: str) -> list[tuple[str, str]]:
    """(name, value) pairs stated above every table of the scenario (Markdown and HTML)."""
    f = board.facts
    seed_lists = board.frame["seed_list"].astype(str)
    if (seed_lists == UNKNOWN).all():
        counts = sorted({int(n) for n in board.frame["seeds"]})
        seeds = f"not recorded by the input table ({', '.join(map(str, counts))} per row)"
    elif seed_lists.nunique() == 1:
        seeds = f"{seed_lists.iloc[0]} for every row" if len(seed_lists) > 1 else seed_lists.iloc[0]
    else:
        seeds = "; ".join(f"{label}: {listed}" for label, listed in zip(board.frame["label"], seed_lists))
    drift_times = f.get("drift_times_h")
    drifts = "no drift" if drift_times in (None, "") else f"drifts at {str(drift_times).replace(';', ', ')} h"
    phases = str(f.get("phases", UNKNOWN)).replace(";", " → ")
    versions = code_versions([board])
    return [
        ("budget", budget_words(f)),
        ("phases", f"{phases} ({drifts})"),
        ("recovery threshold", f"{_num(f.get('recovery_threshold'))} held-out accuracy of the current phase"),
        ("seeds", seeds),
        ("sort key", f"{column_format(SORT_KEY).title} (`{SORT_KEY}`), highest first"),
        ("interval", "mean ± half-width of the 95% Student-t interval over seeds (no interval with one seed)"),
        ("power", power_fact(board)),
        ("evaluation noise", eval_noise_fact(board)),
        ("ranks", ranks_fact(board)),
        ("collapses", collapse_fact(board)),
        ("rule", "docs/leaderboard.md: same scenario, simulated time and rollout slots for every row; wall time is not ranked"),
        ("code version", ", ".join(versions) or UNKNOWN),
        ("evaluation", evaluation_text(eval_versions(board.records["eval_version"])
                                       if board.records is not None and "eval_version" in board.records else [1])),
        ("generated by", generator),
    ]


BOARD_TEST = "sign-flip"
"""The paired test behind a board's ranks (``stats.sign_flip_pvalue``)."""


def board_power(board: ScenarioBoard, metric: str = SORT_KEY) -> dict[str, Any] | None:
    """The board's power on ``metric`` under its own rule (the sign-flip test of every pair, Holm
    over the ``m`` comparisons made): the pooled sd of the paired differences over those pairs
    (``stats.pooled_sd``), the board's n (the most common paired n, the smaller of equally common
    ones), the minimum detectable difference at that n at level α/m (``math.inf`` below
    ``min_n``, the fewest seeds at which the test can reach α/m) and the seeds that 0.05 and 0.03
    would need under the same rule; None when no pair was compared."""
    made = [c for c in board.comparisons(metric) if c.made]
    if not made:
        return None
    sd, _ = pooled_sd([(c.sd, c.n) for c in made])
    counts = [c.n for c in made]
    n = min(set(counts), key=lambda k: (-counts.count(k), k))
    m = len(made)
    return {"sd": sd, "n": n, "pairs": m, "m": m, "min_n": min_seeds(m, test=BOARD_TEST),
            "mde": min_detectable_difference(sd, n, m=m, test=BOARD_TEST),
            "seeds_0.05": seeds_for_difference(sd, 0.05, m=m, test=BOARD_TEST),
            "seeds_0.03": seeds_for_difference(sd, 0.03, m=m, test=BOARD_TEST)}


def eval_noise_fact(board: ScenarioBoard) -> str:
    """The evaluation's own noise in AUC (``auc_eval_sd``, mean over runs) beside the seed-to-seed sd of
    AUC within recipes (pooled): how much of an evaluation metric's spread is the evaluation's."""
    runs = board.records
    if runs is None or "auc_eval_sd" not in runs or "auc" not in runs or runs["auc_eval_sd"].notna().sum() == 0:
        return "not stated: the runs' evaluation curves are not in the input"
    eval_sd = float(runs["auc_eval_sd"].mean())
    sd, df = pooled_sd([(float(g["auc"].std(ddof=1)), int(g["auc"].notna().sum()))
                        for _, g in runs.groupby("label") if g["auc"].notna().sum() >= 2])
    spread = f"{sd:.3f} (pooled within recipes, {df} df)" if df else "not available (fewer than two seeds a recipe)"
    return (f"the held-out evaluation alone adds sd {eval_sd:.3f} to a run's AUC (binomial over the held-out prompts, "
            f"mean over the runs; docs/metrics.md); the seed-to-seed sd of AUC is {spread}. Online reward, the sort "
            "key, is a training metric and carries no evaluation noise")


def power_fact(board: ScenarioBoard, metric: str = SORT_KEY) -> str:
    """The minimum detectable paired difference, as stated on a board (``board_power``)."""
    title = column_format(metric).title
    power = board_power(board, metric)
    if power is None:
        why = "the input table has no per-seed rows" if board.records is None else "no two rows share two seeds"
        return f"not stated: {why} to take the paired spread from"
    n, m, floor = power["n"], power["m"], power["min_n"]
    comparisons = f"{m} comparison{'s' if m != 1 else ''}"
    level = f"α/{m} = {ALPHA / m:.3g}" if m != 1 else f"α {ALPHA:g}"
    step = ", Holm's most stringent step" if m > 1 else ""

    def need(key: str) -> str:
        return f"{power[key]} seeds" if power[key] is not None else "more than 10,000 seeds"

    reach = f"the sign-flip test can reach {f'α/{m}' if m > 1 else 'α'} from {floor} seeds (2/2^n ≤ {ALPHA / m:.3g})"
    if math.isinf(power["mde"]):
        head = (f"none in {title} at n={n} seeds: the sign-flip test cannot reach α after Holm at this n (its "
                f"smallest p, 2/2^{n} = {smallest_p(n):.3g}, is above {level}{step} over the board's "
                f"{comparisons}); {reach}")
    else:
        head = (f"{format_mde(power['mde'])} in {title} at n={n} seeds: the paired difference that the board's rule "
                f"(sign-flip test of each pair, Holm over its {comparisons}, α {ALPHA:g}) detects with {POWER:.0%} "
                f"power, stated at {level}{step}: (t(1 − α/{2 * m}, {n - 1}) + t({POWER:g}, {n - 1})) × sd / √{n}, "
                f"the t-test's formula, with sd {power['sd']:.3f} pooled over the paired "
                f"differences of the {comparisons}; {reach}")
    return (f"{head}. Under this rule a difference of 0.05 needs {need('seeds_0.05')}, 0.03 needs {need('seeds_0.03')}. "
            "It is what the design can resolve, not a bound on a difference the board leaves a tie")


def ranks_fact(board: ScenarioBoard, metric: str = SORT_KEY) -> str:
    """How the ranks are decided, as stated on a board, and what its seeds allow."""
    made = [c for c in board.comparisons(metric) if c.made]
    if len(board.frame) < 2:
        return "one row"
    if not made:
        why = "the input table has no per-seed rows" if board.records is None else "no two rows share two seeds"
        return f"every rank a tie: {why} to test an order on"
    m, n_max = len(made), max(c.n for c in made)
    text = (f"tied unless a paired test supports the order: exact sign-flip permutation test of each pair of rows' "
            f"per-seed differences in {column_format(metric).title} (Monte Carlo, {MC_DRAWS:,} draws from seed "
            f"{MC_SEED}, above {EXACT_MAX_N} seeds), Holm-corrected over the {m} comparison{'s' if m != 1 else ''} "
            f"made, α {ALPHA:g}; `1–3` is a tie over ranks 1 to 3")
    if smallest_p(n_max) * m > ALPHA:
        text += (f". With {n_max} seeds the smallest p the test can give is {smallest_p(n_max):.3g}, too large for "
                 f"{m} comparison{'s' if m != 1 else ''}: no order can be supported at this n")
    return text


def collapse_fact(board: ScenarioBoard) -> str:
    """The collapse counts per row, or why there are none."""
    if "collapses" not in board.frame.columns:
        return ("not recorded by this table (its rows predate the collapse statistic; rows made from run directories "
                "with episodes.jsonl carry it)")
    counts = "; ".join(f"{row['label']}: {_collapse_cell(row)}" for _, row in board.frame.iterrows())
    return (f"{counts}. A run collapses when its rolling training reward (64 episodes) stays under half its phase "
            f"peak until the phase ends (docs/metrics.md, Collapse); `{column_format(NO_COLLAPSE).title}` is the mean "
            "over the runs that did not")


def display_columns(board: ScenarioBoard) -> list[str]:
    """The headline columns of the tables people read: online reward, the same without collapsed
    runs (when recorded), AUC and the recovery times."""
    columns = headline_columns(board.metrics)
    if NO_COLLAPSE in board.metrics and SORT_KEY in columns:
        columns.insert(columns.index(SORT_KEY) + 1, NO_COLLAPSE)
    return columns


def rank_cell(row) -> str:
    """The rank a row's seeds support: ``2``, or ``1–3`` for a tie (``stats.format_rank``)."""
    low, high = finite_float(row.get("rank_low")), finite_float(row.get("rank_high"))
    if low is None or high is None:
        return str(int(row["rank"]))
    return format_rank(int(low), int(high))


def _collapse_cell(row) -> str:
    checked = finite_float(row.get("collapse_checked"))
    if not checked:
        return "?"
    return f"{int(finite_float(row.get('collapses')) or 0)} of {int(checked)}"


def write_tables(board: ScenarioBoard, out_dir: Path, *, generator: str, plot: Path | None = None) -> dict[str, Path]:
    """Write ``<env>.csv``, ``<env>.md`` and, when per-seed rows exist, ``<env>-runs.csv`` and
    ``<env>-curves.csv``; returns the paths by kind. Rows at other budgets (``board.apart``) are in
    the per-seed tables, and in ``<env>.csv`` after the board's own with a ``budget`` column."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = board.env
    paths = {"csv": out_dir / f"{env}.csv", "md": out_dir / f"{env}.md"}
    records = board.records_all if board.records_all is not None else board.records
    curves = board.curves_all if board.curves_all is not None else board.curves
    if records is not None:
        paths["runs"] = write_csv(records, out_dir / f"{env}-runs.csv")
    if curves is not None:
        paths["curves"] = write_csv(curves, out_dir / f"{env}-curves.csv")
    frame = board.frame
    if board.apart:
        frame = pd.concat([b.frame.assign(budget=budget_words(b.facts)) for b in [board, *board.apart]],
                          ignore_index=True)
    write_csv(frame, paths["csv"])
    with replacing(paths["md"]) as tmp:
        tmp.write_text(markdown(board, generator=generator, plot=plot))
    return paths


def write_csv(frame: pd.DataFrame, path: Path) -> Path:
    """Write ``frame`` as a leaderboard table at ``path``, whole (``replacing``); returns ``path``."""
    with replacing(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.6g")
    return path


def markdown(board: ScenarioBoard, *, generator: str, plot: Path | None = None) -> str:
    """The scenario's Markdown page: header facts, the plot, the headline table, the paired
    differences to the reference and the paired tests; then each budget of ``board.apart`` alike."""
    description = board.facts.get("description") or ""
    lines = [f"# Leaderboard: {board.env}", ""]
    if description:
        lines += [description, ""]
    lines += [f"- **{name}**: {value}" for name, value in header_facts(board, generator)]
    lines += [f"- **note**: {n}" for n in board.notes]
    lines += ["", "Headline columns only; every metric (final accuracy per phase, forgetting, throughput, staleness, "
              f"DIS-masked fraction) is in `{board.env}.csv` and the per-seed values in `{board.env}-runs.csv`. "
              "Columns are defined in docs/metrics.md; `never`: no seed reached the threshold; **bold**: a lead in "
              "that column that every paired test supports.", ""]
    if plot is not None:
        lines += [f"![adaptation curves: {board.env}]({Path(plot).name})", ""]
    lines += board_markdown(board)
    for other in board.apart:
        lines += ["", f"## Rows at another budget: {budget_words(other.facts)}", "",
                  "Not ranked with the rows above (docs/leaderboard.md: a board ranks one budget)."]
        lines += [""] + [f"- **{name}**: {value}" for name, value in header_facts(other, generator)
                         if name in ("budget", "phases", "seeds", "power", "ranks", "collapses")]
        lines += [""] + board_markdown(other)
    lines += ["", f"Generated on {date.today().isoformat()}."]
    return "\n".join(lines) + "\n"


def board_markdown(board: ScenarioBoard) -> list[str]:
    """One budget's Markdown tables: the headline table, the paired differences to the reference
    and the paired tests."""
    columns = display_columns(board)
    collapses = "collapses" in board.frame.columns
    best = {c: board.supported_best(c) for c in columns}
    header = ["rank", "recipe", "seeds"] + [column_format(c).title for c in columns] + (["collapsed"] if collapses else [])
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if i == 0 or i > 2 else "---" for i in range(len(header))) + "|"]
    for _, row in board.frame.iterrows():
        cells = [rank_cell(row), _md_escape(str(row["label"])), _seeds_cell(row)]
        for c in columns:
            text = format_cell(row[c], row[f"{c}_ci95"], row.get(f"{c}_missed", 0) or 0, row["seeds"], c)
            cells.append(f"**{text}**" if best[c] == str(row["label"]) else text)
        if collapses:
            cells.append(_collapse_cell(row))
        lines.append("| " + " | ".join(cells) + " |")
    return lines + paired_markdown(board) + tests_markdown(board)


def format_p(p: float) -> str:
    """``0.25``, ``0.0156``; ``1`` at 1."""
    return "n/a" if p is None or math.isnan(p) else f"{p:.3g}"


def tests_markdown(board: ScenarioBoard, metric: str = SORT_KEY) -> list[str]:
    """The paired tests behind the ranks: every pair of rows on ``metric`` (no lines without pairs)."""
    comparisons = board.comparisons(metric)
    if not comparisons:
        return []
    title = column_format(metric).title
    m = sum(c.made for c in comparisons)
    lines = ["", f"### Paired tests: {title}", "",
             f"Every pair of rows, paired by seed: the mean difference (first − second) over the n seeds both have, "
             f"the sign-flip permutation p, p after Holm's correction over the {m} comparison{'s' if m != 1 else ''} "
             f"made (pairs with at least {MIN_PAIRED} seeds), and the minimum detectable difference at that n under "
             f"that rule ({POWER:.0%} power at α/{max(m, 1)}, Holm's most stringent step; `none`: the test cannot reach "
             f"α after Holm at that n). The ranks above follow from the verdicts.", "",
             "| pair | n | difference | p | p (Holm) | detectable at n | verdict |", "|---|---:|---:|---:|---:|---:|---|"]
    for c in comparisons:
        decimals = column_format(metric).decimals
        diff = "n/a" if math.isnan(c.mean) else f"{c.mean:+.{decimals}f}"
        mde = format_mde(c.mde, decimals)
        verdict = "not made (fewer than 2 shared seeds)" if not c.made else (
            f"{c.winner} better" if c.winner else "tie")
        lines.append(f"| {_md_escape(c.a)} − {_md_escape(c.b)} | {c.n} | {diff} | {format_p(c.p)} | "
                     f"{format_p(c.p_holm)} | {mde} | {_md_escape(verdict)} |")
    return lines


# ----------------------------------------------------------------------------- paired differences


def paired_frame(board: ScenarioBoard, columns: list[str] | None = None) -> pd.DataFrame | None:
    """Each row's headline metrics minus the reference row's (``board.reference``), paired by seed.

    One row per (label, metric): ``label, reference, metric, mean, ci95, n, seeds`` (the seeds paired;
    ``stats.paired_difference``). None when the board has no per-seed rows, no reference row or no
    other row. Rows are in the board's rank order.
    """
    if board.records is None or board.records.empty:
        return None
    records = board.records
    labels = [str(x) for x in board.frame["label"]]
    if board.reference not in labels or len(labels) < 2:
        return None
    columns = columns if columns is not None else headline_columns(board.metrics)
    columns = [c for c in columns if c in records.columns]

    def by_seed(label: str, column: str) -> dict:
        rows = records[records["label"].astype(str) == label]
        return {_seed_key(s): finite_float(v) for s, v in zip(rows["seed"], rows[column])}

    out = []
    for label in labels:
        if label == board.reference:
            continue
        for column in columns:
            mine, theirs = by_seed(label, column), by_seed(board.reference, column)
            mean, half, n = paired_difference(mine, theirs)
            paired = sorted(s for s in set(mine) & set(theirs) if mine[s] is not None and theirs[s] is not None)
            out.append({"label": label, "reference": board.reference, "metric": column, "mean": mean, "ci95": half,
                        "n": n, "seeds": ", ".join(map(str, paired))})
    return pd.DataFrame(out)


def format_difference(mean: float, half: float, n: int, column: str) -> str:
    """``-0.012 ± 0.020 (n=3)``; ``-0.012 (n=1, no CI)``; ``n/a (n=0)`` when no seed has both values."""
    if n == 0 or mean is None or math.isnan(mean):
        return "n/a (n=0)"
    decimals = column_format(column).decimals
    text = f"{mean:+,.{decimals}f}"
    if n < 2 or half is None or math.isnan(half):
        return f"{text} (n={n}, no CI)"
    return f"{text} ± {half:,.{decimals}f} (n={n})"


def paired_markdown(board: ScenarioBoard) -> list[str]:
    """The Markdown section of paired differences (no lines when ``paired_frame`` is None)."""
    frame = paired_frame(board)
    if frame is None or frame.empty:
        return []
    columns = list(dict.fromkeys(frame["metric"]))
    ref = board.reference
    lines = ["", f"### Paired differences to {ref}", "",
             f"Each recipe minus {ref}, paired by seed (the difference between the two runs of the same seed), then "
             "the mean ± half-width of the 95% Student-t interval over the seeds' differences; "
             "n: seeds where both have the value (a recovery that never happened leaves its seed out). "
             "An interval that excludes 0 is a difference under the t-interval's assumption of normal differences, "
             f"before any correction for the board's other comparisons; ranks and bold cells use {holm_floor_words(board)}.",
             ""]
    header = [f"recipe − {ref}"] + [column_format(c).title for c in columns]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|" + "|".join("---:" for _ in columns) + "|")
    for label, rows in frame.groupby("label", sort=False):
        cells = {r["metric"]: format_difference(r["mean"], r["ci95"], int(r["n"]), r["metric"]) for _, r in rows.iterrows()}
        lines.append("| " + " | ".join([_md_escape(f"{label} − {ref}")] + [cells[c] for c in columns]) + " |")
    return lines


def holm_floor_words(board: ScenarioBoard | None, m: int | None = None) -> str:
    """``the paired sign-flip test with Holm's correction over the board's 6 comparisons (below), which
    assumes nothing about their distribution but cannot reach α/6 with fewer than 8 seeds``."""
    if m is None:
        m = sum(c.made for c in board.comparisons(SORT_KEY)) if board is not None else 1
    m = max(1, m)
    over = f"over the board's {m} comparison{'s' if m != 1 else ''} " if m > 1 else ""
    level = f"α/{m} (Holm's first step)" if m > 1 else f"α {ALPHA:g}"
    return (f"the paired sign-flip test with Holm's correction {over}(below), which assumes nothing about their "
            f"distribution but cannot reach {level} with fewer than {min_seeds(m, test=BOARD_TEST)} seeds")


def _seed_key(seed: Any) -> Any:
    x = finite_float(seed)
    return int(x) if x is not None and x.is_integer() else seed


def _seeds_cell(row) -> str:
    listed = str(row["seed_list"])
    return f"{int(row['seeds'])}" + (f" ({listed})" if listed and listed != UNKNOWN else "")


def _md_escape(text: str) -> str:
    """A name as a Markdown table cell shows it: ``|`` escaped, and ``&``, ``<`` and ``>`` as HTML entities, so
    that a recipe named ``<script>`` is text on every renderer (as on the HTML site), never markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def finite_float(value: Any) -> float | None:
    """``value`` as a float, or None where it is missing, not a number or NaN (a cell read back from CSV)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _num(value: Any) -> str:
    if value is None or value == UNKNOWN:
        return UNKNOWN
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _from_csv(value: Any) -> Any:
    """pandas reads empty cells as NaN; an empty cell is None here, other values stay."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def write_leaderboard(summaries: list[dict], out_dir: Path, env: str, *, plot: Path | None = None,
                      note: str = "", generator: str = "`sao-env compare`") -> tuple[Path, Path]:
    """Every output of one scenario from its run summaries (``load_summaries``): the tables, the
    plot ``<out_dir>/<env>.png`` (drawn again from the runs' curves, so ``plot`` only names where
    a caller already put one) and the site; returns (Markdown path, CSV path).
    ``sao_env.leaderboard.write_scenario_outputs`` does the same from run directories."""
    from sao_env.leaderboard import write_board

    records, curves = records_and_curves(summaries)
    board = board_from_records(env, records, curves, source="run directories")
    if note:
        board.notes.append(note)
    paths = write_board(board, out_dir, generator=generator,
                        plot_from=Path(plot) if plot is not None and not curves else None)
    return paths["md"], paths["csv"]
