"""Critic-free single-rollout baselines.

running_mean (the SAO paper's online baseline): A_i = r_i - mean of the last 128 rewards seen,
  on every action token of episode i, optimised with the DIS loss (so only the baseline differs
  from SAO).
reinforce: A_i = r_i (no baseline), plain policy gradient -A*logp; the floor every method must beat.
"""

from __future__ import annotations

import math

from sao_env.agents.base import Agent, resolve_band
from sao_env.agents.configs import ReinforceConfig, RunningMeanConfig
from sao_env.algos import broadcast_sequence_advantages, dis_policy_loss, policy_gradient_loss, running_mean_advantages
from sao_env.types import Episode


class RunningMeanAgent(Agent):
    name = "running_mean"
    config_cls = RunningMeanConfig
    config: RunningMeanConfig

    def __init__(self, policy, tokenizer, config: RunningMeanConfig, *, dis_band=(0.3, 5.0), action_horizon=None):
        super().__init__(policy, tokenizer, config, dis_band=dis_band, action_horizon=action_horizon)
        self.groups_per_update = config.episodes_per_update
        self.history: list[float] = []
        self.eps_low, self.eps_high = resolve_band(config.dis_eps_low, config.dis_eps_high, dis_band)

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        batch = self.batch(episodes)
        adv_B, history = running_mean_advantages(batch.rewards_B, self.history, window=self.config.window)
        self.history = [r for r in history if math.isfinite(r)]  # a NaN reward skips its own update only
        advantages = broadcast_sequence_advantages(adv_B, batch.mask_BT)

        def loss_fn(logp):
            return dis_policy_loss(logp, batch.rollout_logp_BT, advantages, batch.mask_BT,
                                   eps_low=self.eps_low, eps_high=self.eps_high, agg=self.config.agg,
                                   horizon=self.action_horizon)

        self.updates += 1
        return self.actor_step(batch, loss_fn) | {"actor/baseline": sum(self.history) / max(len(self.history), 1)}


class ReinforceAgent(Agent):
    name = "reinforce"
    config_cls = ReinforceConfig
    config: ReinforceConfig

    def __init__(self, policy, tokenizer, config: ReinforceConfig, *, dis_band=(0.3, 5.0), action_horizon=None):
        super().__init__(policy, tokenizer, config, dis_band=dis_band, action_horizon=action_horizon)
        self.groups_per_update = config.episodes_per_update

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        batch = self.batch(episodes)
        advantages = broadcast_sequence_advantages(batch.rewards_B, batch.mask_BT)
        self.updates += 1
        return self.actor_step(batch, lambda logp: policy_gradient_loss(
            logp, advantages, batch.mask_BT, agg=self.config.agg, horizon=self.action_horizon))
