"""The ablation knobs (issue 20): one critic pipeline for SAO and VAPO, segment-level DIS, a
trainable critic attention, a fixed lambda, value pretraining, and the ablation grid's rows."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import yaml

from sao_env.agents.critic import ValueModel
from sao_env.agents.sao import SAOAgent, SAOConfig
from sao_env.agents.segment_dis import SEGMENT_LOSSES, policy_losses, segment_dis_loss, segment_ids
from sao_env.agents.value_pretrain import pretrain_episodes, pretrain_value
from sao_env.agents.vapo import VAPOAgent, VAPOConfig
from sao_env.algos import POLICY_LOSSES, adaptive_lambda, dis_policy_loss, gae
from sao_env.errors import UserError
from sao_env.experiment import build_agent_config, expand_config, resolve_config
from sao_env.policy.generate import sequence_logprobs
from sao_env.policy.warmstart import load_warm_started
from sao_env.scenario import Scenario
from sao_env.types import Episode

GRID = Path(__file__).resolve().parents[1] / "leaderboards" / "ablations" / "grid.yaml"


# -- one critic pipeline: VAPO - SAO is the loss alone --------------------------------------------

# Rows of the hand-built batch: (prompt tokens, [(action tokens, observation tokens), ...], reward).
# Row 1 is a two-turn episode: 2 actions, a 2-token observation, 1 action.
ROWS = [(4, [(2, 0)], 1.0), (3, [(2, 2), (1, 0)], 0.0), (5, [(3, 0)], 0.5)]


def hand_batch(policy, tok) -> list[Episode]:
    """Episodes built token by token (ids 10, 11, ...), rollout log-probs those of ``policy``."""
    episodes, next_id = [], 10
    for g, (prompt, turns, reward) in enumerate(ROWS):
        tokens, mask = list(range(next_id, next_id + prompt)), [False] * prompt
        next_id += prompt
        for actions, observation in turns:
            tokens += range(next_id, next_id + actions + observation)
            mask += [True] * actions + [False] * observation
            next_id += actions + observation
        ids = torch.tensor([tokens])
        logp, _ = sequence_logprobs(policy, ids, torch.ones_like(ids))
        logp_T = tuple(float(x) if m else 0.0 for x, m in zip(logp[0].tolist(), mask))
        episodes.append(Episode(task=None, tokens_T=tuple(tokens), action_mask_T=tuple(mask), rollout_logp_T=logp_T,
                                version_T=tuple(0 if m else -1 for m in mask), reward=reward, response="",
                                group_id=g, phase="p", sim_start=0.0, sim_end=1.0))
    return episodes


def constant_critic(agent, b: float) -> None:
    """Head weight 0, bias b: V = b at every position t >= 1 (0 at t = 0, never an action here)."""
    with torch.no_grad():
        agent.critic.model.head.weight.zero_()
        agent.critic.model.head.bias.fill_(b)


def record_loss(agent) -> list:
    """Wrap the agent's policy loss so every call records (loss function, advantages)."""
    calls, inner = [], agent.policy_loss

    def recorder(logp, ref_logp, advantages, mask, **kw):
        calls.append((inner, advantages.detach().clone()))
        return inner(logp, ref_logp, advantages, mask, **kw)

    agent.policy_loss = recorder
    return calls


def on_actions(x_BT, episodes) -> list[list[float]]:
    return [[v for v, m in zip(row.tolist(), e.action_mask_T) if m] for row, e in zip(x_BT, episodes)]


COMMON = dict(critic_warmup_updates=0, episodes_per_update=3, lr=1e-3, critic_lr=1e-2)


