"""Adaptation-curve plots: current-phase accuracy against simulated hours, drifts marked.

One line per recipe: the mean over its seeds at each evaluation time, with a band that is the
95% Student-t interval of that mean over seeds (clipped to [0, 1]; no band with one seed).
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import yaml  # noqa: E402

from sao_env.evaluation.stats import mean_ci95  # noqa: E402

LEGEND_WIDTH = 48
"""Legend entries (a recipe with its overrides can be long) wrap at this many characters."""
BAND = "95% t-interval over seeds"
"""What the shaded band around each line is (also printed in the legend)."""


_DOLLAR = re.compile(r"(?<!\\)\$")


def as_plain_text(fig) -> None:
    """Escape every ``$`` in ``fig``'s texts (titles, legends, labels, fixed tick labels): names of
    recipes, phases, rows and axis values reach a plot as written, never as mathtext, where an odd
    ``$`` would stop the plot (and the run that draws it). Numeric tick labels, made when the figure
    is drawn, keep their mathtext."""
    from matplotlib.text import Text
    from matplotlib.ticker import FixedFormatter

    for text in fig.findobj(Text):
        if "$" in text.get_text():
            text.set_text(_DOLLAR.sub(r"\\$", text.get_text()))
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for formatter in (axis.get_major_formatter(), axis.get_minor_formatter()):
                if isinstance(formatter, FixedFormatter):
                    formatter.seq = [_DOLLAR.sub(r"\\$", str(label)) for label in formatter.seq]


def load_evals(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "evals.jsonl").read_text().splitlines() if line]


def legend_label(label: str, run_dir: Path) -> str:
    """What a plot's legend calls a run: its recipe and the overrides it was given
    (``sao (agent.hparams.lr=3e-5)``, from ``config.yaml``'s provenance), not the directory label
    ``sao+0d31cef3``; ``label`` itself when the run recorded no overrides."""
    try:
        config = yaml.safe_load((Path(run_dir) / "config.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return label
    overrides = (config.get("provenance") or {}).get("overrides") or []
    recipe = (config.get("agent") or {}).get("name") or label.split("+", 1)[0]
    return f"{recipe} ({'; '.join(map(str, overrides))})" if overrides else label


def plot_adaptation(runs: dict[str, list[Path]], path: Path, *, title: str | None = None) -> Path:
    """Plot run directories grouped by label (``{label: [run dirs]}``), e.g. one run's own curve;
    the legend names each group by its recipe and overrides (``legend_label``)."""
    from sao_env.evaluation.adaptation import current_accuracy
    from sao_env.leaderboard.records import scenario_facts
    from sao_env.scenario import Scenario, ScenarioSpec

    first = next(iter(runs.values()))[0]
    env = yaml.safe_load((Path(first) / "config.yaml").read_text())["env"]
    scenario = Scenario(ScenarioSpec(**env))
    points = []
    names: dict[str, str] = {}
    for label, dirs in runs.items():
        name = legend_label(label, dirs[0])
        name = name if name not in names.values() else f"{name} [{label}]"
        names[label] = name
        for seed, d in enumerate(dirs):
            points += [(name, seed, t / 3600, a) for t, a in current_accuracy(load_evals(d), scenario)]
    curves = pd.DataFrame(points, columns=["label", "seed", "sim_time_h", "accuracy"])
    return plot_curves(curves, scenario_facts(env), path, title=title or f"{scenario.spec.name}: adaptation curves")


def plot_curves(curves: pd.DataFrame, facts: dict, path: Path, *, title: str, order: list[str] | None = None) -> Path:
    """Plot ``curves`` (label, seed, sim_time_h, accuracy) with the scenario's phases, drifts and
    threshold from ``facts`` (``records.scenario_facts``); lines in ``order`` (default: sorted labels)."""
    labels = order or sorted(curves["label"].unique())
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for i, label in enumerate(labels):
        mine = curves[curves["label"] == label]
        if mine.empty:
            continue
        seeds = mine["seed"].nunique()
        by_time = mine.groupby("sim_time_h")["accuracy"].apply(list).sort_index()
        t = by_time.index.to_numpy(dtype=float)
        stats = [mean_ci95(v) for v in by_time]
        mean = np.array([m for m, _ in stats])
        color = f"C{i % 10}"
        ax.plot(t, mean, color=color, label=textwrap.fill(f"{label} (n={seeds})", LEGEND_WIDTH), lw=2)
        half = np.array([h for _, h in stats])
        if seeds > 1 and not np.all(np.isnan(half)):
            ax.fill_between(t, np.clip(mean - half, 0, 1), np.clip(mean + half, 0, 1), color=color, alpha=0.18, lw=0)
    drifts = _floats(facts.get("drift_times_h"))
    phases = str(facts.get("phases") or "").split(";")
    duration = _float(facts.get("duration_h")) or (curves["sim_time_h"].max() if len(curves) else 1.0)
    for d in drifts:
        ax.axvline(d, color="0.4", ls="--", lw=1)
    edges = [0.0, *drifts, duration]
    if len(phases) == len(edges) - 1:
        for name, start, end in zip(phases, edges[:-1], edges[1:]):
            ax.text((start + end) / 2, 1.02, name, ha="center", va="bottom", fontsize=9, color="0.3")
    threshold = _float(facts.get("recovery_threshold"))
    if threshold is not None:
        ax.axhline(threshold, color="0.6", ls=":", lw=1, label=f"recovery threshold {threshold:g}")
    ax.set(xlabel="simulated hours", ylabel="held-out accuracy, current phase", ylim=(0, 1.08), xlim=(0, duration))
    ax.set_title(title, pad=16)
    handles, names = ax.get_legend_handles_labels()
    legend = ax.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(3, len(names)),
                       fontsize=8, title=f"line: mean over seeds; band: {BAND}", title_fontsize=8, frameon=False)
    ax.grid(alpha=0.3)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    as_plain_text(fig)
    fig.savefig(path, dpi=110, metadata={"Software": None}, bbox_inches="tight", bbox_extra_artists=[legend])
    plt.close(fig)
    return path


def _float(value) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(x) else x


def _floats(text) -> list[float]:
    return [x for x in (_float(part) for part in str(text or "").split(";")) if x is not None]


TRAINING_PANELS = (("train/reward_mean", "training reward (batch mean)"), ("actor/entropy", "policy entropy (nats/token)"),
                   ("actor/grad_norm", "actor grad-norm (before clipping)"))
"""The per-update metrics ``plot_training`` draws, one panel each (docs/metrics.md)."""


def load_updates(run_dir: Path) -> pd.DataFrame:
    """One row per learner update of a run (``metrics.jsonl`` without its evaluation records)."""
    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if line]
    return pd.DataFrame([r for r in rows if r.get("kind") != "eval" and "update" in r])


def plot_training(runs: dict[str, Path], path: Path, *, title: str, window: int = 50,
                  panels: tuple[tuple[str, str], ...] = TRAINING_PANELS) -> Path:
    """Per-update training metrics of runs (``{label: run dir}``) against the learner update: the raw
    values faint, their centred rolling mean over ``window`` updates bold; drifts as dashed lines at the
    first update after each drift (one colour per run). Updates without a metric (SAO's critic-only
    warm-up has no actor step) are gaps."""
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 2.6 * len(panels)), sharex=True)
    for i, (label, run_dir) in enumerate(runs.items()):
        updates = load_updates(run_dir)
        drifts = json.loads((Path(run_dir) / "summary.json").read_text()).get("drift_times_h", [])
        color = f"C{i % 10}"
        for ax, (key, _) in zip(axes, panels):
            if key not in updates:
                continue
            y = pd.to_numeric(updates[key], errors="coerce")
            ax.plot(updates["update"], y, color=color, alpha=0.18, lw=0.6)
            ax.plot(updates["update"], y.rolling(window, center=True, min_periods=max(1, window // 5)).mean(),
                    color=color, lw=1.8, label=f"{label} ({len(updates)} updates)")
            for d in drifts:
                after = updates.loc[updates["sim_time_s"] >= d * 3600, "update"]
                if len(after):
                    ax.axvline(after.iloc[0], color=color, ls="--", lw=0.8, alpha=0.7)
    for ax, (_, name) in zip(axes, panels):
        ax.set_ylabel(name, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].set_title(title)
    axes[0].legend(fontsize=8, loc="best", title=f"bold: rolling mean over {window} updates; dashed: drifts",
                   title_fontsize=8)
    axes[-1].set_xlabel("learner update")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    as_plain_text(fig)
    fig.savefig(path, dpi=110, metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)
    return path
