"""Edge values of benchmark evaluation (``sao_env.benchmarks.evaluate``) and of its generation backends
(``sao_env.benchmarks.backends``), all in process and without a model.

Covered: the limit and progress lines of a run; grading in chunks, by a judge and per SWE-bench sample;
the records a run writes and reads back (cut-short lines, reused verdicts and responses); avg@k and
pass@k as written in ``summary.json`` with failed samples left out; the predictions file's layouts and
errors; the leaderboard gate; and the OpenAI-compatible backend's settings, request bodies, reply
parsing, skipped samples and failure lines against a fake server on 127.0.0.1.
"""

from __future__ import annotations

import json
import sys
import threading
import types
import warnings
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import reply_json
from local_http import LocalServer

from sao_env.benchmarks import evaluate
from sao_env.benchmarks.backends import (
    Generations,
    OpenAIBackend,
    chat_template_of,
    completions_template,
    fit_to_context,
    make_backend,
)
from sao_env.benchmarks.evaluate import EvalOptions, SuiteRun
from sao_env.benchmarks.llm_grader import failed_grade
from sao_env.benchmarks.suites import SuiteSpec
from sao_env.errors import UserError
from sao_env.types import GradeResult, Task

ANSWER_IS_RULE = "the last closed \\boxed{}, else the text after the last 'answer is'"
LAST_NUMBER_RULE = "the last closed \\boxed{}, else 'answer is', else the last number"


def _spec(**overrides) -> SuiteSpec:
    fields = dict(name="toy", loader="beyond_aime", dataset="by-hand/toy", prompt_template="{problem}", grader="math",
                  k=3, temperature=0.7, top_p=0.9, max_new_tokens=64, answer_fallback="answer-is")
    return SuiteSpec(**{**fields, **overrides})


def _task(index: int, answer: str, category: str | None = None, prompt=None) -> Task:
    return Task(id=f"p{index}", prompt=prompt if prompt is not None else f"problem {index}",
                reference={"answer": answer}, grader="math", metadata={"category": category} if category else {})


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _graded(reward: float, reason: str) -> GradeResult:
    return GradeResult(reward, {"verdict": "correct" if reward else "wrong", "reason": reason})


@pytest.fixture
def rule_grader(monkeypatch):
    """The math grader replaced by an exact comparison with the boxed gold answer; its calls are recorded."""
    from sao_env.graders import math as math_grader

    calls: list[dict] = []

    def grade(pairs, timeout_s=5.0, *, workers=None, fallback="none"):
        pairs = list(pairs)
        calls.append({"responses": [r for _, r in pairs], "timeout_s": timeout_s, "workers": workers,
                      "fallback": fallback})
        out = []
        for task, response in pairs:
            gold = task.reference["answer"]
            right = response == f"\\boxed{{{gold}}}"
            out.append(GradeResult(1.0 if right else 0.0, {
                "extracted": response, "gold": gold, "verdict": "correct" if right else "wrong",
                "reason": "equal" if right else "different", "grader": "math-verify"}))
        return out

    monkeypatch.setattr(math_grader, "grade_math_batch", grade)
    return calls


@pytest.fixture
def fixed_code(monkeypatch):
    """The code version of every summary fixed (it would otherwise ask git)."""
    from sao_env import provenance

    monkeypatch.setattr(provenance, "code_version", lambda: {"source_sha256": "abcdef0123456789ffff"})


@pytest.fixture
def no_http_env(monkeypatch):
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SAO_ENV_HTTP_DEADLINE_S", "SAO_ENV_HTTP_MAX_REPLY_BYTES",
                 "SAO_ENV_HTTP_RETRIES"):
        monkeypatch.delenv(name, raising=False)


class _Judge:
    """An LLM judge without ``grade_each``: correct where the response is the boxed gold answer."""

    name = "llm:fake"

    def __init__(self):
        self.batches: list[int] = []

    def grade_batch(self, pairs):
        self.batches.append(len(pairs))
        return [GradeResult(float(r == f"\\boxed{{{t.reference['answer']}}}"),
                            {"verdict": "correct" if r == f"\\boxed{{{t.reference['answer']}}}" else "wrong",
                             "reason": "judge", "grader": self.name}) for t, r in pairs]


# ----------------------------------------------------------------------------- suite set-up and progress


class _Loader:
    source = "by hand"

    def __init__(self, tasks, missing=None):
        self.tasks = tasks
        if missing is not None:
            self.missing_columns = missing

    def load(self):
        return list(self.tasks)


def test_prepare_suite_keeps_the_first_limit_rows_and_counts_every_row(monkeypatch):
    """``limit`` keeps the first rows (1 is allowed, 0 is refused) while ``total`` counts the whole suite."""
    tasks = [_task(i, str(i)) for i in range(3)]
    monkeypatch.setattr(evaluate, "make_loader", lambda spec, data: _Loader(tasks, ["hints_text"]))
    one = evaluate.prepare_suite(_spec(), None, 1)
    assert ([t.id for t in one.tasks], one.total, one.source, one.missing_columns) == (["p0"], 3, "by hand",
                                                                                       ["hints_text"])
    assert [t.id for t in evaluate.prepare_suite(_spec(), None, 2).tasks] == ["p0", "p1"]
    assert [t.id for t in evaluate.prepare_suite(_spec(), None, 3).tasks] == ["p0", "p1", "p2"]
    assert len(evaluate.prepare_suite(_spec(), None).tasks) == 3
    monkeypatch.setattr(evaluate, "make_loader", lambda spec, data: _Loader(tasks))
    assert evaluate.prepare_suite(_spec(), None, 5).missing_columns == []
    with pytest.raises(UserError, match=r"^--limit must be at least 1$"):
        evaluate.prepare_suite(_spec(), None, 0)


