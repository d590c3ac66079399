"""Sandboxed run latency and throughput: bubblewrap against the rlimits-only fallback.

    python bench/bench_sandbox.py [--runs 50] [--pytest-runs 10] [--workers 2]

For each isolation mode, prints p50/p95 latency (seconds, wall clock from ``run`` call to
result) of three workloads, each run in a fresh working copy:
  trivial    ``python -I -S -c``-like script printing one line
  unittest   a small test-suite script (unittest, 3 tests, stdlib only)
  pytest     ``python -m pytest -q`` on a 3-test file (the venv's pytest, plugin autoload off
             as in forge grading)
then the same workloads on a warm interpreter (``sao_env.sandbox.warm``: one bubblewrap sandbox
started once, each run a fork of a server that imported pytest already) and the cold/warm ratio,
then runs per minute of the unittest workload with ``--workers`` threads in parallel.

Where a Docker engine answers (``--no-docker`` skips it), the same machine's Docker sandbox against
bubblewrap (``--docker-runs`` each; the sandbox image is built first when missing):
  start      container start latency: ``true`` in a fresh container of the sandbox image (create,
             start, wait, remove), and the trivial script
  test runs  ``pytest -q`` runs per minute with ``--workers`` threads: Docker, bubblewrap cold,
             bubblewrap warm (a fork of a warm interpreter, what forge grading uses by default)
  episodes   codebase-drift demonstrations (view, edit, submit) through ``RepoEnv`` with uncached
             grading, per minute with ``--workers`` threads: Docker against bubblewrap (warm, the default)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TRIVIAL = "print('ok')\n"
UNITTEST = """\
import unittest

def solve(xs):
    return sorted(set(xs))

class T(unittest.TestCase):
    def test_sorted(self):
        self.assertEqual(solve([3, 1, 2, 3]), [1, 2, 3])
    def test_empty(self):
        self.assertEqual(solve([]), [])
    def test_big(self):
        self.assertEqual(len(solve(range(10000))), 10000)

unittest.main(argv=["t"], verbosity=0, exit=True)
"""
PYTEST = """\
def solve(xs):
    return sorted(set(xs))

def test_sorted():
    assert solve([3, 1, 2, 3]) == [1, 2, 3]

def test_empty():
    assert solve([]) == []

def test_big():
    assert len(solve(range(10000))) == 10000
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def make_source(root: Path) -> Path:
    src = root / "src"
    src.mkdir()
    (src / "trivial.py").write_text(TRIVIAL)
    (src / "suite.py").write_text(UNITTEST)
    (src / "test_solve.py").write_text(PYTEST)
    return src


PYTEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def one_run(executor, src: Path, scratch: Path, argv_tail: list[str]) -> float:
    from sao_env.sandbox import fresh_workdir

    work = fresh_workdir(src, scratch)
    try:
        started = time.perf_counter()
        result = executor.run([executor.python, *argv_tail], workdir=work, timeout_s=60,
                              env=PYTEST_ENV if "pytest" in argv_tail else None)
        elapsed = time.perf_counter() - started
        if not result.ok:
            raise SystemExit(f"run failed: {result}")
        return elapsed
    finally:
        shutil.rmtree(work, ignore_errors=True)


def warm_runs(executor, src: Path, workloads: dict) -> dict[str, float]:
    """p50 latency of each workload on a warm interpreter (pytest and its plugins preloaded, as for
    forge grading), files written per run."""
    from sao_env.sandbox.warm import WarmInterpreter
    from sao_env.tasks.forge.grading import _pytest_modules

    files = {path.name: path.read_text() for path in src.iterdir()}
    interpreter = WarmInterpreter(executor, flags=(), preload=_pytest_modules(), env=PYTEST_ENV)
    out = {}
    try:
        for name, (tail, runs) in workloads.items():
            argv = [arg for arg in tail if arg not in ("-I", "-S")]
            times = []
            for _ in range(runs + 1):
                started = time.perf_counter()
                result = interpreter.run(argv, files, timeout_s=60, env=PYTEST_ENV if "pytest" in argv else None)
                times.append(time.perf_counter() - started)
                if not result.ok:
                    raise SystemExit(f"warm run failed: {result}")
            out[name] = percentile(times[1:], 0.5)  # the first run includes the server's start
    finally:
        interpreter.close()
    return out


def per_minute(function, count: int, workers: int) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(function, range(count)))
    return count / (time.perf_counter() - started) * 60


