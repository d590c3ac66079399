"""What the warm start does with spare cores changes no bit of it: a forked helper process making the
batches ahead of the trainer (``warmstart.demonstration_batches``), and forward passes on more
threads than the backward (``supervised_warm_start(forward_threads=...)``)."""

from __future__ import annotations

import torch

from conftest import _shrunk_config, scenario_config
from sao_env.policy.model import build_policy, build_tokenizer
from sao_env.policy.warmstart import demonstration_batches, supervised_warm_start
from sao_env.scenario import Scenario


def _batches(env: str, steps: int, batch_size: int, helper: bool) -> list[tuple[torch.Tensor, ...]]:
    config = _shrunk_config("sao") if env == "style-drift" else scenario_config(env, "sao")
    scenario = Scenario(config.env)
    spec = scenario.spec.warm_start.model_copy(update={"steps": steps, "batch_size": batch_size})
    return list(demonstration_batches(build_tokenizer(config.agent.model), scenario, spec, helper=helper))


def _assert_same(made_ahead, made_in_place, steps):
    assert len(made_ahead) == len(made_in_place) == steps
    for (tokens_a, labels_a, attention_a), (tokens_b, labels_b, attention_b) in zip(made_ahead, made_in_place):
        assert torch.equal(tokens_a, tokens_b) and torch.equal(labels_a, labels_b)
        assert torch.equal(attention_a, attention_b)
        assert torch.equal(attention_b.bool(), tokens_b != 0)  # the character tokenizer's pad (id 0) is no row's token
    assert (made_in_place[0][1] != -100).any()  # something is trained on
    assert not torch.equal(made_in_place[0][0], made_in_place[1][0])  # and the steps differ


def test_a_helper_makes_the_same_single_turn_batches():
    _assert_same(_batches("style-drift", 6, 16, helper=True), _batches("style-drift", 6, 16, helper=False), 6)


def test_a_helper_makes_the_same_multi_turn_batches():
    _assert_same(_batches("tool-drift", 3, 4, helper=True), _batches("tool-drift", 3, 4, helper=False), 3)


def test_forward_passes_on_two_threads_train_the_same_weights():
    """style-drift's own batch size (64) and prompts, 4 steps: the loss and every weight agree bit for bit."""
    config = _shrunk_config("sao")
    scenario = Scenario(config.env)
    spec = scenario.spec.warm_start.model_copy(update={"steps": 4, "batch_size": 64, "lr": 3e-3})
    tokenizer = build_tokenizer(config.agent.model)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trained = []
        for forward_threads in (None, 2):
            model = build_policy(config.agent.model, tokenizer, seed=0)
            seen, forward = [], model.forward
            model.forward = lambda *a, _forward=forward, _seen=seen, **k: (_seen.append(torch.get_num_threads()),
                                                                           _forward(*a, **k))[1]
            losses = supervised_warm_start(model, tokenizer, scenario, spec, show_progress=False,
                                           forward_threads=forward_threads)
            trained.append((losses, model.state_dict()))
            assert seen == [forward_threads or 1] * 4 and torch.get_num_threads() == 1  # then the caller's again
    finally:
        torch.set_num_threads(before)
    (losses_1, weights_1), (losses_2, weights_2) = trained
    assert losses_1 == losses_2 and losses_1[-1] < losses_1[0]
    assert all(torch.equal(weights_1[k], weights_2[k]) for k in weights_1)
