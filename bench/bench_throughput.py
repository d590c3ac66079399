"""Runs per core-hour of a fixed mix of runs, today's code against an older commit, side by side.

The mix: style-drift sao and grpo, tool-drift sao, codebase-drift grpo, at seeds
0..N-1 (4 by default). Each tree makes each (scenario, recipe) as a user would, one
``sao-env compare --jobs 1`` process over the seeds, in a fresh run folder; the two trees alternate
item by item (base, new, base, new, ...) so that a change of the machine's load falls on both.

What is counted: the CPU seconds (user + system) of each ``compare`` process and its children, read
from ``wait4``, so that other processes on the machine do not inflate the figure the way they
inflate wall time; runs per core-hour = runs / (CPU seconds / 3600). Wall seconds and the peak
resident memory of any process are printed beside. The warm starts are trained before the clock
starts, once per tree (each tree has a cache of its own: a tree may key or train them otherwise),
by a ``compare`` over the same items with every phase cut to 0.002 h.

The older tree is the commit given (``--base``), taken with ``git archive`` into a temporary folder
and imported from there (checked) with this environment's packages. ``--cut`` applies overrides to
every timed run of both trees (e.g. shorter phases, for a quick reading); the figure the issue asks
for is the full mix without a cut. The last line is ``throughput ratio: X.XXx`` (new over base).

    python bench/bench_throughput.py --base e8f26d9
    python bench/bench_throughput.py --base e8f26d9 --seeds 2 --cut env.phases.0.duration_h=0.05 ...
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIX = (("style-drift", "sao"), ("style-drift", "grpo"), ("tool-drift", "sao"), ("codebase-drift", "grpo"))
CLI = "import sys; from sao_env.cli import main; sys.exit(main(sys.argv[1:]))"
"""The command line of either tree (older trees have no ``python -m sao_env.cli``)."""
WARM_CUT = tuple(f"env.phases.{i}.duration_h=0.002" for i in range(3))


@dataclass
class Tally:
    """What one tree's timed ``compare`` processes cost."""

    name: str
    runs: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    peak_rss_mb: float = 0.0
    items: list[str] = field(default_factory=list)

    @property
    def runs_per_core_hour(self) -> float:
        return self.runs / (self.cpu_s / 3600) if self.cpu_s else float("nan")


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def export_tree(commit: str, into: Path) -> Path:
    """The files of ``commit`` (``git archive``) in ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"bench_throughput: cannot export {commit}: {archive.stderr.decode().strip()}")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=__import__("io").BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def tree_env(tree: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(tree), SAO_ENV_CACHE=str(cache), PYTHONDONTWRITEBYTECODE="1")
    return env


def check_import(tree: Path, env: dict[str, str]) -> None:
    where = subprocess.run([sys.executable, "-c", "import sao_env; print(sao_env.__file__)"], cwd=tree, env=env,
                           capture_output=True, text=True)
    if where.returncode != 0 or not where.stdout.strip().startswith(str(tree)):
        raise SystemExit(f"bench_throughput: {tree} does not import its own sao_env ({where.stdout or where.stderr})")


def compare(tree: Path, env: dict[str, str], scenario: str, agent: str, seeds: int, out: Path,
            overrides: tuple[str, ...]) -> tuple[float, float, float]:
    """One ``compare --jobs 1`` process; returns (CPU seconds, wall seconds, peak RSS in MB)."""
    argv = [sys.executable, "-c", CLI, "compare", "--env", scenario, "--agents", agent,
            "--seeds", ",".join(str(s) for s in range(seeds)), "--jobs", "1", "--runs-dir", str(out / "runs"),
            "--leaderboard-dir", str(out / "boards"), *overrides]
    start = time.perf_counter()
    with open(out.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(argv, cwd=tree, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"bench_throughput: {' '.join(argv[2:])} failed in {tree} (exit {proc.returncode}); "
                         f"see {out.with_suffix('.log')}")
    return usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="e8f26d9", help="The older commit to compare against (default e8f26d9).")
    parser.add_argument("--seeds", type=int, default=4, help="Seeds per item of the mix (default 4).")
    parser.add_argument("--cut", nargs="*", default=[], help="Overrides applied to every timed run of both trees.")
    parser.add_argument("--only", default="", help="Comma-separated scenario:agent items instead of the whole mix.")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary folder (runs, logs) and print it.")
    args = parser.parse_args()
    mix = [tuple(item.split(":")) for item in args.only.split(",") if item] or list(MIX)
    work = Path(tempfile.mkdtemp(prefix="sao-bench-throughput-"))
    failed = True
    try:
        trees = {"base": export_tree(args.base, work / "base-tree"), "new": ROOT}
        envs = {name: tree_env(tree, work / f"cache-{name}") for name, tree in trees.items()}
        for name, tree in trees.items():
            check_import(tree, envs[name])
        say(f"bench_throughput: base {args.base} against the working tree; mix {mix}, {args.seeds} seeds each; "
            f"cut {list(args.cut) or 'none'}; work folder {work}")
        for name, tree in trees.items():  # warm starts, untimed
            for scenario, agent in mix:
                say(f"  warm start {name}: {scenario} {agent} ...")
                compare(tree, envs[name], scenario, agent, 1, work / f"warm-{name}-{scenario}-{agent}", WARM_CUT)
        tallies = {name: Tally(name) for name in trees}
        for scenario, agent in mix:
            for name, tree in trees.items():
                cpu, wall, rss = compare(tree, envs[name], scenario, agent, args.seeds,
                                         work / f"timed-{name}-{scenario}-{agent}", tuple(args.cut))
                tally = tallies[name]
                tally.runs += args.seeds
                tally.cpu_s += cpu
                tally.wall_s += wall
                tally.peak_rss_mb = max(tally.peak_rss_mb, rss)
                tally.items.append(f"{scenario}/{agent}: {cpu:.1f} CPU s, {wall:.1f} wall s")
                say(f"  {name:<4} {scenario} {agent} x{args.seeds}: {cpu:.1f} CPU s, {wall:.1f} wall s, peak RSS {rss:.0f} MB")
        for tally in tallies.values():
            print(f"{tally.name}: {tally.runs} runs, {tally.cpu_s:.1f} CPU s, {tally.wall_s:.1f} wall s, "
                  f"{tally.runs_per_core_hour:.1f} runs per core-hour, peak RSS {tally.peak_rss_mb:.0f} MB")
            for item in tally.items:
                print(f"    {item}")
        ratio = tallies["new"].runs_per_core_hour / tallies["base"].runs_per_core_hour
        print(f"throughput ratio: {ratio:.2f}x")
        failed = False
    finally:
        if args.keep or failed:
            say(f"bench_throughput: kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