def test_vapo_and_sao_take_the_same_advantages_from_the_same_critic(tiny):
    policy, tok = tiny
    episodes = hand_batch(policy, tok)
    sao = SAOAgent(copy.deepcopy(policy), tok, SAOConfig(**COMMON))
    vapo = VAPOAgent(copy.deepcopy(policy), tok, VAPOConfig(**COMMON))
    for agent in (sao, vapo):
        constant_critic(agent, 0.25)
    vapo.critic.model.load_state_dict(sao.critic.model.state_dict())
    calls = {name: record_loss(agent) for name, agent in (("sao", sao), ("vapo", vapo))}
    m_sao, m_vapo = sao.update(episodes), vapo.update(episodes)

    (fn_sao, adv_sao), = calls["sao"]
    (fn_vapo, adv_vapo), = calls["vapo"]
    assert torch.equal(adv_sao, adv_vapo)
    # V = b = 0.25 before the fit; outcome reward r on the last action; gamma = 1, lambda = 1 - 1/(1.5 l):
    # row 0, l=2, lambda=2/3: delta = (0, 1 - 0.25) -> A = (2/3 * 0.75, 0.75) = (0.5, 0.75)
    # row 1, l=3 over two turns, lambda=7/9: the observation is skipped, delta = (0, 0, -0.25)
    #   -> A = (-0.25 * 49/81, -0.25 * 7/9, -0.25)
    # row 2, l=3, r=0.5: A = (0.25 * 49/81, 0.25 * 7/9, 0.25)
    expected = [[0.5, 0.75], [-0.25 * 49 / 81, -0.25 * 7 / 9, -0.25], [0.25 * 49 / 81, 0.25 * 7 / 9, 0.25]]
    for got, want in zip(on_actions(adv_sao, episodes), expected):
        assert got == pytest.approx(want, abs=1e-6)
    # ... and they differ only in the loss: DIS against PPO clip, same critic afterwards.
    assert fn_sao is POLICY_LOSSES["dis"] and fn_vapo is POLICY_LOSSES["ppo_clip"]
    assert all(torch.equal(a, b) for a, b in zip(sao.critic.model.state_dict().values(),
                                                 vapo.critic.model.state_dict().values()))
    assert {k: v for k, v in m_sao.items() if k.startswith("critic/")} == \
           {k: v for k, v in m_vapo.items() if k.startswith("critic/")}
    assert "actor/dis_masked" in m_sao and "actor/pg_clipfrac" in m_vapo


def test_after_fit_takes_the_values_after_the_critic_steps(tiny):
    policy, tok = tiny
    episodes = hand_batch(policy, tok)
    vapo = VAPOAgent(copy.deepcopy(policy), tok, VAPOConfig(**COMMON, advantage_values="after_fit"))
    constant_critic(vapo, 0.25)
    (calls) = record_loss(vapo)
    vapo.update(episodes)
    batch = vapo.batch(episodes)
    after = vapo.critic.values(batch)  # the actor step leaves the critic alone
    assert not torch.allclose(after[batch.mask_BT], torch.full_like(after[batch.mask_BT], 0.25))
    lam = adaptive_lambda(batch.num_actions_B, 1.5)
    reference, _ = gae(batch.rewards_BT, after, batch.mask_BT, gamma=1.0, lam=lam)
    assert torch.allclose(calls[0][1], reference, atol=1e-7)
    before, _ = gae(batch.rewards_BT, torch.full_like(after, 0.25), batch.mask_BT, gamma=1.0, lam=lam)
    assert not torch.allclose(calls[0][1][batch.mask_BT], before[batch.mask_BT], atol=1e-4)


def test_fixed_lambda_replaces_the_adaptive_one(tiny):
    policy, tok = tiny
    episodes = hand_batch(policy, tok)
    sao = SAOAgent(policy, tok, SAOConfig(**COMMON, adaptive_lambda=False, lam=0.95))
    constant_critic(sao, 0.25)
    calls = record_loss(sao)
    sao.update(episodes)
    # lambda = 0.95 for every row: row 0 -> (0.95 * 0.75, 0.75); row 1 -> -0.25 * (0.95^2, 0.95, 1)
    got = on_actions(calls[0][1], episodes)
    assert got[0] == pytest.approx([0.7125, 0.75], abs=1e-6)
    assert got[1] == pytest.approx([-0.25 * 0.9025, -0.2375, -0.25], abs=1e-6)


