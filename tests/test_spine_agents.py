"""The learner seam, on a tiny real model and episodes sampled from it (no runtime): the SAO
critic's frozen attention, the critic warm-up, non-finite rewards, GRPO's zero-advantage groups."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from sao_env.agents import ALGORITHMS
from sao_env.agents.critic import ValueModel
from sao_env.agents.grpo import GRPOAgent, GRPOConfig
from sao_env.agents.sao import SAOAgent, SAOConfig
from sao_env.algos import POLICY_LOSSES, gae
from sao_env.envs.text_env import load_scenario
from sao_env.policy.generate import sample
from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer
from sao_env.types import Episode


@pytest.fixture(scope="module")
def scenario():
    return load_scenario("style-drift")


def make_episodes(policy, tok, scenario, rewards, *, group_size=1, seed=0, version=0) -> list[Episode]:
    """Episodes sampled from ``policy`` (``len(rewards) // group_size`` prompts, ``group_size`` each),
    with the given rewards in order and the rollout log-probs recorded by ``sample``."""
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    episodes = []
    for g in range(len(rewards) // group_size):
        task = scenario.next_task(0.0, rng, index=g)
        prompt = tok(task.prompt, add_special_tokens=False)["input_ids"]
        samples = sample(policy, [prompt] * group_size, max_new_tokens=8, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, generator=generator)
        for i, s in enumerate(samples):
            n, a = len(prompt), len(s.token_ids)
            episodes.append(Episode(
                task=task, tokens_T=tuple(prompt) + s.token_ids, action_mask_T=(False,) * n + (True,) * a,
                rollout_logp_T=(0.0,) * n + s.logps, version_T=(-1,) * n + (version,) * a,
                reward=rewards[g * group_size + i], response=tok.decode(s.token_ids, skip_special_tokens=True),
                group_id=g, phase=task.metadata["phase"], sim_start=0.0, sim_end=1.0,
            ))
    return episodes


def snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def changed(before: dict[str, torch.Tensor], module: torch.nn.Module) -> set[str]:
    after = module.state_dict()
    return {k for k in before if not torch.equal(before[k], after[k])}


# -- SAO critic -----------------------------------------------------------------------------------


def test_sao_critic_attention_is_frozen_while_mlp_and_head_learn(tiny, scenario):
    policy, tok = tiny
    agent = SAOAgent(policy, tok, SAOConfig(critic_warmup_updates=0, lr=1e-3, critic_lr=1e-2, episodes_per_update=4))
    critic = agent.critic.model
    names = [n for n, _ in critic.named_parameters()]
    attention = {n for n in names if ".self_attn." in n}
    assert attention and {n for n, p in critic.named_parameters() if not p.requires_grad} == attention
    assert all(m.endswith("self_attn") for m in critic.frozen_modules)
    assert len(critic.frozen_modules) == policy.config.num_hidden_layers
    # Only trainable parameters reach the critic's optimizer.
    optimized = {id(p) for group in agent.critic.optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for n, p in critic.named_parameters() if n not in attention}

    critic_before, actor_before = snapshot(critic), snapshot(policy)
    for k in range(3):
        episodes = make_episodes(policy, tok, scenario, [1.0, 0.0, 1.0, 0.0], seed=k)
        metrics = agent.update(episodes)
        assert metrics["actor/warmup"] == 0.0
    moved = changed(critic_before, critic)
    assert not moved & attention  # bit-identical attention
    mlp = {n for n in names if ".mlp." in n}
    assert mlp and mlp <= moved  # every MLP weight changed
    assert {"head.weight", "head.bias"} <= moved
    # The actor's own attention is trained (only the critic's copy is frozen) ...
    assert any(".self_attn." in n for n in changed(actor_before, policy))
    # ... and the critic is a copy, not a view of the policy.
    assert all(p.data_ptr() != q.data_ptr() for p in critic.parameters() for q in policy.parameters())


def test_critic_warmup_leaves_the_actor_untouched(tiny, scenario):
    policy, tok = tiny
    N = 3
    agent = SAOAgent(policy, tok, SAOConfig(critic_warmup_updates=N, lr=1e-3, critic_lr=1e-2, episodes_per_update=2))
    actor_before, critic_before = snapshot(policy), snapshot(agent.critic.model)
    for k in range(N):
        metrics = agent.update(make_episodes(policy, tok, scenario, [1.0, 0.0], seed=k))
        assert metrics["actor/warmup"] == 1.0
        assert not any(key.startswith("actor/") and key != "actor/warmup" for key in metrics)
        assert agent.version == 0
        assert not changed(actor_before, policy)  # bit-identical
    assert changed(critic_before, agent.critic.model)  # the critic did train
    metrics = agent.update(make_episodes(policy, tok, scenario, [1.0, 0.0], seed=N))
    assert metrics["actor/warmup"] == 0.0
    assert agent.version == 1
    assert changed(actor_before, policy)
    # Fresh episodes from the current weights: every DIS ratio is 1 and nothing is masked.
    assert abs(metrics["actor/ratio_max"] - 1.0) < 1e-4 and metrics["actor/dis_masked"] == 0.0


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-llama"])
def test_value_model_default_pattern_finds_attention(name):
    spec = ModelSpec(name=name)
    tok = build_tokenizer(spec)
    model = ValueModel(build_policy(spec, tok))
    assert len(model.frozen_modules) == spec.num_layers


def test_value_model_raises_when_nothing_matches(tiny):
    policy, tok = tiny
    with pytest.raises(ValueError, match="critic_frozen_pattern"):
        ValueModel(policy, frozen_pattern=r"(^|\.)no_such_module$")
    with pytest.raises(ValueError):
        SAOAgent(policy, tok, SAOConfig(critic_frozen_pattern=r"^cross_attention$"))


def test_value_model_starts_at_zero(tiny, scenario):
    policy, tok = tiny
    agent = SAOAgent(policy, tok, SAOConfig())
    batch = agent.batch(make_episodes(policy, tok, scenario, [1.0, 0.0]))
    assert torch.equal(agent.critic.values(batch), torch.zeros_like(batch.rollout_logp_BT))


def test_critic_fit_takes_v_old_from_its_first_step_bit_for_bit(tiny, scenario):
    """fit() reads V_old from its first step's forward pass: the same bits as a separate no-grad pass
    before the fit, and the same weights after it as the two-pass procedure (values, then K steps)."""
    policy, tok = tiny
    agent = SAOAgent(policy, tok, SAOConfig())
    torch.nn.init.normal_(agent.critic.model.head.weight, std=0.5)  # values away from 0
    reference = copy.deepcopy(agent.critic)
    before = snapshot(agent.critic.model)
    batch = agent.batch(make_episodes(policy, tok, scenario, [1.0, 0.0, 1.0, 0.0], seed=3))

    _, old = agent.critic.fit(batch, steps=2)

    expected_old = reference.values(batch)
    _, returns = gae(batch.rewards_BT, expected_old, batch.mask_BT, gamma=1.0, lam=1.0)
    for _ in range(2):
        reference.step(batch, returns)
    assert expected_old.abs().sum() > 0
    assert torch.equal(old, expected_old)
    after, expected = agent.critic.model.state_dict(), reference.model.state_dict()
    assert all(torch.equal(after[k], expected[k]) for k in expected)
    assert "head.weight" in changed(before, agent.critic.model)


# -- non-finite rewards ---------------------------------------------------------------------------


def _agent(name, policy, tok, **extra):
    cls = ALGORITHMS[name]
    kwargs = {"lr": 1e-3}
    if "critic_warmup_updates" in cls.config_cls.model_fields:
        kwargs["critic_warmup_updates"] = 0
    if "episodes_per_update" in cls.config_cls.model_fields:
        kwargs["episodes_per_update"] = 4
    return cls(policy, tok, cls.config_cls(**(kwargs | extra)))


def _rewards(agent, values):
    """Rewards for one update: 4 episodes, in groups of the agent's group size."""
    G = agent.group_size
    n = max(4, G * agent.groups_per_update)
    return [values[i % len(values)] for i in range(n)], G


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_nan_reward_skips_the_update(algorithm, tiny, scenario):
    policy, tok = tiny
    agent = _agent(algorithm, policy, tok)
    critic = getattr(agent, "critic", None)
    actor_before = snapshot(policy)
    critic_before = snapshot(critic.model) if critic else None
    rewards, G = _rewards(agent, [1.0, float("nan"), 0.0, 1.0])
    metrics = agent.update(make_episodes(policy, tok, scenario, rewards, group_size=G))
    skipped = metrics.get("actor/skipped_nonfinite", 0.0) + metrics.get("critic/skipped_nonfinite", 0.0)
    assert skipped >= 1
    assert metrics["actor/skipped_nonfinite"] == 1.0
    if critic is not None:
        assert metrics["critic/skipped_nonfinite"] >= 1.0
        assert not changed(critic_before, critic.model)
    assert agent.version == 0
    assert not changed(actor_before, policy)
    assert all(torch.isfinite(p).all() for p in policy.parameters())
    # The optimizer did not take a step: its state is still empty.
    assert not agent.actor_optimizer.state


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_learning_resumes_after_a_nan_reward(algorithm, tiny, scenario):
    # A single bad reward must cost one update, not poison the agent's running statistics.
    policy, tok = tiny
    agent = _agent(algorithm, policy, tok)
    rewards, G = _rewards(agent, [1.0, float("nan"), 0.0, 1.0])
    agent.update(make_episodes(policy, tok, scenario, rewards, group_size=G, seed=0))
    before = snapshot(policy)
    rewards, G = _rewards(agent, [1.0, 0.0, 0.0, 1.0])
    metrics = agent.update(make_episodes(policy, tok, scenario, rewards, group_size=G, seed=1))
    assert math.isfinite(metrics["actor/loss"])
    assert agent.version == 1
    assert changed(before, policy)


def test_learning_resumes_after_a_nan_reward_with_reward_norm(tiny, scenario):
    policy, tok = tiny
    agent = _agent("sao", policy, tok, reward_norm=True)
    agent.update(make_episodes(policy, tok, scenario, [1.0, float("nan"), 0.0, 1.0], seed=0))
    assert agent.version == 0
    metrics = agent.update(make_episodes(policy, tok, scenario, [1.0, 0.0, 0.0, 1.0], seed=1))
    assert math.isfinite(metrics["actor/loss"]) and agent.version == 1


# -- GRPO -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", sorted(POLICY_LOSSES))
def test_grpo_equal_rewards_in_every_group_give_zero_advantage(loss, tiny, scenario):
    policy, tok = tiny
    eps = {} if loss == "ppo_clip" else {"eps_low": 0.3, "eps_high": 5.0}
    agent = GRPOAgent(policy, tok, GRPOConfig(group_size=4, groups_per_update=2, lr=1e-2, loss=loss, **eps))
    before = snapshot(policy)
    # group 0: all solved, group 1: all failed -> A = 0 everywhere
    episodes = make_episodes(policy, tok, scenario, [1.0] * 4 + [0.0] * 4, group_size=4)
    metrics = agent.update(episodes)
    assert metrics["actor/advantage_abs_mean"] == 0.0
    assert metrics["actor/loss"] == 0.0
    assert metrics["actor/grad_norm"] == 0.0
    assert not changed(before, policy)
    # Control: the same prompts with mixed rewards do move the policy.
    mixed = make_episodes(policy, tok, scenario, [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0], group_size=4)
    metrics = agent.update(mixed)
    assert metrics["actor/advantage_abs_mean"] > 0 and metrics["actor/grad_norm"] > 0
    assert changed(before, policy)


def test_grpo_fresh_groups_are_on_policy(tiny, scenario):
    policy, tok = tiny
    agent = GRPOAgent(policy, tok, GRPOConfig(group_size=4, groups_per_update=2))
    metrics = agent.update(make_episodes(policy, tok, scenario, [1.0, 0.0, 0.0, 1.0] * 2, group_size=4))
    assert abs(metrics["actor/ratio_mean"] - 1.0) < 1e-5
    assert metrics["actor/pg_clipfrac"] == 0.0
    assert metrics["actor/approx_kl"] < 1e-9


def test_dr_grpo_normalises_by_the_episode_horizon_not_the_padded_width(tiny, scenario, monkeypatch):
    """seq_mean_token_sum_norm divides the summed token losses by B x (the most action tokens an
    episode can have, 24 here), whatever the batch's padded width (prompt tokens included)."""
    policy, tok = tiny
    episodes = make_episodes(policy, tok, scenario, [1.0, 0.0, 0.0, 1.0], group_size=2)
    first = episodes[0]  # a shorter first answer: equal lengths would sum the centred advantages to 0
    episodes[0] = Episode(**{**first.__dict__, **{k: getattr(first, k)[:-3] for k in
                                                 ("tokens_T", "action_mask_T", "rollout_logp_T", "version_T")}})
    import sao_env.algos.losses as losses

    seen = []
    original = losses.agg_loss
    monkeypatch.setattr(losses, "agg_loss", lambda *a, **k: seen.append((a[2], k.get("horizon"))) or original(*a, **k))

    def loss_of(agg):
        config = GRPOConfig(group_size=2, groups_per_update=2, agg=agg, normalize_std=False)
        agent = GRPOAgent(build_policy(ModelSpec(name="tiny-qwen2"), tok, seed=0), tok, config, action_horizon=24)
        return agent.update(episodes)["actor/loss"]

    width = max(len(e.tokens_T) for e in episodes)
    assert width != 24
    # Every row has actions, so seq_mean_token_sum = total / B and the normalised loss = total / (B * 24).
    assert loss_of("seq_mean_token_sum_norm") * 24 == pytest.approx(loss_of("seq_mean_token_sum"), rel=1e-5, abs=1e-7)
    assert ("seq_mean_token_sum_norm", 24) in seen and abs(loss_of("seq_mean_token_sum")) > 1e-4
