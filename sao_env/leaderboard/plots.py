"""Adaptation-curve plots: current-phase accuracy against simulated hours, drifts marked."""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import yaml  # noqa: E402

from sao_env.evaluation.adaptation import current_accuracy  # noqa: E402
from sao_env.scenario import Scenario, ScenarioSpec  # noqa: E402


def load_evals(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "evals.jsonl").read_text().splitlines() if line]


def plot_adaptation(runs: dict[str, list[Path]], path: Path, *, title: str | None = None) -> Path:
    """One line per agent (mean over its seeds) with a min-max band when there are several seeds."""
    first = next(iter(runs.values()))[0]
    scenario = Scenario(ScenarioSpec(**yaml.safe_load((Path(first) / "config.yaml").read_text())["env"]))
    fig, ax = plt.subplots(figsize=(8, 4.2))
    for i, (agent, dirs) in enumerate(sorted(runs.items())):
        curves = [current_accuracy(load_evals(d), scenario) for d in dirs]
        n = min(len(c) for c in curves)
        t = np.array([p[0] for p in curves[0][:n]]) / 3600
        acc = np.array([[p[1] for p in c[:n]] for c in curves])
        color = f"C{i}"
        ax.plot(t, acc.mean(0), color=color, label=f"{agent} (n={len(dirs)})", lw=2)
        if len(dirs) > 1:
            ax.fill_between(t, acc.min(0), acc.max(0), color=color, alpha=0.2, lw=0)
    for w in scenario.windows[1:]:
        ax.axvline(w.start_s / 3600, color="0.4", ls="--", lw=1)
    for w in scenario.windows:
        ax.text((w.start_s + w.end_s) / 2 / 3600, 1.02, w.name, ha="center", va="bottom", fontsize=9, color="0.3")
    ax.axhline(scenario.spec.eval.recovery_threshold, color="0.7", ls=":", lw=1)
    ax.set(xlabel="simulated hours", ylabel="held-out accuracy, current phase", ylim=(0, 1.08),
           xlim=(0, scenario.duration_s / 3600))
    ax.set_title(title or f"{scenario.spec.name}: adaptation curves", pad=16)
    ax.legend(loc="lower right", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
