"""Prompt-dependent baselines without a critic, the brackets of a learned value.

Both are the running-mean agent (``baselines.py``: single rollout per prompt, 8 episodes per update,
DIS loss, A_i = r_i - b on every action token of episode i) with a baseline that depends on the prompt
(``sao_env.algos.keyed_baseline_advantages``):

per_prompt (agents/per_prompt.yaml): b = a discounted mean of the last ``window`` rewards of the same
  prompt, the value tracker of SPO (Xu et al. 2025, "Single-stream Policy Optimization", sec. 3.1), the
  global running mean for a prompt not seen yet. A prompt is its ``metadata["prompt_id"]`` where the source
  stamps one, else its text's hash (``sao_env.tasks.variants.prompt_key``): it pays only where prompts come
  back (a finite pool, ``pool: N``).
oracle_class (agents/oracle_class.yaml): b = the mean of the last ``window`` rewards of the task's hidden
  difficulty class (``metadata["difficulty_class"]``), the global running mean for a task without one.
  It reads what the policy never sees (the class), but not the class's expected reward under the current
  policy: it is a per-class running mean, whose window lags that reward while the policy learns, not an
  oracle of it (the name is the recipe's, kept because runs are keyed on it).
"""

from __future__ import annotations

import math
from collections.abc import Hashable

from sao_env.agents.base import Agent, resolve_band
from sao_env.agents.configs import KeyedBaselineConfig
from sao_env.algos import broadcast_sequence_advantages, dis_policy_loss, keyed_baseline_advantages
from sao_env.tasks.variants import prompt_key
from sao_env.types import Episode, Task


class KeyedBaselineAgent(Agent):
    """A_i = r_i - b(key(task_i)) on every action token, DIS loss; ``key`` is the subclass's."""

    config_cls = KeyedBaselineConfig
    config: KeyedBaselineConfig

    def __init__(self, policy, tokenizer, config: KeyedBaselineConfig, *, dis_band=(0.3, 5.0), action_horizon=None):
        super().__init__(policy, tokenizer, config, dis_band=dis_band, action_horizon=action_horizon)
        self.groups_per_update = config.episodes_per_update
        self.history: dict[Hashable, list[float]] = {}
        self.global_history: list[float] = []
        self.eps_low, self.eps_high = resolve_band(config.dis_eps_low, config.dis_eps_high, dis_band)

    @staticmethod
    def key(task: Task) -> Hashable | None:
        raise NotImplementedError

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        cfg = self.config
        batch = self.batch(episodes)
        adv_B, self.history, self.global_history, fallback_B = keyed_baseline_advantages(
            batch.rewards_B, [self.key(e.task) for e in episodes], self.history, self.global_history,
            window=cfg.window, discount=cfg.discount, global_window=cfg.global_window)
        advantages = broadcast_sequence_advantages(adv_B, batch.mask_BT)

        def loss_fn(logp):
            return dis_policy_loss(logp, batch.rollout_logp_BT, advantages, batch.mask_BT,
                                   eps_low=self.eps_low, eps_high=self.eps_high, agg=cfg.agg,
                                   horizon=self.action_horizon)

        self.updates += 1
        baseline = [r - a for r, a in zip(batch.rewards_B.tolist(), adv_B.tolist()) if math.isfinite(r)]
        return self.actor_step(batch, loss_fn) | {
            "actor/baseline": sum(baseline) / max(len(baseline), 1),
            "actor/baseline_fallback": float(fallback_B.float().mean()),
            "actor/baseline_keys": float(len(self.history)),
        }


class PerPromptAgent(KeyedBaselineAgent):
    name = "per_prompt"

    @staticmethod
    def key(task: Task) -> Hashable | None:
        return prompt_key(task)


class OracleClassAgent(KeyedBaselineAgent):
    name = "oracle_class"

    @staticmethod
    def key(task: Task) -> Hashable | None:
        return task.metadata.get("difficulty_class")
