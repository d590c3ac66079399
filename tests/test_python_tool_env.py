"""Tool arithmetic and PythonToolEnv: demonstrations replay exactly, drifted calls and hostile code are observations."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from sao_env.envs.base import make_task_env
from sao_env.envs.python_tool import PythonToolEnv, parse_tool_call
from sao_env.tasks import build_source
from sao_env.tasks.tool_math import TOOL_APIS, TOOL_HINT, tool_executor
from sao_env.types import Task, Turn

isolated = pytest.mark.skipif(tool_executor().isolation != "bubblewrap",
                              reason="the network check needs the bubblewrap sandbox")


def tool_tasks(api: str = "v1", count: int = 3, seed: int = 0, **params) -> list[Task]:
    source = build_source("tool_arithmetic", {"api": api, **params})
    rng = np.random.default_rng(seed)
    return [source.sample(rng, phase="p0", created_at=3.0, index=i) for i in range(count)]


def new_env(task: Task, max_turns: int = 4, **kwargs) -> PythonToolEnv:
    env = PythonToolEnv(max_turns=max_turns, tool_timeout_s=1.0, **kwargs)
    prompt, info = env.reset(seed=0, options={"task": task})
    assert prompt == task.prompt and info["task"] is task
    return env


# ----------------------------------------------------------------------------- the source


def test_tasks_carry_the_api_and_the_prompt_only_the_fixed_hint():
    for api in TOOL_APIS:
        for task in tool_tasks(api, count=20, operations=["+", "-", "*"]):
            a, b = task.reference["operands"]
            assert 100 <= a <= 999 and 100 <= b <= 999
            assert task.reference["api"] == api == task.metadata["api"]
            assert task.env == "python_tool" and task.grader == "math"
            assert task.prompt == f"{a}{task.reference['op']}{b}=? ({TOOL_HINT})\n"
            assert not any(name in task.prompt for version in TOOL_APIS.values() for name in version.functions.values())
            assert int(task.reference["answer"]) == eval(f"{a}{task.reference['op']}{b}")
    assert tool_tasks("v2", seed=5) == tool_tasks("v2", seed=5)
    assert tool_tasks("v2", seed=5) != tool_tasks("v2", seed=6)
    assert all(len(str(t.reference["operands"][0])) == 5 for t in tool_tasks(digits=5, count=10))
    with pytest.raises(ValueError):
        build_source("tool_arithmetic", {"api": "v4"})
    with pytest.raises(ValueError, match="operations"):
        build_source("tool_arithmetic", {"operations": ["/"]})


def test_demonstrations_are_short_and_shaped():
    task = tool_tasks("v1", count=1)[0]
    turns = build_source("tool_arithmetic", {"retry_share": 0.0}).demonstrate(task, np.random.default_rng(0))
    assert all(isinstance(t, Turn) for t in turns) and len(turns) == 2
    assert turns[0].action.startswith("<py>print(")
    assert turns[0].observation == f"<out>{task.reference['answer']}</out>\n"
    assert turns[1] == Turn(f"\\boxed{{{task.reference['answer']}}}")
    for api in TOOL_APIS:
        for t in tool_tasks(api, count=10, operations=["+", "-", "*"]):
            source = build_source("tool_arithmetic", {"api": api, "retry_share": 1.0})
            assert all(len(turn.action) <= 40 for turn in source.demonstrate(t, np.random.default_rng(0)))


# ----------------------------------------------------------------------------- the environment


@pytest.mark.parametrize("retry_share", [0.0, 1.0])
@pytest.mark.parametrize("api", sorted(TOOL_APIS))
def test_demonstration_replay_reproduces_the_observations_and_earns_reward(api, retry_share):
    source = build_source("tool_arithmetic", {"api": api, "retry_share": retry_share})
    rng = np.random.default_rng(0)
    for task in tool_tasks(api, count=4, seed=1, operations=["+", "-", "*"]):
        env = make_task_env(task, max_turns=4)
        assert isinstance(env, PythonToolEnv)
        env.reset(seed=0, options={"task": task})
        turns = source.demonstrate(task, rng)
        assert len(turns) == (3 if retry_share else 2)
        if retry_share:
            assert "Error: " in turns[0].observation
        for turn in turns[:-1]:
            observation, reward, terminated, truncated, info = env.step(turn.action)
            assert observation == turn.observation
            assert (reward, terminated, truncated, info["tool"]) == (0.0, False, False, "python")
        observation, reward, terminated, truncated, info = env.step(turns[-1].action)
        assert (observation, reward, terminated, truncated, info["tool"]) == ("", 1.0, True, False, "answer")
        assert info["grade"]["verdict"] == "correct" and info["grade"]["tool_calls"] == len(turns) - 1
        assert info["grade"]["api"] == api


def test_an_old_interface_after_drift_is_an_error_observation():
    task = tool_tasks("v2", count=1)[0]
    env = new_env(task)
    a, b = task.reference["operands"]
    observation, reward, terminated, truncated, _ = env.step(f"<py>print(mul({a}, {b}))</py>")
    assert observation == "<out>NameError: name 'mul' is not defined</out>\n"
    assert (reward, terminated, truncated) == (0.0, False, False)
    observation, *_ = env.step(f"<py>print(times({a}, {b}))</py>")
    assert observation == f"<out>{a * b}</out>\n"
    _, reward, terminated, _, _ = env.step(f"\\boxed{{{task.reference['answer']}}}")
    assert reward == 1.0 and terminated

    v3 = new_env(tool_tasks("v3", count=1)[0])
    observation, _, terminated, _, _ = v3.step("<py>print(mul(2, 3))</py>")
    assert "TypeError" in observation and observation.startswith("<out>") and not terminated
    assert v3.step("<py>print(mul([2, 3]))</py>")[0] == "<out>result=6</out>\n"


@pytest.mark.parametrize("code, expected", [
    ("while True: pass", "timeout"),
    ("x = bytearray(10 ** 10)", "MemoryError"),
    ("print(1 +", "SyntaxError"),
    ("import os; os.kill(os.getpid(), 9)", "killed by signal 9"),
])
def test_hostile_or_broken_code_is_an_observation(code, expected):
    env = new_env(tool_tasks("v1", count=1)[0])
    observation, reward, terminated, truncated, info = env.step(f"<py>{code}</py>")
    assert expected in observation and observation.startswith("<out>") and observation.endswith("</out>\n")
    assert (reward, terminated, truncated, info["tool"]) == (0.0, False, False, "python")
    assert env.step("<py>print(mul(6, 7))</py>")[0] == "<out>42</out>\n"  # the tool still works afterwards


@isolated
def test_the_tool_has_no_network():
    env = new_env(tool_tasks("v1", count=1)[0])
    observation, _, terminated, _, _ = env.step('<py>import socket; socket.create_connection(("1.1.1.1", 80))</py>')
    assert "Network is unreachable" in observation and not terminated


def test_long_output_is_cut():
    env = new_env(tool_tasks("v1", count=1)[0], max_output_chars=50)
    observation, *_ = env.step("<py>print('a' * 5000)</py>")
    assert observation.startswith("<out>" + "a" * 50 + "...") and observation.endswith("</out>\n")
    assert len(observation) < 100


def test_turn_limit_truncates_and_grades_zero():
    task = tool_tasks("v1", count=1)[0]
    env = new_env(task, max_turns=2)
    answer = task.reference["answer"]
    assert env.step(f"<py>print({answer})</py>")[0] == f"<out>{answer}</out>\n"
    observation, reward, terminated, truncated, info = env.step(f"<py>print({answer})</py>")
    assert (observation, reward, terminated, truncated) == ("", 0.0, False, True)
    assert info["grade"]["reason"] == "no-answer" and info["grade"]["tool_calls"] == 2
    with pytest.raises(RuntimeError):
        env.step("\\boxed{1}")


def test_a_wrong_final_answer_grades_zero_and_needs_no_tool():
    task = tool_tasks("v1", count=1)[0]
    env = new_env(task)
    _, reward, terminated, truncated, info = env.step(f"\\boxed{{{int(task.reference['answer']) + 1}}}")
    assert (reward, terminated, truncated, info["tool"]) == (0.0, True, False, "answer")
    assert info["grade"]["tool_calls"] == 0


def test_gymnasium_api_types():
    task = tool_tasks("v1", count=1)[0]
    env = PythonToolEnv(max_turns=3)
    assert isinstance(env.observation_space, spaces.Text) and isinstance(env.action_space, spaces.Text)
    with pytest.raises(ValueError, match="task"):
        env.reset(seed=0)
    prompt, info = env.reset(seed=0, options={"task": task})
    assert isinstance(prompt, str) and isinstance(info, dict) and env.observation_space.contains(prompt)
    step = env.step("<py>print(add(1, 2))</py>")
    assert len(step) == 5
    observation, reward, terminated, truncated, info = step
    assert isinstance(observation, str) and env.observation_space.contains(observation)
    assert isinstance(reward, float) and isinstance(terminated, bool) and isinstance(truncated, bool)
    assert isinstance(info, dict) and info["latency"]["env_s"] > 0 and info["turn"] == 1
    observation, reward, terminated, truncated, info = env.step("\\boxed{3}")
    assert observation == "" and isinstance(reward, float) and terminated is True and truncated is False
    assert isinstance(info["grade"], dict)
    env.reset(options={"task": task})  # a finished env can be reset for the next episode
    assert env.step("<py>print(add(2, 2))</py>")[0] == "<out>4</out>\n"


def test_parse_tool_call():
    assert parse_tool_call("<py>print(1)</py>") == "print(1)"
    assert parse_tool_call("think <py> x = 1\nprint(x) </py> tail") == "x = 1\nprint(x)"
    assert parse_tool_call("<py>print(2)") == "print(2)"  # unclosed: the rest of the action
    assert parse_tool_call("\\boxed{3}") is None
