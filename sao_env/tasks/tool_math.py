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

``run_tool_call`` runs one call in the sandbox with the version's module preloaded and returns
the text that goes inside ``<out>``: the environment that plays these tasks
(``sao_env.envs.python_tool.PythonToolEnv``, docs/math-envs.md) answers with it, and the
demonstrations' error observations come from it too.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import ConfigDict, Field, field_validator

from sao_env.sandbox import ExecResult, Executor, Limits, LocalExecutor
from sao_env.sandbox import warm
from sao_env.tasks.arithmetic import OPERATORS
from sao_env.tasks.variants import SourceParams
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


PREAMBLE = '__import__("sys").path.insert(0, "")\nfrom tools import *\n'
"""Prepended to every call: ``TOOL_FLAGS`` leave the working directory off ``sys.path``."""

SNIPPET = "snippet.py"
"""The file a call's code is written to, next to ``tools.py``."""

TOOL_LIMITS = Limits(memory_mb=512, nproc=16, output_bytes=16 * 1024, tmpfs_mb=16)
"""Per-call limits: enough for arithmetic, small enough that a memory bomb fails at once."""

TOOL_ENV = {"PYTHONHASHSEED": "0"}
"""Fixed string hashing, so that printing a set gives the same text in every run."""

TOOL_FLAGS = ("-s", "-S", "-P") if sys.version_info >= (3, 11) else ("-s", "-S")
"""The interpreter's flags: ``-I -S`` (no site, no script folder on ``sys.path``) but for ``-E``,
so that ``TOOL_ENV`` applies (the sandbox's environment holds nothing else from the host)."""

CACHE_SIZE = 65536
"""Calls whose output ``run_tool_call`` remembers (most recent first)."""

_outputs: OrderedDict[tuple, str] = OrderedDict()
_outputs_lock = threading.Lock()


@lru_cache(maxsize=1)
def tool_executor() -> LocalExecutor:
    """The shared executor of tool calls (bubblewrap when it works here; no network)."""
    return LocalExecutor(TOOL_LIMITS)


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


def _warm_pool(api: str) -> warm.WarmPool:
    source = TOOL_APIS[api].module_source()
    return warm.shared_pool(("tool_math", api), lambda: warm.WarmInterpreter(
        tool_executor(), flags=TOOL_FLAGS, preload=["tools"], library={"tools.py": source}, env=TOOL_ENV))


def execute_tool_call(api: str, code: str, *, timeout_s: float, executor: Executor | None = None) -> ExecResult:
    """Run one call in the sandbox: ``python TOOL_FLAGS snippet.py`` in a fresh working directory
    holding ``tools.py`` of version ``api`` and the call (after ``PREAMBLE``). With ``executor`` None,
    a warm interpreter of that version runs it (bubblewrap), else a fresh interpreter per call."""
    files = {"tools.py": TOOL_APIS[api].module_source(), SNIPPET: PREAMBLE + code}
    if executor is None and warm.available(tool_executor()):
        return _warm_pool(api).run([SNIPPET], files, timeout_s=timeout_s, env=TOOL_ENV)
    runner = executor if executor is not None else tool_executor()
    workdir = Path(tempfile.mkdtemp(prefix="sao-tool-"))
    try:
        for name, text in files.items():
            (workdir / name).write_text(text, encoding="utf-8")
        return runner.run([getattr(runner, "python", "python3"), *TOOL_FLAGS, SNIPPET], workdir=workdir,
                          timeout_s=timeout_s, env=dict(TOOL_ENV))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_tool_call(api: str, code: str, *, timeout_s: float = 2.0, max_output_chars: int = 200,
                  executor: Executor | None = None) -> str:
    """The observation text (inside ``<out>``) of running ``code`` with tool version ``api``: its
    output or last error line (``describe_result``), cut to ``max_output_chars`` with a marker.

    With the shared sandbox (``executor`` None, or an executor marked ``shared``: the Docker sandbox of
    ``sandbox: docker``) outputs are remembered per (api, code, timeout, executor): a call's output
    depends on nothing else, and held-out sets repeat the same calls at every evaluation. Timeouts and
    sandbox failures are never remembered (they depend on the load).
    """
    remember = executor is None or getattr(executor, "shared", False)
    key = (api, code, float(timeout_s), None if executor is None else id(executor))
    text = None
    if remember:
        with _outputs_lock:
            text = _outputs.get(key)
            if text is not None:
                _outputs.move_to_end(key)
    if text is None:
        result = execute_tool_call(api, code, timeout_s=timeout_s, executor=executor)
        text = describe_result(result, timeout_s)
        if remember and not result.timed_out and not (result.reason or "").startswith("sandbox"):
            with _outputs_lock:
                _outputs[key] = text
                while len(_outputs) > CACHE_SIZE:
                    _outputs.popitem(last=False)
    if len(text) > max_output_chars:
        text = text[:max_output_chars] + f"...[{len(text) - max_output_chars} more]"
    return text


