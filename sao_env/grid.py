"""Grids of whole experiments: rows (recipes with overrides) x axis points x scenarios x seeds, every cell an ordinary run.

A grid is data, a YAML file (``leaderboards/ablations/grid.yaml`` is one)::

    title: optional words for the outputs
    scenarios: [style-drift, tool-drift]     # envs/NAME.yaml or a path
    seeds: [0, 1, 2]
    baseline: sao                            # a row label: every row is compared with it, paired by seed
    metric: online_reward                    # optional: the metric ranked, tested and drawn
    test: sign-flip                          # optional: the paired test, sign-flip (exact) or t (paired t-test)
    contrasts: [sao - grpo]                  # optional: named pairs of rows, tested beside the baseline's
    post_hoc: [running_mean - sao]           # optional: pairs chosen after reading the results (Holm over all pairs)
    cut: [env.phases.0.duration_h=0.1]       # optional: overrides applied to every run, stated in the outputs
    axes:                                    # optional: key -> values; cells are rows x the product of the axes
      env.latency.task_sigma: [0.0, 0.5, 1.0]
    rows:
      - {label: sao, agent: sao, overrides: []}
      - {label: grpo, agent: grpo}

Each (scenario, row, axis point, seed) is planned with ``sao_env.experiment.plan_run`` with the
overrides cut, then the row's, then the axis point's; its run directory is keyed by the
configuration's hash, so a run that finished with the same configuration and code is reused
(``reuse_check``) and an unfinished one resumes from its checkpoint: an interrupted grid, run
again, makes only what is missing. The runs go through ``run_many`` (``jobs`` worker processes).

Outputs (``write_grid``), into a folder of their own:

- ``per-seed.csv``: one row per run: scenario, row label, one column per axis, seed, config hash
  (12 hex digits of the configuration without its seed, as on the boards), code version, run
  directory, agent, overrides, the collapse verdict and every number of the run's
  ``summary.json``;
- ``<scenario>.csv``: per cell, every metric's mean and 95 % interval and its paired difference to
  the baseline row at the same axis point, plus, on the grid's metric, the minimum detectable
  difference, the paired tests' p-values, the supported ranks and the collapse count
  (``sao_env.leaderboard.maps.aggregate``);
- ``<scenario>-contrasts.csv``: with ``contrasts:`` or ``post_hoc:``, each named pair's paired
  difference per axis point, its family (``planned`` or ``post hoc``) and its tests
  (``sao_env.leaderboard.maps.contrasts``);
- ``<scenario>.md``: the grid, the cut, the seeds, n, the command that reproduces it and the table;
- ``map.png``: the figure (``maps.plot_map``); ``grid.json``: what the site reads (``maps_section``);
  ``grid.log``: the progress lines of the command that made them;
- ``finished.jsonl``: the ledger (``Ledger``), one line per finished run, written as each run ends.
  Run directories live on the machine that made them; the ledger travels with the tables, so a
  grid that spans machines or checkouts is committed with its ledger, and the command run again
  elsewhere reuses every run the ledger lists with the same configuration and code.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import os
import shlex
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any, Callable, Literal

try:
    import fcntl
except ImportError:  # not POSIX: the ledger's writers are not locked
    fcntl = None

import pandas as pd
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sao_env.errors import UserError
from sao_env.experiment import progress
from sao_env.leaderboard import maps
from sao_env.leaderboard.columns import (column_format, eval_versions, evaluation_text, is_eval_metric, is_number,
                                         metric_columns)
from sao_env.leaderboard.records import run_record
from sao_env.provenance import code_key, code_version
from sao_env.specs import parse_yaml, read_spec_text

DEFAULT_METRIC = "online_reward"


def _override(item: str) -> str:
    if not isinstance(item, str) or "=" not in item or not item.split("=", 1)[0].strip():
        raise ValueError(f"{item!r} is not of the form key=value")
    return item.strip()


def axis_text(value: Any) -> str:
    """An axis value as the override text a run is given (strings as written, others as YAML)."""
    if isinstance(value, str):
        return value
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()


class GridRow(BaseModel):
    """One row of the grid: a label (unique; what the tables show) and the run configuration it names."""

    model_config = ConfigDict(extra="forbid")
    label: str = Field(min_length=1)
    agent: str = Field(min_length=1)
    """Agent recipe: a name (agents/NAME.yaml) or a path to a recipe file; a relative path is looked up
    beside the grid file first (the recipes a committed map was made with, kept beside it)."""
    overrides: list[str] = []
    """``key=value`` overrides of this row, after the cut and before the axis point's."""

    @field_validator("overrides")
    @classmethod
    def _pairs(cls, items: list[str]) -> list[str]:
        return [_override(x) for x in items]


