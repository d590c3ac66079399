"""One scenario's board (``ScenarioBoard``): per-seed records aggregated per recipe and ranked, from run
directories or from committed tables.

The rule (docs/leaderboard.md): every agent runs the same scenario for the same simulated time on the
same number of rollout slots, with the seeds listed; simulated time is what counts, wall time is
reported apart. Cells are mean ± half-width of a 95% Student-t interval over seeds; recovery times that
never happened are left out of the mean and their count is shown. A board ranks one budget: rows at
another are boards of their own (``ScenarioBoard.apart``). Ranks are ties unless a paired test over the
seeds supports the order (``sao_env.leaderboard.stats``).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from sao_env.errors import UserError
from sao_env.evaluation.stats import mean_ci95, paired_difference
from sao_env.leaderboard.columns import (FACT_COLUMNS, ID_COLUMNS, NO_COLLAPSE, SORT_KEY, UNKNOWN, column_format,
                                         finite_float, from_csv, headline_columns, is_number, metric_columns, num_text)
from sao_env.leaderboard.records import (distinct_labels, load_summaries, per_seed_values, recipe_label,
                                         records_and_curves, records_frame, scenario_facts, seed_key)
from sao_env.leaderboard.stats import (Comparison, min_detectable_difference, min_seeds, pairwise, pooled_sd,
                                       rank_ranges, seeds_for_difference, supported_leader)


REFERENCE = "grpo"
"""The recipe every other row is compared with, seed by seed, when both are on the board."""


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
        known = all(is_number(x) for x in seeds)
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
        value = from_csv(value)
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
    return (f"{num_text(facts.get('duration_h'))} simulated hours, {num_text(facts.get('rollout_slots'))} rollout slots, "
            f"evaluation every {num_text(facts.get('eval_interval_h'))} h")


def shared_overrides(records: list[dict]) -> list[str]:
    """The overrides every row was run with (a cut of the scenario that all rows share), in the first
    row's order; none unless there are several rows, each with its overrides recorded and labelled by
    them (``recipe_label``, as recorded or already without the shared ones)."""
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
        if r.get("label") not in (recipe_label(recipe, "; ".join(mine)), recipe_label(recipe, "; ".join(x for x in mine if x not in shared))):
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
        renamed[r["label"]] = recipe_label(str(r.get("recipe") or r.get("agent")), rest)
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
        records = [{k: from_csv(v) if k in text_columns else v for k, v in row.items()}
                   for row in table.to_dict("records")]
        envs = sorted({str(r.get("env") or env_from_name) for r in records})
        if len(envs) > 1:
            raise UserError(f"{path}: rows of several scenarios ({', '.join(envs)})")
        for r in records:
            r.setdefault("overrides", UNKNOWN)
            r["overrides"] = "" if r["overrides"] is None else r["overrides"]
            r["label"] = r.get("label") or recipe_label(r.get("recipe") or r["agent"], r["overrides"])
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
        frame[column] = frame[column].map(lambda v, d=default: d if from_csv(v) is None else v)
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
    keyed = [tuple(from_csv(r.get(c)) for c in FACT_COLUMNS) for r in records]
    common = max(set(keyed), key=keyed.count)
    facts = dict(zip(FACT_COLUMNS, common)) | {"facts_from": "the runs' configurations"}
    try:
        from sao_env.specs import find_spec, load_yaml

        facts["description"] = " ".join(str(load_yaml(find_spec("envs", env)).get("description", "")).split())
    except UserError:
        facts["description"] = ""
    return facts, []


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
        return {seed_key(s): finite_float(v) for s, v in zip(rows["seed"], rows[column])}

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
