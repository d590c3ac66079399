"""Rollout/trainer mismatch (``RuntimeSpec.rollout_mismatch``, ``sao_env.policy.mismatch``): the size of
each perturbation, the log-prob gap it makes on a fixed tiny model, and runs with it on that are
deterministic, while logit noise of size 0 leaves a run byte-identical to one without the knob."""

from __future__ import annotations

import copy
import json
import math

import pytest
import torch
from pydantic import ValidationError

from sao_env.errors import UserError
from sao_env.experiment import resolve_config, run_experiment
from sao_env.policy.generate import row_key, sample, sequence_logprobs
from sao_env.policy.mismatch import RolloutMismatch
from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer
from sao_env.runtime.spec import RuntimeSpec


@pytest.fixture(scope="module")
def tiny():
    torch.set_num_threads(1)
    spec = ModelSpec(name="tiny-qwen2")
    tok = build_tokenizer(spec)
    return build_policy(spec, tok, seed=0), tok


def deployed_copy(policy, mode, *, std=0.0, seed=0, version=0):
    copy_ = copy.deepcopy(policy).eval()
    RolloutMismatch(mode, seed=seed, noise_std=std).apply(copy_, policy, version)
    return copy_


def state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_none_is_the_exact_copy(tiny):
    policy, _ = tiny
    before = state(policy)
    out = deployed_copy(policy, "none")
    assert all(torch.equal(out.state_dict()[k], v) for k, v in before.items())


def test_bf16_weights_round_every_weight_to_bf16(tiny):
    policy, _ = tiny
    before = state(policy)
    out = deployed_copy(policy, "bf16_weights")
    moved = 0
    for (name, p), (_, q) in zip(out.named_parameters(), policy.named_parameters()):
        assert torch.equal(p, p.bfloat16().float()), name  # representable in bf16
        # round to nearest with an 8-bit significand: |error| <= 2^-8 |w| (unit roundoff of bf16)
        assert ((p - q).abs() <= 2.0**-8 * q.abs()).all(), name
        moved += int((p != q).sum())
    assert moved > 0.9 * sum(p.numel() for p in policy.parameters())  # random float32 weights almost all move
    assert all(torch.equal(policy.state_dict()[k], v) for k, v in before.items())  # the trained weights untouched


