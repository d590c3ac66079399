"""The lean forward (sao_env.policy.lean) against transformers' own forward, the reference.

It must give the same logits for every input the harness feeds it (right-padded learner batches,
left-padded generation batches, cached decode steps), the same gradients, and step aside for any
configuration it does not reproduce.
"""

from __future__ import annotations

import pytest
import torch

from sao_env.agents.critic import ValueModel
from sao_env.policy.generate import sequence_logprobs
from sao_env.policy.lean import LeanDecoder, lean_decoder
from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer

ARCHITECTURES = ["tiny-qwen2", "tiny-llama"]


def _model(name: str, seed: int = 0):
    spec = ModelSpec(name=name, hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    tok = build_tokenizer(spec)
    model = build_policy(spec, tok, seed=seed).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():  # move off the initialisation (zero biases, unit norms)
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model, tok


def _ids(B: int, T: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 60, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_full_sequence_logits_match_transformers(name):
    model, _ = _model(name)
    ids = _ids(3, 19)
    lean = LeanDecoder(model)
    with torch.no_grad():
        reference = model(input_ids=ids).logits
        mine = lean.logits(lean.hidden(ids))
    torch.testing.assert_close(mine, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_left_padded_prefill_and_cached_decode_match_transformers(name):
    model, _ = _model(name, seed=1)
    ids = _ids(3, 11, seed=1)
    attention = torch.ones(3, 11, dtype=torch.long)
    attention[0, :4] = 0
    attention[2, :1] = 0
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    lean = LeanDecoder(model)
    cache = lean.new_cache(3, 16)
    with torch.no_grad():
        reference = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits
        mine = lean.logits(lean.hidden(ids, position_ids_BT=positions, key_valid_BS=attention.bool(), cache=cache))
        real = attention.bool()
        torch.testing.assert_close(mine[real], reference[real], atol=1e-5, rtol=1e-5)
        assert torch.isfinite(mine).all()  # padded queries see themselves, never an empty row
        for step in range(3):  # decode steps against a full recomputation by transformers
            nxt = _ids(3, 1, seed=10 + step)
            ids = torch.cat([ids, nxt], 1)
            attention = torch.cat([attention, torch.ones(3, 1, dtype=torch.long)], 1)
            positions = torch.cat([positions, positions[:, -1:] + 1], 1)
            reference = model(input_ids=ids, attention_mask=attention, position_ids=positions).logits[:, -1]
            mine = lean.logits(lean.hidden(nxt, position_ids_BT=positions[:, -1:], key_valid_BS=attention.bool(),
                                           cache=cache))[:, -1]
            torch.testing.assert_close(mine, reference, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_learner_pass_gives_transformers_log_probs_and_gradients(name):
    """sequence_logprobs (lean) against the same function through transformers: values and gradients."""
    model, _ = _model(name, seed=2)
    tokens = _ids(4, 13, seed=2)
    attention = torch.ones(4, 13, dtype=torch.long)
    attention[1, 9:] = 0  # right padding, as collate() builds it
    attention[3, 5:] = 0

    def run(lean_on: bool, monkey):
        monkey.setenv("SAO_ENV_LEAN", "1" if lean_on else "0")
        model.zero_grad()
        logp, entropy = sequence_logprobs(model, tokens, attention)
        (logp * attention).sum().backward()
        return logp.detach(), entropy.detach(), [p.grad.clone() for p in model.parameters()]

    with pytest.MonkeyPatch.context() as monkey:
        lean_logp, lean_ent, lean_grads = run(True, monkey)
        ref_logp, ref_ent, ref_grads = run(False, monkey)
    real = attention.bool()
    torch.testing.assert_close(lean_logp[real], ref_logp[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lean_ent[real], ref_ent[real], atol=1e-5, rtol=1e-5)
    for a, b in zip(lean_grads, ref_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_value_model_backbone_pass_matches_transformers(monkeypatch):
    model, _ = _model("tiny-qwen2", seed=3)
    critic = ValueModel(model)
    with torch.no_grad():
        critic.head.weight.normal_()
    tokens = _ids(2, 9, seed=3)
    attention = torch.ones(2, 9, dtype=torch.long)
    attention[0, 6:] = 0
    with torch.no_grad():
        lean = critic(tokens, attention)
        monkeypatch.setenv("SAO_ENV_LEAN", "0")
        reference = critic(tokens, attention)
    real = attention.bool()
    torch.testing.assert_close(lean[real], reference[real], atol=1e-5, rtol=1e-5)


def test_fused_weights_follow_parameter_updates():
    """Without gradient, q/k/v and gate/up run as fused matrices; an in-place update must reach them."""
    model, _ = _model("tiny-qwen2", seed=4)
    lean = LeanDecoder(model)
    ids = _ids(2, 7, seed=4)
    with torch.no_grad():
        before = lean.logits(lean.hidden(ids))
        model.model.layers[0].mlp.up_proj.weight.mul_(1.5)
        model.model.layers[1].self_attn.k_proj.bias.add_(0.3)
        after = lean.logits(lean.hidden(ids))
        reference = model(input_ids=ids).logits
    assert not torch.allclose(before, after)
    torch.testing.assert_close(after, reference, atol=1e-5, rtol=1e-5)


def test_unsupported_configurations_fall_back_to_transformers(monkeypatch):
    model, _ = _model("tiny-qwen2")
    assert lean_decoder(model) is not None
    monkeypatch.setenv("SAO_ENV_LEAN", "0")
    assert lean_decoder(model) is None
    monkeypatch.delenv("SAO_ENV_LEAN")
    other, _ = _model("tiny-llama")
    other.config.rope_parameters = {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}
    assert not LeanDecoder.supports(other)
    other.config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    other.config.hidden_act = "gelu"
    assert not LeanDecoder.supports(other)
    assert not LeanDecoder.supports(torch.nn.Linear(2, 2))