@pytest.mark.parametrize("length", [2, 13, 14, 24, 80])
def test_adaptive_lambda_against_095_at_the_scenarios_lengths(length):
    # 1 - 1/(1.5 l) = 0.95 at l = 1/(1.5 * 0.05) = 13.33: below 0.95 up to 13 action tokens, above from 14.
    lam = float(adaptive_lambda(length, 1.5))
    assert lam == pytest.approx(1 - 1 / (1.5 * length))
    assert (lam < 0.95) == (length <= 13)


def test_loss_names_are_checked_and_segment_losses_do_not_shadow_the_registry():
    assert not set(SEGMENT_LOSSES) & set(POLICY_LOSSES)
    assert set(policy_losses()) == set(POLICY_LOSSES) | set(SEGMENT_LOSSES)
    with pytest.raises(UserError, match="unknown loss 'tis_nope'"):
        resolve_config("style-drift", "sao", overrides=["agent.hparams.loss=tis_nope"])
    # The old names of SAO's band still work.
    assert SAOConfig(dis_eps_low=0.25, dis_eps_high=4.0).eps_low == 0.25


# -- critic attention trainable ---------------------------------------------------------------------


def test_critic_attention_trainable_trains_every_weight(tiny):
    policy, tok = tiny
    agent = SAOAgent(policy, tok, SAOConfig(**COMMON, critic_freeze_attention=False))
    critic = agent.critic.model
    assert critic.frozen_modules == []
    assert all(p.requires_grad for p in critic.parameters())
    assert sum(p.numel() for p in agent.critic.params) == sum(p.numel() for p in critic.parameters())
    before = {k: v.clone() for k, v in critic.state_dict().items()}
    agent.update(hand_batch(policy, tok))
    moved = {k for k, v in critic.state_dict().items() if not torch.equal(before[k], v)}
    attention = {k for k in before if ".self_attn." in k and k.endswith("weight")}
    assert attention and attention <= moved
    # A pattern that matches nothing is no error when nothing is frozen, and a contradiction in a config.
    assert ValueModel(policy, frozen_pattern=r"^nothing$", freeze_attention=False).frozen_modules == []
    with pytest.raises(UserError, match="critic_freeze_attention"):
        resolve_config("style-drift", "sao", overrides=["agent.hparams.critic_freeze_attention=false",
                                                        "agent.hparams.critic_frozen_pattern=attn"])


# -- segment-level DIS ------------------------------------------------------------------------------


