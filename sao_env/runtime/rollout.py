"""Playing tasks with a policy: the loop between generation and a task's environment.

One function serves the runtime's rollouts and the held-out evaluations, for single-turn and
multi-turn tasks alike. Each turn, every unfinished episode generates up to ``max_new_tokens``
(stopping at EOS) from its whole conversation; the action's text goes to its environment, and
the observation that comes back is appended as non-policy tokens (``action_mask`` False, log-prob
0), which is what skip-observation GAE needs (SAO, arXiv 2607.07508, Sec. 3.2). An episode ends
when its environment says so (an answer, a submit, the turn limit) or when its conversation would
outgrow ``max_context_tokens`` (reward 0, reason ``context-limit``); an action is cut where the
conversation reaches that limit, as if generation had stopped there. The prompt and the observations
are laid out by the scenario's format (``sao_env.policy.chat``): as written, or through an instruct
model's chat template (``env.chat``), the same layout the warm start's demonstrations use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sao_env.envs.base import make_task_env
from sao_env.errors import UserError
from sao_env.policy.chat import conversation_format
from sao_env.policy.generate import sample
from sao_env.scenario import ScenarioSpec
from sao_env.types import Task


@dataclass
class Rollout:
    """One played episode: the token stream with its action mask, the reward and what it cost.

    ``transcript`` is everything after the prompt as text (actions and observations in order);
    ``prompt_tokens`` counts every non-action token fed to the model (the prompt and observations,
    i.e. what is prefilled), ``action_tokens`` the generated ones. ``env_s`` sums the simulated
    latency of the environment's turns, each plus ``latency.env_s_per_token`` per action token of the turn.
    """

    task: Task
    tokens_T: list[int] = field(default_factory=list)
    action_mask_T: list[bool] = field(default_factory=list)
    logp_T: list[float] = field(default_factory=list)
    transcript: str = ""
    reward: float = 0.0
    turns: int = 0
    env_s: float = 0.0
    prompt_tokens: int = 0
    action_tokens: int = 0
    tools: list[str | None] = field(default_factory=list)
    grade: dict[str, Any] = field(default_factory=dict)
    end: str = "done"
    """Why the episode ended: ``done`` (the env ended it), ``turn-limit`` or ``context-limit``."""

    def _observe(self, ids: Sequence[int], text: str) -> None:
        self.tokens_T += ids
        self.action_mask_T += [False] * len(ids)
        self.logp_T += [0.0] * len(ids)
        self.prompt_tokens += len(ids)
        self.transcript += text

    def _act(self, ids: Sequence[int], logps: Sequence[float], text: str) -> None:
        self.tokens_T += ids
        self.action_mask_T += [True] * len(ids)
        self.logp_T += logps
        self.action_tokens += len(ids)
        self.transcript += text


def play(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    tasks: Sequence[Task],
    spec: ScenarioSpec,
    *,
    env_seeds: Sequence[int],
    row_keys: Sequence[int] | None = None,
    generator: torch.Generator | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    sampler: Callable[..., list] = sample,
) -> list[Rollout]:
    """Play each task to its end with ``model``; episodes advance turn by turn as one batch.

    With ``row_keys`` (one per task) every episode samples from its own counter-based stream, so an
    episode is the same whichever episodes share its batch; ``generator`` shares one stream instead.
    ``sampler`` generates each turn (``generate.sample``'s signature; a vLLM engine's in
    ``engine/generator.py``).
    """
    envs = [make_task_env(task, latency=spec.latency, max_turns=spec.max_turns, sandbox=spec.sandbox)
            for task in tasks]
    rollouts = [Rollout(task) for task in tasks]
    layout = conversation_format(tokenizer, spec.chat)
    for env, task, rollout, seed in zip(envs, tasks, rollouts, env_seeds):
        prompt, _ = env.reset(seed=int(seed), options={"task": task})
        rollout._observe(layout.prompt_ids(prompt), "")
        if len(rollout.tokens_T) >= spec.max_context_tokens:
            raise UserError(f"task {task.id}: its prompt has {len(rollout.tokens_T)} tokens, no fewer than "
                            f"max_context_tokens={spec.max_context_tokens}; raise env.max_context_tokens")
    active = list(range(len(tasks)))
    try:
        while active:
            samples = sampler(model, [rollouts[i].tokens_T for i in active], max_new_tokens=spec.max_new_tokens,
                             eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                             generator=generator, row_keys=None if row_keys is None else [row_keys[i] for i in active],
                             temperature=temperature, top_p=top_p)
            still_active = []
            for i, s in zip(active, samples):
                rollout, env = rollouts[i], envs[i]
                room = spec.max_context_tokens - len(rollout.tokens_T)
                token_ids, logps = s.token_ids[:room], s.logps[:room]
                action = tokenizer.decode(token_ids, skip_special_tokens=True)
                rollout._act(token_ids, logps, action)
                observation, reward, terminated, truncated, info = env.step(action)
                rollout.turns += 1
                rollout.env_s += info["latency"]["env_s"] + spec.latency.env_s_per_token * len(token_ids)
                rollout.tools.append(info.get("tool"))
                if terminated or truncated:
                    rollout.reward, rollout.grade = float(reward), dict(info.get("grade", {}))
                    rollout.end = "done" if terminated else "turn-limit"
                    continue
                ids = layout.observation_ids(observation)
                if len(rollout.tokens_T) + len(ids) >= spec.max_context_tokens:
                    rollout.reward, rollout.end = 0.0, "context-limit"
                    rollout.grade = {"reason": "context-limit"}
                    continue
                rollout._observe(ids, observation)
                still_active.append(i)
            active = still_active
    finally:
        for env in envs:
            env.close()
    return rollouts

