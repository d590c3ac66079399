"""The ``sim`` backend: a discrete-event engine in simulated time, deterministic for a seed.

N rollout slots and one learner share a simulated clock. A free slot takes the scenario's next
task at the current time, generates with the weights deployed at that time (recording each
token's log-probability and version), is graded by the environment, and completes after the
latency model's duration. Completed groups enter a bounded buffer in completion order; the
learner consumes ``groups_per_update`` of them per update, and an update costs simulated time
before its weights are deployed to the rollout slots (version + 1).

Admission control, the bounded buffer and the learner's batch selection (stragglers first, a wait
rather than an episode more than ``max_staleness`` versions late) are the scheduling core's
(``sao_env.runtime.core.Scheduler``), shared with the real-time backends; this module owns the
simulated clock: when requests are played, when episodes and updates complete.
"""

from __future__ import annotations

import copy
import heapq
import time
from typing import Callable

import numpy as np
import torch

from sao_env.agents.base import Agent
from sao_env.errors import UserError
from sao_env.policy.generate import row_key
from sao_env.policy.mismatch import RolloutMismatch
from sao_env.runtime.core import Request, RunState, Scheduler, completion_order_bias, train_metrics
from sao_env.runtime.rollout import play
from sao_env.runtime.spec import RuntimeSpec
from sao_env.scenario import Scenario
from sao_env.types import Episode


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
        self.mismatch = RolloutMismatch(spec.rollout_mismatch, seed=seed, noise_std=spec.rollout_noise_std)
        self.mismatch.apply(self.deployed, agent.policy, agent.version)
        self.on_update, self.on_episode, self.on_eval = on_update, on_episode, on_eval
        self.task_rng = np.random.default_rng([seed, 1])
        self.env_rng = np.random.default_rng([seed, 2])
        self.unplayed: list[Request] = []
        self.core = make_scheduler(scenario, agent, spec)
        self.state: RunState = self.core.state
        self.learner_busy = False
        self._events: list = []
        self._seq = 0
        self._evals = sorted(eval_times)
        """Evaluation times, kept apart from the event queue: they never decide when waiting requests
        are played, so the training run is the same whatever the evaluation schedule."""
        self.wall = {"generate_s": 0.0, "update_s": 0.0, "eval_s": 0.0, "generate_batches": 0, "generate_rows": 0}
        """Wall-clock bookkeeping (timings.json); the simulation never reads it."""

    # -- event plumbing ---------------------------------------------------------------------
    def _push(self, t: float, kind: str, payload) -> None:
        heapq.heappush(self._events, (t, self._seq, kind, payload))
        self._seq += 1

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
        return self.core.in_flight

    # -- rollouts ---------------------------------------------------------------------------
    def _dispatch(self) -> None:
        while self.core.free_slots >= self.agent.group_size and self.state.now < self.scenario.duration_s \
                and self.core.admitted():
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
        request = self.core.start(task, self.deployed_version, now, self.env_rng.integers(2**31, size=G).tolist())
        request.row_keys = [row_key(self.seed, request.id, i) for i in range(G)]
        latency = self.scenario.spec.latency
        request.earliest_end = now + latency.decode_s_per_token + min(latency.min_first_turn_s(s, task) for s in request.env_seeds)
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

    def _episode_done(self, request: Request, i: int, episode: Episode) -> None:
        self.core.episode_done(request, i, episode, self.state.now)
        self.on_episode(episode, self.agent.version)

    # -- learner ----------------------------------------------------------------------------
    def _learn(self) -> None:
        """Consume a batch in completion order, stragglers first; wait if one would exceed max_staleness.

        After this update the actor is at version V+1 (assumed, even in a critic warm-up), so an
        unconsumed request generated before V+1-max_staleness would be too stale: every such
        request already complete joins this batch (which may then exceed ``groups_per_update``),
        and if one is still running the learner waits for it (it is never dropped).

        The update costs ``update_base_s + update_s_per_token x tokens x passes`` simulated seconds
        (``update_passes``); ``async/completion_bias`` compares the batch with the one start order
        would have formed (``core.completion_order_bias``).
        """
        if self.learner_busy or self.state.now >= self.scenario.duration_s:
            return
        requests = self.core.select(self.agent.version, self.state.now)
        if requests is None:
            return
        bias = self._completion_bias(requests)
        self.core.take(requests, self.state.now)
        episodes = [e for r in requests for e in r.group]
        staleness = [self.agent.version - e.version for e in episodes]
        start = time.perf_counter()
        metrics = self.agent.update(episodes)
        self.wall["update_s"] += time.perf_counter() - start
        self.learner_busy = True
        self.core.consumed(episodes, staleness)
        latency = self.scenario.spec.latency
        tokens = sum(len(e.tokens_T) for e in episodes) * update_passes(self.agent, self.spec.critic_parallel)
        cost = latency.update_base_s + latency.update_s_per_token * tokens
        record = {
            **metrics,
            **self.core.async_metrics(staleness),
            **train_metrics(episodes),
            "async/completion_bias": bias,
            "perf/update_sim_s": cost,
        }
        self._push(self.state.now + cost, "update_done", record)

    def _completion_bias(self, requests: list[Request]) -> float:
        """``core.completion_order_bias`` of the batch about to be taken: the rewards of unfinished
        episodes are those of their pending completion events (every request among the oldest
        started is played: only the newest requests wait unplayed)."""
        scheduled = {(p[0].id, p[1]): p[2].reward for _, _, kind, p in self._events if kind == "episode_done"}
        pending = [*self.core.buffer, *self.core.blocked, *self.core.running.values()]

        def rewards(request: Request) -> list[float]:
            return [e.reward if e is not None else scheduled[(request.id, i)] for i, e in enumerate(request.group)]

        return completion_order_bias(requests, pending, rewards)

    def _update_done(self, record: dict) -> None:
        self.learner_busy = False
        self.state.updates += 1
        if self.agent.version != self.deployed_version:
            with torch.no_grad():
                for deployed, trained in zip(self.deployed.parameters(), self.agent.policy.parameters()):
                    deployed.copy_(trained)
                self.mismatch.apply(self.deployed, self.agent.policy, self.agent.version)
            self.deployed_version = self.agent.version
        self.on_update({"sim_time_s": self.state.now, "update": self.state.updates, "version": self.agent.version,
                        "episodes": self.state.consumed, **record})
        self.core.unblock(self.state.now)


