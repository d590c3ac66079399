"""Graders: ``grade(task, response) -> GradeResult`` with a reward in [0, 1], found by name.

Entries are ``"module:function"`` strings resolved on first use, so that a grader's heavy
dependencies (sympy, swebench) are imported only by the runs that need them.
"""

from __future__ import annotations

import importlib
from typing import Callable

from sao_env.types import GradeResult, Task

Grader = Callable[[Task, str], GradeResult]

GRADERS: dict[str, str] = {
    "style_match": "sao_env.graders.style:grade_style_match",
    "math": "sao_env.graders.math:grade_math",
    "swebench": "sao_env.benchmarks.swebench:grade_swebench",
    "forge_tests": "sao_env.tasks.forge.grading:grade_forge",
}


def get_grader(name: str) -> Grader:
    """Return the grader registered under ``name``; a ValueError names the known ones otherwise."""
    if name not in GRADERS:
        raise ValueError(f"unknown grader {name!r}; known: {', '.join(sorted(GRADERS))}")
    module, function = GRADERS[name].split(":")
    return getattr(importlib.import_module(module), function)


def grade(task: Task, response: str) -> GradeResult:
    return get_grader(task.grader)(task, response)
