"""Generation backends behind one interface.

``backend.generate(prompts, n, *, temperature, top_p, max_new_tokens, seed) -> Generations`` with
``Generations.texts[i][j]`` the j-th of n samples for prompt i, plus token counts and whether each
sample ended by itself (end-of-sequence / stop) rather than at ``max_new_tokens``.

- ``transformers``: batched sampling with ``sao_env.policy.generate.sample`` (KV cache, left
  padding), on CUDA when available, else CPU; the prompt goes through the tokenizer's chat
  template when it has one; ``max_new_tokens`` is lowered (with a warning) so that the longest
  prompt plus the response fits the model's context.
- ``vllm``: vLLM's OpenAI-compatible server, started from the vLLM environment (``make install-vllm``) on
  127.0.0.1 for the evaluation and stopped after it; then as ``openai``.
- ``openai``: any OpenAI-compatible server (``vllm serve``, ...) through ``/v1/chat/completions``
  or ``/v1/completions`` over pooled keep-alive connections (``_http``: ``Retry-After`` honoured,
  a configurable retry budget, a deadline per try, a byte cap on the reply); one request per sample
  (seed + sample index), several in flight, each sample handed over as it finishes; a sample whose
  request cannot succeed is recorded in ``Generations.failures`` and the others go on.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Protocol

from sao_env.errors import UserError

Progress = Callable[[int], None]
"""Called with the number of samples just finished."""

OnSample = Callable[[int, int, str | None, int | None, bool | None, str | None], None]
"""Called as each sample finishes: ``(prompt, sample, text, tokens, finished, failure)``."""

DEFAULT_DEADLINE_S = 1800.0
"""Seconds one request to ``--backend openai`` may take in all: a 32,768-token response at 20 tokens/s
takes 27 minutes (``$SAO_ENV_HTTP_DEADLINE_S``, ``--request-deadline``)."""


@dataclass
class Generations:
    """``texts[i][j]``: sample j of prompt i; ``tokens`` and ``finished`` have the same shape."""

    texts: list[list[str]]
    tokens: list[list[int | None]] = field(default_factory=list)
    finished: list[list[bool | None]] = field(default_factory=list)
    max_new_tokens: int | None = None
    """The response limit used: lower than the one asked for when prompt plus response would not fit."""
    failures: dict[tuple[int, int], str] = field(default_factory=dict)
    """``(prompt, sample)`` -> why that sample has no response (a request that could not succeed)."""


class Backend(Protocol):
    name: str

    def generate(
        self,
        prompts: list[str],
        n: int,
        *,
        temperature: float,
        top_p: float,
        max_new_tokens: int,
        seed: int,
        progress: Progress | None = None,
    ) -> Generations: ...


# ----------------------------------------------------------------------------- transformers


class TransformersBackend:
    """Hugging Face model folder or hub id, sampled in batches of ``batch_size`` sequences."""

    name = "transformers"

    def __init__(self, model: str | Path, *, batch_size: int = 16, device: str | None = None, dtype: str = "auto"):
        import torch
        from transformers import AutoModelForCausalLM

        from sao_env.hub import reach_or_cache
        from sao_env.policy.model import load_tokenizer

        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        with reach_or_cache() as why_offline:  # an unreachable hub: the cache only, at once (not minutes of retries)
            try:
                self.tokenizer = load_tokenizer(str(model))
                torch_dtype = getattr(torch, dtype) if dtype != "auto" else "auto"
                self.model = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch_dtype).to(self.device)
            except (OSError, ValueError) as err:
                reason = (str(err).strip().splitlines() or [""])[0][:200]
                raise UserError(f"cannot load model {model}" + (f" ({why_offline})" if why_offline else "")
                                + f" ({type(err).__name__}: {reason})") from err
        self.model.eval()
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.batch_size = max(1, batch_size)
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        eos_ids = eos if isinstance(eos, list) else [eos]
        eos_ids = [e for e in eos_ids if e is not None] or [self.tokenizer.eos_token_id]
        self.eos_ids = [e for e in eos_ids if e is not None]
        self.use_chat_template = bool(getattr(self.tokenizer, "chat_template", None))

    def encode(self, prompt: str) -> list[int]:
        if self.use_chat_template:
            text = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.tokenizer(prompt)["input_ids"]

    def generate(self, prompts, n, *, temperature, top_p, max_new_tokens, seed, progress=None) -> Generations:
        import torch

        from sao_env.policy.generate import sample

        encoded = [self.encode(p) for p in prompts]
        context = getattr(self.model.config, "max_position_embeddings", None)
        longest = max((len(e) for e in encoded), default=0)
        max_new_tokens = fit_to_context(longest, max_new_tokens, context)
        jobs = [(i, j) for i in range(len(prompts)) for j in range(n)]
        jobs.sort(key=lambda job: len(encoded[job[0]]))  # similar lengths batch together
        generator = torch.Generator().manual_seed(seed)
        out = Generations(
            texts=[[""] * n for _ in prompts],
            tokens=[[None] * n for _ in prompts],
            finished=[[None] * n for _ in prompts],
        )
        for start in range(0, len(jobs), self.batch_size):
            batch = jobs[start : start + self.batch_size]
            samples = sample(
                self.model,
                [encoded[i] for i, _ in batch],
                max_new_tokens=max_new_tokens,
                eos_token_id=self.eos_ids[0],
                pad_token_id=self.tokenizer.pad_token_id,
                generator=generator,
                temperature=temperature,
                top_p=top_p,
            )
            for (i, j), s in zip(batch, samples):
                ids = list(s.token_ids)
                stop = next((t for t, tok in enumerate(ids) if tok in self.eos_ids), None)
                finished = stop is not None
                if stop is not None:
                    ids = ids[: stop + 1]
                out.texts[i][j] = self.tokenizer.decode(ids, skip_special_tokens=True)
                out.tokens[i][j] = len(ids)
                out.finished[i][j] = finished
            if progress:
                progress(len(batch))
        out.max_new_tokens = max_new_tokens
        return out


def fit_to_context(longest_prompt: int, max_new_tokens: int, context: int | None) -> int:
    """``max_new_tokens`` lowered so that the longest prompt plus the response fits ``context``
    (with a warning); a UserError when the prompt alone does not fit."""
    if context is None or longest_prompt + max_new_tokens <= context:
        return max_new_tokens
    if longest_prompt >= context:
        raise UserError(f"a prompt of {longest_prompt} tokens does not fit the model's context of {context} tokens")
    fitted = context - longest_prompt
    warnings.warn(f"max_new_tokens {max_new_tokens} lowered to {fitted}: the longest prompt has {longest_prompt} "
                  f"tokens and the model's context is {context}", UserWarning, stacklevel=3)
    return fitted


# ----------------------------------------------------------------------------- vLLM


# ----------------------------------------------------------------------------- OpenAI-compatible


class OpenAIBackend:
    """An OpenAI-compatible HTTP server; ``model`` is the name the server knows the model by."""

    name = "openai"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api: Literal["chat", "completions"] = "chat",
        concurrency: int = 8,
        deadline_s: float | None = None,
        retries: int | None = None,
        max_bytes: int | None = None,
        prompt_template=None,
    ):
        from sao_env.benchmarks._http import env_number, max_reply_bytes

        self.model = model
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "http://127.0.0.1:8000/v1").rstrip("/")
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        if api not in ("chat", "completions"):
            raise UserError(f"--api must be chat or completions, not {api!r}")
        self.api = api
        self.concurrency = max(1, concurrency)
        self.deadline_s = env_number("SAO_ENV_HTTP_DEADLINE_S", DEFAULT_DEADLINE_S) if deadline_s is None else deadline_s
        if self.deadline_s <= 0:
            raise UserError("--request-deadline must be greater than 0")
        self.retries = retries
        self.max_bytes = max_reply_bytes(max_bytes)
        self.prompt_template = prompt_template
        """``--api completions``: a tokenizer whose chat template renders each prompt (an instruct model given the
        raw prompt ends at once), or None to send the raw prompt (a base model)."""

    def render(self, prompt: str) -> str:
        if self.api == "chat" or self.prompt_template is None:
            return prompt
        return self.prompt_template.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                                        add_generation_prompt=True)

    def _one(self, prompt: str, *, temperature, top_p, max_new_tokens, seed) -> tuple[str, int | None, bool | None]:
        """One sample: (text, completion tokens, ended by itself); ``RequestFailed`` when there is none."""
        from sao_env.benchmarks._http import RequestFailed, post_json

        payload = {"model": self.model, "temperature": temperature, "top_p": top_p,
                   "max_tokens": max_new_tokens, "seed": seed, "n": 1}
        if self.api == "chat":
            payload["messages"] = [{"role": "user", "content": prompt}]
        else:
            payload["prompt"] = self.render(prompt)
            payload["skip_special_tokens"] = True
        url = f"{self.base_url}/{'chat/completions' if self.api == 'chat' else 'completions'}"
        reply = post_json(url, payload, api_key=self.api_key, deadline_s=self.deadline_s, retries=self.retries,
                          max_bytes=self.max_bytes)
        try:
            choice = reply["choices"][0]
            text = choice["message"]["content"] if self.api == "chat" else choice["text"]
        except (KeyError, IndexError, TypeError):
            raise RequestFailed(url, f"unexpected reply: {str(reply)[:200]}") from None
        if text is not None and not isinstance(text, str):
            raise RequestFailed(url, f"the reply's content is a JSON {type(text).__name__}, not text")
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        finish = choice.get("finish_reason")
        return text or "", usage.get("completion_tokens"), (finish == "stop") if finish else None

    def generate(self, prompts, n, *, temperature, top_p, max_new_tokens, seed, progress=None,
                 on_sample: OnSample | None = None, skip=frozenset()) -> Generations:
        """Every ``(prompt, sample)`` not in ``skip``; ``on_sample`` is called (in this thread) as each finishes."""
        from sao_env.benchmarks._http import RequestFailed
        from sao_env.benchmarks._pool import each_done

        out = Generations(
            texts=[[""] * n for _ in prompts],
            tokens=[[None] * n for _ in prompts],
            finished=[[None] * n for _ in prompts],
        )

        def run(job: tuple[int, int]):
            i, j = job
            try:
                return self._one(prompts[i], temperature=temperature, top_p=top_p,
                                 max_new_tokens=max_new_tokens, seed=seed + j), None
            except RequestFailed as err:
                return (None, None, None), err.reason

        jobs = [(i, j) for i in range(len(prompts)) for j in range(n) if (i, j) not in skip]
        for index, ((text, tokens, finished), failure) in each_done(jobs, run, self.concurrency):
            i, j = jobs[index]
            if failure is None:
                out.texts[i][j], out.tokens[i][j], out.finished[i][j] = text, tokens, finished
            else:
                out.failures[(i, j)] = failure
            if on_sample:
                on_sample(i, j, text, tokens, finished, failure)
            if progress:
                progress(1)
        return out


# ----------------------------------------------------------------------------- vLLM


def chat_template_of(model: str | Path) -> str | None:
    """The chat template of a local model folder (its tokenizer's), or None where it has none."""
    from sao_env.policy.model import load_tokenizer

    return getattr(load_tokenizer(str(model)), "chat_template", None) or None


def completions_template(model: str, choice: str = "auto"):
    """The tokenizer whose chat template ``--api completions`` renders prompts with, or None for raw prompts.

    ``choice`` is ``none`` (raw prompts, for a base model), a local model folder (its template), or ``auto``: the
    served model's own template where its name is a local folder, a packaged model or a cached hub id. ``auto``
    with no template found is refused: an instruct model given the raw prompt answers nothing (measured: every
    response empty for SmolLM2-135M-Instruct under vLLM's completions API)."""
    from sao_env.policy.model import load_tokenizer

    if choice == "none":
        return None
    source = model if choice == "auto" else choice
    if choice == "auto":
        from sao_env.policy import packaged

        if packaged.is_packaged(model):
            source = str(packaged.materialize(model))
    try:
        from sao_env.hub import reach_or_cache

        with reach_or_cache():
            tokenizer = load_tokenizer(source)
    except (OSError, ValueError) as err:
        if choice != "auto":
            raise UserError(f"--prompt-template {choice}: no tokenizer there ({type(err).__name__})") from None
        tokenizer = None
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer
    if choice != "auto" and tokenizer is not None:
        raise UserError(f"--prompt-template {choice}: its tokenizer has no chat template")
    raise UserError(f"--api completions sends each prompt as raw text, and no chat template was found for {model!r} "
                    "(an instruct model answers nothing without one): use --api chat, --prompt-template FOLDER, "
                    "or --prompt-template none for a base model")


class VLLMBackend(OpenAIBackend):
    """vLLM's OpenAI-compatible server (``vllm serve``), run from the vLLM environment on 127.0.0.1 for this
    evaluation and stopped after it (``engine/process.py``): the chat API where the model has a chat template,
    else completions. Sampling is the server's: one request per sample, seeded with seed + sample index."""

    name = "vllm"

    def __init__(self, model: str | Path, *, seed: int = 0, max_model_len: int | None = None,
                 tensor_parallel_size: int = 1, concurrency: int = 8, threads: int | None = None):
        from sao_env.engine.process import openai_server, vllm_python

        vllm_python()  # no vLLM environment: one line before the model is read
        api = "chat" if chat_template_of(model) else "completions"
        self.server = openai_server(model, served_name="model", seed=seed, max_model_len=max_model_len or 4096,
                                    threads=threads or (os.cpu_count() or 1),
                                    tensor_parallel_size=tensor_parallel_size)
        super().__init__("model", base_url=f"{self.server.url}/v1", api=api, concurrency=concurrency)

    def close(self) -> None:
        self.server.close()


BACKENDS = ("transformers", "vllm", "openai")


def make_backend(name: str, model: str | Path, **options) -> Backend:
    """Build the backend ``name`` for ``model``; options not meant for it are ignored."""
    if name == "transformers":
        return TransformersBackend(model, **{k: v for k, v in options.items() if k in ("batch_size", "device", "dtype")})
    if name == "vllm":
        return VLLMBackend(model, **{k: v for k, v in options.items()
                                     if k in ("tensor_parallel_size", "max_model_len", "seed", "concurrency")})
    if name == "openai":
        return OpenAIBackend(str(model), **{k: v for k, v in options.items()
                                            if k in ("base_url", "api_key", "api", "concurrency", "deadline_s", "retries",
                                                     "max_bytes", "prompt_template")})
    raise UserError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
