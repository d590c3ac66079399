"""A run's progress reaches a log file (issue #22, item 7): with stderr not a terminal, a run prints
a plain line when it starts, one every ``LINE_EVERY_S`` seconds of wall clock while it runs, and one
when it ends; on a terminal the live bar is used instead and no plain line is printed."""

from __future__ import annotations

import io
from types import SimpleNamespace

from sao_env.experiment import progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _fixtures():
    scenario = SimpleNamespace(duration_s=7200.0)
    config = SimpleNamespace(agent=SimpleNamespace(name="sao"), env=SimpleNamespace(name="style-drift"), seed=3)
    runtime = SimpleNamespace(deployed_version=12)
    return scenario, config, runtime


def test_plain_lines_at_a_steady_interval_when_not_a_terminal(monkeypatch):
    scenario, config, runtime = _fixtures()
    clock = iter([100.0, 110.0, 131.0, 140.0, 165.0, 170.0])  # enter; reports at +10, +31, +40, +65; exit
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    log = io.StringIO()
    with progress.RunProgress(True, scenario, config, stream=log) as report:
        for now in (600.0, 1800.0, 3600.0, 5400.0):
            report(SimpleNamespace(now=now, consumed=int(now / 10), staleness=[2, 4]), runtime, [0.0, 1.0, 1.0, 0.0])
    assert log.getvalue().splitlines() == [
        "sao-env: sao on style-drift seed 3: started, 2.00 simulated h",
        # +10 s: not yet; +31 s: a line (25 % of 7200 s); +40 s: 9 s after the last, none; +65 s: a line
        "sao-env: sao on style-drift seed 3: 25% t=0.50h ep=180 reward=0.50 v=12 stale=3.0 (31 s)",
        "sao-env: sao on style-drift seed 3: 75% t=1.50h ep=540 reward=0.50 v=12 stale=3.0 (65 s)",
        "sao-env: sao on style-drift seed 3: simulated to its end in 70 s of wall clock",
    ]


def test_a_terminal_gets_the_live_bar_and_no_plain_lines():
    scenario, config, runtime = _fixtures()
    screen = _Terminal()
    with progress.RunProgress(True, scenario, config, stream=screen) as report:
        report(SimpleNamespace(now=3600.0, consumed=10, staleness=[]), runtime, [])
    assert "sao-env: " not in screen.getvalue() and "sao on style-drift seed 3" in screen.getvalue()


def test_disabled_progress_prints_nothing():
    scenario, config, runtime = _fixtures()
    log = io.StringIO()
    with progress.RunProgress(False, scenario, config, stream=log) as report:
        report(SimpleNamespace(now=3600.0, consumed=10, staleness=[]), runtime, [])
    assert log.getvalue() == ""


def test_a_run_among_others_prints_a_plain_line_at_its_own_interval_on_any_stream(monkeypatch):
    """A number for ``enabled`` (a grid's or a pool worker's run): a plain line every that many seconds, on a
    terminal too (no bar), and no start or end line: the command that made the run says when it starts and ends."""
    scenario, config, runtime = _fixtures()
    for stream in (io.StringIO(), _Terminal()):
        clock = iter([100.0, 131.0, 400.0, 450.0, 701.0, 710.0])  # enter; reports at +31, +300, +350, +601; exit
        monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
        with progress.RunProgress(300.0, scenario, config, stream=stream) as report:
            for now in (600.0, 1800.0, 3600.0, 5400.0):
                report(SimpleNamespace(now=now, consumed=int(now / 10), staleness=[1]), runtime, [1.0])
        assert stream.getvalue().splitlines() == [
            # +31 s: 31 s after the start, none; +300 s: a line; +350 s: 50 s after it, none; +601 s: a line
            "sao-env: sao on style-drift seed 3: 25% t=0.50h ep=180 reward=1.00 v=12 stale=1.0 (300 s)",
            "sao-env: sao on style-drift seed 3: 75% t=1.50h ep=540 reward=1.00 v=12 stale=1.0 (601 s)",
        ], type(stream).__name__
