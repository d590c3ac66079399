"""Math grading: extract the final answer, compare it with the gold answer using math-verify.

Extraction (in this process, linear time, see :func:`extract_answer`). By default only the last
*closed* ``\\boxed{...}`` or ``\\fbox{...}`` counts, as on MathArena (braces balanced, ``\\{`` and
``\\}`` are literal braces; a box nested directly inside a box is unwrapped); a response without
one grades 0 with reason ``no-answer``. Fallbacks are a named option (``fallback``, a suite's
``answer_fallback``), never the default, because each lets noise score:

- ``answer-is``: without a closed box, the text after the last "answer is" / "answer:" on its
  line, without ``$``, ``\\(``, ``**`` and a final full stop;
- ``last-number``: ``answer-is``, then the last number in the response (``-12``, ``3.5``,
  ``7/2``); a random string such as ``'_7>JSH3!CA'`` then "answers" 3, and a policy under RL
  can learn to list numbers, so it is for reading untrained base models only.

Any text is accepted: lone surrogates (invalid Unicode) and NUL bytes are replaced by U+FFFD
before extraction (:func:`clean_text`), and an extracted answer longer than
:data:`MAX_ANSWER_CHARS` grades 0 with reason ``answer-too-long`` without reaching math-verify.

Comparison (in a worker process, see :class:`MathGradingPool`): the gold answer and the extracted
answer are both read as LaTeX math (``$`` signs removed) by ``math_verify.parse`` and compared by
``math_verify.verify``: numeric equality to 6 decimals, symbolic equivalence, sets (a list answer
such as HMMT's ``"a, b"`` is an unordered set, so ``"b, a"`` matches), intervals (also against an
inequality), tuples (ordered) and equations (``x = 5`` matches ``5``). A gold answer that is
prose ("odd $n$", "all powers of 2") or that math-verify cannot parse is compared as normalised
text instead (reason ``string-match`` / ``string-mismatch``), and so is a gold answer spread over
several lines (piecewise answers, which math-verify would read only in part); such rows are what
the optional LLM autograder of IMO-AnswerBench is for.

Every parse and verify runs in a worker process with a hard timeout: math-verify's own timeout
uses ``signal.alarm``, which neither works off the main thread nor interrupts a long computation
inside sympy's C-level integer arithmetic (``9^{9^{9^{9}}}``). A worker that overruns is killed
and replaced, and the answer grades 0 with reason ``timeout``; the pool keeps serving. Workers
start from any main program (a script without ``if __name__ == "__main__":``, ``python -``, a
notebook): they never import the caller's ``__main__``.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import re
import sys
import threading
import time
import types
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing.connection import Connection, wait
from typing import Any, Iterable, Literal, Sequence

from sao_env.types import GradeResult, Task

GRADER_NAME = "math-verify"
DEFAULT_TIMEOUT_S = 5.0
"""Seconds one comparison (parse gold, parse answer, verify) may take before it grades 0."""
WORKER_STARTUP_TIMEOUT_S = 120.0
"""Seconds a fresh worker may take to import math-verify and report ready."""

# --------------------------------------------------------------------------------------------
# Extraction (runs in the calling process: plain string scanning, linear in the response length)
# --------------------------------------------------------------------------------------------

Fallback = Literal["none", "answer-is", "last-number"]
FALLBACKS: tuple[str, ...] = ("none", "answer-is", "last-number")
"""Extraction rules, strictest first: the last box only; then "answer is ..."; then the last number."""
MAX_ANSWER_CHARS = 2000
"""An extracted answer longer than this grades 0 (reason ``answer-too-long``) without a comparison."""

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_IS_RE = re.compile(r"(?i)\banswer\s*(?:is|:)\s*:?\s*(.+)")
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?")


def _brace_pairs(text: str) -> dict[int, int]:
    """Map each ``{`` that is closed to its ``}`` (one pass); ``\\{`` and ``\\}`` are literal braces."""
    pairs, stack, i = {}, [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
        i += 1
    return pairs


def last_boxed(text: str) -> str | None:
    """Content of the last closed ``\\boxed{...}`` / ``\\fbox{...}``, or None."""
    pairs = _brace_pairs(text)
    for match in reversed(list(_BOX_RE.finditer(text))):
        close = pairs.get(match.end() - 1)
        if close is not None:
            content = text[match.end() : close].strip()
            while (inner := _BOX_RE.match(content)) and _brace_pairs(content).get(inner.end() - 1) == len(content) - 1:
                content = content[inner.end() : -1].strip()  # \boxed{\boxed{x}} -> x
            return content
    return None


def _clean_inline(answer: str) -> str:
    answer = answer.strip().replace("**", "")
    for left, right in (("\\(", "\\)"), ("\\[", "\\]"), ("$", "$")):
        answer = answer.replace(left, " ").replace(right, " ")
    answer = answer.strip().rstrip(".").strip()
    return answer


def clean_text(text: str) -> str:
    """``text`` with lone surrogates (invalid Unicode, e.g. JSON ``"\\udc80"``) and NUL bytes
    replaced by U+FFFD, so that it can be graded, printed and written as UTF-8."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return text


