"""``RepoEnv``: a multi-turn tool environment over one forge instance (``Task.env == "repo"``).

    env = RepoEnv(max_turns=8)
    prompt, info = env.reset(seed=0, options={"task": task})
    observation, reward, terminated, truncated, info = env.step("view mathkit/ops.py")

One command per action (the first word of the action's first line):

- ``view PATH``: the file as ``N|text`` lines; ``view`` alone lists the files.
- ``edit PATH LINE`` + newline + text: line LINE becomes the text; answers ``ok`` and the new lines.
- ``diff`` + newline + a unified diff (or an action that starts with ``diff --git``): applied with
  ``git apply``; answers ``ok: patched`` and the changed files.
- ``run_tests``: the working copy's tests, run in the sandbox in a fresh copy; answers the failing
  tests, the first assertion lines and pytest's count line (or ``timeout: ...``).
- ``submit``: ends the episode; the reward is the forge grader's verdict on the working copy.

Anything else answers ``error: unknown command 'X'; commands: ...``; a malformed command an
``error:`` line. The turn limit ends the episode and grades the working copy as it stands. The
working copy lives in memory; each test run writes a fresh copy under the episode's own
temporary folder, removed by ``close()`` (and by the next ``reset``).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from sao_env.envs.base import TaskEnv, render_prompt
from sao_env.sandbox import Executor
from sao_env.sandbox.owner import owned_tempdir
from sao_env.sandbox.workdir import reap_left_behind
from sao_env.scenario import LatencySpec
from sao_env.tasks import coding_tools as tools
from sao_env.tasks.forge.grading import (
    DEFAULT_TIMEOUT_S,
    apply_patch,
    grade_files,
    run_visible_tests,
)
from sao_env.types import Task

SCRATCH_PREFIX = "sao-repo-env-"
"""An episode's temporary folder (``owner.owned_tempdir``): patches applied and tests run beneath it."""


class RepoEnv(TaskEnv):
    """Fix a forge instance's bug with view / edit / diff / run_tests / submit.

    ``test_timeout_s`` overrides the task's ``timeout_s`` for test runs and grading; ``executor``
    replaces the shared sandbox (``default_executor()``).
    """

    def __init__(self, latency: LatencySpec | None = None, max_turns: int = 1, max_length: int = 65536,
                 max_observation_chars: int = 2000, *, test_timeout_s: float | None = None,
                 executor: Executor | None = None):
        super().__init__(latency=latency, max_turns=max_turns, max_length=max_length,
                         max_observation_chars=max_observation_chars)
        self.test_timeout_s = test_timeout_s
        self.executor = executor
        self.files: dict[str, str] = {}
        self._scratch: Path | None = None

    @property
    def timeout_s(self) -> float:
        if self.test_timeout_s is not None:
            return float(self.test_timeout_s)
        return float(self.task.reference.get("timeout_s", DEFAULT_TIMEOUT_S)) if self.task else DEFAULT_TIMEOUT_S

    @classmethod
    def sandbox_options(cls, sandbox: str) -> dict[str, Any]:
        """``sandbox: docker``: test runs and grading in a container of the sandbox image (default limits)."""
        from sao_env.sandbox import Limits, docker_sandbox

        return {"executor": docker_sandbox(Limits())} if sandbox == "docker" else {}

    def _start(self, task: Task) -> str:
        self._cleanup()
        self.files = dict(task.reference["files"])
        return render_prompt(task)

    def _act(self, action: str) -> tuple[str, bool, str | None]:
        command, header, text = tools.parse(action)
        if command == "submit":
            return "", True, "submit"
        if command == "view":
            return tools.view(self.files, header), False, "view"
        if command == "edit":
            updated, observation = tools.edit(self.files, header, text)
            if updated is not None:
                self.files = updated
            return observation, False, "edit"
        if command == "diff":
            patch = action.lstrip("\n ") if header.startswith("--git") else (text or "")
            return self._diff(patch), False, "diff"
        if command == "run_tests":
            observation = run_visible_tests(self.files, timeout_s=self.timeout_s, executor=self.executor,
                                            parent=self.scratch())
            return tools.printable(observation), False, "run_tests"
        shown = tools.printable(command[:40])
        if not command:
            return f"error: empty command; {tools.USAGE}\n", False, None
        return f"error: unknown command '{shown}'; {tools.USAGE}\n", False, None

    def _diff(self, patch: str) -> str:
        if not patch.strip():
            return "error: diff needs a unified diff after a newline\n"
        if not patch.endswith("\n"):
            patch += "\n"
        updated, error = apply_patch(self.files, patch, self.scratch())
        if updated is None:
            return tools.printable(f"error: patch did not apply: {error}\n")
        changed = sorted(p for p in set(updated) | set(self.files) if updated.get(p) != self.files.get(p))
        self.files = updated
        return tools.printable(f"ok: patched {', '.join(changed) or 'nothing'}\n")

    def _grade(self) -> tuple[float, dict[str, Any]]:
        result = grade_files(self.task.reference, self.files, timeout_s=self.timeout_s, executor=self.executor,
                             parent=self.scratch())
        return result.reward, dict(result.details)

    def scratch(self) -> Path:
        """This episode's own temporary folder (created on first use, removed by ``close``)."""
        if self._scratch is None:
            reap_left_behind(SCRATCH_PREFIX)
            self._scratch = owned_tempdir(SCRATCH_PREFIX)
        return self._scratch

    def _cleanup(self) -> None:
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def close(self) -> None:
        self._cleanup()
        super().close()
