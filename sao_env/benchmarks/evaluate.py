"""Evaluate a model on benchmark suites, or grade saved responses; write results (and, when asked, a leaderboard row).

Outputs of one suite (in its output folder):

- ``samples.jsonl``: one line per sample: id, sample index, prompt, response, extracted answer,
  gold, verdict, reward, reason, grader, completion tokens, finished, category.
- ``summary.json``: suite, model, accuracy (avg@k, a fraction in [0, 1]), n (samples graded),
  problems, k, ci95_low/ci95_high (the Wilson score interval of the per-problem accuracies, see metrics.py),
  pass_at_k, by_category, grader, answer_fallback (where answers may come from besides the last
  box), date, code version, decoding settings, token counts, timings and the count of responses
  that held invalid Unicode or NUL bytes (``sanitized``, graded after replacing them).
- with ``EvalOptions.leaderboard`` (``--leaderboard DIR``): the row of (model, suite, k) in
  ``DIR/benchmarks.csv``, replaced by each new evaluation, and ``benchmarks.md`` / ``index.html``.
- ``responses.jsonl`` (eval): the generated responses; with ``--backend openai`` each is appended as it
  finishes, with a key of the model name, decoding and prompt, and a rerun with the same settings
  reuses these and asks only for the rest (delete the file to sample again).

Finished work is kept: ``samples.jsonl`` gets each graded sample appended as it is graded (then is
rewritten in order at the end), and a rerun reuses the LLM judge's verdicts on the same responses. A
sample whose request cannot succeed gets verdict ``failed`` with its reason, counts in no score
(``summary.json``: ``failed``), keeps the leaderboard unchanged, and is tried again by a rerun.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import inspect
import json
import re
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Literal, Sequence

from sao_env.benchmarks import metrics
from sao_env.benchmarks.loaders import make_loader
from sao_env.benchmarks.suites import SuiteSpec
from sao_env.errors import UserError
from sao_env.types import GradeResult, Task


@dataclass
class EvalOptions:
    """Overrides of a suite's defaults and the grading set-up (None = the suite's value)."""

    k: int | None = None
    """Samples per problem."""
    limit: int | None = None
    """Evaluate only the first N problems."""
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int = 0
    """Sampling seed (sample j of the openai backend uses seed + j)."""
    grader: Literal["rule", "llm"] = "rule"
    """``rule``: math-verify; ``llm``: the judge below (math suites only)."""
    answer_fallback: Literal["none", "answer-is", "last-number"] | None = None
    """Where a math answer may come from besides the last box (None: the suite's ``answer_fallback``)."""
    judge: Any = None
    """An ``LLMJudge`` when ``grader == "llm"``."""
    grading_timeout_s: float = 5.0
    """Hard timeout of one math comparison."""
    grading_workers: int | None = None
    """Math grading worker processes (default: min(cores, 4))."""
    leaderboard: Path | None = None
    """Leaderboard folder the result is recorded in (``benchmarks.csv``, ``.md``, ``index.html``); None: none."""
    show_progress: bool = True
    swebench_workers: int = 4
    """Parallel Docker containers for SWE-bench."""


@dataclass
class SuiteRun:
    """A suite with its loaded (and possibly limited) tasks."""

    spec: SuiteSpec
    tasks: list[Task]
    total: int
    """Problems in the suite before ``limit``."""
    source: str
    missing_columns: list[str] = field(default_factory=list)


def prepare_suite(spec: SuiteSpec, data: str | Path | None, limit: int | None = None) -> SuiteRun:
    """Load a suite's tasks (hub/URL by default, ``data`` when given) and keep the first ``limit``."""
    if limit is not None and limit < 1:
        raise UserError("--limit must be at least 1")
    loader = make_loader(spec, data)
    tasks = loader.load()
    total = len(tasks)
    return SuiteRun(spec, tasks[:limit] if limit else tasks, total, loader.source,
                    list(getattr(loader, "missing_columns", [])))


# ----------------------------------------------------------------------------- progress


PLAIN_PROGRESS_S = 30.0
"""With stderr not a terminal (a log file, nohup, CI), progress is a plain line at the start, every this
many seconds and at the end, instead of a bar."""


class _Progress:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._progress = None

    def __enter__(self) -> "_Progress":
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), console=Console(stderr=True))
            self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def task(self, description: str, total: int):
        if self._progress is not None:
            task_id = self._progress.add_task(description, total=total)
            return lambda advance: self._progress.advance(task_id, advance)
        if not self.enabled:
            return lambda advance: None
        start = time.monotonic()
        state = {"done": 0, "said": start}

        def say() -> None:
            share = f" ({100 * state['done'] / total:.1f}%)" if total else ""
            print(f"sao-env: {description}: {state['done']:,} of {total:,}{share}, {time.monotonic() - start:.0f} s",
                  file=sys.stderr, flush=True)

        def advance(n: int) -> None:
            state["done"] += n
            now = time.monotonic()
            if now - state["said"] >= PLAIN_PROGRESS_S or state["done"] >= total:
                state["said"] = now
                say()

        say()
        return advance


