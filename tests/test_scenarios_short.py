"""Short runs of SAO and GRPO on the topic and tool scenarios, end to end (codebase-drift: its own file).

Each run uses the real task envs (the math grader's worker pool, the sandboxed Python tool, the
forge's sandboxed pytest with swebench's log parser), the real runtime and learners, and a short
warm start: it checks the plumbing and the multi-turn accounting, not learning.
"""

from __future__ import annotations

import bisect
import json

import numpy as np
import pytest

from conftest import scenario_config
from sao_env.experiment import run_experiment
from test_spine_runtime import check_logs_agree_with_summary

pytestmark = pytest.mark.slow


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    done = {}

    def run(env: str, agent: str):
        if (env, agent) not in done:
            out = tmp_path_factory.mktemp(f"{env}-{agent}")
            summary = run_experiment(scenario_config(env, agent), out, show_progress=False, save_checkpoint=False)
            done[env, agent] = (out, summary)
        return done[env, agent]

    return run


@pytest.mark.parametrize(("env", "agent"), [("topic-drift", "sao"), ("topic-drift", "grpo"),
                                            ("tool-drift", "sao"), ("tool-drift", "grpo")])
def test_short_run_completes_with_updates_and_evaluations(runs, env, agent):
    out, summary = runs(env, agent)
    episodes, evals = read(out / "episodes.jsonl"), read(out / "evals.jsonl")
    updates = [r for r in read(out / "metrics.jsonl") if "update" in r and r.get("kind") != "eval"]
    assert summary["episodes_consumed"] > 0 and updates
    assert summary["staleness_p95"] <= 16
    phases = {e["phase"] for e in episodes}
    assert len(phases) >= 2, phases  # the drift happened inside the run
    # Counts, means, version tags and evaluations recomputed from the logs (test_spine_runtime).
    spec = scenario_config(env, agent).env
    check_logs_agree_with_summary(out, summary, spec)
    # An abrupt drift: each episode's task is of the phase whose window holds the episode's start.
    starts = np.cumsum([0.0] + [p.duration_h * 3600 for p in spec.phases])
    assert all(p.transition_h == 0 for p in spec.phases)
    for e in episodes:
        assert e["phase"] == spec.phases[bisect.bisect_right(starts, e["sim_start"]) - 1].name, e
    # Binary graders: every reward is 0 or 1.
    assert {e["reward"] for e in episodes} <= {0.0, 1.0}
    names = [p.name for p in spec.phases]
    assert len(evals) >= 2 and all(f"eval/{name}/accuracy" in e for e in evals for name in names)


@pytest.mark.parametrize("agent", ["sao", "grpo"])
def test_tool_drift_episodes_are_multi_turn_with_tool_calls(runs, agent):
    out, _ = runs("tool-drift", agent)
    episodes = read(out / "episodes.jsonl")
    assert max(e["turns"] for e in episodes) >= 2
    assert any("<out>" in e["response"] for e in episodes)  # observations made it into the transcript
    assert all(e["turns"] <= 3 for e in episodes)
    assert {e["end"] for e in episodes} <= {"done", "turn-limit", "context-limit"}
    updates = [r for r in read(out / "metrics.jsonl") if "train/turns" in r]
    assert updates and max(r["train/turns"] for r in updates) > 1.0


def test_topic_drift_reports_per_category_accuracy(runs):
    out, _ = runs("topic-drift", "sao")
    last = read(out / "evals.jsonl")[-1]
    assert {"eval/category/combinatorics/accuracy", "eval/category/geometry/accuracy"} <= set(last)
    assert last["eval/category/geometry/accuracy"] == last["eval/geometry/accuracy"]  # one category per phase
