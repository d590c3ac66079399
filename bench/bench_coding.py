"""Coding-environment costs on this machine: sandboxed test runs and forge episodes per minute.

    python bench/bench_coding.py [--runs 30] [--episodes 20] [--workers 1]

Prints the sandbox's isolation mode, then
  test run    p50/p95 wall-clock seconds of one sandboxed ``pytest -rA`` of a forge repository
              (a fresh working copy each time; what ``run_tests`` and grading cost)
  episodes    demonstrations (view, edit, submit) played through ``RepoEnv`` including the
              sandboxed grading, caches cleared before each episode: episodes per minute
              (``--workers`` threads in parallel).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from sao_env.envs.repo_env import RepoEnv
from sao_env.sandbox import sandbox_status
from sao_env.tasks.forge import BUG_KINDS, ForgeSource
from sao_env.tasks.forge.grading import clear_caches, run_pytest
from sao_env.types import Task


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def play(task: Task) -> float:
    """One demonstration through RepoEnv, uncached; returns the reward."""
    clear_caches()
    env = RepoEnv(max_turns=8)
    env.reset(seed=0, options={"task": task})
    reward = 0.0
    for turn in ForgeSource.demonstrate(task, np.random.default_rng(0)):
        _, reward, terminated, truncated, _ = env.step(turn.action)
        if terminated or truncated:
            break
    env.close()
    return reward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()

    print(sandbox_status())
    source = ForgeSource(ForgeSource.Params(repo_seed=0, head=2))
    task = source.task(0)
    files = dict(task.reference["files"])
    latencies = []
    for _ in range(args.runs):
        started = time.monotonic()
        run_pytest(files, ["tests"], timeout_s=30)
        latencies.append(time.monotonic() - started)
    print(f"test run   n={args.runs}  p50={percentile(latencies, 0.5):.3f}s  p95={percentile(latencies, 0.95):.3f}s"
          f"  mean={statistics.mean(latencies):.3f}s")

    tasks = [ForgeSource(ForgeSource.Params(repo_seed=k % 3, head=k % 4, bug_kinds=[BUG_KINDS[k % 5]])).task(k)
             for k in range(args.episodes)]
    started = time.monotonic()
    with ThreadPoolExecutor(args.workers) as pool:
        rewards = list(pool.map(play, tasks))
    elapsed = time.monotonic() - started
    print(f"episodes   n={len(tasks)}  workers={args.workers}  {60 * len(tasks) / elapsed:.1f} episodes/min"
          f"  ({elapsed / len(tasks):.3f}s each)  mean reward={statistics.mean(rewards):.2f}")


if __name__ == "__main__":
    main()
