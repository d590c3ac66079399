"""A math environment with a Python tool: tool-integrated reasoning as in the SAO paper (arXiv 2607.07508).

Protocol (docs/math-envs.md): an action that contains ``<py>CODE</py>`` is a tool call (an
unclosed ``<py>`` takes the rest of the action as code). The code runs in the sandbox
(``sao_env.sandbox.run_python``: bubblewrap, no network, rlimits) as a fresh interpreter with the
task's tool module preloaded (``from tools import *``, the API version in
``task.reference["api"]``, see ``sao_env.tasks.tool_math.TOOL_APIS``). The observation is
``<out>...</out>\\n`` holding the call's stdout, or the last line of its error
(``NameError: name 'mul' is not defined``), or what the sandbox stopped (a timeout, the memory
limit), cut to ``max_output_chars``. A bad call is an observation, never an exception: the
episode goes on. An action without a tool call is the final answer: the episode ends and the
reward is ``grade_math(task, action)``. When the turn limit ends the episode before an answer,
it grades 0 (reason ``no-answer``).
"""

from __future__ import annotations

import re
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

from sao_env.envs.base import TaskEnv, render_prompt
from sao_env.graders.math import grade_math
from sao_env.sandbox import ExecResult, Executor, Limits, LocalExecutor, run_python
from sao_env.scenario import LatencySpec
from sao_env.tasks.tool_math import TOOL_APIS, tool_observation
from sao_env.types import Task

TOOL_CALL = re.compile(r"<py>(.*?)(?:</py>|\Z)", re.DOTALL)
"""The first ``<py>...</py>`` of an action (or ``<py>`` to the end when it is not closed)."""

PREAMBLE = '__import__("sys").path.insert(0, "")\nfrom tools import *\n'
"""Prepended to every call: ``python -I`` leaves the working directory off ``sys.path``."""

TOOL_LIMITS = Limits(memory_mb=512, nproc=16, output_bytes=16 * 1024, tmpfs_mb=16)
"""Per-call limits: enough for arithmetic, small enough that a memory bomb fails at once."""


@lru_cache(maxsize=1)
def tool_executor() -> LocalExecutor:
    """The shared executor of tool calls (bubblewrap when it works here; no network)."""
    return LocalExecutor(TOOL_LIMITS)


def parse_tool_call(action: str) -> str | None:
    """The code of the action's tool call, or None when the action is a final answer."""
    match = TOOL_CALL.search(action)
    return match.group(1).strip() if match else None


def describe_result(result: ExecResult, timeout_s: float) -> str:
    """The text inside ``<out>``: stdout on success, else stdout then the error's last line."""
    if result.timed_out:
        return f"TimeoutError: the call ran past {timeout_s:g} s (timeout)"
    output = result.stdout.rstrip()
    if result.returncode == 0:
        return output
    error_lines = [line for line in result.stderr.splitlines() if line.strip()]
    error = error_lines[-1].strip() if error_lines else f"exit status {result.returncode}"
    if result.reason and result.reason != "output truncated" and result.reason not in error:
        error = f"{error} ({result.reason})"
    return f"{output}\n{error}" if output else error


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
        """Run one call in a fresh sandboxed working directory; the text that goes inside ``<out>``."""
        workdir = Path(tempfile.mkdtemp(prefix="sao-tool-"))
        try:
            (workdir / "tools.py").write_text(TOOL_APIS[self.api].module_source(), encoding="utf-8")
            result = run_python(PREAMBLE + code, executor=self.executor or tool_executor(),
                                timeout_s=self.tool_timeout_s, workdir=workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        text = describe_result(result, self.tool_timeout_s)
        if len(text) > self.max_output_chars:
            text = text[: self.max_output_chars] + f"...[{len(text) - self.max_output_chars} more]"
        return text
