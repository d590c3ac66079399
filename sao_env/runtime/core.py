"""The scheduling core every backend shares: admission, the bounded buffer, the learner's batch.

Only the clock and the workers differ between ``sim``, ``threads`` and ``ray``; what may start,
where a finished group goes and what the learner consumes next is decided here, by one object
that holds plain data (ints, lists, dicts of requests) so a runtime can be checkpointed by
pickling it.

The rules (AReaL, arXiv 2505.24298, Sec. 5; SAO, arXiv 2607.07508, Sec. 4):

* Admission: a request (one group of ``group_size`` episodes on one task) may start only while
  ``started < (updates + max_staleness + 1) * groups_per_update`` and ``group_size`` rollout
  slots are free. ``max_staleness=0`` is synchronous on-policy.
* Buffer: a completed group enters the buffer in completion order while the buffer holds at
  most ``buffer_capacity`` episodes. When it would overflow, the producer blocks (``block``; its
  last slot stays taken until the group is buffered or consumed) or the oldest groups are
  dropped and their *episodes* counted (``drop_oldest``).
* Learner: an update consumes ``groups_per_update`` groups in completion order, stragglers first:
  every complete group generated before ``version + 1 - max_staleness`` joins the batch, and if
  such a group is still running the learner waits for it, so no consumed episode lags more than
  ``max_staleness`` versions behind the learner.
* Accounting: ``completed = consumed + dropped + buffered + blocked + partial`` (in episodes;
  ``partial`` = finished episodes of groups still running), at every moment.
* Completion-order bias (``completion_order_bias``): an update's batch is taken in completion
  order; the batch start order would have formed instead is the same number of groups, the
  oldest started among those not yet consumed. The difference of their reward means is what
  completion order did to the learner's sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from sao_env.types import Episode


@dataclass
class Request:
    """One group in flight: a task played ``group_size`` times, started under policy ``version``."""

    id: int
    task: Any
    version: int
    group: list[Episode | None]
    pending: int
    start: float = 0.0
    env_seeds: list[int] = field(default_factory=list)
    row_keys: list[int] = field(default_factory=list)
    earliest_end: float = 0.0
    """No episode of the request can complete before this (lower bound of its duration; ``sim`` only)."""
    blocked_since: float | None = None


@dataclass
class RunState:
    """Counters a runtime reports (in episodes unless named otherwise); ``now`` is its clock in seconds."""

    now: float = 0.0
    started: int = 0
    """Requests (groups) started."""
    completed: int = 0
    consumed: int = 0
    dropped: int = 0
    updates: int = 0
    blocked_s: float = 0.0
    learner_wait_s: float = 0.0
    staleness: list[int] = field(default_factory=list)
    """Per consumed episode: learner version at the update minus the episode's (oldest) version."""