def test_segment_ids_sequence_and_step():
    mask = torch.tensor([[0, 1, 1, 0, 1, 0], [0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    assert segment_ids(mask, level="step").tolist() == [[-1, 0, 0, -1, 1, -1], [-1, -1, 2, 2, 2, -1], [-1] * 6]
    assert segment_ids(mask, level="sequence").tolist() == [[-1, 0, 0, -1, 0, -1], [-1, -1, 1, 1, 1, -1], [-1] * 6]


def test_sequence_dis_hand_case():
    # One row, two action tokens with ratios 0.5 and 2: token-level DIS (0.3/5.0) masks the 0.5
    # token (0.5 <= 0.7); the sequence ratio is exp((ln 0.5 + ln 2)/2) = 1, so both are kept, w = 1.
    rollout = torch.log(torch.tensor([[0.4, 0.2]], dtype=torch.float64))
    logp = (rollout + torch.log(torch.tensor([[0.5, 2.0]], dtype=torch.float64))).requires_grad_()
    adv = torch.tensor([[1.0, -2.0]], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, metrics = segment_dis_loss(logp, rollout, adv, mask, eps_low=0.3, eps_high=5.0, level="sequence")
    # loss = -(1 * 1 * ln 0.2 + 1 * (-2) * ln 0.4) / 2
    assert loss.item() == pytest.approx(-(math.log(0.2) - 2 * math.log(0.4)) / 2, rel=1e-12)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-0.5, 1.0])  # -w A / 2 per token
    assert metrics["dis_masked"] == 0.0 and metrics["ratio_mean"] == pytest.approx(1.0)
    _, token = dis_policy_loss(logp.detach(), rollout, adv, mask, eps_low=0.3, eps_high=5.0)
    assert token["dis_masked_low"] == 0.5


def test_sequence_dis_band_edge_is_masked():
    # A segment ratio exactly at 1 + eps_high is out of the strict band: every token of it gets w = 0.
    log_ratio = torch.tensor([[0.3, 0.5, 0.0]])
    mask = torch.tensor([[True, True, False]])
    _, wide = segment_dis_loss(log_ratio, torch.zeros(1, 3), torch.ones(1, 3), mask, eps_low=0.3, eps_high=9.0,
                               level="sequence")
    r32 = wide["ratio_max"]  # exp(0.4) in float32, in [1, 2]: r32 - 1 + 1 == r32 exactly
    assert r32 == pytest.approx(math.exp(0.4), rel=1e-6)
    loss, metrics = segment_dis_loss(log_ratio, torch.zeros(1, 3), torch.ones(1, 3), mask,
                                     eps_low=0.3, eps_high=r32 - 1, level="sequence")
    assert loss.item() == 0.0 and metrics["dis_masked_high"] == 1.0 and metrics["segments_masked"] == 1.0
    _, inside = segment_dis_loss(log_ratio, torch.zeros(1, 3), torch.ones(1, 3), mask,
                                 eps_low=0.3, eps_high=r32 - 1 + 1e-6, level="sequence")
    assert inside["dis_masked"] == 0.0 and inside["ratio_max"] == r32


def test_segment_dis_without_action_tokens_is_zero_and_finite():
    logp = torch.full((2, 3), float("nan")).requires_grad_()
    loss, metrics = segment_dis_loss(logp, torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.bool),
                                     eps_low=0.3, eps_high=5.0, level="step")
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logp.grad, torch.zeros(2, 3))
    assert metrics["segments_masked"] == 0.0 and metrics["dis_masked"] == 0.0


def _loop_segment_loss(logp, rollout, adv, mask, eps_low, eps_high, level):
    """Reference: python loops over rows and segments, token-mean aggregation."""
    total, count = 0.0, 0
    for b in range(mask.shape[0]):
        segments, current, prev = [], [], False
        for t in range(mask.shape[1]):
            if mask[b, t]:
                if not prev and level == "step" and current:
                    segments.append(current)
                    current = []
                current.append(t)
            prev = bool(mask[b, t])
        if current:
            segments.append(current)
        for seg in segments:
            s = math.exp(sum(float(logp[b, t] - rollout[b, t]) for t in seg) / len(seg))
            w = s if 1 - eps_low < s < 1 + eps_high else 0.0
            total += sum(-w * float(adv[b, t]) * float(logp[b, t]) for t in seg)
            count += len(seg)
    return total / count


@pytest.mark.parametrize("level", ["sequence", "step"])
def test_segment_dis_matches_a_loop_and_reduces_to_token_dis(level):
    g = torch.Generator().manual_seed(0)
    B, T = 4, 9
    mask = torch.rand(B, T, generator=g) > 0.35
    rollout = -torch.rand(B, T, generator=g) * 3
    logp = rollout + torch.randn(B, T, generator=g) * 0.6
    adv = torch.randn(B, T, generator=g)
    loss, _ = segment_dis_loss(logp, rollout, adv, mask, eps_low=0.3, eps_high=0.5, level=level)
    want = _loop_segment_loss(logp.double(), rollout.double(), adv.double(), mask, 0.3, 0.5, level)
    assert loss.item() == pytest.approx(want, rel=1e-5, abs=1e-7)
    # Invariance: when every token of a row has the same ratio, the segment ratio is that ratio and
    # segment-level DIS is token-level DIS.
    same = rollout + torch.randn(B, 1, generator=g) * 0.3
    seg_loss, _ = segment_dis_loss(same, rollout, adv, mask, eps_low=0.3, eps_high=0.5, level=level)
    token_loss, _ = dis_policy_loss(same, rollout, adv, mask, eps_low=0.3, eps_high=0.5)
    assert seg_loss.item() == pytest.approx(token_loss.item(), rel=1e-5)


