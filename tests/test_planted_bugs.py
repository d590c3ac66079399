"""Tests written against plausible one-line bugs that the rest of the suite let through.

Each test below was checked against a copy of the package with the bug planted (the test fails)
and against the real code (it passes). Expected values are worked out by hand in comments or by a
small reference loop, never taken from the code under test.

* ``drop_oldest`` dropping the newest buffered group (``self.buffer.pop(0)`` -> ``pop()`` in
  ``Scheduler.episode_done``): ``test_drop_oldest_keeps_the_newest_groups_in_completion_order``.
* a ``threads`` worker tagging its episodes with the learner's version instead of the published
  weights' (``self.deployed_version`` -> ``self.agent.version`` in ``RealtimeRuntime._work``):
  ``test_threads_worker_tags_episodes_with_the_published_version``.
* the update-count checkpoint trigger off by one (``>=`` -> ``>`` in ``CheckpointEvery.due``):
  ``test_checkpoint_trigger_is_due_at_exactly_n_updates`` and, in a run,
  ``test_a_resumed_run_continues_from_its_checkpoint`` (the first clean-point check at update 2).
* ``clean_point`` with ``free_slots == group_size`` (``>=`` -> ``>``):
  ``test_clean_point_boundary_is_exactly_a_free_group_of_slots``.
* a resume that silently restarts from scratch (``_find_resume`` returning None):
  ``test_a_resumed_run_continues_from_its_checkpoint`` (the resume line, ``resumed_at_sim_s`` and
  the number of updates computed after the resume).
* avg@k weighted by samples instead of per problem:
  ``test_avg_at_k_weighs_problems_not_samples``.
* a gradual drift mixing in the wrong direction (``>=`` -> ``<`` in ``Scenario.next_task``):
  ``test_gradual_drift_mixes_the_new_phase_in_linearly``.
"""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from conftest import LONGER, _shrunk_config
from sao_env.benchmarks.metrics import avg_at_k, summarize_scores
from sao_env.runtime import checkpoint as ckpt
from sao_env.runtime.checkpoint import CheckpointEvery
from sao_env.runtime.core import Scheduler


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


# -- 1. drop_oldest drops the oldest groups --------------------------------------------------------


def _finish(core: Scheduler, request, now: float) -> str:
    where = "running"
    for i in range(core.group_size):
        where = core.episode_done(request, i, SimpleNamespace(version=request.version), now)
    return where


def test_drop_oldest_keeps_the_newest_groups_in_completion_order():
    # Groups of 2, a buffer of 6 episodes (3 groups). Groups complete in the order 0, 1, 2, 3, 4:
    # after 3 the buffer holds 2 groups' worth of room less than needed, so the oldest (0) goes,
    # then 1 when 4 arrives. Completion order, not start order, decides which group is oldest.
    core = Scheduler(max_staleness=99, buffer_capacity=6, on_full="drop_oldest", group_size=2,
                     groups_per_update=1, slots=10)
    requests = [core.start(None, version=0, now=0.0, env_seeds=[0, 0]) for _ in range(5)]
    order = [2, 0, 4, 1, 3]  # the requests' completion order
    kept = []
    for t, i in enumerate(order):
        assert _finish(core, requests[i], now=float(t)) == "buffered"
        kept.append(requests[i].id)
        kept = kept[-3:]  # by hand: at most 3 groups of 2 fit in 6 slots; the first completed leave first
        assert [r.id for r in core.buffer] == kept, t
    assert [r.id for r in core.buffer] == [4, 1, 3]
    assert core.state.dropped == 4  # groups 2 and 0, 2 episodes each
    # Every slot came back: 10 taken by 5 groups of 2, each returned when its episode finished.
    assert core.free_slots == 10


def test_drop_oldest_with_groups_of_one_drops_one_per_arrival():
    # Groups of 1 in a buffer of 3: only one group is dropped per arrival, the oldest.
    core = Scheduler(max_staleness=99, buffer_capacity=3, on_full="drop_oldest", group_size=1,
                     groups_per_update=1, slots=8)
    requests = [core.start(None, version=v, now=0.0, env_seeds=[0]) for v in range(6)]
    for t, r in enumerate(requests):
        _finish(core, r, float(t))
    assert [r.id for r in core.buffer] == [3, 4, 5]
    assert core.state.dropped == 3
    # The learner then takes the remaining ones in completion order.
    assert [r.id for r in core.select(learner_version=0, now=10.0)] == [3]


