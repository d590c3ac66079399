"""The style-drift reward: correct x style-match (SAO, arXiv 2607.07508, online experiment)."""

from __future__ import annotations

from sao_env.tasks.arithmetic import parse_styled
from sao_env.types import GradeResult, Task


def grade_style_match(task: Task, response: str) -> GradeResult:
    """Reward 1 when the response is exactly the rewarded style's form around the right answer, else 0."""
    style, value = parse_styled(response)
    correct = value is not None and value == task.reference["answer"]
    style_match = style == task.reference["style"]
    return GradeResult(
        reward=float(correct and style_match),
        details={"style": style, "value": value, "correct": correct, "style_match": style_match},
    )
