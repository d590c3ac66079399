"""SWE-bench Verified as a multi-turn tool environment: the tools run inside the instance's container.

The episode starts a container from the instance's SWE-bench image (``sweb.eval.x86_64.<id>``,
pulled from the ``swebench`` namespace when missing) with the repository at ``/testbed`` on the
base commit. The policy uses the coding command language (``sao_env.envs.commands``): ``view``,
``edit``, ``diff``, ``run_tests`` and ``submit``. At the end the model patch is ``git diff`` of
the working tree, the instance's evaluation script (swebench's, which restores the test files,
applies the test patch and runs the tests between its markers) runs in the same container, and
the log is graded by swebench's own parser and rule (``sao_env.benchmarks.swebench``): resolved
when every FAIL_TO_PASS and PASS_TO_PASS test passes.

Without a reachable Docker engine ``reset`` raises a one-line ``UserError`` that says so. The
shell commands each tool runs (``tool_argv``) need no engine to build and are tested against a
local git checkout in the bubblewrap sandbox.
"""

from __future__ import annotations

import base64
import shlex
from typing import Any

from sao_env.benchmarks.swebench import grade_swebench, instance_row, make_test_spec, require_docker
from sao_env.envs.base import TaskEnv
from sao_env.envs.commands import Command, CommandError, parse_command, replace_line
from sao_env.envs.text_env import render_prompt
from sao_env.scenario import LatencySpec
from sao_env.types import Task

REPO_DIR = "/testbed"
TOOL_HINT = ("\nCommands (one per turn): view PATH | edit PATH LINE + new lines | diff + unified diff | "
             "run_tests | submit\n")


def write_file_argv(path: str, text: str) -> list[str]:
    """A shell command that writes ``text`` to ``path`` byte for byte (base64 through argv: no stdin needed)."""
    payload = base64.b64encode(text.encode()).decode()
    return ["bash", "-c", f"echo {payload} | base64 -d > {shlex.quote(path)}"]


def tool_argv(command: Command, *, eval_script: str = "") -> list[str]:
    """The shell command a tool runs in the repository's root (not ``edit``: it is read, edit, write)."""
    if command.name == "view":
        return ["awk", '{printf "%d|%s\\n", NR, $0}', command.path]
    if command.name == "diff":
        payload = base64.b64encode(command.text.encode()).decode()
        return ["bash", "-c", f"echo {payload} | base64 -d > /tmp/sao_model.diff && "
                              "git apply --whitespace=nowarn /tmp/sao_model.diff && echo applied"]
    if command.name == "run_tests":
        return ["bash", "-c", eval_script]
    raise ValueError(f"{command.name} runs no shell command of its own")


def summarize_test_output(log: str, limit: int = 1500) -> str:
    """The tail of a test run, where pytest and friends put their summary."""
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

        self.close()
        row = instance_row(task)
        self.test_spec = make_test_spec(row, namespace=self.namespace)
        image = self.test_spec.instance_image_key
        self.executor = DockerExecutor(image)
        client = self.executor._client
        try:
            client.images.get(image)
        except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound and friends: fetch it
            client.images.pull(image)
        self.container = client.containers.run(image, command=["sleep", "infinity"], detach=True,
                                               working_dir=REPO_DIR, network_disabled=True, mem_limit="4g")
        return render_prompt(task) + TOOL_HINT

    def _exec(self, argv: list[str], timeout_s: float | None = None):
        return self.executor.exec_in(self.container, argv, timeout_s=timeout_s or self.command_timeout_s,
                                     workdir=REPO_DIR)

    def _act(self, action: str) -> tuple[str, bool, str | None]:
        try:
            command = parse_command(action)
        except CommandError as err:
            return str(err) + "\n", False, None
        if command.name == "submit":
            return "", True, "submit"
        if command.name == "edit":
            current = self._exec(["cat", command.path])
            if not current.ok:
                return f"error: cannot read {command.path}\n", False, "edit"
            try:
                updated = replace_line(current.stdout, command.line, command.text)
            except CommandError as err:
                return str(err) + "\n", False, "edit"
            result = self._exec(write_file_argv(command.path, updated))
            return ("edited\n" if result.ok else f"error: {result.stderr.strip()[-300:]}\n"), False, "edit"
        timeout = self.test_timeout_s if command.name == "run_tests" else None
        result = self._exec(tool_argv(command, eval_script=self.test_spec.eval_script), timeout)
        output = result.stdout + (result.stderr if not result.ok else "")
        if result.reason:
            output += f"\n[{result.reason}]"
        if command.name == "run_tests":
            output = summarize_test_output(output)
        return output + "\n", False, command.name

    def _grade(self) -> tuple[float, dict[str, Any]]:
        base = instance_row(self.task)["base_commit"]
        patch = self._exec(["git", "-c", "core.fileMode=false", "diff", base]).stdout
        log = self._exec(tool_argv(Command("run_tests"), eval_script=self.test_spec.eval_script), self.test_timeout_s)
        result = grade_swebench(self.task, log.stdout, model_patch=patch or None)
        return result.reward, {**result.details, "model_patch": patch}

    def close(self) -> None:
        if self.container is not None:
            try:
                self.container.remove(force=True)
            finally:
                self.container = None
