"""What resume checkpoints cost on the demo scenario (style-drift, SAO and GRPO), this machine.

For each agent, the same run is made with checkpoints at the default interval and with them off
(``CheckpointEvery`` off: no checkpoint written, signals still caught), alternating the order
between repeats. Prints the checkpoint size (MB), how many were written, the wall-clock seconds
spent writing them and their share of the run (the direct figure), and the wall-clock difference
between the paired runs (the A/B figure; noisy on a shared machine). The warm start is built
(and cached) before anything is timed.

Run: ``python bench/bench_checkpoint.py [--agents sao,grpo] [--repeats 1] [--cut H]``; ``--cut``
shortens each phase to H simulated hours (default: the demo's full 0.6 h).

``--memory GB`` instead measures what writing and reading one checkpoint of a GB-sized state (one float32
tensor) adds to a process's peak resident memory, each in a fresh child process: ``write`` (the body streamed
to the file) beside the whole encoding built in memory first (``encode``, how checkpoints were written before
2026-12-07), and ``decode`` of the file read back. A real-model SAO checkpoint is 3.56 GB (docs/performance.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path

from sao_env.experiment import resolve_config, run_experiment
from sao_env.runtime.checkpoint import CheckpointEvery


def timed(config, out: Path, every: CheckpointEvery) -> dict:
    start = time.perf_counter()
    run_experiment(config, out, show_progress=False, save_checkpoint=False, checkpoint_every=every)
    timings = json.loads((out / "timings.json").read_text())
    return {"wall": time.perf_counter() - start, **timings}


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _memory_child(how: str, gb: float, folder: str, out) -> None:
    import torch

    from sao_env.runtime import checkpoint as ckpt

    path = Path(folder) / "ckpt-000001.pt"
    if how == "decode":
        before = _peak_gb()
        ckpt.decode(path.read_bytes())
    else:
        state = {"weights": torch.ones(int(gb * 2**30) // 4, dtype=torch.float32)}
        before = _peak_gb()
        if how == "write":
            ckpt.write(Path(folder), 1, state)
        else:
            path.write_bytes(ckpt.encode(state))
    out.send(_peak_gb() - before)


def memory(gb: float) -> None:
    """Peak resident memory added by each way of writing, and by reading, a ``gb``-GB checkpoint."""
    context = mp.get_context("spawn")
    print(f"a checkpoint of {gb:g} GB (one float32 tensor): peak resident memory added, GB")
    with tempfile.TemporaryDirectory() as tmp:
        for how in ("encode", "write", "decode"):
            receive, send = context.Pipe(duplex=False)
            child = context.Process(target=_memory_child, args=(how, gb, tmp, send))
            child.start()
            added = receive.recv()
            child.join()
            what = {"encode": "write, the encoding built in memory first (before 2026-12-07)",
                    "write": "write, the body streamed to the file (checkpoint.write)",
                    "decode": "read back (checkpoint.decode of the file's bytes)"}[how]
            print(f"  {added:6.2f}  {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="sao,grpo")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--cut", type=float, default=None, help="simulated hours per phase (default: the demo's)")
    parser.add_argument("--memory", type=float, default=None, metavar="GB",
                        help="measure the peak memory of writing and reading a checkpoint of this size instead")
    args = parser.parse_args()
    if args.memory is not None:
        memory(args.memory)
        return
    default, off = CheckpointEvery(), CheckpointEvery(updates=None, sim_minutes=None)
    cut = [f"env.phases.{i}.duration_h={args.cut}" for i in range(3)] if args.cut else []
    print(f"style-drift{' cut to ' + str(args.cut) + ' h per phase' if args.cut else ''}, "
          f"checkpoint every {default.updates} updates (the default)")
    print(f"{'agent':<6} {'updates':>7} {'ckpts':>5} {'size MB':>8} {'write s':>8} {'share %':>8} "
          f"{'wall on s':>9} {'wall off s':>10} {'A/B %':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for agent in args.agents.split(","):
            config = resolve_config("style-drift", agent, 0, cut)
            run_experiment(config, Path(tmp) / "warm", show_progress=False, save_checkpoint=False,
                           checkpoint_every=off)  # builds the warm start
            on_runs, off_runs = [], []
            for r in range(args.repeats):
                pair = [(default, on_runs), (off, off_runs)]
                for every, runs in pair if r % 2 == 0 else pair[::-1]:
                    runs.append(timed(config, Path(tmp) / f"{agent}-{len(runs)}-{every.enabled}", every))
            updates = json.loads((Path(tmp) / f"{agent}-0-True" / "summary.json").read_text())["updates_per_hour"]
            updates *= sum(p.duration_h for p in config.env.phases)
            wall_on = sum(r["wall"] for r in on_runs) / len(on_runs)
            wall_off = sum(r["wall"] for r in off_runs) / len(off_runs)
            write_s = sum(r["checkpoint_s"] for r in on_runs) / len(on_runs)
            ckpts = on_runs[0]["checkpoints"]
            print(f"{agent:<6} {updates:>7.0f} {ckpts:>5} {on_runs[0]['checkpoint_mb']:>8.2f} {write_s:>8.2f} "
                  f"{100 * write_s / (wall_on - write_s):>8.2f} {wall_on:>9.1f} {wall_off:>10.1f} "
                  f"{100 * (wall_on - wall_off) / wall_off:>7.1f}")


if __name__ == "__main__":
    main()
