"""The ``ray`` backend keeps ``sim``'s contract (test_backends.py's checks) on a local Ray cluster of 2 CPUs:
a synchronous run is on-policy, and a rollout worker killed with SIGKILL mid-batch is replaced without
losing an episode. Wall-clock runs of the shrunken style-drift scenario (the synchronous one at ``time_scale``
0.05, the killed-worker one at 0.2)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter

import pytest
from conftest import LONGER
from test_backends import SYNC, check_on_policy, check_same_contract_as_sim, realtime_run

from sao_env.experiment import build_agent
from sao_env.scenario import Scenario

RAY_FAST = ("agent.runtime.time_scale=0.05",)
"""Measured for the synchronous run (2 workers, a loaded 2-core machine): at 0.1, 6 updates over 7 versions in
22 s; at 0.05, 6 updates over 6 versions in 17-19 s (three runs); the checks need 3 and 3."""


# -- ray ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of 2 CPUs for this module's tests (the backend joins it instead of starting one)."""
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # not another test's cluster
    yield ray
    ray.shutdown()


@pytest.mark.slow
def test_ray_synchronous_is_on_policy(ray_cluster, shrunk_config, shrunk_run, tmp_path):
    sim_dir, _ = shrunk_run("grpo", 0, LONGER)
    run_dir, summary = realtime_run(shrunk_config, tmp_path, "grpo", "ray", (*SYNC, *RAY_FAST, "agent.runtime.workers=2"))
    check_same_contract_as_sim(run_dir, summary, sim_dir, max_staleness=0)
    check_on_policy(run_dir, summary)
    assert json.loads((run_dir / "timings.json").read_text())["workers"] == 2


@pytest.mark.slow
def test_ray_worker_killed_mid_batch_is_replaced_and_loses_no_episode(ray_cluster, shrunk_config):
    from sao_env.runtime.ray_backend import RayRuntime, RayWorkers

    played: list[int] = []

    class RecordingWorkers(RayWorkers):
        def play(self, w, requests, version, published, members):
            rollouts = super().play(w, requests, version, published, members)
            played.extend(r.id for r in requests)
            return rollouts

    class RecordingRuntime(RayRuntime):
        workers_class = RecordingWorkers

    # 0.2 wall seconds per scenario second: time for the replacement actor to start and replay the batch. Phases of
    # 18 s (SHRINK's: 54 scenario seconds, 11 s of wall clock): the kill comes after the first update (about 11 scenario
    # seconds in); the replacement started and replayed the batch 4-6.5 s of wall clock later on a loaded 2-core
    # machine (measured: at 0.2 done at 31, 34 and 41 scenario seconds, three runs, its episodes delivered before the
    # end; at 0.3 the run took 16 s of wall clock instead of 11; at 0.1 the replay outlasted the run). The run's end
    # also waits for a worker's play to return, so a replay still under way at the end finishes all the same (its
    # episodes then still running: checked below).
    config = shrunk_config("grpo", 0, ("agent.runtime.backend=ray", "agent.runtime.workers=2", "agent.runtime.time_scale=0.2"))
    scenario = Scenario(config.env)
    agent = build_agent(config, scenario, show_progress=False)
    episodes, records = [], []
    runtime = RecordingRuntime(scenario, agent, config.agent.runtime, seed=0, on_update=records.append,
                         on_episode=lambda e, v: episodes.append(e), on_eval=lambda t, rt: None, eval_times=[])
    killed: list[tuple[int, list[int]]] = []

    def kill_a_busy_worker() -> None:
        while not hasattr(runtime, "pool") or not records:  # after the first update: mid-run
            time.sleep(0.01)
        pool = runtime.pool
        while not killed:
            for w, ids in enumerate(pool.busy):
                if ids:
                    os.kill(pool.pids[w], signal.SIGKILL)
                    killed.append((w, list(ids)))
                    break
            time.sleep(0.001)

    killer = threading.Thread(target=kill_a_busy_worker, daemon=True)
    killer.start()
    state = runtime.run()
    killer.join(timeout=5)
    assert killed, "no worker was busy to kill"
    w, ids = killed[0]
    assert runtime.wall["worker_restarts"] == 1 and runtime.wall["requeued_requests"] == len(ids)
    assert runtime.requeued == ids
    assert any(r["async/worker_restarts"] == 1.0 for r in records)
    per_group = Counter(e.group_id for e in episodes)
    core = runtime.core
    assert set(ids) <= set(played), "the killed batch was not played again"
    for request_id in ids:  # played again: complete, or still running at the end (episodes due after it, as in sim)
        if request_id in core.running:
            assert per_group[request_id] == len(core.running[request_id].group) - core.running[request_id].pending
        else:
            assert per_group[request_id] == agent.group_size, request_id
    # Nothing lost: every started group is complete (consumed, buffered or blocked) or still in flight.
    assert state.completed == state.consumed + state.dropped + core.buffered_episodes + core.blocked_episodes \
        + core.partial_episodes
    assert state.started * agent.group_size == state.completed + runtime.in_flight
    assert state.dropped == 0 and len(episodes) == state.completed
