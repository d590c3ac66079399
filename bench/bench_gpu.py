"""The GPU check: the tiny recipe on CUDA, and a ~0.5B-parameter Qwen2 in bf16 at 1-4k tokens.

One script for one GPU, inside 8 minutes, with torch and transformers only (no vLLM, no hub: every model is
built from config):

    python bench/bench_gpu.py                    # on the GPU machine; figures printed and written to --out
    python bench/bench_gpu.py --smoke            # the same steps at tiny sizes on the CPU (seconds; tested)

Parts (each prints its lines as it finishes; ``--skip recipe`` or ``--skip large`` leaves one out):

1. **recipe**: SAO and GRPO on a cut of style-drift (``RECIPE_CUT``) with ``agent.model.device`` set to the
   GPU, seed 0, against the same cut on the CPU at seeds 0..N-1 (run meanwhile in CPU worker processes):
   online reward and AUC of the GPU run beside the CPU seeds' mean, 95 % t-interval and range, and how many
   points of its adaptation curve (accuracy on the active phase's held-out set) lie inside the CPU seeds'
   range. Does it learn: the first and the last evaluation of each phase.
2. **large**: a Qwen2 of Qwen2.5-0.5B's shape (``QWEN2_05B``, 494M parameters), float32 master weights,
   ``precision: bf16_autocast``:
   * generation (the project's batched sampler, a KV cache on the GPU, per-row seeded draws): tokens/s at
     batch 64, 128 and 256 with 1,024-token prompts;
   * learner: one GRPO update (one pass) and one SAO update (critic K=2 + actor: three passes) on 8 episodes of
     1,024, 2,048 and 4,096 tokens with token-budget micro-batches: tokens/s of forward + backward + optimizer,
     SAO's time over GRPO's, peak memory (``torch.cuda.max_memory_allocated``) and model FLOPs utilisation
     against the device's dense bf16 peak (``PEAK_BF16_TFLOPS``; FLOPs counted as 6 x matrix parameters x
     tokens plus causal attention's 6 x layers x hidden x length per token, per pass).

Figures go to stdout and, as JSON, to ``--out`` (default ``bench_gpu.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sao_env.numerics  # noqa: E402,F401  (first: pins the CPU numerics, as the CLI does)
import numpy as np  # noqa: E402
import torch  # noqa: E402

QWEN2_05B = {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
             "intermediate_size": 4864, "vocab_size": 151936, "rope_theta": 1_000_000.0,
             "max_position_embeddings": 32768}
"""Qwen2.5-0.5B's architecture (its config.json), built from config with random weights."""
SMOKE_MODEL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "intermediate_size": 128, "vocab_size": 512, "rope_theta": 10_000.0, "max_position_embeddings": 1024}
PEAK_BF16_TFLOPS = {"B200": 2250.0, "H200": 989.4, "H100": 989.4, "H800": 989.4, "GH200": 989.4, "A100": 312.0,
                    "A800": 312.0, "L40S": 362.1, "L40": 181.0, "L4": 121.0, "A10": 125.0, "RTX 4090": 165.2}
"""Dense bf16 tensor-core peaks (vendor data sheets, SXM parts; without sparsity), by a substring of the device
name; a device not listed gets no MFU."""

RECIPE_CUT = ("env.phases.0.duration_h=0.05", "env.phases.1.duration_h=0.15", "env.phases.2.duration_h=0.1",
              "env.eval.interval_h=0.025", "env.eval.prompts_per_phase=32")
"""style-drift at 0.3 of its length (the scenario's own tasks and warm start), evaluations every 0.025 h."""
SMOKE_CUT = ("env.warm_start.steps=0", "env.phases.0.duration_h=0.0025", "env.phases.1.duration_h=0.0025",
             "env.phases.2.duration_h=0.0025", "env.eval.interval_h=0.0025", "env.eval.prompts_per_phase=2",
             "env.rollout_slots=8", "env.max_new_tokens=8")
