"""The Gymnasium seam: every registered ``sao/`` env is check_env clean and deterministic for a
seed; ``reset(options={"task": ...})`` replays a task; the style grader on hand-written answers."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import sao_env  # noqa: F401  (registers the sao/ ids)
from conftest import needs_shared_data
from sao_env.graders import grade
from sao_env.graders.style import grade_style_match
from sao_env.tasks.arithmetic import STYLES, render
from sao_env.types import Task

SAO_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("sao/"))
NEEDS_DOCKER = {"sao/SWEBenchVerified-v0"}
NEEDS_DATA = {"sao/BenchmarkStream-v0", "sao/SWEBenchVerified-v0"}  # served from ../shared/data in tests
LOCAL_IDS = [pytest.param(env_id, marks=needs_shared_data) if env_id in NEEDS_DATA else env_id
             for env_id in SAO_IDS if env_id not in NEEDS_DOCKER]

# Fixed actions, independent of the observations: every style form, tool calls, edits, garbage, "".
ACTIONS = ["\\boxed{7}", "<py>print(1+1)</py>", "The answer is 3.", "view README.md", "12", "#### 5",
           "<answer>9</answer>", "no idea", "submit", ""]


def test_registry_is_not_empty():
    assert {"sao/StyleDrift-v0", "sao/TopicDrift-v0", "sao/ToolDrift-v0", "sao/CodebaseDrift-v0"} <= set(SAO_IDS)


@pytest.mark.parametrize("env_id", LOCAL_IDS)
def test_check_env(env_id):
    env = gym.make(env_id)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def _rollout(env_id: str, seed: int, episodes: int = 8):
    """``episodes`` episodes after one seeded reset, each played to its end with fixed actions;
    returns (observations, rewards, infos)."""
    env = gym.make(env_id)
    observations, rewards, infos = [], [], []
    obs, info = env.reset(seed=seed)
    k = 0
    for _ in range(episodes):
        observations.append(obs)
        infos.append(info)
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(ACTIONS[k % len(ACTIONS)])
            k += 1
            done = terminated or truncated
            observations.append(obs)
            rewards.append(reward)
            infos.append({key: v for key, v in info.items()})
        obs, info = env.reset()
    env.close()
    return observations, rewards, infos


@pytest.mark.parametrize("env_id", LOCAL_IDS)
def test_same_seed_rollouts_are_identical(env_id):
    first = _rollout(env_id, seed=3)
    second = _rollout(env_id, seed=3)
    assert first[0] == second[0]
    assert first[1] == second[1]
    assert first[2] == second[2]  # tasks (frozen dataclasses), phases, grades, latencies, clock
    # The seed matters: another seed draws other latencies (and, where the stream varies, other tasks).
    other = _rollout(env_id, seed=4)
    assert other[2] != first[2]
    # The env's own clock advances by each episode's latency (the drift happens in a plain loop).
    times = [info["time_s"] for info in first[2] if "time_s" in info]
    assert times[0] == 0.0 and all(b > a for a, b in zip(times, times[1:]))


@needs_shared_data
@pytest.mark.parametrize("env_id", sorted(NEEDS_DOCKER))
def test_docker_envs_say_so_in_one_line_without_an_engine(env_id, monkeypatch):
    from sao_env.errors import UserError

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(UserError, match="Docker") as err:
        env = gym.make(env_id)
        env.reset(seed=0)
    assert "\n" not in str(err.value)


def test_reset_with_task_replays_it():
    env = gym.make("sao/StyleDrift-v0")
    _, info = env.reset(seed=0)
    task = info["task"]
    env.step("whatever")
    for _ in range(3):  # move the stream on: the replay must not draw a new task
        env.reset()
        env.step("x")
    obs, info = env.reset(options={"task": task})
    assert info["task"] is task
    assert obs == task.prompt
    assert info["phase"] == task.metadata["phase"]
    # Graded against that task's reference: the right answer in its rewarded style earns 1.
    answer, style = task.reference["answer"], task.reference["style"]
    _, reward, *_ , step_info = env.step(render(style, answer))
    assert reward == 1.0 and step_info["grade"]["correct"] and step_info["grade"]["style_match"]
    env.reset(options={"task": task})
    _, reward, *_ = env.step(render(style, answer + 1))
    assert reward == 0.0
    env.close()


def test_step_before_reset_raises():
    env = gym.make("sao/StyleDrift-v0")
    with pytest.raises(RuntimeError):
        env.unwrapped.step("1")


# -- the style grader -----------------------------------------------------------------------------


def _task(answer: int, style: str) -> Task:
    return Task(id="t-0", prompt=f"?=? styles:{','.join(STYLES)}\n",
                reference={"answer": answer, "style": style, "candidates": list(STYLES)}, grader="style_match")


@pytest.mark.parametrize("rewarded", sorted(STYLES))
@pytest.mark.parametrize("answer", [12, -3, 0])
def test_style_grader_each_form(rewarded, answer):
    task = _task(answer, rewarded)
    for style in STYLES:
        result = grade(task, render(style, answer))
        assert result.details == {"style": style, "value": answer, "correct": True, "style_match": style == rewarded}
        assert result.reward == (1.0 if style == rewarded else 0.0)


def test_style_grader_hand_written_forms():
    # The literal forms, written out by hand (not through render()).
    cases = {
        "boxed": "\\boxed{12}",
        "sentence": "The answer is 12.",
        "terse": "12",
        "hash": "#### 12",
        "tag": "<answer>12</answer>",
    }
    assert set(cases) == set(STYLES)
    for style, text in cases.items():
        result = grade_style_match(_task(12, style), text)
        assert result.reward == 1.0, (style, text)


@pytest.mark.parametrize("style", sorted(STYLES))
def test_style_grader_wrong_number(style):
    result = grade(_task(12, style), render(style, 13))
    assert result.reward == 0.0
    assert result.details == {"style": style, "value": 13, "correct": False, "style_match": True}


@pytest.mark.parametrize(
    "response",
    [
        "",
        "   ",
        "\\boxed{12",  # unclosed
        "\\boxed{}",
        "boxed{12}",
        "The answer is 12",  # no period
        "the answer is 12.",  # lower case
        "The answer is twelve.",
        "####12",  # no space
        "<answer>12<answer>",
        "<answer>12</answer> extra",
        "12 12",
        "12.0",
        "+12",
        "\\boxed{12}\\boxed{12}",
        "The answer is 12.\n#### 12",
        "\\boxed{ 12 }",  # inner whitespace is not the form
        "The answer is  12.",
    ],
)
def test_style_grader_malformed(response):
    result = grade(_task(12, "boxed"), response)
    assert result.reward == 0.0
    assert result.details["style"] is None and result.details["value"] is None
    assert not result.details["correct"] and not result.details["style_match"]


@pytest.mark.parametrize("pad", [" ", "\n", "  \n\t", "\n\n"])
def test_style_grader_surrounding_whitespace_is_ignored(pad):
    task = _task(12, "sentence")
    assert grade(task, pad + "The answer is 12." + pad).reward == 1.0
    assert grade(task, "The answer is 12." + pad).reward == 1.0
    assert grade(task, pad + "#### 12").reward == 0.0


def test_style_grader_reward_is_in_unit_interval_on_random_text():
    rng = np.random.default_rng(0)
    chars = np.array(list("123456789-{}\\boxed#<>/answerT. "))  # no 0: see the leading-zero test
    task = _task(5, "terse")
    for _ in range(200):
        text = "".join(rng.choice(chars, size=int(rng.integers(0, 12))))
        reward = grade(task, text).reward
        assert reward in (0.0, 1.0)
        assert reward == float(text.strip() == "5")


@pytest.mark.parametrize(
    ("response", "style", "answer"),
    [("\\boxed{012}", "boxed", 12), ("012", "terse", 12), ("<answer>-012</answer>", "tag", -12),
     ("The answer is 0012.", "sentence", 12), ("#### -0", "hash", 0)],
)
def test_style_grader_rejects_non_canonical_numbers(response, style, answer):
    # "exactly the rewarded style's form around the right answer": render(style, answer) never has
    # leading zeros or "-0", so these are not the form (the grader's docstring, STYLES' contract).
    assert render(style, answer) != response
    assert grade(_task(answer, style), response).reward == 0.0
