"""SAO: Single-rollout Asynchronous Optimization (arXiv 2607.07508).

Per update, on a batch of N single-rollout episodes (N distinct prompts) taken in completion order:
  1. V_old  <- critic(episodes)                                  values before the update
  2. A      <- GAE(r, V_old; gamma=1, lambda = 1 - 1/(alpha*l))  skip-observation, adaptive lambda
  3. R      <- GAE(r, V_old; gamma=1, lambda=1) + V_old          critic targets (= reward-to-go)
  4. repeat K=2 times: critic step on 0.5*(V - R)^2              attention of the critic frozen
     (logged: how well V_old predicts the returns, critic/explained_variance_prefit and kin, docs/metrics.md)
  5. if still in the critic warm-up: stop here (actor untouched, version unchanged)
  6. actor step on the DIS loss -w*A*logp, w = r_t in the strict band (1-eps_low, 1+eps_high) else 0,
     r_t = pi_theta / pi_rollout against the log-probs recorded at rollout time. No KL, no entropy.

Advantages use the values from before the critic is fitted on the batch (step 2), as PPO
implementations do: a critic fitted on these very returns would explain part of each episode's
own outcome away (with lambda near 1 the advantage shrinks towards zero on the batch it was
fitted to). ``advantage_values: after_fit`` restores the other order for comparison.

Steps 1-5 are the critic pipeline every critic recipe shares: VAPO and PPO (``vapo.py``) are this
agent with another ``loss`` from ``sao_env.algos.POLICY_LOSSES`` (and its band), so VAPO - SAO is
the loss alone. The ablation knobs (``critic_freeze_attention``, ``adaptive_lambda``/``lam``,
``value_pretrain_*``, the segment-level losses of ``segment_dis.py``) are off at their defaults.
"""

from __future__ import annotations

import torch

from sao_env.agents.base import Agent, Batch, resolve_band
from sao_env.agents.configs import SAOConfig
from sao_env.agents.critic import Critic
from sao_env.agents.segment_dis import policy_losses
from sao_env.algos import adaptive_lambda, gae, masked_mean, masked_whiten, value_diagnostics
from sao_env.types import Episode


class SAOAgent(Agent):
    name = "sao"
    config_cls = SAOConfig
    config: SAOConfig

    def __init__(self, policy, tokenizer, config: SAOConfig, *, dis_band=(0.3, 5.0), action_horizon=None):
        super().__init__(policy, tokenizer, config, dis_band=dis_band, action_horizon=action_horizon)
        self.critic = Critic.for_agent(policy, config)
        self.groups_per_update = config.episodes_per_update
        self.eps_low, self.eps_high = resolve_band(config.eps_low, config.eps_high, dis_band)
        self.policy_loss = policy_losses()[config.loss]

    @property
    def train_passes(self) -> int:
        return 1 + self.config.critic_updates

    def advantages(self, batch: Batch, values_BT: torch.Tensor) -> torch.Tensor:
        """Step 2: token-level GAE (skip-observation) on ``values_BT``, adaptive or fixed lambda; with ``value_at:
        prompt``, A_t = G_t - V(s_0) instead, the return from t less the value before the row's first action token."""
        cfg = self.config
        if cfg.value_at == "prompt":
            returns, _ = gae(batch.rewards_BT, torch.zeros_like(values_BT), batch.mask_BT, gamma=cfg.gamma, lam=1.0)
            mask = batch.mask_BT.bool()
            first = mask.int().argmax(dim=1, keepdim=True)
            at_prompt = values_BT.detach().gather(1, first).to(returns.dtype)
            advantages = torch.where(mask, returns - at_prompt, torch.zeros_like(returns))
        else:
            lam = adaptive_lambda(batch.num_actions_B, cfg.alpha) if cfg.adaptive_lambda else cfg.lam
            advantages, _ = gae(batch.rewards_BT, values_BT, batch.mask_BT, gamma=cfg.gamma, lam=lam)
        return masked_whiten(advantages, batch.mask_BT) if cfg.whiten_advantages else advantages

    def value_metrics(self, episodes: list[Episode], batch: Batch, values_BT: torch.Tensor) -> dict[str, float]:
        """How well the values the actor's advantages use (V_old, before the critic's steps on this batch:
        out of sample) predict the realised returns (``sao_env.algos.value_diagnostics``), logged as
        ``critic/explained_variance_prefit`` (over action tokens; ``critic/explained_variance`` is the
        critic loss's own, after its first step on the batch), ``critic/explained_variance_first_token``,
        ``critic/value_error_first_token`` and ``critic/explained_variance_prefit/<class>`` where the tasks
        carry a hidden difficulty class."""
        _, returns = gae(batch.rewards_BT, values_BT, batch.mask_BT, gamma=self.config.gamma, lam=1.0)
        classes = [(e.task.metadata if e.task is not None else {}).get("difficulty_class") for e in episodes]
        found = value_diagnostics(values_BT, returns, batch.mask_BT,
                                  classes if any(c is not None for c in classes) else None)
        prefit = lambda k: k.replace("explained_variance", "explained_variance_prefit", 1) if (  # noqa: E731
            k == "explained_variance" or k.startswith("explained_variance/")) else k
        return {f"critic/{prefit(k)}": v for k, v in found.items()}

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        cfg = self.config
        batch = self.batch(episodes)
        mask = batch.mask_BT

        plan = self.plan(batch)  # one micro-batch plan for the critic's passes and the actor's (None: one piece)
        metrics, values_old = self.critic.fit(batch, steps=cfg.critic_updates, gamma=cfg.gamma, plan=plan)
        metrics |= self.value_metrics(episodes, batch, values_old)
        self.updates += 1
        if self.updates <= cfg.critic_warmup_updates:
            return metrics | {"actor/warmup": 1.0}

        values = values_old if cfg.advantage_values == "before_fit" else self.critic.values(batch)
        advantages = self.advantages(batch, values)

        def loss_fn(logp):
            return self.policy_loss(logp, batch.rollout_logp_BT, advantages, mask, eps_low=self.eps_low,
                                    eps_high=self.eps_high, dual_clip=cfg.dual_clip, agg=cfg.agg,
                                    horizon=self.action_horizon)

        metrics |= self.actor_step(batch, loss_fn, plan)
        return metrics | {"actor/warmup": 0.0, "actor/advantage_mean": masked_mean(advantages, mask).item()}
