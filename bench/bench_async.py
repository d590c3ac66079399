"""Asynchronous against synchronous training in wall-clock time, on the same workers.

The demo scenario (style-drift's first phase, the sao recipe) with injected heavy-tailed environment
latency (log-normal, ``--sigma``), scaled by ``--time-scale`` so that each run lasts
``duration x time_scale`` of wall clock. Three real-time runs on the same rollout workers:

* sync:          ``threads``, max_staleness 0 (each update waits for its whole batch)
* threads async: ``threads``, max_staleness as the recipe sets it
* ray async:     ``ray`` (local cluster), the same

For each it prints episodes trained on per wall-clock second, tokens generated per second, the
learner's idle fraction and the mean weight-publish latency, then how far each run's staleness
histogram is from the ``sim`` backend's on the same configuration (total variation distance between
the normalised histograms: 0 = same, 1 = disjoint), and last the line
``async/sync wall-clock speedup: X.XXx`` (best async backend against sync).

    python bench/bench_async.py                 # about 5 minutes on 2 cores
    python bench/bench_async.py --no-ray --duration-h 0.05

With stderr not a terminal (a log file, nohup, CI) it says which run starts, and each run prints a
progress line every 30 s of wall clock.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from sao_env.experiment import resolve_config, run_experiment
from sao_env.policy.warmstart import Heartbeat


def overrides(args, backend: str, max_staleness: int | None) -> list[str]:
    out = [
        "env.phases=[" + "{name: boxed, duration_h: %s, sources: [{name: styled_arithmetic, params: {digits: 1, "
        "operators: ['+', '-'], candidates: [boxed, sentence, terse, hash], rewarded_style: boxed}}]}]" % args.duration_h,
        f"env.latency.env_median_s={args.median}", f"env.latency.env_sigma={args.sigma}",
        f"env.eval.interval_h={args.duration_h}", "env.eval.prompts_per_phase=16",
        f"agent.runtime.backend={backend}", f"agent.runtime.time_scale={args.time_scale}",
        f"agent.runtime.workers={args.workers}",
    ]
    if max_staleness is not None:
        out.append(f"agent.runtime.max_staleness={max_staleness}")
    if backend == "ray":
        out.append(f"agent.runtime.ray_num_cpus={args.ray_cpus}")
    return out


def one_run(args, backend: str, max_staleness: int | None, root: Path, beat: Heartbeat) -> dict:
    """One run; with stderr not a terminal, a line as it starts and the run's own progress lines every 30 s."""
    name = f"{backend}-{'sync' if max_staleness == 0 else 'async'}"
    config = resolve_config("style-drift", args.agent, args.seed, overrides(args, backend, max_staleness))
    wall = "" if backend == "sim" else f", about {args.duration_h * 3600 * args.time_scale:.0f} s of wall clock"
    beat.line(f"run {len(beat.names) + 1}/{beat.total}: {name}{wall}")
    beat.names.append(name)
    start = time.perf_counter()
    summary = run_experiment(config, root / name, show_progress=beat.enabled, save_checkpoint=False)
    timings = json.loads((root / name / "timings.json").read_text())
    return {"name": name, "sync": max_staleness == 0, "summary": summary, "timings": timings, "total_s": time.perf_counter() - start}


def hist(summary: dict) -> np.ndarray:
    h = np.asarray(summary["staleness_hist"], dtype=float)
    return h / max(h.sum(), 1.0)


def tv_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Total variation distance between two distributions over staleness 0, 1, ..."""
    n = max(len(a), len(b))
    return 0.5 * float(np.abs(np.pad(a, (0, n - len(a))) - np.pad(b, (0, n - len(b)))).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", default="sao")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--duration-h", type=float, default=0.1, help="scenario hours of the one phase")
    parser.add_argument("--time-scale", type=float, default=0.25, help="wall seconds per scenario second")
    parser.add_argument("--median", type=float, default=4.0, help="median environment latency (scenario s)")
    parser.add_argument("--sigma", type=float, default=1.5, help="log-normal sigma of the environment latency")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ray-cpus", type=int, default=2)
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()

    beat = Heartbeat("bench_async", 4 if args.no_ray else 5, unit="runs")
    beat.names = []
    with tempfile.TemporaryDirectory(prefix="bench-async-") as tmp:
        root = Path(tmp)
        runs = [one_run(args, "threads", 0, root, beat), one_run(args, "threads", None, root, beat)]
        if not args.no_ray:
            runs.append(one_run(args, "ray", None, root, beat))
        sims = {0: one_run(args, "sim", 0, root, beat), None: one_run(args, "sim", None, root, beat)}

    print(f"{args.agent} on style-drift (one phase of {args.duration_h} h), env latency log-normal median "
          f"{args.median} s sigma {args.sigma}, time_scale {args.time_scale}, {args.workers} rollout workers")
    print(f"{'run':<14} {'episodes/s':>10} {'tokens/s':>9} {'updates':>7} {'learner idle':>12} {'publish ms':>10} "
          f"{'staleness mean':>14} {'TV to sim':>9}")
    rate = {}
    for run in runs:
        s, t = run["summary"], run["timings"]
        rate[run["name"]] = s["episodes_consumed"] / t["run_wall_s"]
        sim = sims[0 if run["sync"] else None]["summary"]
        print(f"{run['name']:<14} {rate[run['name']]:>10.2f} {t['tokens_per_s']:>9.1f} {t['publishes']:>7d} "
              f"{t['learner_idle_frac']:>12.2f} {1000 * t['publish_s_mean']:>10.2f} {s['staleness_mean']:>14.2f} "
              f"{tv_distance(hist(s), hist(sim)):>9.3f}")
    for key, sim in sims.items():
        print(f"sim {'sync' if key == 0 else 'async'} staleness histogram: {sim['summary']['staleness_hist']}")
    for run in runs:
        print(f"{run['name']} staleness histogram: {run['summary']['staleness_hist']}")
    best = max((run["name"] for run in runs if not run["sync"]), key=rate.get)
    print(f"best async backend: {best}")
    sync = rate["threads-sync"]
    print(f"async/sync wall-clock speedup: {rate[best] / sync:.2f}x" if sync > 0 else
          "async/sync wall-clock speedup: n/a (the sync run trained on no episode; lengthen --duration-h)")


if __name__ == "__main__":
    main()
