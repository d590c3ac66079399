"""The critic map's instruments: prompt pools and difficulty classes on the sources, the variance shares
they create, the prompt-dependent baselines (per_prompt, oracle_class), SAO at lambda 1, and the critic's
explained variance with its recovery after a drift. Hand cases throughout."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sao_env.agents import ALGORITHMS
from sao_env.agents.base import Batch
from sao_env.agents.prompt_baselines import OracleClassAgent, PerPromptAgent
from sao_env.agents.sao import SAOAgent, SAOConfig
from sao_env.algos import explained_variance, keyed_baseline_advantages, value_diagnostics
from sao_env.evaluation.critic_fit import critic_summary, ev_recovery
from sao_env.evaluation.variance import class_rewards, episode_variance_shares, variance_share
from sao_env.experiment.config import resolve_config
from sao_env.scenario import PhaseSpec, PhaseWindow, Scenario, ScenarioSpec
from sao_env.specs import find_spec, load_yaml
from sao_env.tasks import build_source
from sao_env.tasks.variants import prompt_id, prompt_key
from sao_env.types import Task


# ----------------------------------------------------------------------------- sources


def draws(source, n, seed=0, phase="p"):
    rng = np.random.default_rng(seed)
    return [source.sample(rng, phase=phase, created_at=0.0, index=i) for i in range(n)]


@pytest.mark.parametrize("name,params", [
    ("styled_arithmetic", {"digits": 1}),
    ("tool_arithmetic", {"digits": 2, "api": "v2", "retry_share": 0.0}),
    ("olympiad", {"categories": ["geometry"], "difficulty": 1}),
])
def test_new_keys_at_their_defaults_draw_and_dump_as_before(name, params):
    plain = build_source(name, params)
    explicit = {"pool": None, "pool_seed": 0, "difficulty_class": None}
    if name == "tool_arithmetic":
        explicit |= {"calls": 1, "chain_operations": ["+"]}
    spelled = build_source(name, params | explicit)
    assert type(plain).__name__ == type(spelled).__name__ != "VariantSource"
    assert draws(plain, 20) == draws(spelled, 20)
    assert all("prompt_id" not in t.metadata and "difficulty_class" not in t.metadata for t in draws(plain, 20))
    dumped = spelled.params.model_dump(mode="json")
    assert not set(explicit) & set(dumped)
    assert dumped == plain.params.model_dump(mode="json")


def test_tool_arithmetic_with_one_call_draws_the_original_task():
    task = draws(build_source("tool_arithmetic", {"digits": 2, "operations": ["*", "+"]}), 1, seed=7)[0]
    rng = np.random.default_rng(7)
    a, b = int(rng.integers(10, 100)), int(rng.integers(10, 100))
    op = ["*", "+"][int(rng.integers(2))]
    assert task.prompt == f"{a}{op}{b}=? (python tool: <py>code</py>)\n"
    assert task.reference == {"answer": str(eval(f"{a}{op}{b}")), "api": "v1", "operands": [a, b], "op": op}


def test_a_chained_tool_task_needs_one_call_per_operation_and_replays():
    from sao_env.envs.base import make_task_env

    source = build_source("tool_arithmetic", {"digits": 2, "calls": 3, "api": "v2", "retry_share": 0.0})
    for task in draws(source, 3, seed=1):
        (op, (a, b)), chain = (task.reference["op"], task.reference["operands"]), task.reference["chain"]
        assert len(chain) == 2 and task.prompt.startswith(f"(({a}{op}{b}){chain[0][0]}{chain[0][1]}){chain[1][0]}")
        turns = source.demonstrate(task, np.random.default_rng(0))
        assert len(turns) == 4 and all("times(" in t.action or "plus(" in t.action for t in turns[:3])
        env = make_task_env(task, max_turns=4)
        env.reset(seed=0, options={"task": task})
        for turn in turns[:-1]:
            observation, reward, terminated, *_ = env.step(turn.action)
            assert observation == turn.observation and not terminated
        _, reward, terminated, *_ = env.step(turns[-1].action)
        assert reward == 1.0 and terminated


def test_a_pool_serves_n_fixed_distinct_prompts_whatever_the_run_stream():
    source = build_source("styled_arithmetic", {"digits": 1, "pool": 12, "difficulty_class": "easy"})
    a, b = draws(source, 400, seed=0), draws(source, 400, seed=1)
    assert len({t.prompt for t in a}) == 12 and {t.prompt for t in a} == {t.prompt for t in b}
    assert [t.prompt for t in a] != [t.prompt for t in b]
    assert len({t.id for t in a}) == 400  # task ids stay unique per draw
    assert all(t.metadata["difficulty_class"] == "easy" and t.metadata["prompt_id"] == prompt_id(t) for t in a)
    assert len({t.metadata["prompt_id"] for t in a}) == 12
    other = build_source("styled_arithmetic", {"digits": 1, "pool": 12, "pool_seed": 1})
    assert {t.prompt for t in draws(other, 400)} != {t.prompt for t in a}
    with pytest.raises(ValueError, match="distinct prompts"):
        build_source("styled_arithmetic", {"digits": 1, "operators": ["+"], "pool": 101})  # 100 exist
    with pytest.raises(ValueError):
        build_source("styled_arithmetic", {"pool": 0})


def test_a_variant_source_copies_and_pickles():
    import copy
    import pickle

    source = build_source("styled_arithmetic", {"digits": 1, "pool": 5, "difficulty_class": "easy"})
    for clone in (copy.deepcopy(source), pickle.loads(pickle.dumps(source))):
        assert draws(clone, 30) == draws(source, 30) and clone.grader == "style_match"


def test_prompt_key_is_the_stamped_id_else_the_text():
    task = Task(id="x-1", prompt="1+2=?", reference={}, grader="math")
    assert prompt_key(task) == prompt_id(task) == prompt_key(Task(id="x-2", prompt="1+2=?", reference={}, grader="m"))
    assert prompt_key(Task(id="x", prompt="q", reference={}, grader="m", metadata={"prompt_id": "p7"})) == "p7"


def test_a_phase_may_list_a_weight_zero_source_but_not_only_those():
    source = {"name": "styled_arithmetic", "params": {"digits": 1}}
    PhaseSpec(name="a", duration_h=0.1, sources=[{**source, "weight": 0.0}, source])
    with pytest.raises(ValueError, match="weight 0"):
        PhaseSpec(name="a", duration_h=0.1, sources=[{**source, "weight": 0.0}])


# ----------------------------------------------------------------------------- variance shares


def test_variance_share_is_eta_squared_by_hand():
    # groups a: [1, 1, 0] (mean 2/3), b: [0, 0] (mean 0); overall mean 2/5
    rewards, groups = [1, 1, 0, 0, 0], ["a", "a", "a", "b", "b"]
    ss_total = 2 * (3 / 5) ** 2 + 3 * (2 / 5) ** 2  # 1.2
    ss_between = 3 * (2 / 3 - 2 / 5) ** 2 + 2 * (2 / 5) ** 2  # 0.5333
    ss_within = ss_total - ss_between  # 2/3
    share = variance_share(rewards, groups)
    assert share["eta2"] == pytest.approx(ss_between / ss_total)
    assert share["epsilon2"] == pytest.approx((ss_between - 1 * ss_within / 3) / ss_total)
    assert (share["n"], share["groups"]) == (5, 2) and share["var"] == pytest.approx(ss_total / 5)
    assert variance_share([1, 0, 1], ["x", "y", "z"])["epsilon2"] is None  # one reward per group
    assert variance_share([1, 1], ["x", "y"])["eta2"] is None  # nothing to explain
    records = [{"task": f"t{i}", "reward": r, "prompt_id": g, "difficulty_class": g, "phase": "p"}
               for i, (r, g) in enumerate(zip(rewards, groups))]
    shares = episode_variance_shares(records)
    assert shares["all"]["class"]["eta2"] == shares["p"]["prompt"]["eta2"] == pytest.approx(ss_between / ss_total)
    no_ids = episode_variance_shares([{k: v for k, v in r.items() if k not in ("prompt_id", "difficulty_class")}
                                      for r in records])["all"]
    assert no_ids["prompt"]["eta2"] == 1.0 and no_ids["class"] is None  # each task id its own group


def test_class_rewards_by_hand_over_the_run_and_its_last_quarter():
    rows = [("easy", 1), ("easy", 0), ("hard", 0), ("learnable", 1), ("easy", 1), ("hard", 1), ("learnable", 0),
            ("easy", 1)]
    records = [{"task": f"t{i}", "reward": r, "difficulty_class": c} for i, (c, r) in enumerate(rows)]
    records.insert(3, {"task": "unclassed", "reward": 1})  # carries no class: left out of every scope
    records.insert(5, {"task": "nan", "reward": float("nan"), "difficulty_class": "easy"})
    got = class_rewards(records)
    assert got["all"] == {"easy": pytest.approx(3 / 4), "hard": pytest.approx(1 / 2), "learnable": pytest.approx(1 / 2)}
    # 9 classed records (the NaN one counts as a record); the last ceil(9/4) = 3 are hard=1, learnable=0, easy=1
    assert got["late"] == {"hard": 1.0, "learnable": 0.0, "easy": 1.0}
    assert class_rewards(records, late_fraction=1.0)["late"] == got["all"]
    assert class_rewards([{"task": "t", "reward": 1}]) == {"all": {}, "late": {}}
    with pytest.raises(ValueError, match="late_fraction"):
        class_rewards(records, late_fraction=0)


def test_a_runs_summary_commits_each_class_reward(tmp_path):
    """critic_summary (summary.json, hence a grid's per-seed.csv) carries each class's mean reward, overall and
    late, beside the class's share of the variance, from the run's own episodes.jsonl."""
    import json
    rng = np.random.default_rng(3)
    rates = {"easy": 0.9, "learnable": 0.3, "hard": 0.05}
    episodes = []
    for i in range(400):
        c = ["easy", "learnable", "hard"][int(rng.integers(3))]
        rate = rates[c] + (0.4 if c == "learnable" and i >= 300 else 0.0)
        episodes.append({"task": f"t{i}", "prompt_id": f"{c}-{i % 7}", "difficulty_class": c,
                         "reward": float(rng.random() < rate)})
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"sim_time_s": 1.0}) + "\n")
    out = critic_summary(tmp_path, SimpleNamespace(windows=[PhaseWindow(0, "mix", 0.0, 3600.0)]))
    for c in rates:
        mine = [e["reward"] for e in episodes if e["difficulty_class"] == c]
        late = [e["reward"] for e in episodes[300:] if e["difficulty_class"] == c]
        assert out[f"class_reward/{c}"] == pytest.approx(sum(mine) / len(mine))
        assert out[f"class_reward_late/{c}"] == pytest.approx(sum(late) / len(late))
    assert out["class_reward_late/learnable"] > out["class_reward/learnable"] + 0.15  # the late rise shows
    assert 0 < out["variance_share/class_eta2"] < 1


def spread_eta2(weights, rates):
    w, p = np.array(weights) / sum(weights), np.array(rates)
    mean = (w * p).sum()
    between, within = (w * (p - mean) ** 2).sum(), (w * p * (1 - p)).sum()
    return between / (between + within)


RATES = {"easy": 0.87, "learnable": 0.87 / 4, "hard": 0.0}
"""The warm start's per-class success rates that envs/critic-spread.yaml states its shares at."""


@pytest.mark.parametrize("s,stated", [(0.0, 0.0), (0.25, 0.28), (0.5, 0.48), (0.75, 0.64), (1.0, 0.77)])
def test_the_spread_explains_the_share_of_variance_the_scenario_states(s, stated):
    """Draws of critic-spread at spread s with a stub policy whose success depends only on the class:
    the class explains the share the YAML states (analytically, then on 4,000 draws: sd about 0.011)."""
    weights = [s / 2, 1 - s, s / 2]
    overrides = [f"env.phases.0.sources.{i}.weight={w}" for i, w in enumerate(weights)]
    config = resolve_config("critic-spread", "running_mean", overrides=overrides)
    scenario = Scenario(config.env, seed=0)
    analytic = spread_eta2(weights, [RATES[c] for c in ("easy", "learnable", "hard")])
    assert analytic == pytest.approx(stated, abs=0.005)
    rng, luck = np.random.default_rng(0), np.random.default_rng(1)
    tasks = [scenario.next_task(0.0, rng, i) for i in range(4_000)]
    classes = [t.metadata["difficulty_class"] for t in tasks]
    rewards = [float(luck.random() < RATES[c]) for c in classes]
    share = variance_share(rewards, classes)
    assert (share["eta2"] or 0.0) == pytest.approx(analytic, abs=0.035)
    assert {c: classes.count(c) / len(classes) for c in set(classes)} == pytest.approx(
        {c: w for c, w in zip(("easy", "learnable", "hard"), weights) if w > 0}, abs=0.025)


def test_every_critic_map_scenario_loads_with_its_classes():
    for name in ("critic-spread", "critic-pool", "critic-drift", "critic-horizon-k1", "critic-horizon-k3"):
        spec = ScenarioSpec(**load_yaml(find_spec("envs", name)))
        for phase in spec.phases:
            assert all("difficulty_class" in s.params for s in phase.sources), (name, phase.name)


# ----------------------------------------------------------------------------- prompt-dependent baselines


def test_keyed_baseline_by_hand_per_prompt():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    keys = ["a", "b", "a", "a"]
    # discount 1: a's first has nothing (global mean of nothing: 0); b falls back to the global mean [1] = 1;
    # a's second sees a: [1]; a's third sees a: [1, 0] -> 0.5
    adv, history, seen_all, fallback = keyed_baseline_advantages(rewards, keys, {}, [], window=32)
    assert adv.tolist() == [1.0, -1.0, -1.0, 0.5]
    assert fallback.tolist() == [True, True, False, False]
    assert history == {"a": [1.0, 0.0, 1.0], "b": [0.0]} and seen_all == [1.0, 0.0, 0.0, 1.0]
    # discount 0.5: the third a weighs its newest reward (0) 1 and the older (1) 0.5 -> 0.5/1.5
    adv, *_ = keyed_baseline_advantages(rewards, keys, {}, [], window=32, discount=0.5)
    assert adv.tolist() == pytest.approx([1.0, -1.0, -1.0, 1 - 1 / 3])
    # with a history: a has [0, 0, 1] (window 2 keeps [0, 1]); b sees the last 4 of every reward, [0, 0, 1, 1]
    adv, history, seen_all, _ = keyed_baseline_advantages(rewards, keys, {"a": [0.0, 0.0, 1.0]}, [0.0, 0.0, 0.0, 1.0],
                                                          window=2, global_window=4)
    assert adv.tolist() == pytest.approx([1 - 0.5, 0 - 0.5, 0 - 1.0, 1 - 0.5])
    assert history["a"] == [0.0, 1.0] and seen_all == [1.0, 0.0, 0.0, 1.0]


def test_keyed_baseline_by_hand_per_class_and_without_a_class():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, float("nan"), 1.0])
    keys = ["easy", "easy", "hard", None, "hard", "hard"]
    adv, history, seen_all, fallback = keyed_baseline_advantages(rewards, keys, {"hard": [0.0, 1.0]}, [0.5],
                                                                 window=128)
    # easy: global [0.5] -> 0.5, then easy [1] -> 1; hard: [0, 1] -> 0.5; None: global [0.5, 1, 1, 0] -> 0.625;
    # NaN enters no history; hard then [0, 1, 0] -> 1/3
    assert adv[:4].tolist() == pytest.approx([0.5, 0.0, -0.5, -0.625])
    assert math.isnan(adv[4]) and adv[5].item() == pytest.approx(1 - 1 / 3)
    assert fallback.tolist() == [True, False, False, True, False, False]
    assert history == {"hard": [0.0, 1.0, 0.0, 1.0], "easy": [1.0, 1.0]} and len(seen_all) == 6


