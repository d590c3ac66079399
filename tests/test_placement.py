"""Placement and precision of the policy and its critic (``agent.model.device``, ``agent.model.precision``),
gradient checkpointing, and the configuration keys that must leave existing runs' hashes alone.

The CUDA cases run where torch sees a GPU and skip elsewhere; the CPU cases check what the GPU path relies
on: a device that resolves, batches that follow the policy, bf16 autocast with float32 master weights.
"""

from __future__ import annotations

import copy

import pytest
import torch

from sao_env.agents.base import AgentConfig, batch_to, collate
from sao_env.agents.sao import SAOAgent, SAOConfig
from sao_env.errors import UserError
from sao_env.policy.generate import sample, sequence_logprobs
from sao_env.policy.lean import lean_decoder
from sao_env.policy.model import ModelSpec, build_policy
from sao_env.policy.placement import autocast, model_device, place, precision_of, resolve_device
from sao_env.policy.tokenizer import build_char_tokenizer
from test_micro_batches import _episodes, _policy

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


def test_new_keys_stay_out_of_the_dump_at_their_defaults():
    """Configurations written before these keys existed keep their hashes: the keys appear only when set."""
    assert "device" not in ModelSpec().model_dump() and "precision" not in ModelSpec().model_dump()
    assert ModelSpec(device="auto", precision="bf16_autocast").model_dump()["device"] == "auto"
    dumped = SAOConfig().model_dump(mode="json")
    assert "micro_batch_tokens" not in dumped and "gradient_checkpointing" not in dumped
    assert SAOConfig(micro_batch_tokens=4096).model_dump()["micro_batch_tokens"] == 4096
    assert AgentConfig(gradient_checkpointing=True).model_dump()["gradient_checkpointing"] is True
    with pytest.raises(ValueError, match="unknown device"):
        ModelSpec(device="gpu0")
    with pytest.raises(ValueError):
        AgentConfig(micro_batch_tokens=0)


def test_devices_resolve_and_a_missing_gpu_is_one_line():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto") == torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="no CUDA device"):
            resolve_device("cuda")


def test_cpu_float32_placement_is_the_model_itself():
    policy, _ = _policy()
    assert place(policy) is policy and precision_of(policy) == "float32"
    assert isinstance(autocast(policy), type(autocast(policy)))  # a null context: no autocast entered


def test_bf16_autocast_keeps_float32_master_weights_and_travels_with_copies():
    """bf16 autocast: parameters, gradients and the optimizer's state stay float32; the passes run in bf16
    (their log-probabilities differ from float32's by rounding only); copies and the critic keep the setting."""
    policy, tok = _policy()
    episodes = _episodes(policy, tok)
    batch = collate(episodes, tok.pad_token_id)
    with torch.no_grad():
        exact, _ = sequence_logprobs(policy, batch.tokens_BT, batch.attention_BT)
    place(policy, "cpu", "bf16_autocast")
    assert precision_of(copy.deepcopy(policy)) == "bf16_autocast"
    with torch.no_grad(), autocast(policy):
        low, _ = sequence_logprobs(policy, batch.tokens_BT, batch.attention_BT)
    assert low.dtype == torch.float32
    gap = (low - exact)[batch.mask_BT].abs()
    assert 0 < gap.max().item() < 0.2  # bf16 arithmetic, not another model
    agent = SAOAgent(policy, tok, SAOConfig(critic_warmup_updates=0), action_horizon=48)
    assert precision_of(agent.critic.model) == "bf16_autocast"
    metrics = agent.update(episodes)
    assert metrics["actor/skipped_nonfinite"] == 0 and agent.version == 1
    assert all(p.dtype == torch.float32 for p in policy.parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in agent.actor_optimizer.state.values())
    # the sampler under autocast: a bfloat16 cache, float32 log-probabilities, counter-based rows as before
    out = sample(policy, [episodes[0].tokens_T[:5]], max_new_tokens=6, eos_token_id=tok.eos_token_id,
                 pad_token_id=tok.pad_token_id, row_keys=[7])
    assert len(out[0].token_ids) >= 1 and all(lp <= 0 for lp in out[0].logps)


def test_gradient_checkpointing_gives_the_same_gradient():
    policy, tok = _policy()
    batch = collate(_episodes(policy, tok), tok.pad_token_id)

    def grads(model):
        model.zero_grad()
        logp, _ = sequence_logprobs(model, batch.tokens_BT, batch.attention_BT)
        (logp * batch.mask_BT).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    plain = grads(policy)
    lean_decoder(policy).checkpoint_layers = True
    try:
        again = grads(policy)
    finally:
        lean_decoder(policy).checkpoint_layers = False
    for a, b in zip(plain, again):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    agent = SAOAgent(copy.deepcopy(policy), tok, SAOConfig(gradient_checkpointing=True), action_horizon=48)
    assert lean_decoder(agent.policy).checkpoint_layers
    assert lean_decoder(agent.critic.model.backbone).checkpoint_layers


def test_batches_follow_the_policy():
    policy, tok = _policy()
    agent = SAOAgent(policy, tok, SAOConfig(), action_horizon=48)
    batch = agent.batch(_episodes(policy, tok))
    assert batch.tokens_BT.device == model_device(policy)
    assert batch_to(batch, batch.tokens_BT.device) is batch


@CUDA
def test_sao_update_and_sampling_on_cuda():
    """On a GPU: the policy, its critic and the batches live there; an update and a colocated sampler run."""
    tok = build_char_tokenizer()
    policy = place(build_policy(ModelSpec(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                                          intermediate_size=64), tok, seed=0), "cuda", "bf16_autocast")
    episodes = _episodes(policy.cpu(), tok)
    policy = place(policy, "cuda", "bf16_autocast")
    agent = SAOAgent(policy, tok, SAOConfig(critic_warmup_updates=0, micro_batch_tokens=64), action_horizon=48)
    assert model_device(agent.critic.model).type == "cuda"
    assert agent.batch(episodes).tokens_BT.is_cuda
    agent.update(episodes)
    assert agent.version == 1
    out = sample(policy, [list(episodes[0].tokens_T[:5])] * 3, max_new_tokens=5, eos_token_id=tok.eos_token_id,
                 pad_token_id=tok.pad_token_id, row_keys=[1, 2, 3])
    assert len(out) == 3
