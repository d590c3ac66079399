"""The warm start's batches are the same whether a forked helper process makes them ahead of the
trainer or the trainer makes each itself (``warmstart.demonstration_batches``)."""

from __future__ import annotations

import torch

from conftest import _shrunk_config, scenario_config
from sao_env.policy.model import build_tokenizer
from sao_env.policy.warmstart import demonstration_batches
from sao_env.scenario import Scenario


def _batches(env: str, steps: int, batch_size: int, helper: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
    config = _shrunk_config("sao") if env == "style-drift" else scenario_config(env, "sao")
    scenario = Scenario(config.env)
    spec = scenario.spec.warm_start.model_copy(update={"steps": steps, "batch_size": batch_size})
    return list(demonstration_batches(build_tokenizer(config.agent.model), scenario, spec, helper=helper))


def _assert_same(made_ahead, made_in_place, steps):
    assert len(made_ahead) == len(made_in_place) == steps
    for (tokens_a, labels_a), (tokens_b, labels_b) in zip(made_ahead, made_in_place):
        assert torch.equal(tokens_a, tokens_b) and torch.equal(labels_a, labels_b)
    assert (made_in_place[0][1] != -100).any()  # something is trained on
    assert not torch.equal(made_in_place[0][0], made_in_place[1][0])  # and the steps differ


def test_a_helper_makes_the_same_single_turn_batches():
    _assert_same(_batches("style-drift", 6, 16, helper=True), _batches("style-drift", 6, 16, helper=False), 6)


def test_a_helper_makes_the_same_multi_turn_batches():
    _assert_same(_batches("tool-drift", 3, 4, helper=True), _batches("tool-drift", 3, 4, helper=False), 3)
