"""A grader meets every kind of model output: each one is graded (wrong, or right for the right
reason) with a stated reason, and neither a batch nor a run dies on one response.

Also: emitting numbers never raises a reward. Benchmark suites read the last ``\\boxed{}`` only,
and for every scenario a response made of noise and numbers (the gold answer among them) earns
nothing more than the response without them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from sao_env.cli import main
from sao_env.graders import grade
from sao_env.graders.math import MAX_ANSWER_CHARS, clean_text, extract_answer, grade_math_batch
from sao_env.scenario import Scenario, ScenarioSpec
from sao_env.specs import available, find_spec, load_yaml

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
MEGABYTE = 1 << 20


# ----------------------------------------------------------------------------- hostile responses


HOSTILE = {
    # name: (gold, response, expected reward (None: either, math-verify's reading of the junk decides), reasons)
    "lone surrogate, right box": ("3", "\udc80 so \\boxed{3} \ud800", 1.0, {"equivalent"}),
    "NUL bytes, right box": ("3", "\x00\x00\\boxed{3}\x00", 1.0, {"equivalent"}),
    "NUL inside the box": ("3", "\\boxed{3\x00}", None, {"equivalent", "not-equivalent", "unparsed-answer"}),
    "a megabyte of prose": ("3", "blah " * (MEGABYTE // 5), 0.0, {"no-answer"}),
    "a megabyte in a box": ("3", "\\boxed{" + "1" * MEGABYTE + "}", 0.0, {"answer-too-long"}),
    "a megabyte of open braces": ("3", "\\boxed{" + "{" * MEGABYTE, 0.0, {"no-answer"}),
    "tower of powers": ("5", "\\boxed{9^{9^{9^{9^{9}}}}}", 0.0, {"timeout"}),
    "huge factorial": ("7", "\\boxed{(10^{7})!}", 0.0, {"timeout"}),
    "nested fractions": ("1", "\\boxed{" + "\\frac{1}{" * 150 + "2" + "}" * 150 + "}", 0.0,
                         {"not-equivalent", "unparsed-answer", "timeout", "error: RecursionError",
                          "error: worker died"}),
    "unbalanced delimiters": ("2", "\\boxed{\\left( \\right. \\begin{matrix} 1 & }", 0.0,
                              {"not-equivalent", "unparsed-answer", "error: ValueError"}),
    "control characters": ("2", "\\boxed{\x1b[31m2\x07}", 0.0, {"not-equivalent", "unparsed-answer"}),
}


def test_every_hostile_response_gets_a_verdict_and_a_reason():
    names = list(HOSTILE)
    results = grade_math_batch([(HOSTILE[n][0], HOSTILE[n][1]) for n in names], timeout_s=2.0)
    assert len(results) == len(names)
    for name, result in zip(names, results):
        _, _, reward, reasons = HOSTILE[name]
        assert reward is None or result.reward == reward, (name, result.details)
        assert result.details["reason"] in reasons, (name, result.details["reason"])
        json.dumps(result.details).encode("utf-8")  # every detail is writable as UTF-8 JSON
    # the pool survived the timeouts and crashes: the next batch is graded normally
    assert [r.reward for r in grade_math_batch([("4", "\\boxed{4}"), ("4", "\\boxed{5}")])] == [1.0, 0.0]


def test_clean_text_and_the_answer_length_limit():
    assert clean_text("a\udc80b\x00c") == "a\ufffdb\ufffdc"
    assert clean_text("plain é ✓") == "plain é ✓"
    answer = "1" * (MAX_ANSWER_CHARS + 1)
    (result,) = grade_math_batch([(answer, f"\\boxed{{{answer}}}")])
    assert result.details["reason"] == "answer-too-long" and len(result.details["extracted"]) < 300


@pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark rows not found at {DATA} (../shared/data)")
def test_grade_command_survives_invalid_unicode_nul_bytes_and_huge_answers(tmp_path):
    from sao_env.benchmarks.loaders import make_loader

    tasks = make_loader("beyond_aime", DATA).load()[:4]
    gold = tasks[0].reference["answer"]
    lines = [
        json.dumps({"id": tasks[0].id, "response": f"\udc80\\boxed{{{gold}}}"}).encode(),  # escaped lone surrogate
        json.dumps({"id": tasks[1].id, "response": "nul\u0000bytes \\boxed{1}"}).encode(),
        json.dumps({"id": tasks[2].id, "response": "x" * MEGABYTE}).encode(),
        b'{"id": "' + tasks[3].id.encode() + b'", "response": "raw \xff\xfe bytes \\\\boxed{2}"}',  # not UTF-8
    ]
    predictions = tmp_path / "preds.jsonl"
    predictions.write_bytes(b"\n".join(lines) + b"\n")
    code = main(["grade", "--suite", "beyond_aime", "--data", str(DATA), "--predictions", str(predictions),
                 "--out", str(tmp_path / "g"), "--no-progress"])
    assert code == 0
    summary = json.loads((tmp_path / "g" / "summary.json").read_text())
    assert summary["n"] == 4 and summary["sanitized"] == 2  # the surrogate and the NUL; bad bytes decode as U+FFFD
    samples = [json.loads(line) for line in (tmp_path / "g" / "samples.jsonl").read_text(encoding="utf-8").splitlines()]
    assert samples[0]["verdict"] == "correct" and samples[0]["response"].startswith("\ufffd")
    assert [s["reason"] for s in samples[1:3]] == ["not-equivalent", "no-answer"]
    assert "\ufffd" in samples[3]["response"] and samples[3]["extracted"] == "2"


# ----------------------------------------------------------------------------- numbers never pay


def test_benchmark_answers_come_from_the_last_box_only():
    noise = "'_7>JSH3!CA\na_bG"  # graded correct for "3" by the former last-number fallback
    assert grade_math_batch([("3", noise)])[0].details["reason"] == "no-answer"
    listing = " ".join(str(i) for i in range(-20, 200)) + " the answer is 3"
    assert extract_answer(listing) == (None, "none")
    assert grade_math_batch([("3", listing), ("3", listing + " \\boxed{4}")])[0].reward == 0.0
    # the fallbacks exist as named options, for reading base models; never the default
    assert extract_answer(noise, "last-number") == ("3", "last-number")
    assert extract_answer(listing, "answer-is") == ("3", "answer-is")


def _scenario_tasks(name: str, per_phase: int = 4):
    with warnings.catch_warnings():  # swebench-verified's partial local rows warn that they cannot be evaluated
        warnings.simplefilter("ignore", UserWarning)
        scenario = Scenario(ScenarioSpec(**load_yaml(find_spec("envs", name))))
    rng = np.random.default_rng(0)
    return [scenario._sample_from(p, rng, created_at=0.0, index=i)
            for p in range(len(scenario.windows)) for i in range(per_phase)]


def _numbers(gold: str) -> str:
    return " ".join(str(i) for i in range(-30, 1000)) + f" {gold} = {gold}\n{gold}"


@pytest.mark.parametrize("name", available("envs"))
def test_no_scenario_reward_rises_with_emitted_numbers(name):
    """For every task of every phase: noise, a wrong boxed answer or prose, with numbers appended
    (the gold answer among them, bare), earns no more than without them, and numbers alone earn 0."""
    tasks = _scenario_tasks(name)
    if tasks[0].grader == "swebench":
        pytest.skip("swebench-verified is graded by test logs inside the instance's Docker container, not by text")
    checked = 0
    for task in tasks:
        gold = str(task.reference.get("answer", "42")).replace("$", "")
        numbers = _numbers(gold)
        assert grade(task, numbers).reward == 0.0, (name, task.id)
        for base in ("'_7>JSH3!CA\na_bG", "\\boxed{-987654321}", "I think it is large.", "<answer>x</answer>"):
            assert grade(task, base + "\n" + numbers).reward <= grade(task, base).reward, (name, task.id, base)
            checked += 1
    assert checked == 4 * len(tasks)
