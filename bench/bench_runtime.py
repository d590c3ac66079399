"""Runtime throughput of the `sim` backend on the tiny model (wall clock, this machine).

Prints, per agent: episodes learned per wall-clock second, wall time per episode split into
generation / learner update / held-out evaluation, simulated episodes per hour, and the peak
resident memory of the process. Run: `python bench/bench_runtime.py [--agents sao,grpo]`.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from sao_env.experiment import resolve_config, run_experiment

SHORT = ["env.phases.0.duration_h=0.05", "env.phases.1.duration_h=0.05", "env.phases.2.duration_h=0.05"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="sao,grpo")
    parser.add_argument("--env", default="style-drift")
    args = parser.parse_args()
    print(f"{'agent':<14}{'episodes':>9}{'ep/s wall':>11}{'gen ms/ep':>11}{'upd ms/ep':>11}{'eval s':>8}{'ep/sim-h':>10}")
    for agent in args.agents.split(","):
        config = resolve_config(args.env, agent, 0, SHORT)
        with tempfile.TemporaryDirectory() as tmp:
            run_experiment(config, Path(tmp), show_progress=False)  # warm start cached, then measured below
            start = time.perf_counter()
            summary = run_experiment(config, Path(tmp) / "measured", show_progress=False, save_checkpoint=False)
            wall = time.perf_counter() - start
            timings = json.loads((Path(tmp) / "measured" / "timings.json").read_text())
        n = summary["episodes_completed"]
        print(f"{agent:<14}{n:>9}{n / wall:>11.1f}{1000 * timings['generate_s'] / n:>11.1f}"
              f"{1000 * timings['update_s'] / max(summary['episodes_consumed'], 1):>11.1f}"
              f"{timings['eval_s']:>8.1f}{summary['episodes_per_hour']:>10.0f}")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
