"""Latency that depends on the work, the completion-order bias, the synchronous and critic-parallel arms.

Pure parts against hand-computed cases and independent formulas (the task factor, the Pareto
family, the per-token and failure couplings, the bias, the staleness histogram, the update's
passes); the runtime on short simulated runs of the shrunken style-drift scenario (members of a
task share its factor, the bias is exactly 0 when durations keep start order and non-zero when
length decides them, a synchronous arm only ever trains on the current weights' episodes).
"""

from __future__ import annotations

import hashlib
import math
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats
from conftest import LONGER, SHRINK_PHASE_H

from sao_env.envs.base import TaskEnv, make_task_env
from sao_env.errors import UserError
from sao_env.evaluation.adaptation import accuracy_curve, area_under, credit_summary, reward_rate_curve
from sao_env.experiment import build_agent, run_experiment
from sao_env.policy.generate import Sample
from sao_env.policy.tokenizer import build_char_tokenizer
from sao_env.runtime.core import Request, completion_order_bias, staleness_shares
from sao_env.runtime.rollout import play
from sao_env.runtime.sim import SimRuntime, make_scheduler, update_passes
from sao_env.scenario import LatencySpec, Scenario, ScenarioSpec, turn_normal
from sao_env.types import Task

# -- the task factor --------------------------------------------------------------------------------


def _independent_factor(sigma: float, seed: int, task_id: str) -> float:
    """The documented definition, written out: exp(sigma z), z from the stream (seed, blake2b-64(id), 0x7A5C)."""
    key = int.from_bytes(hashlib.blake2b(task_id.encode(), digest_size=8).digest(), "little")
    return math.exp(sigma * np.random.default_rng([seed, key, 0x7A5C]).standard_normal())


def test_task_factor_is_deterministic_per_seed_and_task():
    latency = LatencySpec(task_sigma=0.8)
    a = latency.task_factor(3, "boxed-000007")
    assert a == latency.task_factor(3, "boxed-000007")
    assert a == pytest.approx(_independent_factor(0.8, 3, "boxed-000007"), rel=1e-12)
    assert a != latency.task_factor(4, "boxed-000007")          # another run's seed
    assert a != latency.task_factor(3, "boxed-000008")          # another task
    assert LatencySpec().task_factor(3, "boxed-000007") == 1.0  # task_sigma 0: no task effect
    # The spread is the parameter: log factors over 4,000 tasks have mean ~0 and sd ~sigma
    # (the sd of a sample sd of n=4000 normals is sigma/sqrt(2n) ~ 0.009).
    logs = np.log([latency.task_factor(0, f"t-{i}") for i in range(4000)])
    assert abs(logs.mean()) < 4 * 0.8 / math.sqrt(4000)
    assert abs(logs.std() - 0.8) < 4 * 0.8 / math.sqrt(2 * 4000)


def _scenario(task_sigma: float, seed: int) -> Scenario:
    from sao_env.specs import find_spec, load_yaml

    data = load_yaml(find_spec("envs", "style-drift"))
    data["latency"] = {**data["latency"], "task_sigma": task_sigma}
    return Scenario(ScenarioSpec(**data), seed=seed)


def test_the_scenario_stamps_each_task_and_keeps_the_task_stream():
    plain, spread = _scenario(0.0, 5), _scenario(0.7, 5)
    rng_a, rng_b = np.random.default_rng([5, 1]), np.random.default_rng([5, 1])
    for i in range(30):
        a, b = plain.next_task(i * 10.0, rng_a, i), spread.next_task(i * 10.0, rng_b, i)
        assert (a.id, a.prompt, a.reference) == (b.id, b.prompt, b.reference)
        assert "latency_factor" not in a.metadata
        assert b.metadata["latency_factor"] == pytest.approx(_independent_factor(0.7, 5, b.id), rel=1e-12)


def test_members_of_one_task_share_its_factor_and_draw_their_own_turns():
    """Four rollouts (env seeds) of one task: each turn = factor x median x exp(sigma z(seed, 1))."""
    latency = LatencySpec(task_sigma=0.9, env_median_s=4.0, env_sigma=0.5)
    scenario = _scenario(0.9, 11)
    task = scenario.next_task(0.0, np.random.default_rng([11, 1]), 0)
    factor = task.metadata["latency_factor"]
    seen = []
    for seed in (1, 2, 3, 4):
        env = make_task_env(task, latency=latency)
        env.reset(seed=seed, options={"task": task})
        *_, info = env.step("7")
        seen.append(info["latency"]["env_s"])
        assert info["latency"]["env_s"] == pytest.approx(factor * 4.0 * math.exp(0.5 * turn_normal(seed, 1)), rel=1e-12)
    assert len(set(seen)) == 4                          # the within-task spread is each member's own
    assert latency.min_first_turn_s(1, task) <= seen[0]  # the runtime's lower bound holds with the factor
    assert latency.min_first_turn_s(1) == 0.0            # and is 0 without the task