"""Seconds on a CPU: no warm start, phases of 9 s, 8 new tokens (and SAO's critic warm-up cut to 1 update)."""


def say(text: str) -> None:
    print(text, flush=True)


# -- part 1: the tiny recipe on the device against CPU seeds ---------------------------------------------------


def _recipe_run(agent: str, seed: int, overrides: tuple[str, ...], out: str) -> dict:
    """One run of the cut (a worker process's job, or the GPU run in this process): its summary figures and
    its adaptation curve."""
    from sao_env.experiment import resolve_config, run_experiment

    torch.set_num_threads(1)
    if agent == "sao" and "env.warm_start.steps=0" in overrides:  # the smoke cut: a critic warm-up of 1 update
        overrides = (*overrides, "agent.hparams.critic_warmup_updates=1")
    config = resolve_config("style-drift", agent, seed, list(overrides))
    start = time.perf_counter()
    summary = run_experiment(config, Path(out), show_progress=False, save_checkpoint=False)
    wall = time.perf_counter() - start
    evals = [json.loads(line) for line in (Path(out) / "evals.jsonl").read_text().splitlines()]
    bounds = np.cumsum([p.duration_h * 3600 for p in config.env.phases])
    names = [p.name for p in config.env.phases]
    curve, firsts_lasts = [], {}
    for record in evals:
        t = record["sim_time_s"]
        k = min(int(np.searchsorted(bounds, t, side="right")), len(names) - 1)
        value = record[f"eval/{names[k]}/accuracy"]
        curve.append((t, value))
        firsts_lasts.setdefault(names[k], [value, value])[1] = value
    return {"agent": agent, "seed": seed, "wall_s": wall, "online_reward": summary.get("online_reward"),
            "auc": summary.get("auc"),
            "updates": sum(1 for r in map(json.loads, (Path(out) / "metrics.jsonl").read_text().splitlines())
                           if "update" in r and r.get("kind") != "eval"), "curve": curve, "phases": firsts_lasts}


