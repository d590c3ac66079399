"""An optional LLM autograder (IMO-AnswerBench's official grading is by an LLM judge).

The judge, any OpenAI-compatible chat endpoint, sees the problem, the gold answer and the end of
the response, and must finish with ``\\boxed{Correct}`` or ``\\boxed{Incorrect}``. Anything else
grades 0 with reason ``judge-unparsed``. Requests go through ``_http.post_json`` (pooled connections,
``Retry-After``, a retry budget: ``retries`` or ``$SAO_ENV_HTTP_RETRIES``).
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

from sao_env.benchmarks._http import post_json
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


class LLMJudge:
    """Grades math responses with a judge model behind an OpenAI-compatible chat endpoint."""

    def __init__(self, model: str | None = None, *, base_url: str | None = None, api_key: str | None = None,
                 concurrency: int = 8, max_response_chars: int = 6000, timeout_s: float = 300.0,
                 retries: int | None = None):
        self.model = model or os.environ.get("SAO_ENV_GRADER_MODEL")
        if not self.model:
            raise UserError("--grader llm needs a judge model: pass --grader-model NAME (or set SAO_ENV_GRADER_MODEL)")
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "").rstrip("/")
        if not self.base_url:
            raise UserError("--grader llm needs an endpoint: pass --grader-base-url URL (or set OPENAI_BASE_URL)")
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY")
        self.concurrency = max(1, concurrency)
        self.max_response_chars = max_response_chars
        self.timeout_s = timeout_s
        self.retries = retries

    @property
    def name(self) -> str:
        return f"llm:{self.model}"

    def grade(self, task: Task, response: str) -> GradeResult:
        gold = str(task.reference["answer"])
        problem = task.prompt if isinstance(task.prompt, str) else str(task.prompt)
        prompt = JUDGE_PROMPT.format(problem=problem, gold=gold, response=response[-self.max_response_chars:])
        reply = post_json(
            f"{self.base_url}/chat/completions",
            {"model": self.model, "messages": [{"role": "user", "content": prompt}], "temperature": 0.0},
            api_key=self.api_key, timeout_s=self.timeout_s, retries=self.retries,
        )
        try:
            text = reply["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            text = ""
        found = _VERDICT_RE.findall(text)
        extracted, how = extract_answer(response)
        if not found:
            verdict, reason = "wrong", "judge-unparsed"
        else:
            verdict = "correct" if found[-1].lower() == "correct" else "wrong"
            reason = "judge"
        return GradeResult(
            reward=1.0 if verdict == "correct" else 0.0,
            details={"extracted": extracted, "extraction": how, "gold": gold, "verdict": verdict,
                     "reason": reason, "grader": self.name, "judge_reply": text[-500:]},
        )

    def grade_batch(self, pairs: Sequence[tuple[Task, str]]) -> list[GradeResult]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda pair: self.grade(*pair), pairs))
