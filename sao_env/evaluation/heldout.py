"""Held-out evaluation of the deployed policy on every phase's set, at fixed simulated times.

How held-out evaluations are keyed, recorded in every summary (``eval_version``). Version 1 (runs without the
key): the prompts came from the scenario's eval seed and the sampling streams from the eval seed and the
evaluation's simulated second alone, so every seed of a board drew the same samples at a time point and the
seed intervals left out the evaluation's own noise. Version 2: the prompts and the sampling streams were keyed
by the run's seed as well: the same for every recipe at one seed, independent across seeds; a seed's drawn set
kept its difficulty over the whole run, which added to the seeds' spread of AUC and, where recipes meet a set
differently, to their paired differences. Version 3 (``Scenario.eval_sets``, ``evaluate_heldout``): one
held-out set per phase fixed by the scenario, the same for every seed and recipe; only the sampling streams are
keyed by (eval seed, run seed, evaluation time), shared by every recipe at one seed and independent across
seeds. ``EVAL_VERSION`` (sao_env/scenario.py) is version 3; a scenario's ``eval.version: 2`` makes a version-2
run again.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sao_env.policy.generate import row_key
from sao_env.runtime.rollout import play
from sao_env.scenario import EVAL_VERSION, Scenario

__all__ = ["EVAL_VERSION", "evaluate_heldout"]



def evaluate_heldout(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    scenario: Scenario,
    *,
    eval_key: int,
    batch_size: int = 256,
) -> dict[str, float]:
    """Accuracy (mean reward) of each phase's held-out set, plus grader details averaged when boolean.

    Multi-turn sets also report ``turns`` (mean actions per episode). Tasks that carry a
    ``category`` in their metadata are pooled across sets into ``eval/category/<name>/accuracy``.
    Sampling and the environments are seeded from the scenario's eval seed, the run's seed
    (``scenario.seed``) and ``eval_key`` (the evaluation's simulated second), so two agents with the
    same weights at the same seed and evaluation time get the same episodes, whatever their evaluation
    schedules, and two seeds draw independent streams on the same tasks (``EVAL_VERSION``); each episode has its own
    sampling stream, so the sets are played together in batches of ``batch_size`` without changing
    any episode.
    """
    spec = scenario.spec
    jobs = [(set_index, phase, j, task) for set_index, (phase, tasks) in enumerate(scenario.eval_sets.items())
            for j, task in enumerate(tasks)]
    played = []
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start : start + batch_size]
        seeds = [row_key(spec.eval.seed, scenario.seed, eval_key, s, j, 1) for s, _, j, _ in chunk]
        keys = [row_key(spec.eval.seed, scenario.seed, eval_key, s, j, 0) for s, _, j, _ in chunk]
        played += play(model, tokenizer, [task for *_, task in chunk], spec, env_seeds=seeds, row_keys=keys,
                       temperature=spec.eval.temperature)
    out: dict[str, float] = {}
    by_category: dict[str, list[float]] = defaultdict(list)
    for phase in scenario.eval_sets:
        mine = [(task, r) for (_, p, _, task), r in zip(jobs, played) if p == phase]
        rewards = [r.reward for _, r in mine]
        details = [r.grade for _, r in mine]
        for task, r in mine:
            if "category" in task.metadata:
                by_category[str(task.metadata["category"])].append(r.reward)
        out[f"eval/{phase}/accuracy"] = float(np.mean(rewards))
        if spec.max_turns > 1:
            out[f"eval/{phase}/turns"] = float(np.mean([r.turns for _, r in mine]))
        for key in sorted(set().union(*details)):
            values = [d.get(key) for d in details]
            if all(isinstance(v, bool) for v in values if v is not None) and any(v is not None for v in values):
                out[f"eval/{phase}/{key}"] = float(np.mean([bool(v) for v in values]))
    for category, rewards in sorted(by_category.items()):
        out[f"eval/category/{category}/accuracy"] = float(np.mean(rewards))
    return out
