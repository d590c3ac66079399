"""A task stream over real benchmark problems, split once into a training part and a held-out part.

Online training on BeyondAIME (ByteDance-Seed), HMMT (MathArena) or IMO-AnswerBench (Google
DeepMind) rows must never evaluate on a problem it trained on. The split is a pure function of
``split_seed`` and the task ids: within each category (IMO-AnswerBench's Algebra, Combinatorics,
Geometry, Number theory; one stratum where a suite has none) the ids are ordered by
``sha256(f"{split_seed}:{id}")`` and the first ``round(heldout_fraction * n)`` are held out (at
least one when the fraction is positive and the category has two or more rows). The split
therefore does not depend on the order of the rows, stays the same for the same seed, and keeps
each category's share in both parts. ``sample`` draws training problems, ``sample_heldout``
cycles through the held-out ones by index, and ``manifest`` lists both (written to the run
directory).

Rows come from the suite's loader (``sao_env.benchmarks.loaders``): the Hugging Face hub or the
official URL by default, a local file or folder with ``data``. Without network or data the
loader's one-line ``UserError`` propagates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from functools import lru_cache
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sao_env.benchmarks.loaders import DATA_ENV_VAR, DataUnreachable, make_loader
from sao_env.benchmarks.suites import list_specs, load_suite
from sao_env.errors import UserError
from sao_env.types import Task

SUITE_ALIASES: dict[str, tuple[str, ...]] = {
    "beyondaime": ("beyond_aime",),
    "hmmt": ("hmmt_feb_2024", "hmmt_feb_2025", "hmmt_nov_2025"),
    "matharena": ("hmmt_feb_2024", "hmmt_feb_2025", "hmmt_nov_2025"),
}
"""Names beyond the evals/*.yaml suites: the data folder's names and the MathArena loader (every HMMT suite)."""


def resolve_suites(suite: str) -> tuple[str, ...]:
    """The evals suites a ``suite`` parameter stands for; a UserError for unknown or non-math ones."""
    names = SUITE_ALIASES.get(suite) or (suite,)
    known = set(list_specs("evals"))
    for name in names:
        if name not in known:
            choices = ", ".join(sorted(known | set(SUITE_ALIASES)))
            raise UserError(f"unknown benchmark suite {suite!r}; known: {choices}")
        if load_suite(name).grader != "math":
            raise UserError(f"suite {name} is not graded by the math grader; the benchmark stream serves math suites")
    return names


def normalise_category(name: str) -> str:
    """``Number theory``, ``number_theory`` and ``number-theory`` -> ``number theory``."""
    return re.sub(r"[\s_\-]+", " ", name).strip().lower()


def task_categories(task: Task) -> list[str]:
    """Normalised categories of a benchmark task (MathArena may list several, comma-separated)."""
    raw = task.metadata.get("category")
    if not raw:
        return []
    return [normalise_category(part) for part in str(raw).split(",") if part.strip()]


@lru_cache(maxsize=16)
def load_suite_tasks(suites: tuple[str, ...], data: str | None) -> tuple[Task, ...]:
    """All rows of the suites as tasks (loaded once per process); ids are prefixed with the suite
    name (``hmmt_feb_2025/7``) when several suites are combined, since their row ids overlap."""
    tasks: list[Task] = []
    for name in suites:
        for task in make_loader(name, data).load():
            task_id = f"{name}/{task.id}" if len(suites) > 1 else task.id
            tasks.append(dataclasses.replace(task, id=task_id))
    return tuple(tasks)


def split_key(split_seed: int, task_id: str) -> str:
    """The order in which ids are held out: a hash of the seed and the id."""
    return hashlib.sha256(f"{split_seed}:{task_id}".encode()).hexdigest()


def split_ids(tasks: list[Task], heldout_fraction: float, split_seed: int) -> tuple[list[str], list[str]]:
    """``(train_ids, heldout_ids)``, stratified by each task's first category (see the module doc)."""
    strata: dict[str, list[str]] = {}
    for task in tasks:
        categories = task_categories(task)
        strata.setdefault(categories[0] if categories else "", []).append(task.id)
    heldout: set[str] = set()
    for ids in strata.values():
        ordered = sorted(ids, key=lambda task_id: split_key(split_seed, task_id))
        count = round(heldout_fraction * len(ordered))
        if heldout_fraction > 0 and len(ordered) >= 2:
            count = min(max(count, 1), len(ordered) - 1)
        heldout.update(ordered[:count])
    train = [t.id for t in tasks if t.id not in heldout]
    return train, [t.id for t in tasks if t.id in heldout]


class BenchmarkParams(BaseModel):
    """One phase's benchmark stream: which suite, which rows, how they split."""

    model_config = ConfigDict(extra="forbid")

    suite: str
    """An evals/*.yaml math suite (beyond_aime, hmmt_feb_2025, imo_answerbench, ...) or an alias:
    beyondaime, hmmt / matharena (the three HMMT suites together)."""
    data: str | None = None
    """Local file or folder of the rows (e.g. ../shared/data); None: ``$SAO_ENV_DATA`` when set, else
    the suite's hub id or URL."""
    categories: list[str] | None = None
    """Keep only rows of these categories (matched ignoring case, spaces and underscores, e.g.
    ``number_theory`` for IMO-AnswerBench's ``Number theory``); None: every row."""
    heldout_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    """Share of each category's rows held out for evaluation."""
    split_seed: int = 0
    """Seed of the train/held-out split (the same seed gives the same split)."""


class BenchmarkSource:
    """Stream of real benchmark problems: ``sample`` from the training split, ``sample_heldout`` from the rest."""

    grader = "math"
    Params = BenchmarkParams

    def __init__(self, params: BenchmarkParams, *, name: str = "benchmark"):
        self.params = params
        self.name = name
        self.suites = resolve_suites(params.suite)
        try:
            tasks = list(load_suite_tasks(self.suites, params.data or os.environ.get(DATA_ENV_VAR)))
        except DataUnreachable as err:  # `run` has no --data option: say how a run reads a local copy
            raise DataUnreachable(err.reason, f"set {DATA_ENV_VAR}=PATH (a folder or file holding the rows, e.g. "
                                              "../shared/data) or the source's params.data") from None
        if params.categories is not None:
            wanted = {normalise_category(c) for c in params.categories}
            present = sorted({c for t in tasks for c in task_categories(t)})
            tasks = [t for t in tasks if wanted & set(task_categories(t))]
            if not tasks:
                raise UserError(f"suite {params.suite}: no rows in categories {params.categories}; "
                                f"categories present: {', '.join(present) or 'none'}")
        self.tasks: dict[str, Task] = {t.id: t for t in tasks}
        self.train_ids, self.heldout_ids = split_ids(tasks, params.heldout_fraction, params.split_seed)
        if not self.train_ids:
            raise UserError(f"suite {params.suite}: no training rows left after the split")

    def _serve(self, task_id: str, *, split: str, phase: str, created_at: float) -> Task:
        task = self.tasks[task_id]
        metadata = {**task.metadata, "data": task.metadata.get("source"), "source": self.name, "phase": phase,
                    "created_at": created_at, "split": split}
        return dataclasses.replace(task, metadata=metadata, grader=self.grader, env="text")

    def sample(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task:
        """A training problem drawn uniformly."""
        task_id = self.train_ids[int(rng.integers(len(self.train_ids)))]
        return self._serve(task_id, split="train", phase=phase, created_at=created_at)

    def sample_heldout(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task:
        """The held-out problem number ``index`` (cycling), so an evaluation set covers the split."""
        if not self.heldout_ids:
            raise ValueError(f"{self.name}: heldout_fraction={self.params.heldout_fraction} holds out no rows")
        task_id = self.heldout_ids[index % len(self.heldout_ids)]
        return self._serve(task_id, split="heldout", phase=phase, created_at=created_at)

    def manifest(self) -> dict[str, Any]:
        return {"suite": self.params.suite, "suites": list(self.suites), "split_seed": self.params.split_seed,
                "heldout_fraction": self.params.heldout_fraction, "categories": self.params.categories,
                "train_ids": list(self.train_ids), "heldout_ids": list(self.heldout_ids)}

    @staticmethod
    def demonstrate(task: Task, rng: np.random.Generator) -> str:
        """The reference answer, boxed."""
        return f"\\boxed{{{task.reference['answer']}}}"
