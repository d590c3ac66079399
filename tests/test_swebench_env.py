"""SWE-bench Verified as a tool env: the shell commands its tools run in the container (run here
against a real git checkout in the bubblewrap sandbox, which has the images' tools: bash, cat,
base64, git) give the same observations as the in-memory repository env, and without a Docker
engine the env says so in one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import needs_shared_data
from sao_env.tasks import coding_tools as tools
from sao_env.envs.base import make_task_env
from sao_env.envs.swebench_env import apply_diff_argv, list_files_argv, read_file_argv, run_script_argv, write_file_argv
from sao_env.errors import UserError
from sao_env.sandbox import LocalExecutor
from sao_env.tasks import build_source

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SOURCE = "def add(a, b):\n    return a - b\n"


@pytest.fixture()
def checkout(tmp_path):
    repo = tmp_path / "testbed"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "ops.py").write_text(SOURCE)
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for argv in (["git", "init", "-q"], ["git", "add", "."], ["git", "commit", "-qm", "base"]):
        subprocess.run(argv, cwd=repo, check=True, env=env)
    return repo


def run(argv, workdir):
    return LocalExecutor().run(argv, workdir=workdir, timeout_s=20)


def test_view_reads_the_file_as_the_repo_env_shows_it(checkout):
    result = run(read_file_argv("pkg/ops.py"), checkout)
    assert result.ok and result.stdout == SOURCE
    assert tools.view({"pkg/ops.py": result.stdout}, "pkg/ops.py") == "1|def add(a, b):\n2|    return a - b\n"
    assert run(list_files_argv(), checkout).stdout.split() == ["pkg/ops.py"]
    assert not run(read_file_argv("pkg/missing.py"), checkout).ok


def test_edit_writes_back_exact_bytes(checkout):
    updated, observation = tools.edit({"pkg/ops.py": SOURCE}, "pkg/ops.py 2", "    return a + b  # $HOME `x` 'q' \"d\"")
    assert observation.startswith("ok\n")
    result = run(write_file_argv("pkg/ops.py", updated["pkg/ops.py"]), checkout)
    assert result.ok, result
    assert (checkout / "pkg" / "ops.py").read_text() == "def add(a, b):\n    return a + b  # $HOME `x` 'q' \"d\"\n"


def test_diff_applies_a_unified_diff_and_rejects_a_stale_one(checkout):
    patch = ("--- a/pkg/ops.py\n+++ b/pkg/ops.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n"
             "-    return a - b\n+    return a + b\n")
    assert run(apply_diff_argv(patch), checkout).ok
    assert (checkout / "pkg" / "ops.py").read_text() == "def add(a, b):\n    return a + b\n"
    again = run(apply_diff_argv(patch), checkout)
    assert not again.ok and "patch does not apply" in again.stderr


def test_run_tests_runs_the_eval_script(checkout):
    script = "echo '>>>>> Start Test Output'\necho PASSED\necho '>>>>> End Test Output'\n"
    result = run(run_script_argv(script), checkout)
    assert result.stdout.splitlines() == [">>>>> Start Test Output", "PASSED", ">>>>> End Test Output"]


@needs_shared_data
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
