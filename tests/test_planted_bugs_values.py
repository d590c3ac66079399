"""Values that plausible one-line bugs would change and the rest of the suite did not check.

Each test asserts a number worked out by hand in its docstring, never read from the code under test,
and was checked against a copy of the package with its bug planted (the test fails there):

* the Dr. GRPO recipe's ``normalize_std: false`` lost (the GRPO agent dividing by the group's std):
  ``test_the_dr_grpo_recipe_only_centres_its_groups``;
* the running mean's ``window`` not passed on (the default 128 used):
  ``test_the_running_mean_keeps_only_its_window``;
* the grid's ``test: t`` not passed to the aggregate: ``test_a_t_test_grid_writes_t_test_p_values``;
* ``\\}`` inside a box read as the box's end: ``test_escaped_braces_stay_inside_the_box``;
* a phase's mixture weights ignored: ``test_a_phase_draws_its_sources_by_weight``;
* the simulated latency losing a term: ``test_each_episode_lasts_prefill_plus_decode_plus_environment``;
* the area under a curve summed at right endpoints: ``test_the_area_under_a_curve_is_its_trapezoid_mean``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats as sps

from sao_env.agents import ALGORITHMS
from sao_env.experiment.config import AgentRecipe, build_agent_config
from sao_env.graders.math import last_boxed
from sao_env.scenario import Scenario, ScenarioSpec
from sao_env.specs import find_spec, load_yaml
from sao_env.types import Episode, Task


def _episodes(tok, rewards: list[float], group_size: int) -> list[Episode]:
    """Hand-made episodes: a 3-token prompt, 2 action tokens, the given rewards, ``group_size`` per group."""
    prompt = tuple(tok("1+1=?", add_special_tokens=False)["input_ids"][:3])
    action = tuple(tok("22", add_special_tokens=False)["input_ids"][:2])
    task = Task(id="t", prompt="1+1=?", reference="2", grader="style", metadata={"phase": "p"})
    return [Episode(task=task, tokens_T=prompt + action, action_mask_T=(False,) * len(prompt) + (True,) * len(action),
                    rollout_logp_T=(0.0,) * len(prompt) + (-1.0,) * len(action),
                    version_T=(-1,) * len(prompt) + (0,) * len(action), reward=r, response="22",
                    group_id=i // group_size, phase="p", sim_start=0.0, sim_end=1.0)
            for i, r in enumerate(rewards)]


def _recipe_agent(name: str, tiny):
    policy, tok = tiny
    recipe = AgentRecipe(**load_yaml(find_spec("agents", name)))
    return ALGORITHMS[recipe.algorithm](policy, tok, build_agent_config(recipe))


def test_the_dr_grpo_recipe_only_centres_its_groups(tiny):
    """Two groups [0, 0, 0, 1]: the group mean is 0.25, so Dr. GRPO's advantages are -0.25 x 3 and
    +0.75, a mean |A| of (3 x 0.25 + 0.75) / 4 = 0.375. Divided by the group's std (0.433 or 0.5) it
    would be about 0.75 or more."""
    agent = _recipe_agent("dr_grpo", tiny)
    assert agent.config.normalize_std is False
    metrics = agent.update(_episodes(tiny[1], [0.0, 0.0, 0.0, 1.0] * 2, group_size=4))
    assert metrics["actor/advantage_abs_mean"] == pytest.approx(0.375, abs=1e-6)
    # Control: the plain GRPO recipe divides by the std, so its mean |A| is larger.
    grpo = _recipe_agent("grpo", tiny).update(_episodes(tiny[1], [0.0, 0.0, 0.0, 1.0] * 2, group_size=4))
    assert grpo["actor/advantage_abs_mean"] > 0.7


def test_the_running_mean_keeps_only_its_window(tiny):
    """window 2 over the rewards [1, 0, 1, 1]: the baseline is the mean of the last two rewards seen
    before each one (0, 1, 0.5, 0.5), so the advantages are 1, -1, 0.5, 0.5, and the history kept
    afterwards is the last two rewards, [1, 1] (with the default window of 128 it would be all four)."""
    policy, tok = tiny
    cls = ALGORITHMS["running_mean"]
    agent = cls(policy, tok, cls.config_cls(window=2, episodes_per_update=4))
    metrics = agent.update(_episodes(tok, [1.0, 0.0, 1.0, 1.0], group_size=1))
    assert agent.history == [1.0, 1.0]
    assert metrics["actor/baseline"] == pytest.approx(1.0)
    agent.update(_episodes(tok, [0.0, 0.0, 0.0, 0.0], group_size=1))
    assert agent.history == [0.0, 0.0]


def test_a_t_test_grid_writes_t_test_p_values(tmp_path):
    """A grid with ``test: t``: the CSV's p for row b is scipy's paired t-test of b against the
    baseline over the five seeds (b is 0.10-0.14 above it), not the sign-flip test's 2/32."""
    from sao_env.grid import Grid, GridSpec, write_grid

    shifts = [0.10, 0.12, 0.14, 0.11, 0.13]
    rows = [{"scenario": "style-drift", "row": label, "seed": seed, "config_hash": f"{label}{seed}", "code_version": "v",
             "run_dir": "", "agent": label, "overrides": "",
             "online_reward": 0.3 + seed * 0.02 + (shifts[seed] if label == "b" else 0.0)}
            for label in ("base", "b") for seed in range(5)]
    spec = GridSpec(scenarios=["style-drift"], seeds=list(range(5)), baseline="base", test="t",
                    rows=[{"label": "base", "agent": "grpo"}, {"label": "b", "agent": "sao"}])
    grid = Grid(spec=spec, source=tmp_path / "grid.yaml", runs=())
    paths = write_grid(grid, pd.DataFrame(rows), tmp_path / "out", command="sao-env grid grid.yaml")
    table = pd.read_csv(paths["style-drift.csv"])
    base = [r["online_reward"] for r in rows if r["row"] == "base"]
    b = [r["online_reward"] for r in rows if r["row"] == "b"]
    assert table.loc[table["row"] == "b", "p"].item() == pytest.approx(sps.ttest_rel(b, base).pvalue, rel=1e-4)
    assert table.loc[table["row"] == "b", "p"].item() < 0.01  # the sign-flip test could not go below 2/32


