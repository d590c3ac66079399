"""The ``sim`` backend: a discrete-event engine in simulated time, deterministic for a seed.

N rollout slots and one learner share a simulated clock. A free slot takes the scenario's next
task at the current time, generates with the weights deployed at that time (recording each
token's log-probability and version), is graded by the environment, and completes after the
latency model's duration. Completed groups enter a bounded buffer in completion order; the
learner consumes ``groups_per_update`` of them per update, and an update costs simulated time
before its weights are deployed to the rollout slots (version + 1).

Admission control (as in AReaL): a request may start only while
``started_requests < (learner_updates + max_staleness + 1) * groups_per_update``, so
``max_staleness=0`` is synchronous on-policy. Because latencies are heavy-tailed, admission alone
does not bound staleness; the learner also consumes stragglers first and waits for a running one
rather than let any episode be consumed more than ``max_staleness`` versions late (slow, hard
episodes are never starved or dropped; the wait is reported as ``async/learner_wait_s``). The buffer never drops silently: when full, the producer blocks (default) or, if
asked, the oldest group is dropped and counted.
"""

from __future__ import annotations

import copy
import heapq
import itertools
import time
from dataclasses import dataclass, field
from typing import Callable, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sao_env.agents.base import Agent
from sao_env.errors import UserError
from sao_env.policy.generate import row_key
from sao_env.runtime.rollout import play
from sao_env.scenario import Scenario
from sao_env.types import Episode


class RuntimeSpec(BaseModel):
    """How rollouts and the learner are scheduled (agents/*.yaml ``runtime:``)."""

    model_config = ConfigDict(extra="forbid")

    backend: Literal["sim"] = "sim"
    """Engine: ``sim`` (discrete-event, simulated clock). ``threads`` and ``ray`` are planned."""
    max_staleness: int = Field(4, ge=0)
    """Learner updates an episode may lag behind; 0 = synchronous on-policy."""
    buffer_capacity: int = Field(64, ge=1)
    """Completed episodes the buffer holds before producers block."""
    on_full: Literal["block", "drop_oldest"] = "block"
    """Full buffer: block the producer (default) or drop the oldest group (counted and logged)."""
    temperature: float = Field(1.0, gt=0)
    """Rollout sampling temperature; must be 1 for training (see ``_untempered``)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Rollout nucleus sampling; must be 1 for training (see ``_untempered``)."""
    batch_generation: bool = True
    """Generate the requests started under the same weights together, as one batch. Each episode
    samples from its own stream (seed, request, member), so the run equals one-request-at-a-time
    generation up to float rounding between batch shapes (tests/test_batched_generation.py)."""

    @model_validator(mode="after")
    def _untempered(self) -> "RuntimeSpec":
        """The learner's ratios pi_theta / pi_rollout compare against the plain softmax; rollouts drawn
        from a tempered or truncated distribution would bias every ratio, so training refuses them."""
        if self.temperature != 1.0 or self.top_p != 1.0:
            raise ValueError(f"temperature={self.temperature} / top_p={self.top_p}: rollouts for training must "
                             f"sample the policy itself (1.0 / 1.0), or every importance ratio is biased")
        return self


@dataclass
class _Request:
    id: int
    task: object
    version: int
    group: list[Episode | None]
    pending: int
    start: float = 0.0
    env_seeds: list[int] = field(default_factory=list)
    row_keys: list[int] = field(default_factory=list)
    earliest_end: float = 0.0
    """No episode of the request can complete before this (lower bound of its duration)."""
    blocked_since: float | None = None


@dataclass
class RunState:
    """Counters the engine reports; ``episodes`` are those consumed by the learner."""

    now: float = 0.0
    started: int = 0
    completed: int = 0
    consumed: int = 0
    dropped: int = 0
    updates: int = 0
    blocked_s: float = 0.0
    learner_wait_s: float = 0.0
    staleness: list[int] = field(default_factory=list)


