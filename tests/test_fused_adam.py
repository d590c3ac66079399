"""``agent.hparams.fused_adam``: every optimizer of the agent on torch's fused Adam kernel (the real model's
learner), left out of the configuration's dump at its default so that the tiny models' hashes and bits stay.

The fused kernel is checked against the default one (the reference): the same step up to float rounding, on
the actor and on SAO's critic, after one update on the same episodes.
"""

from __future__ import annotations

import copy

import pytest
import torch
from test_spine_agents import make_episodes

from sao_env.agents.grpo import GRPOConfig
from sao_env.agents.sao import SAOAgent, SAOConfig
from sao_env.envs.text_env import load_scenario


@pytest.fixture(scope="module")
def scenario():
    return load_scenario("style-drift")


def _agent(policy, tok, fused: bool) -> SAOAgent:
    return SAOAgent(copy.deepcopy(policy), tok, SAOConfig(lr=1e-3, critic_lr=1e-3, critic_warmup_updates=0,
                                                          episodes_per_update=4, fused_adam=fused))


def test_fused_adam_takes_the_default_kernels_step(tiny, scenario):
    policy, tok = tiny
    episodes = make_episodes(policy, tok, scenario, [1.0, 0.0, 1.0, 0.0], seed=5)
    default, fused = _agent(policy, tok, False), _agent(policy, tok, True)
    assert [o.defaults["fused"] for o in (fused.actor_optimizer, fused.critic.optimizer)] == [True, True]
    assert not default.actor_optimizer.defaults["fused"] and not default.critic.optimizer.defaults["fused"]
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    default.update(episodes)
    fused.update(episodes)
    moved = 0
    for key, start in before.items():
        a, b = default.policy.state_dict()[key], fused.policy.state_dict()[key]
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)
        moved += int(not torch.equal(a, start))
    assert moved > 0
    for a, b in zip(default.critic.params, fused.critic.params):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_fused_adam_is_left_out_of_the_dump_at_its_default():
    assert "fused_adam" not in GRPOConfig().model_dump()
    assert GRPOConfig(fused_adam=True).model_dump()["fused_adam"] is True
