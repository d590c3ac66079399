"""Source parameters shared by the procedural sources: a finite prompt pool and a hidden difficulty class.

Every procedural source's ``Params`` (styled_arithmetic, tool_arithmetic, olympiad) derives from
``SourceParams`` and so accepts three more keys:

- ``pool: N`` serves tasks drawn uniformly from N fixed prompts instead of a fresh draw each time,
  so that a prompt comes back and a per-prompt baseline (or a per-prompt variance share) exists at
  all. The N prompts are the source's own draws from the seed streams ``(pool_seed, j)``, j = 0, 1,
  ..., keeping the first N distinct prompt texts: the same pool in every run and every seed of a
  scenario (a fixed data set), while which pool prompt comes next is drawn from the run's task stream.
- ``pool_seed`` picks another pool.
- ``difficulty_class: NAME`` stamps ``metadata["difficulty_class"] = NAME`` on every task of the
  source: the hidden class that the per-class running mean (agents/oracle_class.yaml) and the
  per-class variance shares (``sao_env.evaluation.variance``) read; the policy never sees it.

A source with either key set (``variant_active``) also stamps ``metadata["prompt_id"]``, a short hash
of the prompt text: the prompt's identity, shared by every task with the same text (pooled or not),
which run logs record beside the task id. With none of the keys (the defaults) nothing changes: the
source draws exactly as before, its tasks carry no new metadata, and the keys are left out of the
dumped parameters (``SourceParams``' serializer), so existing configurations keep their bytes and hashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, ClassVar

import numpy as np
from pydantic import Field

from sao_env.config_dump import OmitDefaults
from sao_env.types import Task

MAX_POOL_TRIES = 100
"""Draws per pool prompt, at most, while filling a pool with distinct prompts: a generator with fewer
distinct prompts than the pool asks for is an error rather than an endless loop."""


class SourceParams(OmitDefaults):
    """Base of a procedural source's parameters: the pool and class keys (module docstring); keys named
    in ``omit_at_default`` are dropped from the dump while they hold their defaults."""

    omit_at_default: ClassVar[tuple[str, ...]] = ("pool", "pool_seed", "difficulty_class")

    pool: int | None = Field(None, ge=1)
    """Serve tasks from this many fixed prompts (None: a fresh draw every time)."""
    pool_seed: int = Field(0, ge=0)
    """Seed of the pool's prompts (the same pool in every run of the scenario)."""
    difficulty_class: str | None = Field(None, min_length=1)
    """Hidden difficulty class stamped on every task (``metadata["difficulty_class"]``)."""



def variant_active(params: Any) -> bool:
    """Whether ``params`` asks for a pool or a class (then ``build_source`` wraps the source)."""
    return getattr(params, "pool", None) is not None or getattr(params, "difficulty_class", None) is not None


def prompt_id(task: Task) -> str:
    """The prompt's identity: 12 hex digits of the sha256 of its text (chat messages as JSON)."""
    text = task.prompt if isinstance(task.prompt, str) else json.dumps(list(task.prompt), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def prompt_key(task: Task) -> str:
    """The key a per-prompt statistic files ``task`` under: ``metadata["prompt_id"]`` where the source
    stamped one, else the prompt text's hash (``prompt_id``): equal texts are one prompt either way."""
    return str(task.metadata.get("prompt_id") or prompt_id(task))


class VariantSource:
    """A source served from a fixed prompt pool and/or stamped with a difficulty class (module docstring).

    Everything else (``demonstrate``, ``grader``, ``env``, ``params``, ``name``, ``sample_heldout``) is the
    wrapped source's."""

    def __init__(self, inner: Any):
        self.inner = inner
        params = inner.params
        self.pool_seeds: list[int] | None = None
        if params.pool is not None:
            self.pool_seeds = self._fill_pool(params.pool, params.pool_seed)

    def __getattr__(self, name: str) -> Any:
        if name == "inner" or name.startswith("__"):  # not set yet (a copy or an unpickling under way)
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _fill_pool(self, size: int, seed: int) -> list[int]:
        seen: set[str] = set()
        seeds: list[int] = []
        j = 0
        while len(seeds) < size:
            if j >= MAX_POOL_TRIES * size:
                raise ValueError(f"source {self.inner.name!r}: pool {size} asks for more distinct prompts than "
                                 f"{j} draws gave ({len(seeds)}); lower pool")
            task = self.inner.sample(np.random.default_rng([seed, j]), phase="pool", created_at=0.0, index=0)
            text = prompt_id(task)
            if text not in seen:
                seen.add(text)
                seeds.append(j)
            j += 1
        return seeds

    def _stamp(self, task: Task) -> Task:
        metadata = {**task.metadata, "prompt_id": prompt_id(task)}
        if self.inner.params.difficulty_class is not None:
            metadata["difficulty_class"] = self.inner.params.difficulty_class
        return dataclasses.replace(task, metadata=metadata)

    def sample(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task:
        """A fresh draw (no pool), or pool prompt k ~ uniform(pool) drawn from ``rng``; stamped."""
        if self.pool_seeds is not None:
            k = int(rng.integers(len(self.pool_seeds)))
            rng = np.random.default_rng([self.inner.params.pool_seed, self.pool_seeds[k]])
        return self._stamp(self.inner.sample(rng, phase=phase, created_at=created_at, index=index))
