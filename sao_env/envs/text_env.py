"""Single-turn text environments over a scenario's task stream (Gymnasium API).

``reset(seed=..., options={"task": task})`` shows a given task (so a learner can replay one prompt
for group sampling); without a task, the env draws the next one from its scenario at its own
simulated clock, which advances by each episode's simulated latency, so the drift happens in a
plain ``gymnasium.make`` loop too. ``step(response)`` grades the response and ends the episode.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from sao_env.graders import grade
from sao_env.scenario import Scenario, ScenarioSpec
from sao_env.specs import find_spec, load_yaml
from sao_env.tasks.tokens import CHARSET
from sao_env.types import Task


def load_scenario(name_or_path: str, overrides: dict[str, Any] | None = None) -> Scenario:
    data = load_yaml(find_spec("envs", name_or_path))
    return Scenario(ScenarioSpec(**{**data, **(overrides or {})}))


class ScenarioTextEnv(gym.Env):
    """Text in, text out; reward in [0, 1] from the task's grader.

    info on reset: ``task``, ``phase``, ``time_s``. info on step: ``grade`` (the grader's details),
    ``latency`` (``{"env_s": ...}``: simulated environment time of the turn), ``phase``.
    """

    metadata = {"render_modes": []}

    def __init__(self, scenario: str | Scenario = "style-drift", max_length: int = 512):
        self.scenario = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
        self.observation_space = spaces.Text(max_length=max_length, min_length=0, charset=CHARSET)
        self.action_space = spaces.Text(max_length=max_length, min_length=0, charset=CHARSET)
        self.time_s = 0.0
        self._task: Task | None = None
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
        self._task = task
        return self._observation(task), {"task": task, "phase": task.metadata.get("phase"), "time_s": self.time_s}

    def step(self, action: str):
        if self._task is None:
            raise RuntimeError("step() before reset()")
        task, self._task = self._task, None
        result = grade(task, action)
        latency = self.scenario.spec.latency
        env_s = float(latency.env_median_s * np.exp(latency.env_sigma * self.np_random.standard_normal()))
        self.time_s += env_s
        info = {"grade": dict(result.details), "latency": {"env_s": env_s}, "phase": task.metadata.get("phase")}
        return "", float(result.reward), True, False, info

    @staticmethod
    def _observation(task: Task) -> str:
        if isinstance(task.prompt, str):
            return task.prompt
        return "\n".join(f"{m['role']}: {m['content']}" for m in task.prompt)