# -- the Pareto family ------------------------------------------------------------------------------


def test_pareto_by_hand():
    # alpha = 1, median 4: x_m = 4 / 2^(1/1) = 2, Q(p) = 2 / (1 - p): Q(0.5) = 4, Q(0.99) = 200 = 50 x median.
    latency = LatencySpec(family="pareto", pareto_alpha=1.0, env_median_s=4.0)
    assert latency.from_normal(4.0, 0.0) == pytest.approx(4.0, rel=1e-12)
    assert latency.from_normal(4.0, stats.norm.ppf(0.99)) == pytest.approx(200.0, rel=1e-9)
    # alpha = 2: x_m = 4 / sqrt(2), Q(0.75) = x_m / sqrt(0.25) = 8 / sqrt(2) = 5.657
    assert LatencySpec(family="pareto", pareto_alpha=2.0).from_normal(4.0, stats.norm.ppf(0.75)) == \
        pytest.approx(8 / math.sqrt(2), rel=1e-9)


@pytest.mark.parametrize("alpha", [0.8, 1.5, 3.0])
def test_pareto_quantiles_match_the_formula(alpha):
    """Each draw is scipy's Pareto quantile at Phi(z) (a reference implementation); over 20,000 episodes
    the share of draws at or below Q(p) = x_m (1-p)^(-1/alpha) is p within 4 binomial sd."""
    median = 3.0
    x_m = median / 2 ** (1 / alpha)
    latency = LatencySpec(family="pareto", pareto_alpha=alpha, env_median_s=median)
    seeds = range(20_000)
    draws = np.array([latency.turn_s(s, 1, None) for s in seeds])
    reference = stats.pareto(b=alpha, scale=x_m).ppf(stats.norm.cdf([turn_normal(s, 1) for s in seeds[:500]]))
    np.testing.assert_allclose(draws[:500], reference, rtol=1e-9)
    for p in (0.1, 0.5, 0.9, 0.99):
        q = x_m * (1 - p) ** (-1 / alpha)
        share = float(np.mean(draws <= q))
        assert abs(share - p) <= 4 * math.sqrt(p * (1 - p) / len(draws)), (p, share)
    assert draws.min() >= x_m


def test_the_default_family_is_the_original_log_normal_bit_for_bit():
    latency = LatencySpec(env_median_s=4.0, env_sigma=1.0, tool_median_s={"python": 3.0})
    for seed in range(50):
        for turn, tool in ((1, None), (2, "python")):
            median = 3.0 if tool else 4.0
            assert latency.turn_s(seed, turn, tool) == float(median * np.exp(1.0 * turn_normal(seed, turn)))


# -- coupling to length and outcome -----------------------------------------------------------------


class _Scripted(TaskEnv):
    """A multi-turn env whose episode ends on the action ``answer``; its reward is the task's ``reward``."""

    def _start(self, task):
        return "go"

    def _act(self, action):
        return "ok", action == "answer", "answer" if action == "answer" else "python"

    def _grade(self):
        return self.task.reference["reward"], {}


def _scripted_episode(reward: float, actions: list[str], **latency) -> float:
    spec = LatencySpec(env_median_s=2.0, env_sigma=1.0, tool_median_s={"python": 3.0}, **latency)
    env = _Scripted(latency=spec, max_turns=4)
    env.reset(seed=9, options={"task": Task("t-0", "go", {"reward": reward}, "none", env="scripted")})
    return sum(env.step(a)[4]["latency"]["env_s"] for a in actions)


