"""The single-turn task env, and the scenario env that Gymnasium users ``make``.

``SingleTurnEnv`` plays a ``Task`` with ``env="text"``: one response, graded, done.
``ScenarioEnv`` wraps a scenario's task stream: ``reset()`` draws the next task at the env's own
simulated clock (which advances by each turn's simulated latency, so the drift happens in a plain
``gymnasium.make`` loop too) or shows ``options={"task": task}``, then delegates to the task's own
environment (single-turn or a multi-turn tool env, see ``sao_env.envs.base``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from sao_env.envs.base import AnyText, TaskEnv, make_task_env, render_prompt
from sao_env.graders import grade
from sao_env.scenario import Scenario, ScenarioSpec
from sao_env.specs import find_spec, load_yaml
from sao_env.types import Task


def load_scenario(name_or_path: str, overrides: dict[str, Any] | None = None) -> Scenario:
    data = load_yaml(find_spec("envs", name_or_path))
    return Scenario(ScenarioSpec(**{**data, **(overrides or {})}))


class SingleTurnEnv(TaskEnv):
    """One response per task, graded by the task's grader; the only turn's latency is the grading's."""

    def _start(self, task: Task) -> str:
        self._response = None
        return render_prompt(task)

    def _act(self, action: str) -> tuple[str, bool, str | None]:
        self._response = action
        return "", True, None

    def _grade(self) -> tuple[float, dict[str, Any]]:
        result = grade(self.task, self._response)
        return result.reward, dict(result.details)


class ScenarioEnv(gym.Env):
    """A scenario's drifting task stream as one Gymnasium env; reward in [0, 1] from the task's grader.

    info on reset: ``task``, ``phase``, ``time_s``. info on step: the task env's (``grade`` at the
    end, ``latency``, ``tool``) plus ``phase``.
    """

    metadata = {"render_modes": []}

    def __init__(self, scenario: str | Scenario = "style-drift", max_length: int = 65536):
        self.scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        self.observation_space = AnyText(max_length)
        self.action_space = AnyText(max_length)
        self.time_s = 0.0
        self._env: TaskEnv | None = None
        self._count = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = options or {}
        if "time_s" in options:
            self.time_s = float(options["time_s"])
        task = options.get("task")
        if task is None:
            task = self.scenario.next_task(self.time_s, self.np_random, index=self._count)
            self._count += 1
        if self._env is not None:
            self._env.close()
        spec = self.scenario.spec
        self._env = make_task_env(task, latency=spec.latency, max_turns=spec.max_turns,
                                  sandbox=spec.sandbox)
        observation, _ = self._env.reset(seed=int(self.np_random.integers(2**31)), options={"task": task})
        return observation, {"task": task, "phase": task.metadata.get("phase"), "time_s": self.time_s}

    def step(self, action: str):
        if self._env is None:
            raise RuntimeError("step() before reset()")
        observation, reward, terminated, truncated, info = self._env.step(action)
        self.time_s += info["latency"]["env_s"]
        info = {**info, "phase": self._env.task.metadata.get("phase")}
        if terminated or truncated:
            self._env.close()
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
