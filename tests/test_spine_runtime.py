"""The runtime seam, on short real runs (``run_experiment`` on the shrunken style-drift scenario):
reproducibility, admission control (staleness), the bounded buffer, every recipe, the checkpoint."""

from __future__ import annotations

import bisect
import json
import math
import os

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from conftest import LONGER

from sao_env.experiment import run_experiment
from sao_env.policy.generate import sample
from sao_env.policy.warmstart import load_warm_started
from sao_env.scenario import Scenario
from sao_env.specs import available
from sao_env.tasks.tokens import CHARSET

STALE4 = ("agent.runtime.max_staleness=4",)
SUMMARY_KEYS = ("online_reward", "auc", "episodes_per_hour", "staleness_mean")


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def updates(run_dir) -> list[dict]:
    return [r for r in read_jsonl(run_dir / "metrics.jsonl") if r.get("kind") != "eval"]


def numbers(record: dict):
    for key, value in record.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            yield key, value


def check_logs_agree_with_summary(run_dir, summary, spec) -> None:
    """Recompute the summary's counts and means from the run's own logs; check every episode's version
    tag against the updates logged before it started and every evaluation against the updates before it.
    ``spec`` is the run's scenario spec (phase lengths and evaluation interval).

    An update's episodes count as consumed when the learner takes them, its line is logged when it
    ends ``perf/update_sim_s`` later: an evaluation during an update (and the summary, when the run
    ends during one) counts that update's batch already."""
    episodes = read_jsonl(run_dir / "episodes.jsonl")
    records = read_jsonl(run_dir / "metrics.jsonl")
    evals = read_jsonl(run_dir / "evals.jsonl")
    lines = [r for r in records if r.get("kind") != "eval"]
    ends = np.cumsum([p.duration_h * 3600 for p in spec.phases])
    duration, hours = float(ends[-1]), float(ends[-1]) / 3600
    rewards = [e["reward"] for e in episodes]
    assert episodes and lines
    assert len(episodes) == summary["episodes_completed"]
    assert summary["online_reward"] == pytest.approx(math.fsum(rewards) / len(rewards), rel=1e-12)
    assert summary["reward_per_hour"] == pytest.approx(math.fsum(rewards) / hours, rel=1e-12)
    assert [r["update"] for r in lines] == list(range(1, len(lines) + 1))
    assert summary["updates_per_hour"] == pytest.approx(len(lines) / hours, rel=1e-12)
    batches = np.diff([0] + [r["episodes"] for r in lines])
    assert min(batches) >= summary["episodes_per_update_nominal"]
    consumed = summary["episodes_consumed"]
    assert consumed == evals[-1]["episodes"] <= len(episodes) - summary["dropped"]
    unfinished = consumed - lines[-1]["episodes"]  # the batch of an update the run ended during
    assert unfinished == 0 or unfinished >= summary["episodes_per_update_nominal"]
    assert summary["episodes_per_hour"] == pytest.approx(consumed / hours, rel=1e-12)
    assert summary["episodes_per_update"] == pytest.approx(consumed / len(lines), rel=1e-12)
    hist = summary["staleness_hist"]
    assert sum(hist) == consumed
    assert summary["staleness_mean"] == pytest.approx(sum(i * h for i, h in enumerate(hist)) / consumed, rel=1e-12)
    assert len(hist) - 1 >= max(r["async/staleness_max"] for r in lines)
    if not unfinished:
        assert len(hist) - 1 == max(r["async/staleness_max"] for r in lines)
        weighted = math.fsum(r["async/staleness_mean"] * b for r, b in zip(lines, batches)) / consumed
        assert summary["staleness_mean"] == pytest.approx(weighted, rel=1e-9, abs=1e-12)
    # Version tags: an episode carries the version deployed when it started, the version of the last
    # update logged at or before its start (0 before the first). The final version is the last logged
    # update's: an update the run ended during is not logged, so the summary does not count it either.
    assert summary["final_version"] == lines[-1]["version"]
    times, versions = [r["sim_time_s"] for r in lines], [r["version"] for r in lines]
    for e in episodes:
        k = bisect.bisect_right(times, e["sim_start"])
        assert e["version"] == (versions[k - 1] if k else 0), e
        assert e["sim_start"] <= e["sim_end"] <= duration
    # Evaluations, interleaved in metrics.jsonl, see exactly the updates logged before them (and the
    # batch of the next one if it had started).
    seen, following = (0, 0, 0), iter(lines)
    upcoming = next(following, None)
    for r in records:
        if r.get("kind") != "eval":
            seen, upcoming = (r["update"], r["episodes"], r["version"]), next(following, None)
            continue
        t, episodes_seen = r["sim_time_s"], seen[1]
        if upcoming is not None and upcoming["sim_time_s"] - upcoming["perf/update_sim_s"] < t - 1e-9:
            episodes_seen = upcoming["episodes"]
        elif upcoming is None and t == duration:
            episodes_seen = consumed
        assert (r["updates"], r["episodes"], r["version"]) == (seen[0], episodes_seen, seen[2]), t
    assert [r for r in records if r.get("kind") == "eval"] == [{"kind": "eval", **e} for e in evals]
    interval = spec.eval.interval_h * 3600
    expected = [i * interval for i in range(math.ceil(duration / interval - 1e-9))] + [duration]
    assert [e["sim_time_s"] for e in evals] == pytest.approx(expected)
    # The area under the active phase's accuracy, by the trapezoid rule over the evaluation times.
    active = [spec.phases[min(int(np.searchsorted(ends, e["sim_time_s"], side="right")), len(ends) - 1)].name
              for e in evals]
    acc = [e[f"eval/{name}/accuracy"] for e, name in zip(evals, active)]
    area = math.fsum((acc[i] + acc[i + 1]) / 2 * (expected[i + 1] - expected[i]) for i in range(len(acc) - 1))
    assert summary["auc"] == pytest.approx(area / duration, rel=1e-9, abs=1e-12)


