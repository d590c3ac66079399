"""The scheduling core's boundaries, exactly, for group sizes 1 and 4 (sao_env/runtime/core.py).

A small discrete-event driver plays the role of a backend: heavy-tailed episode durations, a
learner whose update takes time, weights published when it ends. At every event it checks the
admission limit, the buffer's capacity and the accounting identity; the runs are set up so that
each bound is reached (an off-by-one on either side fails), and with groups of 4 a drop counted
in groups rather than episodes breaks the identity.
"""

from __future__ import annotations

import heapq
import pickle
from dataclasses import dataclass

import numpy as np
import pytest

from sao_env.runtime.core import Request, Scheduler


@dataclass
class FakeEpisode:
    version: int
    reward: float = 0.0
    num_action_tokens: int = 1
    turns: int = 1


@dataclass
class Trace:
    max_started_minus_limit: int
    max_buffered: int
    max_buffered_on_arrival: int
    """Buffered episodes right after a completed group entered the buffer directly (not via unblocking)."""
    ever_blocked: bool
    staleness: list[int]
    scheduler: Scheduler


def drive(*, G: int, groups_per_update: int, slots: int, capacity: int, on_full: str, max_staleness: int,
          update_s: float, seed: int = 0, horizon: float = 400.0) -> Trace:
    """Run the core against lognormal episode durations (median 1 s, sigma 1.2) until ``horizon``."""
    core = Scheduler(max_staleness=max_staleness, buffer_capacity=capacity, on_full=on_full, group_size=G,
                     groups_per_update=groups_per_update, slots=slots)
    rng = np.random.default_rng(seed)
    events: list = []
    seq = 0
    version, busy, now = 0, False, 0.0
    worst, max_buffered, on_arrival, ever_blocked, staleness = -10**9, 0, 0, False, []

    def check() -> None:
        nonlocal worst, max_buffered, ever_blocked
        worst = max(worst, core.state.started - core.admission_limit)
        max_buffered = max(max_buffered, core.buffered_episodes)
        assert core.buffered_episodes <= capacity
        ever_blocked |= bool(core.blocked)
        s = core.state
        assert s.completed == s.consumed + s.dropped + core.buffered_episodes + core.blocked_episodes \
            + core.partial_episodes, "accounting identity broken"
        assert core.in_flight == sum(r.pending for r in core.running.values())
        assert core.free_slots >= 0

    while now < horizon:
        while core.may_start():
            request = core.start(task=None, version=version, now=now, env_seeds=[0] * G)
            for i in range(G):
                heapq.heappush(events, (now + float(rng.lognormal(0.0, 1.2)), seq, "episode", (request, i)))
                seq += 1
            check()
        if not busy:
            batch = core.select(version, now)
            if batch is not None:
                core.take(batch, now)
                episodes = [e for r in batch for e in r.group]
                ages = [version - e.version for e in episodes]
                core.consumed(episodes, ages)
                staleness += ages
                busy = True
                heapq.heappush(events, (now + update_s, seq, "update", None))
                seq += 1
                check()
        now, _, kind, payload = heapq.heappop(events)
        if kind == "episode":
            request, i = payload
            dropped = core.state.dropped
            if core.episode_done(request, i, FakeEpisode(version=request.version), now) == "buffered":
                on_arrival = max(on_arrival, core.buffered_episodes)
            if core.state.dropped > dropped:  # only as many groups as needed: one fewer would overflow
                assert core.buffered_episodes + G > capacity
        else:
            busy = False
            version += 1
            core.state.updates += 1
            core.unblock(now)
        check()
    return Trace(worst, max_buffered, on_arrival, ever_blocked, staleness, core)


GROUPS = [pytest.param(1, 4, id="G=1"), pytest.param(4, 1, id="G=4")]


@pytest.mark.parametrize("G,groups_per_update", GROUPS)
@pytest.mark.parametrize("max_staleness", [0, 1, 3])
def test_admission_limit_is_reached_and_never_exceeded(G, groups_per_update, max_staleness):
    # Many slots and a fast learner: admission, not the slots, is what holds requests back.
    trace = drive(G=G, groups_per_update=groups_per_update, slots=64, capacity=64, on_full="block",
                  max_staleness=max_staleness, update_s=0.2)
    assert trace.max_started_minus_limit == 0
    assert trace.scheduler.state.updates >= 20
    assert max(trace.staleness) <= max_staleness
    if max_staleness == 0:
        assert set(trace.staleness) == {0}
    else:
        assert max(trace.staleness) > 0, "never asynchronous: the staleness bound was not exercised"


