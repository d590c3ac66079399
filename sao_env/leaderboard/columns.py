"""A board's metric columns and cells: which summary metrics a scenario's tables show, in what order,
titled and printed how, and the cell helpers every table writer shares (Markdown, the HTML site, the
summary, the maps). The identity and budget columns of the per-seed table are named here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


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
NO_COLLAPSE = "online_reward_without_collapsed"
"""The sort key's mean over the seeds that did not collapse (``sao_env.evaluation.collapse``)."""
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
    keys = {k for s in summaries for k, v in s.items() if is_number(v)}
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


def format_p(p: float) -> str:
    """``0.25``, ``0.0156``; ``1`` at 1."""
    return "n/a" if p is None or math.isnan(p) else f"{p:.3g}"


def format_difference(mean: float, half: float, n: int, column: str) -> str:
    """``-0.012 ± 0.020 (n=3)``; ``-0.012 (n=1, no CI)``; ``n/a (n=0)`` when no seed has both values."""
    if n == 0 or mean is None or math.isnan(mean):
        return "n/a (n=0)"
    decimals = column_format(column).decimals
    text = f"{mean:+,.{decimals}f}"
    if n < 2 or half is None or math.isnan(half):
        return f"{text} (n={n}, no CI)"
    return f"{text} ± {half:,.{decimals}f} (n={n})"


def finite_float(value: Any) -> float | None:
    """``value`` as a float, or None where it is missing, not a number or NaN (a cell read back from CSV)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def num_text(value: Any) -> str:
    if value is None or value == UNKNOWN:
        return UNKNOWN
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def from_csv(value: Any) -> Any:
    """pandas reads empty cells as NaN; an empty cell is None here, other values stay."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def md_escape(text: str) -> str:
    """A name as a Markdown table cell shows it: ``|`` escaped, and ``&``, ``<`` and ``>`` as HTML entities, so
    that a recipe named ``<script>`` is text on every renderer (as on the HTML site), never markup."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def section_id(name: str) -> str:
    """The id of a board's section on the site (``#tool-drift``), which the README's finding links to: the name
    with every character but letters, digits, ``-`` and ``_`` as ``-``."""
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name)
