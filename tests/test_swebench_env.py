"""SWE-bench Verified as a tool env: the command language, the shell commands each tool runs in the
container (run here against a real git checkout in the bubblewrap sandbox, which has the same
tools as the images: bash, awk, base64, git), and the one-line error without a Docker engine."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from sao_env.envs.base import make_task_env
from sao_env.envs.commands import Command, CommandError, numbered, parse_command, replace_line
from sao_env.envs.swebench_env import tool_argv, write_file_argv
from sao_env.errors import UserError
from sao_env.sandbox import LocalExecutor
from sao_env.tasks import build_source

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


# -- the command language ---------------------------------------------------------------------------

def test_parse_each_command():
    assert parse_command("view pkg/ops.py") == Command("view", path="pkg/ops.py")
    assert parse_command("edit pkg/ops.py 3\n    return a + b") == Command("edit", "pkg/ops.py", 3, "    return a + b")
    assert parse_command("edit a.py 2") == Command("edit", "a.py", 2, "")
    assert parse_command("run_tests") == Command("run_tests")
    assert parse_command("\nsubmit\n") == Command("submit")
    diff = "diff\n```diff\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n```"
    assert parse_command(diff) == Command("diff", text="--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n")


@pytest.mark.parametrize(("action", "message"), [
    ("", "empty command"), ("open x.py", "unknown command 'open'"), ("view", "usage: view PATH"),
    ("view a b", "usage: view PATH"), ("edit x.py", "usage: edit"), ("edit x.py 0\nz", "usage: edit"),
    ("edit x.py two\nz", "usage: edit"), ("submit now", "takes no arguments"), ("diff\nno hunk", "no hunk"),
    ("view /etc/passwd", "not a path inside"), ("view ../secret", "not a path inside"),
])
def test_malformed_commands_are_errors_with_a_message(action, message):
    with pytest.raises(CommandError, match=message) as err:
        parse_command(action)
    assert str(err.value).startswith("error:")


def test_replace_line_by_hand():
    text = "a\nb\nc\n"
    assert replace_line(text, 2, "B") == "a\nB\nc\n"
    assert replace_line(text, 3, "c1\nc2") == "a\nb\nc1\nc2\n"
    assert replace_line(text, 1, "") == "b\nc\n"
    with pytest.raises(CommandError, match="outside the file"):
        replace_line(text, 4, "d")
    assert numbered("x\ny\n") == "1|x\n2|y\n"


# -- the container commands, run in a local checkout ------------------------------------------------

@pytest.fixture()
def checkout(tmp_path):
    repo = tmp_path / "testbed"
    repo.mkdir()
    (repo / "ops.py").write_text("def add(a, b):\n    return a - b\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for argv in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "base"]):
        subprocess.run(argv, cwd=repo, check=True, env=env)
    return repo


def test_view_shows_numbered_lines_like_the_repo_env(checkout):
    result = LocalExecutor().run(tool_argv(Command("view", path="ops.py")), workdir=checkout, timeout_s=20)
    assert result.ok, result
    assert result.stdout == numbered((checkout / "ops.py").read_text())


def test_write_file_writes_exact_bytes(checkout):
    text = "def add(a, b):\n    return a + b  # $HOME `x` 'q' \"d\"\n"
    result = LocalExecutor().run(write_file_argv("ops.py", text), workdir=checkout, timeout_s=20)
    assert result.ok, result
    assert (checkout / "ops.py").read_text() == text


def test_diff_applies_a_unified_diff_and_rejects_a_wrong_one(checkout):
    patch = "--- a/ops.py\n+++ b/ops.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    ok = LocalExecutor().run(tool_argv(Command("diff", text=patch)), workdir=checkout, timeout_s=20)
    assert ok.ok and "applied" in ok.stdout, ok
    assert (checkout / "ops.py").read_text() == "def add(a, b):\n    return a + b\n"
    again = LocalExecutor().run(tool_argv(Command("diff", text=patch)), workdir=checkout, timeout_s=20)
    assert not again.ok and "patch does not apply" in again.stderr


def test_run_tests_runs_the_eval_script(checkout):
    script = "echo '>>>>> Start Test Output'\necho PASSED\necho '>>>>> End Test Output'\n"
    result = LocalExecutor().run(tool_argv(Command("run_tests"), eval_script=script), workdir=checkout, timeout_s=20)
    assert result.stdout.splitlines() == [">>>>> Start Test Output", "PASSED", ">>>>> End Test Output"]


# -- without Docker ------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:.*rows lack:UserWarning")  # the shared rows have 5 columns
def test_reset_without_docker_is_one_line(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    source = build_source("swebench_verified", {"data": str(SHARED_DATA / "swebench_verified")})
    assert set(source.train_ids).isdisjoint(source.heldout_ids) and source.heldout_ids
    task = source.sample(np.random.default_rng(0), phase="p", created_at=0.0, index=0)
    assert task.env == "swebench" and task.id in source.train_ids
    env = make_task_env(task)
    with pytest.raises(UserError, match="no Docker engine reachable") as err:
        env.reset(seed=0, options={"task": task})
    assert "\n" not in str(err.value)