# -- 3. the update-count checkpoint trigger ---------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 25])
def test_checkpoint_trigger_is_due_at_exactly_n_updates(n):
    every = CheckpointEvery(updates=n, sim_minutes=None)
    for last in (0, 7):
        assert not every.due(updates=last + n - 1, now=1e9, last_updates=last, last_now=0.0)
        assert every.due(updates=last + n, now=0.0, last_updates=last, last_now=0.0)
        assert every.due(updates=last + n + 1, now=0.0, last_updates=last, last_now=0.0)
    # The time trigger: due at exactly sim_minutes x 60 s after the last checkpoint.
    timed = CheckpointEvery(updates=None, sim_minutes=1.5)
    assert not timed.due(updates=10**6, now=100.0 + 89.999, last_updates=0, last_now=100.0)
    assert timed.due(updates=0, now=100.0 + 90.0, last_updates=0, last_now=100.0)
    both = CheckpointEvery(updates=n, sim_minutes=1.5)
    assert both.due(updates=n, now=0.0, last_updates=0, last_now=0.0)
    assert both.due(updates=0, now=90.0, last_updates=0, last_now=0.0)
    assert not both.due(updates=n - 1, now=89.0, last_updates=0, last_now=0.0)


# -- 4. clean_point's boundary ---------------------------------------------------------------------


def _fake_runtime(*, G: int, free: int, now: float, started: int, duration: float = 100.0):
    core = Scheduler(max_staleness=0, buffer_capacity=64, on_full="block", group_size=G, groups_per_update=2,
                     slots=16)
    core.free_slots = free
    core.state.started = started
    core.state.now = now
    return SimpleNamespace(core=core, state=core.state, agent=SimpleNamespace(group_size=G),
                           scenario=SimpleNamespace(duration_s=duration))


@pytest.mark.parametrize("G", [1, 4])
def test_clean_point_boundary_is_exactly_a_free_group_of_slots(G):
    # Admission with max_staleness 0, 2 groups per update and 0 updates: (0 + 0 + 1) x 2 = 2 requests.
    # With one request started a second is admitted; the slots decide: G free slots start one.
    assert not ckpt.clean_point(_fake_runtime(G=G, free=G, now=10.0, started=1))
    assert not ckpt.clean_point(_fake_runtime(G=G, free=G + 1, now=10.0, started=1))
    assert ckpt.clean_point(_fake_runtime(G=G, free=G - 1, now=10.0, started=1))
    # Admission closed (2 started, the limit) or the scenario over: nothing would start.
    assert ckpt.clean_point(_fake_runtime(G=G, free=G, now=10.0, started=2))
    assert ckpt.clean_point(_fake_runtime(G=G, free=G, now=100.0, started=1))
    assert not ckpt.clean_point(_fake_runtime(G=G, free=G, now=99.999, started=1))


# -- 6. avg@k weighs problems, not samples ---------------------------------------------------------


def test_avg_at_k_weighs_problems_not_samples():
    # Problem a: 1 of 1 correct (1.0); problem b: 1 of 4 (0.25). Per problem: (1 + 0.25) / 2 = 0.625.
    # Weighted by samples it would be 2 / 5 = 0.4.
    assert avg_at_k([1, 1], [1, 4]) == pytest.approx(0.625)
    # Three problems with 2, 3 and 6 samples: (1/2 + 3/3 + 1/6) / 3 = (3 + 6 + 1) / 18 = 10 / 18.
    assert avg_at_k([1, 3, 1], [2, 3, 6]) == pytest.approx(10 / 18)
    summary = summarize_scores({"a": [1.0], "b": [0.0, 1.0, 0.0, 0.0]})
    assert summary["accuracy"] == pytest.approx(0.625)
    assert summary["n"] == 5 and summary["problems"] == 2


# -- 7. gradual drift -------------------------------------------------------------------------------


class _FixedUniform:
    """A numpy Generator whose ``random()`` returns ``u`` (the draw that decides the mixture);
    every other draw comes from a real generator."""

    def __init__(self, u: float, seed: int = 0):
        self.u, self._rng = u, np.random.default_rng(seed)

    def random(self, *args, **kwargs):
        return self.u

    def __getattr__(self, name):
        return getattr(self._rng, name)