def hand_episodes(tok, rows):
    """Episodes of (prompt, class, reward): the prompt, then the action ``\\boxed{1}``."""
    from sao_env.types import Episode

    out = []
    for i, (prompt, cls, reward) in enumerate(rows):
        task = Task(id=f"t{i}", prompt=prompt, reference={"answer": 1, "style": "boxed", "candidates": ["boxed"]},
                    grader="style_match", metadata={"phase": "p"} | ({"difficulty_class": cls} if cls else {}))
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        action = tok("\\boxed{1}", add_special_tokens=False)["input_ids"]
        out.append(Episode(task=task, tokens_T=tuple(ids + action),
                           action_mask_T=(False,) * len(ids) + (True,) * len(action),
                           rollout_logp_T=(0.0,) * len(ids) + (-1.0,) * len(action),
                           version_T=(-1,) * len(ids) + (0,) * len(action), reward=reward, response="", group_id=i,
                           phase="p", sim_start=0.0, sim_end=1.0))
    return out


ROWS = [("1+0=? styles:boxed\n", "easy", 1.0), ("2+0=? styles:boxed\n", "hard", 0.0),
        ("1+0=? styles:boxed\n", "easy", 0.0), ("1+0=? styles:boxed\n", None, 1.0)]


def test_the_baselines_key_by_prompt_and_by_class_and_carry_their_histories(tiny):
    policy, tok = tiny
    episodes = hand_episodes(tok, ROWS)
    tasks = [e.task for e in episodes]
    assert [PerPromptAgent.key(t) for t in tasks] == [prompt_id(tasks[0]), prompt_id(tasks[1])] + [prompt_id(tasks[0])] * 2
    assert [OracleClassAgent.key(t) for t in tasks] == ["easy", "hard", "easy", None]
    # per prompt: P1 unseen (global: nothing, 0), P2 unseen (global [1]), P1 [1], P1 [1, 0]
    # per class: easy unseen (0), hard unseen (global [1]), easy [1], no class (global [1, 0, 0])
    for cls, baselines, fallback in ((PerPromptAgent, [0.0, 1.0, 1.0, 0.5], 0.5),
                                     (OracleClassAgent, [0.0, 1.0, 1.0, 1 / 3], 0.75)):
        agent = cls(policy, tok, cls.config_cls(episodes_per_update=4))
        metrics = agent.update(episodes)
        assert metrics["actor/baseline"] == pytest.approx(sum(baselines) / 4)
        assert metrics["actor/baseline_fallback"] == fallback
        assert agent.global_history == [1.0, 0.0, 0.0, 1.0]
    assert {"per_prompt", "oracle_class"} <= set(ALGORITHMS)