@pytest.mark.parametrize("G,groups_per_update", GROUPS)
def test_block_mode_fills_the_buffer_exactly_and_blocks_producers(G, groups_per_update):
    # A slow learner and a loose staleness bound: producers outrun the learner and must block.
    trace = drive(G=G, groups_per_update=groups_per_update, slots=8, capacity=8, on_full="block",
                  max_staleness=50, update_s=6.0)
    state = trace.scheduler.state
    assert trace.max_buffered == 8
    assert trace.max_buffered_on_arrival == 8  # a group that fits exactly is buffered, not blocked
    assert trace.ever_blocked
    assert state.blocked_s > 0
    assert state.dropped == 0
    assert max(trace.staleness) <= 50


@pytest.mark.parametrize("G,groups_per_update", GROUPS)
def test_drop_oldest_fills_the_buffer_exactly_and_counts_episodes(G, groups_per_update):
    trace = drive(G=G, groups_per_update=groups_per_update, slots=8, capacity=8, on_full="drop_oldest",
                  max_staleness=50, update_s=6.0)
    state = trace.scheduler.state
    assert trace.max_buffered == trace.max_buffered_on_arrival == 8
    assert not trace.ever_blocked
    assert state.dropped > 0 and state.dropped % G == 0
    assert state.blocked_s == 0


def test_learner_waits_for_a_running_straggler_instead_of_exceeding_the_bound():
    # max_staleness=1, learner at version 1: after the update the actor is at 2, so a group of
    # version 0 (2 - 0 = 2 > 1) must join this update; while it runs, the learner waits.
    core = Scheduler(max_staleness=1, buffer_capacity=16, on_full="block", group_size=1, groups_per_update=2, slots=4)
    old = core.start(None, version=0, now=0.0, env_seeds=[0])
    core.state.updates = 1
    fresh = [core.start(None, version=1, now=1.0, env_seeds=[0]) for _ in range(2)]
    for r in fresh:
        core.episode_done(r, 0, FakeEpisode(1), now=2.0)
    assert core.select(learner_version=1, now=2.0) is None
    assert core.select(learner_version=1, now=3.0) is None
    core.episode_done(old, 0, FakeEpisode(0), now=5.0)
    batch = core.select(learner_version=1, now=5.0)
    assert batch == [old, fresh[0]]  # the straggler first, then fresh ones up to groups_per_update
    assert core.state.learner_wait_s == pytest.approx(3.0)  # waited from t=2 to t=5


def test_blocked_group_holds_its_producers_last_slot():
    # G=2, capacity 2: the second complete group blocks, keeping one of its 2 slots until it is buffered.
    core = Scheduler(max_staleness=9, buffer_capacity=2, on_full="block", group_size=2, groups_per_update=1, slots=4)
    a, b = core.start(None, 0, 0.0, [0, 0]), core.start(None, 0, 0.0, [0, 0])
    assert core.free_slots == 0
    for i in range(2):
        core.episode_done(a, i, FakeEpisode(0), 1.0)
    assert core.free_slots == 2
    assert core.episode_done(b, 0, FakeEpisode(0), 2.0) == "running"
    assert core.episode_done(b, 1, FakeEpisode(0), 2.0) == "blocked"
    assert core.free_slots == 3
    core.take(core.select(0, 4.0), 4.0)
    assert core.buffer == [b] and core.free_slots == 4
    assert core.state.blocked_s == pytest.approx(2.0)


def test_the_core_pickles_mid_run():
    trace = drive(G=4, groups_per_update=1, slots=8, capacity=8, on_full="block", max_staleness=2, update_s=3.0,
                  horizon=50.0)
    core = trace.scheduler
    copy = pickle.loads(pickle.dumps(core))
    assert copy.state == core.state
    assert [r.id for r in copy.buffer] == [r.id for r in core.buffer]
    assert sorted(copy.running) == sorted(core.running)
    assert isinstance(next(iter(copy.running.values()), Request(0, None, 0, [], 0)), Request)
