"""An optional LLM autograder (IMO-AnswerBench's official grading is by an LLM judge).

The judge, any OpenAI-compatible chat endpoint, sees the problem, the gold answer and the end of
the response, and must finish with ``\\boxed{Correct}`` or ``\\boxed{Incorrect}``. The reply must hold
exactly one such verdict box: none grades 0 with reason ``judge-unparsed``; two or more (a response
that talks the judge into a second box) make the sample fail (verdict ``failed``), as do a reply whose
content is not text and a request that cannot succeed. Requests go through ``_http.post_json`` (pooled
connections, ``Retry-After``, a retry budget, a deadline per try, a byte cap on the reply).
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable, Sequence

from sao_env.benchmarks._http import RequestFailed, env_number, max_reply_bytes, post_json
from sao_env.benchmarks._pool import each_done
from sao_env.errors import UserError
from sao_env.graders.math import extract_answer
from sao_env.types import GradeResult, Task

JUDGE_PROMPT = """You are grading the final answer of a solution to a competition mathematics problem.

Problem:
{problem}

Reference answer:
{gold}

Solution to grade (its end; the final answer is usually in \\boxed{{}}):
{response}

Decide only whether the solution's final answer is mathematically equivalent to the reference
answer. Equivalent forms count as correct (reordered sets, simplified expressions, the same
function family written differently); a missing, partial, extra or different answer is incorrect.
Ignore the quality of the reasoning. Reply with one short sentence of justification, then end
with exactly \\boxed{{Correct}} or \\boxed{{Incorrect}}."""

_VERDICT_RE = re.compile(r"\\boxed\{\s*(Correct|Incorrect)\s*\}", re.IGNORECASE)

FAILED = "failed"
"""The verdict of a sample that could not be graded (its ``reason`` says why); it counts in no score."""

DEFAULT_DEADLINE_S = 180.0
"""Seconds one judge request may take in all (``$SAO_ENV_GRADER_DEADLINE_S``, ``--grader-deadline``)."""

DEFAULT_MAX_TOKENS = 4096
"""``max_tokens`` asked of the judge: a sentence and a box, with room for a reasoning model."""


def failed_grade(reason: str, **details: Any) -> GradeResult:
    """The result of a sample that could not be graded: reward 0, verdict ``failed``, ``reason``."""
    return GradeResult(reward=0.0, details={**details, "verdict": FAILED, "reason": reason})


def read_verdict(content: Any) -> tuple[str | None, str]:
    """``(verdict, reason)`` of a judge reply's content: ``correct`` / ``wrong`` with reason ``judge``,
    ``wrong`` / ``judge-unparsed`` without a verdict box, or ``None`` and why the reply is invalid."""
    if content is None:
        content = ""
    if not isinstance(content, str):
        return None, f"judge-invalid: the reply's content is a JSON {type(content).__name__}, not text"
    found = _VERDICT_RE.findall(content)
    if not found:
        return "wrong", "judge-unparsed"
    if len(found) > 1:
        return None, f"judge-invalid: {len(found)} verdicts in the reply ({', '.join(found)}); exactly one is required"
    return ("correct" if found[0].lower() == "correct" else "wrong"), "judge"


class LLMJudge:
    """Grades math responses with a judge model behind an OpenAI-compatible chat endpoint."""

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 concurrency: int = 8, max_response_chars: int = 6000, deadline_s: float | None = None,
                 retries: int | None = None, max_bytes: int | None = None, max_tokens: int = DEFAULT_MAX_TOKENS):
        self.model = model or os.environ.get("SAO_ENV_GRADER_MODEL")
        if not self.model:
            raise UserError("--grader llm needs a judge model: pass --grader-model NAME (or set SAO_ENV_GRADER_MODEL)")
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "").rstrip("/")
        if not self.base_url:
            raise UserError("--grader llm needs an endpoint: pass --grader-base-url URL (or set OPENAI_BASE_URL)")
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY")
        self.concurrency = max(1, concurrency)
        self.max_response_chars = max_response_chars
        self.deadline_s = env_number("SAO_ENV_GRADER_DEADLINE_S", DEFAULT_DEADLINE_S) if deadline_s is None else deadline_s
        if self.deadline_s <= 0:
            raise UserError("--grader-deadline must be greater than 0")
        self.retries = retries
        self.max_bytes = max_reply_bytes(max_bytes)
        self.max_tokens = max_tokens

    @property
    def name(self) -> str:
        return f"llm:{self.model}"

    def grade(self, task: Task, response: str) -> GradeResult:
        """One verdict; a request that cannot succeed or an invalid reply gives a ``failed`` result."""
        gold = str(task.reference["answer"])
        problem = task.prompt if isinstance(task.prompt, str) else str(task.prompt)
        prompt = JUDGE_PROMPT.format(problem=problem, gold=gold, response=response[-self.max_response_chars:])
        extracted, how = extract_answer(response)
        base = {"extracted": extracted, "extraction": how, "gold": gold, "grader": self.name}
        try:
            reply = post_json(
                f"{self.base_url}/chat/completions",
                {"model": self.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0.0,
                 "max_tokens": self.max_tokens},
                api_key=self.api_key, deadline_s=self.deadline_s, retries=self.retries, max_bytes=self.max_bytes,
            )
        except RequestFailed as err:
            capped = {"capped_bytes": err.capped_bytes} if err.capped_bytes else {}
            return failed_grade(f"judge request failed: {err.reason}", **base, **capped)
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            content = ""
        verdict, reason = read_verdict(content)
        shown = content[-500:] if isinstance(content, str) else str(content)[:500]
        if verdict is None:
            return failed_grade(reason, **base, judge_reply=shown)
        return GradeResult(reward=1.0 if verdict == "correct" else 0.0,
                           details={**base, "verdict": verdict, "reason": reason, "judge_reply": shown})

    def grade_each(self, pairs: Sequence[tuple[Task, str]],
                   on_done: Callable[[int, GradeResult], None] | None = None) -> list[GradeResult]:
        """Grade ``concurrency`` at a time; ``on_done(index, result)`` as each finishes (in this thread)."""
        results: list[GradeResult | None] = [None] * len(pairs)
        for index, result in each_done(pairs, lambda pair: self.grade(*pair), self.concurrency):
            results[index] = result
            if on_done:
                on_done(index, result)
        return results

    def grade_batch(self, pairs: Sequence[tuple[Task, str]]) -> list[GradeResult]:
        return self.grade_each(pairs)