def test_the_recipes_bracket_the_critic_at_the_running_means_contract():
    for name in ("per_prompt", "oracle_class", "sao_lambda1"):
        config = resolve_config("critic-spread", name)
        hparams = config.agent.hparams
        assert hparams["episodes_per_update"] == 8 and hparams["lr"] == 1e-4
        assert ALGORITHMS[config.agent.algorithm].group_size == 1
    lam1 = resolve_config("critic-spread", "sao_lambda1").agent.hparams
    sao = resolve_config("critic-spread", "sao").agent.hparams
    assert lam1["adaptive_lambda"] is False and lam1["lam"] == 1.0
    expand = lambda h: SAOConfig(**h).model_dump()  # noqa: E731
    assert {k: v for k, v in expand(lam1).items() if k not in ("adaptive_lambda", "lam")} == \
        {k: v for k, v in expand(sao).items() if k not in ("adaptive_lambda", "lam")}


# ----------------------------------------------------------------------------- SAO at lambda 1


def hand_batch(rewards, masks):
    mask = torch.tensor(masks, dtype=torch.bool)
    rewards_BT = torch.zeros(mask.shape)
    for b, r in enumerate(rewards):
        rewards_BT[b, mask[b].nonzero()[-1, 0]] = r
    z = torch.zeros(mask.shape)
    return Batch(z.long(), mask.long(), mask, z, rewards_BT, torch.tensor(rewards), torch.zeros(len(rewards)).long(),
                 mask.sum(-1))