def test_a_failed_episode_is_charged_its_turns_to_the_limit():
    spec = LatencySpec(env_median_s=2.0, env_sigma=1.0, tool_median_s={"python": 3.0})
    turn = {k: spec.turn_s(9, k, None) for k in range(1, 5)}
    python1 = spec.turn_s(9, 1, "python")
    # Off: only the played turns.
    assert _scripted_episode(0.0, ["answer"]) == turn[1]
    # On, failed (0 < 0.5) after 1 of 4 turns: turns 2, 3, 4 are added, each its own draw at env_median_s.
    on = {"fail_to_turn_limit": True}
    assert _scripted_episode(0.0, ["answer"], **on) == pytest.approx(turn[1] + turn[2] + turn[3] + turn[4], rel=1e-12)
    assert _scripted_episode(0.0, ["call", "answer"], **on) == pytest.approx(python1 + turn[2] + turn[3] + turn[4],
                                                                             rel=1e-12)
    # Boundary: a reward exactly at fail_below is not a failure; a failure at the limit has no turns left.
    assert _scripted_episode(0.5, ["answer"], **on) == turn[1]
    assert _scripted_episode(0.49, ["answer"], **on, fail_below=0.49) == turn[1]
    at_limit = _scripted_episode(0.0, ["call"] * 4, **on)
    assert at_limit == pytest.approx(sum(spec.turn_s(9, k, "python") for k in range(1, 5)), rel=1e-12)


def test_env_time_grows_with_the_generated_tokens():
    tok = build_char_tokenizer()
    answer = [tok.convert_tokens_to_ids(c) for c in "42"] + [tok.eos_token_id]  # 3 action tokens

    def sampler(model, prompts, **kwargs):
        return [Sample(tuple(answer), (-0.5,) * len(answer), True) for _ in prompts]

    task = _scenario(0.0, 0).next_task(0.0, np.random.default_rng(0), 0)
    spec = _scenario(0.0, 0).spec
    costly = spec.model_copy(update={"latency": spec.latency.model_copy(update={"env_s_per_token": 1.5})})
    plain_r, = play(None, tok, [task], spec, env_seeds=[4], sampler=sampler)
    costly_r, = play(None, tok, [task], costly, env_seeds=[4], sampler=sampler)
    assert plain_r.env_s == spec.latency.turn_s(4, 1, None)
    assert costly_r.env_s == pytest.approx(plain_r.env_s + 1.5 * 3, rel=1e-12)  # + 1.5 s x 3 tokens


# -- the completion-order bias and the staleness histogram, by hand -----------------------------------


def _requests(rewards: list[list[float]]) -> tuple[list[Request], dict[int, list[float]]]:
    reqs = [Request(id=i, task=None, version=0, group=[None] * len(r), pending=0) for i, r in enumerate(rewards)]
    return reqs, {i: r for i, r in enumerate(rewards)}


def test_completion_order_bias_by_hand():
    reqs, table = _requests([[0.0], [1.0], [0.0], [1.0], [1.0]])
    of = lambda r: table[r.id]  # noqa: E731
    # Completion order took requests 3 and 1 (fast, solved): mean 1; start order takes 0 and 1: mean 0.5.
    assert completion_order_bias([reqs[3], reqs[1]], reqs, of) == 0.5
    # The same requests in another order: exactly 0.
    assert completion_order_bias([reqs[1], reqs[0]], reqs, of) == 0.0
    # Groups of 2: batch = request 2 (0 and 0.5: 0.25); start order = request 0 (0.25, 0.75: 0.5): -0.25.
    groups, gtable = _requests([[0.25, 0.75], [1.0, 1.0], [0.0, 0.5]])
    assert completion_order_bias([groups[2]], groups, lambda r: gtable[r.id]) == -0.25
    # Exactly rounded means: 0.1 + 0.2 + 0.7 summed in two orders differ by one ulp, the bias does not.
    assert (0.1 + 0.2) + 0.7 != (0.7 + 0.2) + 0.1
    reqs, table = _requests([[0.1], [0.2], [0.7]])
    assert completion_order_bias([reqs[2], reqs[1], reqs[0]], reqs, lambda r: table[r.id]) == 0.0


def test_staleness_shares_by_hand_and_at_the_bin_edges():
    out = staleness_shares([0, 1, 2, 3, 4, 7, 8, 15, 16, 40])
    assert out == {"async/staleness_frac_0": 0.1, "async/staleness_frac_1": 0.1, "async/staleness_frac_2_3": 0.2,
                   "async/staleness_frac_4_7": 0.2, "async/staleness_frac_8_15": 0.2, "async/staleness_frac_16_up": 0.2}
    assert staleness_shares([3, 3, 4, 4])["async/staleness_frac_2_3"] == 0.5
    assert math.fsum(staleness_shares([0, 5, 5, 17]).values()) == 1.0