class Scheduler:
    """Admission control, the bounded buffer and the learner's batch selection (module docstring).

    The caller owns the clock: every method that records a time takes ``now``. It is not
    thread-safe; concurrent backends call it under one lock.
    """

    def __init__(self, *, max_staleness: int, buffer_capacity: int, on_full: str, group_size: int,
                 groups_per_update: int, slots: int):
        self.max_staleness, self.capacity, self.on_full = max_staleness, buffer_capacity, on_full
        self.group_size, self.groups_per_update = group_size, groups_per_update
        self.free_slots = slots
        self.state = RunState()
        self.buffer: list[Request] = []
        self.blocked: list[Request] = []
        self.running: dict[int, Request] = {}
        self.next_id = 0
        self.waiting_since: float | None = None

    # -- admission ----------------------------------------------------------------------------
    @property
    def admission_limit(self) -> int:
        return (self.state.updates + self.max_staleness + 1) * self.groups_per_update

    def admitted(self) -> bool:
        return self.state.started < self.admission_limit

    def may_start(self) -> bool:
        """A request may start now: its group's slots are free and admission allows it."""
        return self.free_slots >= self.group_size and self.admitted()

    def start(self, task, version: int, now: float, env_seeds: list[int]) -> Request:
        """Register a started request (the caller checked ``may_start``); takes ``group_size`` slots."""
        G = self.group_size
        self.free_slots -= G
        self.state.started += 1
        request = Request(id=self.next_id, task=task, version=version, group=[None] * G, pending=G, start=now,
                          env_seeds=list(env_seeds))
        self.next_id += 1
        self.running[request.id] = request
        return request

    @property
    def in_flight(self) -> int:
        """Episodes started and not yet completed."""
        return self.state.started * self.group_size - self.state.completed

    # -- the buffer ---------------------------------------------------------------------------
    def episode_done(self, request: Request, i: int, episode: Episode, now: float) -> str:
        """Record episode ``i`` of ``request``; returns where its group stands: ``running`` (others
        pending), ``buffered`` or ``blocked`` (the producer waits; its last slot stays taken)."""
        request.group[i] = episode
        request.pending -= 1
        self.state.completed += 1
        if request.pending:
            self.free_slots += 1
            return "running"
        del self.running[request.id]
        if self.buffered_episodes + len(request.group) > self.capacity:
            if self.on_full == "block" and self.buffer:
                request.blocked_since = now
                self.blocked.append(request)
                return "blocked"
            while self.buffer and self.buffered_episodes + len(request.group) > self.capacity:
                dropped = self.buffer.pop(0)
                self.state.dropped += len(dropped.group)
        self.free_slots += 1
        self.buffer.append(request)
        return "buffered"

    @property
    def buffered_episodes(self) -> int:
        return sum(len(r.group) for r in self.buffer)

    @property
    def blocked_episodes(self) -> int:
        return sum(len(r.group) for r in self.blocked)

    @property
    def partial_episodes(self) -> int:
        """Finished episodes of groups still running."""
        return sum(len(r.group) - r.pending for r in self.running.values())

    def unblock(self, now: float) -> list[Request]:
        """Move blocked groups into the buffer, oldest first, while they fit; returns those moved."""
        moved = []
        while self.blocked and self.buffered_episodes + len(self.blocked[0].group) <= self.capacity:
            request = self.blocked.pop(0)
            self.state.blocked_s += now - request.blocked_since
            self.buffer.append(request)
            self.free_slots += 1
            moved.append(request)
        return moved

    # -- the learner --------------------------------------------------------------------------
    def select(self, learner_version: int, now: float) -> list[Request] | None:
        """The next update's groups, or None: fewer than ``groups_per_update`` are ready, or a running
        group would be too stale after this update (the learner waits for it; ``learner_wait_s``).

        After the update the actor is at ``learner_version + 1``, so a group generated before
        ``learner_version + 1 - max_staleness`` must be consumed now: every such complete group joins
        the batch (which may then exceed ``groups_per_update``).
        """
        need = self.groups_per_update
        ready = self.buffer + self.blocked
        if len(ready) < need:
            return None
        floor = learner_version + 1 - self.max_staleness
        urgent = [r for r in ready if r.version < floor]
        requests = urgent + [r for r in ready if r.version >= floor][: max(need - len(urgent), 0)]
        if any(r.version < floor for r in self.running.values()):
            if self.waiting_since is None:
                self.waiting_since = now
            return None
        if self.waiting_since is not None:
            self.state.learner_wait_s += now - self.waiting_since
            self.waiting_since = None
        return requests

    def take(self, requests: list[Request], now: float) -> list[Request]:
        """Remove the selected groups from the buffer (a blocked one frees its producer's slot), then
        let blocked groups in; returns the groups unblocked."""
        for r in requests:
            if r in self.blocked:
                self.blocked.remove(r)
                self.state.blocked_s += now - r.blocked_since
                self.free_slots += 1
            else:
                self.buffer.remove(r)
        return self.unblock(now)

    def consumed(self, episodes: list[Episode], staleness: list[int]) -> None:
        """Count an update's episodes as consumed, with their staleness."""
        self.state.consumed += len(episodes)
        self.state.staleness.extend(staleness)

    def async_metrics(self, staleness: list[int]) -> dict[str, float]:
        """The ``async/*`` metrics of one update (docs/metrics.md), the same for every backend."""
        return {
            "async/staleness_mean": float(np.mean(staleness)),
            "async/staleness_p95": float(np.percentile(staleness, 95)),
            "async/staleness_max": float(max(staleness)),
            "async/buffer_size": float(self.buffered_episodes),
            "async/buffer_blocked_s": self.state.blocked_s,
            "async/learner_wait_s": self.state.learner_wait_s,
            "async/dropped": float(self.state.dropped),
            "async/in_flight": float(self.in_flight),
            **staleness_shares(staleness),
        }


STALENESS_BINS: tuple[tuple[int, int | None], ...] = ((0, 0), (1, 1), (2, 3), (4, 7), (8, 15), (16, None))
"""Staleness bins (inclusive; None = no upper end) of the per-update histogram ``async/staleness_frac_*``."""


def staleness_shares(staleness: Sequence[int]) -> dict[str, float]:
    """Per-update staleness histogram: the share of the batch's episodes in each of ``STALENESS_BINS``,
    keys ``async/staleness_frac_0``, ``_1``, ``_2_3``, ``_4_7``, ``_8_15``, ``_16_up`` (they sum to 1)."""
    n = len(staleness)
    out = {}
    for low, high in STALENESS_BINS:
        name = str(low) if low == high else f"{low}_{'up' if high is None else high}"
        count = sum(1 for s in staleness if s >= low and (high is None or s <= high))
        out[f"async/staleness_frac_{name}"] = count / n
    return out


def completion_order_bias(batch: Sequence[Request], pending: Sequence[Request],
                          rewards: Callable[[Request], list[float]]) -> float:
    """Reward mean of the update's batch minus that of the batch start order would have formed.

    ``pending`` holds every request started and not yet consumed when the batch is formed (the
    batch included, finished or not); the start-order batch is its ``len(batch)`` lowest-id (oldest
    started) requests. ``rewards(request)`` gives the rewards of all its episodes, also of those not
    yet finished (``sim`` knows them once played). Exactly 0 whenever completion order keeps start
    order (equal durations, or a synchronous run, where ``pending`` is the batch); positive when fast
    episodes succeed more often. Means are exactly rounded sums (``math.fsum``): the same episodes
    in another order give exactly 0.
    """
    start_order = sorted(pending, key=lambda r: r.id)[: len(batch)]
    taken = [x for r in batch for x in rewards(r)]
    waited = [x for r in start_order for x in rewards(r)]
    return math.fsum(taken) / len(taken) - math.fsum(waited) / len(waited)


def train_metrics(episodes: list[Episode]) -> dict[str, float]:
    """The ``train/*`` metrics of one update's batch."""
    return {
        "train/reward_mean": float(np.mean([e.reward for e in episodes])),
        "train/response_tokens": float(np.mean([e.num_action_tokens for e in episodes])),
        "train/turns": float(np.mean([e.turns for e in episodes])),
    }