# ----------------------------------------------------------------------------- grading


def answer_fallback(spec: SuiteSpec, options: EvalOptions) -> str:
    """The extraction rule of a math suite's rule grader: the option's, else the suite's."""
    return options.answer_fallback or spec.answer_fallback


def grader_name(spec: SuiteSpec, options: EvalOptions) -> str:
    if spec.grader == "swebench":
        return "swebench"
    return options.judge.name if options.grader == "llm" else "math-verify"


def grade_responses(
    run: SuiteRun,
    samples: Sequence[tuple[Task, int, str]],
    options: EvalOptions,
    *,
    model_name: str,
    out_dir: Path,
    progress=None,
    on_graded: Callable[[int, GradeResult], None] | None = None,
) -> list[GradeResult]:
    """Grade ``(task, sample index, response)`` triples with the suite's grader; ``on_graded(index, result)``
    as each is graded."""
    advance = progress or (lambda _: None)
    spec = run.spec
    if spec.grader == "swebench":
        results = _grade_swebench(run, samples, options, model_name=model_name, out_dir=out_dir, advance=advance)
        for index, result in enumerate(results):
            if on_graded:
                on_graded(index, result)
        return results
    if options.grader == "llm":
        if options.judge is None:
            raise UserError("--grader llm needs a judge model (--grader-model)")
        return _grade_with_judge(options.judge, samples, advance, on_graded)
    from sao_env.graders.math import grade_math_batch

    results = []
    for chunk in _chunks(list(samples), 64):
        graded = grade_math_batch([(t, r) for t, _, r in chunk], timeout_s=options.grading_timeout_s,
                                  workers=options.grading_workers, fallback=answer_fallback(spec, options))
        for result in graded:
            if on_graded:
                on_graded(len(results), result)
            results.append(result)
        advance(len(chunk))
    return results


def _grade_with_judge(judge, samples, advance, on_graded) -> list[GradeResult]:
    """The judge's verdicts, each handed to ``on_graded`` as it arrives (a judge without ``grade_each``: in chunks)."""
    pairs = [(t, r) for t, _, r in samples]
    if hasattr(judge, "grade_each"):
        def done(index: int, result: GradeResult) -> None:
            if on_graded:
                on_graded(index, result)
            advance(1)

        return judge.grade_each(pairs, done)
    results = []
    for chunk in _chunks(pairs, 32):
        for result in judge.grade_batch(chunk):
            if on_graded:
                on_graded(len(results), result)
            results.append(result)
        advance(len(chunk))
    return results


