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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--pytest-runs", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
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
