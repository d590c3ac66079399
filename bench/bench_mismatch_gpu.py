"""How large is a real inference engine's rollout/trainer mismatch, next to the simulated ones?

The stress map (leaderboards/stress/) perturbs the rollout copy with ``agent.runtime.rollout_mismatch``
(``sao_env/policy/mismatch.py``): ``bf16_weights`` or ``logit_noise`` at sigma 0.1. This bench puts a
number beside them: the same warm-started style-drift policy scores the same sampled episodes on a
GPU the way an engine would (float32 with and without TF32 matrix products, bfloat16 and float16
weights and activations), and each is compared with the float32 CPU trainer, token by token, with the
diagnostics the runs log (``sao_env.algos.diagnostics.off_policy_diagnostics``): mean |log-prob gap|,
k3 estimate of KL(rollout || trainer), token ESS / N and the shares of tokens outside the scenario's
DIS band. The simulated modes are measured the same way on the CPU.

Three steps, so that the GPU side needs only torch and transformers:

    python bench/bench_mismatch_gpu.py prepare DIR    # CPU: policy, episodes, trainer and simulated log-probs
    python bench/bench_mismatch_gpu.py measure DIR    # the GPU machine: engine log-probs (torch + transformers)
    python bench/bench_mismatch_gpu.py report DIR     # CPU: the table (printed, and DIR/report.md)

``prepare`` plays every held-out prompt of style-drift's three phases once (192 episodes, the
scenario's evaluation seed, temperature 1) with the policy the runs start from.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

ENGINES = ("cuda_fp32", "cuda_tf32", "cuda_bf16", "cuda_fp16", "cpu_fp32_there")
"""The precisions scored on the GPU machine (the last: its own CPU, float32: another CPU's kernels)."""
SIMULATED = (("bf16_weights", 0.0), ("logit_noise", 0.1), ("logit_noise", 0.3))


def _logprobs(model, tokens: torch.Tensor, attention: torch.Tensor) -> np.ndarray:
    """log p(token t | tokens < t) from a plain forward pass, the logits cast to float32 before the
    softmax (as engines sample); position 0 gets 0."""
    with torch.inference_mode():
        logits = model(input_ids=tokens, attention_mask=attention).logits[:, :-1].float()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, 1:, None]).squeeze(-1)
    return torch.cat([torch.zeros_like(logp[:, :1]), logp], dim=1).cpu().numpy().astype(np.float64)


def prepare(folder: Path) -> None:
    from sao_env.envs.text_env import load_scenario
    from sao_env.policy.mismatch import RolloutMismatch
    from sao_env.policy.model import ModelSpec
    from sao_env.policy.warmstart import load_warm_started
    from sao_env.policy.generate import row_key
    from sao_env.runtime.rollout import play

    import copy

    scenario = load_scenario("style-drift")
    model, tokenizer, _ = load_warm_started(ModelSpec(), scenario)
    model.eval()
    tasks = [task for tasks in scenario.eval_sets.values() for task in tasks]
    seed = scenario.spec.eval.seed
    played = play(model, tokenizer, tasks, scenario.spec, env_seeds=[seed + j for j in range(len(tasks))],
                  row_keys=[row_key(seed, 0, j) for j in range(len(tasks))], temperature=1.0)
    width = max(len(r.tokens_T) for r in played)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tokens = np.full((len(played), width), pad, dtype=np.int64)
    attention = np.zeros((len(played), width), dtype=np.int64)
    actions = np.zeros((len(played), width), dtype=bool)
    sampled = np.zeros((len(played), width), dtype=np.float64)
    for i, r in enumerate(played):
        n = len(r.tokens_T)
        tokens[i, :n], attention[i, :n], actions[i, :n] = r.tokens_T, 1, r.action_mask_T
        sampled[i, :n] = r.logp_T
    t, a = torch.from_numpy(tokens), torch.from_numpy(attention)
    out = {"tokens": tokens, "attention": attention, "actions": actions, "sampled": sampled,
           "trainer": _logprobs(model, t, a), "rewards": np.array([r.reward for r in played])}
    for mode, sigma in SIMULATED:
        deployed = copy.deepcopy(model)
        RolloutMismatch(mode, seed=0, noise_std=sigma).apply(deployed, model, version=0)
        out[f"sim_{mode}_{sigma:g}"] = _logprobs(deployed, t, a)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder / "model")
    np.savez_compressed(folder / "episodes.npz", **out)
    facts = {"dis_band": list(scenario.spec.dis_band), "episodes": len(played),
             "action_tokens": int(actions.sum()), "cpu": platform.processor() or platform.machine(),
             "torch": torch.__version__, "parameters": sum(p.numel() for p in model.parameters())}
    (folder / "prepared.json").write_text(json.dumps(facts, indent=1) + "\n")
    print(json.dumps(facts))