def _grade_swebench(run, samples, options, *, model_name, out_dir, advance) -> list[GradeResult]:
    from sao_env.benchmarks import swebench

    swebench.require_docker()
    swebench.require_full_rows([swebench.instance_row(t) for t in run.tasks], source=run.source)
    results: dict[tuple[str, int], GradeResult] = {}
    by_sample: dict[int, list[tuple[Task, str]]] = defaultdict(list)
    for task, j, response in samples:
        by_sample[j].append((task, response))
    for j, pairs in sorted(by_sample.items()):
        predictions = [swebench.prediction(t.id, model_name, swebench.extract_patch(r)) for t, r in pairs]
        graded = swebench.run_harness([t for t, _ in pairs], predictions, workdir=out_dir / "swebench",
                                      run_id=f"sao-env-sample{j}", max_workers=options.swebench_workers)
        for task, _ in pairs:
            results[(task.id, j)] = graded[task.id]
        advance(len(pairs))
    return [results[(t.id, j)] for t, j, _ in samples]


EXTRACTION_RULES = {
    "none": "the last closed \\boxed{} only",
    "answer-is": "the last closed \\boxed{}, else the text after the last 'answer is'",
    "last-number": "the last closed \\boxed{}, else 'answer is', else the last number",
}
"""How each ``answer_fallback`` extracts a math answer (written into every summary)."""


def _sanitized(samples: list[tuple[Task, int, str]]) -> tuple[list[tuple[Task, int, str]], int]:
    """Samples with lone surrogates and NUL bytes replaced (``graders.math.clean_text``), and how many changed."""
    from sao_env.graders.math import clean_text

    out, changed = [], 0
    for task, j, response in samples:
        cleaned = response if response is None else clean_text(response)
        changed += cleaned != response
        out.append((task, j, cleaned))
    return out, changed


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# ----------------------------------------------------------------------------- finished work, kept


SAMPLES_FILE = "samples.jsonl"
RESPONSES_FILE = "responses.jsonl"
KEPT_VERDICTS = ("correct", "wrong")
"""Verdicts a rerun reuses (a ``failed`` sample is tried again)."""


class _Lines:
    """An append-only JSONL file that starts with ``records``; each line is flushed as it is written."""

    def __init__(self, path: Path, records: Sequence[dict] = ()):
        path.parent.mkdir(parents=True, exist_ok=True)
        fresh = path.with_name(path.name + ".tmp")
        fresh.write_text("".join(self.line(record) for record in records), encoding="utf-8")
        fresh.replace(path)  # the records kept so far are never lost to a kill while this file starts
        self.handle = path.open("a", encoding="utf-8")

    @staticmethod
    def line(record: dict) -> str:
        return json.dumps(record, ensure_ascii=False, default=str) + "\n"

    def add(self, record: dict) -> None:
        self.handle.write(self.line(record))
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()


