"""Procedural arithmetic problems and the answer styles of the style-drift scenario.

The style-drift scenario replicates the online experiment of SAO (arXiv 2607.07508, "online
learning"): the prompt lists candidate answer styles, a hidden style is rewarded, and it switches
over time. Problems are small enough that a tiny character-level model solves most of them after
its warm start, so the reward measures style alignment more than arithmetic.
"""

from __future__ import annotations

import re

import numpy as np
from pydantic import ConfigDict, Field, field_validator

from sao_env.tasks.variants import SourceParams
from sao_env.types import Task

STYLES: dict[str, str] = {
    "boxed": "\\boxed{{{}}}",
    "sentence": "The answer is {}.",
    "terse": "{}",
    "hash": "#### {}",
    "tag": "<answer>{}</answer>",
}
"""Each style's rendering of an answer; a response matches a style when it is exactly that form."""

_STYLE_PATTERNS = {
    name: re.compile("^" + re.escape(template).replace(re.escape("{}"), r"(-?\d+)") + "$")
    for name, template in ((n, t.replace("{{", "{").replace("}}", "}")) for n, t in STYLES.items())
}

OPERATORS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def render(style: str, answer: int) -> str:
    return STYLES[style].format(answer)


def parse_styled(response: str) -> tuple[str | None, int | None]:
    """Return ``(style, value)`` when the whole response is one style's form, else ``(None, None)``.

    The number must be written canonically (no leading zeros, no ``-0``); otherwise the style is
    recognised but the value is None, so the answer grades wrong.
    """
    text = response.strip()
    for name, pattern in _STYLE_PATTERNS.items():
        match = pattern.match(text)
        if match:
            digits = match.group(1)
            return name, int(digits) if str(int(digits)) == digits else None
    return None, None


class StyledArithmeticParams(SourceParams):
    """One phase's task source: arithmetic problems whose prompt lists the candidate styles."""

    model_config = ConfigDict(extra="forbid")

    digits: int = Field(2, ge=1, le=4)
    """Largest operand has this many digits (difficulty knob)."""
    operators: list[str] = ["+", "-"]
    """Operators drawn uniformly (difficulty knob): any of + - *."""
    candidates: list[str] = ["boxed", "sentence", "terse", "hash"]
    """Styles listed in the prompt, in this order."""
    rewarded_style: str = "boxed"
    """The hidden style that earns reward (reward = correct x style-match)."""

    @field_validator("operators")
    @classmethod
    def _known_operators(cls, ops: list[str]) -> list[str]:
        unknown = sorted(set(ops) - set(OPERATORS))
        if unknown or not ops:
            raise ValueError(f"operators must be a non-empty subset of {sorted(OPERATORS)}, got {ops}")
        return ops

    @field_validator("candidates")
    @classmethod
    def _known_styles(cls, styles: list[str]) -> list[str]:
        unknown = sorted(set(styles) - set(STYLES))
        if unknown or not styles:
            raise ValueError(f"unknown styles {unknown}; known: {sorted(STYLES)}")
        return styles


class StyledArithmetic:
    """Seeded generator of style-drift tasks; ``demonstrate`` writes a correct answer in a random listed style."""

    grader = "style_match"
    Params = StyledArithmeticParams

    def __init__(self, params: StyledArithmeticParams, *, name: str = "styled_arithmetic"):
        if params.rewarded_style not in STYLES:
            raise ValueError(f"unknown rewarded_style {params.rewarded_style!r}; known: {sorted(STYLES)}")
        self.params = params
        self.name = name

    def sample(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task:
        p = self.params
        high = 10**p.digits
        a, b = int(rng.integers(0, high)), int(rng.integers(0, high))
        op = p.operators[int(rng.integers(len(p.operators)))]
        if op == "*":
            b = int(rng.integers(0, 10))
        answer = OPERATORS[op](a, b)
        prompt = f"{a}{op}{b}=? styles:{','.join(p.candidates)}\n"
        return Task(
            id=f"{phase}-{index:06d}",
            prompt=prompt,
            reference={"answer": answer, "style": p.rewarded_style, "candidates": list(p.candidates)},
            grader=self.grader,
            metadata={"source": self.name, "phase": phase, "created_at": created_at,
                      "difficulty": {"digits": p.digits, "operators": list(p.operators)}},
        )

    @staticmethod
    def demonstrate(task: Task, rng: np.random.Generator) -> str:
        """A correct response in a style drawn uniformly from the task's candidates (warm-start data)."""
        candidates = task.reference["candidates"]
        return render(candidates[int(rng.integers(len(candidates)))], task.reference["answer"])