def test_sao_runs_with_a_segment_loss(tiny):
    policy, tok = tiny
    sao = SAOAgent(policy, tok, SAOConfig(**COMMON, loss="dis_step"))
    metrics = sao.update(hand_batch(policy, tok))
    assert sao.version == 1 and "actor/segments_masked" in metrics
    assert abs(metrics["actor/ratio_max"] - 1.0) < 1e-4  # fresh episodes: every ratio is 1


# -- value pretraining ------------------------------------------------------------------------------


def value_loss_on(agent, episodes) -> float:
    batch = agent.batch(episodes)
    _, returns = gae(batch.rewards_BT, torch.zeros_like(batch.rewards_BT), batch.mask_BT, gamma=1.0, lam=1.0)
    values = agent.critic.values(batch)
    m = batch.mask_BT
    return float((0.5 * (values[m] - returns[m]) ** 2).mean())


@pytest.fixture(scope="module")
def warm(shrunk_config):
    """The session's shrunken style-drift (conftest.SHRINK) and its shared warm start (~15 s to train)."""
    torch.set_num_threads(1)
    config = shrunk_config("sao")
    scenario = Scenario(config.env)
    policy, tok, _ = load_warm_started(config.agent.model, scenario, show_progress=False)
    return policy, tok, scenario, config


def test_value_pretraining_lowers_the_held_out_value_loss_and_is_deterministic(warm):
    policy, tok, scenario, _ = warm
    config = SAOConfig(critic_lr=1e-3, episodes_per_update=8)
    agents = [SAOAgent(copy.deepcopy(policy), tok, config) for _ in range(3)]
    held_out = pretrain_episodes(agents[0], scenario, episodes=32, seed=99)
    rewards = [e.reward for e in held_out]
    assert 0 < sum(rewards) < len(rewards)
    # Before: V = 0 on every token, the target is the episode's reward on each of its action tokens:
    # loss = 0.5 * sum_i n_i r_i^2 / sum_i n_i.
    n = [e.num_action_tokens for e in held_out]
    by_hand = 0.5 * sum(k * r * r for k, r in zip(n, rewards)) / sum(n)
    assert value_loss_on(agents[0], held_out) == pytest.approx(by_hand, rel=1e-6)

    actor_before = {k: v.clone() for k, v in agents[0].policy.state_dict().items()}
    figures = pretrain_value(agents[0], scenario, episodes=32, steps=24, seed=0)
    after = value_loss_on(agents[0], held_out)
    # Held out, 32 pretraining episodes do not generalise at this size: measured unpinned 0.0375 -> 0.0318, under
    # the pinned numerics 0.0372 -> 0.0374 (2 of 32 held-out episodes rewarded). Only the fit itself is asserted.
    assert figures["episodes"] == 32.0 and figures["value_loss_last"] < figures["value_loss_first"]
    assert all(torch.equal(actor_before[k], v) for k, v in agents[0].policy.state_dict().items())
    assert agents[0].version == 0 and agents[0].updates == 0

    pretrain_value(agents[1], scenario, episodes=32, steps=24, seed=0)
    pretrain_value(agents[2], scenario, episodes=32, steps=24, seed=1)
    same = [torch.equal(a, b) for a, b in zip(agents[0].critic.model.state_dict().values(),
                                               agents[1].critic.model.state_dict().values())]
    other = [torch.equal(a, b) for a, b in zip(agents[0].critic.model.state_dict().values(),
                                                agents[2].critic.model.state_dict().values())]
    assert all(same) and not all(other)
    assert value_loss_on(agents[1], held_out) == after


