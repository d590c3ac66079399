"""Held-out evaluation of the deployed policy on every phase's set, at fixed simulated times."""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sao_env.graders import grade
from sao_env.policy.generate import sample
from sao_env.scenario import Scenario


def evaluate_heldout(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    scenario: Scenario,
    *,
    eval_index: int,
    batch_size: int = 64,
) -> dict[str, float]:
    """Accuracy (mean reward) of each phase's held-out set, plus grader details averaged when boolean.

    Sampling is seeded from the scenario's eval seed and ``eval_index`` alone, so two agents with
    the same weights at the same evaluation get the same samples.
    """
    spec = scenario.spec
    generator = torch.Generator().manual_seed(spec.eval.seed * 7919 + eval_index)
    out: dict[str, float] = {}
    for phase, tasks in scenario.eval_sets.items():
        rewards, details = [], []
        for start in range(0, len(tasks), batch_size):
            chunk = tasks[start : start + batch_size]
            prompts = [tokenizer(t.prompt, add_special_tokens=False)["input_ids"] for t in chunk]
            samples = sample(model, prompts, max_new_tokens=spec.max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                             pad_token_id=tokenizer.pad_token_id, generator=generator, temperature=spec.eval.temperature)
            for task, s in zip(chunk, samples):
                result = grade(task, tokenizer.decode(s.token_ids, skip_special_tokens=True))
                rewards.append(result.reward)
                details.append(result.details)
        out[f"eval/{phase}/accuracy"] = float(np.mean(rewards))
        for key in sorted(details[0]):
            if isinstance(details[0][key], bool):
                out[f"eval/{phase}/{key}"] = float(np.mean([bool(d[key]) for d in details]))
    return out