def test_logit_noise_has_the_documented_size_and_leaves_the_inputs_exact(tiny):
    policy, tok = tiny
    sigma = 0.3
    out = deployed_copy(policy, "logit_noise", std=sigma, seed=7, version=3)
    W, W2 = policy.get_output_embeddings().weight, out.get_output_embeddings().weight
    V, H = W.shape
    # The tied input embedding stays exact; the parameter list and state_dict keys are unchanged.
    assert torch.equal(out.get_input_embeddings().weight, policy.get_input_embeddings().weight)
    assert [n for n, _ in out.named_parameters()] == [n for n, _ in policy.named_parameters()]
    assert list(out.state_dict()) == list(policy.state_dict())
    # W' - W = (sigma / sqrt(H)) Z with Z the generator's draw for (seed 7, version 3), exactly.
    z = RolloutMismatch("logit_noise", seed=7, noise_std=sigma).noise(W.shape, 3)
    assert torch.equal(W2, W + (sigma / math.sqrt(H)) * z)
    assert abs(z.std().item() - 1) < 0.03 and abs(z.mean().item()) < 0.03  # V x H = 9,000+ standard normals
    # On real hidden states the logits move by sigma * rms(h) per entry: pooled over 20 versions' draws
    # (one draw has only V ~ 100 independent rows), the per-unit-rms(h) deltas have std sigma to ~2 %.
    ids = torch.tensor([tok("12+7=31 and 5+5=10", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        h = policy.model(input_ids=ids).last_hidden_state[0]  # (T, H), after the final norm
        unit = h / h.pow(2).mean(-1, keepdim=True).sqrt()
        mm = RolloutMismatch("logit_noise", seed=7, noise_std=sigma)
        delta = torch.stack([unit @ ((sigma / math.sqrt(H)) * mm.noise(W.shape, v)).T for v in range(20)])
        assert torch.allclose(unit @ (W2 - W).T, delta[3], atol=1e-5)  # version 3 is the copy's
    assert delta.std().item() == pytest.approx(sigma, rel=0.03)
    # A pure function of (seed, version): the same again, another version differs; sigma = 0 is exact.
    again = deployed_copy(policy, "logit_noise", std=sigma, seed=7, version=3)
    assert torch.equal(again.get_output_embeddings().weight, W2)
    assert not torch.equal(deployed_copy(policy, "logit_noise", std=sigma, seed=7, version=4)
                           .get_output_embeddings().weight, W2)
    assert torch.equal(deployed_copy(policy, "logit_noise", std=0.0).get_output_embeddings().weight, W)


def rollout_gap(policy, tok, deployed) -> float:
    """Mean |logp_rollout - logp_train| over 8 x 16 tokens sampled by ``deployed`` (fixed streams)."""
    prompt = tok("12+7=", add_special_tokens=False)["input_ids"]
    samples = sample(deployed, [prompt] * 8, max_new_tokens=16, eos_token_id=tok.eos_token_id,
                     pad_token_id=tok.pad_token_id, row_keys=[row_key(0, i) for i in range(8)])
    gaps = []
    for s in samples:
        tokens = torch.tensor([prompt + list(s.token_ids)])
        logp, _ = sequence_logprobs(policy, tokens, torch.ones_like(tokens))
        gaps.append((logp[0, len(prompt):] - torch.tensor(s.logps)).abs())
    return torch.cat(gaps).mean().item()


def test_measured_logp_gap_on_a_fixed_tiny_model(tiny):
    # Measured on the seed-0 tiny Qwen2 (random init, near-uniform logits), 128 sampled tokens:
    # none ~7e-8 (float rounding between the sampler's cached and the learner's full pass),
    # bf16 weights 5.94e-4, logit noise 0.1 -> 0.0762 and 0.3 -> 0.2526.
    policy, tok = tiny
    assert rollout_gap(policy, tok, deployed_copy(policy, "none")) < 1e-6
    assert rollout_gap(policy, tok, deployed_copy(policy, "bf16_weights")) == pytest.approx(5.944e-4, rel=0.02)
    assert rollout_gap(policy, tok, deployed_copy(policy, "logit_noise", std=0.1)) == pytest.approx(0.07620, rel=0.02)
    assert rollout_gap(policy, tok, deployed_copy(policy, "logit_noise", std=0.3)) == pytest.approx(0.2526, rel=0.02)


def test_mismatch_needs_the_sim_backend(shrunk_config):
    with pytest.raises(ValidationError, match="rollout_mismatch=bf16_weights needs backend=sim"):
        RuntimeSpec(backend="threads", rollout_mismatch="bf16_weights")
    with pytest.raises(UserError, match="needs backend=sim"):
        resolve_config("style-drift", "sao", 0, ["agent.runtime.backend=ray", "agent.runtime.rollout_mismatch=logit_noise"])
    with pytest.raises(ValueError, match="unknown rollout_mismatch"):
        RolloutMismatch("fp8", seed=0)
    assert RuntimeSpec().rollout_mismatch == "none"  # off by default


def first_actor_update(run_dir) -> dict:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in records if "actor/logp_gap" in r)


@pytest.mark.slow
def test_runs_with_mismatch_are_deterministic_and_zero_noise_changes_nothing(shrunk_run, shrunk_config, tmp_path):
    off, _ = shrunk_run("sao", 0)
    noisy = ("agent.runtime.rollout_mismatch=logit_noise", "agent.runtime.rollout_noise_std=0.3")
    first, second = tmp_path / "a", tmp_path / "b"
    run_experiment(shrunk_config("sao", 0, noisy), first, show_progress=False)
    run_experiment(shrunk_config("sao", 0, noisy), second, show_progress=False)
    for name in ("metrics.jsonl", "evals.jsonl", "episodes.jsonl"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert (first / "episodes.jsonl").read_bytes() != (off / "episodes.jsonl").read_bytes()
    # The first actor update trains on episodes of its own version: off, its ratios are 1 up to float
    # rounding; with the noise on they carry the rollout/trainer gap.
    assert first_actor_update(off)["async/staleness_max"] == first_actor_update(first)["async/staleness_max"] == 0
    assert first_actor_update(off)["actor/logp_gap"] < 1e-5 < 1e-2 < first_actor_update(first)["actor/logp_gap"]
    # Noise of size 0 goes through the whole hook (untied head, W + 0 * Z) and changes no byte.
    zero = tmp_path / "zero"
    run_experiment(shrunk_config("sao", 0, ("agent.runtime.rollout_mismatch=logit_noise",
                                            "agent.runtime.rollout_noise_std=0.0")), zero, show_progress=False)
    for name in ("metrics.jsonl", "evals.jsonl", "episodes.jsonl"):
        assert (zero / name).read_bytes() == (off / name).read_bytes(), name