# -- the critic charged in parallel ---------------------------------------------------------------


def test_update_passes_series_and_parallel():
    sao = SimpleNamespace(train_passes=3, config=SimpleNamespace(critic_updates=2, advantage_values="before_fit"))
    assert update_passes(sao, False) == 3   # 1 actor + 2 critic, in series
    assert update_passes(sao, True) == 2    # max(1, 2)
    k1 = SimpleNamespace(train_passes=2, config=SimpleNamespace(critic_updates=1))
    assert update_passes(k1, True) == 1     # max(1, 1)
    scenario = _scenario(0.0, 0)
    spec = SimpleNamespace(critic_parallel=True, buffer_capacity=64, max_staleness=4, on_full="block")
    make_scheduler(scenario, SimpleNamespace(group_size=1, groups_per_update=8, name="sao", **vars(sao)), spec)
    grpo = SimpleNamespace(train_passes=1, group_size=4, groups_per_update=2, name="grpo", config=SimpleNamespace())
    after_fit = SimpleNamespace(group_size=1, groups_per_update=8, name="sao", train_passes=3,
                                config=SimpleNamespace(critic_updates=2, advantage_values="after_fit"))
    for agent in (grpo, after_fit):  # no critic; an actor that needs the fitted critic (as VAPO's)
        with pytest.raises(UserError, match="critic_parallel needs a critic whose pre-fit values"):
            make_scheduler(scenario, agent, spec)


# -- short simulated runs -------------------------------------------------------------------------

CONSTANT = ("env.latency.env_sigma=0", "env.latency.decode_s_per_token=0", "env.latency.prefill_s_per_token=0")
"""Every episode takes exactly env_median_s (4 s): completion order is start order."""


def _updates(run_dir) -> list[dict]:
    import json

    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if '"kind"' not in x]


def _episodes(run_dir) -> list[dict]:
    import json

    return [json.loads(x) for x in (run_dir / "episodes.jsonl").read_text().splitlines() if x]


def test_group_members_share_the_task_factor_in_a_run(shrunk_run):
    """GRPO (G=4) with a task factor and no within-task spread: a group's four episodes last exactly as
    long as each other (4 s x its task's factor) and groups differ."""
    run_dir, _ = shrunk_run("grpo", 0, (*CONSTANT, "env.latency.task_sigma=1.0"))
    by_group: dict[int, list[dict]] = {}
    for e in _episodes(run_dir):
        by_group.setdefault(e["group"], []).append(e)
    full = [g for g in by_group.values() if len(g) == 4]
    assert len(full) >= 20
    for g in full:
        assert len({e["task"] for e in g}) == 1
        durations = [e["sim_end"] - e["sim_start"] for e in g]
        assert max(durations) - min(durations) <= 1e-9 * max(durations)
        assert durations[0] == pytest.approx(4.0 * _independent_factor(1.0, 0, g[0]["task"]), rel=1e-9)
    assert len({round(g[0]["sim_end"] - g[0]["sim_start"], 6) for g in full}) >= len(full) // 2


def test_bias_is_exactly_zero_when_durations_keep_start_order(shrunk_run):
    run_dir, summary = shrunk_run("sao", 0, CONSTANT)
    lines = _updates(run_dir)
    assert len(lines) >= 10
    assert all(r["async/completion_bias"] == 0.0 for r in lines)
    # Not vacuous: batches mix rewards, the run is asynchronous, the start-order batch had rivals.
    assert any(0 < r["train/reward_mean"] < 1 for r in lines)
    assert any(r["async/staleness_max"] > 0 for r in lines)
    assert summary["completion_bias_mean"] == 0.0


def test_bias_is_negative_when_the_rewarded_answers_are_the_long_ones(shrunk_run):
    """Length decides the duration (1 s per generated token, nothing else): the rewarded styles
    (boxed, sentence, tag) are longer than the unrewarded terse answer, so the fast episodes the
    learner takes first earn less than the episodes start order would have given it."""
    run_dir, summary = shrunk_run("sao", 0, (*CONSTANT[:1], "env.latency.decode_s_per_token=1.0",
                                             "env.latency.prefill_s_per_token=0", "env.latency.env_median_s=0"))
    bias = [r["async/completion_bias"] for r in _updates(run_dir)]
    assert sum(b != 0 for b in bias) >= len(bias) // 4
    assert summary["completion_bias_mean"] == pytest.approx(float(np.mean(bias)), rel=1e-12)
    assert summary["completion_bias_mean"] < -0.02
    # The summary's reward per hour is what the episodes earned over the run's simulated hours.
    episodes = _episodes(run_dir)
    hours = 3 * SHRINK_PHASE_H
    assert summary["reward_per_hour"] == pytest.approx(math.fsum(e["reward"] for e in episodes) / hours, rel=1e-12)
    curve = reward_rate_curve(episodes)
    assert curve[-1][1] == pytest.approx(math.fsum(e["reward"] for e in episodes) / curve[-1][0], rel=1e-12)


