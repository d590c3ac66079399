"""VAPO and PPO: a critic and token-level GAE with the PPO clip loss (no DIS).

Per update (episodes as they complete, ``episodes_per_update`` at a time):
  1. R <- GAE(r, V_old; gamma, lambda_critic=1) + V_old; K critic steps (attention frozen, as SAO)
  2. A <- GAE(r, V_new; gamma, lambda)   VAPO (Yue et al. 2025): lambda = 1 - 1/(alpha*l)
                                          PPO  (Schulman et al. 2017): a fixed lambda
  3. actor step on the PPO clip loss (clip-higher optional) against the rollout log-probs.
This isolates what the DIS loss adds to SAO: same critic, same advantages, another loss.
"""

from __future__ import annotations

from pydantic import Field

from sao_env.agents.base import Agent, AgentConfig
from sao_env.agents.critic import Critic
from sao_env.algos import adaptive_lambda, gae, masked_whiten, ppo_clip_loss
from sao_env.types import Episode


class VAPOConfig(AgentConfig):
    critic_lr: float = Field(1e-4, gt=0)
    """Critic learning rate (Adam)."""
    critic_updates: int = Field(2, ge=1)
    """Critic steps per policy update."""
    critic_warmup_updates: int = Field(8, ge=0)
    """Learner updates during which only the critic trains (VAPO's value pretraining, online)."""
    critic_frozen_pattern: str | None = None
    """Regex over module names of attention blocks to freeze in the critic (None: the default)."""
    adaptive_lambda: bool = True
    """VAPO's length-adaptive lambda (True) or a fixed ``lam`` (PPO)."""
    alpha: float = Field(1.5, gt=0)
    """Length-adaptive lambda = 1 - 1/(alpha * l)."""
    lam: float = Field(0.95, ge=0, le=1)
    """Fixed GAE lambda when ``adaptive_lambda`` is off."""
    gamma: float = Field(1.0, ge=0, le=1)
    """Discount per action token."""
    eps_low: float = Field(0.2, gt=0, le=1)
    """PPO clip below 1."""
    eps_high: float = Field(0.28, gt=0)
    """PPO clip above 1 (clip-higher when > eps_low)."""
    episodes_per_update: int = Field(8, ge=1)
    """Episodes consumed per update."""
    whiten_advantages: bool = False
    """Whiten advantages over the batch's action tokens."""


class VAPOAgent(Agent):
    name = "vapo"
    config_cls = VAPOConfig
    config: VAPOConfig

    def __init__(self, policy, tokenizer, config: VAPOConfig, *, dis_band=(0.3, 5.0), action_horizon=None):
        super().__init__(policy, tokenizer, config, dis_band=dis_band, action_horizon=action_horizon)
        self.critic = Critic.for_agent(policy, config)
        self.groups_per_update = config.episodes_per_update

    @property
    def train_passes(self) -> int:
        return 1 + self.config.critic_updates

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        cfg = self.config
        batch = self.batch(episodes)
        mask = batch.mask_BT

        metrics = self.critic.fit(batch, steps=cfg.critic_updates, gamma=cfg.gamma)
        self.updates += 1
        if self.updates <= cfg.critic_warmup_updates:
            return metrics | {"actor/warmup": 1.0}

        lam = adaptive_lambda(batch.num_actions_B, cfg.alpha) if cfg.adaptive_lambda else cfg.lam
        advantages, _ = gae(batch.rewards_BT, self.critic.values(batch), mask, gamma=cfg.gamma, lam=lam)
        if cfg.whiten_advantages:
            advantages = masked_whiten(advantages, mask)

        def loss_fn(logp):
            return ppo_clip_loss(logp, batch.rollout_logp_BT, advantages, mask,
                                 eps_low=cfg.eps_low, eps_high=cfg.eps_high, agg=cfg.agg,
                                 horizon=self.action_horizon)

        return metrics | self.actor_step(batch, loss_fn) | {"actor/warmup": 0.0}
