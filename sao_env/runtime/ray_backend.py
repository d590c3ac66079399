"""The ``ray`` backend: rollout workers are Ray actors; the learner is the driver process.

Scheduling, clock, evaluations and metrics are the ``threads`` backend's (``RealtimeRuntime``): one
driver thread per actor hands it a batch of requests and waits for its rollouts. What Ray adds:

* Workers are processes, on this machine or a cluster's (``runtime.address``; ``ray.init(address=...)``
  joins it, none starts a local one with ``runtime.ray_num_cpus`` CPUs). Each holds its own copy of the
  policy and uses one torch thread.
* Weights go out once per version: the learner ``ray.put``s the new state dict after each update, and
  an actor fetches it from the object store only when its next batch needs a newer version than it
  holds (the reference travels inside a list, so Ray does not resolve it on every call).
* With GPUs in the cluster a placement group reserves one GPU (and one CPU) per rollout worker, packed.
* A worker that dies mid-batch (killed, out of memory) is replaced by a fresh actor and its batch is
  re-queued on it with the same requests and sampling streams: no episode is lost. Restarts and
  re-queued requests are counted (``async/worker_restarts``; ``worker_restarts`` and
  ``requeued_requests`` in timings.json).
* A local cluster this driver starts is watched by a ``reaper.Reaper``: when the driver dies (even by
  SIGKILL) its Ray processes go with it within a second instead of lingering a minute. ``ray.init``
  replaces the driver's SIGTERM handler with one that exits mid-run; the handler in place before it
  is put back, so SIGTERM stops a ``ray`` run as it stops the others (exit 143).
"""

from __future__ import annotations

import os
import signal
import threading

import torch

from sao_env.errors import UserError, install_command
from sao_env.runtime.core import Request
from sao_env.runtime.reaper import Reaper
from sao_env.runtime.rollout import Rollout, play
from sao_env.runtime.threads import RealtimeRuntime, batch_rows, cpu_copy, frozen_copy


def _ray():
    try:
        import ray
    except ImportError:
        raise UserError(f"runtime.backend=ray needs Ray: {install_command('ray')}") from None
    return ray


class RolloutWorker:
    """A Ray actor's body: a frozen copy of the policy that plays batches of requests (``rollout.play``)."""

    def __init__(self, policy, tokenizer, scenario_spec, runtime_spec):
        torch.set_num_threads(1)
        self.model = frozen_copy(policy)
        self.tokenizer, self.scenario_spec, self.spec = tokenizer, scenario_spec, runtime_spec
        self.version: int | None = None
        self.sampler = None
        if runtime_spec.generator == "vllm":
            from sao_env.engine.generator import VLLMGenerator

            self.sampler = VLLMGenerator.from_policy(policy, tokenizer, dtype=runtime_spec.engine_dtype)

    def pid(self) -> int:
        return os.getpid()

    def play(self, weights: list, version: int, tasks: list, env_seeds: list[int], row_keys: list[int]) -> list[Rollout]:
        """Play ``tasks`` with the weights of ``version``; ``weights`` is ``[ObjectRef]``, fetched only when new."""
        if version != self.version:
            import ray

            state = ray.get(weights[0])
            with torch.no_grad():
                self.model.load_state_dict(state)
            if self.sampler is not None:
                self.sampler.load_weights(state, version)
            self.version = version
        kwargs = {} if self.sampler is None else {"sampler": self.sampler.sample}
        return play(self.model, self.tokenizer, tasks, self.scenario_spec, env_seeds=env_seeds, row_keys=row_keys,
                    temperature=self.spec.temperature, top_p=self.spec.top_p, **kwargs)


class RayWorkers:
    """Rollout workers as Ray actors, one driver thread each (``RealtimeRuntime._work``)."""

    def __init__(self, runtime: RealtimeRuntime, n: int):
        ray = self.ray = _ray()
        self.runtime, self.n = runtime, n
        spec = runtime.spec
        self.started_ray = not ray.is_initialized()
        self.reaper = None
        if self.started_ray:
            options = {"include_dashboard": False, "log_to_driver": False}
            if spec.address is None:
                options["num_cpus"] = spec.ray_num_cpus
                self.reaper = Reaper()
            main = threading.current_thread() is threading.main_thread()
            sigterm = signal.getsignal(signal.SIGTERM) if main else None
            ray.init(address=spec.address or "local", **options)  # none: a new local instance, not a running one
            if main:
                signal.signal(signal.SIGTERM, sigterm)
        gpus = ray.cluster_resources().get("GPU", 0)
        cpus = ray.cluster_resources().get("CPU", 1)
        self.placement = None
        if gpus >= 1:
            from ray.util.placement_group import placement_group

            self.placement = placement_group([{"GPU": 1, "CPU": 1}] * n, strategy="PACK")
            ray.get(self.placement.ready())
        self.actor_cpus = min(1.0, cpus / n)
        """CPUs each actor reserves: one, or an equal share when the cluster has fewer CPUs than workers."""
        self.actor_class = ray.remote(RolloutWorker)
        self.policy_ref = ray.put(cpu_copy(runtime.agent.policy))
        self.tokenizer_ref = ray.put(runtime.tokenizer)
        self.actors = [self._spawn(w) for w in range(n)]
        self.pids = [ray.get(a.pid.remote()) for a in self.actors]
        self.busy: list[list[int]] = [[] for _ in range(n)]
        """Request ids each worker is playing now (empty when idle)."""
        self.weights_ref = None
        self.weights_version: int | None = None

    def _spawn(self, w: int):
        options: dict = {"num_cpus": self.actor_cpus, "max_restarts": 0}
        if self.placement is not None:
            from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

            options.update(num_cpus=1, num_gpus=1, scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=self.placement, placement_group_bundle_index=w))
        rt = self.runtime
        return self.actor_class.options(**options).remote(self.policy_ref, self.tokenizer_ref, rt.scenario.spec, rt.spec)

    def publish(self, version: int, weights: dict[str, torch.Tensor]):
        """Put the new weights in the object store once, as CPU copies (a learner on a GPU included); every actor
        fetches them from there."""
        self.weights_ref = self.ray.put({k: v.detach().to("cpu", copy=True) for k, v in weights.items()})
        self.weights_version = version
        return self.weights_ref

    def play(self, w: int, requests: list[Request], version: int, published, members: list[list[int]]) -> list[Rollout]:
        rt = self.runtime
        args = ([published], version, *batch_rows(requests, members))
        self.busy[w] = [r.id for r in requests]
        try:
            while True:
                try:
                    return self.ray.get(self.actors[w].play.remote(*args))
                except self.ray.exceptions.RayActorError:
                    with rt.cv:
                        rt.wall["worker_restarts"] += 1
                        rt.wall["requeued_requests"] += len(requests)
                        rt.requeued.extend(self.busy[w])
                    self.actors[w] = self._spawn(w)
                    self.pids[w] = self.ray.get(self.actors[w].pid.remote())
        finally:
            self.busy[w] = []

    def close(self) -> None:
        for actor in self.actors:
            self.ray.kill(actor)
        if self.placement is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self.placement)
        if self.started_ray:
            self.ray.shutdown()
        if self.reaper is not None:
            self.reaper.release()


class RayRuntime(RealtimeRuntime):
    """``backend: ray``: rollout workers are Ray actors (``RayWorkers``), the learner is the driver."""

    workers_class = RayWorkers
