"""SWE-bench Verified as a multi-turn tool environment: the tools run inside the instance's container.

The episode starts a container from the instance's SWE-bench image (``swebench/sweb.eval.x86_64.<id>``
for SWE-bench Verified, which must have been pulled: a missing one is a one-line ``UserError`` with the
``docker pull`` command; ``sao-env/sweb.eval.x86_64.<id>`` for a forge instance, built by
``sao_env.benchmarks.swebench.build_forge_image``) with the repository at ``/testbed`` on the base
commit, no network, labelled as the sandbox's containers are (reaped if the harness dies). The policy uses the coding command language of ``sao_env.tasks.coding_tools`` with
the same observations as ``RepoEnv``: ``view`` and ``edit`` read (and write back) the file in the
container, ``diff`` runs ``git apply`` there, ``run_tests`` runs the instance's evaluation script,
``submit`` ends. At the end the model patch is ``git diff`` of the working tree against the base
commit, the evaluation script (swebench's: it restores the test files, applies the test patch and
runs the tests between its markers) runs in the same container, and the log is graded by
swebench's own parser and rule (``sao_env.benchmarks.swebench``): resolved when every FAIL_TO_PASS
and PASS_TO_PASS test passes.

Without a reachable Docker engine ``reset`` raises a one-line ``UserError`` that says so. The
shell commands the tools run are tested against a local git checkout in the bubblewrap sandbox, and
a whole episode against a forge instance's image in a real engine.
"""

from __future__ import annotations

import base64
import shlex
from typing import Any

from sao_env.benchmarks.swebench import (
    FORGE_NAMESPACE,
    grade_swebench,
    instance_row,
    is_forge,
    make_test_spec,
    require_docker,
    require_instance_image,
)
from sao_env.tasks import coding_tools as tools
from sao_env.envs.base import TaskEnv, render_prompt
from sao_env.scenario import LatencySpec
from sao_env.types import Task

REPO_DIR = "/testbed"
TOOL_HINT = "\nCommands, one per turn: view PATH | edit PATH LINE + new text | diff + unified diff | run_tests | submit\n"


def read_file_argv(path: str) -> list[str]:
    return ["cat", "--", path]


def list_files_argv() -> list[str]:
    return ["git", "ls-files"]


def write_file_argv(path: str, text: str) -> list[str]:
    """A shell command that writes ``text`` to ``path`` byte for byte (base64 through argv: no stdin needed)."""
    payload = base64.b64encode(text.encode()).decode()
    return ["bash", "-c", f"echo {payload} | base64 -d > {shlex.quote(path)}"]


def apply_diff_argv(patch: str) -> list[str]:
    payload = base64.b64encode(patch.encode()).decode()
    return ["bash", "-c", f"echo {payload} | base64 -d > /tmp/sao_model.diff && "
                          "git apply --whitespace=nowarn /tmp/sao_model.diff"]


def run_script_argv(script: str) -> list[str]:
    """The evaluation script with its stderr merged into stdout, as swebench's harness reads it: the
    script traces its commands (``set -x``), so the start and end markers of the test output are on stderr."""
    return ["bash", "-c", "exec 2>&1\n" + script]


def without_records(log: str) -> str:
    """The log less the grader's signed report lines (a forge instance's reporter, ``forge_specs``):
    what the policy sees of a test run is what pytest printed."""
    from sao_env.tasks.forge.report import MARK

    return "".join(line for line in log.splitlines(keepends=True) if MARK not in line)


def tail(log: str, limit: int = 1500) -> str:
    """The end of a test run, where pytest and friends put their summary."""
    return log if len(log) <= limit else "...\n" + log[-limit:]


class SWEBenchEnv(TaskEnv):
    """One SWE-bench instance, played in its container (see the module docstring)."""

    def __init__(self, latency: LatencySpec | None = None, max_turns: int = 30, *, namespace: str = "swebench",
                 command_timeout_s: float = 120.0, test_timeout_s: float = 1800.0, **kwargs: Any):
        super().__init__(latency=latency, max_turns=max_turns, **kwargs)
        self.namespace = namespace
        self.command_timeout_s = command_timeout_s
        self.test_timeout_s = test_timeout_s
        self.container = None
        self.executor = None

    def _start(self, task: Task) -> str:
        require_docker()
        from sao_env.sandbox import DockerExecutor

        from sao_env.sandbox.docker_exec import owner_labels

        self.close()
        row = instance_row(task)
        self.test_spec = make_test_spec(row, namespace=FORGE_NAMESPACE if is_forge(row) else self.namespace)
        image = self.test_spec.instance_image_key
        self.executor = DockerExecutor(image)
        client = self.executor._client
        require_instance_image(client, image)
        self.container = client.containers.run(image, command=["sleep", "infinity"], detach=True,
                                               working_dir=REPO_DIR, network_mode="none", mem_limit="4g",
                                               labels=owner_labels())
        return render_prompt(task) + TOOL_HINT

    def _exec(self, argv: list[str], timeout_s: float | None = None):
        return self.executor.exec_in(self.container, argv, timeout_s=timeout_s or self.command_timeout_s,
                                     workdir=REPO_DIR)

    def _read(self, path: str) -> dict[str, str]:
        """``{path: text}`` when the file exists in the container, else ``{}`` (the tools then say so)."""
        result = self._exec(read_file_argv(path))
        return {path: result.stdout} if result.ok else {}

    def _act(self, action: str) -> tuple[str, bool, str | None]:
        command, header, text = tools.parse(action)
        if command == "submit":
            return "", True, "submit"
        if command == "view":
            path = tools.clean_path(header)
            files = self._read(path) if path else dict.fromkeys(self._exec(list_files_argv()).stdout.split(), "")
            return tools.printable(tools.view(files, path)), False, "view"
        if command == "edit":
            words = header.split()
            files = self._read(tools.clean_path(words[0])) if words else {}
            updated, observation = tools.edit(files, header, text)
            if updated is not None:
                (path, new_text), = updated.items()
                written = self._exec(write_file_argv(path, new_text))
                if not written.ok:
                    observation = f"error: cannot write {path}: {written.stderr.strip()[-200:]}\n"
            return tools.printable(observation), False, "edit"
        if command == "diff":
            patch = action.lstrip("\n ") if header.startswith("--git") else (text or "")
            if not patch.strip():
                return "error: diff needs a unified diff after a newline\n", False, "diff"
            result = self._exec(apply_diff_argv(patch if patch.endswith("\n") else patch + "\n"))
            observation = "ok: patched\n" if result.ok else f"error: patch did not apply: {result.stderr.strip()[-300:]}\n"
            return tools.printable(observation), False, "diff"
        if command == "run_tests":
            result = self._exec(run_script_argv(self.test_spec.eval_script), self.test_timeout_s)
            output = without_records(result.stdout) + (f"\n[{result.reason}]" if result.reason else "")
            return tools.printable(tail(output)) + "\n", False, "run_tests"
        shown = tools.printable(command[:40])
        return f"error: unknown command '{shown}'; {tools.USAGE}\n", False, None

    def _grade(self) -> tuple[float, dict[str, Any]]:
        base = instance_row(self.task)["base_commit"]
        patch = self._exec(["git", "-c", "core.fileMode=false", "diff", base]).stdout
        log = self._exec(run_script_argv(self.test_spec.eval_script), self.test_timeout_s)
        result = grade_swebench(self.task, log.stdout, model_patch=patch or None)
        return result.reward, {**result.details, "model_patch": patch}

    def close(self) -> None:
        if self.container is not None:
            try:
                self.container.remove(force=True)
            finally:
                self.container = None
