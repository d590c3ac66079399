"""Coding- and tool-environment costs on this machine: sandboxed test runs, forge episodes and
Python tool calls, each cold (a fresh sandboxed interpreter per run) and warm (a fork of a warm
interpreter per run, ``sao_env.sandbox.warm``), with the ratio.

    python bench/bench_coding.py [--runs 20] [--episodes 12] [--calls 60] [--workers 1]

Prints the sandbox's isolation mode, then
  test run    p50/p95 wall-clock seconds of one sandboxed ``pytest -rA`` of a forge repository
              (a fresh working copy each time; what ``run_tests`` and grading cost)
  episodes    demonstrations (view, edit, submit) played through ``RepoEnv`` including the
              sandboxed grading, caches cleared before each episode: episodes per minute
              (``--workers`` threads in parallel)
  tool call   one call of tool-drift's Python tool (``print(mul(a, b))``, distinct operands):
              p50 seconds cold and warm, and a remembered output (the same call again)
Warm rows need bubblewrap; without it only the cold rows print.
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
from sao_env.sandbox import default_executor, sandbox_status, warm
from sao_env.tasks import tool_math
from sao_env.tasks.forge import BUG_KINDS, ForgeSource
from sao_env.tasks.forge.grading import clear_caches, run_pytest
from sao_env.types import Task


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def timed(function, count: int) -> list[float]:
    times = []
    for k in range(count):
        started = time.perf_counter()
        function(k)
        times.append(time.perf_counter() - started)
    return times


def play(task: Task, executor) -> float:
    """One demonstration through RepoEnv, uncached; returns the reward."""
    clear_caches()
    env = RepoEnv(max_turns=8, executor=executor)
    env.reset(seed=0, options={"task": task})
    reward = 0.0
    for turn in ForgeSource.demonstrate(task, np.random.default_rng(0)):
        _, reward, terminated, truncated, _ = env.step(turn.action)
        if terminated or truncated:
            break
    env.close()
    return reward


def row(name: str, times: list[float], extra: str = "") -> float:
    p50 = percentile(times, 0.5)
    print(f"{name:<22} n={len(times):<4} p50={p50:.4f}s  p95={percentile(times, 0.95):.4f}s"
          f"  mean={statistics.mean(times):.4f}s{extra}")
    return p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()

    print(sandbox_status())
    hot = warm.available(default_executor())
    files = dict(ForgeSource(ForgeSource.Params(repo_seed=0, head=2)).task(0).reference["files"])
    modes = {"cold": default_executor()} | ({"warm": None} if hot else {})
    p50 = {}
    for mode, executor in modes.items():
        run_pytest(files, ["tests"], timeout_s=30, executor=executor)  # page cache; the warm server's start
        p50[mode] = row(f"test run {mode}", timed(lambda _: run_pytest(files, ["tests"], timeout_s=30,
                                                                         executor=executor), args.runs))
    if hot:
        print(f"test run warm/cold: {p50['cold'] / p50['warm']:.1f}x faster")

    tasks = [ForgeSource(ForgeSource.Params(repo_seed=k % 3, head=k % 4, bug_kinds=[BUG_KINDS[k % 5]])).task(k)
             for k in range(args.episodes)]
    rate = {}
    for mode, executor in modes.items():
        started = time.monotonic()
        with ThreadPoolExecutor(args.workers) as pool:
            rewards = list(pool.map(lambda task: play(task, executor), tasks))
        elapsed = time.monotonic() - started
        rate[mode] = 60 * len(tasks) / elapsed
        print(f"episodes {mode:<13} n={len(tasks)}  workers={args.workers}  {rate[mode]:.1f} episodes/min"
              f"  ({elapsed / len(tasks):.3f}s each)  mean reward={statistics.mean(rewards):.2f}")
    if hot:
        print(f"episodes warm/cold: {rate['warm'] / rate['cold']:.1f}x faster")

    codes = [f"print(mul({100 + k}, {200 + k}))" for k in range(args.calls)]
    tool_math.clear_tool_cache()
    cold = row("tool call cold", timed(lambda k: tool_math.run_tool_call(
        "v1", codes[k], executor=tool_math.tool_executor()), args.calls))
    if hot:
        tool_math.run_tool_call("v1", "print(0)")  # the warm server's start
        warm_p50 = row("tool call warm", timed(lambda k: tool_math.run_tool_call("v1", codes[k]), args.calls))
        cached = percentile(timed(lambda k: tool_math.run_tool_call("v1", codes[k]), args.calls), 0.5)
        print(f"tool call remembered   n={args.calls:<4} p50={cached * 1e6:.1f}us")
        print(f"tool call warm/cold: {cold / warm_p50:.1f}x faster")


if __name__ == "__main__":
    main()
