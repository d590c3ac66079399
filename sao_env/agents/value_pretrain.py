"""Value pretraining: the critic fitted on episodes of the warm-start policy before the actor moves.

The SAO paper pretrains its value model before RL (as VAPO does, Yue et al. 2025) to soften the
critic's cold start, the main weakness of single rollouts. ``pretrain_value`` plays ``episodes``
training tasks of the scenario's first phase with the agent's policy as it is (the warm start,
before any update), then takes ``steps`` critic steps on lambda=1 returns (the reward-to-go with
the recipe's gamma, which does not depend on the values), each step on the next
``episodes_per_update`` of those episodes in turn, cycling, so a step costs what an online critic
step costs. The actor, its optimizer and the version are untouched; the critic's Adam state carries
on into the run.

Cost and fairness: it happens before t=0, like the warm start, so it is not charged to simulated
time and the run's streams (tasks, environments, sampling) are those of a run without it. The
critic-free baselines (running mean, GRPO) get no such head start: a running mean is not fed these
episodes, so a row with pretraining on gets ``episodes`` extra trajectories of information.

Seeds: tasks from ``np.random.default_rng([seed, STREAM])``, environments and sampling keyed by
``(seed, STREAM, j)``, where the run's streams use ``[seed, 1]``, ``[seed, 2]`` and
``(seed, request id, member)`` with request ids counting from 0: one seed gives the same
pretraining every time, and it never replays a task or a sampling stream of the run.
"""

from __future__ import annotations

import numpy as np
import torch

from sao_env.algos import gae
from sao_env.policy.generate import row_key
from sao_env.runtime.rollout import play
from sao_env.scenario import Scenario
from sao_env.types import Episode

STREAM = 0x5EED_0A1
"""Tag of the pretraining's random streams (far above any request id of a run)."""
TASK_INDEX = 700_000
"""First task index of the pretraining tasks (runs count from 0, held-out sets from 900,000)."""


def pretrain_episodes(agent, scenario: Scenario, *, episodes: int, seed: int) -> list[Episode]:
    """``episodes`` first-phase training tasks played once each by ``agent.policy`` (as it is now),
    sampled at temperature 1 as every training rollout is (``RuntimeSpec``)."""
    rng = np.random.default_rng([seed, STREAM])
    tasks = [scenario.next_task(0.0, rng, index=TASK_INDEX + j) for j in range(episodes)]
    env_seeds = [int(s) for s in np.random.default_rng([seed, STREAM, 1]).integers(2**31, size=episodes)]
    keys = [row_key(seed, STREAM, j) for j in range(episodes)]
    rollouts = play(agent.policy, agent.tokenizer, tasks, scenario.spec, env_seeds=env_seeds, row_keys=keys)
    return [Episode(task=r.task, tokens_T=tuple(r.tokens_T), action_mask_T=tuple(r.action_mask_T),
                    rollout_logp_T=tuple(r.logp_T), version_T=tuple(agent.version if m else -1 for m in r.action_mask_T),
                    reward=r.reward, response=r.transcript, group_id=-1 - j, phase=str(r.task.metadata.get("phase")),
                    sim_start=0.0, sim_end=0.0, grade_details=r.grade, turns=r.turns, end=r.end)
            for j, r in enumerate(rollouts)]


def pretrain_value(agent, scenario: Scenario, *, episodes: int, steps: int, seed: int) -> dict[str, float]:
    """Fit ``agent.critic`` on ``episodes`` warm-start episodes for ``steps`` steps (module docstring).

    Returns figures of the pretraining (not logged by the run): its episodes, their mean reward and
    the value loss of the first and the last step.
    """
    if episodes < 1 or steps < 1:
        raise ValueError(f"value pretraining needs episodes >= 1 and steps >= 1, got {episodes=}, {steps=}")
    played = pretrain_episodes(agent, scenario, episodes=episodes, seed=seed)
    n = agent.config.episodes_per_update
    batches = [agent.batch(played[i:i + n]) for i in range(0, len(played), n)]
    targets = [gae(b.rewards_BT, torch.zeros_like(b.rewards_BT), b.mask_BT, gamma=agent.config.gamma, lam=1.0)[1]
               for b in batches]  # lambda=1: the reward-to-go, whatever the values
    losses = []
    for s in range(steps):
        k = s % len(batches)
        losses.append(agent.critic.step(batches[k], targets[k], plan=agent.plan(batches[k]))["critic/value_loss"])
    return {"episodes": float(len(played)), "reward_mean": float(np.mean([e.reward for e in played])),
            "value_loss_first": losses[0], "value_loss_last": losses[-1]}
