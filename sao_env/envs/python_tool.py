"""A math environment with a Python tool: tool-integrated reasoning as in the SAO paper (arXiv 2607.07508).

Protocol (docs/math-envs.md): an action that contains ``<py>CODE</py>`` is a tool call (an
unclosed ``<py>`` takes the rest of the action as code). The code runs in the sandbox
(``sao_env.tasks.tool_math.run_tool_call``: bubblewrap, no network, rlimits) as ``python -I -S``
with the task's tool module preloaded (``from tools import *``, the API version in
``task.reference["api"]``, see ``sao_env.tasks.tool_math.TOOL_APIS``): by default a fork of a warm
interpreter per call, whose output is remembered per (version, code); with an explicit
``executor``, a fresh interpreter per call. The observation is
``<out>...</out>\\n`` holding the call's stdout, or the last line of its error
(``NameError: name 'mul' is not defined``), or what the sandbox stopped (a timeout, the memory
limit), cut to ``max_output_chars``. A bad call is an observation, never an exception: the
episode goes on. An action without a tool call is the final answer: the episode ends and the
reward is ``grade_math(task, action)``. When the turn limit ends the episode before an answer,
it grades 0 (reason ``no-answer``).
"""

from __future__ import annotations

import re
from typing import Any

from sao_env.envs.base import TaskEnv, render_prompt
from sao_env.graders.math import grade_math
from sao_env.sandbox import Executor
from sao_env.scenario import LatencySpec
from sao_env.tasks.tool_math import TOOL_APIS, run_tool_call, tool_observation
from sao_env.types import Task

TOOL_CALL = re.compile(r"<py>(.*?)(?:</py>|\Z)", re.DOTALL)
"""The first ``<py>...</py>`` of an action (or ``<py>`` to the end when it is not closed)."""


def parse_tool_call(action: str) -> str | None:
    """The code of the action's tool call, or None when the action is a final answer."""
    match = TOOL_CALL.search(action)
    return match.group(1).strip() if match else None


class PythonToolEnv(TaskEnv):
    """Multi-turn math with a sandboxed Python tool (tool names ``python`` and ``answer``).

    ``info`` of the final step's ``grade`` adds ``tool_calls`` (calls made) and ``api``.
    """

    def __init__(self, latency: LatencySpec | None = None, max_turns: int = 1, max_length: int = 65536,
                 max_observation_chars: int = 2000, tool_timeout_s: float = 2.0, max_output_chars: int = 200,
                 executor: Executor | None = None):
        super().__init__(latency=latency, max_turns=max_turns, max_length=max_length,
                         max_observation_chars=max_observation_chars)
        self.tool_timeout_s = tool_timeout_s
        self.max_output_chars = max_output_chars
        self.executor = executor
        self.api = "v1"
        self.tool_calls = 0
        self.answer: str | None = None

    @classmethod
    def sandbox_options(cls, sandbox: str) -> dict[str, Any]:
        """``sandbox: docker``: every tool call in a container of the sandbox image, under the tool's limits."""
        from sao_env.sandbox import docker_sandbox
        from sao_env.tasks.tool_math import TOOL_LIMITS

        return {"executor": docker_sandbox(TOOL_LIMITS)} if sandbox == "docker" else {}

    def _start(self, task: Task) -> str:
        api = task.reference.get("api", "v1")
        if api not in TOOL_APIS:
            raise ValueError(f"task {task.id!r}: unknown tool api {api!r}; known: {', '.join(TOOL_APIS)}")
        self.api, self.tool_calls, self.answer = api, 0, None
        return render_prompt(task)

    def _act(self, action: str) -> tuple[str, bool, str | None]:
        code = parse_tool_call(action)
        if code is None:
            self.answer = action
            return "", True, "answer"
        self.tool_calls += 1
        if self.turns >= self.max_turns:  # the turn limit ends the episode: nobody reads this output
            return "", False, "python"
        return tool_observation(self.run_tool(code)), False, "python"

    def _grade(self) -> tuple[float, dict[str, Any]]:
        assert self.task is not None
        if self.answer is None:
            return 0.0, {"verdict": "wrong", "reason": "no-answer", "tool_calls": self.tool_calls, "api": self.api}
        result = grade_math(self.task, self.answer)
        return result.reward, {**result.details, "tool_calls": self.tool_calls, "api": self.api}

    def run_tool(self, code: str) -> str:
        """Run one call in the sandbox (``sao_env.tasks.tool_math.run_tool_call``); the text that
        goes inside ``<out>``."""
        return run_tool_call(self.api, code, timeout_s=self.tool_timeout_s, max_output_chars=self.max_output_chars,
                             executor=self.executor)