def test_the_critic_charged_in_parallel_costs_two_passes_instead_of_three(shrunk_run):
    series, _ = shrunk_run("sao", 0)
    parallel, _ = shrunk_run("sao_critic_parallel", 0)
    a, b = _updates(series)[0], _updates(parallel)[0]  # the same first batch: nothing differs before it
    assert a["train/response_tokens"] == b["train/response_tokens"]
    base = 0.5  # style-drift's update_base_s
    assert (b["perf/update_sim_s"] - base) == pytest.approx((a["perf/update_sim_s"] - base) * 2 / 3, rel=1e-12)


@pytest.mark.parametrize("recipe", ["sync_grpo", "sync_sao"])
def test_a_synchronous_arm_only_trains_on_the_current_weights(recipe, shrunk_config):
    """Every action token of every consumed episode carries the learner's version at the update (read
    from the tokens, not from the runtime's staleness), 8 per update, and the bias is exactly 0."""
    config = shrunk_config(recipe, 0, LONGER)  # SHRINK's 54 s: 3 updates, sync_sao's all critic warm-up
    scenario = Scenario(config.env, seed=config.seed)
    agent = build_agent(config, scenario, show_progress=False)
    seen, records = [], []
    train = agent.update

    def update(episodes):
        seen.append((agent.version, {v for e in episodes for v, m in zip(e.version_T, e.action_mask_T) if m},
                     len(episodes)))
        return train(episodes)

    agent.update = update
    runtime = SimRuntime(scenario, agent, config.agent.runtime, seed=0, on_update=records.append,
                         on_episode=lambda e, v: None, on_eval=lambda t, r: None, eval_times=[])
    runtime.run()
    assert len(seen) >= 5 and agent.version >= 3
    for version, token_versions, n in seen:
        assert token_versions == {version} and n == 8
    assert all(r["async/completion_bias"] == 0.0 and r["async/staleness_frac_0"] == 1.0 for r in records)


def test_curves_on_three_axes(shrunk_run, shrunk_config):
    import json

    run_dir, summary = shrunk_run("sao", 0, CONSTANT)
    evals = [json.loads(x) for x in (run_dir / "evals.jsonl").read_text().splitlines()]
    scenario = Scenario(shrunk_config("sao", 0, CONSTANT).env)
    by_time, by_episodes, by_updates = (accuracy_curve(evals, scenario, a) for a in ("time", "episodes", "updates"))
    assert [a for _, a in by_time] == [a for _, a in by_episodes] == [a for _, a in by_updates]
    assert [x for x, _ in by_episodes] == [r["episodes"] for r in evals]
    assert [x for x, _ in by_updates] == [r["updates"] for r in evals]
    assert area_under(by_time) == pytest.approx(summary["auc"], rel=1e-12)
    assert summary["auc_episodes"] == area_under(by_episodes)
    assert credit_summary(run_dir, scenario)["auc_updates"] == summary["auc_updates"]
    # The learner's idle share: 1 - the simulated seconds its updates cost, over the run's length.
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    costs = [r["perf/update_sim_s"] for r in records if r.get("kind") != "eval" and "perf/update_sim_s" in r]
    assert len(costs) == round(summary["updates_per_hour"] * scenario.duration_s / 3600)
    assert summary["learner_idle_frac"] == pytest.approx(1 - sum(costs) / scenario.duration_s, rel=1e-12)
    assert 0 < summary["learner_idle_frac"] < 1
    # By hand: accuracies 0.2, 0.6, 0.4 at x = 0, 10, 30: (0.4 x 10 + 0.5 x 20) / 30 = 14 / 30.
    assert area_under([(0, 0.2), (10, 0.6), (30, 0.4)]) == pytest.approx(14 / 30, rel=1e-12)
    assert math.isnan(area_under([(5, 0.2), (5, 0.3)]))
