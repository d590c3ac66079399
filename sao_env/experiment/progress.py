"""A run's progress: a live bar over simulated time on a terminal, a plain line every
``LINE_EVERY_S`` seconds of wall clock otherwise (a log file, nohup, CI), so that long runs are
never silent; a run among others (a grid's, a pool worker's) writes a plain line every
``RUN_AMONG_OTHERS_EVERY_S`` instead, and nothing else (the command says when each starts and ends)."""

from __future__ import annotations

import sys
import time

import numpy as np

LINE_EVERY_S = 30.0
"""Wall-clock seconds between two plain progress lines when stderr is not a terminal."""

RUN_AMONG_OTHERS_EVERY_S = 300.0
"""Wall-clock seconds between two progress lines of a run that a grid, a sweep or a pool makes among others."""


class RunProgress:
    """Episodes, reward, version and staleness of one run as simulated time advances.

    ``enabled``: True for a bar on a terminal and a line every ``LINE_EVERY_S`` elsewhere, False for
    nothing, a number of seconds for a plain line that often on any stream and no start or end line."""

    def __init__(self, enabled: bool | float, scenario, config, *, stream=None):
        self.every_s = None if isinstance(enabled, bool) else float(enabled)
        self.enabled, self.scenario, self.config = enabled is not False, scenario, config
        self.stream = stream or sys.stderr
        self.plain = self.enabled and (self.every_s is not None or not self.stream.isatty())

    @property
    def label(self) -> str:
        return f"{self.config.agent.name} on {self.config.env.name} seed {self.config.seed}"

    def __enter__(self):
        self.last_sim, self.last_line = 0.0, time.monotonic()
        self.wall_start = self.last_line
        if self.enabled and not self.plain:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                                     TimeElapsedColumn(), transient=False,
                                     console=Console(file=self.stream))  # stdout carries results only
            self.progress.__enter__()
            self.task = self.progress.add_task(self.label, total=self.scenario.duration_s, info="")
        elif self.plain and self.every_s is None:
            self._line(f"started, {self.scenario.duration_s / 3600:.2f} simulated h")
        return self.report

    def _line(self, text: str) -> None:
        print(f"sao-env: {self.label}: {text}", file=self.stream, flush=True)

    def _info(self, state, runtime, rewards: list[float]) -> str:
        recent = rewards[-64:]
        stale = state.staleness[-64:]
        return (f"t={state.now / 3600:.2f}h ep={state.consumed} reward={np.mean(recent) if recent else 0:.2f} "
                f"v={runtime.deployed_version} stale={np.mean(stale) if stale else 0:.1f}")

    def report(self, state, runtime, rewards: list[float]) -> None:
        if not self.enabled:
            return
        if self.plain:
            now = time.monotonic()
            if now - self.last_line >= (LINE_EVERY_S if self.every_s is None else self.every_s):
                self.last_line = now
                done = 100 * min(state.now / self.scenario.duration_s, 1.0)
                self._line(f"{done:.0f}% {self._info(state, runtime, rewards)} ({now - self.wall_start:.0f} s)")
            return
        if state.now - self.last_sim < 30 and state.now < self.scenario.duration_s:
            return
        self.last_sim = state.now
        self.progress.update(self.task, completed=state.now, info=self._info(state, runtime, rewards))

    def __exit__(self, *exc):
        if self.enabled and not self.plain:
            self.progress.update(self.task, completed=self.scenario.duration_s)
            self.progress.__exit__(*exc)
        elif self.plain and exc[0] is None and self.every_s is None:
            self._line(f"simulated to its end in {time.monotonic() - self.wall_start:.0f} s of wall clock")
