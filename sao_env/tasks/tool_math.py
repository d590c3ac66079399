"""Arithmetic that pays to do with a Python tool, whose interface drifts between versions.

The SAO paper (arXiv 2607.07508) trains tool-integrated reasoning: the policy may run code and
read its output before it answers. Here the problems are products and sums of multi-digit
numbers (``123*456``), which a tiny character-level model cannot compute unaided but can
delegate in one short call: ``<py>print(mul(123, 456))</py>`` is answered by ``<out>56088</out>``,
and the policy copies the number into ``\\boxed{56088}``.

The tool module preloaded into every call has an API version (param ``api``); the prompt carries
only a fixed hint (``python tool: <py>code</py>``), never the function names, so the policy must
learn the interface from reward and relearn it when it drifts:

- ``v1``: ``add(a, b)``, ``sub(a, b)``, ``mul(a, b)`` return the number;
- ``v2``: renamed: ``plus(a, b)``, ``minus(a, b)``, ``times(a, b)`` (a v1 call: ``NameError``);
- ``v3``: v1's names, but one list argument and a labelled string: ``mul([a, b])`` returns
  ``"result=56088"`` (a v1 call: ``TypeError``).

``sao_env.envs.python_tool.PythonToolEnv`` plays these tasks (docs/math-envs.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sao_env.tasks.arithmetic import OPERATORS
from sao_env.types import Task, Turn

OPERATIONS = OPERATORS
"""The operations a task may ask for (the style-drift table: + - *)."""

TOOL_HINT = "python tool: <py>code</py>"
"""The only description of the tool the policy sees, the same for every API version."""


@dataclass(frozen=True)
class ToolAPI:
    """One version of the preloaded tool module.

    ``functions`` maps each operation to the function that computes it; ``list_argument`` means the
    function takes one list ``[a, b]`` instead of two numbers; ``output_format`` renders its result
    (``{}`` is the number), e.g. ``"result={}"``.
    """

    version: str
    functions: dict[str, str]
    list_argument: bool = False
    output_format: str = "{}"

    def module_source(self) -> str:
        """The ``tools.py`` written next to each call's code (``from tools import *``)."""
        names = sorted(self.functions.values())
        lines = [f'"""Tool API {self.version}."""', "", f"__all__ = {names!r}", ""]
        for op, function in sorted(self.functions.items(), key=lambda item: item[1]):
            parameters, expression = ("xs", f"xs[0] {op} xs[1]") if self.list_argument else ("a, b", f"a {op} b")
            result = expression if self.output_format == "{}" else f"{self.output_format!r}.format({expression})"
            lines += ["", f"def {function}({parameters}):", f"    return {result}", ""]
        return "\n".join(lines)

    def call(self, op: str, a: int, b: int) -> str:
        """Python source of the call that computes ``a op b`` with this version's tool."""
        arguments = f"[{a}, {b}]" if self.list_argument else f"{a}, {b}"
        return f"{self.functions[op]}({arguments})"

    def printed(self, value: int) -> str:
        """What ``print(call)`` writes for result ``value`` (without the newline)."""
        return self.output_format.format(value)


TOOL_APIS: dict[str, ToolAPI] = {
    "v1": ToolAPI("v1", {"+": "add", "-": "sub", "*": "mul"}),
    "v2": ToolAPI("v2", {"+": "plus", "-": "minus", "*": "times"}),
    "v3": ToolAPI("v3", {"+": "add", "-": "sub", "*": "mul"}, list_argument=True, output_format="result={}"),
}
"""API version -> the tool module it preloads."""


@lru_cache(maxsize=None)
def wrong_call_output(api_version: str, wrong_version: str, op: str) -> str:
    """What the sandboxed tool answers when a task of ``api_version`` is called the way
    ``wrong_version`` would call it: the interpreter's error line (with its suggestions, e.g.
    ``Did you mean: 'sum'?``). It depends on the function and the argument shape, not on the
    operands, so it is run once per combination, for real, in the sandbox."""
    from sao_env.envs.python_tool import PythonToolEnv

    env = PythonToolEnv()
    env.api = api_version
    return env.run_tool(f"print({TOOL_APIS[wrong_version].call(op, 1, 2)})")