def clear_tool_cache() -> None:
    """Forget every remembered tool output (benchmarks measure uncached calls)."""
    with _outputs_lock:
        _outputs.clear()


@lru_cache(maxsize=None)
def wrong_call_output(api_version: str, wrong_version: str, op: str) -> str:
    """What the sandboxed tool answers when a task of ``api_version`` is called the way
    ``wrong_version`` would call it: the interpreter's error line (with its suggestions, e.g.
    ``Did you mean: 'sum'?``). It depends on the function and the argument shape, not on the
    operands, so it is run once per combination, for real, in the sandbox."""
    return run_tool_call(api_version, f"print({TOOL_APIS[wrong_version].call(op, 1, 2)})")


def tool_call_action(code: str) -> str:
    """A policy action that runs ``code`` with the tool."""
    return f"<py>{code}</py>"


def tool_observation(output: str) -> str:
    """How the environment wraps a tool call's output (or error line) for the policy."""
    return f"<out>{output}</out>\n"


class ToolArithmeticParams(SourceParams):
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
    calls: int = Field(1, ge=1, le=8)
    """Tool calls the task needs before its answer (the horizon knob): ``calls - 1`` more operations
    chain onto the first, left to right, ``((a*b)+c)+d``, each one call on the previous result, so an
    episode of ``calls`` calls and an answer needs ``max_turns >= calls + 1``; a first call in the wrong
    API leaves no turn to spare, and its reward arrives ``calls`` turns later. 1: one operation, the
    original task (the same draws)."""
    chain_operations: list[str] = ["+"]
    """Operations of the chained steps (``calls > 1``), each with a fresh ``digits``-digit operand."""

    omit_at_default: ClassVar[tuple[str, ...]] = (*SourceParams.omit_at_default, "calls", "chain_operations")

    @field_validator("operations", "chain_operations")
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
        expression, reference = f"{a}{op}{b}", {"operands": [a, b], "op": op}
        if p.calls > 1:  # drawn after the first operation's numbers, so calls=1 draws as before
            chain = []
            for _ in range(p.calls - 1):
                next_op = p.chain_operations[int(rng.integers(len(p.chain_operations)))]
                c = int(rng.integers(low, high))
                answer = OPERATIONS[next_op](answer, c)
                expression = f"({expression}){next_op}{c}"
                chain.append([next_op, c])
            reference["chain"] = chain
        return Task(
            id=f"{self.name}-{phase}-{index:06d}",
            prompt=f"{expression}=? ({TOOL_HINT})\n",
            reference={"answer": str(answer), "api": p.api, **reference},
            grader=self.grader,
            metadata={"source": self.name, "phase": phase, "created_at": created_at, "api": p.api,
                      "difficulty": {"digits": p.digits, "operations": list(p.operations)}},
            env=self.env,
        )

    def demonstrate(self, task: Task, rng: np.random.Generator | None) -> list[Turn]:
        """A tool call with the task's API version, its exact observation (one call per operation of a
        chained task, each on the previous output), then ``\\boxed{answer}``; with probability
        ``retry_share`` (``rng`` given) preceded by a call in another version's style and the error it gets."""
        api = TOOL_APIS[task.reference["api"]]
        op, (a, b) = task.reference["op"], task.reference["operands"]
        value = int(task.reference["answer"])
        turns = []
        if rng is not None and rng.random() < self.params.retry_share:
            others = [v for v in TOOL_APIS if v != api.version]
            wrong = TOOL_APIS[others[int(rng.integers(len(others)))]]
            output = wrong_call_output(api.version, wrong.version, op)
            turns.append(Turn(tool_call_action(f"print({wrong.call(op, a, b)})"), tool_observation(output)))
        result = OPERATIONS[op](a, b)
        turns.append(Turn(tool_call_action(f"print({api.call(op, a, b)})"), tool_observation(api.printed(result))))
        for next_op, c in task.reference.get("chain", []):  # one call per chained operation, on the last output
            previous, result = result, OPERATIONS[next_op](result, c)
            turns.append(Turn(tool_call_action(f"print({api.call(next_op, previous, c)})"),
                              tool_observation(api.printed(result))))
        assert result == value, (task.id, result, value)
        return [*turns, Turn(f"\\boxed{{{value}}}")]
