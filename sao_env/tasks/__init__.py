"""Task sources: seeded procedural generators (and, in sao_env.benchmarks, benchmark loaders).

A source is built from ``(name, params)`` as written in a scenario's YAML and offers
``sample(rng, *, phase, created_at, index) -> Task`` and ``demonstrate(task, rng) -> str``
(a correct response, used by the supervised warm start).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from sao_env.tasks.arithmetic import StyledArithmetic, StyledArithmeticParams
from sao_env.types import Task


class TaskSource(Protocol):
    name: str

    def sample(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task: ...

    def demonstrate(self, task: Task, rng: np.random.Generator) -> str: ...


TASK_SOURCES: dict[str, tuple[type, type]] = {
    "styled_arithmetic": (StyledArithmetic, StyledArithmeticParams),
}
"""name -> (source class, its params model)."""


def build_source(name: str, params: dict[str, Any]) -> TaskSource:
    if name not in TASK_SOURCES:
        raise ValueError(f"unknown task source {name!r}; known: {', '.join(sorted(TASK_SOURCES))}")
    source_cls, params_cls = TASK_SOURCES[name]
    return source_cls(params_cls(**params), name=name)