def test_value_pretraining_plays_first_phase_training_tasks_apart_from_the_run(warm):
    import numpy as np

    policy, tok, scenario, _ = warm
    agent = SAOAgent(policy, tok, SAOConfig())
    played = pretrain_episodes(agent, scenario, episodes=6, seed=0)
    first = scenario.spec.phases[0].name
    assert [e.phase for e in played] == [first] * 6
    assert all(e.version == 0 for e in played)
    run_rng = np.random.default_rng([0, 1])  # the sim runtime's task stream of seed 0
    run_tasks = [scenario.next_task(0.0, run_rng, index=i) for i in range(6)]
    assert [e.task.prompt for e in played] != [t.prompt for t in run_tasks]
    assert [e.task.id for e in played] == [e.task.id for e in pretrain_episodes(agent, scenario, episodes=6, seed=0)]


def test_build_agent_pretrains_only_when_asked(warm, shrunk_config):
    from sao_env.experiment import build_agent

    _, _, scenario, config = warm
    off = build_agent(config, scenario, show_progress=False)
    assert float(off.critic.model.head.weight.detach().abs().sum()) == 0.0  # untouched zero head
    on = build_agent(shrunk_config("sao", extra=["agent.hparams.value_pretrain_episodes=8",
                                                 "agent.hparams.value_pretrain_steps=2"]), scenario, show_progress=False)
    assert float(on.critic.model.head.weight.detach().abs().sum()) > 0.0 and on.version == 0
    assert all(torch.equal(a, b) for a, b in zip(off.policy.state_dict().values(), on.policy.state_dict().values()))


# -- the ablation grid ------------------------------------------------------------------------------


SAO_AS_MADE = GRID.parents[1] / "recipes" / "sao.yaml"
"""The SAO recipe the ablation board was made with (critic at the actor's lr), kept beside the maps."""


def grid_rows() -> list[dict]:
    """The grid's rows, a recipe path resolved beside the grid file as ``load_grid`` does."""
    rows = yaml.safe_load(GRID.read_text())["rows"]
    for row in rows:
        if row["agent"].endswith(".yaml"):
            row["agent"] = str(GRID.parent / row["agent"])
    return rows


def test_grid_labels_are_unique_and_cover_the_issue():
    spec = yaml.safe_load(GRID.read_text())
    labels = [r["label"] for r in spec["rows"]]
    assert len(labels) == len(set(labels))
    assert spec["baseline"] == "sao" and spec["rows"][0] == {"label": "sao", "agent": "../recipes/sao.yaml", "overrides": []}
    assert set(spec["scenarios"]) == {"style-drift", "tool-drift"} and len(spec["seeds"]) >= 10
    assert len(labels) == 15


@pytest.mark.parametrize("env", ["style-drift", "tool-drift"])
def test_every_grid_row_resolves_and_changes_only_what_it_says(env):
    sao = expand_config(resolve_config(env, str(SAO_AS_MADE)))["agent"]["hparams"]
    assert sao["critic_lr"] == sao["lr"] == 1e-4
    for row in grid_rows():
        config = resolve_config(env, row["agent"], 0, row["overrides"])
        hparams = build_agent_config(config.agent).model_dump(mode="json")
        if row["agent"] != str(SAO_AS_MADE):
            continue
        named = {key.removeprefix("agent.hparams."): yaml.safe_load(value)
                 for key, value in (o.split("=", 1) for o in row["overrides"])}
        assert {k for k in hparams if hparams[k] != sao[k]} <= set(named), row["label"]
        assert {k: hparams[k] for k in named} == named, row["label"]