class GridSpec(BaseModel):
    """A grid as written (module doc)."""

    model_config = ConfigDict(extra="forbid")
    title: str | None = None
    scenarios: list[str]
    seeds: list[int]
    baseline: str
    rows: list[GridRow]
    axes: dict[str, list[Any]] = {}
    cut: list[str] = []
    metric: str = DEFAULT_METRIC
    test: Literal["sign-flip", "t"] = "sign-flip"
    contrasts: list[str] = []
    """Named pairs ``"a - b"`` of row labels tested beside every row against the baseline, planned
    before the runs: Holm's correction runs over these contrasts at each axis point."""
    post_hoc: list[str] = []
    """Named pairs ``"a - b"`` chosen after the results were read: their own family, Holm-corrected
    over every pair of rows at the axis point (Holm 1979), and labelled post hoc in every output."""
    show: list[str] = []
    """Metrics of the runs' summaries shown beside the grid's metric in the Markdown and on the site
    (per cell the mean ± CI and each row's paired difference to the baseline); every metric's figures
    are in ``<scenario>.csv`` whatever this lists."""

    @field_validator("scenarios")
    @classmethod
    def _scenarios(cls, items: list[str]) -> list[str]:
        if not items:
            raise ValueError("at least one scenario is needed")
        if len(set(items)) != len(items):
            raise ValueError("a scenario is listed twice")
        return items

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, items: list[int]) -> list[int]:
        if not items:
            raise ValueError("at least one seed is needed")
        if any(s < 0 for s in items) or len(set(items)) != len(items):
            raise ValueError(f"seeds must be distinct non-negative integers, got {items}")
        return items

    @field_validator("cut")
    @classmethod
    def _cut(cls, items: list[str]) -> list[str]:
        return [_override(x) for x in items]

    @field_validator("axes")
    @classmethod
    def _axes(cls, axes: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for key, values in axes.items():
            if key == "seed":
                raise ValueError("seed is not an axis; list seeds under 'seeds'")
            if not values:
                raise ValueError(f"axis {key} has no values")
            texts = [axis_text(v) for v in values]
            if len(set(texts)) != len(texts):
                raise ValueError(f"axis {key}: a value is listed twice")
        return axes

    @model_validator(mode="after")
    def _consistent(self) -> "GridSpec":
        labels = [r.label for r in self.rows]
        if not labels:
            raise ValueError("rows: at least one row is needed")
        twice = sorted({x for x in labels if labels.count(x) > 1})
        if twice:
            raise ValueError(f"rows: the label {twice[0]!r} is used twice")
        if self.baseline not in labels:
            raise ValueError(f"baseline {self.baseline!r} is not a row label ({', '.join(labels)})")
        set_by = {x.split("=", 1)[0].strip(): "cut" for x in self.cut}
        for r in self.rows:
            for x in r.overrides:
                set_by.setdefault(x.split("=", 1)[0].strip(), f"row {r.label!r}")
        for key in self.axes:
            if key in set_by:
                raise ValueError(f"axis {key} is also set by the {set_by[key]}; a key is either an axis or fixed")
        named: dict[frozenset, str] = {}
        for key, texts in (("contrasts", self.contrasts), ("post_hoc", self.post_hoc)):
            for text in texts:
                parts = [x.strip() for x in text.split(" - ")]
                if len(parts) != 2 or not all(parts):
                    raise ValueError(f"{key}: {text!r} is not 'a - b' (two row labels around ' - ')")
                for label in parts:
                    if label not in labels:
                        raise ValueError(f"{key}: {label!r} is not a row label ({', '.join(labels)})")
                if parts[0] == parts[1]:
                    raise ValueError(f"{key}: {text!r} compares a row with itself")
                pair = frozenset(parts)
                if pair in named:
                    raise ValueError(f"{key}: {text!r} names the same pair of rows as {named[pair]}")
                named[pair] = f"{key} {text!r}"
        return self

    @property
    def contrast_pairs(self) -> list[tuple[str, str]]:
        """The contrasts as ``(a, b)`` label pairs, in the file's order."""
        return [tuple(x.strip() for x in text.split(" - ")) for text in self.contrasts]  # type: ignore[misc]

    @property
    def post_hoc_pairs(self) -> list[tuple[str, str]]:
        """The post-hoc contrasts as ``(a, b)`` label pairs, in the file's order."""
        return [tuple(x.strip() for x in text.split(" - ")) for text in self.post_hoc]  # type: ignore[misc]

    @property
    def axis_values(self) -> dict[str, list[str]]:
        return {k: [axis_text(v) for v in vs] for k, vs in self.axes.items()}


def plan_run(*args: Any, **kwargs: Any):
    """``sao_env.experiment.plan_run``, imported when first called: reading and checking a grid file loads no
    torch, so a typo in it is one line within about a second."""
    from sao_env.experiment import plan_run as plan

    return plan(*args, **kwargs)


def reuse_check(*args: Any, **kwargs: Any):
    """``sao_env.experiment.reuse_check`` (imported when called, as ``plan_run``)."""
    from sao_env.experiment import reuse_check as check

    return check(*args, **kwargs)


def run_many(*args: Any, **kwargs: Any):
    """``sao_env.experiment.run_many`` (imported when called, as ``plan_run``)."""
    from sao_env.experiment import run_many as many

    return many(*args, **kwargs)


def _fields_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys the model nested at ``loc`` (field names, list indices skipped) accepts; [] where unknown."""
    import typing

    for part in loc:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part)) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return []
        found = None
        stack = [field.annotation]
        while stack:
            kind = stack.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                found = kind
                break
            stack.extend(typing.get_args(kind))
        if found is None:
            return []
        model = found
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _one_line(err: ValidationError, source: str) -> str:
    first = err.errors()[0]
    where = ".".join(str(x) for x in first["loc"])
    if first["type"] == "extra_forbidden":
        from sao_env.errors import did_you_mean

        return f"{source}: unknown key {where!r}{did_you_mean(first['loc'][-1], _fields_at(GridSpec, first['loc'][:-1]))}"
    message = first["msg"].removeprefix("Value error, ")
    return f"{source}: {where + ': ' if where else ''}{message}"


def load_grid(path: Path, *, seeds: tuple[int, ...] | None = None, metric: str | None = None) -> GridSpec:
    """Read and validate a grid file (``seeds``/``metric`` replace the file's); a UserError in one line."""
    path = Path(path)
    try:
        data = parse_yaml(read_spec_text(path, "grid"))
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML ({' '.join(str(err).split())})") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: a grid is a mapping with rows, scenarios, seeds and baseline")
    if seeds is not None:
        data["seeds"] = list(seeds)
    if metric is not None:
        data["metric"] = metric
    try:
        spec = GridSpec(**data)
    except ValidationError as err:
        raise UserError(_one_line(err, str(path))) from None
    for row in spec.rows:
        recipe = Path(row.agent)
        if recipe.suffix in (".yaml", ".yml") and not recipe.is_absolute() and (path.parent / recipe).is_file():
            row.agent = str(path.parent / recipe)
    return spec


@dataclass(frozen=True)
class GridRun:
    """One planned run of a grid."""

    scenario: str
    row: str
    point: tuple[str, ...]
    """The axis values (as override text), in the order of the grid's axes."""
    seed: int
    plan: Any
    """Its ``sao_env.experiment.RunPlan``."""

    def describe(self, axes: list[str]) -> str:
        point = "".join(f" {k}={v}" for k, v in zip(axes, self.point))
        return f"{self.scenario} | {self.row}{point} | seed {self.seed}"


@dataclass(frozen=True)
class Grid:
    """A planned grid: the spec, its source file and every run."""

    spec: GridSpec
    source: Path
    runs: tuple[GridRun, ...]

    @property
    def axes(self) -> list[str]:
        return list(self.spec.axes)

    @property
    def points(self) -> list[tuple[str, ...]]:
        return list(itertools.product(*self.spec.axis_values.values()))


def plan_grid(spec: GridSpec, *, source: Path = Path("grid.yaml"), runs_dir: Path = Path("runs"),
              build_sources: bool = True) -> Grid:
    """Plan every (scenario, row, axis point, seed) run; a bad scenario, recipe or override is one
    UserError naming the row, and two cells that resolve to the same configuration are refused.
    ``build_sources=False`` for a dry run (no task source built: no benchmark rows read)."""
    axes = list(spec.axes)
    points = list(itertools.product(*spec.axis_values.values()))
    runs = []
    for scenario in spec.scenarios:
        seen: dict[str, str] = {}
        for row in spec.rows:
            for point in points:
                overrides = [*spec.cut, *row.overrides, *(f"{k}={v}" for k, v in zip(axes, point))]
                where = f"scenario {scenario}, row {row.label!r}" + "".join(f", {k}={v}" for k, v in zip(axes, point))
                for seed in spec.seeds:
                    try:
                        plan = plan_run(scenario, row.agent, seed, overrides, runs_dir=runs_dir,
                                        build_sources=build_sources)
                    except UserError as err:
                        raise UserError(f"{where}: {err}") from None
                    runs.append(GridRun(scenario, row.label, tuple(point), seed, plan))
                    if seed == spec.seeds[0]:
                        if plan.config_hash in seen:
                            raise UserError(f"{where} resolves to the same configuration as {seen[plan.config_hash]}; "
                                            "a cell would be run twice under two names")
                        seen[plan.config_hash] = where
    return Grid(spec, Path(source), tuple(runs))


@dataclass
class GridReport:
    """What ``run_grid`` did: the runs reused and those made (in the order they finished)."""

    reused: list[GridRun]
    made: list[GridRun]


LEDGER = "finished.jsonl"


class Ledger:
    """A grid's ledger, ``<out>/finished.jsonl``: one JSON line per finished run, appended when the run
    ends, holding its configuration hash (``RunPlan.config_hash``, the seed included), its code key
    (``provenance.code_key``) and its per-seed row (``run_row``: the identity columns and every number
    of its ``summary.json``; JSON keeps each float's exact value).

    A run directory stays on the machine that made it; the ledger goes where the tables go. A grid
    run again where its run directories are gone (another checkout, another machine) reuses every
    run listed with the same configuration hash and code key, and its tables are the bytes the run
    directories would give. Lines are only ever added: a line of other code stays, unused. A last
    line without its newline is a write cut short by a kill; it names no run and the next line
    replaces it. Any other line that is not a run's record is refused (one line naming it)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._entries: dict[tuple[str, str], dict] = {}
        self._torn = 0
        if self.path.is_file():
            self._read()

    def _read(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise UserError(f"{self.path}: cannot read the grid's ledger ({getattr(err, 'strerror', None) or err})") from None
        lines = text.split("\n")
        self._torn = len(lines[-1].encode()) if lines[-1] else 0
        for number, line in enumerate(lines[:-1], 1):
            try:
                entry = json.loads(line)
                key = (entry["config_hash"], entry["code"])
                complete = isinstance(entry["row"], dict) and isinstance(entry["numbers"], dict)
            except (ValueError, KeyError, TypeError):
                complete = False
            if not complete:
                raise UserError(f"{self.path}:{number}: not a finished run's record (a JSON object with config_hash, "
                                "code, row and numbers); the ledger is only written by sao-env grid")
            self._entries[key] = entry

    def __len__(self) -> int:
        return len(self._entries)

    def rows(self) -> list[dict]:
        """Every recorded run's per-seed row and numbers in one dict, in the ledger's order."""
        return [{**e["row"], **e["numbers"]} for e in self._entries.values()]

    def get(self, plan: Any, code: str | None = None) -> dict | None:
        """The record of ``plan``'s run made by code ``code`` (a code key), or with ``code`` None the
        last one recorded for that configuration; None where there is none."""
        if code is not None:
            return self._entries.get((plan.config_hash, code))
        found = [e for (h, _), e in self._entries.items() if h == plan.config_hash]
        return found[-1] if found else None

    def add(self, run: "GridRun", code: str, row: tuple[dict, dict] | None = None) -> None:
        """Record ``run``, finished (its run directory holds ``summary.json``), as made by code ``code``;
        ``row``: its per-seed row already read (``run_row``, e.g. on the cluster node that made it)."""
        row, numbers = row if row is not None else run_row(run)
        entry = {"config_hash": run.plan.config_hash, "code": code, "row": row, "numbers": numbers}
        line = json.dumps(entry, sort_keys=False) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a+b") as f:
                if fcntl is not None:  # one writer at a time; another grid's lines are read before this one's goes in
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
                self._read()
                if (entry["config_hash"], code) in self._entries:
                    return  # recorded already (by a grid run beside this one)
                end = f.seek(0, 2)
                if self._torn and end >= self._torn:
                    f.truncate(end - self._torn)
                    f.seek(end - self._torn)
                self._torn = 0
                f.write(line.encode())
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise UserError(f"cannot write {err.filename or self.path}: {err.strerror or err}") from None
        self._entries[(entry["config_hash"], code)] = entry


def reuse_decision(run: GridRun, code: dict, ledger: Ledger | None = None,
                   skip_existing: bool = True) -> tuple[str | None, str]:
    """``(source, why)``: ``"run dir"`` where the run finished there with the same configuration and
    code (``reuse_check``), else ``"ledger"`` where the ledger lists it with the same, else None (make
    or resume it), with the reason in words."""
    if not skip_existing:
        return None, "rerun asked"
    reuse, why = reuse_check(run.plan, code)
    if reuse:
        return "run dir", why
    if ledger is not None and ledger.get(run.plan, code_key(code)) is not None:
        return "ledger", f"listed in {ledger.path.name} with the same configuration and code ({code_key(code)})"
    return None, why


def run_grid(grid: Grid, *, jobs: int = 1, code: dict | None = None, skip_existing: bool = True,
             report: Callable[[str], None] = lambda line: None,
             on_done: Callable[[GridRun, dict, float], None] | None = None,
             checkpoint_every: Any = None, ledger: Ledger | None = None, cluster: Any = None) -> GridReport:
    """Reuse every finished run of the same configuration and code (its run directory, else the
    ``ledger``'s record of it), make (or resume) the others in ``jobs`` worker processes (or, given a
    ``sao_env.cluster.Cluster``, as tasks on it, each run's row coming back from its node), and say so:
    one ``report`` line for the reused runs, then one per finished run (``[i/N]``, the metric, the elapsed
    time and, but on a cluster, the time the runs left should take, ``time_left``); ``on_done(run, summary,
    seconds)`` after each. With a ledger, every run reused from its directory and every run made is recorded
    in it (when it ends). A summary without the grid's metric stops the grid (a UserError) at once."""
    code = code or code_version()
    key = code_key(code)
    metric = grid.spec.metric
    todo, reused, listed = [], [], 0
    for run in grid.runs:
        source, _ = reuse_decision(run, code, ledger, skip_existing)
        if source is None:
            todo.append(run)
            continue
        reused.append(run)
        if source == "ledger":
            listed += 1
        elif ledger is not None and ledger.get(run.plan, key) is None:
            ledger.add(run, key)
    if reused:
        first = ledger.get(reused[0].plan, key) if ledger is not None else None
        _check_metric(metric, first["numbers"] if first is not None else
                      json.loads((reused[0].plan.out / "summary.json").read_text()))
        report(f"reusing {len(reused)} of {len(grid.runs)} runs (finished with the same configuration and code)"
               + (f"; {listed} of them from {ledger.path}, their run directories absent" if listed else ""))
    by_out = {run.plan.out: run for run in todo}
    made: list[GridRun] = []
    took: list[tuple[GridRun, float]] = []
    start = time.perf_counter()

    def done(plan: Any, summary: dict, seconds: float, row: tuple[dict, dict] | None = None) -> None:
        run = by_out[plan.out]
        from sao_env.experiment import MadeElsewhere

        if isinstance(summary, MadeElsewhere):  # another process (a second grid) made it while this one waited
            reused.append(run)
            report(f"reused {run.describe(grid.axes)}: another process made it  {plan.out}")
            if ledger is not None:
                ledger.add(run, key, row)
            return
        made.append(run)
        took.append((run, seconds))
        _check_metric(metric, summary)
        value = summary.get(metric)
        shown = f"{value:.3f}" if isinstance(value, (int, float)) else "n/a"
        ended = {r.plan.out for r in made} | {r.plan.out for r in reused}
        left = [r for r in todo if r.plan.out not in ended]
        ahead = "" if cluster is not None or not left else f", about {_clock(time_left(left, took, jobs))} left"
        report(f"[{len(made)}/{len(todo)}] {run.describe(grid.axes)}: {metric} {shown}; {seconds:.0f} s, "
               f"elapsed {_clock(time.perf_counter() - start)}{ahead}  {plan.out}")
        if ledger is not None:
            ledger.add(run, key, row)
        if on_done is not None:
            on_done(run, summary, seconds)

    options = {} if checkpoint_every is None else {"checkpoint_every": checkpoint_every}
    if cluster is not None:
        from sao_env import cluster as on_cluster

        on_cluster.run_many([r.plan for r in todo], cluster=cluster, code=code, on_done=done, report=report,
                            describe=lambda plan: by_out[plan.out].describe(grid.axes),
                            rows=[functools.partial(on_cluster.grid_row, r) for r in todo], **options)
        return GridReport(reused, made)
    run_many([r.plan for r in todo], jobs=jobs, code=code, show_progress=progress.RUN_AMONG_OTHERS_EVERY_S,
             on_done=done, on_warm_start=report,
             **options)
    return GridReport(reused, made)


def time_left(left: list[GridRun], took: list[tuple[GridRun, float]], jobs: int) -> float:
    """Wall seconds the runs ``left`` should take, ``jobs`` at a time: each at the mean time of the runs made
    so far (``took``) of its scenario and row, else of its row, else of all (a SAO run costs several times a
    baseline's), the runs in flight counted whole. A resumed run's time is its last part's, so an estimate
    made just after a resume runs short."""
    def mean(runs: list[float]) -> float | None:
        return sum(runs) / len(runs) if runs else None

    overall = mean([t for _, t in took]) or 0.0
    total = 0.0
    for run in left:
        same_cell = mean([t for r, t in took if (r.scenario, r.row) == (run.scenario, run.row)])
        same_row = mean([t for r, t in took if r.row == run.row])
        total += same_cell if same_cell is not None else same_row if same_row is not None else overall
    return total / max(1, min(jobs, len(left)))


def _check_metric(metric: str, summary: dict) -> None:
    """Stop a grid at its first finished run when the metric it ranks is not in a run's summary."""
    if metric not in summary:
        numbers = [k for k, v in summary.items() if is_number(v) and k != "seed"]
        ordered = metric_columns([summary])
        known = ", ".join(ordered + sorted(set(numbers) - set(ordered)))
        raise UserError(f"metric {metric!r} is not in the runs' summaries (known: {known})")


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


def run_row(run: GridRun) -> tuple[dict[str, Any], dict[str, Any]]:
    """One run's per-seed row, ``(identity, numbers)``, from its run directory (``summary.json``,
    ``config.yaml`` and the logs the collapse rule reads)."""
    path = run.plan.out / "summary.json"
    if not path.is_file():
        raise UserError(f"{run.plan.out}: the run did not finish (no summary.json)")
    summary = json.loads(path.read_text())
    record, _ = run_record(summary | {"run_dir": str(run.plan.out)})
    row: dict[str, Any] = {"scenario": run.plan.config.env.name, "row": run.row, "point": list(run.point),
                           "seed": run.seed, "config_hash": record.get("config_hash"),
                           "code_version": record.get("code_version"), "run_dir": str(run.plan.out),
                           "agent": record.get("recipe"), "overrides": " ".join(run.plan.overrides),
                           "collapsed": record.get("collapsed"), "collapsed_phases": record.get("collapsed_phases")}
    numbers = {k: v for k, v in summary.items() if is_number(v) and k != "seed"}
    return row, numbers


def grid_table(grid: Grid, *, ledger: Ledger | None = None, code: dict | None = None) -> pd.DataFrame:
    """The per-seed table (module doc) from the runs' ``summary.json`` and run directories; a run whose
    directory holds no finished run comes from the ``ledger``'s record of it (made by ``code`` where given)."""
    key = code_key(code) if code is not None else None
    records = []
    for run in grid.runs:
        entry = None
        if ledger is not None and not (run.plan.out / "summary.json").is_file():
            entry = ledger.get(run.plan, key)
        row, numbers = (dict(entry["row"]), entry["numbers"]) if entry is not None else run_row(run)
        point = row.pop("point")
        at = list(row).index("row") + 1
        items = list(row.items())
        row = dict(items[:at] + list(zip(grid.axes, point)) + items[at:])
        records.append((row, numbers))
    order = metric_columns([n for _, n in records])
    rest = sorted({k for _, n in records for k in n} - set(order))
    return pd.DataFrame([row | {m: numbers.get(m, math.nan) for m in order + rest} for row, numbers in records])


def finished_part(grid: Grid, ledger: Ledger | None = None) -> tuple[Grid, dict[str, tuple[int, int]]]:
    """What ``--tables-only`` writes from: the grid narrowed to the rows whose every run finished (its
    run directory holds ``summary.json``, else the ``ledger`` records it, whatever code made it), and
    the rows left out as ``{label: (finished, planned)}``. Contrasts (planned or post hoc) naming a row
    left out are dropped.
    The tables pair every row with the baseline, so an unfinished baseline is a UserError."""
    finished: dict[str, int] = {r.label: 0 for r in grid.spec.rows}
    planned: dict[str, int] = {r.label: 0 for r in grid.spec.rows}
    for run in grid.runs:
        planned[run.row] += 1
        if (run.plan.out / "summary.json").is_file() or (ledger is not None and ledger.get(run.plan) is not None):
            finished[run.row] += 1
    left_out = {label: (finished[label], planned[label]) for label in planned if finished[label] < planned[label]}
    if grid.spec.baseline in left_out:
        done, total = left_out[grid.spec.baseline]
        raise UserError(f"the baseline {grid.spec.baseline!r} has {done} of {total} runs finished; every row is paired "
                        "with it, so --tables-only needs it whole (run the grid to finish it)")
    if not left_out:
        return grid, {}
    spec = grid.spec.model_copy(update={
        "rows": [r for r in grid.spec.rows if r.label not in left_out],
        "contrasts": [text for text, pair in zip(grid.spec.contrasts, grid.spec.contrast_pairs)
                      if not set(pair) & set(left_out)],
        "post_hoc": [text for text, pair in zip(grid.spec.post_hoc, grid.spec.post_hoc_pairs)
                     if not set(pair) & set(left_out)]})
    return Grid(spec, grid.source, tuple(r for r in grid.runs if r.row not in left_out)), left_out


# ----------------------------------------------------------------------------- outputs


def output_files(grid: Grid, out: Path) -> list[Path]:
    """The files ``write_grid`` writes (and ``grid.log`` beside them)."""
    out = Path(out)
    files = [out / maps.PER_SEED]
    for s in grid.spec.scenarios:
        name = _scenario_name(grid, s)
        named = grid.spec.contrasts or grid.spec.post_hoc
        files += [out / f"{name}.csv", out / f"{name}.md"] + ([out / f"{name}-contrasts.csv"] if named else [])
    return files + [out / maps.FIGURE, out / maps.MANIFEST, out / maps.LOG, out / LEDGER]


def check_out(grid: Grid, out: Path) -> None:
    """Refuse an output folder that holds a scenario board (``<env>-runs.csv`` or ``index.html``):
    the grid's ``<scenario>.csv`` and ``.md`` would replace the board's. A grid's outputs go to a
    folder of their own, e.g. a subfolder of the leaderboard folder, where the site finds them."""
    out = Path(out)
    clash = [out / "index.html"] + [out / f"{_scenario_name(grid, s)}-runs.csv" for s in grid.spec.scenarios]
    found = next((p for p in clash if p.exists()), None)
    if found is not None:
        raise UserError(f"--out {out} holds a leaderboard ({found.name}); a grid writes into a folder of its own, "
                        f"e.g. {out / (grid.source.parent.name if grid.source.stem == 'grid' else grid.source.stem)}")


def _scenario_name(grid: Grid, scenario: str) -> str:
    """The scenario's name as its runs record it (``envs/x.yaml`` given as a path -> its ``name``)."""
    for run in grid.runs:
        if run.scenario == scenario:
            return run.plan.config.env.name
    return Path(scenario).stem


def grid_command(grid: Grid, out: Path, *, seeds_given: bool = False, metric_given: bool = False,
                 runs_dir: Path | None = None, jobs: int | None = None, figure: str = "value",
                 lines: bool = False) -> str:
    """The ``sao-env grid`` command line that makes these outputs."""
    parts = ["sao-env", "grid", str(grid.source), "--out", str(out)]
    if seeds_given:
        parts += ["--seeds", ",".join(map(str, grid.spec.seeds))]
    if metric_given:
        parts += ["--metric", grid.spec.metric]
    if runs_dir is not None and Path(runs_dir) != Path("runs"):
        parts += ["--runs-dir", str(runs_dir)]
    if figure != "value":
        parts += ["--figure", figure]
    if lines:
        parts.append("--lines")
    if jobs is not None:
        parts += ["--jobs", str(jobs)]
    return shlex.join(parts)


def write_grid(grid: Grid, table: pd.DataFrame, out: Path, *, command: str, figure: str = "value",
               lines: bool = False, left_out: dict[str, tuple[int, int]] | None = None) -> dict[str, Path]:
    """Write the per-seed table, each scenario's aggregate (CSV and Markdown), the figure and the
    manifest into ``out``; returns the paths by name. ``left_out`` (from ``finished_part``) names the
    rows not yet finished: the Markdown, the manifest and so the site call the tables provisional.
    ``lines`` draws a two-axis grid as lines against its first axis (``maps.plot_map``)."""
    spec = grid.spec
    metric = spec.metric
    for name in (metric, *spec.show):
        if name not in table.columns:
            known = ", ".join(c for c in maps.metric_names(table, grid.axes))
            what = "metric" if name == metric else "show: metric"
            raise UserError(f"{what} {name!r} is not in the runs' summaries (known: {known})")
    out = Path(out)
    labels = [r.label for r in spec.rows]
    try:
        out.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {"per_seed": out / maps.PER_SEED}
        table.to_csv(paths["per_seed"], index=False, float_format="%.6g")
        scenarios = []
        frames = []
        for scenario in spec.scenarios:
            name = _scenario_name(grid, scenario)
            scenarios.append(name)
            mine = table[table["scenario"] == name]
            agg = maps.aggregate(mine, axes=grid.axes, rows=labels, baseline=spec.baseline, metric=metric,
                                 points=grid.points, test=spec.test)
            frames.append(agg)
            paths[f"{name}.csv"] = out / f"{name}.csv"
            agg.to_csv(paths[f"{name}.csv"], index=False, float_format="%.6g")
            pairs = None
            if spec.contrasts or spec.post_hoc:
                pairs = maps.contrasts(mine, axes=grid.axes, pairs=spec.contrast_pairs, metric=metric,
                                       points=grid.points, test=spec.test, post_hoc=spec.post_hoc_pairs, rows=labels)
                paths[f"{name}-contrasts.csv"] = out / f"{name}-contrasts.csv"
                pairs.to_csv(paths[f"{name}-contrasts.csv"], index=False, float_format="%.6g")
            paths[f"{name}.md"] = out / f"{name}.md"
            paths[f"{name}.md"].write_text(grid_markdown(grid, name, mine, agg, command=command, figure=figure,
                                                         contrasts=pairs, left_out=left_out, lines=lines))
        paths["figure"] = maps.plot_map(pd.concat(frames, ignore_index=True), out / maps.FIGURE, axes=grid.axes,
                                        rows=labels, baseline=spec.baseline, metric=metric,
                                        difference=figure == "difference", points=grid.points,
                                        collapse=figure == "collapse", lines=lines)
        paths["manifest"] = out / maps.MANIFEST
        manifest = {"title": spec.title or f"Grid {grid.source}", "grid": str(grid.source), "scenarios": scenarios,
                    "rows": [r.model_dump() for r in spec.rows], "axes": grid.axes, "axis_values": spec.axis_values,
                    "cut": spec.cut, "seeds": spec.seeds, "baseline": spec.baseline, "metric": metric, "test": spec.test, "contrasts": spec.contrasts, "post_hoc": spec.post_hoc,
                    "show": spec.show,
                    "figure": figure, "figure_caption": figure_caption(grid, figure, lines), "command": command,
                    "runs": len(grid.runs), "per_seed": maps.PER_SEED}
        if left_out:
            manifest["left_out"] = {label: list(counts) for label, counts in left_out.items()}
        paths["manifest"].write_text(json.dumps(manifest, indent=1) + "\n")
    except OSError as err:
        raise UserError(f"cannot write {err.filename or out}: {err.strerror or err}") from None
    return paths


def figure_caption(grid: Grid, figure: str, lines: bool = False) -> str:
    if figure == "collapse":
        rule = "a run collapses when its rolling training reward stays under half its phase peak until the phase ends"
        if len(grid.axes) == 2 and not lines:
            return (f"Collapse rate (share of seeds; {rule}) per cell, {grid.axes[0]} across, {grid.axes[1]} up; "
                    "one panel per scenario and row.")
        if grid.axes:
            panels = "scenario" + (" and value of the other axes" if len(grid.axes) > 1 else "")
            return (f"Collapse rate (share of seeds; {rule}) against {grid.axes[0]}: one line per row, one panel per "
                    f"{panels}.")
        return f"Collapse rate (share of seeds; {rule}), one panel per scenario."
    what = column_format(grid.spec.metric).title
    if figure == "difference":
        what += f" minus {grid.spec.baseline} at the same axis point, paired by seed"
    if len(grid.axes) == 2 and not lines:
        return f"{what}: mean over seeds per cell, {grid.axes[0]} across, {grid.axes[1]} up; one panel per scenario and row."
    if grid.axes:
        panels = "scenario" + (" and value of the other axes" if len(grid.axes) > 1 else "")
        return f"{what} against {grid.axes[0]}: line, the mean over seeds; band, its 95% t-interval; one panel per {panels}."
    return f"{what}: mean over seeds with its 95% t-interval, one panel per scenario."


def grid_markdown(grid: Grid, scenario: str, per_seed: pd.DataFrame, agg: pd.DataFrame, *, command: str,
                  figure: str, contrasts: pd.DataFrame | None = None,
                  left_out: dict[str, tuple[int, int]] | None = None, lines: bool = False) -> str:
    """One scenario's page: what the grid is, on which cut, at which seeds, how to make it again, the table."""
    spec = grid.spec
    evaluation = eval_versions(per_seed["eval_version"]) if "eval_version" in per_seed else [1]
    eval_tag = "eval v" + "/".join(map(str, evaluation))
    title = column_format(spec.metric).title + (f" ({eval_tag})" if is_eval_metric(spec.metric) else "")
    versions = sorted(set(per_seed["code_version"].astype(str)))
    n = sorted(set(agg["n"].astype(int)))
    lines = [f"# {spec.title or 'Grid'}: {scenario}", ""]
    if left_out:
        lines += [f"**Provisional**: {maps.provisional_text(left_out)}. The command below finishes them.", ""]
    lines += [
             f"- **grid**: `{grid.source}`; {len(spec.rows)} rows"
             + (" x " + " x ".join(f"{len(v)} values of `{k}`" for k, v in spec.axis_values.items()) if spec.axes else "")
             + f" x {len(spec.seeds)} seeds = {len(per_seed)} runs on this scenario",
             "- **rows**: " + "; ".join(f"{r.label} = `{r.agent}`" + (f" with `{' '.join(r.overrides)}`" if r.overrides else "")
                                        for r in spec.rows)]
    if spec.axes:
        lines.append("- **axes**: " + "; ".join(f"`{k}` in {{{', '.join(v)}}}" for k, v in spec.axis_values.items()))
    lines += ["- **cut**: " + (", ".join(f"`{c}`" for c in spec.cut) if spec.cut else "none (the full scenario)"),
              f"- **seeds**: {', '.join(map(str, spec.seeds))}; n per cell: {', '.join(map(str, n))}",
              f"- **baseline**: {spec.baseline}; every row minus it at the same axis point, paired by seed "
              "(mean ± half-width of the 95% Student-t interval of the per-seed differences)",
              f"- **metric**: {title} (`{spec.metric}`); cells are mean ± half-width of the 95% Student-t interval over "
              "seeds",
              "- **detectable at n**: the minimum detectable paired difference to the baseline at the cell's n under "
              "the table's rule: 80% power at α/m, Holm's most stringent step over the m rows' comparisons with the "
              "baseline at the axis point (two-sided α 0.05, from the observed sd of the paired differences; `none`: "
              "the test cannot reach α after Holm at that n; docs/leaderboard.md). It is what a cell can resolve, not "
              "a bound on a difference it leaves unresolved",
              "- **p vs baseline (Holm), rank**: " + ("exact sign-flip permutation test" if spec.test == "sign-flip" else
                                                       "paired t-test (the grid's `test: t`)")
              + " of each row's paired differences to the baseline, Holm-corrected over the rows' comparisons with the baseline at the axis point; a rank is a tie "
              "(`1–3`) unless the tests of every pair of rows (Holm over all pairs) support the order",
              "- **collapsed**: runs whose rolling training reward stayed under half its phase peak until the phase "
              "ended (docs/metrics.md, Collapse)",
              f"- **code version**: {', '.join(versions)}",
              f"- **evaluation**: {evaluation_text(evaluation)}; columns read from it are marked `({eval_tag})`",
              f"- **command**: `{command}`",
              f"- **per-seed table**: `{maps.PER_SEED}`; every metric's aggregate and paired difference: `{scenario}.csv`",
              "", f"![{figure_caption(grid, figure, lines)}]({maps.FIGURE})", ""]
    header, body = maps.display_table(agg, axes=grid.axes, baseline=spec.baseline, metric=spec.metric, test=spec.test)
    lines += maps.markdown_table(header, body)
    if spec.show:
        lines += ["", "## Beside " + title.lower(), "",
                  f"Per cell the mean ± 95% CI over seeds and, after it for every row but {spec.baseline}, the paired "
                  f"difference to {spec.baseline} ± 95% CI. Every metric's figures: `{scenario}.csv`.", ""]
        header, body = maps.metrics_table(agg, axes=grid.axes, baseline=spec.baseline, metrics=spec.show,
                                          eval_tag=eval_tag)
        lines += maps.markdown_table(header, body)
    families = maps.contrast_families(contrasts)
    if maps.PLANNED in families:
        lines += ["", "## Contrasts", "",
                  f"The grid's named comparisons, planned before the runs ({', '.join(spec.contrasts)}): a minus b at "
                  f"the same axis point, paired by seed; p Holm-corrected over the {len(spec.contrasts)} contrasts at "
                  f"the axis point; detectable at n: 80% power at α/{len(spec.contrasts)}, Holm's most stringent step. "
                  "Every metric's contrast: "
                  f"`{scenario}-contrasts.csv`.", ""]
        header, body = maps.contrasts_display(families[maps.PLANNED], axes=grid.axes, metric=spec.metric,
                                              test=spec.test)
        lines += maps.markdown_table(header, body)
    if maps.POST_HOC in families:
        k = len(spec.rows)
        lines += ["", "## Post-hoc contrasts", "",
                  f"Comparisons chosen after the results were read ({', '.join(spec.post_hoc)}): post hoc, so they are "
                  f"not counted with the planned contrasts but corrected as their own family over every pair of the "
                  f"{k} rows at the axis point ({k * (k - 1) // 2} comparisons, Holm; the family the ranks use), "
                  f"whichever pairs are named; detectable at n: 80% power at α/{k * (k - 1) // 2}. A minus b at the same "
                  f"axis point, paired by seed; every metric's contrast: `{scenario}-contrasts.csv` (family "
                  "`post hoc`).", ""]
        header, body = maps.contrasts_display(families[maps.POST_HOC], axes=grid.axes, metric=spec.metric,
                                              test=spec.test)
        lines += maps.markdown_table(header, body)
    lines += ["", f"Generated on {date.today().isoformat()}."]
    return "\n".join(lines) + "\n"