def _drift_scenario(transition_h: float):
    from sao_env.scenario import Scenario

    config = _shrunk_config("grpo", 0, (*LONGER, f"env.phases.1.transition_h={transition_h}"))  # phases of 36 s
    return Scenario(config.env, seed=0)


def test_gradual_drift_mixes_the_new_phase_in_linearly():
    """Phase 1 blends in over ``transition_h``: at a fraction f of the transition the new phase is
    served with probability f (the old one's weight fades out linearly, PhaseSpec.transition_h)."""
    scenario = _drift_scenario(0.005)
    old, new = (p.name for p in scenario.spec.phases[:2])
    start, T = scenario.windows[1].start_s, 0.005 * 3600  # phase 1 runs from 36 s to 72 s; T = 18 s
    assert (start, T, scenario.windows[1].end_s) == (36.0, 18.0, 72.0)

    def phase(t, u):
        return scenario.next_task(t, _FixedUniform(u), index=0).metadata["phase"]

    # The uniform draw u picks the new phase iff u < f (probability f).
    for f in (0.1, 0.25, 0.5, 0.75, 0.9):
        t = start + f * T
        for u in (0.0, 0.05, 0.2, 0.3, 0.45, 0.55, 0.7, 0.8, 0.85, 0.95, 0.999):
            assert phase(t, u) == (new if u < f else old), (f, u)
    # Before the drift: the old phase only; from the end of the transition on: the new one only.
    assert {phase(start - 1.0, u) for u in (0.0, 0.5, 0.999)} == {old}
    assert {phase(start + T, u) for u in (0.0, 0.5, 0.999)} == {new}
    assert {phase(start + T + 5.0, u) for u in (0.0, 0.999)} == {new}

    # Real draws follow the same weights: at f = 0.2 and f = 0.8, 2000 draws each.
    rng = np.random.default_rng(123)
    shares = []
    for f in (0.2, 0.8):
        draws = [scenario.next_task(start + f * T, rng, index=i).metadata["phase"] for i in range(2000)]
        shares.append(draws.count(new) / len(draws))
    # Binomial(2000, f): standard deviation <= 0.009, so 0.03 is more than 3 of them.
    assert shares[0] == pytest.approx(0.2, abs=0.03)
    assert shares[1] == pytest.approx(0.8, abs=0.03)


def test_an_abrupt_drift_switches_at_the_phase_start():
    scenario = _drift_scenario(0.0)
    old, new = (p.name for p in scenario.spec.phases[:2])
    rng = np.random.default_rng(0)
    assert {scenario.next_task(35.999, rng, index=i).metadata["phase"] for i in range(50)} == {old}
    assert {scenario.next_task(36.0, rng, index=i).metadata["phase"] for i in range(50)} == {new}


# -- 2. a threads worker tags episodes with the published version ------------------------------------


def test_threads_worker_tags_episodes_with_the_published_version():
    """While the learner updates, its version is one ahead of the weights the workers read. Each update
    here sleeps after the optimizer step (the version already bumped, the weights not yet published), so
    workers start requests in that window; every request and episode must carry the version of the
    weights it was played with, which is the one published, not the learner's."""
    from sao_env.experiment import build_agent
    from sao_env.runtime.threads import LocalWorkers, ThreadsRuntime
    from sao_env.scenario import Scenario

    config = _shrunk_config("grpo", 0, ("agent.runtime.backend=threads", "agent.runtime.time_scale=0.1",
                                        "agent.runtime.max_staleness=4",
                                        *(f"env.phases.{i}.duration_h=0.004" for i in range(3))))
    scenario = Scenario(config.env, seed=0)
    agent = build_agent(config, scenario, show_progress=False)
    real_update = agent.update

    def slow_update(episodes):
        out = real_update(episodes)
        time.sleep(0.3)  # the learner is at v + 1, the workers still read v
        return out

    agent.update = slow_update
    published: dict[int, object] = {}
    played: list[tuple[int, bool, list[int]]] = []

    class RecordingWorkers(LocalWorkers):
        def publish(self, version, weights):
            out = super().publish(version, weights)
            published[version] = out
            return out

        def play(self, w, requests, version, weights, members):
            played.append((version, weights is published.get(version), [r.id for r in requests]))
            return super().play(w, requests, version, weights, members)

    class Runtime(ThreadsRuntime):
        workers_class = RecordingWorkers

    episodes = []
    runtime = Runtime(scenario, agent, config.agent.runtime, seed=0, on_update=lambda record: None,
                      on_episode=lambda episode, version: episodes.append(episode),
                      on_eval=lambda t, view: None, eval_times=[])
    starts: list[tuple[int, int, int]] = []
    real_start = runtime.core.start

    def start(task, version, now, env_seeds):  # called under the runtime's lock
        starts.append((version, runtime.deployed_version, runtime.agent.version))
        return real_start(task, version, now, env_seeds)

    runtime.core.start = start
    state = runtime.run()
    assert state.updates >= 2
    assert any(learner != deployed for _, deployed, learner in starts), \
        "no request started while an update was in progress: the case tests nothing"
    assert [version for version, _, _ in starts] == [deployed for _, deployed, _ in starts]
    assert played and all(same for _, same, _ in played), "a batch was tagged with a version it was not played with"
    version_of = {rid: version for version, _, ids in played for rid in ids}
    assert episodes and all(e.version == version_of[e.group_id] for e in episodes)
    assert max(e.version for e in episodes) >= 1