def _interval(values: list[float]) -> dict:
    x = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return {"n": 0}
    half = float(_t95(len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan
    return {"n": len(x), "mean": float(x.mean()), "ci95": [float(x.mean() - half), float(x.mean() + half)],
            "range": [float(x.min()), float(x.max())]}


def _t95(dof: int) -> float:
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
    return table.get(dof, 1.96 + 2.4 / max(dof, 1))


def recipe(device: str, *, smoke: bool, cpu_seeds: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-gpu-recipe-") as folder:  # the runs' folders, read here, then gone
        return _recipe(device, Path(folder), smoke=smoke, cpu_seeds=cpu_seeds, workers=workers)


def _recipe(device: str, folder: Path, *, smoke: bool, cpu_seeds: int, workers: int) -> dict:
    cut = SMOKE_CUT if smoke else RECIPE_CUT
    out: dict = {"cut": list(cut), "device": device, "cpu_seeds": cpu_seeds}
    if not smoke:  # train the shared warm start once, on every core, before the CPU workers and the GPU need it
        from sao_env.experiment import resolve_config
        from sao_env.policy.warmstart import load_warm_started
        from sao_env.scenario import Scenario

        start = time.perf_counter()
        config = resolve_config("style-drift", "sao", 0, list(cut))
        load_warm_started(config.agent.model, Scenario(config.env, seed=0), show_progress=False,
                          forward_threads=os.cpu_count())
        out["warm_start_s"] = time.perf_counter() - start
        say(f"recipe: warm start ready ({out['warm_start_s']:.0f} s)")
    jobs = [(a, s, cut, str(folder / f"cpu-{a}-{s}")) for a in ("sao", "grpo") for s in range(cpu_seeds)]
    if smoke:
        cpu = [_recipe_run(*job) for job in jobs]
    else:
        import multiprocessing

        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        futures = [pool.submit(_recipe_run, *job) for job in jobs]
    if device == "cpu":  # the device run is the CPU seed-0 run itself (the same configuration, the same bytes)
        device_runs = [next(c for c in cpu if c["agent"] == a and c["seed"] == 0) for a in ("sao", "grpo")]
    else:
        device_runs = [_recipe_run(a, 0, (*cut, f"agent.model.device={device}"), str(folder / f"dev-{a}"))
                       for a in ("sao", "grpo")]
    if not smoke:
        cpu = [f.result() for f in futures]
        pool.shutdown()
    for run in device_runs:
        mine = [c for c in cpu if c["agent"] == run["agent"]]
        result = {"device_run": run, "cpu": {k: _interval([c[k] for c in mine]) for k in ("online_reward", "auc")},
                  "cpu_wall_s": _interval([c["wall_s"] for c in mine])}
        inside = 0
        for i, (t, value) in enumerate(run["curve"]):
            others = [c["curve"][i][1] for c in mine if i < len(c["curve"])]
            inside += bool(others) and min(others) - 1e-9 <= value <= max(others) + 1e-9
        result["curve_points_inside_cpu_range"] = [inside, len(run["curve"])]
        out[run["agent"]] = result
        cpu_or = result["cpu"]["online_reward"]
        say(f"recipe {run['agent']} on {device}: online reward {run['online_reward']:.3f}, AUC {run['auc']:.3f}, "
            f"{run['updates']} updates, {run['wall_s']:.0f} s | CPU seeds (n={cpu_or.get('n')}): online reward "
            f"{cpu_or.get('mean', math.nan):.3f} CI95 {_fmt(cpu_or.get('ci95'))} range {_fmt(cpu_or.get('range'))}, "
            f"AUC {result['cpu']['auc'].get('mean', math.nan):.3f} range {_fmt(result['cpu']['auc'].get('range'))}; "
            f"curve points inside the CPU range {inside}/{len(run['curve'])}")
        say("  learns? " + ", ".join(f"{phase}: {a:.2f} -> {b:.2f}" for phase, (a, b) in run["phases"].items()))
    return out


def _fmt(pair) -> str:
    return "n/a" if not pair else f"[{pair[0]:.3f}, {pair[1]:.3f}]"


# -- part 2: a ~0.5B Qwen2 in bf16 -----------------------------------------------------------------------------


def build_large(shape: dict, device: torch.device):
    """A Qwen2 of ``shape`` built from config on ``device`` (float32 master weights, bf16 autocast) and a
    tokenizer stand-in (ids only: the sampler and the learner never decode)."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from sao_env.policy.placement import set_precision

    config = Qwen2Config(**shape, tie_word_embeddings=True, use_sliding_window=False, bos_token_id=0, eos_token_id=1,
                         pad_token_id=1)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    return set_precision(model.eval(), "bf16_autocast")


class _Ids:
    """The tokenizer attributes an agent reads."""

    pad_token_id = 1
    eos_token_id = 1


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def _peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def peak_tflops(device: torch.device) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key in sorted(PEAK_BF16_TFLOPS, key=len, reverse=True):
        if key in name:
            return PEAK_BF16_TFLOPS[key]
    return None


def generation(model, device: torch.device, batches: list[int], prompt_len: int, new_tokens: int) -> list[dict]:
    from sao_env.policy.generate import row_key, sample

    vocab = model.config.vocab_size
    rng = np.random.default_rng(0)
    rows = []
    for batch in batches:
        prompts = rng.integers(2, vocab, size=(batch, prompt_len)).tolist()
        keys = [row_key(0, i) for i in range(batch)]
        sample(model, prompts[: min(batch, 4)], max_new_tokens=2, eos_token_id=-1, pad_token_id=1,
               row_keys=keys[: min(batch, 4)])  # warm-up: kernels and the rotary table
        _peak_reset(device)
        _sync(device)
        start = time.perf_counter()
        out = sample(model, prompts, max_new_tokens=new_tokens, eos_token_id=-1, pad_token_id=1, row_keys=keys)
        _sync(device)
        wall = time.perf_counter() - start
        made = sum(len(s.token_ids) for s in out)
        row = {"batch": batch, "prompt_tokens": prompt_len, "new_tokens": new_tokens, "wall_s": wall,
               "generated_tokens_per_s": made / wall, "peak_gib": _peak_gib(device)}
        rows.append(row)
        say(f"generation: batch {batch}, prompt {prompt_len}, {new_tokens} new tokens: "
            f"{row['generated_tokens_per_s']:,.0f} generated tokens/s ({wall:.1f} s, peak {_gib(row['peak_gib'])})")
    return rows


def _gib(value) -> str:
    return "n/a" if value is None else f"{value:.1f} GiB"


def synthetic_episodes(batch: int, length: int, vocab: int, *, seed: int = 0, group_size: int = 1):
    """``batch`` episodes of ``length`` tokens: a quarter prompt, the rest action; rollout log-probabilities
    near a uniform policy's (the losses' values do not matter here, their cost does)."""
    from sao_env.types import Episode, Task

    rng = np.random.default_rng(seed)
    prompt = length // 4
    episodes = []
    for i in range(batch):
        tokens = rng.integers(2, vocab, size=length).tolist()
        mask = [False] * prompt + [True] * (length - prompt)
        logp = [-math.log(vocab) if m else 0.0 for m in mask]
        episodes.append(Episode(task=Task(id=f"s{i}", prompt="", reference={}, grader="exact"), tokens_T=tuple(tokens),
                                action_mask_T=tuple(mask), rollout_logp_T=tuple(logp),
                                version_T=tuple(0 if m else -1 for m in mask), reward=float(rng.random()),
                                response="", group_id=i // group_size, phase="p", sim_start=0.0, sim_end=0.0))
    return episodes


def model_flops(model, tokens: int, length: int, *, head: bool = True) -> float:
    """6 x matrix parameters x tokens (the output layer counted; the embedding lookup not) plus causal attention,
    6 x layers x hidden x length/2 x 2 per token: forward and backward of one pass."""
    cfg = model.config
    params = sum(p.numel() for p in model.parameters())  # tied: the matrix is the output layer's
    if not head:
        params -= cfg.vocab_size * cfg.hidden_size
    return 6.0 * params * tokens + 6.0 * cfg.num_hidden_layers * cfg.hidden_size * length * tokens


def learner(model, device: torch.device, lengths: list[int], batch: int, budget: int, *,
            checkpointing: bool = False, repeats: int = 2) -> list[dict]:
    """One GRPO and one SAO update per length, timed after a warm-up update of each."""
    import copy

    from sao_env.agents.grpo import GRPOAgent, GRPOConfig
    from sao_env.agents.sao import SAOAgent, SAOConfig

    peak = peak_tflops(device)
    rows = []
    for length in lengths:
        episodes = synthetic_episodes(batch, length, model.config.vocab_size, group_size=batch // 2)
        tokens = batch * length
        row: dict = {"episodes": batch, "length": length, "micro_batch_tokens": budget,
                     "gradient_checkpointing": checkpointing}
        for name in ("grpo", "sao"):
            policy = copy.deepcopy(model)
            common = {"lr": 1e-6, "micro_batch_tokens": budget, "gradient_checkpointing": checkpointing}
            if name == "grpo":
                agent = GRPOAgent(policy, _Ids(), GRPOConfig(group_size=batch // 2, groups_per_update=2, **common),
                                  action_horizon=length)
                flops = model_flops(model, tokens, length)
            else:
                agent = SAOAgent(policy, _Ids(), SAOConfig(critic_warmup_updates=0, episodes_per_update=batch,
                                                           critic_lr=5e-6, **common), action_horizon=length)
                flops = model_flops(model, tokens, length) + 2 * model_flops(model, tokens, length, head=False)
            agent.update(episodes)  # warm-up: kernels, optimizer state
            _peak_reset(device)
            _sync(device)
            start = time.perf_counter()
            for _ in range(repeats):
                agent.update(episodes)
            _sync(device)
            wall = (time.perf_counter() - start) / repeats
            passes = 1 if name == "grpo" else 3
            row[name] = {"update_s": wall, "tokens_per_s": tokens / wall, "pass_tokens_per_s": passes * tokens / wall,
                         "peak_gib": _peak_gib(device), "tflops": flops / wall / 1e12,
                         "mfu": None if peak is None else flops / wall / 1e12 / peak}
            del agent, policy
            _peak_reset(device)
        row["sao_over_grpo"] = row["sao"]["update_s"] / row["grpo"]["update_s"]
        rows.append(row)
        for name in ("grpo", "sao"):
            r = row[name]
            mfu = "n/a" if r["mfu"] is None else f"{100 * r['mfu']:.1f} %"
            say(f"learner {name}: {batch} x {length} tokens, micro-batches of {budget}: {r['update_s']:.2f} s/update, "
                f"{r['tokens_per_s']:,.0f} tokens/s ({r['pass_tokens_per_s']:,.0f} pass-tokens/s), "
                f"{r['tflops']:.1f} TFLOP/s, MFU {mfu}, peak {_gib(r['peak_gib'])}")
        say(f"learner: SAO's update / GRPO's at {length} tokens: {row['sao_over_grpo']:.2f}x")
    return rows


def large(device: torch.device, *, smoke: bool) -> dict:
    shape = SMOKE_MODEL if smoke else QWEN2_05B
    start = time.perf_counter()
    model = build_large(shape, device)
    params = sum(p.numel() for p in model.parameters())
    say(f"large: Qwen2 {params / 1e6:.0f}M parameters on {device}, float32 weights, bf16 autocast "
        f"({time.perf_counter() - start:.0f} s to build)")
    out = {"parameters": params, "shape": shape, "peak_bf16_tflops": peak_tflops(device)}
    if smoke:
        out["generation"] = generation(model, device, [4], prompt_len=32, new_tokens=8)
        out["learner"] = learner(model, device, [32], batch=4, budget=64, repeats=1)
    else:
        out["generation"] = generation(model, device, [64, 128, 256], prompt_len=1024, new_tokens=128)
        out["learner"] = learner(model, device, [1024, 2048, 4096], batch=8, budget=16384)
        out["learner_whole_batch"] = learner(model, device, [2048], batch=8, budget=8 * 2048, repeats=1)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (seconds)")
    parser.add_argument("--device", default=None, help="default: cuda (smoke: cpu)")
    parser.add_argument("--skip", default="", help="comma-separated parts to leave out: recipe, large")
    parser.add_argument("--cpu-seeds", type=int, default=None, help="CPU seeds of the recipe cut (default 4; smoke 1)")
    parser.add_argument("--out", type=Path, default=Path("bench_gpu.json"))
    args = parser.parse_args(argv)
    device = torch.device(args.device or ("cpu" if args.smoke else "cuda"))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_gpu: no CUDA device here; run with --smoke for the CPU check")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    report: dict = {"date": time.strftime("%Y-%m-%d"), "smoke": args.smoke, "device": str(device),
                    "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor(),
                    "torch": torch.__version__, "cpus": os.cpu_count()}
    say(f"bench_gpu {report['date']}: {report['device_name']} ({device}), torch {torch.__version__}")
    start = time.perf_counter()
    if "recipe" not in skip:
        seeds = args.cpu_seeds if args.cpu_seeds is not None else (1 if args.smoke else 4)
        report["recipe"] = recipe(str(device), smoke=args.smoke, cpu_seeds=seeds,
                                  workers=max(1, min(2 * seeds, (os.cpu_count() or 2) - 2)))
    if "large" not in skip:
        report["large"] = large(device, smoke=args.smoke)
    report["wall_s"] = time.perf_counter() - start
    args.out.write_text(json.dumps(report, indent=1, default=float) + "\n")
    say(f"bench_gpu: {report['wall_s']:.0f} s; figures in {args.out}")
    return report


if __name__ == "__main__":
    main()
