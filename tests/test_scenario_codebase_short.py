"""A short SAO run on the codebase scenario, end to end: the forge's repositories, sandboxed pytest
with swebench's log parser, multi-turn episodes and the learner (in its own file, so that the test
workers split it from the other scenarios' runs)."""

from __future__ import annotations

import json

import pytest

from conftest import scenario_config
from sao_env.experiment import run_experiment

pytestmark = pytest.mark.slow


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("codebase-drift-sao")
    summary = run_experiment(scenario_config("codebase-drift", "sao"), out, show_progress=False, save_checkpoint=False)
    return out, summary


def test_short_run_completes_with_updates_and_evaluations(run):
    out, summary = run
    episodes, evals = read(out / "episodes.jsonl"), read(out / "evals.jsonl")
    updates = [r for r in read(out / "metrics.jsonl") if "update" in r and r.get("kind") != "eval"]
    assert summary["episodes_consumed"] > 0 and updates
    assert summary["staleness_p95"] <= 16
    assert len({e["phase"] for e in episodes}) >= 2  # the drift happened inside the run
    assert all(0.0 <= e["reward"] <= 1.0 for e in episodes)
    assert len(evals) >= 2 and all(any(k.endswith("/accuracy") for k in e) for e in evals)


def test_codebase_drift_grades_with_the_forge_grader(run):
    out, summary = run
    episodes = read(out / "episodes.jsonl")
    graded = [e for e in episodes if "grade/resolved" in e]
    assert graded, "no episode reached the forge grader"
    assert any(e["response"].startswith("view ") or "\nedit " in e["response"] or e["response"].startswith("edit ")
               for e in episodes)
    assert {e["phase"] for e in episodes} >= {"head0", "head1"}
