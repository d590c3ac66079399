"""Collapse as an event: did a run's training reward fall to under half of what it had reached, and stay there?

The rule (docs/metrics.md, "Collapse"), per phase of the scenario, from ``episodes.jsonl``:

1. The phase's episodes are those whose task was drawn in it (the ``phase`` field), in completion
   order (the file's order). Their rewards' rolling mean over ``WINDOW`` consecutive episodes is
   taken at full windows only (the first value after ``WINDOW`` episodes).
2. The phase's **peak** is the largest of those rolling means. A phase whose peak is under
   ``FLOOR`` (nothing was learned to lose) or that has fewer than ``WINDOW + HOLD - 1`` episodes
   (too short to tell) is not judged.
3. The phase **collapses** when its rolling mean is below ``FRACTION`` x peak at each of the last
   ``HOLD`` or more full windows up to the phase's last episode: the reward fell and never came
   back before the phase ended. A drop that recovers to at least half the peak before the end,
   or a drop in the last ``HOLD - 1`` windows alone, is not a collapse.

A run collapses when any judged phase does. Rolling over episodes rather than learner updates
makes the rule the same for recipes with different batch shapes (SAO's single rollouts, GRPO's
groups).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

WINDOW = 64
"""Episodes in the rolling mean of the training reward."""
FLOOR = 0.2
"""A phase whose peak rolling reward is under this is not judged (a 64-episode mean of rewards in
[0, 1] has a standard error up to 0.0625, so a lower peak can be noise)."""
FRACTION = 0.5
"""A collapse is the rolling reward under this fraction of the phase's peak."""
HOLD = 64
"""For at least this many consecutive full windows, ending at the phase's last episode."""


@dataclass(frozen=True)
class PhaseCollapse:
    """The verdict on one phase."""

    phase: str
    episodes: int
    peak: float
    """Largest full-window rolling mean (NaN when the phase has fewer than ``window`` episodes)."""
    peak_at: int
    """Index (within the phase, 0-based) of the last episode of the peak's window; -1 without a peak."""
    judged: bool
    """False when the phase is too short or its peak is under the floor."""
    collapsed: bool
    below_from: int | None
    """Index (within the phase) of the last episode of the first window of the final stretch below
    ``fraction`` x peak, when the phase collapsed; else None."""


def rolling_mean(values: list[float], window: int) -> np.ndarray:
    """Means of every ``window`` consecutive values (full windows only): length ``len - window + 1``."""
    x = np.asarray(values, dtype=float)
    if window < 1:
        raise ValueError("window must be at least 1")
    if len(x) < window:
        return np.empty(0)
    c = np.concatenate([[0.0], np.cumsum(x)])
    return (c[window:] - c[:-window]) / window


def phase_collapse(rewards: list[float], *, phase: str = "", window: int = WINDOW, floor: float = FLOOR,
                   fraction: float = FRACTION, hold: int = HOLD) -> PhaseCollapse:
    """The rule of the module doc on one phase's rewards, in completion order."""
    r = rolling_mean(rewards, window)  # r[i] ends at episode i + window - 1
    n = len(rewards)
    if len(r) == 0:
        return PhaseCollapse(phase, n, math.nan, -1, False, False, None)
    i_peak = int(np.argmax(r))
    peak = float(r[i_peak])
    if peak < floor or len(r) < hold:
        return PhaseCollapse(phase, n, peak, i_peak + window - 1, False, False, None)
    below = r < fraction * peak
    trailing = len(r) - (int(np.flatnonzero(~below)[-1]) + 1)  # the peak itself is never below, so one exists
    collapsed = trailing >= hold
    start = len(r) - trailing
    return PhaseCollapse(phase, n, peak, i_peak + window - 1, True, collapsed,
                         start + window - 1 if collapsed else None)


def run_collapse(episodes: list[dict], **rule) -> list[PhaseCollapse]:
    """The verdict on every phase of a run's episodes (``episodes.jsonl`` records: ``phase`` and
    ``reward``), phases in the order they first complete an episode; ``rule`` overrides the
    module's constants (``window``, ``floor``, ``fraction``, ``hold``)."""
    by_phase: dict[str, list[float]] = {}
    for e in episodes:
        by_phase.setdefault(str(e.get("phase")), []).append(float(e["reward"]))
    return [phase_collapse(rewards, phase=name, **rule) for name, rewards in by_phase.items()]


def read_episodes(path: Path) -> list[dict]:
    """``phase`` and ``reward`` of every line of an ``episodes.jsonl``."""
    out = []
    with Path(path).open() as f:
        for line in f:
            if line.strip():
                e = json.loads(line)
                out.append({"phase": e.get("phase"), "reward": e["reward"]})
    return out


def collapse_record(run_dir: Path) -> dict:
    """What a per-seed leaderboard row records of a run's collapse: ``collapsed`` (1.0 or 0.0) and
    ``collapsed_phases`` (the collapsed phases, ``;``-joined); empty when the run has no
    ``episodes.jsonl``."""
    path = Path(run_dir) / "episodes.jsonl"
    if not path.is_file():
        return {}
    verdicts = run_collapse(read_episodes(path))
    phases = [v.phase for v in verdicts if v.collapsed]
    return {"collapsed": 1.0 if phases else 0.0, "collapsed_phases": ";".join(phases)}
