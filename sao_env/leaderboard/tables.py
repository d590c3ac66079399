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

import json
import math
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from sao_env.errors import UserError
from sao_env.evaluation.stats import mean_ci95, paired_difference
from sao_env.provenance import code_key, config_hash, short

SORT_KEY = "online_reward"
"""Rows are ranked by this metric, best (highest) first."""
LEADING = ["online_reward", "auc"]
TRAILING = ["episodes_per_hour", "updates_per_hour", "episodes_per_update", "staleness_mean", "staleness_p95",
            "masked_fraction"]
PHASE_METRICS = ("final_accuracy", "time_to_threshold_h", "recovery_h", "forgetting")
FACT_COLUMNS = ["duration_h", "rollout_slots", "eval_interval_h", "recovery_threshold", "phases", "drift_times_h"]
ID_COLUMNS = ["env", "label", "agent", "recipe", "algorithm", "overrides", "seed", "config_hash", "code_version"]
"""Per-seed identity: ``label`` is what tables show (the recipe, with its overrides when they change
the configuration); ``agent`` the run's own label (its directory name, ``sao+<hash>`` with overrides);
``recipe`` the agent recipe's name."""
UNKNOWN = "?"
"""What a table shows for a fact its input did not record (tolerant reading of older CSVs)."""
REFERENCE = "grpo"
"""The recipe every other row is compared with, seed by seed, when both are on the board."""


# ----------------------------------------------------------------------------- metric columns


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
             "masked_fraction": ("DIS-masked fraction", 3, None)}
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


def load_summaries(run_dirs: list[Path]) -> list[dict]:
    """``summary.json`` of each finished run directory, with ``run_dir`` added."""
    out = []
    for d in run_dirs:
        path = Path(d) / "summary.json"
        if path.is_file():
            out.append(json.loads(path.read_text()) | {"run_dir": str(d)})
    return out


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


def recipe_hash(config: dict) -> str:
    """Short hash of a run's resolved configuration without its seed (and provenance): the runs
    that share it are seeds of one recipe on one scenario."""
    return short(config_hash({k: v for k, v in config.items() if k not in ("seed", "provenance")}))


def run_record(summary: dict) -> tuple[dict, list[tuple[float, float]]]:
    """One per-seed row and its adaptation curve (simulated hours, current accuracy) from a
    summary that carries ``run_dir``; a summary without one (a test's dict) has no curve and
    takes its facts from the summary itself.

    Identity comes from the run's provenance (``summary.json``/``config.yaml``: the overrides as
    given, the code version); runs written before provenance was recorded show ``?`` for both.
    """
    from sao_env.evaluation.adaptation import current_accuracy
    from sao_env.scenario import Scenario, ScenarioSpec

    run_dir = summary.get("run_dir")
    config = None
    if run_dir and (Path(run_dir) / "config.yaml").is_file():
        config = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    provenance = summary.get("provenance") or (config or {}).get("provenance") or {}
    recipe = summary.get("recipe") or summary["agent"]
    record: dict[str, Any] = {"env": summary.get("env", UNKNOWN), "agent": summary["agent"], "recipe": recipe,
                              "algorithm": summary.get("algorithm", UNKNOWN), "seed": summary.get("seed")}
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
    that can fail to happen, the count of seeds that never got there; ranked by ``SORT_KEY``."""
    columns = metric_columns(summaries)
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
        for c in columns:
            values = [s.get(c, math.nan) for s in runs]
            values = [math.nan if v is None else float(v) for v in values]
            mean, half = mean_ci95(values)
            row[c], row[f"{c}_ci95"] = mean, half
            if c.startswith(("recovery_h", "time_to_threshold_h")):
                row[f"{c}_missed"] = sum(1 for v in values if math.isnan(v))
        rows.append(row)
    frame = pd.DataFrame(rows)
    if SORT_KEY in frame:
        frame = frame.sort_values(SORT_KEY, ascending=False, kind="stable", na_position="last")
    frame = frame.reset_index(drop=True)
    frame.insert(0, "rank", range(1, len(frame) + 1))
    return frame


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

    @property
    def metrics(self) -> list[str]:
        return [c for c in self.frame.columns if f"{c}_ci95" in self.frame.columns]


def board_from_records(env: str, records: list[dict], curves: list[tuple[str, Any, float, float]],
                       *, source: str) -> ScenarioBoard:
    """A scenario's board from per-seed records and curve points ``(label, seed, hours, accuracy)``."""
    distinct_labels(records)
    facts, notes = _common_facts(env, records)
    frame = leaderboard_frame(records)
    curve_frame = pd.DataFrame(curves, columns=["label", "seed", "sim_time_h", "accuracy"]) if curves else None
    return ScenarioBoard(env, facts, frame, records_frame(records), curve_frame, source, notes)


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


def board_from_csv(path: Path) -> ScenarioBoard:
    """The board of a per-seed table (``<env>-runs.csv``, with ``<env>-curves.csv`` beside it when
    present) or of an aggregated one (``<env>.csv``, older files included: missing labels,
    overrides, seeds, hashes or versions are shown as unknown, budget facts come from the
    scenario spec of that name)."""
    path = Path(path)
    try:
        table = pd.read_csv(path, keep_default_na=True)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not a readable CSV table ({type(err).__name__})") from None
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
            c = pd.read_csv(curves_path)
            curves = list(c[["label", "seed", "sim_time_h", "accuracy"]].itertuples(index=False, name=None))
        return board_from_records(envs[0], records, curves, source=path.name)
    return _board_from_aggregated(table, env_from_name, path)