# -- 5. a resume resumes (and 3., the trigger in a run) ------------------------------------------------


class _Stop(Exception):
    """Raised after the second checkpoint: the run ends there as if killed."""


CODE = {"commit": "planted-bugs-test", "dirty": False}


def test_a_resumed_run_continues_from_its_checkpoint(tmp_path, monkeypatch, capsys, shrunk_run):
    from sao_env import experiment
    from sao_env.agents import ALGORITHMS

    config = _shrunk_config("grpo")
    out = tmp_path / "run"
    write, clean_point = ckpt.write, ckpt.clean_point
    writes: list[int] = []
    checks: list[tuple[int, bool]] = []

    def write_then_stop(folder, index, state):
        path = write(folder, index, state)
        writes.append(state["runtime"]["state"].updates)
        if len(writes) == 2:
            raise _Stop
        return path

    def recording_clean_point(runtime):
        checks.append((runtime.state.updates, clean_point(runtime)))
        return checks[-1][1]

    monkeypatch.setattr(ckpt, "write", write_then_stop)
    monkeypatch.setattr(ckpt, "clean_point", recording_clean_point)
    every = CheckpointEvery(updates=2)
    with pytest.raises(_Stop):
        experiment.run_experiment(config, out, show_progress=False, save_checkpoint=False, code=CODE,
                                  checkpoint_every=every)
    # The trigger, by a reference loop: a clean point is looked for from exactly 2 updates after the
    # last checkpoint on (updates grow by one, and every event is a chance), and the first clean one
    # is taken.
    last, expected_writes, first_after_write = 0, [], True
    for updates, clean in checks:
        assert updates - last >= 2, (updates, last)
        if first_after_write:
            assert updates == last + 2, (updates, last)
            first_after_write = False
        if clean:
            expected_writes.append(updates)
            last, first_after_write = updates, True
    assert writes == expected_writes[:2] and len(writes) == 2

    newest = ckpt.checkpoints(out / ckpt.FOLDER)[0]
    saved = ckpt.decode(newest.read_bytes())
    at_s, at_update = saved["sim_time_s"], saved["runtime"]["state"].updates
    assert at_update == writes[-1] and at_s > 0
    assert not (out / "summary.json").exists()

    monkeypatch.setattr(ckpt, "write", write)
    monkeypatch.setattr(ckpt, "clean_point", clean_point)
    cls = ALGORITHMS[config.agent.algorithm]
    update, calls = cls.update, []
    monkeypatch.setattr(cls, "update", lambda self, episodes: (calls.append(len(episodes)), update(self, episodes))[1])
    capsys.readouterr()
    experiment.run_experiment(config, out, show_progress=False, save_checkpoint=False, code=CODE,
                              checkpoint_every=every, resume=True)
    err = capsys.readouterr().err
    assert f"resuming {out} from simulated {at_s / 3600:.3f} h (update {at_update})" in err
    timings = json.loads((out / "timings.json").read_text())
    assert timings["resumed_at_sim_s"] == at_s
    lines = [r for r in read_jsonl(out / "metrics.jsonl") if r.get("kind") != "eval"]
    assert [r["update"] for r in lines] == list(range(1, len(lines) + 1))
    assert len(calls) == len(lines) - at_update  # only the updates after the checkpoint were computed
    # And the logs are an uninterrupted run's.
    reference, _ = shrunk_run("grpo")
    for name in ("metrics.jsonl", "evals.jsonl", "episodes.jsonl"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
