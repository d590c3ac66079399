"""Two grids at once over the same runs: each run is recorded once in the ledger, and the grid that
waited for another's run says it reused it, not that it made it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import yaml

from conftest import shrink_overrides
from sao_env import grid as grid_module
from sao_env.experiment import MadeElsewhere
from sao_env.grid import LEDGER, Ledger, load_grid, plan_grid, run_grid


def _run(config_hash: str):
    return SimpleNamespace(plan=SimpleNamespace(config_hash=config_hash))


def test_two_ledgers_of_one_file_record_each_run_once(tmp_path):
    """Grids A and B both opened the (empty) ledger; A records runs 1 and 2, then B records 1, 2 and 3:
    the file holds 3 lines, one per run, and each ledger knows every run."""
    path = tmp_path / LEDGER
    a, b = Ledger(path), Ledger(path)
    row = ({"seed": 0}, {"online_reward": 0.5})
    for h in ("h1", "h2"):
        a.add(_run(h), "code", row)
    for h in ("h1", "h2", "h3"):
        b.add(_run(h), "code", row)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["config_hash"] for e in lines] == ["h1", "h2", "h3"]
    assert len(b) == 3 and b.get(_run("h1").plan, "code") is not None
    a.add(_run("h3"), "code", row)
    assert len(path.read_text().splitlines()) == 3 and len(a) == 3
    # A run of other code is another record.
    a.add(_run("h1"), "other code", row)
    assert len(path.read_text().splitlines()) == 4


def test_a_grid_that_waited_for_another_says_it_reused_the_runs(tmp_path, monkeypatch):
    """Every run of a 4-run grid finished by another process while this grid waited (run_plan returns
    ``MadeElsewhere``): the report lists 4 reused and 0 made, and says so for each."""
    spec = {"title": "t", "scenarios": ["style-drift"], "seeds": [0, 1], "baseline": "grpo", "cut": shrink_overrides("grpo"),
            "rows": [{"label": "grpo", "agent": "grpo"}, {"label": "rm", "agent": "running_mean"}]}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(spec))
    grid = plan_grid(load_grid(path), source=path, runs_dir=tmp_path / "runs")

    def elsewhere(plans, *, on_done, **kwargs):
        for plan in plans:
            on_done(plan, MadeElsewhere({"online_reward": 0.5}), 1.0)

    monkeypatch.setattr(grid_module, "run_many", elsewhere)
    lines: list[str] = []
    report = run_grid(grid, jobs=1, code={"fixed": True}, report=lines.append)
    assert len(report.made) == 0 and len(report.reused) == 4
    assert sum("another process made it" in line for line in lines) == 4
