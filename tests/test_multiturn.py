"""The multi-turn seam: how a conversation becomes tokens, for the warm start and for rollouts.

The warm start's layout (``demonstration_tokens``) is checked against a case written by hand; the
rollout loop (``play``) is checked on the real Python-tool env with a warm-started policy: tokens
alternate action / observation exactly as the env answered, observations carry no log-prob and no
version, and the turn and context limits end episodes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import scenario_config
from sao_env.envs.base import make_task_env
from sao_env.envs.base import render_prompt
from sao_env.policy.tokenizer import build_char_tokenizer
from sao_env.policy.warmstart import demonstration_tokens, load_warm_started
from sao_env.runtime.rollout import play
from sao_env.scenario import Scenario
from sao_env.types import Turn


@pytest.fixture(scope="module")
def tokenizer():
    return build_char_tokenizer()


def test_demonstration_tokens_by_hand(tokenizer):
    ids = {ch: tokenizer.convert_tokens_to_ids(ch) for ch in "abxyOK\n"}
    eos = tokenizer.eos_token_id
    row, trained = demonstration_tokens(tokenizer, "ab", [Turn("x", "OK\n"), Turn("y", "never shown")])
    assert row == [ids["a"], ids["b"], ids["x"], eos, ids["O"], ids["K"], ids["\n"], ids["y"], eos]
    assert trained == [False, False, True, True, False, False, False, True, True]


def test_a_single_turn_demonstration_is_one_action(tokenizer):
    as_text = demonstration_tokens(tokenizer, "ab", "xy")
    as_turn = demonstration_tokens(tokenizer, "ab", [Turn("xy")])
    assert as_text == as_turn
    assert as_text[1] == [False, False, True, True, True]


# -- the rollout loop on the real Python-tool env -------------------------------------------------

def _segments(mask):
    """[(is_action, start, end)] runs of equal mask values."""
    runs, start = [], 0
    for t in range(1, len(mask) + 1):
        if t == len(mask) or mask[t] != mask[start]:
            runs.append((mask[start], start, t))
            start = t
    return runs


@pytest.fixture(scope="module")
def played():
    config = scenario_config("tool-drift", "sao")
    scenario = Scenario(config.env)
    policy, tok, _ = load_warm_started(config.agent.model, scenario, show_progress=False)
    tasks = [scenario.next_task(t * 3600, np.random.default_rng(i), index=i) for i, t in enumerate([0, 0.01, 0.02] * 2)]
    rollouts = play(policy, tok, tasks, scenario.spec, generator=torch.Generator().manual_seed(0),
                    env_seeds=list(range(len(tasks))))
    return scenario, policy, tok, rollouts


def test_play_alternates_actions_and_the_envs_own_observations(played):
    scenario, _, tok, rollouts = played
    assert any(r.turns >= 2 for r in rollouts), "no episode called the tool: the check below would be vacuous"
    for r in rollouts:
        prompt_ids = tok(render_prompt(r.task), add_special_tokens=False)["input_ids"]
        assert r.tokens_T[: len(prompt_ids)] == prompt_ids
        runs = _segments(r.action_mask_T)
        assert runs[0][0] is False and runs[0][2] == len(prompt_ids)
        actions = [tok.decode(r.tokens_T[a:b], skip_special_tokens=True) for is_action, a, b in runs if is_action]
        observations = [tok.decode(r.tokens_T[a:b]) for is_action, a, b in runs[1:] if not is_action]
        assert len(actions) == r.turns and len(observations) in (r.turns - 1, r.turns)
        # Replaying the actions in a fresh env gives exactly the observations in the stream.
        env = make_task_env(r.task, latency=scenario.spec.latency, max_turns=scenario.spec.max_turns)
        env.reset(seed=0, options={"task": r.task})
        replayed = [env.step(action)[0] for action in actions]
        env.close()
        assert [o for o in replayed if o] == observations
        assert all(lp == 0.0 for lp, m in zip(r.logp_T, r.action_mask_T) if not m)
        assert all(lp <= 0.0 for lp, m in zip(r.logp_T, r.action_mask_T) if m)
        assert r.transcript == "".join(tok.decode(r.tokens_T[a:b], skip_special_tokens=True) for _, a, b in runs[1:])
        assert r.prompt_tokens + r.action_tokens == len(r.tokens_T)


def test_turn_limit_and_context_limit_end_episodes(played):
    scenario, policy, tok, rollouts = played
    tasks = [r.task for r in rollouts]
    one_turn = play(policy, tok, tasks, scenario.spec.model_copy(update={"max_turns": 1}),
                    generator=torch.Generator().manual_seed(0), env_seeds=list(range(len(tasks))))
    assert all(r.turns == 1 for r in one_turn)
    assert all(r.end == "turn-limit" for r in one_turn if "<py>" in r.transcript)
    tight = scenario.spec.model_copy(update={"max_context_tokens": 60})
    short = play(policy, tok, tasks, tight, generator=torch.Generator().manual_seed(0), env_seeds=list(range(len(tasks))))
    assert all(len(r.tokens_T) <= 60 for r in short)
    assert any(r.end == "context-limit" and r.reward == 0.0 for r in short)


def test_a_prompt_longer_than_the_context_is_a_user_error(played):
    from sao_env.errors import UserError

    scenario, policy, tok, rollouts = played
    with pytest.raises(UserError, match="raise env.max_context_tokens"):
        play(policy, tok, [rollouts[0].task], scenario.spec.model_copy(update={"max_context_tokens": 5}),
             generator=torch.Generator().manual_seed(0), env_seeds=[0])


def test_warm_start_key_sees_default_parameters_and_weights():
    from sao_env.envs.text_env import load_scenario
    from sao_env.policy.model import ModelSpec
    from sao_env.policy.warmstart import warm_start_key

    base = load_scenario("tool-drift")
    key = warm_start_key(ModelSpec(), base, base.spec.warm_start)
    same = load_scenario("tool-drift")
    assert warm_start_key(ModelSpec(), same, same.spec.warm_start) == key
    warm = base.spec.warm_start.model_dump()  # tool-drift's warm start has its own sources
    warm["sources"][0]["params"]["operations"] = ["*"]  # a default the YAML does not spell out
    changed = load_scenario("tool-drift", {"warm_start": warm})
    assert warm_start_key(ModelSpec(), changed, changed.spec.warm_start) != key
    warm["sources"][0]["params"]["operations"] = ["*", "+"]  # the default, spelled out: same key
    spelled = load_scenario("tool-drift", {"warm_start": warm})
    assert warm_start_key(ModelSpec(), spelled, spelled.spec.warm_start) == key


def test_warm_start_phases_restrict_the_demonstrations():
    from sao_env.envs.text_env import load_scenario
    from sao_env.errors import UserError
    from sao_env.experiment import resolve_config

    scenario = load_scenario("codebase-drift")  # its warm start has a source of its own: head 0
    rng = np.random.default_rng(0)
    assert {scenario.demonstration(rng, index=i)[0].metadata["head"] for i in range(20)} == {0}
    second = load_scenario("codebase-drift", {"warm_start": {"sources": None, "phases": [1]}})
    assert {second.demonstration(rng, index=i)[0].metadata["head"] for i in range(20)} == {1}
    everywhere = load_scenario("codebase-drift", {"warm_start": {"sources": None, "phases": None}})
    assert {everywhere.demonstration(rng, index=i)[0].metadata["head"] for i in range(40)} == {0, 1}
    with pytest.raises(UserError, match="not phase indices"):
        resolve_config("codebase-drift", "sao", 0, ["env.warm_start.phases=[3]"])
