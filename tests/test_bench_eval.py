"""`sao-env eval` and `sao-env grade` end to end, in process, on the real rows in ../shared/data.

Backends: transformers on a tiny checkpoint saved like a training run's, and the OpenAI-compatible
backend against a local HTTP server (127.0.0.1, started here) that returns canned completions.
"""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from conftest import reply_json
from local_http import LocalServer

from sao_env.cli import main
from sao_env.errors import UserError

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark rows not found at {DATA} (../shared/data)")

MATH_SUITES = ["beyond_aime", "hmmt_feb_2025", "hmmt_feb_2024", "hmmt_nov_2025", "imo_answerbench"]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A training run's directory holding a tiny Qwen2 saved with save_pretrained as checkpoints/final."""
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer

    run = tmp_path_factory.mktemp("run")
    (run / "config.yaml").write_text("model:\n  name: tiny-qwen2\n")
    spec = ModelSpec(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
                     max_position_embeddings=2048)
    tokenizer = build_tokenizer(spec)
    model = build_policy(spec, tokenizer, seed=0)
    for name in ("final", "step-10"):
        model.save_pretrained(run / "checkpoints" / name)
        tokenizer.save_pretrained(run / "checkpoints" / name)
    return run


@pytest.fixture
def one_torch_thread():
    """The tiny model is fastest on one thread; two threads on a busy 2-core machine can be 50x slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ----------------------------------------------------------------------------- transformers backend


def test_eval_tiny_checkpoint_on_every_math_suite(run_dir, tmp_path, one_torch_thread):
    out, board = tmp_path / "out", tmp_path / "leaderboards"
    code = main(["eval", str(run_dir), "--suite", ",".join(MATH_SUITES), "--data", str(DATA), "--limit", "3",
                 "--k", "2", "--max-new-tokens", "16", "--out", str(out), "--leaderboard", str(board),
                 "--backend", "transformers", "--no-progress"])
    assert code == 0
    from sao_env.graders.math import grade_math_batch

    for suite in MATH_SUITES:
        summary = _summary(out / suite)
        samples = _jsonl(out / suite / "samples.jsonl")
        assert (summary["suite"], summary["model"]) == (suite, f"{run_dir.name}/final")
        assert (summary["n"], summary["problems"], summary["k"]) == (6, 3, 2)
        assert len(samples) == 6 and {s["sample"] for s in samples} == {0, 1}
        assert all(0 < s["tokens"] <= 16 for s in samples)
        # accuracy is avg@2 over the per-sample verdicts written beside it
        per_problem = defaultdict(list)
        for s in samples:
            per_problem[s["id"]].append(s["reward"])
        assert summary["accuracy"] == pytest.approx(sum(sum(r) / 2 for r in per_problem.values()) / 3)
        assert set(summary["pass_at_k"]) == {"1", "2"}
        assert summary["pass_at_k"]["1"] == pytest.approx(summary["accuracy"])
        assert summary["grader"] == "math-verify" and summary["limited"] is True
        # the recorded verdicts are the grader's: grading the responses again agrees
        gold = {s["id"]: s["gold"] for s in samples}
        regraded = grade_math_batch([(gold[s["id"]], s["response"]) for s in samples])
        assert [r.reward for r in regraded] == [s["reward"] for s in samples]
    assert set(_summary(out / "imo_answerbench")["by_category"]) == {"Algebra"}
    # the opt-in leaderboard: one CSV row per (model, suite, k), the Markdown view and the site
    rows = list(csv.DictReader((board / "benchmarks.csv").open()))
    assert sorted(r["suite"] for r in rows) == sorted(MATH_SUITES)
    beyond = next(r for r in rows if r["suite"] == "beyond_aime")
    assert (beyond["model"], beyond["k"], beyond["problems"], beyond["suite_problems"]) == (
        f"{run_dir.name}/final", "2", "3", "100")
    assert float(beyond["avg_at_k"]) == pytest.approx(_summary(out / "beyond_aime")["accuracy"], abs=1e-6)
    assert beyond["grader"] == "math-verify" and beyond["answer_fallback"] == "none" and beyond["code_version"]
    lines = (board / "benchmarks.md").read_text().splitlines()
    assert lines[0] == "# Benchmarks"
    row = next(line for line in lines if line.startswith(f"| {run_dir.name}/final | beyond_aime |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4:7] == ["2", "3 of 100", "6"] and cells[7] == "math-verify" and len(cells[9]) == 10
    assert "beyond_aime" in (board / "index.html").read_text()


def test_eval_named_checkpoint_and_bad_arguments(run_dir, tmp_path, capsys, one_torch_thread):
    code = main(["eval", str(run_dir), "--checkpoint", "step-10", "--suite", "hmmt_nov_2025", "--data", str(DATA),
                 "--limit", "1", "--k", "1", "--max-new-tokens", "4", "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    assert _summary(tmp_path / "hmmt_nov_2025")["model"] == f"{run_dir.name}/step-10"
    assert not (tmp_path / "leaderboards").exists() and not Path("leaderboards/benchmarks.csv").exists()

    assert main(["eval", str(run_dir), "--checkpoint", "step-99", "--suite", "beyond_aime", "--data", str(DATA)]) == 2
    assert "no checkpoint 'step-99'; available: final, step-10" in capsys.readouterr().err
    assert main(["eval", str(run_dir), "--suite", "no_such_suite", "--data", str(DATA)]) == 2
    assert "unknown eval 'no_such_suite'" in capsys.readouterr().err
    assert main(["eval", str(run_dir), "--suite", "beyond_aime", "--data", str(DATA), "--backend", "tpu"]) == 2
    assert "'tpu' is not one of 'transformers', 'vllm', 'openai'" in capsys.readouterr().err


def test_swebench_without_docker_is_one_line(run_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no-docker.sock'}")
    with pytest.warns(UserWarning, match="FAIL_TO_PASS"):  # the partial file loads for prompting only
        code = main(["eval", str(run_dir), "--suite", "swebench_verified", "--data", str(DATA), "--limit", "2",
                     "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("sao-env: error: no Docker engine reachable (")
    assert err[-1].endswith("SWE-bench evaluation needs one")


def test_vllm_backend_missing_is_a_user_error(monkeypatch):
    from sao_env.benchmarks.backends import make_backend
    from sao_env.engine import process

    monkeypatch.setattr(process, "find_spec", lambda name: None)  # no vllm here, no .venv-vllm in the checkout
    monkeypatch.setattr(process, "VENV", "no-such-venv")
    monkeypatch.delenv("SAO_ENV_VLLM_PYTHON", raising=False)
    with pytest.raises(UserError, match=r"^vLLM is not installed: make install-vllm"):
        make_backend("vllm", "some/model")


# ----------------------------------------------------------------------------- OpenAI-compatible backend


class _CannedServer(LocalServer):
    """Answers /v1/chat/completions and /v1/completions with canned text chosen by ``reply(prompt, seed)``."""

    def __init__(self, reply):
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                if self.path.endswith("/chat/completions"):
                    prompt = body["messages"][-1]["content"]
                    text = reply(prompt, body.get("seed"))
                    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                elif self.path.endswith("/completions"):
                    text = reply(body["prompt"], body.get("seed"))
                    choice = {"index": 0, "text": text, "finish_reason": "length"}
                else:
                    self.send_error(404)
                    return
                payload = json.dumps({"choices": [choice], "usage": {"completion_tokens": len(text.split())}}).encode()
                reply_json(self, payload)

            def log_message(self, *args):
                pass

        super().__init__(Handler, "/v1")


def _tasks(suite: str):
    from sao_env.benchmarks.loaders import make_loader

    return make_loader(suite, DATA).load()[:3]


def _canned(suite: str, reverse_lists: bool = False):
    """Problem 0: always right; problem 1: right for even seeds only; problem 2: always wrong."""
    tasks = _tasks(suite)

    def reply(prompt: str, seed: int) -> str:
        for index, task in enumerate(tasks):
            if prompt == task.prompt or prompt.startswith(task.prompt[:200]):
                gold = task.reference["answer"].replace("$", "").strip()
                if reverse_lists and ", " in gold:
                    gold = ", ".join(reversed(gold.split(", ")))
                right = index == 0 or (index == 1 and seed % 2 == 0)
                return f"Some reasoning.\n\nThe final answer is \\boxed{{{gold if right else gold + ' + 1'}}}."
        return "I do not know this problem."

    return reply


def test_eval_through_an_openai_compatible_server(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with _CannedServer(_canned("beyond_aime")) as server:
        code = main(["eval", "served-model", "--suite", "beyond_aime", "--data", str(DATA), "--limit", "3",
                     "--k", "2", "--backend", "openai", "--base-url", server.url, "--out", str(tmp_path),
                     "--leaderboard", str(tmp_path / "board"), "--no-progress"])
    assert code == 0
    summary = _summary(tmp_path / "beyond_aime")
    # per problem: 2/2, 1/2 (seed 0 right, seed 1 wrong), 0/2 -> avg@2 = (1 + .5 + 0) / 3 = .5
    assert (summary["accuracy"], summary["n"], summary["problems"], summary["k"]) == (0.5, 6, 3, 2)
    # pass@2 = (1 + 1 + 0) / 3; Wilson at p = .5 over 3 problems: [.125334, .874666]
    assert summary["pass_at_k"] == {"1": 0.5, "2": pytest.approx(2 / 3)}
    assert (summary["ci95_low"], summary["ci95_high"]) == (pytest.approx(0.1253345, abs=1e-6),
                                                           pytest.approx(0.8746655, abs=1e-6))
    assert summary["ci95_half_width"] == pytest.approx(0.3746655, abs=1e-6)
    assert summary["ci_method"] == "Wilson score interval of the per-problem accuracies (95 %)"  # it said Student-t
    assert summary["model"] == "served-model" and summary["backend"] == "openai"
    assert summary["tokens"]["completion_tokens"] > 0 and summary["tokens"]["unfinished"] == 0
    assert {(r["model"], r["seed"], r["auth"]) for r in server.requests} >= {("served-model", 0, "Bearer sk-test"),
                                                                             ("served-model", 1, "Bearer sk-test")}
    assert all(r["path"] == "/v1/chat/completions" and r["temperature"] == 1.0 for r in server.requests)
    assert "| served-model | beyond_aime | 50.0 [12.5, 87.5] | 66.7 | 2 | 3 of 100 | 6 |" in (tmp_path / "board" / "benchmarks.md").read_text()


def test_completions_api_and_unordered_list_answers(tmp_path):
    # hmmt_feb_2024's problem 1 ... 3 answers; the canned replies write list answers in reverse order
    with _CannedServer(_canned("hmmt_feb_2024", reverse_lists=True)) as server:
        code = main(["eval", "served-model", "--suite", "hmmt_feb_2024,imo_answerbench", "--data", str(DATA),
                     "--limit", "3", "--k", "2", "--backend", "openai", "--api", "completions", "--prompt-template", "none", "--base-url",
                     server.url, "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    assert all(r["path"] == "/v1/completions" for r in server.requests)
    hmmt = _summary(tmp_path / "hmmt_feb_2024")
    assert (hmmt["accuracy"], hmmt["n"]) == (0.5, 6)
    assert hmmt["tokens"]["unfinished"] == 6  # finish_reason "length"
    imo = _summary(tmp_path / "imo_answerbench")  # the server knows no IMO problem: every answer is missing
    assert (imo["accuracy"], imo["n"], imo["reasons"]) == (0.0, 6, {"no-answer": 6})
    assert imo["by_category"]["Algebra"]["problems"] == 3


def test_completions_render_the_chat_template_or_refuse_in_one_line(tmp_path, capsys):
    from sao_env.policy import packaged

    def reply(prompt, seed):
        return "\\boxed{1}"

    base = ["eval", "served-model", "--suite", "beyond_aime", "--data", str(DATA), "--limit", "1", "--k", "1",
            "--backend", "openai", "--api", "completions", "--no-progress"]
    with _CannedServer(reply) as server:
        assert main([*base, "--base-url", server.url, "--out", str(tmp_path / "a")]) == 2
        assert not server.requests  # refused before any request
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--api completions sends each prompt as raw text, and no chat template was found for " \
        "'served-model'" in err[0] and "--prompt-template none" in err[0]
    try:
        folder = packaged.materialize("smollm2-135m-instruct")
    except UserError as why:
        pytest.skip(str(why))
    with _CannedServer(reply) as server:
        assert main([*base, "--base-url", server.url, "--out", str(tmp_path / "b"), "--prompt-template", str(folder)]) == 0
        assert main([*base, "--base-url", server.url, "--out", str(tmp_path / "c"), "--prompt-template", "none"]) == 0
    problem = _tasks("beyond_aime")[0].prompt
    assert len(server.requests) == 2
    rendered, raw = server.requests[0]["prompt"], server.requests[1]["prompt"]
    assert raw == problem
    assert rendered.startswith("<|im_start|>system\n") and rendered.endswith(
        f"<|im_start|>user\n{problem}<|im_end|>\n<|im_start|>assistant\n")


def test_grader_serve_needs_the_llm_grader_and_the_judge_gets_its_token_cap(tmp_path, capsys):
    tasks = _tasks("imo_answerbench")[:1]
    predictions = _write_predictions(tmp_path / "p.jsonl", [(tasks[0].id, "\\boxed{3}")])
    base = ["grade", "--suite", "imo_answerbench", "--data", str(DATA), "--predictions", str(predictions),
            "--out", str(tmp_path / "g"), "--no-progress"]
    assert main([*base, "--grader-serve"]) == 2
    assert "--grader-serve serves a judge model: it needs --grader llm" in capsys.readouterr().err
    with _CannedServer(lambda prompt, seed: "Same. \\boxed{Correct}") as server:
        assert main([*base, "--grader", "llm", "--grader-model", "judge", "--grader-base-url", server.url,
                     "--grader-max-tokens", "7"]) == 0
    assert [r["max_tokens"] for r in server.requests] == [7]
    sample = _jsonl(tmp_path / "g" / "samples.jsonl")[0]
    assert (sample["verdict"], sample["judge_reply"]) == ("correct", "Same. \\boxed{Correct}")


# ----------------------------------------------------------------------------- sao-env grade


def _write_predictions(path: Path, lines: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "response": r, "extra": 1}) + "\n" for i, r in lines))
    return path


def test_grade_a_predictions_file(tmp_path):
    answers = {t.id: t.reference["answer"] for t in _tasks("beyond_aime")}
    predictions = _write_predictions(tmp_path / "preds.jsonl", [
        ("0", f"\\boxed{{{answers['0']}}}"), ("0", f"\\boxed{{{answers['0']}.0}}"),
        ("1", f"\\boxed{{{answers['1']}}}"), ("1", "\\boxed{-1}"),
        ("2", "no answer at all"), ("2", f"\\boxed{{{int(answers['2']) + 1}}}"),
    ])
    code = main(["grade", "--suite", "beyond_aime", "--data", str(DATA / "beyondaime"), "--predictions",
                 str(predictions), "--out", str(tmp_path / "graded"), "--no-progress"])
    assert code == 0
    summary = _summary(tmp_path / "graded")
    assert (summary["accuracy"], summary["n"], summary["problems"], summary["k"]) == (0.5, 6, 3, 2)
    assert summary["model"] == "preds" and summary["backend"] == "predictions"
    verdicts = [s["verdict"] for s in _jsonl(tmp_path / "graded" / "samples.jsonl")]
    assert verdicts == ["correct", "correct", "correct", "wrong", "wrong", "wrong"]


def test_grade_rejects_unknown_ids(tmp_path, capsys):
    predictions = _write_predictions(tmp_path / "p.jsonl", [("0", "\\boxed{1}"), ("abc", "x"), ("9999", "y")])
    code = main(["grade", "--suite", "beyond_aime", "--data", str(DATA), "--predictions", str(predictions),
                 "--out", str(tmp_path / "g")])
    assert code == 2
    err = capsys.readouterr().err
    assert "id(s) not in suite beyond_aime: 9999, abc" in err
    assert not (tmp_path / "g" / "summary.json").exists()


def test_grade_with_an_llm_judge(tmp_path):
    tasks = _tasks("imo_answerbench")[:2]

    def judge(prompt: str, seed) -> str:
        assert prompt.startswith("You are grading")
        verdict = "Correct" if "RIGHT" in prompt.split("Solution to grade")[1] else "Incorrect"
        return f"The answers agree or not. \\boxed{{{verdict}}}"

    predictions = _write_predictions(tmp_path / "p.jsonl", [(tasks[0].id, "RIGHT \\boxed{3}"), (tasks[1].id, "WRONG")])
    with _CannedServer(judge) as server:
        code = main(["grade", "--suite", "imo_answerbench", "--data", str(DATA), "--predictions", str(predictions),
                     "--out", str(tmp_path / "g"), "--grader", "llm", "--grader-model", "judge-model",
                     "--grader-base-url", server.url, "--no-progress"])
    assert code == 0
    summary = _summary(tmp_path / "g")
    assert (summary["accuracy"], summary["n"], summary["grader"]) == (0.5, 2, "llm:judge-model")
    samples = _jsonl(tmp_path / "g" / "samples.jsonl")
    assert [s["grader"] for s in samples] == ["llm:judge-model"] * 2
    assert all(r["model"] == "judge-model" and r["temperature"] == 0.0 for r in server.requests)


# ----------------------------------------------------------------------------- the HTTP client


class _ScriptedServer(LocalServer):
    """HTTP/1.1 (keep-alive) server answering POSTs with scripted (status, headers) replies in turn,
    then 200; records each request's client port (one port = one reused connection)."""

    def __init__(self, script: list[tuple[int, dict]]):
        self.script, self.ports = list(script), []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers["Content-Length"]))
                server.ports.append(self.client_address[1])
                status, headers = server.script.pop(0) if server.script else (200, {})
                body = json.dumps({"ok": True} if status == 200 else {"error": "busy"}).encode()
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(Handler, "/v1/chat/completions")


