"""Task sources: seeded procedural generators and streams over benchmark rows.

A source is built from ``(name, params)`` as written in a scenario's YAML and offers
``sample(rng, *, phase, created_at, index) -> Task`` and ``demonstrate(task, rng)``: a correct
response (``str``) for single-turn tasks, or a list of ``sao_env.types.Turn`` (actions and the
observations the task's environment answers with) for multi-turn ones; the supervised warm start
trains on them. A source may also offer ``sample_heldout(rng, *, phase, created_at, index)`` when
its evaluation items must come from a split disjoint from training (benchmark streams), and
``manifest() -> dict`` describing that split (written to the run directory).

Entries are ``"module:Class"`` strings imported on first use; each class has a ``Params`` pydantic
model that validates the YAML ``params``. The procedural sources' models derive from
``sao_env.tasks.variants.SourceParams``: a prompt pool (``pool``) and a hidden difficulty class
(``difficulty_class``) for any of them.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

import numpy as np

from sao_env.types import Task, Turn


class TaskSource(Protocol):
    name: str

    def sample(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task: ...

    def demonstrate(self, task: Task, rng: np.random.Generator) -> str | list[Turn]: ...


TASK_SOURCES: dict[str, str] = {
    "styled_arithmetic": "sao_env.tasks.arithmetic:StyledArithmetic",
    "olympiad": "sao_env.tasks.olympiad:OlympiadSource",
    "tool_arithmetic": "sao_env.tasks.tool_math:ToolArithmeticSource",
    "benchmark": "sao_env.tasks.benchmark_stream:BenchmarkSource",
    "forge_repo": "sao_env.tasks.forge:ForgeSource",
    "swebench_verified": "sao_env.tasks.swebench_tasks:SWEBenchSource",
}
"""name -> ``"module:Class"``; the class's ``Params`` validates the source's parameters."""


def source_class(name: str) -> type:
    if name not in TASK_SOURCES:
        raise ValueError(f"unknown task source {name!r}; known: {', '.join(sorted(TASK_SOURCES))}")
    module, cls = TASK_SOURCES[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_source(name: str, params: dict[str, Any]) -> TaskSource:
    """The source ``name`` built from its YAML ``params``; one that asks for a prompt pool or a difficulty
    class (``sao_env.tasks.variants``) comes wrapped in ``VariantSource``."""
    from sao_env.tasks.variants import VariantSource, variant_active

    source_cls = source_class(name)
    source = source_cls(source_cls.Params(**params), name=name)
    return VariantSource(source) if variant_active(source.params) else source
