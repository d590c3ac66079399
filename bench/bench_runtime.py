"""Runtime throughput of the `sim` backend on the tiny model (wall clock and CPU time, this machine).

Prints, for each agent on a short cut of style-drift and tool-drift, episodes per wall-clock
second with batched generation off and on and their ratio; the share of a run's CPU time spent
outside the model's forward and backward passes (harness overhead); and the wall clock of
`sao-env compare --jobs 1` against `--jobs 2` on a short cut of the demo. Warm starts are built
(and cached) before anything is timed.

Run: `python bench/bench_runtime.py [--agents sao,grpo] [--envs style-drift,tool-drift] [--skip-jobs]`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from sao_env.experiment import resolve_config, run_experiment
from sao_env.specs import find_spec, load_yaml

PHASE_HOURS = {"style-drift": 0.05, "tool-drift": 0.03}
"""Each phase of the scenario cut to this many simulated hours."""


def cut(env: str) -> list[str]:
    phases = len(load_yaml(find_spec("envs", env))["phases"])
    return [f"env.phases.{i}.duration_h={PHASE_HOURS[env]}" for i in range(phases)]


def timed_run(env: str, agent: str, extra: list[str], out: Path) -> dict:
    config = resolve_config(env, agent, 0, cut(env) + extra)
    wall, cpu = time.perf_counter(), time.process_time()
    summary = run_experiment(config, out, show_progress=False, save_checkpoint=False)
    timings = json.loads((out / "timings.json").read_text())
    return {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu, "episodes": summary["episodes_completed"],
            "warm": timings["warm_start_s"], **timings}


class ModelClock:
    """CPU seconds spent inside the model: lean or transformers forwards, backward passes, optimizer steps."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.depth = 0

    def wrap(self, owner, name: str) -> None:
        original = getattr(owner, name)
        clock = self

        def timed(*args, **kwargs):
            if clock.depth:
                return original(*args, **kwargs)
            clock.depth += 1
            start = time.process_time()
            try:
                return original(*args, **kwargs)
            finally:
                clock.seconds += time.process_time() - start
                clock.depth -= 1

        setattr(owner, name, timed)


def harness_overhead(env: str, agent: str) -> tuple[float, float]:
    """(overhead share, CPU seconds) of one short run: CPU time outside model passes / all CPU time."""
    from transformers import PreTrainedModel

    from sao_env.policy.lean import LeanDecoder

    clock = ModelClock()
    for owner, name in ((LeanDecoder, "hidden"), (LeanDecoder, "logits"), (torch.Tensor, "backward"),
                        (torch.optim.Adam, "step"), (PreTrainedModel, "__call__")):
        clock.wrap(owner, name)
    with tempfile.TemporaryDirectory() as tmp:
        result = timed_run(env, agent, [], Path(tmp) / "run")
    cpu = result["cpu"] - result["warm"]
    return 1 - clock.seconds / cpu, cpu


def compare_jobs(jobs: int, runs: Path) -> float:
    cut = [f"env.phases.{i}.duration_h=0.02" for i in range(3)]
    start = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "sao-env"), "compare", "--env", "style-drift", "--agents", "sao,grpo",
                    "--seeds", "0,1", "--jobs", str(jobs), "--runs-dir", str(runs), "--leaderboard-dir", str(runs / "lb"),
                    *cut], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="sao,grpo")
    parser.add_argument("--envs", default="style-drift,tool-drift")
    parser.add_argument("--skip-jobs", action="store_true", help="Skip the compare --jobs measurement.")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'env':<13}{'agent':<7}{'episodes':>9}{'off ep/s':>10}{'on ep/s':>9}{'on/off':>8}"
          f"{'gen s off/on':>14}{'rows/batch':>11}{'upd s':>7}{'eval s':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for env in args.envs.split(","):
            for agent in args.agents.split(","):
                timed_run(env, agent, [], Path(tmp) / f"{env}-{agent}-warm")  # builds and caches the warm start
                off = timed_run(env, agent, ["agent.runtime.batch_generation=false"], Path(tmp) / f"{env}-{agent}-off")
                on = timed_run(env, agent, [], Path(tmp) / f"{env}-{agent}-on")
                rate_off, rate_on = off["episodes"] / off["wall"], on["episodes"] / on["wall"]
                print(f"{env:<13}{agent:<7}{on['episodes']:>9}{rate_off:>10.1f}{rate_on:>9.1f}{rate_on / rate_off:>7.2f}x"
                      f"{off['generate_s']:>7.1f}/{on['generate_s']:<6.1f}"
                      f"{on['generate_rows'] / max(on['generate_batches'], 1):>11.1f}{on['update_s']:>7.1f}{on['eval_s']:>7.1f}",
                      flush=True)
    for agent in args.agents.split(","):
        share, cpu = harness_overhead("style-drift", agent)
        print(f"harness overhead ({agent}, style-drift cut): {100 * share:.1f}% of {cpu:.1f} CPU s outside model passes")
    if not args.skip_jobs:
        with tempfile.TemporaryDirectory() as tmp:
            one = compare_jobs(1, Path(tmp) / "jobs1")
            two = compare_jobs(2, Path(tmp) / "jobs2")
        print(f"compare sao,grpo x seeds 0,1 (style-drift cut): --jobs 1 {one:.1f} s, --jobs 2 {two:.1f} s, "
              f"{one / two:.2f}x on {os.cpu_count()} cores")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