def update_passes(agent: Agent, critic_parallel: bool) -> int:
    """Passes over each consumed token that an update's simulated time is charged for.

    In series (default) every model's passes add up: ``agent.train_passes`` (1 + K for a critic
    agent). With ``critic_parallel`` the critic trains on a device of its own, overlapping the
    actor's step: ``max(actor passes, K)``, where ``K = critic_updates`` and the actor's passes are
    the rest (SAO with K=2: 2 instead of 3). The overlap is possible only because SAO's actor uses
    the critic's values from before its K steps (``make_scheduler`` refuses other agents).
    """
    if not critic_parallel:
        return agent.train_passes
    critic = agent.config.critic_updates
    return max(agent.train_passes - critic, critic)


def make_scheduler(scenario: Scenario, agent: Agent, spec: RuntimeSpec) -> Scheduler:
    """The scheduling core for one run, after checking that one update's batch can ever be formed."""
    if agent.group_size > scenario.spec.rollout_slots:
        raise UserError(f"group size {agent.group_size} exceeds the scenario's {scenario.spec.rollout_slots} rollout slots")
    if spec.buffer_capacity < agent.group_size * agent.groups_per_update:
        raise UserError(f"buffer_capacity {spec.buffer_capacity} is smaller than one update's batch "
                        f"({agent.groups_per_update} groups of {agent.group_size} episodes)")
    if spec.critic_parallel and getattr(getattr(agent, "config", None), "advantage_values", None) != "before_fit":
        raise UserError(f"critic_parallel needs a critic whose pre-fit values the actor uses (sao with "
                        f"advantage_values: before_fit); {agent.name}'s actor would wait for the critic")
    return Scheduler(max_staleness=spec.max_staleness, buffer_capacity=spec.buffer_capacity, on_full=spec.on_full,
                     group_size=agent.group_size, groups_per_update=agent.groups_per_update,
                     slots=scenario.spec.rollout_slots)