def tool_call_action(code: str) -> str:
    """A policy action that runs ``code`` with the tool."""
    return f"<py>{code}</py>"


def tool_observation(output: str) -> str:
    """How the environment wraps a tool call's output (or error line) for the policy."""
    return f"<out>{output}</out>\n"


class ToolArithmeticParams(BaseModel):
    """One phase's tool-arithmetic source: operand size, operations and the tool's API version."""

    model_config = ConfigDict(extra="forbid")

    digits: int = Field(3, ge=1, le=6)
    """Both operands have exactly this many digits (3: the tool pays for a tiny model)."""
    operations: list[str] = ["*", "+"]
    """Operations drawn uniformly: any of + - *."""
    api: Literal["v1", "v2", "v3"] = "v1"
    """Tool API version preloaded in the sandbox (the drift knob; see ``TOOL_APIS``)."""
    retry_share: float = Field(0.5, ge=0, le=1)
    """Share of demonstrations that first call the tool the way another API version would, read
    the error, then call it right: the warm start then knows how to recover from a failed call,
    so that after a drift RL has a correct behaviour to reinforce (the prompt never names the API)."""

    @field_validator("operations")
    @classmethod
    def _known_operations(cls, ops: list[str]) -> list[str]:
        unknown = sorted(set(ops) - set(OPERATIONS))
        if unknown or not ops:
            raise ValueError(f"operations must be a non-empty subset of {sorted(OPERATIONS)}, got {ops}")
        return ops


class ToolArithmeticSource:
    """Seeded arithmetic tasks for ``PythonToolEnv``; ``demonstrate`` calls the tool once, then answers."""

    grader = "math"
    env = "python_tool"
    Params = ToolArithmeticParams

    def __init__(self, params: ToolArithmeticParams, *, name: str = "tool_arithmetic"):
        self.params = params
        self.name = name

    def sample(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task:
        p = self.params
        low, high = 10 ** (p.digits - 1), 10**p.digits
        a, b = int(rng.integers(low, high)), int(rng.integers(low, high))
        op = p.operations[int(rng.integers(len(p.operations)))]
        answer = OPERATIONS[op](a, b)
        return Task(
            id=f"{self.name}-{phase}-{index:06d}",
            prompt=f"{a}{op}{b}=? ({TOOL_HINT})\n",
            reference={"answer": str(answer), "api": p.api, "operands": [a, b], "op": op},
            grader=self.grader,
            metadata={"source": self.name, "phase": phase, "created_at": created_at, "api": p.api,
                      "difficulty": {"digits": p.digits, "operations": list(p.operations)}},
            env=self.env,
        )

    def demonstrate(self, task: Task, rng: np.random.Generator | None) -> list[Turn]:
        """A tool call with the task's API version, its exact observation, then ``\\boxed{answer}``;
        with probability ``retry_share`` (``rng`` given) preceded by a call in another version's
        style and the error it gets."""
        api = TOOL_APIS[task.reference["api"]]
        op, (a, b) = task.reference["op"], task.reference["operands"]
        value = int(task.reference["answer"])
        turns = []
        if rng is not None and rng.random() < self.params.retry_share:
            others = [v for v in TOOL_APIS if v != api.version]
            wrong = TOOL_APIS[others[int(rng.integers(len(others)))]]
            output = wrong_call_output(api.version, wrong.version, op)
            turns.append(Turn(tool_call_action(f"print({wrong.call(op, a, b)})"), tool_observation(output)))
        call = tool_call_action(f"print({api.call(op, a, b)})")
        return [*turns, Turn(call, tool_observation(api.printed(value))), Turn(f"\\boxed{{{value}}}")]