class SimRuntime:
    """Runs one agent on one scenario until the scenario's simulated duration has passed."""

    def __init__(
        self,
        scenario: Scenario,
        agent: Agent,
        spec: RuntimeSpec,
        *,
        seed: int,
        on_update: Callable[[dict], None],
        on_episode: Callable[[Episode, int], None],
        on_eval: Callable[[float, "SimRuntime"], None],
        eval_times: list[float],
    ):
        self.scenario, self.agent, self.spec, self.seed = scenario, agent, spec, seed
        self.tokenizer = agent.tokenizer
        self.deployed = copy.deepcopy(agent.policy).eval()
        self.deployed_version = agent.version
        for p in self.deployed.parameters():
            p.requires_grad_(False)
        self.on_update, self.on_episode, self.on_eval = on_update, on_episode, on_eval
        self.task_rng = np.random.default_rng([seed, 1])
        self.env_rng = np.random.default_rng([seed, 2])
        self.unplayed: list[_Request] = []
        self.state = RunState()
        self.free_slots = scenario.spec.rollout_slots
        if agent.group_size > self.free_slots:
            raise UserError(f"group size {agent.group_size} exceeds the scenario's {self.free_slots} rollout slots")
        if spec.buffer_capacity < agent.group_size * agent.groups_per_update:
            raise UserError(f"buffer_capacity {spec.buffer_capacity} is smaller than one update's batch "
                            f"({agent.groups_per_update} groups of {agent.group_size} episodes)")
        self.buffer: list[_Request] = []
        self.blocked: list[_Request] = []
        self.running: dict[int, _Request] = {}
        self.learner_busy = False
        self.waiting_since: float | None = None
        self._events: list = []
        self._seq = itertools.count()
        self._ids = itertools.count()
        self._evals = sorted(eval_times)
        """Evaluation times, kept apart from the event queue: they never decide when waiting requests
        are played, so the training run is the same whatever the evaluation schedule."""
        self.wall = {"generate_s": 0.0, "update_s": 0.0, "eval_s": 0.0, "generate_batches": 0, "generate_rows": 0}
        """Wall-clock bookkeeping (timings.json); the simulation never reads it."""

    # -- event plumbing ---------------------------------------------------------------------
    def _push(self, t: float, kind: str, payload) -> None:
        heapq.heappush(self._events, (t, next(self._seq), kind, payload))

    def run(self, progress: Callable[[RunState], None] | None = None) -> RunState:
        end = self.scenario.duration_s
        self._dispatch()
        while self._events or self.unplayed or self._evals:
            if self.unplayed and (not self._events or self._events[0][2] == "update_done"
                                  or self._events[0][0] >= min(r.earliest_end for r in self.unplayed)):
                self._play_unplayed()
                continue
            if self._evals and (not self._events or self._evals[0] <= self._events[0][0]):
                t, kind = self._evals.pop(0), "eval"
            else:
                t, _, kind, payload = heapq.heappop(self._events)
            if t > end:
                break
            self.state.now = t
            if kind == "episode_done":
                self._episode_done(*payload)
            elif kind == "update_done":
                self._update_done(payload)
            elif kind == "eval":
                start = time.perf_counter()
                self.on_eval(t, self)
                self.wall["eval_s"] += time.perf_counter() - start
            self._dispatch()
            self._learn()
            if progress is not None:
                progress(self.state)
        self.state.now = end
        return self.state

    @property
    def in_flight(self) -> int:
        return self.state.started * self.agent.group_size - self.state.completed

    # -- rollouts ---------------------------------------------------------------------------
    def _admitted(self) -> bool:
        limit = (self.state.updates + self.spec.max_staleness + 1) * self.agent.groups_per_update
        return self.state.started < limit

    def _dispatch(self) -> None:
        G = self.agent.group_size
        while self.free_slots >= G and self.state.now < self.scenario.duration_s and self._admitted():
            self.free_slots -= G
            self._start_request()

    def _start_request(self) -> None:
        """Draw the next task; its group is played later, with the weights deployed now.

        A started request waits, unplayed, until the clock is about to pass the earliest moment any of
        its episodes could complete (``earliest_end``) or the weights are about to change; then every
        waiting request is played in one batch (``batch_generation``; otherwise each at once). Every turn
        of a multi-turn episode uses the weights deployed when the request started, so each episode has
        one version; its simulated duration sums prefill (prompt and observations), decode and the
        environment's turns.
        """
        now, G = self.state.now, self.agent.group_size
        task = self.scenario.next_task(now, self.task_rng, index=self.state.started)
        self.state.started += 1
        request = _Request(id=next(self._ids), task=task, version=self.deployed_version, group=[None] * G, pending=G,
                           start=now, env_seeds=self.env_rng.integers(2**31, size=G).tolist())
        request.row_keys = [row_key(self.seed, request.id, i) for i in range(G)]
        latency = self.scenario.spec.latency
        request.earliest_end = now + latency.decode_s_per_token + min(latency.min_first_turn_s(s) for s in request.env_seeds)
        self.running[request.id] = request
        self.unplayed.append(request)
        if not self.spec.batch_generation:
            self._play_unplayed()

    def _play_unplayed(self) -> None:
        """Play every started, unplayed request in one batch and schedule its episodes' completions."""
        requests, self.unplayed = self.unplayed, []
        assert all(r.version == self.deployed_version for r in requests), "weights changed under a waiting request"
        G = self.agent.group_size
        start = time.perf_counter()
        rollouts = play(self.deployed, self.tokenizer, [r.task for r in requests for _ in range(G)], self.scenario.spec,
                        env_seeds=[s for r in requests for s in r.env_seeds],
                        row_keys=[k for r in requests for k in r.row_keys],
                        temperature=self.spec.temperature, top_p=self.spec.top_p)
        self.wall["generate_s"] += time.perf_counter() - start
        self.wall["generate_batches"] += 1
        self.wall["generate_rows"] += len(rollouts)
        latency = self.scenario.spec.latency
        for n, r in enumerate(rollouts):
            request, i = requests[n // G], n % G
            prefill_s = latency.prefill_s_per_token * r.prompt_tokens
            decode_s = latency.decode_s_per_token * r.action_tokens
            duration = prefill_s + decode_s + r.env_s
            episode = Episode(
                task=request.task,
                tokens_T=tuple(r.tokens_T),
                action_mask_T=tuple(r.action_mask_T),
                rollout_logp_T=tuple(r.logp_T),
                version_T=tuple(request.version if m else -1 for m in r.action_mask_T),
                reward=r.reward,
                response=r.transcript,
                group_id=request.id,
                phase=str(request.task.metadata.get("phase")),
                sim_start=request.start,
                sim_end=request.start + duration,
                latency={"prefill_s": prefill_s, "decode_s": decode_s, "env_s": r.env_s},
                grade_details=r.grade,
                turns=r.turns,
                end=r.end,
            )
            self._push(episode.sim_end, "episode_done", (request, i, episode))

    def _episode_done(self, request: _Request, i: int, episode: Episode) -> None:
        request.group[i] = episode
        request.pending -= 1
        self.state.completed += 1
        self.on_episode(episode, self.agent.version)
        if request.pending:
            self.free_slots += 1
            return
        del self.running[request.id]
        if self._buffered_episodes() + len(request.group) > self.spec.buffer_capacity:
            if self.spec.on_full == "block" and self.buffer:
                request.blocked_since = self.state.now
                self.blocked.append(request)
                return
            while self.buffer and self._buffered_episodes() + len(request.group) > self.spec.buffer_capacity:
                dropped = self.buffer.pop(0)
                self.state.dropped += len(dropped.group)
        self.free_slots += 1
        self.buffer.append(request)

    def _buffered_episodes(self) -> int:
        return sum(len(r.group) for r in self.buffer)

    def _unblock(self) -> None:
        while self.blocked and self._buffered_episodes() + len(self.blocked[0].group) <= self.spec.buffer_capacity:
            request = self.blocked.pop(0)
            self.state.blocked_s += self.state.now - request.blocked_since
            self.buffer.append(request)
            self.free_slots += 1

    # -- learner ----------------------------------------------------------------------------
    def _learn(self) -> None:
        """Consume a batch in completion order, stragglers first; wait if one would exceed max_staleness.

        After this update the actor is at version V+1 (assumed, even in a critic warm-up), so an
        unconsumed request generated before V+1-max_staleness would be too stale: every such
        request already complete joins this batch (which may then exceed ``groups_per_update``),
        and if one is still running the learner waits for it (it is never dropped).
        """
        need = self.agent.groups_per_update
        ready = self.buffer + self.blocked
        if self.learner_busy or len(ready) < need or self.state.now >= self.scenario.duration_s:
            return
        floor = self.agent.version + 1 - self.spec.max_staleness
        urgent = [r for r in ready if r.version < floor]
        requests = urgent + [r for r in ready if r.version >= floor][: max(need - len(urgent), 0)]
        if any(r.version < floor for r in self.running.values()):
            if self.waiting_since is None:
                self.waiting_since = self.state.now
            return
        if self.waiting_since is not None:
            self.state.learner_wait_s += self.state.now - self.waiting_since
            self.waiting_since = None
        for r in requests:
            if r in self.blocked:
                self.blocked.remove(r)
                self.state.blocked_s += self.state.now - r.blocked_since
                self.free_slots += 1
            else:
                self.buffer.remove(r)
        self._unblock()
        episodes = [e for r in requests for e in r.group]
        staleness = [self.agent.version - e.version for e in episodes]
        start = time.perf_counter()
        metrics = self.agent.update(episodes)
        self.wall["update_s"] += time.perf_counter() - start
        self.learner_busy = True
        self.state.consumed += len(episodes)
        self.state.staleness.extend(staleness)
        latency = self.scenario.spec.latency
        tokens = sum(len(e.tokens_T) for e in episodes) * self.agent.train_passes
        cost = latency.update_base_s + latency.update_s_per_token * tokens
        record = {
            **metrics,
            "async/staleness_mean": float(np.mean(staleness)),
            "async/staleness_p95": float(np.percentile(staleness, 95)),
            "async/staleness_max": float(max(staleness)),
            "async/buffer_size": float(self._buffered_episodes()),
            "async/buffer_blocked_s": self.state.blocked_s,
            "async/learner_wait_s": self.state.learner_wait_s,
            "async/dropped": float(self.state.dropped),
            "async/in_flight": float(self.in_flight),
            "train/reward_mean": float(np.mean([e.reward for e in episodes])),
            "train/response_tokens": float(np.mean([e.num_action_tokens for e in episodes])),
            "train/turns": float(np.mean([e.turns for e in episodes])),
            "perf/update_sim_s": cost,
        }
        self._push(self.state.now + cost, "update_done", record)

    def _update_done(self, record: dict) -> None:
        self.learner_busy = False
        self.state.updates += 1
        if self.agent.version != self.deployed_version:
            with torch.no_grad():
                for deployed, trained in zip(self.deployed.parameters(), self.agent.policy.parameters()):
                    deployed.copy_(trained)
            self.deployed_version = self.agent.version
        self.on_update({"sim_time_s": self.state.now, "update": self.state.updates, "version": self.agent.version,
                        "episodes": self.state.consumed, **record})
        self._unblock()
