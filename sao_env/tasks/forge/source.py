"""``ForgeSource``: the task source of forge instances (``forge_repo`` in a scenario's YAML).

    sources:
      - name: forge_repo
        params: {repo_seed: 0, head: 2, bug_kinds: [operator_swap, off_by_one]}

Each sampled task is one instance (``instances.build_instance``) of the repository at ``head``,
played in ``RepoEnv`` (``env="repo"``) and graded by ``forge_tests``. A scenario drifts the
codebase by listing phases with increasing ``head``.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sao_env.tasks import coding_tools as tools
from sao_env.tasks.forge.bugs import BUG_KINDS
from sao_env.tasks.forge.grading import DEFAULT_TIMEOUT_S
from sao_env.tasks.forge.instances import ForgeInstance, build_instance, instance_kinds
from sao_env.tasks.forge.repo import ForgeConfig
from sao_env.types import Task, Turn

PROMPT_COMMANDS = "Commands: view PATH | edit PATH LINE, newline, new text | run_tests | submit\n"


class ForgeParams(BaseModel):
    """One phase's forge: which repository, at which head, with which bugs."""

    model_config = ConfigDict(extra="forbid")

    repo_seed: int = 0
    """Seed of the repository (package, modules, functions, constants, drift)."""
    head: int = Field(0, ge=0, le=40)
    """Drift commits applied: tasks are cut from the repository after this many."""
    bug_kinds: list[str] = list(BUG_KINDS)
    """Bug kinds drawn from (uniformly, per instance)."""
    modules: int = Field(2, ge=2, le=3)
    """Modules of the initial repository (size knob; drift may add more)."""
    functions_per_module: int = Field(3, ge=2, le=4)
    """Functions per initial module (size knob)."""
    test_timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0, le=600)
    """Wall-clock limit of one sandboxed test run (``run_tests`` and grading)."""
    show_commands: bool = True
    """Whether the prompt ends with the command list."""

    @field_validator("bug_kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        instance_kinds(kinds)
        return kinds

    @property
    def config(self) -> ForgeConfig:
        return ForgeConfig(self.repo_seed, self.modules, self.functions_per_module)


class ForgeSource:
    """Seeded forge instances as tasks; ``demonstrate`` plays view, edit (the gold line), submit."""

    grader = "forge_tests"
    Params = ForgeParams

    def __init__(self, params: ForgeParams, *, name: str = "forge_repo"):
        """Raises ValueError when the repository offers no bug of the listed kinds (seen only for
        single kinds on the smallest repositories), so a scenario fails when it is loaded."""
        self.params = params
        self.name = name
        try:
            self.instance(0)
        except ValueError as err:
            raise ValueError(f"{err}: list more bug_kinds, enlarge the repository (modules, "
                             f"functions_per_module) or pick another repo_seed") from None

    def instance(self, instance_seed: int) -> ForgeInstance:
        p = self.params
        return build_instance(p.config, p.head, tuple(p.bug_kinds), int(instance_seed))

    def sample(self, rng: np.random.Generator, *, phase: str, created_at: float, index: int) -> Task:
        return self.task(int(rng.integers(0, 2**31 - 1)), phase=phase, created_at=created_at)

    def task(self, instance_seed: int, *, phase: str = "train", created_at: float = 0.0) -> Task:
        """The task of one instance seed (what ``sample`` returns for the seed it draws)."""
        p = self.params
        instance = self.instance(instance_seed)
        prompt = instance.problem_statement + (PROMPT_COMMANDS if p.show_commands else "")
        return Task(
            id=instance.instance_id,
            prompt=prompt,
            reference={**instance.reference(), "timeout_s": p.test_timeout_s},
            grader=self.grader,
            metadata={"source": self.name, "phase": phase, "created_at": created_at,
                      "bug_kind": instance.bug.kind, "head": p.head, "repo_seed": p.repo_seed,
                      "repo": instance.repo, "instance_id": instance.instance_id,
                      "difficulty": {"modules": p.modules, "functions_per_module": p.functions_per_module}},
            env="repo",
        )

    @staticmethod
    def demonstrate(task: Task, rng: np.random.Generator) -> list[Turn]:
        """View the buggy file, replace the buggy line by the fixed one, submit.

        The observations are computed by the same functions ``RepoEnv`` answers with, so a replay
        reproduces them (as long as the env's ``max_observation_chars`` exceeds a file's view).
        """
        files = dict(task.reference["files"])
        bug = task.reference["bug"]
        path, line, fixed = bug["path"], bug["line"], bug["fixed"]
        _, edited = tools.edit(files, f"{path} {line}", fixed)
        return [Turn(f"view {path}", tools.view(files, path)),
                Turn(f"edit {path} {line}\n{fixed}", edited),
                Turn("submit", "")]