# -- reproducibility ------------------------------------------------------------------------------


@pytest.mark.slow
def test_same_seed_runs_are_byte_identical(shrunk_run, shrunk_config, tmp_path):
    first, _ = shrunk_run("sao", 0, STALE4)
    second = tmp_path / "again"
    run_experiment(shrunk_config("sao", 0, STALE4), second, show_progress=False)
    for name in ("metrics.jsonl", "evals.jsonl", "episodes.jsonl"):
        a, b = (first / name).read_bytes(), (second / name).read_bytes()
        assert a and a == b, name
    assert (first / "summary.json").read_bytes() == (second / "summary.json").read_bytes()
    other, _ = shrunk_run("sao", 1, STALE4)
    assert (other / "episodes.jsonl").read_bytes() != (first / "episodes.jsonl").read_bytes()
    # Held-out sets and their sampling are keyed by the run's seed (evaluation version 2): the first
    # evaluation (before any update, the same warm start) differs between the seeds.
    assert read_jsonl(other / "evals.jsonl")[0] != read_jsonl(first / "evals.jsonl")[0]


# -- admission control ----------------------------------------------------------------------------

# A large lr: the policy must move; a longer last phase: synchronous updates wait for the slowest
# episode of each batch, and the checks below need several of them.
SYNC = ("agent.runtime.max_staleness=0", "agent.hparams.lr=3e-3", "env.phases.2.duration_h=0.02")


@pytest.mark.parametrize("agent", ["sao", "grpo"])
def test_max_staleness_zero_is_on_policy(agent, shrunk_run):
    run_dir, summary = shrunk_run(agent, 0, SYNC)
    lines = updates(run_dir)
    assert len(lines) >= 5
    for r in lines:
        assert r["async/staleness_max"] == 0.0, r["update"]
    assert summary["staleness_mean"] == 0.0 and summary["staleness_p95"] == 0.0
    actor = [r for r in lines if "actor/loss" in r]
    assert actor, "no actor update happened"
    # The policy did move (else the ratio checks below would hold trivially).
    assert any(r["actor/grad_norm"] > 0 for r in actor)
    assert summary["final_version"] >= 3
    for r in actor:
        assert abs(r["actor/ratio_mean"] - 1.0) <= 1e-4, r["update"]
        assert r["actor/approx_kl"] <= 1e-8, r["update"]
        if agent == "sao":
            assert r["actor/ratio_max"] <= 1 + 1e-4, r["update"]
            assert r["actor/dis_masked"] == 0.0, r["update"]
        else:
            assert r["actor/pg_clipfrac"] == 0.0, r["update"]
    # Every episode the learner saw was produced by the version it updated.
    versions = {e["version"] for e in read_jsonl(run_dir / "episodes.jsonl")}
    assert len(versions) >= 3


def test_staleness_never_exceeds_max_staleness(shrunk_run):
    run_dir, summary = shrunk_run("sao", 0, STALE4)
    lines = updates(run_dir)
    worst = max(r["async/staleness_max"] for r in lines)
    assert worst > 0, "the run never was asynchronous: the bound below is vacuous"
    too_stale = [(r["update"], r["async/staleness_max"]) for r in lines if r["async/staleness_max"] > 4]
    assert not too_stale, f"(update, staleness) above max_staleness=4: {too_stale[:8]}"
    assert summary["staleness_p95"] <= 4


