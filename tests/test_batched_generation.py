"""Batched generation: per-episode sampling streams, and the sim runtime's batches of requests.

A request's draws come from its own counter-based stream, so batching changes an episode only
where float rounding between batch shapes flips a draw; these tests measure that, and check that
the runtime really does batch.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from sao_env.agents import ALGORITHMS
from sao_env.experiment import build_agent
from sao_env.policy.generate import _draw, row_key, row_uniforms, sample
from sao_env.runtime.sim import RuntimeSpec, SimRuntime
from sao_env.scenario import Scenario


def test_row_uniforms_are_a_pure_function_of_key_and_counter():
    keys = np.array([row_key(0, 1, 0), row_key(0, 1, 1), row_key(0, 2, 0)], dtype=np.uint64)
    counters = np.array([5, 5, 5])
    u = row_uniforms(keys, counters)
    assert ((0 <= u) & (u < 1)).all() and len(set(u.tolist())) == 3
    assert row_uniforms(keys[1:2], counters[1:2])[0] == u[1]  # alone or in a batch: the same draw
    assert row_uniforms(keys[:1], np.array([6]))[0] != u[0]
    assert row_key(0, 1, 0) == row_key(0, 1, 0) != row_key(1, 1, 0)
    many = row_uniforms(np.full(20000, row_key(7), dtype=np.uint64), np.arange(20000))
    assert abs(many.mean() - 0.5) < 0.01 and abs((many < 0.1).mean() - 0.1) < 0.01


def test_inverse_cdf_draws_follow_the_distribution_and_respect_top_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    logits = torch.log(probs).expand(4000, 5).clone()
    u = row_uniforms(np.full(4000, row_key(3), dtype=np.uint64), np.arange(4000))
    ids, logp = _draw(logits, 1.0, 1.0, None, u)
    freq = torch.bincount(ids, minlength=5).float() / 4000
    assert torch.allclose(freq, probs, atol=0.03) and freq[4] == 0
    torch.testing.assert_close(logp, torch.log(probs)[ids])
    ids, logp = _draw(logits, 1.0, 0.7, None, u)  # nucleus: 0.5 + 0.3 reach 0.7
    assert set(ids.tolist()) == {0, 1}
    torch.testing.assert_close(logp.exp(), (probs / 0.8)[ids])


def test_sample_needs_exactly_one_source_of_randomness(tiny_policy):
    model, tok = tiny_policy
    with pytest.raises(ValueError, match="exactly one"):
        sample(model, [[1, 2]], max_new_tokens=2, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def test_a_row_samples_the_same_alone_or_in_a_batch(tiny_policy):
    model, tok = tiny_policy
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in ("1+2=? styles:boxed,tag\n", "4-3=?\n", "9+9=? x\n")]
    keys = [row_key(5, i) for i in range(3)]
    kw = dict(max_new_tokens=16, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    together = sample(model, prompts, row_keys=keys, **kw)
    for i in range(3):
        (alone,) = sample(model, [prompts[i]], row_keys=[keys[i]], **kw)
        assert alone.token_ids == together[i].token_ids
        assert alone.logps == pytest.approx(together[i].logps, abs=1e-5)


@pytest.fixture(scope="module")
def tiny_policy(shrunk_config):
    config = shrunk_config("grpo")
    agent = build_agent(config, Scenario(config.env), show_progress=False)
    return agent.policy, agent.tokenizer


def _play_run(shrunk_config, agent: str, batched: bool):
    """A shrunken run's episodes (and the runtime), generated in batches or one request at a time."""
    short = tuple(f"env.phases.{i}.duration_h=0.006" for i in range(3))
    config = shrunk_config(agent, 0, (*short, f"agent.runtime.batch_generation={str(batched).lower()}"))
    scenario = Scenario(config.env)
    agent_obj = build_agent(config, scenario, show_progress=False)
    episodes = []
    runtime = SimRuntime(scenario, agent_obj, config.agent.runtime, seed=0, on_update=lambda r: None,
                         on_episode=lambda e, v: episodes.append(e), on_eval=lambda t, rt: None, eval_times=[])
    runtime.run()
    return episodes, runtime


@pytest.mark.parametrize("agent", ["sao", "grpo"])
def test_batching_on_and_off_agree_but_for_rounding(shrunk_config, agent):
    on, runtime_on = _play_run(shrunk_config, agent, True)
    off, runtime_off = _play_run(shrunk_config, agent, False)
    group = ALGORITHMS[agent].config_cls.model_fields["group_size"].default if agent == "grpo" else 1
    assert runtime_off.wall["generate_rows"] == group * runtime_off.wall["generate_batches"]
    assert runtime_on.wall["generate_rows"] > group * runtime_on.wall["generate_batches"]  # it really batches
    assert len(on) > 50
    # Pair the groups both runs started at the same moment for the same task: their streams are the same.
    def groups(episodes):
        out = {}
        for e in episodes:
            out.setdefault((e.group_id, e.sim_start, e.task.id), []).append(e)
        return {k: sorted(v, key=lambda e: e.tokens_T) for k, v in out.items()}

    groups_on, groups_off = groups(on), groups(off)
    pairs = [(a, b) for key in groups_on.keys() & groups_off.keys()
             for a, b in zip(groups_on[key], groups_off[key])]
    assert len(pairs) >= 0.5 * len(on)
    same = [a.tokens_T == b.tokens_T for a, b in pairs]
    assert np.mean(same) >= 0.97, f"only {np.mean(same):.3f} of episodes agree token for token"
    for a, b in pairs:
        if a.tokens_T == b.tokens_T:
            np.testing.assert_allclose(a.rollout_logp_T, b.rollout_logp_T, atol=1e-5)
            assert a.reward == b.reward and a.sim_end == pytest.approx(b.sim_end)


def test_training_refuses_tempered_rollouts():
    with pytest.raises(ValueError, match="importance ratio"):
        RuntimeSpec(temperature=0.7)
    with pytest.raises(ValueError, match="importance ratio"):
        RuntimeSpec(top_p=0.9)
    assert RuntimeSpec().temperature == 1.0


def test_training_does_not_depend_on_the_evaluation_schedule(shrunk_config, tmp_path):
    """Evaluations never decide when waiting requests are played (nor draw from training streams): the
    episodes and updates of a run are the same with evaluations every 18 or every 36 simulated seconds,
    and the evaluations the two schedules share give the same numbers."""
    from sao_env.experiment import run_experiment

    logs = {}
    for interval in ("0.005", "0.01"):
        out = tmp_path / interval
        run_experiment(shrunk_config("sao", 0, (f"env.eval.interval_h={interval}",)), out, show_progress=False,
                       save_checkpoint=False)
        lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        evals = {round(e["sim_time_s"]): e for e in map(json.loads, (out / "evals.jsonl").read_text().splitlines())}
        logs[interval] = ((out / "episodes.jsonl").read_bytes(), [x for x in lines if x.get("kind") != "eval"], evals)
    (episodes_a, updates_a, evals_a), (episodes_b, updates_b, evals_b) = logs.values()
    assert episodes_a == episodes_b and updates_a == updates_b
    shared = evals_a.keys() & evals_b.keys()
    assert len(shared) >= 3 and len(evals_a) > len(evals_b)
    for t in shared:
        assert {k: v for k, v in evals_a[t].items() if k.startswith("eval/")} == \
               {k: v for k, v in evals_b[t].items() if k.startswith("eval/")}