def test_sao_at_lambda_one_gives_reward_minus_value_on_every_action_token():
    # row 0: prompt, 3 action tokens, observation, 2 action tokens (multi-turn); row 1: 2 action tokens
    batch = hand_batch([1.0, 0.0], [[0, 1, 1, 1, 0, 1, 1], [0, 0, 1, 1, 0, 0, 0]])
    values = torch.tensor([[9.0, 0.2, 0.4, 0.5, 9.0, 0.7, 0.9], [9.0, 9.0, 0.3, -0.1, 9.0, 9.0, 9.0]])
    config = SAOConfig(**resolve_config("critic-spread", "sao_lambda1").agent.hparams)
    adv = SAOAgent.advantages(SimpleNamespace(config=config), batch, values)
    expected = torch.tensor([[0, 0.8, 0.6, 0.5, 0, 0.3, 0.1], [0, 0, -0.3, 0.1, 0, 0, 0]])
    assert torch.allclose(adv, expected, atol=1e-6)
    adaptive = SAOAgent.advantages(SimpleNamespace(config=SAOConfig()), batch, values)
    assert not torch.allclose(adaptive, expected, atol=1e-3)  # the default bootstraps


def test_sao_with_the_value_at_the_prompt_gives_return_minus_the_first_value_on_every_action_token():
    # the batch of the lambda-1 case; V(s_0) is 0.2 (row 0) and 0.3 (row 1), read before the first action token
    batch = hand_batch([1.0, 0.0], [[0, 1, 1, 1, 0, 1, 1], [0, 0, 1, 1, 0, 0, 0]])
    values = torch.tensor([[9.0, 0.2, 0.4, 0.5, 9.0, 0.7, 0.9], [9.0, 9.0, 0.3, -0.1, 9.0, 9.0, 9.0]])
    config = SAOConfig(**resolve_config("critic-spread", "sao_prompt_value").agent.hparams)
    agent = SimpleNamespace(config=config)
    adv = SAOAgent.advantages(agent, batch, values)
    expected = torch.tensor([[0, 0.8, 0.8, 0.8, 0, 0.8, 0.8], [0, 0, -0.3, -0.3, 0, 0, 0]])
    assert torch.allclose(adv, expected, atol=1e-6)
    later = values.clone()
    later[:, 3:] += 5.0  # values after the first action token are not read
    assert torch.equal(SAOAgent.advantages(agent, batch, later), adv)
    flat = torch.where(batch.mask_BT, values.gather(1, batch.mask_BT.int().argmax(1, keepdim=True)), values)
    lam1 = SimpleNamespace(config=SAOConfig(**resolve_config("critic-spread", "sao_lambda1").agent.hparams))
    assert torch.allclose(SAOAgent.advantages(lam1, batch, flat), adv, atol=1e-6)  # lambda 1 on a constant value
    discounted = SimpleNamespace(config=config.model_copy(update={"gamma": 0.5}))
    assert SAOAgent.advantages(discounted, batch, values)[0, 1].item() == pytest.approx(0.5 ** 4 - 0.2)


