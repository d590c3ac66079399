"""The ``threads`` backend: rollouts and the learner run concurrently, in wall-clock time, on one machine.

The scheduling decisions (admission, the bounded buffer, the learner's batch) are the shared core's
(``sao_env.runtime.core.Scheduler``), taken under one lock; only the clock and the workers differ
from ``sim``:

* The clock is the wall clock scaled by ``runtime.time_scale`` (wall seconds per scenario second):
  ``now = elapsed_wall / time_scale``. The drift schedule, evaluation times and every ``sim_time_s``
  are read on it, so a scenario's phases last ``duration x time_scale`` of wall clock.
* Rollout workers (threads here, Ray actors in ``ray_backend``) each take every request admission
  allows, up to their share of the rollout slots, and play them as one batch with the weights last
  published; a worker picks up a new version between batches, so each episode has one version.
  Generation and the environment's real work (tool calls, sandboxed tests) take the time they take;
  afterwards each episode completes ``env_s x time_scale`` wall seconds later (the latency model's
  environment wait, injected), delivered by a timer thread in completion order.
* The learner (this process's main thread) waits for a batch, trains on it while the workers keep
  generating, and publishes the new weights when the update finishes (version + 1). Held-out
  evaluations run on the learner's thread at their times on the scaled clock, with the published weights.

Metrics keep ``sim``'s names and meanings (``sim_time_s`` is the scaled clock); ``perf/*`` adds
wall-clock throughput, the learner's idle fraction and the weight-publish latency.

Resume: between two updates (after the new weights are published) ``snapshot`` copies, under the
lock, the scheduling core (counters, buffer, blocked and running requests with their finished
episodes), the task and latency streams, the scenario, the remaining evaluation times and the scaled
clock; the experiment adds the agent and its logs' byte lengths (``sao_env.experiment.run``).
``restore`` puts them back: the clock continues from the checkpoint's reading, and every request that
was in flight is re-queued (``replay``) so that its unfinished episodes are played again from their own
seeds (task, environment seed, sampling stream ``row_key``) with the weights published at the
checkpoint. Its finished episodes are kept; an episode that finished after the checkpoint is cut
from episodes.jsonl with the rest of the logs and played again, so each appears once.
"""

from __future__ import annotations

import copy
import heapq
import math
import os
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np
import torch

from sao_env.agents.base import Agent
from sao_env.policy.generate import row_key
from sao_env.policy.placement import model_device
from sao_env.runtime.core import Request, RunState, train_metrics
from sao_env.runtime.rollout import Rollout, play
from sao_env.runtime.sim import make_scheduler
from sao_env.runtime.spec import RuntimeSpec
from sao_env.scenario import Scenario
from sao_env.types import Episode


def make_episode(request: Request, i: int, rollout: Rollout, version: int, start: float, end: float,
                 prefill_s: float, decode_s: float) -> Episode:
    """Episode ``i`` of a played request, its action tokens tagged with ``version``; times on the run's clock.

    In real time generation is measured, not modelled: ``decode_s`` is the episode's share of its batch's
    wall-clock generation (prefill included, in scenario seconds) and ``prefill_s`` is 0."""
    return Episode(
        task=request.task,
        tokens_T=tuple(rollout.tokens_T),
        action_mask_T=tuple(rollout.action_mask_T),
        rollout_logp_T=tuple(rollout.logp_T),
        version_T=tuple(version if m else -1 for m in rollout.action_mask_T),
        reward=rollout.reward,
        response=rollout.transcript,
        group_id=request.id,
        phase=str(request.task.metadata.get("phase")),
        sim_start=start,
        sim_end=end,
        latency={"prefill_s": prefill_s, "decode_s": decode_s, "env_s": rollout.env_s},
        grade_details=rollout.grade,
        turns=rollout.turns,
        end=rollout.end,
    )