def extract_answer(response: str, fallback: Fallback = "none") -> tuple[str | None, str]:
    """Return ``(answer, how)``; ``how`` is ``boxed``, ``answer-is``, ``last-number`` or ``none``.

    ``fallback`` (see the module docstring): ``none`` reads the last closed box only;
    ``answer-is`` and ``last-number`` add the fallbacks, in that order, for responses without one.
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"unknown answer fallback {fallback!r}; known: {', '.join(FALLBACKS)}")
    response = clean_text(response)
    boxed = last_boxed(response)
    if boxed is not None:
        return boxed, "boxed"
    if fallback == "none":
        return None, "none"
    matches = list(_ANSWER_IS_RE.finditer(response))
    for match in reversed(matches):
        cleaned = _clean_inline(match.group(1))
        if cleaned:
            return cleaned, "answer-is"
    if fallback == "last-number":
        numbers = _NUMBER_RE.findall(response)
        if numbers:
            return numbers[-1].replace(" ", ""), "last-number"
    return None, "none"


# --------------------------------------------------------------------------------------------
# Comparison (runs inside worker processes)
# --------------------------------------------------------------------------------------------

_PROSE_WORD_RE = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{3,}")
_LATEX_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox|textit|operatorname)\s*\{([^{}]*)\}")


def _strip_math_delimiters(answer: str) -> str:
    answer = answer.strip()
    for token in ("$", "\\(", "\\)", "\\[", "\\]"):
        answer = answer.replace(token, " ")
    return answer.strip().rstrip(".").strip()


def looks_like_prose(answer: str) -> bool:
    """True when the answer holds words (``odd $n$``, ``for some $a>0$``), not only math."""
    plain = _LATEX_TEXT_RE.sub(r" \1 ", _strip_math_delimiters(answer))
    return bool(_PROSE_WORD_RE.search(plain))


def normalise_text(answer: str) -> str:
    """Text used for string comparison: no math delimiters, ``\\text{}`` unwrapped, no spaces, lower case."""
    plain = _LATEX_TEXT_RE.sub(r"\1", _strip_math_delimiters(answer))
    plain = plain.replace("\\left", "").replace("\\right", "").replace("\\,", "").replace("\\!", "")
    return re.sub(r"\s+", "", plain).lower()


def _mv_parse(answer: str) -> list:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    return parse(
        "$" + _strip_math_delimiters(answer) + "$",
        [LatexExtractionConfig(), ExprExtractionConfig()],
        parsing_timeout=None,  # the pool enforces the timeout by killing the worker
    )


@lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple[list, bool]:
    """(parsed, usable): gold answers repeat k times per problem, so each worker caches them."""
    from sympy import Basic, MatrixBase

    parsed = _mv_parse(gold)
    multi_line = "\n" in gold.strip()  # piecewise answers ("x (a >= 2)\n0 (a = 1)") parse only in part
    usable = bool(parsed) and isinstance(parsed[0], (Basic, MatrixBase)) and not looks_like_prose(gold) \
        and not multi_line
    return parsed, usable


def compare(gold: str, answer: str) -> tuple[bool, str]:
    """``(correct, reason)`` for one gold/extracted pair; no timeout here (run it in a worker)."""
    from math_verify import verify

    gold_parsed, usable = _parse_gold(gold)
    if not usable:
        same = normalise_text(gold) == normalise_text(answer) and normalise_text(gold) != ""
        return same, "string-match" if same else "string-mismatch"
    parsed = _mv_parse(answer)
    if not parsed:
        return False, "unparsed-answer"
    ok = verify(gold_parsed, parsed, timeout_seconds=None, allow_set_relation_comp=True)
    return bool(ok), "equivalent" if ok else "not-equivalent"


def _worker_main(conn: Connection, memory_limit_mb: int | None) -> None:
    """Serve ``(job_id, gold, answer)`` requests until ``None`` arrives.

    SIGINT is ignored: Ctrl-C in a terminal reaches the whole process group, and the command (the parent)
    answers it with its one line; a worker ends when its pipe closes or the pool kills it, never with a
    ``KeyboardInterrupt`` traceback of its own."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import logging

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled" warnings
    if memory_limit_mb:
        try:
            import resource

            limit = memory_limit_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ImportError, ValueError, OSError):
            pass
    import math_verify  # noqa: F401  (import before reporting ready, so timeouts measure work)

    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        job_id, gold, answer = job
        try:
            ok, reason = compare(gold, answer)
        except MemoryError:
            ok, reason = False, "error: MemoryError"
        except Exception as err:  # noqa: BLE001  (a grader must not crash the evaluation)
            ok, reason = False, f"error: {type(err).__name__}"
        try:
            conn.send((job_id, ok, reason))
        except (BrokenPipeError, OSError):
            return


