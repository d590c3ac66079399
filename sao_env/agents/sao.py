"""SAO: Single-rollout Asynchronous Optimization (arXiv 2607.07508).

Per update, on a batch of N single-rollout episodes (N distinct prompts) taken in completion order:
  1. V_old  <- critic(episodes)                                  values before the update
  2. A      <- GAE(r, V_old; gamma=1, lambda = 1 - 1/(alpha*l))  skip-observation, adaptive lambda
  3. R      <- GAE(r, V_old; gamma=1, lambda=1) + V_old          critic targets (= reward-to-go)
  4. repeat K=2 times: critic step on 0.5*(V - R)^2              attention of the critic frozen
  5. if still in the critic warm-up: stop here (actor untouched, version unchanged)
  6. actor step on the DIS loss -w*A*logp, w = r_t in the strict band (1-eps_low, 1+eps_high) else 0,
     r_t = pi_theta / pi_rollout against the log-probs recorded at rollout time. No KL, no entropy.

Advantages use the values from before the critic is fitted on the batch (step 2), as PPO
implementations do: a critic fitted on these very returns would explain part of each episode's
own outcome away (with lambda near 1 the advantage shrinks towards zero on the batch it was
fitted to). ``advantage_values: after_fit`` restores the other order for comparison.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sao_env.agents.base import Agent, AgentConfig, resolve_band
from sao_env.agents.critic import Critic
from sao_env.algos import adaptive_lambda, dis_policy_loss, gae, masked_mean, masked_whiten
from sao_env.types import Episode


class SAOConfig(AgentConfig):
    critic_lr: float = Field(1e-4, gt=0)
    """Critic learning rate (Adam)."""
    critic_updates: int = Field(2, ge=1)
    """K: critic steps per policy update."""
    critic_warmup_updates: int = Field(8, ge=0)
    """Learner updates during which only the critic trains (its cold start)."""
    critic_frozen_pattern: str | None = None
    """Regex over module names of attention blocks to freeze in the critic (None: the default)."""
    alpha: float = Field(1.5, gt=0)
    """Length-adaptive GAE lambda = 1 - 1/(alpha * l)."""
    episodes_per_update: int = Field(8, ge=1)
    """N: single-rollout episodes (distinct prompts) consumed per update, in completion order; the
    paper uses 128, 1 is the streaming extreme (agents/sao_streaming.yaml)."""
    dis_eps_low: float | None = Field(None, gt=0, le=1)
    """DIS band below 1 (None: the scenario's, 0.3 reasoning / 0.8 coding)."""
    dis_eps_high: float | None = Field(None, gt=0)
    """DIS band above 1 (None: the scenario's, 5.0 reasoning / 3.0 coding)."""
    whiten_advantages: bool = False
    """Whiten advantages over the batch's action tokens (off in the paper)."""
    advantage_values: Literal["before_fit", "after_fit"] = "before_fit"
    """Critic values the actor's advantages use: V_old, before the critic's K steps on this batch
    (default, as in PPO), or the values after them."""


class SAOAgent(Agent):
    name = "sao"
    config_cls = SAOConfig
    config: SAOConfig

    def __init__(self, policy, tokenizer, config: SAOConfig, *, dis_band=(0.3, 5.0), action_horizon=None):
        super().__init__(policy, tokenizer, config, dis_band=dis_band, action_horizon=action_horizon)
        self.critic = Critic.for_agent(policy, config)
        self.groups_per_update = config.episodes_per_update
        self.eps_low, self.eps_high = resolve_band(config.dis_eps_low, config.dis_eps_high, dis_band)

    @property
    def train_passes(self) -> int:
        return 1 + self.config.critic_updates

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        batch = self.batch(episodes)
        mask = batch.mask_BT

        values_old = self.critic.values(batch)
        metrics = self.critic.fit(batch, steps=self.config.critic_updates, gamma=1.0, values_BT=values_old)
        self.updates += 1
        if self.updates <= self.config.critic_warmup_updates:
            return metrics | {"actor/warmup": 1.0}

        lam = adaptive_lambda(batch.num_actions_B, self.config.alpha)
        values = values_old if self.config.advantage_values == "before_fit" else self.critic.values(batch)
        advantages, _ = gae(batch.rewards_BT, values, mask, gamma=1.0, lam=lam)
        if self.config.whiten_advantages:
            advantages = masked_whiten(advantages, mask)

        def loss_fn(logp):
            return dis_policy_loss(logp, batch.rollout_logp_BT, advantages, mask,
                                   eps_low=self.eps_low, eps_high=self.eps_high, agg=self.config.agg,
                                   horizon=self.action_horizon)

        metrics |= self.actor_step(batch, loss_fn)
        return metrics | {"actor/warmup": 0.0, "actor/advantage_mean": masked_mean(advantages, mask).item()}
