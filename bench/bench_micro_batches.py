"""Peak memory of one SAO update with and without token-budget micro-batches.

    python bench/bench_micro_batches.py runs/checkpoints/qwen2-27m --episodes 8 --length 2048 --budgets none,4096,2048

Each budget runs in a fresh process: the policy (a local or hub checkpoint, ``agent.model.name``), its critic
and 8 synthetic episodes of ``--length`` tokens (a quarter prompt) are built, one SAO update on two short
episodes makes the optimizers' state, and then one SAO update (critic K=2, actor) on the batch is measured. On a GPU the figure is
``torch.cuda.max_memory_allocated`` over the measured update; on the CPU it is the process's peak resident set
(``ru_maxrss``) minus its resident set just before the update: what the update adds on top of the weights,
the optimizer state and the batch, as the machine sees it (glibc may keep freed pages, so it is an upper
bound of the tensors alive at once).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def measure(model: str, episodes: int, length: int, budget: int | None, device: str, precision: str,
            checkpointing: bool) -> dict:
    import sao_env.numerics  # noqa: F401
    import torch
    from transformers import AutoModelForCausalLM

    from sao_env.agents.sao import SAOAgent, SAOConfig
    from sao_env.policy.model import load_tokenizer
    from sao_env.policy.placement import place

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_gpu import synthetic_episodes

    torch.set_num_threads(1)
    policy = place(AutoModelForCausalLM.from_pretrained(model), device, precision)
    tokenizer = load_tokenizer(model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    config = SAOConfig(critic_warmup_updates=0, episodes_per_update=episodes, micro_batch_tokens=budget,
                       gradient_checkpointing=checkpointing)
    agent = SAOAgent(policy, tokenizer, config, action_horizon=length)
    batch = synthetic_episodes(episodes, length, policy.config.vocab_size)
    agent.update(synthetic_episodes(2, 16, policy.config.vocab_size))  # warm-up: Adam's state exists from here on
    dev = torch.device(device) if device != "auto" else policy.device
    if dev.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() / 2**20
    before = _rss_mib()
    start = time.perf_counter()
    agent.update(batch)
    wall = time.perf_counter() - start
    out = {"model": model, "parameters": sum(p.numel() for p in policy.parameters()), "episodes": episodes,
           "length": length, "micro_batch_tokens": budget, "gradient_checkpointing": checkpointing,
           "device": str(dev), "precision": precision, "update_s": wall,
           "micro_batches": len(agent.plan(agent.batch(batch)) or [None])}
    if dev.type == "cuda":
        out["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        out["update_peak_mib"] = out["peak_mib"] - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        out.update({"rss_before_mib": before, "peak_rss_mib": peak, "update_peak_mib": peak - before})
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--length", type=int, default=2048)
    parser.add_argument("--budgets", default="none,4096", help="comma-separated micro_batch_tokens ('none': one piece)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--checkpointing", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    context = multiprocessing.get_context("spawn")
    for text in args.budgets.split(","):
        budget = None if text.strip() == "none" else int(text)
        with context.Pool(1) as pool:
            row = pool.apply(measure, (args.model, args.episodes, args.length, budget, args.device, args.precision,
                                       args.checkpointing))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