def batch_rows(requests: list[Request], members: list[list[int]]) -> tuple[list, list[int], list[int]]:
    """The rows of one batch: tasks, environment seeds and sampling-stream keys of ``members[j]`` of
    ``requests[j]`` (all of a request's members when it starts, the unfinished ones when it is replayed)."""
    rows = [(r, i) for r, ms in zip(requests, members) for i in ms]
    return [r.task for r, _ in rows], [r.env_seeds[i] for r, i in rows], [r.row_keys[i] for r, i in rows]


def frozen_copy(policy: torch.nn.Module) -> torch.nn.Module:
    model = copy.deepcopy(policy).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def cpu_copy(policy: torch.nn.Module) -> torch.nn.Module:
    """The policy itself where it lives on the CPU, else a frozen CPU copy (for CPU samplers elsewhere: Ray actors)."""
    if model_device(policy).type == "cpu":
        return policy
    return frozen_copy(policy).to("cpu")


class LocalWorkers:
    """Rollout workers as threads of this process, each with its own copy of the weights; with the policy on a
    GPU, one colocated sampler copy on that GPU serves every worker thread, a batch at a time, and takes each
    published version in place (a device-to-device copy)."""

    def __init__(self, runtime: "RealtimeRuntime", n: int):
        self.runtime = runtime
        self.colocated = model_device(runtime.agent.policy).type != "cpu"
        shared = frozen_copy(runtime.agent.policy) if self.colocated else None
        self.models = [shared if self.colocated else frozen_copy(runtime.agent.policy) for _ in range(n)]
        self.versions = [runtime.agent.version] * n
        self.sampler = None
        if runtime.spec.generator == "vllm":
            from sao_env.engine.generator import VLLMGenerator

            self.sampler = VLLMGenerator.from_policy(runtime.agent.policy, runtime.tokenizer,
                                                     version=runtime.agent.version, seed=runtime.seed,
                                                     dtype=runtime.spec.engine_dtype)
        self.sampler_lock = threading.RLock()

    def publish(self, version: int, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """What the workers will read: a detached copy, so the learner may keep training its own tensors."""
        return {k: v.detach().clone() for k, v in weights.items()}

    def play(self, w: int, requests: list[Request], version: int, published, members: list[list[int]]) -> list[Rollout]:
        if self.colocated:  # one model on the GPU for every worker: load and play under the lock
            with self.sampler_lock:
                return self._play(w, requests, version, published, members)
        return self._play(w, requests, version, published, members)

    def _play(self, w: int, requests: list[Request], version: int, published, members: list[list[int]]) -> list[Rollout]:
        rt = self.runtime
        if self.versions[w] != version:
            with torch.no_grad():
                self.models[w].load_state_dict(published)
            if self.colocated:
                self.versions = [version] * len(self.versions)
            self.versions[w] = version
        tasks, env_seeds, row_keys = batch_rows(requests, members)
        args = (self.models[w], rt.tokenizer, tasks, rt.scenario.spec)
        kwargs = {"env_seeds": env_seeds, "row_keys": row_keys, "temperature": rt.spec.temperature, "top_p": rt.spec.top_p}
        if self.sampler is None:
            return play(*args, **kwargs)
        with self.sampler_lock:  # one engine serves every worker thread, one batch at a time
            if self.sampler.version != version:
                self.sampler.load_weights(published, version)
            return play(*args, sampler=self.sampler.sample, **kwargs)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()


class RealtimeRuntime:
    """Runs one agent on one scenario in wall-clock time until the scenario's (scaled) duration has passed.

    Same constructor and attributes as ``SimRuntime`` (``state``, ``deployed``, ``deployed_version``,
    ``in_flight``, ``wall``), so a run writes the same run directory.
    """

    workers_class = LocalWorkers

    def __init__(self, scenario: Scenario, agent: Agent, spec: RuntimeSpec, *, seed: int,
                 on_update: Callable[[dict], None], on_episode: Callable[[Episode, int], None],
                 on_eval: Callable[[float, object], None], eval_times: list[float]):
        self.scenario, self.agent, self.spec, self.seed = scenario, agent, spec, seed
        self.tokenizer = agent.tokenizer
        self.on_update, self.on_episode, self.on_eval = on_update, on_episode, on_eval
        self.task_rng = np.random.default_rng([seed, 1])
        self.env_rng = np.random.default_rng([seed, 2])
        self.core = make_scheduler(scenario, agent, spec)
        self.state: RunState = self.core.state
        self.evals = sorted(eval_times)
        self.deployed = frozen_copy(agent.policy)
        self.deployed_version = agent.version
        groups = scenario.spec.rollout_slots // agent.group_size
        on_gpu = model_device(agent.policy).type != "cpu"  # one colocated sampler: one worker takes every slot
        self.n_workers = spec.workers or (1 if on_gpu else max(1, min(groups, os.cpu_count() or 1)))
        self.batch_cap = max(1, math.ceil(groups / self.n_workers))
        """Requests one worker takes into one batch: its share of the rollout slots."""
        self.cv = threading.Condition()
        self.stopping = False
        self.timers: list = []
        self.timer_seq = 0
        self.t0 = 0.0
        self.published = None
        self.tokens = 0
        self.wall = {"generate_s": 0.0, "update_s": 0.0, "eval_s": 0.0, "generate_batches": 0, "generate_rows": 0,
                     "learner_idle_s": 0.0, "publish_s": 0.0, "publishes": 0, "worker_restarts": 0, "requeued_requests": 0,
                     "replayed_requests": 0,
                     "backend": spec.backend, "time_scale": spec.time_scale, "workers": self.n_workers}
        """Wall-clock figures (timings.json): the real-time run's throughput, idle time and publish latency."""
        self.requeued: list[int] = []
        """Ids of requests a dead worker left mid-episode, re-queued to its replacement."""
        self.replay: list[Request] = []
        """Requests a resumed run plays again, oldest first: those in flight at its checkpoint."""
        self.replayed: list[int] = []
        """Ids of the requests ``restore`` re-queued."""
        self.start_at = 0.0
        """The scaled clock's reading when ``run`` starts: 0, or the checkpoint's on resume."""

    # -- the clock --------------------------------------------------------------------------
    def clock(self) -> float:
        """Scenario seconds since the run started: wall seconds / time_scale."""
        return (time.perf_counter() - self.t0) / self.spec.time_scale

    @property
    def in_flight(self) -> int:
        return self.core.in_flight

    # -- the run ----------------------------------------------------------------------------
    def run(self, progress: Callable[[RunState], None] | None = None) -> RunState:
        end = self.scenario.duration_s
        self.pool = self.workers_class(self, self.n_workers)
        self.published = self.pool.publish(self.agent.version, self.agent.policy.state_dict())
        threads = [threading.Thread(target=self._worker, args=(w,), name=f"rollout-{w}", daemon=True)
                   for w in range(self.n_workers)]
        threads.append(threading.Thread(target=self._timer, name="episode-timer", daemon=True))
        self.errors: list[BaseException] = []
        self.t0 = time.perf_counter() - self.start_at * self.spec.time_scale
        for t in threads:
            t.start()
        try:
            self._learner(end, progress)
        finally:
            with self.cv:
                self.stopping = True
                self.cv.notify_all()
            for t in threads:
                t.join()
            self.pool.close()
        if self.errors:
            raise self.errors[0]
        wall_s = time.perf_counter() - self.t0
        self.state.now = end
        self.wall.update({
            "run_wall_s": wall_s,
            "episodes_per_s": self.state.completed / wall_s,
            "tokens_per_s": self.tokens / wall_s,
            "learner_idle_frac": self.wall["learner_idle_s"] / wall_s,
            "publish_s_mean": self.wall["publish_s"] / max(self.wall["publishes"], 1),
        })
        return self.state

    def _learner(self, end: float, progress) -> None:
        """Wait for a batch (idle time counted), update, publish; run evaluations when they fall due."""
        while True:
            self._evaluate_due(min(self.clock(), end))
            idle_from = time.perf_counter()
            with self.cv:
                batch = None
                while not self.errors:
                    now = self.clock()
                    if now >= end or (self.evals and self.evals[0] <= now):
                        break
                    batch = self.core.select(self.agent.version, now)
                    if batch is not None:
                        self.core.take(batch, now)
                        self.cv.notify_all()
                        break
                    self.cv.wait(0.02)
                self.state.now = self.clock()
            self.wall["learner_idle_s"] += time.perf_counter() - idle_from
            if self.errors:
                return
            if batch is None:
                if self.clock() >= end:
                    self._evaluate_due(end)
                    return
                continue
            self._update(batch)
            if progress is not None:
                progress(self.state)

    def _update(self, batch: list[Request]) -> None:
        episodes = [e for r in batch for e in r.group]
        staleness = [self.agent.version - e.version for e in episodes]
        start = time.perf_counter()
        metrics = self.agent.update(episodes)
        update_s = time.perf_counter() - start
        published = self.pool.publish(self.agent.version, self.agent.policy.state_dict())
        publish_s = time.perf_counter() - start - update_s
        with torch.no_grad():
            self.deployed.load_state_dict(self.agent.policy.state_dict())
        with self.cv:
            self.published = published
            self.deployed_version = self.agent.version
            self.core.consumed(episodes, staleness)
            self.state.updates += 1
            now = self.state.now = self.clock()
            self.core.unblock(now)
            record = {**metrics, **self.core.async_metrics(staleness), **train_metrics(episodes),
                      "perf/update_sim_s": update_s / self.spec.time_scale}
            self.cv.notify_all()
        elapsed = time.perf_counter() - self.t0
        self.wall["update_s"] += update_s
        self.wall["publish_s"] += publish_s
        self.wall["publishes"] += 1
        self.on_update({"sim_time_s": now, "update": self.state.updates, "version": self.agent.version,
                        "episodes": self.state.consumed, **record,
                        "perf/update_wall_s": update_s, "perf/publish_s": publish_s,
                        "perf/episodes_per_s": self.state.completed / elapsed, "perf/tokens_per_s": self.tokens / elapsed,
                        "perf/learner_idle_frac": self.wall["learner_idle_s"] / elapsed,
                        "async/worker_restarts": float(self.wall["worker_restarts"])})

    # -- resume -----------------------------------------------------------------------------
    def snapshot(self, capture: Callable[[], Any] = lambda: None) -> tuple[dict[str, Any], Any]:
        """The run's state between two updates, and what ``capture()`` returns, both taken under the lock
        (so no episode completes and no request starts in between; the experiment captures its logs'
        byte lengths and running lists there). Call it on the learner's thread, after an update was
        published and logged: the agent, which only that thread changes, is saved as it is."""
        with self.cv:
            now = self.clock()
            held = copy.deepcopy({"core": self.core, "scenario": self.scenario, "task_rng": self.task_rng,
                                  "env_rng": self.env_rng, "evals": self.evals})
            captured = capture()
            counters = {"tokens": self.tokens, "wall": {k: v for k, v in self.wall.items() if isinstance(v, (int, float))}}
        return {"backend": self.spec.backend, "agent": self.agent, "state": held["core"].state, "now": now,
                **held, **counters}, captured

    def restore(self, saved: dict[str, Any]) -> None:
        """Continue from ``snapshot``'s state (the agent and scenario were handed to the constructor): the
        clock from the checkpoint's reading, every request then in flight re-queued to be played again.
        A request none of whose episodes had finished restarts under the weights published now."""
        self.core, self.state = saved["core"], saved["core"].state
        self.scenario, self.task_rng, self.env_rng = saved["scenario"], saved["task_rng"], saved["env_rng"]
        self.evals, self.tokens, self.start_at = list(saved["evals"]), saved["tokens"], saved["now"]
        self.wall.update({k: v for k, v in saved["wall"].items() if k not in ("time_scale", "workers")})
        self.replay = sorted(self.core.running.values(), key=lambda r: r.id)
        for request in self.replay:
            if request.pending == len(request.group):
                request.version = self.agent.version
        self.replayed = [r.id for r in self.replay]
        self.wall["replayed_requests"] += len(self.replay)

    def _evaluate_due(self, now: float) -> None:
        while self.evals and self.evals[0] <= now:
            t = self.evals.pop(0)
            start = time.perf_counter()
            view = SimpleNamespace(deployed=self.deployed, deployed_version=self.deployed_version, state=self.state)
            self.on_eval(t, view)
            self.wall["eval_s"] += time.perf_counter() - start

    # -- rollout workers --------------------------------------------------------------------
    def _worker(self, w: int) -> None:
        try:
            self._work(w)
        except BaseException as err:  # noqa: BLE001  (re-raised by run() on the main thread)
            with self.cv:
                self.errors.append(err)
                self.stopping = True
                self.cv.notify_all()

    def _work(self, w: int) -> None:
        G, end = self.agent.group_size, self.scenario.duration_s
        while True:
            with self.cv:
                while not self.stopping and not ((self.replay or self.core.may_start()) and self.clock() < end):
                    self.cv.wait(0.05)
                if self.stopping:
                    return
                requests: list[Request] = []
                members: list[list[int]] = []
                starts: list[float] = []
                version, published = self.deployed_version, self.published
                while len(requests) < self.batch_cap and self.replay and self.clock() < end:
                    request = self.replay.pop(0)
                    requests.append(request)
                    members.append([i for i, e in enumerate(request.group) if e is None])
                    starts.append(self.clock())
                while len(requests) < self.batch_cap and self.core.may_start() and self.clock() < end:
                    now = self.clock()
                    task = self.scenario.next_task(now, self.task_rng, index=self.state.started)
                    request = self.core.start(task, version, now, self.env_rng.integers(2**31, size=G).tolist())
                    request.row_keys = [row_key(self.seed, request.id, i) for i in range(G)]
                    requests.append(request)
                    members.append(list(range(G)))
                    starts.append(request.start)
            if not requests:
                continue
            start = time.perf_counter()
            rollouts = self.pool.play(w, requests, version, published, members)
            done = time.perf_counter()
            scale = self.spec.time_scale
            share = (done - start) / scale / len(rollouts)
            with self.cv:
                self.wall["generate_s"] += done - start
                self.wall["generate_batches"] += 1
                self.wall["generate_rows"] += len(rollouts)
                rows = [(r, i, begun) for r, ms, begun in zip(requests, members, starts) for i in ms]
                for (request, i, begun), rollout in zip(rows, rollouts):
                    due = done + rollout.env_s * scale
                    episode = make_episode(request, i, rollout, version, begun, (due - self.t0) / scale,
                                           prefill_s=0.0, decode_s=share)
                    heapq.heappush(self.timers, (due, self.timer_seq, request, i, episode))
                    self.timer_seq += 1
                self.cv.notify_all()

    def _timer(self) -> None:
        """Deliver finished episodes to the core when their injected environment wait has passed."""
        while True:
            with self.cv:
                while not self.stopping and (not self.timers or self.timers[0][0] > time.perf_counter()):
                    self.cv.wait(min(self.timers[0][0] - time.perf_counter(), 0.05) if self.timers else 0.05)
                if self.stopping:
                    return
                now_wall = time.perf_counter()
                while self.timers and self.timers[0][0] <= now_wall:
                    _, _, request, i, episode = heapq.heappop(self.timers)
                    now = self.state.now = self.clock()
                    if now > self.scenario.duration_s:
                        continue
                    self.core.episode_done(request, i, episode, now)
                    self.tokens += episode.num_action_tokens
                    self.on_episode(episode, self.agent.version)
                self.cv.notify_all()


class ThreadsRuntime(RealtimeRuntime):
    """``backend: threads``: rollout workers are threads of this process (``LocalWorkers``)."""
