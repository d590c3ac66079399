"""What one update and one batch of rollouts cost on SmolLM2-135M-Instruct, on this CPU.

For each precision (float32; bf16 autocast: float32 master weights, passes under bfloat16) and each
learner (SAO: actor plus a critic with frozen attention, K=2 critic passes; GRPO: actor only), one
child process loads the packaged model (``smollm2-135m-instruct``, ``make install-models``), samples
8 episodes from chat-template prompts with sao-env's own sampler (48 new tokens at most), and times
``agent.update`` (one warm-up update, then the median of ``--updates``); it reports the update's
seconds and the process's peak resident memory. Generation is timed apart: tokens per second of
sao-env's batched, KV-cached sampler and of transformers' ``generate`` at batch 1, 16 and 64.
Threads: ``--threads`` (torch intra-op); ``--fused-adam`` times each update also with ``agent.hparams.fused_adam``.
``--lora 8,32`` times instead one actor step (transformers' forward, backward, fused Adam) with full fine-tuning and
with LoRA adapters of each rank on every attention and MLP layer (peft), and the process's peak memory.
Run it on an idle machine:

    .venv/bin/python bench/bench_real_model.py --threads 2

The figures and what was chosen from them are in docs/performance.md ("A pretrained model on 2 cores").
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import time

QUESTIONS = [f"What is {a} + {b}? Put the final answer in \\boxed{{}}." for a, b in
             [(3, 4), (12, 9), (25, 17), (8, 6), (31, 40), (7, 7), (19, 23), (50, 25)]]


def _chat(tokenizer, question):
    return tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                         tokenize=True, return_dict=True)["input_ids"]


def _episodes(policy, tokenizer, *, group_size, new_tokens, seed):
    import torch

    from sao_env.policy.generate import sample
    from sao_env.types import Episode, Task

    generator = torch.Generator().manual_seed(seed)
    episodes = []
    for g in range(8 // group_size):
        prompt = _chat(tokenizer, QUESTIONS[g])
        task = Task(id=f"q{g}", prompt=QUESTIONS[g], reference={"answer": "0"}, grader="math", metadata={"phase": "p"})
        samples = sample(policy, [prompt] * group_size, max_new_tokens=new_tokens, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, generator=generator)
        for i, s in enumerate(samples):
            n, a = len(prompt), len(s.token_ids)
            episodes.append(Episode(
                task=task, tokens_T=tuple(prompt) + s.token_ids, action_mask_T=(False,) * n + (True,) * a,
                rollout_logp_T=(0.0,) * n + s.logps, version_T=(-1,) * n + (0,) * a, reward=float((g + i) % 2),
                response="", group_id=g, phase="p", sim_start=0.0, sim_end=1.0))
    return episodes


def _update_child(queue, learner: str, precision: str, threads: int, updates: int, new_tokens: int,
                  fused_adam: bool = False) -> None:
    import torch

    torch.set_num_threads(threads)
    from sao_env.agents.grpo import GRPOAgent, GRPOConfig
    from sao_env.agents.sao import SAOAgent, SAOConfig
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer
    from sao_env.policy.placement import place

    spec = ModelSpec(name="smollm2-135m-instruct")
    tokenizer = build_tokenizer(spec)
    policy = place(build_policy(spec, tokenizer), "cpu", precision)
    if learner == "sao":
        agent = SAOAgent(policy, tokenizer, SAOConfig(critic_warmup_updates=0, lr=1e-6, critic_lr=5e-6,
                                                      episodes_per_update=8, fused_adam=fused_adam))
        group = 1
    else:
        agent = GRPOAgent(policy, tokenizer, GRPOConfig(group_size=4, groups_per_update=2, lr=1e-6,
                                                        fused_adam=fused_adam))
        group = 4
    times, tokens = [], 0
    for k in range(updates + 1):
        episodes = _episodes(policy, tokenizer, group_size=group, new_tokens=new_tokens, seed=k)
        tokens = sum(len(e.tokens_T) for e in episodes)
        start = time.perf_counter()
        agent.update(episodes)
        if k:
            times.append(time.perf_counter() - start)
    queue.put({"learner": learner, "precision": precision, "fused_adam": fused_adam, "threads": threads,
               "update_s": statistics.median(times),
               "tokens_per_update": tokens, "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20})


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
"""The layers LoRA adapts: every linear layer of attention and MLP (the embeddings, tied to the head, stay frozen)."""


def _lora_child(queue, rank: int, threads: int, steps: int, new_tokens: int) -> None:
    """One actor step on the 8 episodes, full fine-tuning (``rank`` 0) or LoRA of ``rank`` on ``LORA_TARGETS``
    (peft, alpha = 2 x rank): transformers' forward to the action tokens' log-probabilities, the policy-gradient
    loss, backward and a fused Adam step over the trained parameters. The same pass for both, so the difference
    is LoRA's: a backward without the base weights' gradients and an Adam step over the adapters only."""
    import torch

    torch.set_num_threads(threads)
    from sao_env.agents.base import collate
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer

    spec = ModelSpec(name="smollm2-135m-instruct")
    tokenizer = build_tokenizer(spec)
    policy = build_policy(spec, tokenizer)
    episodes = _episodes(policy, tokenizer, group_size=4, new_tokens=new_tokens, seed=0)
    if rank:
        from peft import LoraConfig, get_peft_model

        policy = get_peft_model(policy, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                   target_modules=LORA_TARGETS))
    policy.eval()
    trained = [p for p in policy.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(trained, lr=1e-6, fused=True)
    batch = collate(episodes, tokenizer.pad_token_id)
    tokens, attention, mask = batch.tokens_BT, batch.attention_BT, batch.mask_BT
    advantage = (batch.rewards_B - 0.5)[:, None]
    times = []
    for k in range(steps + 1):
        start = time.perf_counter()
        logits = policy(input_ids=tokens, attention_mask=attention).logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
        loss = -(logp * advantage * mask[:, 1:]).sum() / mask[:, 1:].sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if k:
            times.append(time.perf_counter() - start)
    queue.put({"lora_rank": rank, "threads": threads, "trained_parameters": sum(p.numel() for p in trained),
               "step_s": statistics.median(times), "tokens_per_step": int(sum(len(e.tokens_T) for e in episodes)),
               "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20})
    queue.put(None)


def _generation_child(queue, precision: str, threads: int, new_tokens: int) -> None:
    import torch

    torch.set_num_threads(threads)
    from sao_env.policy.generate import sample
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer
    from sao_env.policy.placement import autocast, place

    spec = ModelSpec(name="smollm2-135m-instruct")
    tokenizer = build_tokenizer(spec)
    policy = place(build_policy(spec, tokenizer), "cpu", precision)
    for batch in (1, 16, 64):
        prompts = [_chat(tokenizer, QUESTIONS[i % len(QUESTIONS)]) for i in range(batch)]
        generator = torch.Generator().manual_seed(0)
        start = time.perf_counter()
        samples = sample(policy, prompts, max_new_tokens=new_tokens, eos_token_id=-1, pad_token_id=tokenizer.pad_token_id,
                         generator=generator)
        ours = sum(len(s.token_ids) for s in samples) / (time.perf_counter() - start)
        tokenizer.padding_side = "left"
        encoded = tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
        start = time.perf_counter()
        with torch.no_grad(), autocast(policy):
            out = policy.generate(**encoded, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True,
                                  top_k=0, pad_token_id=tokenizer.pad_token_id)
        theirs = (out.shape[1] - encoded["input_ids"].shape[1]) * batch / (time.perf_counter() - start)
        queue.put({"generation": True, "precision": precision, "threads": threads, "batch": batch,
                   "sao_env_tokens_per_s": ours, "generate_tokens_per_s": theirs})
    queue.put(None)


def _run(target, *args) -> list[dict]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=target, args=(queue, *args))
    child.start()
    rows = []
    while True:
        row = queue.get()
        if row is None or "learner" in row:
            if row is not None:
                rows.append(row)
            break
        rows.append(row)
    child.join()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--precisions", default="float32,bf16_autocast")
    parser.add_argument("--fused-adam", action="store_true", help="also time the updates with agent.hparams.fused_adam")
    parser.add_argument("--no-generation", action="store_true", help="time the updates only")
    parser.add_argument("--lora", metavar="RANKS", help="instead, time one actor step with full fine-tuning and with LoRA "
                        "of each rank (comma-separated, e.g. 8,32; needs peft: pip install -e '.[bench]')")
    args = parser.parse_args()
    if args.lora:
        for rank in [0, *(int(r) for r in args.lora.split(","))]:
            print(json.dumps(_run(_lora_child, rank, args.threads, args.updates, args.new_tokens)[0]), flush=True)
        return
    for precision in args.precisions.split(","):
        for learner in ("grpo", "sao"):
            for fused in ((False, True) if args.fused_adam else (False,)):
                row = _run(_update_child, learner, precision, args.threads, args.updates, args.new_tokens, fused)[0]
                print(json.dumps(row), flush=True)
        if not args.no_generation:
            for row in _run(_generation_child, precision, args.threads, 64):
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
