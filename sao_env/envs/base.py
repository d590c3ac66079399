"""The task environment: one ``Task`` played over one or more turns, with the Gymnasium API.

    env = make_task_env(task, latency=scenario.spec.latency, max_turns=8)
    prompt, info = env.reset(seed=0, options={"task": task})
    observation, reward, terminated, truncated, info = env.step(action)

The conversation is the prompt, then alternately the policy's action and the environment's
observation. ``step`` returns only the *new* text to append after the action (a tool's output,
truncated with a marker), so the caller can mark those tokens as observations (``action_mask``
False) for skip-observation GAE; it is ``""`` once the episode has ended. The reward is the
task grader's verdict, paid on the final step. ``info`` on every step holds ``latency``
(``{"env_s": simulated seconds of the turn}``, the task's latency factor applied; with
``latency.fail_to_turn_limit`` a failed final step's also holds the turns left to the limit) and
``tool`` (the tool called, or None); the final step adds ``grade`` (the grader's details). ``truncated`` means the turn limit ended the episode
(it is still graded on its final state).
"""

from __future__ import annotations

import copy
import functools
import importlib
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from sao_env.scenario import LatencySpec, latency_factor
from sao_env.tasks.tokens import CHARSET
from sao_env.types import Task

TASK_ENVS: dict[str, str] = {
    "text": "sao_env.envs.text_env:SingleTurnEnv",
    "python_tool": "sao_env.envs.python_tool:PythonToolEnv",
    "repo": "sao_env.envs.repo_env:RepoEnv",
    "swebench": "sao_env.envs.swebench_env:SWEBenchEnv",
}
"""``Task.env`` -> ``"module:class"``, imported on first use (a tool's dependencies load only when used)."""

TRUNCATION_MARKER = "\n[... {} characters truncated ...]\n"


