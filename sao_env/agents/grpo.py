"""GRPO and its variants: a group of G rollouts per prompt replaces the critic.

Per update (B complete groups of G episodes):
  1. A_i <- (r_i - mean_group(r)) / (std_group(r) + eps)      Dr. GRPO: no division by the std
  2. every action token of episode i gets A_i
  3. for each epoch and minibatch: a step on the policy loss against the rollout log-probs:
       grpo      PPO clip with clip-higher (DAPO): eps_low=0.2, eps_high=0.28
       grpo_dis  SAO's DIS loss (strict double-sided band) with group advantages
       dr_grpo   PPO clip, mean-only centering, seq_mean_token_sum_norm aggregation
     or any other ``POLICY_LOSSES`` member by ``loss:`` (tis, mis_token, mis_seq, gspo, pg: the
     off-policy corrections, docs/metrics.md), each with the recipe's eps_low / eps_high
The variant is chosen by the recipe's settings (agents/grpo*.yaml), never by name in the code.
"""

from __future__ import annotations

import torch

from sao_env.agents.base import Agent, Batch, resolve_band
from sao_env.agents.configs import GRPOConfig
from sao_env.algos import POLICY_LOSSES, broadcast_sequence_advantages, group_advantages
from sao_env.types import Episode


class GRPOAgent(Agent):
    name = "grpo"
    config_cls = GRPOConfig
    config: GRPOConfig

    def __init__(self, policy, tokenizer, config: GRPOConfig, *, dis_band=(0.3, 5.0), action_horizon=None):
        super().__init__(policy, tokenizer, config, dis_band=dis_band, action_horizon=action_horizon)
        self.group_size, self.groups_per_update = config.group_size, config.groups_per_update
        self.eps_low, self.eps_high = resolve_band(config.eps_low, config.eps_high, dis_band)
        self.loss = POLICY_LOSSES[config.loss]

    @property
    def train_passes(self) -> int:
        return self.config.epochs

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        batch = self.batch(episodes)
        adv_B = group_advantages(batch.rewards_B, batch.group_ids_B, normalize_std=self.config.normalize_std)
        advantages = broadcast_sequence_advantages(adv_B, batch.mask_BT)

        metrics: dict[str, float] = {}
        for _ in range(self.config.epochs):
            for rows in torch.arange(len(episodes)).chunk(self.config.minibatches):
                mb = _select(batch, rows)

                def loss_fn(logp, mb=mb, adv=advantages[rows]):
                    return self.loss(logp, mb.rollout_logp_BT, adv, mb.mask_BT, eps_low=self.eps_low,
                                     eps_high=self.eps_high, dual_clip=self.config.dual_clip, agg=self.config.agg,
                                     horizon=self.action_horizon)

                metrics = self.actor_step(mb, loss_fn)
        self.updates += 1
        return metrics | {"actor/advantage_abs_mean": adv_B.abs().mean().item()}


def _select(batch: Batch, rows: torch.Tensor) -> Batch:
    return Batch(*(getattr(batch, f)[rows] for f in batch.__dataclass_fields__))
