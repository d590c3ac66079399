"""vLLM's OpenAI-compatible server for real, run from the vLLM environment on 127.0.0.1 by the command that needs it:
``eval --backend vllm`` (chat API where the model has a chat template; the completions API with the template
rendered here) and the LLM judge (``--grader llm --grader-serve``), on SmolLM2-135M-Instruct (packaged). Greedy
answers are checked against transformers' on the same model and prompts. One server serves both tests (a start
costs about 18 s of wall clock here): the judge's ``--grader-serve`` is handed it in place of a second start of
the same model, and must stop what it was handed when the command ends. Skips with one line where the vLLM
environment, the packaged model or ../shared/data is absent.
"""

from __future__ import annotations

import json

import pytest
from conftest import SHARED_DATA, reply_json
from local_http import LocalServer

from sao_env.engine import process
from sao_env.errors import UserError

PACKAGED = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def folder():
    from sao_env.policy import packaged

    try:
        process.vllm_python()
        packaged.gguf_path(packaged.PACKAGED[PACKAGED])
    except UserError as err:
        pytest.skip(str(err))
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark rows not found at {SHARED_DATA}")
    return packaged.materialize(PACKAGED)


@pytest.fixture(scope="module")
def served(folder):
    """``eval --backend vllm``'s backend: vLLM's OpenAI server on the packaged model, started from the vLLM
    environment."""
    from sao_env.benchmarks.backends import VLLMBackend, make_backend

    backend = make_backend("vllm", folder, seed=0)
    assert isinstance(backend, VLLMBackend) and backend.api == "chat"
    yield backend
    backend.close()
    assert backend.server.process.poll() is not None  # stopped by the backend that started it


@pytest.mark.slow
def test_eval_backend_vllm_serves_the_model_and_answers_as_transformers_greedily(folder, served):
    from sao_env.benchmarks.backends import make_backend

    prompts = ["What is 3+4? Answer with the number only.", "Name the capital of France in one word."]
    reference = make_backend("transformers", folder, batch_size=2).generate(prompts, 1, temperature=0.0, top_p=1.0,
                                                                           max_new_tokens=16, seed=0)
    chat = served.generate(prompts, 1, temperature=0.0, top_p=1.0, max_new_tokens=16, seed=0)
    served.api, served.prompt_template = "completions", packaged_template(folder)
    try:
        completions = served.generate(prompts, 1, temperature=0.0, top_p=1.0, max_new_tokens=16, seed=0)
    finally:
        served.api, served.prompt_template = "chat", None
    assert chat.texts == reference.texts == completions.texts, (chat.texts, reference.texts, completions.texts)
    assert all(t[0].strip() for t in chat.texts)


class Renaming(LocalServer):
    """The running server as a second start of the same model would serve it: under the name the start was asked
    for (requests reach the server as its own served name, ``model``). ``close`` is recorded, not done."""

    def __init__(self, target: str, name: str, stopped: list):
        import urllib.request
        from http.server import BaseHTTPRequestHandler

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                assert body["model"] == name, body["model"]
                request = urllib.request.Request(target + self.path, json.dumps({**body, "model": "model"}).encode(),
                                                 {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=600) as reply:
                    payload, status = reply.read(), reply.status
                reply_json(self, payload, status)

            def log_message(self, *args):
                pass

        self.stopped = stopped
        super().__init__(Handler)

    def close(self) -> None:
        self.stopped.append(True)
        super().close()


def packaged_template(folder):
    from sao_env.benchmarks.backends import completions_template

    return completions_template(str(folder))


@pytest.mark.slow
def test_grade_with_a_judge_served_by_vllm_end_to_end(folder, served, tmp_path, monkeypatch):
    from sao_env.benchmarks.llm_grader import read_verdict
    from sao_env.benchmarks.evaluate import prepare_suite
    from sao_env.benchmarks.suites import load_suite
    from sao_env.cli import main

    started, stopped = [], []

    def openai_server(model, **options):  # --grader-serve's start: hands over the running server, renamed
        started.append((str(model), options))
        return Renaming(served.server.url, options["served_name"], stopped)

    monkeypatch.setattr(process, "openai_server", openai_server)
    tasks = prepare_suite(load_suite("imo_answerbench"), str(SHARED_DATA)).tasks[:2]
    predictions = tmp_path / "p.jsonl"
    predictions.write_text("".join(json.dumps({"id": t.id, "response": r}) + "\n" for t, r in
                                   zip(tasks, [f"The answer is \\boxed{{{tasks[0].reference['answer']}}}.", "No idea."])))
    code = main(["grade", "--suite", "imo_answerbench", "--data", str(SHARED_DATA), "--predictions", str(predictions),
                 "--out", str(tmp_path / "g"), "--grader", "llm", "--grader-model", PACKAGED, "--grader-serve",
                 "--grader-max-tokens", "48",
                 "--no-progress"])
    assert [(model, options["served_name"]) for model, options in started] == [(str(folder), PACKAGED)]
    assert stopped == [True]  # the command stopped the judge's server when it ended
    samples = [json.loads(line) for line in (tmp_path / "g" / "samples.jsonl").read_text().splitlines()]
    assert code == 0 and len(samples) == 2
    for sample in samples:
        assert sample["grader"] == f"llm:{PACKAGED}" and sample["judge_reply"].strip()
        assert (sample["verdict"], sample["reason"]) == read_verdict(sample["judge_reply"])
