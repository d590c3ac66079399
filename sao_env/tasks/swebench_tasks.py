"""A task stream over SWE-bench Verified instances, played in their containers (``SWEBenchEnv``).

Phases select repositories (e.g. django, then sympy), so the stream drifts across real codebases;
instances are split once into training and held-out parts by ``split_seed`` (the benchmark
stream's rule, ``sao_env.tasks.benchmark_stream.split_ids``, stratified by repository), and the
split is written to the run directory. A tiny model cannot act in these repositories; this source
is for hub models on machines with Docker.
"""

from __future__ import annotations

import dataclasses
import os
from functools import lru_cache

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from sao_env.benchmarks.loaders import DATA_ENV_VAR, DataUnreachable, make_loader
from sao_env.errors import UserError
from sao_env.tasks.benchmark_stream import split_ids
from sao_env.types import Task


@lru_cache(maxsize=4)
def _instances(data: str | None) -> tuple[Task, ...]:
    try:
        return tuple(make_loader("swebench_verified", data).load())
    except DataUnreachable as err:  # `run` has no --data option: say how a run reads a local copy
        raise DataUnreachable(err.reason, f"set {DATA_ENV_VAR}=PATH (a folder or file holding the rows) "
                                          "or the source's params.data") from None


class SWEBenchParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data: str | None = None
    """Local file or folder of the rows; None: ``$SAO_ENV_DATA`` if set, else princeton-nlp/SWE-bench_Verified."""
    repos: list[str] | None = None
    """Keep only instances of these repositories (``django/django``); None: all."""
    heldout_fraction: float = Field(0.2, ge=0.0, lt=1.0)
    """Share of each repository's instances held out for evaluation."""
    split_seed: int = 0
    """Seed of the train/held-out split."""


class SWEBenchSource:
    """SWE-bench Verified instances as multi-turn container tasks (``env="swebench"``)."""

    Params = SWEBenchParams

    def __init__(self, params: SWEBenchParams, *, name: str = "swebench_verified"):
        self.params, self.name = params, name
        tasks = list(_instances(params.data or os.environ.get(DATA_ENV_VAR)))
        if params.repos is not None:
            present = sorted({t.metadata["repo"] for t in tasks})
            tasks = [t for t in tasks if t.metadata["repo"] in params.repos]
            if not tasks:
                raise UserError(f"no SWE-bench instances of {', '.join(params.repos)}; present: {', '.join(present)}")
        self.tasks = {t.id: t for t in tasks}
        self.train_ids, self.heldout_ids = split_ids(tasks, params.heldout_fraction, params.split_seed)
        if not self.train_ids:
            raise UserError("no SWE-bench training instances left after the split")

    def _serve(self, task_id: str, *, split: str, phase: str, created_at: float) -> Task:
        task = self.tasks[task_id]
        metadata = {**task.metadata, "source": self.name, "phase": phase, "created_at": created_at, "split": split}
        return dataclasses.replace(task, env="swebench", metadata=metadata)

    def sample(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task:
        task_id = self.train_ids[int(rng.integers(len(self.train_ids)))]
        return self._serve(task_id, split="train", phase=phase, created_at=created_at)

    def sample_heldout(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task:
        pool = self.heldout_ids or self.train_ids
        return self._serve(pool[index % len(pool)], split="heldout", phase=phase, created_at=created_at)

    def demonstrate(self, task: Task, rng: np.random.Generator) -> str:
        """The gold patch as a ``diff`` command then ``submit`` is not a demonstration a tiny model can
        use; hub models start from their own weights (warm start is skipped for them)."""
        raise UserError("SWE-bench Verified has no warm start: use a hub model (agent.model.name)")

    def manifest(self) -> dict:
        return {"suite": "swebench_verified", "split_seed": self.params.split_seed,
                "train_ids": list(self.train_ids), "heldout_ids": list(self.heldout_ids)}