def _board_from_aggregated(table: pd.DataFrame, env: str, path: Path) -> ScenarioBoard:
    frame = table.copy()
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
    ordered = ["rank", "label", "agent", "recipe", "algorithm", "overrides", "seeds", "seed_list", "config_hash",
               "code_version"]
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
    """The budget shared by the rows (the most common one), and a note naming rows that differ."""
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
    odd = sorted({r["label"] for r, key in zip(records, keyed) if key != common})
    notes = [f"Not the same budget as the other rows: {', '.join(odd)}."] if odd else []
    return facts, notes


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
    versions = sorted({v for cell in board.frame["code_version"].astype(str) for v in cell.split(", ") if v})
    return [
        ("budget", f"{_num(f.get('duration_h'))} simulated hours, {_num(f.get('rollout_slots'))} rollout slots, "
                   f"evaluation every {_num(f.get('eval_interval_h'))} h"),
        ("phases", f"{phases} ({drifts})"),
        ("recovery threshold", f"{_num(f.get('recovery_threshold'))} held-out accuracy of the current phase"),
        ("seeds", seeds),
        ("sort key", f"{column_format(SORT_KEY).title} (`{SORT_KEY}`), highest first"),
        ("interval", "mean ± half-width of the 95% Student-t interval over seeds (no interval with one seed)"),
        ("rule", "docs/leaderboard.md: same scenario, simulated time and rollout slots for every row; wall time is not ranked"),
        ("code version", ", ".join(versions) or UNKNOWN),
        ("generated by", generator),
    ]


def write_tables(board: ScenarioBoard, out_dir: Path, *, generator: str, plot: Path | None = None) -> dict[str, Path]:
    """Write ``<env>.csv``, ``<env>.md`` and, when per-seed rows exist, ``<env>-runs.csv`` and
    ``<env>-curves.csv``; returns the paths by kind."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = board.env
    paths = {"csv": out_dir / f"{env}.csv", "md": out_dir / f"{env}.md"}
    if board.records is not None:
        paths["runs"] = out_dir / f"{env}-runs.csv"
        board.records.to_csv(paths["runs"], index=False, float_format="%.6g")
    if board.curves is not None:
        paths["curves"] = out_dir / f"{env}-curves.csv"
        board.curves.to_csv(paths["curves"], index=False, float_format="%.6g")
    board.frame.to_csv(paths["csv"], index=False, float_format="%.6g")
    paths["md"].write_text(markdown(board, generator=generator, plot=plot))
    return paths


def markdown(board: ScenarioBoard, *, generator: str, plot: Path | None = None) -> str:
    """The scenario's Markdown page: header facts, the plot, the headline table."""
    columns = headline_columns(board.metrics)
    description = board.facts.get("description") or ""
    lines = [f"# Leaderboard: {board.env}", ""]
    if description:
        lines += [description, ""]
    lines += [f"- **{name}**: {value}" for name, value in header_facts(board, generator)]
    lines += [f"- **note**: {n}" for n in board.notes]
    lines += ["", "Headline columns only; every metric (final accuracy per phase, forgetting, throughput, staleness, "
              f"DIS-masked fraction) is in `{board.env}.csv` and the per-seed values in `{board.env}-runs.csv`. "
              "Columns are defined in docs/metrics.md; `never`: no seed reached the threshold.", ""]
    if plot is not None:
        lines += [f"![adaptation curves: {board.env}]({Path(plot).name})", ""]
    header = ["rank", "recipe", "seeds"] + [column_format(c).title for c in columns]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join("---:" if i == 0 or i > 2 else "---" for i in range(len(header))) + "|")
    for _, row in board.frame.iterrows():
        cells = [str(int(row["rank"])), _md_escape(str(row["label"])), _seeds_cell(row)]
        cells += [format_cell(row[c], row[f"{c}_ci95"], row.get(f"{c}_missed", 0) or 0, row["seeds"], c) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    lines += paired_markdown(board)
    lines += ["", f"Generated on {date.today().isoformat()}."]
    return "\n".join(lines) + "\n"


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
             "An interval that excludes 0 is a difference the seeds support.", ""]
    header = [f"recipe − {ref}"] + [column_format(c).title for c in columns]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|---|" + "|".join("---:" for _ in columns) + "|")
    for label, rows in frame.groupby("label", sort=False):
        cells = {r["metric"]: format_difference(r["mean"], r["ci95"], int(r["n"]), r["metric"]) for _, r in rows.iterrows()}
        lines.append("| " + " | ".join([_md_escape(f"{label} − {ref}")] + [cells[c] for c in columns]) + " |")
    return lines


def _seed_key(seed: Any) -> Any:
    x = finite_float(seed)
    return int(x) if x is not None and x.is_integer() else seed


def _seeds_cell(row) -> str:
    listed = str(row["seed_list"])
    return f"{int(row['seeds'])}" + (f" ({listed})" if listed and listed != UNKNOWN else "")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


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
