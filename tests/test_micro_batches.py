"""Token-budget micro-batches: the plan, and the accumulated gradient against the whole batch's.

For every policy loss a critic agent may name and every aggregation mode, an actor step over micro-batches
must give the whole-batch gradient (to float tolerance: only the summation order of the weight gradients
differs), and SAO's critic fit must give the same V_old and the same gradients at each of its K steps. The
optimizer's step is replaced by a recorder, so the weights never move and each gradient is compared as made.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sao_env.agents.base import Agent, AgentConfig, MicroBatch, plan_micro_batches
from sao_env.agents.sao import SAOAgent, SAOConfig
from sao_env.agents.grpo import GRPOAgent, GRPOConfig
from sao_env.agents.segment_dis import policy_losses
from sao_env.algos import AGG_MODES
from sao_env.policy.generate import sequence_logprobs
from sao_env.policy.model import ModelSpec, build_policy
from sao_env.policy.tokenizer import build_char_tokenizer
from sao_env.types import Episode, Task

LENGTHS = (31, 9, 24, 17, 40, 12)
"""Episode lengths of the test batch: uneven, so that micro-batches cut padding and sort rows."""
BUDGET = 64
"""Micro-batch budget in padded tokens: the batch (6 x 40) needs several micro-batches, one row of 40 alone."""


def test_plan_packs_rows_by_length_within_the_budget():
    lengths = [5, 30, 12, 30, 7, 100, 1]
    plan = plan_micro_batches(lengths, 60)
    rows = [r for mb in plan for r in mb.rows.tolist()]
    assert sorted(rows) == list(range(len(lengths)))  # every row once
    assert rows == sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))  # longest first
    for mb in plan:
        assert mb.width == max(lengths[r] for r in mb.rows.tolist())
        assert len(mb.rows) == 1 or len(mb.rows) * mb.width <= 60  # a row over the budget goes alone
    assert [mb.rows.tolist() for mb in plan] == [[5], [1, 3], [2, 4, 0, 6]]
    assert plan_micro_batches(lengths, None) is None
    assert plan_micro_batches(lengths, len(lengths) * 100) is None  # fits: the one-piece path
    x = torch.arange(12.0).view(3, 4)
    mb = MicroBatch(torch.tensor([2, 0]), 2)
    assert mb.take(x).tolist() == [[8.0, 9.0], [0.0, 1.0]]
    assert mb.embed(torch.zeros(3, 4), torch.ones(2, 2)).sum().item() == 4.0


def _policy():
    tok = build_char_tokenizer()
    spec = ModelSpec(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    return build_policy(spec, tok, seed=0), tok


def _episodes(policy, tok, *, seed: int = 0, group_size: int = 1) -> list[Episode]:
    """Random token streams of ``LENGTHS``: a prompt, an action, an observation, a second action (two turns),
    rewards in [0, 1], rollout log-probabilities = the policy's own plus noise (some ratios leave every band)."""
    rng = np.random.default_rng(seed)
    vocab = len(tok)
    episodes = []
    for i, n in enumerate(LENGTHS):
        tokens = rng.integers(4, vocab, size=n).tolist()
        p = max(2, n // 4)
        mask = [False] * p + [True] * ((n - p) // 2) + [False] * 2 + [True] * (n - p - (n - p) // 2 - 2)
        with torch.no_grad():
            logp, _ = sequence_logprobs(policy, torch.tensor([tokens]), torch.ones(1, n, dtype=torch.long))
        noisy = (logp[0] + torch.tensor(rng.normal(0, 0.4, size=n), dtype=torch.float32)).tolist()
        rollout = [lp if m else 0.0 for lp, m in zip(noisy, mask)]
        task = Task(id=f"t{i}", prompt="x", reference={}, grader="exact")
        episodes.append(Episode(task=task, tokens_T=tuple(tokens), action_mask_T=tuple(mask), rollout_logp_T=tuple(rollout),
                                version_T=tuple(0 if m else -1 for m in mask), reward=float(rng.random()), response="",
                                group_id=i // group_size, phase="p", sim_start=0.0, sim_end=1.0))
    return episodes


def _recording(optimizer, params, into: list):
    """Replace ``optimizer.step`` by a recorder of the parameters' gradients (the weights stay as they are)."""
    optimizer.step = lambda *a, **k: into.append([p.grad.detach().clone() if p.grad is not None else None
                                                  for p in params])


def _assert_same_grads(whole: list, micro: list, *, what: str):
    assert len(whole) == len(micro) and whole, what
    for gw, gm in zip(whole, micro):
        for a, b in zip(gw, gm):
            if a is None:
                assert b is None, what
                continue
            scale = a.abs().max().item() + 1e-12
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5 * scale), (what, (a - b).abs().max().item(), scale)


@pytest.fixture(scope="module")
def made():
    policy, tok = _policy()
    return policy, tok, _episodes(policy, tok)


def _actor_grads(made, loss: str, agg: str, budget: int | None):
    policy, tok, episodes = made
    agent = Agent(policy, tok, AgentConfig(agg=agg, grad_clip=None, micro_batch_tokens=budget), action_horizon=48)
    grads = []
    _recording(agent.actor_optimizer, agent.actor_params, grads)
    batch = agent.batch(episodes)
    advantages = torch.randn(batch.mask_BT.shape, generator=torch.Generator().manual_seed(2))

    def loss_fn(logp):
        return policy_losses()[loss](logp, batch.rollout_logp_BT, advantages, batch.mask_BT, eps_low=0.3, eps_high=0.5,
                                     agg=agg, horizon=agent.action_horizon)

    metrics = agent.actor_step(batch, loss_fn)
    return grads, metrics


@pytest.mark.parametrize("loss", sorted(policy_losses()))
@pytest.mark.parametrize("agg", AGG_MODES)
def test_accumulated_actor_gradient_equals_whole_batch(made, loss, agg):
    """Every loss x aggregation: the actor's gradient over micro-batches is the whole batch's, and so are the
    logged loss and metrics."""
    whole_grads, whole = _actor_grads(made, loss, agg, None)
    micro_grads, micro = _actor_grads(made, loss, agg, BUDGET)
    _assert_same_grads(whole_grads, micro_grads, what=f"actor {loss} {agg}")
    assert whole.keys() == micro.keys()
    for key, value in whole.items():
        assert micro[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def _sao_update(made, agg: str, budget: int | None):
    policy, tok, episodes = made
    config = SAOConfig(agg=agg, critic_warmup_updates=0, grad_clip=None, micro_batch_tokens=budget, critic_updates=2)
    agent = SAOAgent(policy, tok, config, action_horizon=48)
    actor, critic = [], []
    _recording(agent.actor_optimizer, agent.actor_params, actor)
    _recording(agent.critic.optimizer, agent.critic.params, critic)
    with torch.no_grad():  # a non-zero value head, so the critic's targets and advantages are not trivial
        agent.critic.model.head.weight.normal_(0, 0.1, generator=torch.Generator().manual_seed(1))
    metrics = agent.update(episodes)
    return actor, critic, metrics


@pytest.mark.parametrize("agg", AGG_MODES)
def test_sao_update_over_micro_batches_equals_whole_batch(made, agg):
    """SAO's whole update: V_old, the critic's gradient at each of its K steps, the advantages (through the
    actor's gradient) and every logged figure are the whole batch's."""
    whole_actor, whole_critic, whole = _sao_update(made, agg, None)
    micro_actor, micro_critic, micro = _sao_update(made, agg, BUDGET)
    _assert_same_grads(whole_critic, micro_critic, what=f"critic {agg}")
    _assert_same_grads(whole_actor, micro_actor, what=f"actor {agg}")
    assert whole.keys() == micro.keys()
    for key, value in whole.items():
        assert micro[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key


def test_grpo_minibatches_accumulate_within_each_minibatch():
    """GRPO's minibatches each take one step; micro-batches split a minibatch without changing its gradient."""
    def run(budget):
        policy, tok = _policy()
        agent = GRPOAgent(policy, tok, GRPOConfig(group_size=3, groups_per_update=2, minibatches=2, grad_clip=None,
                                                  micro_batch_tokens=budget), action_horizon=48)
        grads = []
        _recording(agent.actor_optimizer, agent.actor_params, grads)
        agent.update(_episodes(policy, tok, group_size=3))
        return grads

    _assert_same_grads(run(None), run(40), what="grpo")


def test_sao_critic_and_actor_share_one_plan(monkeypatch):
    """One plan per update: the critic's K passes and the actor's pass run over the same micro-batches."""
    policy, tok = _policy()
    agent = SAOAgent(policy, tok, SAOConfig(critic_warmup_updates=0, micro_batch_tokens=BUDGET, critic_updates=2),
                     action_horizon=48)
    critic_shapes, actor_shapes = [], []
    agent.critic.model.register_forward_pre_hook(lambda m, args: critic_shapes.append(tuple(args[0].shape)))
    import sao_env.agents.base as base

    real = base.sequence_logprobs

    def spy(model, tokens, attention):
        actor_shapes.append(tuple(tokens.shape))
        return real(model, tokens, attention)

    monkeypatch.setattr(base, "sequence_logprobs", spy)
    agent.update(_episodes(policy, tok))
    plan = plan_micro_batches(LENGTHS, BUDGET)
    expected = [(len(mb.rows), mb.width) for mb in plan]
    assert len(plan) > 1
    assert actor_shapes == expected
    assert critic_shapes == expected * 2  # K = 2 critic steps, each over the plan