def test_plain_progress_speaks_at_start_every_30_s_and_at_the_end(monkeypatch, capsys):
    """Without a terminal, progress is a line at the start, at each 30 s since the last line, and at the total."""
    clock = iter([100.0, 100.0, 129.9, 130.0, 130.0, 159.9, 159.95, 161.0])
    monkeypatch.setattr(evaluate, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    with evaluate._Progress(True) as bars:
        advance = bars.task("toy: grading", 2000)
        advance(1)  # 29.9 s after the start: quiet
        advance(999)  # 30 s: a line
        advance(100)  # 29.9 s after that line: quiet
        advance(900)  # the total, 29.95 s after that line: a line
    assert capsys.readouterr().err.splitlines() == [
        "sao-env: toy: grading: 0 of 2,000 (0.0%), 0 s",
        "sao-env: toy: grading: 1,000 of 2,000 (50.0%), 30 s",
        "sao-env: toy: grading: 2,000 of 2,000 (100.0%), 61 s",
    ]


def test_progress_of_an_empty_task_has_no_share_and_a_disabled_one_is_silent(capsys):
    """A total of 0 prints no percentage; ``show_progress=False`` prints nothing at all."""
    with evaluate._Progress(True) as bars:
        bars.task("toy: sampling", 0)
    assert capsys.readouterr().err.startswith("sao-env: toy: sampling: 0 of 0, ")
    with evaluate._Progress(False) as bars:
        advance = bars.task("toy: sampling", 2)
        advance(2)
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- grading


def test_rule_grading_goes_in_chunks_of_64_with_the_suites_or_the_options_fallback(rule_grader):
    """65 samples: two calls (64 + 1), ``on_graded`` numbered 0..64 in order, one advance per chunk, the
    option's timeout and workers passed on, the fallback the option's else the suite's."""
    run = SuiteRun(_spec(), [_task(0, "7")], 1, "by hand")
    samples = [(run.tasks[0], j, "\\boxed{7}" if j == 64 else "\\boxed{0}") for j in range(65)]
    seen, advanced = [], []
    results = evaluate.grade_responses(run, samples, EvalOptions(grading_timeout_s=2.5, grading_workers=3),
                                       model_name="m", out_dir=Path("unused"), progress=advanced.append,
                                       on_graded=lambda i, g: seen.append((i, g.reward)))
    assert [len(c["responses"]) for c in rule_grader] == [64, 1]
    assert {(c["timeout_s"], c["workers"], c["fallback"]) for c in rule_grader} == {(2.5, 3, "answer-is")}
    assert advanced == [64, 1]
    assert seen == [(i, 1.0 if i == 64 else 0.0) for i in range(65)]
    assert [r.reward for r in results] == [0.0] * 64 + [1.0]
    evaluate.grade_responses(run, samples[:1], EvalOptions(answer_fallback="last-number"), model_name="m",
                             out_dir=Path("unused"))
    assert rule_grader[-1]["fallback"] == "last-number"


def test_judge_grading_needs_a_judge_and_goes_in_chunks_of_32():
    """``--grader llm`` without a judge is refused; a judge without ``grade_each`` gets 32 + 1 pairs."""
    run = SuiteRun(_spec(), [_task(0, "7")], 1, "by hand")
    samples = [(run.tasks[0], j, "\\boxed{7}" if j == 0 else "no") for j in range(33)]
    with pytest.raises(UserError, match=r"^--grader llm needs a judge model \(--grader-model\)$"):
        evaluate.grade_responses(run, samples, EvalOptions(grader="llm"), model_name="m", out_dir=Path("unused"))
    judge, seen, advanced = _Judge(), [], []
    results = evaluate.grade_responses(run, samples, EvalOptions(grader="llm", judge=judge), model_name="m",
                                       out_dir=Path("unused"), progress=advanced.append,
                                       on_graded=lambda i, g: seen.append(i))
    assert judge.batches == [32, 1] and advanced == [32, 1] and seen == list(range(33))
    assert [r.reward for r in results] == [1.0] + [0.0] * 32


def test_a_judge_with_grade_each_hands_each_verdict_over_as_it_arrives():
    """``grade_each``'s callbacks reach ``on_graded`` with the judge's own index, advancing by one each."""
    run = SuiteRun(_spec(), [_task(0, "7")], 1, "by hand")

    class EachJudge:
        name = "llm:each"

        def grade_each(self, pairs, done):
            results = [GradeResult(float(i), {"verdict": "x"}) for i in range(len(pairs))]
            for i in reversed(range(len(pairs))):
                done(i, results[i])
            return results

    seen, advanced = [], []
    results = evaluate.grade_responses(run, [(run.tasks[0], j, "r") for j in range(3)],
                                       EvalOptions(grader="llm", judge=EachJudge()), model_name="m",
                                       out_dir=Path("unused"), progress=advanced.append,
                                       on_graded=lambda i, g: seen.append((i, g.reward)))
    assert seen == [(2, 2.0), (1, 1.0), (0, 0.0)] and advanced == [1, 1, 1]
    assert [r.reward for r in results] == [0.0, 1.0, 2.0]


def test_swebench_grading_runs_the_harness_once_per_sample_index(monkeypatch, tmp_path):
    """Samples are grouped by sample index (one harness run each, ``sao-env-sample<j>`` in order) and the
    verdicts come back in the order of the samples."""
    from sao_env.benchmarks import swebench

    runs = []
    monkeypatch.setattr(swebench, "require_docker", lambda: None)
    monkeypatch.setattr(swebench, "require_full_rows", lambda rows, source: None)
    monkeypatch.setattr(swebench, "instance_row", lambda task: {"instance_id": task.id})
    monkeypatch.setattr(swebench, "extract_patch", lambda response: f"patch:{response}")

    def run_harness(tasks, predictions, *, workdir, run_id, max_workers):
        runs.append((run_id, [p["model_patch"] for p in predictions], max_workers, workdir))
        return {t.id: GradeResult(float(run_id[-1]), {"verdict": f"{t.id}@{run_id}"}) for t in tasks}

    monkeypatch.setattr(swebench, "run_harness", run_harness)
    spec = _spec(loader="swebench_verified", grader="swebench", prompt_template="{problem_statement}",
                 answer_fallback="none")
    tasks = [_task(0, ""), _task(1, "")]
    samples = [(tasks[0], 1, "c"), (tasks[0], 0, "a"), (tasks[1], 0, "b")]
    seen, advanced = [], []
    results = evaluate.grade_responses(SuiteRun(spec, tasks, 2, "by hand"), samples,
                                       EvalOptions(swebench_workers=2), model_name="agent", out_dir=tmp_path,
                                       progress=advanced.append, on_graded=lambda i, g: seen.append(i))
    assert runs == [("sao-env-sample0", ["patch:a", "patch:b"], 2, tmp_path / "swebench"),
                    ("sao-env-sample1", ["patch:c"], 2, tmp_path / "swebench")]
    assert [r.details["verdict"] for r in results] == ["p0@sao-env-sample1", "p0@sao-env-sample0",
                                                       "p1@sao-env-sample0"]
    assert advanced == [2, 1] and seen == [0, 1, 2]
    assert evaluate.grader_name(spec, EvalOptions(grader="llm", judge=_Judge())) == "swebench"


def test_sanitizing_replaces_nul_and_lone_surrogates_and_counts_the_changed():
    """A missing response stays None; NUL bytes and lone surrogates become U+FFFD; three of five changed."""
    task = _task(0, "1")
    out, changed = evaluate._sanitized([(task, 0, None), (task, 1, "ok"), (task, 2, "a\x00b"), (task, 3, "x\udc80"),
                                        (task, 4, "\x00")])
    assert [r for _, _, r in out] == [None, "ok", "a\ufffdb", "x\ufffd", "\ufffd"]
    assert [j for _, j, _ in out] == [0, 1, 2, 3, 4] and changed == 3


# ----------------------------------------------------------------------------- records written and read back


def test_jsonl_lines_start_afresh_and_cut_short_lines_are_skipped(tmp_path):
    """``_Lines`` replaces what the file held with its records then appends; reading back keeps objects
    only, skipping a line cut short, a list and a number, and reads bytes that are not UTF-8 as U+FFFD."""
    path = tmp_path / "deep" / "samples.jsonl"
    assert evaluate._read_lines(path) == []
    path.parent.mkdir()
    path.write_text('{"old": 1}\n')
    lines = evaluate._Lines(path, [{"a": "é"}])
    lines.add({"b": 2})
    lines.close()
    assert path.read_text(encoding="utf-8") == '{"a": "é"}\n{"b": 2}\n'
    assert not path.with_name("samples.jsonl.tmp").exists()
    path.write_bytes(b'{"a": 1}\n{"cut": \n[1, 2]\n3\n{"b": "\xff"}\n')
    assert evaluate._read_lines(path) == [{"a": 1}, {"b": "\ufffd"}]


def test_a_sample_record_falls_back_to_the_tasks_gold_and_the_runs_grader():
    """Without ``gold`` or ``grader`` in the verdict the task's answer and the run's grader are written;
    ``judge_reply`` appears only where the verdict has one."""
    task = _task(3, "42", category="Algebra", prompt="what?")
    plain = evaluate.sample_record(task, 2, "\\boxed{41}", GradeResult(0.0, {"verdict": "wrong", "reason": "r"}),
                                   17, False, "math-verify")
    assert plain == {"id": "p3", "sample": 2, "prompt": "what?", "response": "\\boxed{41}", "extracted": None,
                     "gold": "42", "verdict": "wrong", "reward": 0.0, "reason": "r", "grader": "math-verify",
                     "tokens": 17, "finished": False, "category": "Algebra"}
    judged = evaluate.sample_record(_task(4, "1"), 0, "x", GradeResult(1.0, {
        "gold": "one", "verdict": "correct", "grader": "llm:j", "judge_reply": "ok"}), None, None, "math-verify")
    assert (judged["gold"], judged["grader"], judged["judge_reply"], judged["category"]) == ("one", "llm:j", "ok", None)
    assert evaluate.is_failed(failed_grade("why")) and not evaluate.is_failed(GradeResult(0.0, {"verdict": "wrong"}))


def test_reusable_verdicts_need_the_same_grader_a_kept_verdict_and_a_known_sample(tmp_path):
    """Only ``correct``/``wrong`` lines of the same grader for a sample of this run are reused, with the
    recorded keys only and a missing reward read as 0."""
    tasks = [_task(0, "1"), _task(1, "2")]
    samples = [(tasks[0], 0, "a"), (tasks[0], 1, "b"), (tasks[1], 0, "c"), (tasks[1], 1, "d")]
    path = tmp_path / "samples.jsonl"
    base = {"grader": "llm:j", "verdict": "correct", "reward": 1.0}
    records = [
        {**base, "id": "p0", "sample": 0, "response": "a", "gold": "1", "judge_reply": "yes", "other": 9},
        {**base, "id": "p0", "sample": 1, "response": "b", "verdict": "failed"},
        {**base, "id": "p1", "sample": 0, "response": "c", "grader": "math-verify"},
        {**base, "id": "p1", "sample": 1, "response": "d", "verdict": "wrong", "reward": None},
        {**base, "id": "p9", "sample": 0, "response": "a"},
        {**base, "id": "p1", "sample": 2, "response": "d"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    reused = evaluate._reusable_verdicts(path, samples, "llm:j")
    assert sorted(reused) == [0, 3]
    assert (reused[0].reward, dict(reused[0].details)) == (1.0, {"gold": "1", "verdict": "correct",
                                                                 "grader": "llm:j", "judge_reply": "yes"})
    assert (reused[3].reward, dict(reused[3].details)) == (0.0, {"verdict": "wrong", "grader": "llm:j"})


def test_grade_and_keep_reuses_judge_verdicts_only_and_never_over_a_known_result(tmp_path, rule_grader):
    """The rule grader grades every sample again; the judge reuses an earlier line but a sample already
    known (a failed generation) keeps its known result even where an earlier line matches it."""
    tasks = [_task(0, "1"), _task(1, "2")]
    samples = [(tasks[0], 0, None), (tasks[1], 0, "\\boxed{2}")]
    old = [{"id": "p0", "sample": 0, "response": None, "verdict": "correct", "reward": 1.0, "grader": g}
           for g in ("llm:fake", "math-verify")] + [
          {"id": "p1", "sample": 0, "response": "\\boxed{2}", "verdict": "wrong", "reward": 0.0, "grader": g}
          for g in ("llm:fake", "math-verify")]
    known = {0: failed_grade("generation failed: HTTP 400: x", grader="math-verify")}
    run = SuiteRun(_spec(), tasks, 2, "by hand")
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    with evaluate._Progress(False) as bars:
        rule = evaluate.grade_and_keep(run, samples, EvalOptions(), model_name="m", out_dir=tmp_path, bars=bars,
                                       known=known, tokens=[None, 4], finished=[None, True])
    assert [c["responses"] for c in rule_grader] == [["\\boxed{2}"]]
    assert [g.details["verdict"] for g in rule] == ["failed", "correct"]
    assert [(r["id"], r["verdict"], r["tokens"]) for r in _jsonl(tmp_path / "samples.jsonl")] == [
        ("p0", "failed", None), ("p1", "correct", 4)]
    (tmp_path / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    judge = _Judge()
    with evaluate._Progress(False) as bars:
        judged = evaluate.grade_and_keep(run, samples, EvalOptions(grader="llm", judge=judge), model_name="m",
                                         out_dir=tmp_path, bars=bars, known=known, tokens=[None, 4],
                                         finished=[None, True])
    assert judge.batches == [] and len(rule_grader) == 1
    assert [(g.reward, g.details["verdict"]) for g in judged] == [(0.0, "failed"), (0.0, "wrong")]


def test_reusable_responses_skip_bad_sample_numbers_non_text_and_unknown_ids(tmp_path):
    """A kept response needs a known id, an integer sample in [0, k), the prompt's key and text; a later
    line for the same sample wins."""
    tasks = [_task(0, "1"), _task(1, "2")]
    path = tmp_path / "responses.jsonl"
    records = [
        {"id": "p0", "sample": 0, "key": "K0", "response": "first"},
        {"id": "p0", "sample": 0, "key": "K0", "response": "second"},
        {"id": "p0", "sample": -1, "key": "K0", "response": "negative"},
        {"id": "p0", "sample": "1", "key": "K0", "response": "text index"},
        {"id": "p0", "sample": 1, "key": "K0", "response": None},
        {"id": "p1", "sample": 1, "key": "K1", "response": ""},
        {"id": "p1", "sample": 0, "key": "K0", "response": "other prompt's key"},
        {"id": "p7", "sample": 0, "key": "K0", "response": "unknown"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    kept = evaluate._reusable_responses(path, tasks, 2, ["K0", "K1"])
    assert {key: r["response"] for key, r in kept.items()} == {(0, 0): "second", (1, 1): ""}


def test_generation_keys_name_the_model_backend_decoding_and_prompt():
    """The key is the first 20 hex digits of sha256 over the sorted settings, a NUL and the prompt."""
    import hashlib

    decoding = {"top_p": 1.0, "seed": 0}
    keys = evaluate._generation_keys("m", "openai", decoding, ["a", "b"])
    settings = '{"backend": "openai", "decoding": {"seed": 0, "top_p": 1.0}, "model": "m"}'
    assert keys == [hashlib.sha256(f"{settings}\0{p}".encode()).hexdigest()[:20] for p in ("a", "b")]
    assert len(set(keys + evaluate._generation_keys("m", "openai", {**decoding, "seed": 1}, ["a"]))) == 3


# ----------------------------------------------------------------------------- evaluate_suite


class _LocalBackend:
    """Samples everything at once, like the transformers backend (no ``on_sample``)."""

    name = "local"

    def __init__(self, texts, max_new_tokens=None):
        self.texts, self.max_new_tokens, self.calls = texts, max_new_tokens, []

    def generate(self, prompts, n, *, temperature, top_p, max_new_tokens, seed, progress=None):
        self.calls.append((list(prompts), n, temperature, top_p, max_new_tokens, seed))
        return Generations(texts=[list(t) for t in self.texts], max_new_tokens=self.max_new_tokens)


class _StreamingBackend:
    """Hands samples over one by one, like the openai backend: ``script[(i, j)]`` is ``(text, tokens,
    finished)`` or a failure reason."""

    name = "stream"

    def __init__(self, script):
        self.script, self.asked, self.skips = script, [], []

    def generate(self, prompts, n, *, temperature, top_p, max_new_tokens, seed, progress=None, on_sample=None,
                 skip=frozenset()):
        self.skips.append(set(skip))
        out = Generations(texts=[[""] * n for _ in prompts], tokens=[[None] * n for _ in prompts],
                          finished=[[None] * n for _ in prompts])
        for i in range(len(prompts)):
            for j in range(n):
                if (i, j) in skip:
                    continue
                self.asked.append((i, j))
                what = self.script[(i, j)]
                if isinstance(what, str):
                    out.failures[(i, j)] = what
                    on_sample(i, j, None, None, None, what)
                else:
                    out.texts[i][j], out.tokens[i][j], out.finished[i][j] = what
                    on_sample(i, j, *what, None)
                progress(1)
        return out


def test_evaluate_suite_with_a_local_backend_writes_every_response_and_the_scores(tmp_path, rule_grader, fixed_code):
    """A temperature of 0 overrides the suite's, other settings fall back to the suite; a chat prompt is
    sent as JSON; avg@2 = (1/2 + 2/2) / 2 and pass@2 = 1; every response is written, tokens unknown."""
    chat = [{"role": "user", "content": "two"}]
    run = SuiteRun(_spec(), [_task(0, "1", category="A", prompt="one"), _task(1, "2", prompt=chat)], 2, "by hand")
    backend = _LocalBackend([["\\boxed{1}", "\\boxed{9}"], ["\\boxed{2}", "\\boxed{2}"]], max_new_tokens=64)
    (tmp_path / "responses.jsonl").write_text('{"id": "p0", "sample": 0, "key": "x", "response": "stale"}\n')
    summary = evaluate.evaluate_suite(run, backend, model_name="m", out_dir=tmp_path,
                                      options=EvalOptions(k=2, temperature=0.0, seed=5, show_progress=False))
    assert backend.calls == [(["one", '[{"role": "user", "content": "two"}]'], 2, 0.0, 0.9, 64, 5)]
    assert summary["decoding"] == {"temperature": 0.0, "top_p": 0.9, "max_new_tokens": 64, "seed": 5}
    assert (summary["accuracy"], summary["n"], summary["problems"], summary["k"], summary["metric"]) == (
        0.75, 4, 2, 2, "avg@2")
    assert summary["pass_at_k"] == {"1": 0.75, "2": 1.0}
    assert summary["by_category"]["A"]["accuracy"] == 0.5 and list(summary["by_category"]) == ["A"]
    assert summary["tokens"] == {"completion_tokens": 0, "mean_completion_tokens": None, "unfinished": 0}
    assert (summary["reasons"], summary["failed"], summary["limited"], summary["backend"]) == (
        {"different": 1, "equal": 3}, 0, False, "local")
    assert (summary["answer_fallback"], summary["extraction"], summary["code_version"]) == (
        "answer-is", ANSWER_IS_RULE, "src.abcdef012345")
    responses = _jsonl(tmp_path / "responses.jsonl")
    assert [(r["id"], r["sample"], r["response"], r["tokens"], r["finished"]) for r in responses] == [
        ("p0", 0, "\\boxed{1}", None, None), ("p0", 1, "\\boxed{9}", None, None),
        ("p1", 0, "\\boxed{2}", None, None), ("p1", 1, "\\boxed{2}", None, None)]
    samples = _jsonl(tmp_path / "samples.jsonl")
    assert [(s["id"], s["sample"], s["verdict"]) for s in samples] == [
        ("p0", 0, "correct"), ("p0", 1, "wrong"), ("p1", 0, "correct"), ("p1", 1, "correct")]
    assert samples[2]["prompt"] == chat


def test_evaluate_suite_records_a_lowered_token_limit_and_refuses_a_negative_k(tmp_path, rule_grader, fixed_code):
    """``max_new_tokens_used`` appears only when the backend used another limit; no k means the suite's k
    and a negative k is refused."""
    run = SuiteRun(_spec(k=1), [_task(0, "1")], 3, "by hand")
    summary = evaluate.evaluate_suite(run, _LocalBackend([["\\boxed{1}"]], max_new_tokens=10), model_name="m",
                                      out_dir=tmp_path, options=EvalOptions(max_new_tokens=100, show_progress=False))
    assert summary["decoding"] == {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 100, "seed": 0,
                                   "max_new_tokens_used": 10}
    assert (summary["k"], summary["limited"], summary["suite_problems"]) == (1, True, 3)
    for k in (-1, 0):  # 0 is refused, not read as "the suite's k"
        with pytest.raises(UserError, match=r"^--k must be at least 1$"):
            evaluate.evaluate_suite(run, _LocalBackend([["x"]]), model_name="m", out_dir=tmp_path,
                                    options=EvalOptions(k=k, show_progress=False))


def test_evaluate_suite_fails_samples_by_index_and_a_rerun_asks_only_for_those(tmp_path, rule_grader, fixed_code,
                                                                               capsys):
    """k = 2: (0, 1) capped and (1, 0) refused fail with their own reasons (one stderr line for the cap),
    score nothing and are not kept; a rerun skips the two kept responses and restores their counts."""
    run = SuiteRun(_spec(), [_task(0, "1"), _task(1, "2")], 2, "by hand")
    options = EvalOptions(k=2, show_progress=True)
    first = _StreamingBackend({(0, 0): ("\\boxed{1}", 4, True), (0, 1): "reply capped at 10 bytes",
                               (1, 0): "HTTP 400: bad", (1, 1): ("\\boxed{2}", 6, False)})
    summary = evaluate.evaluate_suite(run, first, model_name="m", out_dir=tmp_path, options=options)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("sao-env: toy: sampling: 0 of 4 (0.0%), ")
    assert [line for line in err if "failed" in line] == [
        "sao-env: toy p0#1: reply capped at 10 bytes; the sample failed"]
    samples = _jsonl(tmp_path / "samples.jsonl")
    assert [(s["sample"], s["response"], s["verdict"], s["reason"]) for s in samples] == [
        (0, "\\boxed{1}", "correct", "equal"), (1, None, "failed", "generation failed: reply capped at 10 bytes"),
        (0, None, "failed", "generation failed: HTTP 400: bad"), (1, "\\boxed{2}", "correct", "equal")]
    assert (summary["accuracy"], summary["n"], summary["failed"], summary["pass_at_k"]) == (1.0, 2, 2, {"1": 1.0})
    assert summary["tokens"] == {"completion_tokens": 10, "mean_completion_tokens": 5.0, "unfinished": 1}
    assert [(r["id"], r["sample"]) for r in _jsonl(tmp_path / "responses.jsonl")] == [("p0", 0), ("p1", 1)]

    second = _StreamingBackend({(0, 1): ("\\boxed{0}", 3, True), (1, 0): ("\\boxed{2}", 5, True)})
    summary = evaluate.evaluate_suite(run, second, model_name="m", out_dir=tmp_path, options=options)
    assert second.skips == [{(0, 0), (1, 1)}] and second.asked == [(0, 1), (1, 0)]
    assert capsys.readouterr().err.startswith("sao-env: toy: sampling: 0 of 2 (0.0%), ")
    assert (summary["accuracy"], summary["n"], summary["failed"], summary["pass_at_k"]) == (
        0.75, 4, 0, {"1": 0.75, "2": 1.0})
    assert summary["tokens"] == {"completion_tokens": 18, "mean_completion_tokens": 4.5, "unfinished": 1}
    samples = _jsonl(tmp_path / "samples.jsonl")
    assert [(s["response"], s["tokens"], s["finished"]) for s in samples] == [
        ("\\boxed{1}", 4, True), ("\\boxed{0}", 3, True), ("\\boxed{2}", 5, True), ("\\boxed{2}", 6, False)]


# ----------------------------------------------------------------------------- write_results


def _fake_leaderboard(monkeypatch) -> list[tuple]:
    calls: list[tuple] = []
    module = types.ModuleType("sao_env.leaderboard.benchmarks")

    def record_benchmark(folder, summary, *, generator):
        calls.append((folder, summary["suite"], generator))
        return {"csv": folder / "benchmarks.csv"}

    module.record_benchmark = record_benchmark
    monkeypatch.setitem(sys.modules, "sao_env.leaderboard.benchmarks", module)
    return calls


def test_written_scores_leave_failed_samples_out_and_count_unfinished_ones(tmp_path, fixed_code):
    """k = 3: p0 1 of 3, p1 2 of 2 graded (one failed). avg@3 = (1/3 + 1) / 2 = 2/3; pass@2 =
    ((1 - C(2,2)/C(3,2)) + 1) / 2 = (2/3 + 1) / 2 = 5/6; only ``finished is False`` counts as unfinished."""
    tasks = [_task(0, "1", category="A"), _task(1, "2")]
    samples = [(tasks[0], j, f"r0{j}") for j in range(3)] + [(tasks[1], j, f"r1{j}") for j in range(3)]
    grades = [_graded(1.0, "equal"), _graded(0.0, "different"), _graded(0.0, "different"),
              _graded(1.0, "equal"), _graded(1.0, "equal"), failed_grade("generation failed: x")]
    summary = evaluate.write_results(
        SuiteRun(_spec(), tasks, 3, "by hand"), samples, grades, EvalOptions(answer_fallback="last-number"),
        model_name="m", out_dir=tmp_path / "out", k=3, decoding={}, backend="b", tokens=[3, None, 5, 2, 2, None],
        finished=[True, False, None, True, False, None], timing={"total_s": 1.0})
    assert (summary["accuracy"], summary["n"], summary["problems"], summary["failed"]) == (
        pytest.approx(2 / 3), 5, 2, 1)
    assert summary["pass_at_k"] == {"1": pytest.approx(2 / 3), "2": pytest.approx(5 / 6)}
    assert {k: v["accuracy"] for k, v in summary["by_category"].items()} == {"A": pytest.approx(1 / 3)}
    assert summary["tokens"] == {"completion_tokens": 12, "mean_completion_tokens": 3.0, "unfinished": 2}
    assert summary["reasons"] == {"different": 2, "equal": 3, "generation failed: x": 1}
    assert (summary["answer_fallback"], summary["extraction"], summary["limited"]) == ("last-number", LAST_NUMBER_RULE,
                                                                                      True)
    assert "decoding" not in summary and "predictions" not in summary
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert written["pass_at_k"] == summary["pass_at_k"] and written["ci_method"] == evaluate.metrics.CI_METHOD
    assert [r["verdict"] for r in _jsonl(tmp_path / "out" / "samples.jsonl")] == [
        "correct", "wrong", "wrong", "correct", "correct", "failed"]


def test_a_judged_run_names_the_judge_and_no_extraction_rule(tmp_path, fixed_code):
    """With the LLM judge the grader is the judge's name and no answer fallback or extraction is written."""
    task = _task(0, "1")
    summary = evaluate.write_results(SuiteRun(_spec(), [task], 1, "by hand"), [(task, 0, "x")],
                                     [GradeResult(1.0, {"verdict": "correct"})],
                                     EvalOptions(grader="llm", judge=_Judge()), model_name="m", out_dir=tmp_path,
                                     k=1, decoding={"seed": 0}, backend="b", tokens=[None], finished=[None],
                                     timing={}, predictions="p.jsonl")
    assert (summary["grader"], summary["answer_fallback"], summary["extraction"]) == ("llm:fake", None, None)
    assert (summary["decoding"], summary["predictions"], summary["reasons"]) == ({"seed": 0}, "p.jsonl", {"None": 1})
    assert _jsonl(tmp_path / "samples.jsonl")[0]["grader"] == "llm:fake"


def test_the_leaderboard_is_written_only_without_failed_samples(tmp_path, monkeypatch, fixed_code, capsys):
    """A run with a failed sample leaves the board alone and says so; otherwise the row is recorded with the
    generator of ``eval`` or, for saved predictions, ``grade``."""
    calls = _fake_leaderboard(monkeypatch)
    board = tmp_path / "board"
    task = _task(0, "1")
    run = SuiteRun(_spec(), [task], 1, "by hand")

    def write(grade, predictions=None, leaderboard=board):
        return evaluate.write_results(run, [(task, 0, "x")], [grade], EvalOptions(leaderboard=leaderboard),
                                      model_name="m", out_dir=tmp_path / "out", k=1, decoding={}, backend="b",
                                      tokens=[None], finished=[None], timing={}, predictions=predictions)

    assert "_leaderboard" not in write(failed_grade("generation failed: x"))
    assert capsys.readouterr().err == "sao-env: toy: 1 sample(s) failed: the leaderboard is left as it was\n"
    assert calls == []
    assert write(_graded(1.0, "equal"))["_leaderboard"] == str(board / "benchmarks.csv")
    write(_graded(0.0, "different"), predictions="p.jsonl")
    assert "_leaderboard" not in write(failed_grade("x"), leaderboard=None)
    assert calls == [(board, "toy", "`sao-env eval`"), (board, "toy", "`sao-env grade`")]
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------------------- predictions


def test_grade_predictions_numbers_samples_per_id_and_takes_k_from_the_most(tmp_path, rule_grader, fixed_code):
    """Lines p1, p0, p1, p1: samples numbered per id, k = 3, only the graded problems kept (limited), the
    model named by the argument, else the file's stem; avg@k = (2/3 + 0) / 2 = 1/3."""
    tasks = [_task(0, "1"), _task(1, "2"), _task(2, "3")]
    run = SuiteRun(_spec(), tasks, 3, "by hand")
    path = tmp_path / "preds.jsonl"
    path.write_text("".join(json.dumps({"id": i, "response": r}) + "\n" for i, r in (
        ("p1", "\\boxed{2}"), ("p0", "\\boxed{0}"), ("p1", "\\boxed{5}"), ("p1", "\\boxed{2}"))))
    summary = evaluate.grade_predictions(run, path, out_dir=tmp_path / "a", options=EvalOptions(show_progress=False))
    samples = _jsonl(tmp_path / "a" / "samples.jsonl")
    assert [(s["id"], s["sample"], s["verdict"]) for s in samples] == [
        ("p1", 0, "correct"), ("p0", 0, "wrong"), ("p1", 1, "wrong"), ("p1", 2, "correct")]
    assert (summary["k"], summary["metric"], summary["problems"], summary["n"]) == (3, "avg@3", 2, 4)
    assert (summary["accuracy"], summary["pass_at_k"]) == (pytest.approx(1 / 3), {"1": pytest.approx(1 / 3)})
    assert (summary["model"], summary["backend"], summary["predictions"], summary["limited"]) == (
        "preds", "predictions", str(path), True)
    assert summary["time"]["generation_s"] is None and "decoding" not in summary
    named = evaluate.grade_predictions(run, path, out_dir=tmp_path / "b", model_name="given",
                                       options=EvalOptions(show_progress=False))
    assert named["model"] == "given"


def test_grade_predictions_lists_ten_unknown_ids_and_counts_the_rest(tmp_path):
    """Twelve unknown ids: the first ten in sorted order, then ``and 2 more``; nothing is written."""
    run = SuiteRun(_spec(), [_task(0, "1")], 1, "by hand")
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": f"u{n:02d}", "response": "x"}) + "\n" for n in range(11, -1, -1)))
    listed = ", ".join(f"u{n:02d}" for n in range(10))
    with pytest.raises(UserError) as caught:
        evaluate.grade_predictions(run, path, out_dir=tmp_path / "g")
    assert str(caught.value) == f"{path}: id(s) not in suite toy: {listed} and 2 more"
    path.write_text(json.dumps({"id": "p0", "response": "x"}) + "\n" + json.dumps({"id": "zz", "response": "y"}))
    with pytest.raises(UserError) as caught:
        evaluate.grade_predictions(run, path, out_dir=tmp_path / "g")
    assert str(caught.value) == f"{path}: id(s) not in suite toy: zz"
    assert not (tmp_path / "g").exists()


def test_predictions_layouts_blank_lines_missing_responses_and_model_names(tmp_path):
    """A JSON list after whitespace; blank lines skipped; a null response or patch read as empty; the model
    name kept only when the file names exactly one."""
    listed = tmp_path / "list.json"
    listed.write_text('\n  [{"id": 1, "response": null}, {"instance_id": "a", "model_patch": null, '
                      '"model_name_or_path": "agent"}]')
    assert evaluate.read_predictions(listed) == ([("1", ""), ("a", "")], "agent")
    lines = tmp_path / "lines.jsonl"
    lines.write_text('{"instance_id": "a", "model_patch": "p", "model_name_or_path": "one"}\n\n'
                     '{"instance_id": "b", "model_patch": "q", "model_name_or_path": "two"}\n'
                     '{"id": "c", "response": "r", "model_name_or_path": "three"}\n')
    assert evaluate.read_predictions(lines) == ([("a", "p"), ("b", "q"), ("c", "r")], None)


def test_predictions_errors_name_the_line_they_are_on(tmp_path):
    """Invalid JSON after line 1 of a file starting with ``{`` is that line's error (not a whole-file
    object); line numbers count blank lines; a record of the wrong shape and an empty file are refused."""
    path = tmp_path / "p.jsonl"
    path.write_text('{"id": "a", "response": "r"}\n\n{"id": \n')
    with pytest.raises(UserError, match=rf"^{path}:3: invalid JSON \("):
        evaluate.read_predictions(path)
    path.write_text('{"id": "a", "response": "r"}\n[1]\n')
    with pytest.raises(UserError, match=rf"^{path}:2: each record needs 'id' and 'response'"):
        evaluate.read_predictions(path)
    path.write_text("[1, \n2")
    with pytest.raises(UserError, match=rf"^{path}: invalid JSON \(.* at line 2\)$"):
        evaluate.read_predictions(path)
    path.write_text("\n  \n")
    with pytest.raises(UserError, match=rf"^{path}: no predictions$"):
        evaluate.read_predictions(path)
    with pytest.raises(UserError, match=r"^--predictions .*missing\.jsonl: no such file$"):
        evaluate.read_predictions(tmp_path / "missing.jsonl")


def test_predictions_with_bytes_that_are_not_utf8_are_counted_and_located(tmp_path, capsys):
    """Two of three lines hold bad bytes, the first on line 2: one warning, and U+FFFD in the responses."""
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"id": "a", "response": "ok"}\n{"id": "b", "response": "\xff"}\n'
                     b'{"id": "c", "response": "x\xfe"}\n')
    assert evaluate.read_predictions(path) == ([("a", "ok"), ("b", "\ufffd"), ("c", "x\ufffd")], None)
    assert capsys.readouterr().err == (f"sao-env: warning: {path}: 2 line(s) hold bytes that are not UTF-8 (the first "
                                       "at line 2); they are graded with U+FFFD in their place\n")


def test_slug_makes_folder_safe_names():
    """Runs of unsafe characters become one underscore; outer slashes and underscores go; nothing left is
    ``model``."""
    assert evaluate.slug("/org/Model Name:v1.5/") == "org_Model_Name_v1.5"
    assert evaluate.slug("__a-b__") == "a-b"
    assert evaluate.slug("///") == "model"


# ----------------------------------------------------------------------------- backends: local settings


def test_fit_to_context_at_its_boundaries():
    """A prompt plus response of exactly the context is kept silently; one token over is lowered to fit."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert fit_to_context(96, 4000, 4096) == 4000
        assert fit_to_context(0, 4096, 4096) == 4096
    with pytest.warns(UserWarning, match=r"^max_new_tokens 10 lowered to 1: the longest prompt has 4095 tokens and "
                                         r"the model's context is 4096$"):
        assert fit_to_context(4095, 10, 4096) == 1
    with pytest.raises(UserError, match="a prompt of 4097 tokens"):
        fit_to_context(4097, 1, 4096)


def test_openai_backend_settings_and_their_defaults(monkeypatch, no_http_env):
    """Defaults: local vLLM URL, key ``EMPTY``, a 1800-s deadline and an 8-MiB cap; the environment fills in
    what is not given; a trailing slash is dropped; concurrency is at least 1; bad values are refused."""
    backend = OpenAIBackend("m")
    assert (backend.base_url, backend.api_key, backend.api, backend.concurrency, backend.deadline_s,
            backend.max_bytes, backend.retries, backend.prompt_template) == (
        "http://127.0.0.1:8000/v1", "EMPTY", "chat", 8, 1800.0, 8 * 1024 * 1024, None, None)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://env:1/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    monkeypatch.setenv("SAO_ENV_HTTP_DEADLINE_S", "12")
    backend = OpenAIBackend("m", concurrency=0, max_bytes=5, retries=2)
    assert (backend.base_url, backend.api_key, backend.concurrency, backend.deadline_s, backend.max_bytes,
            backend.retries) == ("http://env:1/v1", "sk-env", 1, 12.0, 5, 2)
    backend = OpenAIBackend("m", base_url="http://given:2/v1//", api_key="sk-given", concurrency=-3, deadline_s=0.5)
    assert (backend.base_url, backend.api_key, backend.concurrency, backend.deadline_s) == (
        "http://given:2/v1", "sk-given", 1, 0.5)
    with pytest.raises(UserError, match=r"^--request-deadline must be greater than 0$"):
        OpenAIBackend("m", deadline_s=-1)
    with pytest.raises(UserError, match=r"^--api must be chat or completions, not 'responses'$"):
        OpenAIBackend("m", api="responses")


class _Template:
    def __init__(self):
        self.calls = []

    def apply_chat_template(self, messages, *, tokenize, add_generation_prompt):
        self.calls.append((messages, tokenize, add_generation_prompt))
        return f"<user>{messages[0]['content']}<assistant>"


def test_only_completions_with_a_template_render_the_prompt(no_http_env):
    """The chat API and a raw completions backend send the prompt as given; a template renders it with
    the generation prompt added, untokenized."""
    template = _Template()
    assert OpenAIBackend("m", prompt_template=template).render("q") == "q"
    assert OpenAIBackend("m", api="completions").render("q") == "q"
    assert template.calls == []
    assert OpenAIBackend("m", api="completions", prompt_template=template).render("q") == "<user>q<assistant>"
    assert template.calls == [([{"role": "user", "content": "q"}], False, True)]


def test_make_backend_passes_only_the_openai_options_and_refuses_unknown_names(no_http_env):
    """Options meant for other backends are dropped; a path names the served model as text."""
    backend = make_backend("openai", Path("served/model"), base_url="http://h:3/v1", api="completions",
                           concurrency=2, batch_size=4, seed=9, retries=1, max_bytes=100, api_key="k")
    assert (backend.model, backend.base_url, backend.api, backend.concurrency, backend.retries, backend.max_bytes,
            backend.api_key) == ("served/model", "http://h:3/v1", "completions", 2, 1, 100, "k")
    with pytest.raises(UserError, match=r"^unknown backend 'tpu'; known: transformers, vllm, openai$"):
        make_backend("tpu", "m")


@contextmanager
def _no_reach(*args):
    yield None


def _fake_tokenizers(monkeypatch, found):
    """``load_tokenizer`` answering from ``found`` (a tokenizer, or an exception to raise)."""
    from sao_env import hub

    loaded = []
    module = types.ModuleType("sao_env.policy.model")

    def load_tokenizer(source):
        loaded.append(source)
        if isinstance(found, Exception):
            raise found
        return found

    module.load_tokenizer = load_tokenizer
    monkeypatch.setitem(sys.modules, "sao_env.policy.model", module)
    monkeypatch.setattr(hub, "reach_or_cache", _no_reach)
    return loaded


def test_completions_template_none_folder_and_auto(monkeypatch):
    """``none`` loads nothing; a folder's tokenizer is returned only with a chat template; ``auto`` without
    a template is the one-line refusal naming the model."""
    with_template = types.SimpleNamespace(chat_template="{{ x }}")
    without = types.SimpleNamespace(chat_template="")
    loaded = _fake_tokenizers(monkeypatch, with_template)
    assert completions_template("m", "none") is None and loaded == []
    assert completions_template("served", "/tpl") is with_template and loaded == ["/tpl"]
    assert completions_template("served") is with_template and loaded == ["/tpl", "served"]
    _fake_tokenizers(monkeypatch, without)
    with pytest.raises(UserError, match=r"^--prompt-template /tpl: its tokenizer has no chat template$"):
        completions_template("served", "/tpl")
    with pytest.raises(UserError, match=r"^--api completions sends each prompt as raw text, and no chat template "
                                        r"was found for 'served' "):
        completions_template("served", "auto")
    assert chat_template_of("folder") is None
    _fake_tokenizers(monkeypatch, OSError("gone"))
    with pytest.raises(UserError, match=r"^--prompt-template /tpl: no tokenizer there \(OSError\)$"):
        completions_template("served", "/tpl")
    with pytest.raises(UserError, match=r"^--api completions sends each prompt as raw text"):
        completions_template("served", "auto")
    _fake_tokenizers(monkeypatch, with_template)
    assert chat_template_of("folder") == "{{ x }}"


# ----------------------------------------------------------------------------- backends: over HTTP


class _FakeOpenAI(LocalServer):
    """An OpenAI-compatible server on 127.0.0.1: ``answer(path, body)`` gives ``(status, reply object)``."""

    def __init__(self, answer):
        self.requests: list[dict] = []
        server = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                status, reply = answer(self.path, body)
                reply_json(self, json.dumps(reply).encode(), status)

            def log_message(self, *args):
                pass

        super().__init__(Handler, "/v1")


@pytest.fixture
def fake_server(no_http_env):
    started: list[_FakeOpenAI] = []

    def start(answer):
        started.append(_FakeOpenAI(answer))
        return started[-1]

    yield start
    for server in started:
        server.close()


def _chat(content, finish="stop", usage=None):
    return {"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": finish}],
            "usage": {"completion_tokens": 3} if usage is None else usage}


def test_chat_requests_carry_the_decoding_and_one_seed_per_sample(fake_server):
    """Chat: a user message, ``max_tokens``, ``n`` = 1 and seed + sample index, the key as a bearer token;
    skipped samples are not asked for and keep an empty text."""
    server = fake_server(lambda path, body: (200, _chat(f"{body['messages'][0]['content']}/{body['seed']}")))
    backend = OpenAIBackend("served", base_url=server.url + "/", concurrency=1, retries=0)
    calls, progressed = [], []
    out = backend.generate(["a", "b"], 3, temperature=0.5, top_p=0.9, max_new_tokens=7, seed=10,
                           progress=progressed.append, on_sample=lambda *args: calls.append(args),
                           skip={(0, 1), (1, 0)})
    assert [(r["path"], r["auth"]) for r in server.requests] == [("/v1/chat/completions", "Bearer EMPTY")] * 4
    assert server.requests[0] == {"path": "/v1/chat/completions", "auth": "Bearer EMPTY", "model": "served",
                                  "temperature": 0.5, "top_p": 0.9, "max_tokens": 7, "seed": 10, "n": 1,
                                  "messages": [{"role": "user", "content": "a"}]}
    assert [(r["messages"][0]["content"], r["seed"]) for r in server.requests] == [
        ("a", 10), ("a", 12), ("b", 11), ("b", 12)]
    assert out.texts == [["a/10", "", "a/12"], ["", "b/11", "b/12"]]
    assert out.tokens == [[3, None, 3], [None, 3, 3]]
    assert out.finished == [[True, None, True], [None, True, True]]
    assert out.failures == {} and progressed == [1, 1, 1, 1]
    assert calls == [(0, 0, "a/10", 3, True, None), (0, 2, "a/12", 3, True, None), (1, 1, "b/11", 3, True, None),
                     (1, 2, "b/12", 3, True, None)]


def test_completions_requests_send_the_rendered_prompt_and_read_the_text(fake_server):
    """Completions: the rendered prompt with ``skip_special_tokens``, no messages, the text of the choice;
    ``length`` is an unfinished sample."""
    reply = {"choices": [{"text": "done", "finish_reason": "length"}], "usage": {"completion_tokens": 9}}
    server = fake_server(lambda path, body: (200, reply))
    backend = OpenAIBackend("served", base_url=server.url, api="completions", api_key="sk-x", retries=0,
                            prompt_template=_Template())
    out = backend.generate(["q"], 1, temperature=0.0, top_p=1.0, max_new_tokens=5, seed=0)
    assert server.requests == [{"path": "/v1/completions", "auth": "Bearer sk-x", "model": "served",
                                "temperature": 0.0, "top_p": 1.0, "max_tokens": 5, "seed": 0, "n": 1,
                                "prompt": "<user>q<assistant>", "skip_special_tokens": True}]
    assert (out.texts, out.tokens, out.finished, out.failures) == ([["done"]], [[9]], [[False]], {})


def test_replies_without_text_usage_or_finish_reason_and_failed_requests(fake_server):
    """Null content is an empty text, usage that is not an object and a missing or empty finish reason are
    unknown; no choice, a content that is not text and an HTTP 400 fail that sample with their reason."""
    replies = {
        "null": (200, _chat(None, usage={"completion_tokens": 0})),
        "listusage": (200, _chat("t", finish=None, usage=[1])),
        "empty-finish": (200, _chat("u", finish="")),
        "no-choice": (200, {"choices": []}),
        "number": (200, _chat(7)),
        "refused": (400, {"error": "too long"}),
        "completions-shape": (200, {"choices": [{"text": "x"}]}),
    }
    server = fake_server(lambda path, body: replies[body["messages"][0]["content"]])
    backend = OpenAIBackend("served", base_url=server.url, concurrency=1, retries=0)
    prompts = list(replies)
    calls = []
    out = backend.generate(prompts, 1, temperature=1.0, top_p=1.0, max_new_tokens=8, seed=0,
                           on_sample=lambda *args: calls.append(args))
    assert out.texts == [[""], ["t"], ["u"], [""], [""], [""], [""]]
    assert out.tokens == [[0], [None], [3], [None], [None], [None], [None]]
    assert out.finished == [[True], [None], [None], [None], [None], [None], [None]]
    assert out.failures == {
        (3, 0): "unexpected reply: {'choices': []}",
        (4, 0): "the reply's content is a JSON int, not text",
        (5, 0): 'HTTP 400: {"error": "too long"}',
        (6, 0): "unexpected reply: {'choices': [{'text': 'x'}]}",
    }
    assert calls[3] == (3, 0, None, None, None, "unexpected reply: {'choices': []}")
    assert [r["path"] for r in server.requests] == ["/v1/chat/completions"] * 7


def test_a_whole_file_object_of_predictions_may_start_with_blank_lines(tmp_path):
    """SWE-bench's ``{instance_id: prediction}`` layout is read whole whether or not blank lines come before it, as
    a JSON list is; a JSON-lines file whose first record is broken is still refused at that record's line."""
    record = {"a": {"instance_id": "a", "model_patch": "x", "model_name_or_path": "m"}}
    path = tmp_path / "preds.json"
    for lead in ("", "\n", "\n  \n"):
        path.write_text(lead + json.dumps(record, indent=2))
        assert evaluate.read_predictions(path) == ([("a", "x")], "m")
    path.write_text('\n{"id": "a", "response": \n{"id": "b", "response": "y"}\n')
    with pytest.raises(UserError, match=r"preds\.json: invalid JSON"):
        evaluate.read_predictions(path)


def test_a_deadline_of_zero_is_refused_not_read_as_the_default(monkeypatch):
    """``deadline_s=0`` given to the HTTP backend or the judge is refused in one line, as on the command line; only
    ``None`` means the environment's or the default deadline."""
    from sao_env.benchmarks.backends import OpenAIBackend
    from sao_env.benchmarks.llm_grader import LLMJudge

    monkeypatch.delenv("SAO_ENV_HTTP_DEADLINE_S", raising=False)
    monkeypatch.delenv("SAO_ENV_GRADER_DEADLINE_S", raising=False)
    with pytest.raises(UserError, match=r"^--request-deadline must be greater than 0$"):
        OpenAIBackend("m", deadline_s=0)
    with pytest.raises(UserError, match=r"^--grader-deadline must be greater than 0$"):
        LLMJudge("judge", base_url="http://127.0.0.1:9/v1", deadline_s=0)
    monkeypatch.setenv("SAO_ENV_HTTP_DEADLINE_S", "12.5")
    monkeypatch.setenv("SAO_ENV_GRADER_DEADLINE_S", "7")
    assert OpenAIBackend("m").deadline_s == 12.5 and OpenAIBackend("m", deadline_s=3).deadline_s == 3
    assert LLMJudge("judge", base_url="http://127.0.0.1:9/v1").deadline_s == 7.0