def docker_figures(src: Path, scratch: Path, runs: int, workers: int) -> None:
    """Container start latency, test runs and coding episodes per minute: Docker against bubblewrap."""
    import numpy as np

    from sao_env.envs.base import make_task_env
    from sao_env.sandbox import Limits, LocalExecutor, docker_sandbox
    from sao_env.sandbox.warm import WarmInterpreter
    from sao_env.tasks.forge.grading import _pytest_modules, clear_caches
    from sao_env.tasks.forge.source import ForgeParams, ForgeSource

    docker = docker_sandbox(Limits())
    bwrap = LocalExecutor()
    print(f"docker: {docker.image}")
    empty = scratch / "empty"
    empty.mkdir()
    starters = {"docker": docker, **({"bubblewrap": bwrap} if bwrap.isolation == "bubblewrap" else {})}
    for mode, executor in starters.items():
        times = []
        for _ in range(runs + 1):
            started = time.perf_counter()
            result = executor.run(["/bin/true"], workdir=empty, timeout_s=60)
            times.append(time.perf_counter() - started)
            assert result.ok, result
        times = times[1:]
        print(f"{mode:<11} {'start':<9} {runs:>5} {percentile(times, 0.5):>8.3f} {percentile(times, 0.95):>8.3f} "
              f"{statistics.fmean(times):>8.3f}   (true: " + ("a fresh container: create, start, wait, remove)"
                                                         if mode == "docker" else "namespaces, mounts, rlimits)"))
    trivial = [one_run(docker, src, scratch, ["-I", "-S", "trivial.py"]) for _ in range(runs)]
    print(f"{'docker':<11} {'trivial':<9} {runs:>5} {percentile(trivial, 0.5):>8.3f} {percentile(trivial, 0.95):>8.3f} "
          f"{statistics.fmean(trivial):>8.3f}")

    tail = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_solve.py"]
    rates = {"docker": per_minute(lambda _: one_run(docker, src, scratch, tail), runs, workers)}
    if bwrap.isolation == "bubblewrap":
        rates["bubblewrap"] = per_minute(lambda _: one_run(bwrap, src, scratch, tail), runs, workers)
        files = {path.name: path.read_text() for path in src.iterdir()}
        warm = WarmInterpreter(bwrap, flags=(), preload=_pytest_modules(), env=PYTEST_ENV)
        try:
            warm.run(tail, files, timeout_s=60, env=PYTEST_ENV)  # the server's start
            rates["bubblewrap warm"] = per_minute(lambda _: warm.run(tail, files, timeout_s=60, env=PYTEST_ENV),
                                                  runs, 1)  # one server serves one call at a time
        finally:
            warm.close()
    print("test runs per minute (pytest -q, " + f"{workers} workers; warm: 1): "
          + ", ".join(f"{name} {rate:.0f}" for name, rate in rates.items()))

    source = ForgeSource(ForgeParams(repo_seed=0, head=1, bug_kinds=["operator_swap"]))
    tasks = [source.task(seed) for seed in range(runs)]

    def episode(index: int, sandbox: str) -> float:
        clear_caches()
        task = tasks[index]
        env = make_task_env(task, max_turns=8, sandbox=sandbox)
        env.reset(seed=0, options={"task": task})
        reward = 0.0
        for turn in ForgeSource.demonstrate(task, np.random.default_rng(0)):
            _, reward, terminated, truncated, _ = env.step(turn.action)
            if terminated or truncated:
                break
        env.close()
        assert reward == 1.0
        return reward

    episode(0, "bubblewrap")  # the warm interpreter's start
    sandboxes = ["docker"] + (["bubblewrap"] if bwrap.isolation == "bubblewrap" else [])
    rates = {sandbox: per_minute(lambda i, s=sandbox: episode(i, s), runs, workers) for sandbox in sandboxes}
    print(f"coding episodes per minute (codebase-drift demonstrations, uncached grading, {workers} workers): "
          + ", ".join(f"{name} {rate:.0f}" for name, rate in rates.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--pytest-runs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--docker-runs", type=int, default=12)
    parser.add_argument("--no-docker", action="store_true", help="Skip the Docker figures.")
    parser.add_argument("--docker-only", action="store_true", help="Only the Docker figures.")
    args = parser.parse_args()

    from sao_env.sandbox import LocalExecutor, sandbox_status

    print(sandbox_status())
    modes = {"fallback": LocalExecutor(use_bwrap=False)}
    bwrap = LocalExecutor()
    if bwrap.isolation == "bubblewrap":
        modes = {"bubblewrap": bwrap, **modes}
    workloads = {"trivial": (["-I", "-S", "trivial.py"], args.runs),
                 "unittest": (["-I", "-S", "suite.py"], args.runs),
                 "pytest": (["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_solve.py"], args.pytest_runs)}
    with tempfile.TemporaryDirectory(prefix="sao-bench-sandbox-") as tmp:
        scratch = Path(tmp)
        src = make_source(scratch)
        if not args.no_docker:
            from sao_env.sandbox.docker_exec import engine_problem

            problem = engine_problem()
            if problem is None:
                docker_figures(src, scratch, args.docker_runs, args.workers)
            else:
                print(f"docker: no engine reachable ({problem}); no Docker figures")
        if args.docker_only:
            return
        print(f"{'mode':<11} {'workload':<9} {'runs':>5} {'p50 s':>8} {'p95 s':>8} {'mean s':>8}")
        for mode, executor in modes.items():
            for name, (tail, runs) in workloads.items():
                one_run(executor, src, scratch, tail)  # warm the page cache
                times = [one_run(executor, src, scratch, tail) for _ in range(runs)]
                print(f"{mode:<11} {name:<9} {runs:>5} {percentile(times, 0.5):>8.3f} "
                      f"{percentile(times, 0.95):>8.3f} {statistics.fmean(times):>8.3f}")
        if "bubblewrap" in modes:
            cold_p50 = {}
            for name, (tail, runs) in workloads.items():
                cold_p50[name] = percentile([one_run(bwrap, src, scratch, tail) for _ in range(min(runs, 10))], 0.5)
            warm_p50 = warm_runs(bwrap, src, workloads)
            for name, p50 in warm_p50.items():
                print(f"{'warm':<11} {name:<9} {workloads[name][1]:>5} {p50:>8.3f}   cold p50 {cold_p50[name]:.3f} s: "
                      f"{cold_p50[name] / p50:.1f}x faster")
        for mode, executor in modes.items():
            tail, runs = workloads["unittest"][0], args.runs
            started = time.perf_counter()
            with ThreadPoolExecutor(args.workers) as pool:
                list(pool.map(lambda _: one_run(executor, src, scratch, tail), range(runs)))
            wall = time.perf_counter() - started
            print(f"{mode:<11} unittest x{runs} on {args.workers} workers: {wall:.2f} s, "
                  f"{runs / wall * 60:.0f} runs/min")


if __name__ == "__main__":
    main()
