"""RepoEnv: the Gymnasium API, demonstration replay, tools, the turn limit, and containment of
model-written code (real sandbox, real grading)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from sao_env.envs.base import make_task_env
from sao_env.envs.repo_env import RepoEnv
from sao_env.sandbox import default_executor
from sao_env.tasks.forge import BUG_KINDS, ForgeSource
from sao_env.tasks.forge.repo import cache_root
from sao_env.tasks.tokens import CHARSET


@pytest.fixture(scope="module")
def tasks():
    """One task per bug kind (heads 0 and 1)."""
    return [ForgeSource(ForgeSource.Params(repo_seed=3, head=k % 2, bug_kinds=[kind])).task(k)
            for k, kind in enumerate(BUG_KINDS)]


@pytest.fixture(scope="module")
def task(tasks):
    return tasks[0]


def _play(env: RepoEnv, actions: list[str]):
    return [env.step(action) for action in actions]


class _WithTask(gym.Wrapper):
    """Supplies the task to ``reset`` (RepoEnv needs ``options={"task": task}``; ``check_env`` calls
    ``reset(seed=...)`` without options)."""

    def __init__(self, env: RepoEnv, task):
        super().__init__(env)
        self._task = task

    def reset(self, *, seed=None, options=None):
        return self.env.reset(seed=seed, options={"task": self._task, **(options or {})})


def test_gymnasium_api(task):
    from gymnasium.utils.env_checker import check_env

    env = RepoEnv(max_turns=4)
    with pytest.raises(ValueError):
        env.reset(seed=0)
    prompt, info = env.reset(seed=0, options={"task": task})
    assert isinstance(prompt, str) and env.observation_space.contains(prompt) and info["task"] is task
    observation, reward, terminated, truncated, info = env.step(f"view {task.reference['bug']['path']}")
    assert env.observation_space.contains(observation) and set(observation) <= CHARSET
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["tool"] == "view" and info["latency"]["env_s"] > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(_WithTask(RepoEnv(max_turns=3), task), skip_render_check=True)
    env.close()


def test_make_task_env_builds_a_repo_env(task):
    env = make_task_env(task, max_turns=3)
    assert isinstance(env, RepoEnv) and env.max_turns == 3
    env.close()


def test_demonstration_replays_with_identical_observations_and_reward_one(tasks):
    for task in tasks:
        turns = ForgeSource.demonstrate(task, np.random.default_rng(0))
        assert [t.action.split()[0] for t in turns] == ["view", "edit", "submit"]
        env = RepoEnv(max_turns=8)
        env.reset(seed=1, options={"task": task})
        for k, turn in enumerate(turns):
            observation, reward, terminated, truncated, info = env.step(turn.action)
            assert observation == turn.observation, (task.id, turn.action)
        assert terminated and not truncated and reward == 1.0, info["grade"]
        assert info["tool"] == "submit" and info["grade"]["reason"] == "resolved"
        env.close()


def test_malformed_and_unknown_commands_answer_errors(task):
    env = RepoEnv(max_turns=20)
    env.reset(seed=0, options={"task": task})
    path = task.reference["bug"]["path"]
    cases = {"foo bar": "error: unknown command 'foo'; commands: view, edit, diff, run_tests, submit\n",
             "": "error: empty command",
             "view nowhere.py": "error: no file 'nowhere.py'",
             f"edit {path}": "error: usage: edit PATH LINE",
             f"edit {path} 3": "error: edit needs the new text",
             f"edit {path} 999\nx = 1": "error: line 999 is outside",
             "diff\nnot a patch": "error: patch did not apply",
             "diff": "error: diff needs a unified diff"}
    for action, expected in cases.items():
        observation, reward, terminated, truncated, info = env.step(action)
        assert observation.startswith(expected), (action, observation)
        assert not terminated and not truncated and reward == 0.0
        assert info["tool"] == (None if action.split(" ")[0] in ("foo", "") else action.split()[0])
    assert env.files == dict(task.reference["files"])
    listing, *_ = env.step("view")
    assert listing.splitlines() == sorted(task.reference["files"])
    env.close()


def test_turn_limit_truncates_and_grades_the_current_state(task):
    env = RepoEnv(max_turns=2)
    env.reset(seed=0, options={"task": task})
    path = task.reference["bug"]["path"]
    _, reward, terminated, truncated, _ = env.step(f"view {path}")
    assert (reward, terminated, truncated) == (0.0, False, False)
    observation, reward, terminated, truncated, info = env.step(f"view {path}")
    assert observation == "" and truncated and not terminated and reward == 0.0
    assert info["grade"]["reason"] == "tests-failed"

    bug = task.reference["bug"]
    env.reset(seed=0, options={"task": task})
    env.step(f"edit {path} {bug['line']}\n{bug['fixed']}")
    _, reward, terminated, truncated, info = env.step("view")
    assert truncated and reward == 1.0, info["grade"]
    with pytest.raises(RuntimeError):
        env.step("submit")
    env.close()


def test_diff_and_run_tests(task):
    env = RepoEnv(max_turns=10)
    env.reset(seed=0, options={"task": task})
    before, *_ = env.step("run_tests")
    assert "FAILED tests/" in before and "failed" in before.splitlines()[-1]
    applied, *_ = env.step("diff\n" + task.reference["patch"])
    assert applied == f"ok: patched {task.reference['bug']['path']}\n"
    after, *_ = env.step("run_tests")
    assert "FAILED" not in after and after.strip().endswith("passed"), after
    _, reward, terminated, _, info = env.step("submit")
    assert terminated and reward == 1.0 and info["grade"]["resolved"]
    env.close()


def test_editing_the_tests_does_not_pass_grading(task):
    env = RepoEnv(max_turns=40)
    env.reset(seed=0, options={"task": task})
    for path, text in task.reference["files"].items():
        if path.startswith("tests/"):
            for number, line in enumerate(text.splitlines(), 1):
                if line.strip().startswith("assert"):
                    env.step(f"edit {path} {number}\n    assert True")
    env.step("diff\n--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+import sys\n")
    assert "conftest.py" in env.files
    _, reward, _, _, info = env.step("submit")
    assert reward == 0.0 and info["grade"]["reason"] == "tests-failed"
    env.close()


class _CountingExecutor:
    """The real sandbox, counting its runs."""

    def __init__(self):
        self.inner = default_executor()
        self.python = self.inner.python
        self.runs = 0

    def run(self, argv, *, workdir, timeout_s, env=None):
        self.runs += 1
        return self.inner.run(argv, workdir=workdir, timeout_s=timeout_s, env=env)


def test_identical_final_states_are_graded_once(tasks):
    task = tasks[2]
    bug = task.reference["bug"]
    executor = _CountingExecutor()
    for action in (f"edit {bug['path']} {bug['line']}\n{bug['fixed']}\n", "view", "view"):
        env = RepoEnv(max_turns=4, executor=executor)
        env.reset(seed=0, options={"task": task})
        env.step(action)
        _, reward, *_ = env.step("submit")
        env.close()
    assert reward == 0.0 and executor.runs == 2


def test_infinite_loop_is_contained(task, tmp_path):
    escape_host = Path("/tmp") / f"sao-forge-escape-{os.getpid()}"
    escape_repo = Path(__file__).resolve().parent / f"escape-{os.getpid()}.txt"
    bug = task.reference["bug"]
    reference_files = dict(task.reference["files"])
    cache_before = sorted(p.name for p in cache_root().iterdir()) if cache_root().exists() else []
    body = "\n".join([
        f"    for target in ({str(escape_host)!r}, {str(escape_repo)!r}):",
        "        try:",
        "            open(target, 'w').write('escaped')",
        "        except OSError:",
        "            pass",
        "    while True:",
        "        pass",
    ])
    # run_tests and submit each wait the whole timeout (CPU limit 3 s: the wall clock ends it); in a fork of the
    # warm pytest a whole run of these tests takes 0.2-0.3 s, so the escapes are tried well before it
    env = RepoEnv(max_turns=6, test_timeout_s=1.5)
    env.reset(seed=0, options={"task": task})
    observation, *_ = env.step(f"edit {bug['path']} {bug['line']}\n{body}")
    assert observation.startswith("ok\n")
    observation, *_ = env.step("run_tests")
    assert observation.startswith("timeout:"), observation
    _, reward, terminated, _, info = env.step("submit")
    assert terminated and reward == 0.0
    assert info["grade"]["reason"] == "timeout" and not info["grade"]["resolved"]
    scratch = env._scratch
    env.close()
    assert scratch is not None and not scratch.exists()
    assert not escape_host.exists() and not escape_repo.exists()
    assert dict(task.reference["files"]) == reference_files
    cache_after = sorted(p.name for p in cache_root().iterdir()) if cache_root().exists() else []
    assert cache_after == cache_before


SECRET = "sao-env-test-secret-5f3c"
ATTACKS = {
    "fork_bomb": ["    import os", "    while True:", "        os.fork()"],
    "memory_bomb": ["    hog = []", "    while True:", "        hog.append(' ' * 10**8)"],
    "huge_output": ["    import sys", "    sys.stdout.write('x' * 10**8)", "    return None"],
    "host_secret": ["    import os", "    raise RuntimeError('leak:' + str(os.environ.get('SAO_ENV_TEST_API_KEY')))"],
    "network": ["    import socket", "    socket.create_connection(('1.1.1.1', 80), timeout=2)", "    return 'online'"],
}
BOMBS = {"fork_bomb", "memory_bomb"}
"""Attacks that run until a limit or the timeout stops them, whichever comes first (both grade 0): they get a
short timeout, since run_tests and submit each may wait all of it (the fork bomb always does). The others
must finish within theirs, so that their observation can be checked."""


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_adversarial_model_code_is_a_failed_episode_with_a_reason(task, attack, monkeypatch):
    """Model-written code that attacks the host is contained by the sandbox and grades 0 with a reason."""
    monkeypatch.setenv("SAO_ENV_TEST_API_KEY", SECRET)
    bug = task.reference["bug"]
    env = RepoEnv(max_turns=6, test_timeout_s=1.5 if attack in BOMBS else 5)
    env.reset(seed=0, options={"task": task})
    observation, *_ = env.step(f"edit {bug['path']} {bug['line']}\n" + "\n".join(ATTACKS[attack]))
    assert observation.startswith("ok\n")
    observation, *_ = env.step("run_tests")
    assert SECRET not in observation and "online" not in observation
    _, reward, terminated, _, info = env.step("submit")
    env.close()
    assert terminated and reward == 0.0
    assert not info["grade"]["resolved"] and info["grade"]["reason"] in ("tests-failed", "timeout"), info["grade"]
    if attack == "host_secret":
        assert "leak:None" in observation  # the variable does not exist inside the sandbox
