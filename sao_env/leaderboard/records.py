"""Per-seed records: a finished run directory read whole (``read_run``, ``BadRun`` where it is cut off
or not JSON) into one row of ``<env>-runs.csv`` (``run_record``: identity from the run's provenance, the
scenario's budget facts, every numeric summary metric, the collapse verdict) and its adaptation curve.

A recipe is an agent recipe plus its overrides: runs whose resolved configuration (seed aside) hashes
the same (``recipe_hash``) are seeds of one row; a run with overrides is its own row, labelled with them.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from sao_env.leaderboard.columns import (FACT_COLUMNS, ID_COLUMNS, NO_COLLAPSE, SORT_KEY, UNKNOWN, finite_float,
                                         is_number, metric_columns)
from sao_env.provenance import code_key, config_hash, short


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
    record["label"] = summary.get("label") or (recipe_label(recipe, record["overrides"]) if changed else recipe)
    for key, value in summary.items():
        if key not in record and is_number(value) and key != "seed":
            record[key] = float(value)
    return record, curve


def recipe_label(agent: str, overrides: str) -> str:
    """``sao (agent.hparams.lr=3e-5)``: a recipe run with overrides is labelled with them."""
    return f"{agent} ({overrides})" if overrides and overrides != UNKNOWN else agent


def records_frame(records: list[dict]) -> pd.DataFrame:
    """The per-seed table: identity and budget columns first, then the metrics in table order."""
    metrics = metric_columns(records)
    rest = sorted({k for r in records for k in r} - set(ID_COLUMNS) - set(FACT_COLUMNS) - set(metrics))
    columns = [c for c in ID_COLUMNS + FACT_COLUMNS if any(c in r for r in records)] + metrics + rest
    frame = pd.DataFrame(records, columns=columns)
    return frame.sort_values(["label", "seed"], kind="stable").reset_index(drop=True)


def records_and_curves(summaries: list[dict]) -> tuple[list[dict], list[tuple[str, Any, float, float]]]:
    """Per-seed records of run summaries (labels made distinct) and their curve points
    ``(label, seed, hours, accuracy)``."""
    pairs = [run_record(s) for s in summaries]
    records = [r for r, _ in pairs]
    distinct_labels(records)
    return records, [(r["label"], r["seed"], t, a) for r, curve in pairs for t, a in curve]


def distinct_labels(records: list[dict]) -> None:
    """Make labels unique per configuration: recipes whose overrides could not be recovered but
    whose configurations differ get their config hash appended."""
    hashes: dict[str, set[str]] = {}
    for r in records:
        hashes.setdefault(r["label"], set()).add(str(r.get("config_hash") or ""))
    for r in records:
        if len(hashes[r["label"]]) > 1:
            r["label"] = f"{r['label']} [{r.get('config_hash') or 'no hash'}]"


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
            out[label][seed_key(r.get("seed"))] = value
    return out


def seed_key(seed: Any) -> Any:
    x = finite_float(seed)
    return int(x) if x is not None and x.is_integer() else seed
