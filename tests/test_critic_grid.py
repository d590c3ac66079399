"""leaderboards/critic/grid.yaml, the pre-registered critic map: its cells are the scenarios its header
describes, its seeds let the sign-flip test reach alpha after Holm over the 10 predictions, and every
arm runs at 8 trajectories per update."""

from __future__ import annotations

from pathlib import Path

import pytest

from sao_env.grid import load_grid, plan_grid
from sao_env.leaderboard.stats import min_seeds

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "leaderboards" / "critic" / "grid.yaml"
RATES = {"easy": 0.87, "learnable": 0.22, "hard": 0.0}
"""The warm start's success rate per class (envs/critic-spread.yaml's header)."""


def class_share(weights: dict[str, float]) -> float:
    """eta^2 of a 0/1 reward by class: between-class variance over p(1 - p), by hand from the mixture."""
    total = sum(weights.values())
    w = {k: v / total for k, v in weights.items()}
    mean = sum(w[k] * RATES[k] for k in w)
    between = sum(w[k] * (RATES[k] - mean) ** 2 for k in w)
    return between / (mean * (1 - mean))


@pytest.fixture(scope="module")
def grid():
    return plan_grid(load_grid(GRID))


def test_the_design_is_as_written(grid):
    spec = grid.spec
    assert spec.baseline == "running_mean" and spec.test == "sign-flip" and spec.metric == "online_reward"
    assert [r.label for r in spec.rows] == ["running_mean", "sao", "sao_lambda1", "per_prompt", "oracle_class", "grpo"]
    assert len(grid.runs) == 6 * 6 * 10
    # ten predictions, Holm over them: the sign-flip test's floor 2/2^n <= 0.05/10 first holds at n = 9
    assert min_seeds(10) == 9 and len(spec.seeds) >= 9 and not spec.post_hoc


def test_every_arm_consumes_8_trajectories_per_update_and_sao_is_the_paper_s(grid):
    for run in grid.runs:
        hparams = run.plan.config.agent.hparams
        if run.row == "grpo":
            assert hparams["group_size"] * hparams["groups_per_update"] == 8
        else:
            assert hparams["episodes_per_update"] == 8
        if run.row.startswith("sao"):
            assert hparams["critic_lr"] == 5 * hparams["lr"]


def test_the_spread_cells_state_the_class_shares_they_hold(grid):
    shares = {}
    for run in grid.runs:
        env = run.plan.config.env
        if run.row != "running_mean" or run.seed != 0 or not run.scenario.startswith("critic-map"):
            continue
        assert sum(p.duration_h for p in env.phases) == 1.0 and env.eval.interval_h == 0.05
        for phase in env.phases:
            sources = {s.params["difficulty_class"]: s.weight for s in phase.sources}
            assert all(s.params["pool"] == 64 for s in phase.sources)
            shares[(run.scenario, phase.name)] = class_share({k: v for k, v in sources.items() if v > 0})
    assert shares[("critic-map-s0", "mix")] == 0.0
    assert shares[("critic-map-s50", "mix")] == pytest.approx(0.48, abs=0.005)
    assert shares[("critic-map-s75", "mix")] == pytest.approx(0.64, abs=0.005)
    assert shares[("critic-map-s50-drift", "mix-sentence")] == shares[("critic-map-s50", "mix")]


FOLLOWUP = Path(__file__).resolve().parents[1] / "leaderboards" / "critic-followup" / "grid.yaml"


def test_the_follow_up_separates_where_the_value_is_read_on_a_pool_whose_prompts_recur():
    import numpy as np

    from sao_env.scenario import Scenario

    followup = plan_grid(load_grid(FOLLOWUP))
    spec = followup.spec
    assert [r.label for r in spec.rows] == ["running_mean", "per_prompt", "sao", "sao_lambda1", "sao_prompt_value"]
    assert len(followup.runs) == 5 * 16 and min_seeds(3) <= len(spec.seeds) and not spec.post_hoc
    hparams = {run.row: run.plan.config.agent.hparams for run in followup.runs if run.seed == 0}
    assert {h["episodes_per_update"] for h in hparams.values()} == {8}
    assert hparams["sao_prompt_value"] == {**hparams["sao_lambda1"], "value_at": "prompt"}
    config = next(run.plan.config for run in followup.runs if run.row == "per_prompt" and run.seed == 0)
    scenario = Scenario(config.env)
    rng = np.random.default_rng(0)
    for t in (10.0, 500.0):  # each phase: 400 draws from its 64 prompts
        assert len({scenario.next_task(t, rng, i).prompt for i in range(400)}) == 64


SPREAD = Path(__file__).resolve().parents[1] / "leaderboards" / "critic-spread" / "grid.yaml"


def test_the_spread_follow_up_has_one_unreachable_class_in_one_cell_and_only_learnable_ones_in_the_other(grid):
    """critic-spread-u50: no response the policy could learn from any prompt earns the hard class a reward (its
    rewarded style is in no prompt's list, no warm-start demonstration, no other class's reward), while easy and
    learnable prompts are graded 1 in their rewarded style; critic-spread-rates: every class's rewarded style is
    on its own prompt's list. Graded by the scenario's own grader; one warm start with critic-spread."""
    import numpy as np

    from sao_env.graders.style import grade_style_match
    from sao_env.scenario import Scenario
    from sao_env.tasks.arithmetic import STYLES, render

    plan = plan_grid(load_grid(SPREAD))
    spec = plan.spec
    assert [r.label for r in spec.rows] == ["running_mean", "class_mean", "sao"]
    assert len(plan.runs) == 3 * 2 * 20 and min_seeds(4) <= len(spec.seeds) and not spec.post_hoc
    configs = {(run.scenario, run.row): run.plan.config for run in plan.runs if run.seed == 0}
    assert {c.agent.hparams["episodes_per_update"] for c in configs.values()} == {8}
    assert configs[("critic-spread-u50", "class_mean")].agent.algorithm == "oracle_class"
    map_warm = next(r.plan.config.env.warm_start for r in grid.runs if r.scenario == "critic-map-s50")
    rng = np.random.default_rng(0)
    taught = {s for w in map_warm.sources for s in w.params["candidates"]}
    for cell in ("critic-spread-u50", "critic-spread-rates"):
        env = configs[(cell, "running_mean")].env
        assert env.warm_start == map_warm and sum(p.duration_h for p in env.phases) == 0.3
        scenario = Scenario(env)
        tasks = [scenario.next_task(10.0, rng, i) for i in range(600)]
        by_class: dict[str, list] = {}
        for task in tasks:
            by_class.setdefault(task.metadata["difficulty_class"], []).append(task)
        listed = {s for t in tasks for s in t.reference["candidates"]}
        for name, group in by_class.items():
            task = group[0]
            wanted = task.reference["style"]
            grades = {s: grade_style_match(task, render(s, task.reference["answer"])).reward for s in STYLES}
            assert grades == {s: float(s == wanted) for s in STYLES}, (cell, name)
            if cell == "critic-spread-u50" and name == "hard":
                assert wanted not in listed | taught and not any(t.reference["style"] == wanted for t in tasks
                                                                  if t.metadata["difficulty_class"] != "hard")
            else:
                assert wanted in task.reference["candidates"], (cell, name)
        assert set(by_class) == ({"easy", "learnable", "hard"} if cell == "critic-spread-u50"
                                 else {"quick", "medium", "slow"})