# --------------------------------------------------------------------------------------------
# The pool
# --------------------------------------------------------------------------------------------


def _context():
    """forkserver (math-verify preloaded once, so restarting a killed worker is cheap), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        try:
            ctx.set_forkserver_preload(["math_verify", "sao_env.graders.math"])
        except Exception:  # noqa: BLE001
            pass
        return ctx
    return multiprocessing.get_context("spawn")


_MAIN_LOCK = threading.Lock()


@contextmanager
def _main_hidden():
    """Show multiprocessing an empty ``__main__`` while a worker starts.

    spawn and forkserver children import the parent's main module before they run their target:
    a script without an ``if __name__ == "__main__":`` guard would run again inside every worker
    (and fail there), and ``python -`` has no file to import. The workers need nothing from it.
    """
    with _MAIN_LOCK:
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")  # no __file__, __spec__ None
        try:
            yield
        finally:
            sys.modules["__main__"] = main


class _Worker:
    def __init__(self, ctx, memory_limit_mb: int | None):
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_worker_main, args=(child, memory_limit_mb), daemon=True)
        with _main_hidden():
            self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout_s: float) -> bool:
        if not self.ready and self.conn.poll(timeout_s):
            try:
                self.ready = self.conn.recv() == "ready"
            except (EOFError, OSError):
                self.ready = False
        return self.ready

    def kill(self) -> None:
        try:
            self.process.kill()
            self.process.join(timeout=5)
        finally:
            self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
            self.process.join(timeout=2)
        except (BrokenPipeError, OSError):
            pass
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()


@dataclass(frozen=True)
class Verdict:
    """What a worker decided for one pair: ``correct``, ``reason`` and the wall time it took."""

    correct: bool
    reason: str
    seconds: float


class MathGradingPool:
    """Persistent worker processes that compare answers, each comparison under a hard timeout.

    Jobs are dispatched one at a time to idle workers; the parent waits on all busy workers'
    pipes with the nearest deadline. A worker past its deadline is killed (SIGKILL) and
    replaced, and its job gets reason ``timeout``; a worker that dies gets ``error: worker died``.
    """

    def __init__(self, workers: int | None = None, *, memory_limit_mb: int | None = 4096):
        self.num_workers = max(1, workers or min(os.cpu_count() or 1, 4))
        self.memory_limit_mb = memory_limit_mb
        self._ctx = _context()
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self.restarts = 0
        """Workers killed and replaced so far (timeouts and crashes)."""

    def _spawn(self) -> _Worker:
        worker = _Worker(self._ctx, self.memory_limit_mb)
        if not worker.wait_ready(WORKER_STARTUP_TIMEOUT_S):
            worker.kill()
            raise RuntimeError("a math grading worker did not start")
        return worker

    def _ensure_workers(self) -> None:
        self._workers = [w for w in self._workers if w.process.is_alive()]
        while len(self._workers) < self.num_workers:
            self._workers.append(self._spawn())

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self.restarts += 1
        self._workers[self._workers.index(worker)] = self._spawn()

    def verify_many(self, pairs: Sequence[tuple[str, str]],
                    timeout_s: float | Sequence[float] = DEFAULT_TIMEOUT_S) -> list[Verdict]:
        """Compare each ``(gold, answer)``; results in input order. ``timeout_s`` is every pair's
        limit, or one limit per pair."""
        if not pairs:
            return []
        limits = [float(timeout_s)] * len(pairs) if isinstance(timeout_s, (int, float)) else [float(t) for t in timeout_s]
        if len(limits) != len(pairs):
            raise ValueError(f"{len(limits)} timeouts for {len(pairs)} pairs")
        with self._lock:
            self._ensure_workers()
            results: list[Verdict | None] = [None] * len(pairs)
            pending = deque(range(len(pairs)))
            busy: dict[_Worker, tuple[int, float, float]] = {}  # worker -> (job, started, deadline)
            while pending or busy:
                for worker in self._workers:
                    if pending and worker not in busy:
                        job = pending.popleft()
                        gold, answer = pairs[job]
                        try:
                            worker.conn.send((job, gold, answer))
                        except (BrokenPipeError, OSError):
                            pending.appendleft(job)
                            self._replace(worker)
                            break
                        now = time.monotonic()
                        busy[worker] = (job, now, now + limits[job])
                if not busy:
                    continue
                nearest = min(deadline for _, _, deadline in busy.values())
                ready = wait([w.conn for w in busy], timeout=max(0.0, nearest - time.monotonic()))
                now = time.monotonic()
                for worker in list(busy):
                    job, started, deadline = busy[worker]
                    if worker.conn in ready:
                        try:
                            job_id, ok, reason = worker.conn.recv()
                        except (EOFError, OSError):
                            del busy[worker]
                            results[job] = Verdict(False, "error: worker died", now - started)
                            self._replace(worker)
                            continue
                        del busy[worker]
                        results[job_id] = Verdict(bool(ok), reason, now - started)
                    elif now >= deadline:
                        del busy[worker]
                        results[job] = Verdict(False, "timeout", now - started)
                        self._replace(worker)
            return [r for r in results if r is not None]

    def close(self) -> None:
        with self._lock:
            for worker in self._workers:
                worker.stop()
            self._workers = []


_POOLS: dict[int | None, MathGradingPool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(workers: int | None = None) -> MathGradingPool:
    """The process-wide pool with ``workers`` workers (created on first use, closed at exit)."""
    with _POOLS_LOCK:
        if workers not in _POOLS:
            _POOLS[workers] = MathGradingPool(workers)
        return _POOLS[workers]


@atexit.register
def _close_pools() -> None:
    for pool in list(_POOLS.values()):
        try:
            pool.close()
        except Exception:  # noqa: BLE001
            pass
    _POOLS.clear()


# --------------------------------------------------------------------------------------------
# Public grader API
# --------------------------------------------------------------------------------------------


def gold_answer(task: Task | str) -> str:
    if isinstance(task, str):
        return task
    try:
        return str(task.reference["answer"])
    except KeyError as err:
        raise ValueError(f"task {task.id!r} has no reference['answer'] for the math grader") from err


def grade_math_batch(
    pairs: Iterable[tuple[Task | str, str]],
    timeout_s: float | Sequence[float] = DEFAULT_TIMEOUT_S,
    *,
    workers: int | None = None,
    fallback: Fallback = "none",
) -> list[GradeResult]:
    """Grade ``(task or gold answer, response)`` pairs in parallel; one GradeResult per pair, in order.

    ``fallback`` names the extraction rule (module docstring; default: the last box only);
    ``timeout_s`` is each comparison's limit, or one limit per pair.
    ``details``: ``extracted`` (None when nothing was found), ``extraction`` (how), ``gold``,
    ``verdict`` (``correct``/``wrong``), ``reason``, ``grader`` (``math-verify``); no wall-clock
    figure, so that a run's episode log stays byte-identical for its seed.
    """
    items = [(gold_answer(task), response) for task, response in pairs]
    limits = [timeout_s] * len(items) if isinstance(timeout_s, (int, float)) else list(timeout_s)
    extracted = [extract_answer(response, fallback) for _, response in items]
    too_long = {i for i, (answer, _) in enumerate(extracted) if answer is not None and len(answer) > MAX_ANSWER_CHARS}
    jobs = [(i, gold, answer) for i, ((gold, _), (answer, _)) in enumerate(zip(items, extracted))
            if answer is not None and i not in too_long]
    verdicts = (get_pool(workers).verify_many([(gold, answer) for _, gold, answer in jobs], [limits[i] for i, _, _ in jobs])
                if jobs else [])
    by_index: dict[int, Verdict] = {i: v for (i, _, _), v in zip(jobs, verdicts)}
    results = []
    for i, ((gold, _), (answer, how)) in enumerate(zip(items, extracted)):
        default = Verdict(False, "answer-too-long" if i in too_long else "no-answer", 0.0)
        verdict = by_index.get(i, default)
        details: dict[str, Any] = {
            "extracted": answer if i not in too_long else answer[:200] + f"...[{len(answer) - 200} more]",
            "extraction": how,
            "gold": gold,
            "verdict": "correct" if verdict.correct else "wrong",
            "reason": verdict.reason,
            "grader": GRADER_NAME,
        }
        results.append(GradeResult(reward=1.0 if verdict.correct else 0.0, details=details))
    return results


def grade_math(task: Task, response: str) -> GradeResult:
    """Grade one response against ``task.reference["answer"]``: the last box only (module docstring)."""
    return grade_math_batch([(task, response)])[0]
