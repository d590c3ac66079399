"""What a grid's dry run says besides its list: why a ledger beside it is not reused, and what the runs
to make would cost.

A ledger (``finished.jsonl``) lets the code that made its runs reuse them anywhere; other code (another
commit of the package or the spec folders, another Python, torch, transformers or numpy) makes them again.
A dry run that counts every run ``new`` beside a committed ledger says so, naming the code keys, how to
reuse them and what ``--tables-only`` does instead. The cost is the runs' simulated hours and, where this
machine holds finished runs of the same scenarios to time it by, their wall-clock seconds per simulated
hour (``timings.json``), so the core-hours and the hours at ``--jobs N``.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

TIMED_RUNS = 200
"""At most this many finished run directories per scenario are read to time a simulated hour."""


def ledger_note(runs: list[Any], ledger: Any, key: str, out: Path) -> list[str]:
    """Lines for the runs of ``runs`` that the ledger lists only under another code key than ``key``;
    none when there are none. ``ledger`` is a ``sao_env.grid.Ledger``."""
    if ledger is None or not len(ledger):
        return []
    others: Counter = Counter()
    for run in runs:
        if ledger.get(run.plan, key) is not None:
            continue
        entry = ledger.get(run.plan)
        if entry is not None:
            others[entry["code"]] += 1
    if not others:
        return []
    codes = ", ".join(f"{code} ({n} run{'s' if n != 1 else ''})" for code, n in others.most_common())
    total = sum(others.values())
    readme = Path(out) / "README.md"
    how = (f"{readme} says which commit and versions made them" if readme.is_file()
           else "the ledger's lines name the code key; its commit is in the grid's history")
    return [f"ledger: {ledger.path} lists {total} of these runs, made by other code: {codes}; this code is {key}.",
            "  A run is reused only by the code that made it (the code key hashes the package, the spec folders and "
            "the versions of Python, torch, transformers and numpy), so these would be made again.",
            f"  To reuse them, run the grid from that code with those versions ({how}); or, making no run, "
            f"write the tables from the ledger now: add --tables-only."]


def cost_note(runs: list[Any], runs_dir: Path, jobs: int) -> list[str]:
    """The simulated hours of ``runs`` (the runs to make: ``GridRun``s) and, where finished runs of
    their scenarios under ``runs_dir`` time a simulated hour here, the core-hours and the wall-clock
    hours at ``jobs`` at once."""
    if not runs:
        return ["cost: nothing to run"]
    hours: dict[str, float] = {}
    for run in runs:
        env = run.plan.config.env
        hours[env.name] = hours.get(env.name, 0.0) + sum(p.duration_h for p in env.phases)
    total_h = sum(hours.values())
    line = f"cost: {len(runs)} run{'s' if len(runs) != 1 else ''}, {_figure(total_h)} simulated hours"
    core_s, timed, untimed = 0.0, [], []
    for name, sim_h in hours.items():
        rate, n = seconds_per_sim_hour(Path(runs_dir) / name)
        if rate is None:
            untimed.append(name)
            continue
        core_s += rate * sim_h
        timed.append(f"{name}: {rate:,.0f} s per simulated hour, the median of {n} finished run{'s' if n != 1 else ''} "
                      f"under {Path(runs_dir) / name}")
    if timed:
        part = " (for the scenarios timed)" if untimed else ""
        line += (f"; about {_figure(core_s / 3600)} core-hours{part}, {_clock(core_s / max(1, jobs))} at "
                 f"--jobs {jobs} ({'; '.join(timed)}; a warm start not cached yet adds its training)")
    if untimed:
        line += f"; no finished run of {', '.join(untimed)} under {runs_dir} to time it by (the grid file's header may say)"
    return [line]


def _figure(x: float) -> str:
    """3 significant digits below 10 (``0.12``), one decimal above (``292.5``, ``1,234.0``)."""
    return f"{x:,.1f}" if x >= 10 else f"{x:.3g}"


def _clock(seconds: float) -> str:
    """``45 min``, ``3.2 h``: a wall-clock duration for one line."""
    return f"{max(1, round(seconds / 60))} min" if seconds < 5400 else f"{seconds / 3600:,.1f} h"


def seconds_per_sim_hour(folder: Path) -> tuple[float | None, int]:
    """The median wall-clock seconds per simulated hour of the finished runs under ``folder``
    (``<label>/seed<N>/`` with ``summary.json``, ``timings.json`` and ``config.yaml``; the newest
    ``TIMED_RUNS``), and how many were timed; (None, 0) without any."""
    import yaml

    if not folder.is_dir():
        return None, 0
    found = sorted(folder.glob("*/seed*/timings.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    rates = []
    for path in found[:TIMED_RUNS]:
        run = path.parent
        if not (run / "summary.json").is_file():
            continue
        try:
            timings = json.loads(path.read_text())
            if timings.get("resumed_at_sim_s") is not None:
                continue  # its wall clock covers only the part after the resume
            config = yaml.safe_load((run / "config.yaml").read_text())
            sim_h = sum(float(p["duration_h"]) for p in config["env"]["phases"])
            seconds = float(timings["total_s"]) - float(timings.get("warm_start_s") or 0.0)
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
            continue
        if sim_h > 0 and seconds > 0:
            rates.append(seconds / sim_h)
    return (statistics.median(rates), len(rates)) if rates else (None, 0)
