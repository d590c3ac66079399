"""Held-out evaluation (``EVAL_VERSION`` 3): one held-out set per phase fixed by the scenario, the same
for every seed and recipe; at one seed every recipe meets the same sampling streams (common random
numbers for paired comparisons), and two seeds meet independent streams on those same tasks, so the
seed-to-seed spread of an evaluation metric holds the evaluation's sampling noise but not the draw of a
set."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import sao_env.evaluation.heldout as heldout
from sao_env.envs.text_env import load_scenario
from sao_env.evaluation.heldout import EVAL_VERSION, evaluate_heldout
from sao_env.scenario import Scenario


def scenario_at(name: str, seed: int) -> Scenario:
    base = load_scenario(name)
    return Scenario(base.spec.model_copy(update={"eval": base.spec.eval.model_copy(update={"prompts_per_phase": 6})}),
                    seed=seed)


def streams(monkeypatch, model, tok, scenario, eval_key):
    """The (env seed, sampling row key, task id) of every episode one evaluation plays, and its result."""
    seen = []
    real_play = heldout.play

    def recording_play(model, tokenizer, tasks, spec, *, env_seeds, row_keys, temperature):
        seen.extend(zip(env_seeds, row_keys, [t.id for t in tasks]))
        return real_play(model, tokenizer, tasks, spec, env_seeds=env_seeds, row_keys=row_keys, temperature=temperature)

    monkeypatch.setattr(heldout, "play", recording_play)
    result = evaluate_heldout(model, tok, scenario, eval_key=eval_key)
    monkeypatch.setattr(heldout, "play", real_play)
    return seen, result


def test_the_version_is_three():
    assert EVAL_VERSION == 3


def task_ids(scenario: Scenario) -> dict[str, list[str]]:
    return {phase: [f"{t.id}|{t.prompt}" for t in tasks] for phase, tasks in scenario.eval_sets.items()}


@pytest.mark.parametrize("name", ["style-drift", "topic-drift", "tool-drift"])
def test_every_seed_meets_the_same_held_out_tasks_and_another_eval_seed_another_set(name):
    at = {seed: task_ids(scenario_at(name, seed)) for seed in (0, 1, 7, 123)}
    assert at[0] == at[1] == at[7] == at[123]
    assert all(len(ids) == 6 for ids in at[0].values())
    base = scenario_at(name, 0).spec
    moved = Scenario(base.model_copy(update={"eval": base.eval.model_copy(update={"seed": base.eval.seed + 1})}), seed=0)
    assert task_ids(moved) != at[0]


def test_the_fixed_set_is_the_one_version_2_drew_for_seed_0():
    """Version 2 drew a seed's set from ``[eval.seed, seed, phase]``; version 3's is the seed-0 one for every seed,
    so seed-0 runs evaluate the same tasks under both versions (the pinned run's bytes did not move)."""
    scenario = scenario_at("topic-drift", 5)
    spec = scenario.spec
    for i, phase in enumerate(spec.phases):
        for seed, same in ((0, True), (5, False)):
            rng = np.random.default_rng([spec.eval.seed, seed, i])
            drawn = [scenario._sample_from(i, rng, created_at=0.0, index=900_000 + j, heldout=True)
                     for j in range(spec.eval.prompts_per_phase)]
            assert ([t.prompt for t in drawn] == [t.prompt for t in scenario.eval_sets[phase.name]]) is same


def test_two_recipes_at_one_seed_share_the_streams_and_two_seeds_do_not(monkeypatch, tiny):
    model, tok = tiny
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn_like(p))
    at0, result0 = streams(monkeypatch, model, tok, scenario_at("style-drift", 0), 720)
    at0_other, _ = streams(monkeypatch, other, tok, scenario_at("style-drift", 0), 720)
    at0_again, result0_again = streams(monkeypatch, model, tok, scenario_at("style-drift", 0), 720)
    at1, _ = streams(monkeypatch, model, tok, scenario_at("style-drift", 1), 720)
    later, _ = streams(monkeypatch, model, tok, scenario_at("style-drift", 0), 1440)
    assert len(at0) == 18
    assert at0 == at0_other == at0_again and result0 == result0_again
    assert [t for *_, t in at0] == [t for *_, t in at1] == [t for *_, t in later]  # the same tasks, other streams
    for a, b in ((at0, at1), (at0, later)):
        assert not {s for s, _, _ in a} & {s for s, _, _ in b}
        assert not {k for _, k, _ in a} & {k for _, k, _ in b}
    assert len({k for _, k, _ in at0}) == len(at0) and len({s for s, _, _ in at0}) == len(at0)


def test_the_evaluation_noise_of_an_auc_by_hand():
    from sao_env.leaderboard.records import auc_eval_sd

    # weights (0.25, 0.5, 0.25); sum w^2 a (1 - a) = (0.0625 + 0.25 + 0.0625) x 0.25 = 0.09375, over 64 prompts
    assert auc_eval_sd([(0, 0.5), (1, 0.5), (2, 0.5)], 64) == pytest.approx((0.09375 / 64) ** 0.5, rel=1e-12)
    # a curve at 0 or 1 has no binomial noise; unequal gaps weight by the trapezoids: (0.5, 1, 1.5, 1) / 4
    assert auc_eval_sd([(0, 0.0), (1, 1.0), (3, 1.0)], 64) == 0.0
    expected = (0.125 ** 2 * 0.21 + 0.25 ** 2 * 0.25 + 0.375 ** 2 * 0.09 + 0.25 ** 2 * 0.16) / 32
    assert auc_eval_sd([(0, 0.3), (1, 0.5), (2, 0.9), (4, 0.8)], 32) == pytest.approx(expected ** 0.5, rel=1e-12)
    assert math.isnan(auc_eval_sd([(0, 0.3)], 64))


def test_the_summary_names_boards_made_by_other_code_or_evaluation(tmp_path):
    from pathlib import Path

    import pandas as pd

    from sao_env.leaderboard.summary import summary_markdown

    runs = pd.read_csv(Path(__file__).resolve().parents[1] / "leaderboards" / "style-drift-runs.csv")
    runs["code_version"], runs["eval_version"] = "src.aaaaaaaaaaaa", 2
    runs.to_csv(tmp_path / "style-drift-runs.csv", index=False)
    other = runs.assign(env="topic-drift", code_version="src.bbbbbbbbbbbb").drop(columns=["eval_version"])
    other.to_csv(tmp_path / "topic-drift-runs.csv", index=False)
    text = summary_markdown(tmp_path)
    assert "**The boards were made by different code**" in text
    assert ("style-drift by src.aaaaaaaaaaaa, evaluation version 2; topic-drift by src.bbbbbbbbbbbb, evaluation "
            "version 1.") in text
    other.assign(code_version="src.aaaaaaaaaaaa", eval_version=2).to_csv(tmp_path / "topic-drift-runs.csv", index=False)
    assert "made by different code" not in summary_markdown(tmp_path)