def test_the_prompt_value_recipe_is_sao_at_lambda_one_but_for_where_it_reads_the_value():
    prompt = SAOConfig(**resolve_config("critic-spread", "sao_prompt_value").agent.hparams).model_dump()
    lam1 = SAOConfig(**resolve_config("critic-spread", "sao_lambda1").agent.hparams).model_dump()
    assert prompt.pop("value_at") == "prompt" and "value_at" not in lam1 and prompt == lam1


# ----------------------------------------------------------------------------- the critic's fit


def test_value_diagnostics_by_hand():
    # three episodes, returns 1, 0, 1 on every action token; values by hand
    batch = hand_batch([1.0, 0.0, 1.0], [[0, 1, 1], [0, 1, 1], [0, 0, 1]])
    values = torch.tensor([[5.0, 0.5, 1.0], [5.0, 0.5, 0.0], [5.0, 5.0, 0.5]])
    returns = torch.where(batch.mask_BT, batch.rewards_B[:, None], 0)
    # tokens: R = [1, 1, 0, 0, 1], V = [0.5, 1, 0.5, 0, 0.5], R - V = [0.5, 0, -0.5, 0, 0.5]
    var_r = np.var([1, 1, 0, 0, 1])
    token_ev = 1 - np.var([0.5, 0, -0.5, 0, 0.5]) / var_r
    first_ev = 1 - np.var([0.5, -0.5, 0.5]) / np.var([1, 0, 1])
    found = value_diagnostics(values, returns, batch.mask_BT, ["easy", "easy", "hard"])
    assert found["explained_variance"] == pytest.approx(token_ev)
    assert found["explained_variance_first_token"] == pytest.approx(first_ev)
    assert found["value_error_first_token"] == pytest.approx(0.5)
    # easy: R = [1, 1, 0, 0], V = [0.5, 1, 0.5, 0]; hard's returns do not vary: left out
    assert found["explained_variance/easy"] == pytest.approx(1 - np.var([0.5, 0, -0.5, 0]) / np.var([1, 1, 0, 0]))
    assert "explained_variance/hard" not in found
    assert explained_variance(returns, returns, batch.mask_BT) == 1.0
    nan_returns = returns.clone()
    nan_returns[1, 1:] = float("nan")
    assert value_diagnostics(values, nan_returns, batch.mask_BT)["value_error_first_token"] == pytest.approx(0.5)