def measure(folder: Path) -> None:
    from transformers import AutoModelForCausalLM

    data = np.load(folder / "episodes.npz")
    tokens, attention = torch.from_numpy(data["tokens"]), torch.from_numpy(data["attention"])
    out, facts = {}, {"torch": torch.__version__, "cuda": torch.version.cuda,
                      "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    for engine in ENGINES:
        model = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.float32).eval()
        torch.backends.cuda.matmul.allow_tf32 = engine == "cuda_tf32"
        torch.backends.cudnn.allow_tf32 = engine == "cuda_tf32"
        if engine == "cpu_fp32_there":
            out[engine] = _logprobs(model, tokens, attention)
            continue
        dtype = {"cuda_bf16": torch.bfloat16, "cuda_fp16": torch.float16}.get(engine, torch.float32)
        model = model.to(device="cuda", dtype=dtype)
        out[engine] = _logprobs(model, tokens.cuda(), attention.cuda())
    np.savez_compressed(folder / "engines.npz", **out)
    (folder / "measured.json").write_text(json.dumps(facts, indent=1) + "\n")
    print(json.dumps(facts))


def report(folder: Path) -> str:
    from sao_env.algos.diagnostics import off_policy_diagnostics

    data, engines = np.load(folder / "episodes.npz"), np.load(folder / "engines.npz")
    prepared = json.loads((folder / "prepared.json").read_text())
    measured = json.loads((folder / "measured.json").read_text())
    eps_low, eps_high = prepared["dis_band"]
    mask = torch.from_numpy(data["actions"])
    trainer = torch.from_numpy(data["trainer"])
    rows = [("sampler's own record (CPU, lean decoder)", data["sampled"])]
    rows += [(f"simulated: {k.removeprefix('sim_')}", data[k]) for k in data.files if k.startswith("sim_")]
    rows += [(f"engine: {k}", engines[k]) for k in engines.files]
    lines = [f"Rollout log-probs against the float32 CPU trainer, {int(mask.sum())} action tokens of "
             f"{prepared['episodes']} style-drift episodes (policy: the runs' warm start, {prepared['parameters']:,} "
             f"parameters); GPU: {measured['device']}, torch {measured['torch']}; DIS band "
             f"[{1 - eps_low:g}, {1 + eps_high:g}].", "",
             "| rollout log-probs | mean abs gap | max abs gap | KL k3 | token ESS / N | below band | above band |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, rollout in rows:
        log_ratio = trainer - torch.from_numpy(rollout)
        d = off_policy_diagnostics(log_ratio, mask, torch.zeros_like(mask), eps_low=eps_low, eps_high=eps_high)
        biggest = float(log_ratio[mask].abs().max())
        lines.append(f"| {name} | {float(d['logp_gap']):.2e} | {biggest:.2e} | {float(d['kl_k3']):.2e} | "
                     f"{float(d['ess_token_frac']):.6f} | {float(d['out_band_low']):.4f} | {float(d['out_band_high']):.4f} |")
    text = "\n".join(lines) + "\n"
    (folder / "report.md").write_text(text)
    print(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("prepare", "measure", "report"))
    parser.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    {"prepare": prepare, "measure": measure, "report": report}[args.step](args.folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
