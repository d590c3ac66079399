"""Where SmolLM2-135M-Instruct starts on the chat scenarios: held-out accuracy before any RL.

For each chat scenario (envs/chat-style-drift.yaml, envs/chat-tool-drift.yaml), the packaged model as it is
(no warm start) and after the scenario's supervised warm start (trained once into the cache), each phase's
held-out set (run seed 0) played at the evaluation's temperature (1.0) and greedily (0): accuracy, and what the
answers were (the style-drift grader's style and correctness; the tool drift's first call by function). The
figures and what was chosen from them are in docs/math-envs.md ("Chat scenarios"). About 10 minutes of one
core, the two warm starts included when they are not cached:

    .venv/bin/python bench/bench_chat_start.py [--out start.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re

import sao_env  # noqa: F401  (first: pins the CPU numerics before torch loads)

SCENARIOS = ("chat-style-drift", "chat-tool-drift")
FIRST_CALL = re.compile(r"<py>print\((\w+)\((\[?)")


def first_call(transcript: str) -> str:
    """The function of the episode's first tool call (``mul[list]`` for a list argument), or ``none``."""
    match = FIRST_CALL.search(transcript)
    return "none" if match is None else match.group(1) + ("[list]" if match.group(2) else "")


def measure(env: str, *, warm: bool, temperature: float) -> dict[str, dict]:
    import torch

    from sao_env.envs.text_env import load_scenario
    from sao_env.policy.model import ModelSpec
    from sao_env.policy.warmstart import load_warm_started
    from sao_env.runtime.rollout import play

    scenario = load_scenario(env) if warm else load_scenario(env, {"warm_start": {"steps": 0}})
    model, tokenizer, _ = load_warm_started(ModelSpec(name="smollm2-135m-instruct"), scenario, show_progress=False)
    model.eval()
    generator = torch.Generator().manual_seed(0)
    rows = {}
    for phase, tasks in scenario.eval_sets.items():
        with torch.no_grad():
            rollouts = play(model, tokenizer, tasks, scenario.spec, env_seeds=list(range(len(tasks))),
                            generator=generator, temperature=temperature)
        row = {"accuracy": sum(r.reward for r in rollouts) / len(rollouts), "n": len(rollouts)}
        if "style" in rollouts[0].grade:
            row["correct"] = sum(bool(r.grade.get("correct")) for r in rollouts) / len(rollouts)
            row["answers"] = dict(collections.Counter(str(r.grade.get("style") or "no style") for r in rollouts))
        else:
            row["answers"] = dict(collections.Counter(first_call(r.transcript) for r in rollouts))
        rows[phase] = row
    return rows


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the figures as JSON here")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    results = []
    for env in SCENARIOS:
        for warm in (False, True):
            for temperature in (1.0, 0.0):
                for phase, row in measure(env, warm=warm, temperature=temperature).items():
                    results.append({"scenario": env, "model": "warm-started" if warm else "packaged",
                                    "temperature": temperature, "phase": phase, **row})
                    print(json.dumps(results[-1]), flush=True)
    print("\n| scenario | model | T | phase | accuracy | correct | answers |\n|---|---|---:|---|---:|---:|---|")
    for r in results:
        answers = ", ".join(f"{k} {v}" for k, v in sorted(r["answers"].items(), key=lambda kv: -kv[1]))
        correct = f"{r['correct']:.2f}" if "correct" in r else ""
        print(f"| {r['scenario']} | {r['model']} | {r['temperature']:g} | {r['phase']} | {r['accuracy']:.2f} | "
              f"{correct} | {answers} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