class AnyText(spaces.Text):
    """Text of any Unicode characters (benchmark problems are not ASCII); samples use ``CHARSET``
    (printable ASCII and the newline: the tiny tokenizer's alphabet)."""

    def __init__(self, max_length: int = 65536, *, seed: int | None = None):
        super().__init__(max_length=max_length, min_length=0, charset=CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText({self.max_length})"


def _text_space(max_length: int) -> AnyText:
    """A space of its own (own random stream) that shares its character tables with a prototype:
    building gymnasium's tables for every episode's env is not free."""
    return copy.copy(_text_prototype(max_length))


@functools.lru_cache(maxsize=None)
def _text_prototype(max_length: int) -> AnyText:
    return AnyText(max_length)  # never sampled or seeded: copies start with no random stream


class TaskEnv(gym.Env):
    """Base of every task environment: text spaces, the turn limit and the latency model.

    Subclasses implement ``_start(task) -> prompt`` and ``_act(action) -> (observation, done, tool)``
    and ``_grade() -> (reward, details)``; the base enforces the turn limit, samples each turn's
    simulated latency and assembles the Gymnasium tuples.
    """

    metadata = {"render_modes": []}

    def __init__(self, latency: LatencySpec | None = None, max_turns: int = 1, max_length: int = 65536,
                 max_observation_chars: int = 2000):
        self.latency = latency if latency is not None else LatencySpec()
        self.max_turns = max_turns
        self.max_observation_chars = max_observation_chars
        self.observation_space, self.action_space = _text_space(max_length), _text_space(max_length)
        self.task: Task | None = None
        self.turns = 0
        self._done = True

    # -- what a subclass provides -----------------------------------------------------------
    def _start(self, task: Task) -> str:
        raise NotImplementedError

    def _act(self, action: str) -> tuple[str, bool, str | None]:
        """Apply one action: (observation, episode over, tool name or None)."""
        raise NotImplementedError

    def _grade(self) -> tuple[float, dict[str, Any]]:
        raise NotImplementedError

    # -- Gymnasium ----------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._seed = seed
        task = (options or {}).get("task")
        if task is None:
            raise ValueError(f"{type(self).__name__}.reset needs options={{'task': task}}")
        self.task, self.turns, self._done = task, 0, False
        return self._start(task), {"task": task}

    def step(self, action: str):
        if self._done:
            raise RuntimeError("step() on a finished episode; call reset()")
        self.turns += 1
        observation, done, tool = self._act(action)
        info: dict[str, Any] = {"tool": tool, "latency": {"env_s": self.sample_latency(tool)}, "turn": self.turns}
        truncated = not done and self.turns >= self.max_turns
        if done or truncated:
            self._done = True
            reward, details = self._grade()
            info["grade"] = details
            if self.latency.fail_to_turn_limit and reward < self.latency.fail_below:
                info["latency"]["env_s"] += self.remaining_turns_s()
            return "", float(reward), done, truncated, info
        return self.truncate(observation), 0.0, False, False, info

    @classmethod
    def sandbox_options(cls, sandbox: str) -> dict[str, Any]:
        """Constructor arguments that run this environment's code in ``sandbox`` (a scenario's
        ``sandbox`` key other than the default); ``{}`` where it runs none."""
        return {}

    # -- helpers --------------------------------------------------------------------------------
    def sample_latency(self, tool: str | None, turn: int | None = None) -> float:
        """Simulated seconds of this turn (or of turn ``turn``): the task's latency factor times the
        within-task draw of median ``tool_median_s[tool]`` (else ``env_median_s``), ``LatencySpec.turn_s``.

        Seeded episodes draw it from (seed, turn) alone, so the runtime can bound an episode's duration
        before it is played; unseeded ones from ``np_random``.
        """
        factor = latency_factor(self.task) if self.task is not None else 1.0
        if getattr(self, "_seed", None) is not None:
            return self.latency.turn_s(self._seed, self.turns if turn is None else turn, tool, factor)
        median = self.latency.tool_median_s.get(tool or "", self.latency.env_median_s)
        return factor * self.latency.from_normal(median, float(self.np_random.standard_normal()))

    def remaining_turns_s(self) -> float:
        """Environment seconds of the turns after this one up to the turn limit, each its own draw at
        ``env_median_s`` (tool None): what a failed episode that kept trying would have cost
        (``LatencySpec.fail_to_turn_limit``). Generation of those turns is not charged."""
        return sum(self.sample_latency(None, turn) for turn in range(self.turns + 1, self.max_turns + 1))

    def truncate(self, text: str) -> str:
        """Keep the head and tail of a long observation, with a marker saying how much was cut."""
        limit = self.max_observation_chars
        if len(text) <= limit:
            return text
        head, tail = text[: limit * 2 // 3], text[-(limit // 3):]
        return head + TRUNCATION_MARKER.format(len(text) - len(head) - len(tail)) + tail


def render_prompt(task: Task) -> str:
    """The prompt as text: a string as is, chat messages as ``role: content`` lines."""
    if isinstance(task.prompt, str):
        return task.prompt
    return "\n".join(f"{m['role']}: {m['content']}" for m in task.prompt)


def task_env_class(name: str) -> type[TaskEnv]:
    if name not in TASK_ENVS:
        raise ValueError(f"unknown task env {name!r}; known: {', '.join(sorted(TASK_ENVS))}")
    module, cls = TASK_ENVS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_task_env(task: Task, *, latency: LatencySpec | None = None, max_turns: int = 1,
                  sandbox: str = "bubblewrap") -> TaskEnv:
    """A fresh environment for ``task`` (episodes never share one: each has its own working copy).

    ``sandbox`` is the scenario's: ``bubblewrap`` (each environment's default executor) or ``docker``
    (the environments that run code get ``docker_sandbox``'s executor: ``TaskEnv.sandbox_options``)."""
    cls = task_env_class(task.env)
    if sandbox == "bubblewrap":
        return cls(latency=latency, max_turns=max_turns)
    return cls(latency=latency, max_turns=max_turns, **cls.sandbox_options(sandbox))
