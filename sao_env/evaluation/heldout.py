"""Held-out evaluation of the deployed policy on every phase's set, at fixed simulated times."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sao_env.runtime.rollout import play
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

    Multi-turn sets also report ``turns`` (mean actions per episode). Tasks that carry a
    ``category`` in their metadata are pooled across sets into ``eval/category/<name>/accuracy``.
    Sampling and the environments are seeded from the scenario's eval seed and ``eval_index``
    alone, so two agents with the same weights at the same evaluation get the same episodes.
    """
    spec = scenario.spec
    generator = torch.Generator().manual_seed(spec.eval.seed * 7919 + eval_index)
    out: dict[str, float] = {}
    by_category: dict[str, list[float]] = defaultdict(list)
    for set_index, (phase, tasks) in enumerate(scenario.eval_sets.items()):
        rewards, details, turns = [], [], []
        for start in range(0, len(tasks), batch_size):
            chunk = tasks[start : start + batch_size]
            seeds = [spec.eval.seed * 1_000_003 + eval_index * 10_007 + set_index * 1_009 + start + j
                     for j in range(len(chunk))]
            for task, r in zip(chunk, play(model, tokenizer, chunk, spec, generator=generator, env_seeds=seeds,
                                           temperature=spec.eval.temperature)):
                rewards.append(r.reward)
                details.append(r.grade)
                turns.append(r.turns)
                if "category" in task.metadata:
                    by_category[str(task.metadata["category"])].append(r.reward)
        out[f"eval/{phase}/accuracy"] = float(np.mean(rewards))
        if spec.max_turns > 1:
            out[f"eval/{phase}/turns"] = float(np.mean(turns))
        for key in sorted(set().union(*details)):
            values = [d.get(key) for d in details]
            if all(isinstance(v, bool) for v in values if v is not None) and any(v is not None for v in values):
                out[f"eval/{phase}/{key}"] = float(np.mean([bool(v) for v in values]))
    for category, rewards in sorted(by_category.items()):
        out[f"eval/category/{category}/accuracy"] = float(np.mean(rewards))
    return out