def test_escaped_braces_stay_inside_the_box():
    r"""``\}`` and ``\{`` are literal braces: ``\boxed{a\}b}`` holds ``a\}b``, not ``a\``."""
    assert last_boxed(r"\boxed{a\}b}") == r"a\}b"
    assert last_boxed(r"\boxed{a\{b}") == r"a\{b"
    assert last_boxed(r"x \boxed{\}} y") == r"\}"


def test_a_phase_draws_its_sources_by_weight():
    """Phase 0 mixes one-digit sums (weight 3) and two-digit sums (weight 1): over 4,000 draws the
    one-digit share is 0.75 within 0.03 (its binomial sd is 0.0068, so 0.03 is over 4 sd)."""
    data = load_yaml(find_spec("envs", "style-drift"))
    params = data["phases"][0]["sources"][0]["params"]
    data["phases"][0]["sources"] = [
        {"name": "styled_arithmetic", "weight": 3.0, "params": {**params, "digits": 1}},
        {"name": "styled_arithmetic", "weight": 1.0, "params": {**params, "digits": 2}},
    ]
    scenario = Scenario(ScenarioSpec(**data))
    rng = np.random.default_rng(7)
    digits = [scenario.next_task(0.0, rng, index=i).metadata["difficulty"]["digits"] for i in range(4000)]
    share = digits.count(1) / len(digits)
    assert share == pytest.approx(0.75, abs=0.03)
    assert set(digits) == {1, 2}


def test_each_episode_lasts_prefill_plus_decode_plus_environment(shrunk_config, tiny):
    """In ``sim`` an episode's simulated duration is prefill_s_per_token x its prompt tokens +
    decode_s_per_token x its generated tokens + its environment time: each term by hand from the
    episode's own tokens (0.0005 s and 0.05 s per token, style-drift's latency)."""
    from sao_env.runtime.sim import SimRuntime

    short = tuple(f"env.phases.{i}.duration_h=0.002" for i in range(3))
    config = shrunk_config("running_mean", 0, short)
    scenario = Scenario(config.env)
    policy, tok = tiny
    cls = ALGORITHMS["running_mean"]
    agent = cls(policy, tok, cls.config_cls(episodes_per_update=8))
    episodes: list[Episode] = []
    SimRuntime(scenario, agent, config.agent.runtime, seed=0, on_update=lambda r: None,
               on_episode=lambda e, v: episodes.append(e), on_eval=lambda t, rt: None, eval_times=[]).run()
    assert len(episodes) >= 8
    latency = scenario.spec.latency
    assert (latency.prefill_s_per_token, latency.decode_s_per_token) == (0.0005, 0.05)
    for e in episodes:
        prompt = sum(1 for m in e.action_mask_T if not m)  # one turn: the prompt is every non-action token
        generated = sum(1 for m in e.action_mask_T if m)
        assert prompt > 0 and generated > 0
        assert e.latency["prefill_s"] == pytest.approx(0.0005 * prompt, rel=1e-12)
        assert e.latency["decode_s"] == pytest.approx(0.05 * generated, rel=1e-12)
        assert e.latency["env_s"] > 0
        expected = 0.0005 * prompt + 0.05 * generated + e.latency["env_s"]
        assert e.sim_end - e.sim_start == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_the_area_under_a_curve_is_its_trapezoid_mean():
    """AUC is the curve's mean over its x range by trapezoids: (0, 0) -> (1, 1) -> (3, 0) has area
    0.5 + 1.0 = 1.5 over a range of 3, so 0.5 (a right-endpoint sum would give 1/3, a left one 2/3)."""
    from sao_env.evaluation.adaptation import area_under

    assert area_under([(0.0, 0.0), (1.0, 1.0), (3.0, 0.0)]) == pytest.approx(0.5, abs=1e-12)
    assert area_under([(0.0, 0.2), (2.0, 0.6)]) == pytest.approx(0.4, abs=1e-12)
    assert math.isnan(area_under([(1.0, 0.3)]))