def test_http_client_honours_retry_after_and_reuses_its_connection():
    from sao_env.benchmarks._http import post_json

    waits: list[float] = []
    script = [(429, {"Retry-After": "7"}), (503, {}), (429, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})]
    with _ScriptedServer(script) as server:
        assert post_json(server.url, {"x": 1}, sleep=waits.append) == {"ok": True}
        for _ in range(3):
            assert post_json(server.url, {"x": 2}, sleep=waits.append) == {"ok": True}
    # Retry-After 7 s; no header: the back-off of the second try (1 s * 2^1); a date in the past: 0 s
    assert waits == [7.0, 2.0, 0.0]
    assert len(server.ports) == 7 and len(set(server.ports)) == 1  # seven requests over one kept-alive connection


def test_http_client_retry_budget_is_configurable(monkeypatch):
    from sao_env.benchmarks._http import RetryPolicy, parse_retry_after, post_json

    waits: list[float] = []
    with _ScriptedServer([(503, {"Retry-After": "1000"})] * 10) as server:
        with pytest.raises(UserError, match=r"failed \(HTTP 503"):
            post_json(server.url, {}, retries=2, sleep=waits.append)
    assert len(server.ports) == 3 and waits == [120.0, 120.0]  # Retry-After capped at max_wait_s
    monkeypatch.setenv("SAO_ENV_HTTP_RETRIES", "0")
    with _ScriptedServer([(429, {})]) as server:
        with pytest.raises(UserError, match="HTTP 429"):
            post_json(server.url, {}, sleep=waits.append)
    assert len(server.ports) == 1
    with _ScriptedServer([(400, {})]) as server:  # a client error is not retried
        with pytest.raises(UserError, match="HTTP 400"):
            post_json(server.url, {}, retries=5, sleep=waits.append)
    assert len(server.ports) == 1
    assert RetryPolicy().retries == 8 and parse_retry_after("garbage") is None and parse_retry_after("2.5") == 2.5
    monkeypatch.setenv("SAO_ENV_HTTP_RETRIES", "many")
    with pytest.raises(UserError, match="SAO_ENV_HTTP_RETRIES"):
        RetryPolicy.from_env()