def _read_lines(path: Path) -> list[dict]:
    """The JSON objects of a JSONL file written by ``_Lines``; a line cut short by a kill is skipped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def sample_record(task: Task, j: int, response: str | None, grade: GradeResult, n_tokens: int | None,
                  done: bool | None, grader: str) -> dict[str, Any]:
    """One line of ``samples.jsonl`` (with the end of the judge's reply where an LLM judge graded it)."""
    details = grade.details
    return {
        "id": task.id, "sample": j, "prompt": task.prompt, "response": response,
        "extracted": details.get("extracted"), "gold": details.get("gold", task.reference.get("answer")),
        "verdict": details.get("verdict"), "reward": grade.reward, "reason": details.get("reason"),
        "grader": details.get("grader", grader), "tokens": n_tokens, "finished": done,
        "category": task.metadata.get("category"),
        **({"judge_reply": details["judge_reply"]} if "judge_reply" in details else {}),
    }


def is_failed(grade: GradeResult) -> bool:
    return grade.details.get("verdict") == "failed"


def _say_capped(suite: str, task_id: str, j: int, what: str) -> None:
    """The one line printed for each sample whose reply went over the byte cap."""
    print(f"sao-env: {suite} {task_id}#{j}: {what}; the sample failed", file=sys.stderr, flush=True)


def _reusable_verdicts(path: Path, samples: Sequence[tuple[Task, int, str | None]], grader: str) -> dict[int, GradeResult]:
    """Samples already graded by ``grader`` in an earlier run's ``samples.jsonl``, same response, by index."""
    where = {(t.id, j): index for index, (t, j, _) in enumerate(samples)}
    reused = {}
    for record in _read_lines(path):
        index = where.get((str(record.get("id")), record.get("sample")))
        if (index is None or record.get("grader") != grader or record.get("verdict") not in KEPT_VERDICTS
                or record.get("response") != samples[index][2]):
            continue
        details = {key: record[key] for key in ("extracted", "gold", "verdict", "reason", "grader", "judge_reply")
                   if key in record}
        reused[index] = GradeResult(reward=float(record.get("reward") or 0.0), details=details)
    return reused


def grade_and_keep(
    run: SuiteRun,
    samples: Sequence[tuple[Task, int, str | None]],
    options: EvalOptions,
    *,
    model_name: str,
    out_dir: Path,
    bars: "_Progress",
    known: dict[int, GradeResult],
    tokens: Sequence[int | None],
    finished: Sequence[bool | None],
) -> list[GradeResult]:
    """Grade the samples not in ``known``, appending each to ``samples.jsonl`` as it is graded.

    With the LLM judge, verdicts an earlier run left in ``samples.jsonl`` for the same responses are reused."""
    grader = grader_name(run.spec, options)
    known = dict(known)
    if options.grader == "llm" and run.spec.grader != "swebench":
        known.update({i: g for i, g in _reusable_verdicts(out_dir / SAMPLES_FILE, samples, grader).items()
                      if i not in known})
    lines = _Lines(out_dir / SAMPLES_FILE, [sample_record(*samples[i], known[i], tokens[i], finished[i], grader)
                                            for i in sorted(known)])
    todo = [i for i in range(len(samples)) if i not in known]

    def on_graded(position: int, grade: GradeResult) -> None:
        index = todo[position]
        task, j, response = samples[index]
        lines.add(sample_record(task, j, response, grade, tokens[index], finished[index], grader))
        if grade.details.get("capped_bytes"):
            _say_capped(run.spec.name, task.id, j, f"the judge's reply capped at {grade.details['capped_bytes']:,} bytes")

    try:
        graded = grade_responses(run, [samples[i] for i in todo], options, model_name=model_name, out_dir=out_dir,
                                 progress=bars.task(f"{run.spec.name}: grading", len(todo)), on_graded=on_graded)
    finally:
        lines.close()
    results = dict(known)
    results.update(zip(todo, graded))
    return [results[i] for i in range(len(samples))]


def _generation_keys(model_name: str, backend: str, decoding: dict[str, Any], prompts: Sequence[str]) -> list[str]:
    """A key per prompt naming what its responses depend on (model name, backend, decoding, prompt)."""
    settings = json.dumps({"model": model_name, "backend": backend, "decoding": decoding}, sort_keys=True)
    return [hashlib.sha256(f"{settings}\0{prompt}".encode("utf-8", "surrogatepass")).hexdigest()[:20]
            for prompt in prompts]


def _response_record(task: Task, j: int, key: str, text: str, n_tokens, done) -> dict[str, Any]:
    return {"id": task.id, "sample": j, "key": key, "response": text, "tokens": n_tokens, "finished": done}


def _reusable_responses(path: Path, tasks: Sequence[Task], k: int, keys: Sequence[str]) -> dict[tuple[int, int], dict]:
    """Responses an earlier run of the same settings left in ``responses.jsonl``, by (prompt, sample)."""
    position = {t.id: i for i, t in enumerate(tasks)}
    kept = {}
    for record in _read_lines(path):
        i, j = position.get(str(record.get("id"))), record.get("sample")
        if i is not None and isinstance(j, int) and 0 <= j < k and record.get("key") == keys[i] \
                and isinstance(record.get("response"), str):
            kept[(i, j)] = record
    return kept


def _generate_and_keep(run: SuiteRun, backend, prompts: list[str], k: int, decoding: dict[str, Any], *,
                       model_name: str, out_dir: Path, bars: "_Progress"):
    """The backend's samples, written to ``responses.jsonl``.

    A backend that hands samples over one by one (``--backend openai``) has each appended as it finishes,
    and those an earlier run of the same settings left there are reused. A local backend samples all
    again (a retrained checkpoint keeps its name, so its old responses could not be told apart)."""
    path = out_dir / RESPONSES_FILE
    keys = _generation_keys(model_name, getattr(backend, "name", "?"), decoding, prompts)
    tasks = run.tasks
    if "on_sample" not in inspect.signature(backend.generate).parameters:
        generated = backend.generate(prompts, k, progress=bars.task(f"{run.spec.name}: sampling", len(prompts) * k),
                                     **decoding)
        _Lines(path, [_response_record(tasks[i], j, keys[i], generated.texts[i][j],
                                       generated.tokens[i][j] if generated.tokens else None,
                                       generated.finished[i][j] if generated.finished else None)
                      for i in range(len(prompts)) for j in range(k)]).close()
        return generated
    kept = _reusable_responses(path, tasks, k, keys)
    lines = _Lines(path, list(kept.values()))

    def on_sample(i, j, text, n_tokens, done, failure) -> None:
        if failure is None:
            lines.add(_response_record(tasks[i], j, keys[i], text, n_tokens, done))
        elif failure.startswith("reply capped"):
            _say_capped(run.spec.name, tasks[i].id, j, failure)

    try:
        generated = backend.generate(prompts, k, progress=bars.task(f"{run.spec.name}: sampling", len(prompts) * k - len(kept)),
                                     on_sample=on_sample, skip=set(kept), **decoding)
    finally:
        lines.close()
    for (i, j), record in kept.items():
        generated.texts[i][j], generated.tokens[i][j], generated.finished[i][j] = (
            record["response"], record.get("tokens"), record.get("finished"))
    return generated


# ----------------------------------------------------------------------------- the two entry points


def evaluate_suite(
    run: SuiteRun,
    backend,
    *,
    model_name: str,
    out_dir: Path,
    options: EvalOptions | None = None,
) -> dict[str, Any]:
    """Sample k responses per problem with ``backend``, grade them, write the outputs; return the summary."""
    options = options or EvalOptions()
    spec = run.spec
    k = spec.k if options.k is None else options.k
    if k < 1:
        raise UserError("--k must be at least 1")
    decoding = {
        "temperature": spec.temperature if options.temperature is None else options.temperature,
        "top_p": spec.top_p if options.top_p is None else options.top_p,
        "max_new_tokens": options.max_new_tokens or spec.max_new_tokens,
        "seed": options.seed,
    }
    if spec.grader == "swebench":
        from sao_env.benchmarks import swebench

        swebench.require_docker()  # fail before spending time on generation
        swebench.require_full_rows([swebench.instance_row(t) for t in run.tasks], source=run.source)
    from sao_env.benchmarks.llm_grader import failed_grade

    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    prompts = [t.prompt if isinstance(t.prompt, str) else json.dumps(list(t.prompt)) for t in run.tasks]
    grader = grader_name(spec, options)
    with _Progress(options.show_progress) as bars:
        generated = _generate_and_keep(run, backend, prompts, k, decoding, model_name=model_name, out_dir=out_dir,
                                       bars=bars)
        generation_s = time.perf_counter() - started
        failures = getattr(generated, "failures", {}) or {}
        samples = [(task, j, None if (i, j) in failures else generated.texts[i][j])
                   for i, task in enumerate(run.tasks) for j in range(k)]
        known = {i * k + j: failed_grade(f"generation failed: {reason}", grader=grader)
                 for (i, j), reason in failures.items()}
        samples, sanitized = _sanitized(samples)
        tokens = [generated.tokens[i][j] if generated.tokens else None for i in range(len(run.tasks)) for j in range(k)]
        finished = [generated.finished[i][j] if generated.finished else None
                    for i in range(len(run.tasks)) for j in range(k)]
        grading_started = time.perf_counter()
        grades = grade_and_keep(run, samples, options, model_name=model_name, out_dir=out_dir, bars=bars,
                                known=known, tokens=tokens, finished=finished)
    grading_s = time.perf_counter() - grading_started
    if generated.max_new_tokens is not None and generated.max_new_tokens != decoding["max_new_tokens"]:
        decoding["max_new_tokens_used"] = generated.max_new_tokens
    timing = {"generation_s": generation_s, "grading_s": grading_s, "total_s": time.perf_counter() - started}
    return write_results(run, samples, grades, options, model_name=model_name, out_dir=out_dir, k=k,
                         decoding=decoding, backend=getattr(backend, "name", "?"), tokens=tokens,
                         finished=finished, timing=timing, sanitized=sanitized)


def read_predictions(path: Path) -> tuple[list[tuple[str, str]], str | None]:
    """``(id, response)`` pairs of a predictions file and the model name it records (or None).

    Two layouts: lines ``{"id", "response"}`` (several lines per id = k samples; extra keys are
    ignored), and swebench's predictions ``{"instance_id", "model_name_or_path", "model_patch"}``,
    which ``eval`` writes for SWE-bench, as JSONL or as a JSON list (or object) of records. Bytes
    that are not UTF-8 are read as U+FFFD, and stderr says how many lines hold them and the first;
    lone surrogates and NUL bytes are replaced when graded.
    """
    if not path.is_file():
        raise UserError(f"--predictions {path}: no such file")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        text = raw.decode("utf-8", errors="replace")
        bad = 0
        for line in raw.split(b"\n"):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                bad += 1
        first = raw[:err.start].count(b"\n") + 1
        print(f"sao-env: warning: {path}: {bad:,} line(s) hold bytes that are not UTF-8 (the first at line {first}); "
              "they are graded with U+FFFD in their place", file=sys.stderr, flush=True)
    records: list[tuple[int, Any]] = []
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as err:
            raise UserError(f"{path}: invalid JSON ({err.msg} at line {err.lineno})") from None
        records = list(enumerate(whole, start=1))
    else:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append((number, json.loads(line)))
            except json.JSONDecodeError as err:
                if not records and stripped.startswith("{"):  # the first line with text: a whole-file object
                    records = _json_object_records(path, text)
                    break
                raise UserError(f"{path}:{number}: invalid JSON ({err.msg})") from None
    pairs, models = [], set()
    for number, record in records:
        if isinstance(record, dict) and "instance_id" in record and "model_patch" in record:
            pairs.append((str(record["instance_id"]), str(record["model_patch"] or "")))
            if record.get("model_name_or_path"):
                models.add(str(record["model_name_or_path"]))
        elif isinstance(record, dict) and "id" in record and "response" in record:
            pairs.append((str(record["id"]), str(record["response"] or "")))
        else:
            raise UserError(f"{path}:{number}: each record needs 'id' and 'response' (or swebench's "
                            "'instance_id' and 'model_patch')")
    if not pairs:
        raise UserError(f"{path}: no predictions")
    return pairs, (models.pop() if len(models) == 1 else None)


def _json_object_records(path: Path, text: str) -> list[tuple[int, Any]]:
    """A whole-file JSON object: swebench's ``{instance_id: prediction}`` layout."""
    try:
        whole = json.loads(text)
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: invalid JSON ({err.msg} at line {err.lineno})") from None
    values = list(whole.values()) if isinstance(whole, dict) else [whole]
    return list(enumerate(values, start=1))


def grade_predictions(
    run: SuiteRun,
    predictions_path: Path,
    *,
    out_dir: Path,
    model_name: str | None = None,
    options: EvalOptions | None = None,
) -> dict[str, Any]:
    """Grade saved responses (several lines per id = several samples); write the usual outputs."""
    options = options or EvalOptions()
    pairs, recorded_model = read_predictions(predictions_path)
    by_id = {t.id: t for t in run.tasks}
    unknown = sorted({i for i, _ in pairs if i not in by_id})
    if unknown:
        shown = ", ".join(unknown[:10]) + (f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
        raise UserError(f"{predictions_path}: id(s) not in suite {run.spec.name}: {shown}")
    counts: Counter[str] = Counter()
    samples = []
    for task_id, response in pairs:
        samples.append((by_id[task_id], counts[task_id], response))
        counts[task_id] += 1
    samples, sanitized = _sanitized(samples)
    graded_ids = set(counts)
    run = SuiteRun(run.spec, [t for t in run.tasks if t.id in graded_ids], run.total, run.source, run.missing_columns)
    model_name = model_name or recorded_model or predictions_path.stem
    started = time.perf_counter()
    nothing = [None] * len(samples)
    with _Progress(options.show_progress) as bars:
        grades = grade_and_keep(run, samples, options, model_name=model_name, out_dir=out_dir, bars=bars,
                                known={}, tokens=nothing, finished=nothing)
    grading_s = time.perf_counter() - started
    return write_results(run, samples, grades, options, model_name=model_name, out_dir=out_dir,
                         k=max(counts.values()), decoding={}, backend="predictions",
                         tokens=[None] * len(samples), finished=[None] * len(samples),
                         timing={"generation_s": None, "grading_s": grading_s, "total_s": grading_s},
                         predictions=str(predictions_path), sanitized=sanitized)


# ----------------------------------------------------------------------------- outputs


def write_results(
    run: SuiteRun,
    samples: Sequence[tuple[Task, int, str]],
    grades: Sequence[GradeResult],
    options: EvalOptions,
    *,
    model_name: str,
    out_dir: Path,
    k: int,
    decoding: dict[str, Any],
    backend: str,
    tokens: Sequence[int | None],
    finished: Sequence[bool | None],
    timing: dict[str, float | None],
    predictions: str | None = None,
    sanitized: int = 0,
) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    spec = run.spec
    grader = grader_name(spec, options)
    rewards: dict[str, list[float]] = defaultdict(list)
    category_of: dict[str, str | None] = {}
    reasons: Counter[str] = Counter()
    failed = 0
    records = []
    for (task, j, response), grade, n_tokens, done in zip(samples, grades, tokens, finished):
        category_of[task.id] = task.metadata.get("category")
        reasons[str(grade.details.get("reason"))] += 1
        if is_failed(grade):
            failed += 1
        else:
            rewards[task.id].append(grade.reward)
        records.append(sample_record(task, j, response, grade, n_tokens, done, grader))
    _Lines(out_dir / SAMPLES_FILE, records).close()
    scores = metrics.summarize_scores(rewards)
    unfinished = sum(1 for f in finished if f is False)
    from sao_env.provenance import code_key, code_version

    fallback = answer_fallback(spec, options) if grader == "math-verify" else None
    summary = {
        "suite": spec.name,
        "model": model_name,
        **scores,
        "k": k,
        "metric": f"avg@{k}",
        "ci_method": metrics.CI_METHOD,
        "by_category": metrics.by_category(rewards, category_of),
        "grader": grader,
        "answer_fallback": fallback,
        "extraction": None if fallback is None else EXTRACTION_RULES[fallback],
        "sanitized": sanitized,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "code_version": code_key(code_version()),
        "backend": backend,
        "data": run.source,
        "suite_problems": run.total,
        "limited": len(run.tasks) < run.total,
        **({"decoding": decoding} if decoding else {}),
        **({"predictions": predictions} if predictions else {}),
        "tokens": {**metrics.token_stats(tokens), "unfinished": unfinished},
        "time": timing,
        "reasons": dict(sorted(reasons.items())),
        "failed": failed,
    }
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    if options.leaderboard is not None and failed:
        print(f"sao-env: {spec.name}: {failed:,} sample(s) failed: the leaderboard is left as it was",
              file=sys.stderr, flush=True)
    elif options.leaderboard is not None:
        from sao_env.leaderboard.benchmarks import record_benchmark

        summary["_leaderboard"] = str(record_benchmark(options.leaderboard, summary,
                                                       generator=f"`sao-env {'grade' if predictions else 'eval'}`")["csv"])
    return summary


def slug(text: str) -> str:
    """A folder-safe name for a model id or path."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/")).strip("_") or "model"