def test_sao_logs_the_critics_fit_per_class(tiny):
    policy, tok = tiny
    agent = SAOAgent(policy, tok, SAOConfig(episodes_per_update=4, critic_warmup_updates=1))
    metrics = agent.update(hand_episodes(tok, ROWS))
    # a fresh critic's values are 0: explained variance 1 - Var(R)/Var(R) = 0, |V(s_0) - R| = mean reward
    assert metrics["critic/explained_variance_prefit"] == pytest.approx(0.0, abs=1e-6)
    assert "critic/explained_variance" in metrics  # the value loss's own (after a step), not replaced
    assert metrics["critic/explained_variance_first_token"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["critic/value_error_first_token"] == pytest.approx(0.5)
    assert metrics["critic/explained_variance_prefit/easy"] == pytest.approx(0.0, abs=1e-6)
    assert "critic/explained_variance_prefit/hard" not in metrics  # one episode: nothing to explain
    metrics = agent.update(hand_episodes(tok, [(p, None, r) for p, _, r in ROWS]))
    assert not any(k.startswith("critic/explained_variance_prefit/") for k in metrics)
    assert "critic/explained_variance_prefit" in metrics and metrics["actor/warmup"] == 0.0


def test_ev_recovery_by_hand():
    windows = [PhaseWindow(0, "a", 0.0, 3600.0), PhaseWindow(1, "b", 3600.0, 7200.0)]
    before = [{"sim_time_s": 3600.0 * i / 10, "critic/explained_variance_prefit": ev} for i, ev in
              enumerate([0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 0.4, 0.6, 0.5])]
    after = [{"sim_time_s": 3600.0 + 360.0 * (i + 1), "critic/explained_variance_prefit": ev} for i, ev in
             enumerate([-1.0, 0.0, 0.5, 1.0, 1.0, 0.9])]
    out = ev_recovery(before + after + [{"sim_time_s": 3700.0}], windows, k=3)
    assert out["ev_pre_drift/2_b"] == pytest.approx(0.5)  # last 3 before the drift: 0.4, 0.6, 0.5
    # means of 3 after: [-1, 0, .5] -> -1/6, [0, .5, 1] -> 0.5 at the 4th update after the drift (1440 s)
    assert out["ev_recovery_h/2_b"] == pytest.approx(1440.0 / 3600)
    assert out["ev_mean/1_a"] == pytest.approx(0.35) and out["ev_mean/2_b"] == pytest.approx(2.4 / 6)
    never = ev_recovery(before + after[:3], windows, k=3)
    assert math.isnan(never["ev_recovery_h/2_b"])
    assert ev_recovery([{"sim_time_s": 1.0}], windows) == {}