# -- the bounded buffer ---------------------------------------------------------------------------


def test_buffer_smaller_than_a_batch_is_rejected_up_front(shrunk_run):
    """A buffer that cannot hold one update's batch would starve the learner: a one-line error."""
    from sao_env.errors import UserError

    with pytest.raises(UserError, match="buffer_capacity 1 is smaller than one update's batch"):
        shrunk_run("grpo", 0, ("agent.runtime.buffer_capacity=1",))


def test_buffer_of_exactly_one_batch_does_not_deadlock(shrunk_run):
    run_dir, summary = shrunk_run("grpo", 0, (*LONGER, "agent.runtime.buffer_capacity=8"))  # 12 updates, not 6
    lines = updates(run_dir)
    assert len(lines) >= 5
    assert summary["dropped"] == 0
    evals = read_jsonl(run_dir / "evals.jsonl")
    duration = 3 * 0.01 * 3600
    assert evals[-1]["sim_time_s"] == pytest.approx(duration)
    # The learner kept consuming until the end, not only at the start.
    assert lines[-1]["sim_time_s"] > 0.8 * duration


def test_full_buffer_blocks_and_never_drops(shrunk_run):
    run_dir, summary = shrunk_run("sao_streaming", 0, ("agent.runtime.buffer_capacity=1",))
    lines = updates(run_dir)
    assert summary["dropped"] == 0
    assert all(r["async/dropped"] == 0.0 for r in lines)
    assert all(r["async/buffer_size"] <= 1 for r in lines)
    completed = summary["episodes_completed"]
    assert completed == len(read_jsonl(run_dir / "episodes.jsonl"))
    assert summary["episodes_consumed"] > 0


def test_drop_oldest_drops_and_counts(shrunk_run):
    run_dir, summary = shrunk_run("sao_streaming", 0, ("agent.runtime.buffer_capacity=1", "agent.runtime.on_full=drop_oldest"))
    lines = updates(run_dir)
    assert summary["dropped"] > 0
    dropped = [r["async/dropped"] for r in lines]
    assert dropped == sorted(dropped) and dropped[-1] <= summary["dropped"]
    # Nothing vanishes: completed = consumed + dropped + (still buffered or blocked at the end).
    assert summary["episodes_consumed"] + summary["dropped"] <= summary["episodes_completed"]
    assert summary["episodes_completed"] - summary["episodes_consumed"] - summary["dropped"] <= 1


# -- every recipe ---------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", available("agents"))
def test_every_recipe_runs_and_logs_finite_metrics(agent, shrunk_run, shrunk_config):
    run_dir, summary = shrunk_run(agent)
    lines = read_jsonl(run_dir / "metrics.jsonl")
    assert updates(run_dir), "no learner update"
    for r in lines:
        bad = [k for k, v in numbers(r) if not math.isfinite(v)]
        assert not bad, (r.get("update"), bad)
    for key in SUMMARY_KEYS:
        assert key in summary and math.isfinite(summary[key]), key
    written = json.loads((run_dir / "summary.json").read_text())
    assert json.dumps(written, sort_keys=True) == json.dumps(summary, sort_keys=True)
    check_logs_agree_with_summary(run_dir, summary, shrunk_config(agent).env)
    for name in ("config.yaml", "evals.jsonl", "episodes.jsonl", "timings.json", "adaptation.png"):
        assert (run_dir / name).is_file(), name


def test_final_checkpoint_loads_and_generates(shrunk_run, shrunk_config):
    run_dir, summary = shrunk_run("sao")
    final = run_dir / "checkpoints" / "final"
    model = AutoModelForCausalLM.from_pretrained(final).eval()
    tok = AutoTokenizer.from_pretrained(final)
    prompt = "3+4=? styles:boxed,sentence,terse,hash\n"
    inputs = tok(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
    new = out[0, inputs["input_ids"].shape[1]:].tolist()
    assert len(new) >= 1
    assert set(tok.decode(new, skip_special_tokens=True)) <= CHARSET
    # The same greedy continuation as the package's own sampler.
    (s,) = sample(model, [inputs["input_ids"][0].tolist()], max_new_tokens=8, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0), temperature=0)
    assert list(s.token_ids) == new[: len(s.token_ids)]
    # It is the trained policy, not the warm start.
    assert summary["final_version"] > 0
    config = shrunk_config("sao")
    warm, _, cached = load_warm_started(config.agent.model, Scenario(config.env), show_progress=False)
    assert cached is not None and cached.is_relative_to(os.environ["SAO_ENV_CACHE"])
    trained = model.state_dict()
    assert any(not torch.equal(v, trained[k]) for k, v in warm.state_dict().items())
