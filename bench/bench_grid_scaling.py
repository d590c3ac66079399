"""A grid on a Ray cluster at 1 and 2 workers (this machine), and a model of N workers.

Runs one fixed small grid (2 rows x ``--seeds`` seeds on a short cut of style-drift) with
``sao-env grid --cluster``'s code (``run_grid(..., cluster=...)``) on a local Ray cluster of W worker
nodes of one CPU each (a head without CPUs), for W = 1 and 2, each time from empty run folders and a
fresh cluster, and prints per W:

- the wall clock of the grid and its runs per wall-clock hour (worker start-up included), and the
  time to the first finished run less that run's own time (a worker's start-up: imports, the
  cached warm start);
- the mean per-run cost (the seconds each run took on its node);
- the driver's own overhead per run: this process's CPU time over the grid (Ray's client threads
  included) and the wall time of its ledger writes, per run.

Then the model: N workers make R runs of c seconds each in ``ceil(R / N)`` waves after a start-up
S, while the driver handles one finished run every d seconds: T(N) = S + max(ceil(R / N) c, R d).
It prints T for the regime map (``leaderboards/regimes/grid.yaml``, 400 runs of 60-90 s of one core
each, as its header measured) on 8, 64 and 512 cores, with this machine's S and d.

Run: ``python bench/bench_grid_scaling.py [--seeds 3] [--workers 1,2]``.
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from pathlib import Path

import yaml

import sao_env  # noqa: F401  (first: pins the numerics before torch loads)

CUT = ["env.warm_start.steps=20", "env.warm_start.batch_size=8", "env.max_new_tokens=20",
       *(f"env.phases.{i}.sources.0.params.operators=[+]" for i in range(3)),
       *(f"env.phases.{i}.duration_h=0.01" for i in range(3)),
       "env.eval.interval_h=0.005", "env.eval.prompts_per_phase=4", "env.rollout_slots=8"]
"""The cut of every run: a few seconds of one core each."""
REGIME_RUNS = 400
REGIME_COST_S = (60.0, 90.0)
"""The regime map: runs, and one run's cost in seconds of one core (low, high), from its grid file's header."""


def measure(workers: int, seeds: int, root: Path) -> dict:
    import ray
    from ray.cluster_utils import Cluster

    from sao_env import provenance
    from sao_env.cluster import Cluster as Target
    from sao_env.grid import LEDGER, Ledger, load_grid, plan_grid, run_grid

    spec = {"title": "scaling bench", "scenarios": ["style-drift"], "seeds": list(range(seeds)), "baseline": "grpo",
            "cut": CUT, "rows": [{"label": "grpo", "agent": "grpo"}, {"label": "running mean", "agent": "running_mean"}]}
    folder = root / f"w{workers}"
    folder.mkdir(parents=True)
    (folder / "grid.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    grid = plan_grid(load_grid(folder / "grid.yaml"), source=folder / "grid.yaml", runs_dir=folder / "runs")
    ledger = Ledger(folder / "out" / LEDGER)
    writes: list[float] = []
    add = ledger.add

    def timed_add(*args, **kwargs) -> None:
        start = time.perf_counter()
        add(*args, **kwargs)
        writes.append(time.perf_counter() - start)

    ledger.add = timed_add
    costs: list[float] = []
    first: list[float] = []
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(workers):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        wall, cpu = time.perf_counter(), time.process_time()

        def done(run, summary, seconds) -> None:
            costs.append(seconds)
            if not first:
                first.append(time.perf_counter() - wall - seconds)

        run_grid(grid, code=provenance.code_version(), ledger=ledger, on_done=done,
                 cluster=Target(cluster.address))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        ray.shutdown()
        cluster.shutdown()
    runs = len(grid.runs)
    return {"workers": workers, "runs": runs, "wall_s": wall, "runs_per_hour": runs / wall * 3600,
            "startup_s": first[0], "cost_s": sum(costs) / len(costs), "driver_cpu_s": cpu / runs,
            "ledger_s": sum(writes) / len(writes)}


def model(runs: int, cost: float, workers: int, startup: float, driver: float) -> float:
    """Seconds for ``runs`` runs of ``cost`` seconds on ``workers`` one-core workers (module doc)."""
    return startup + max(math.ceil(runs / workers) * cost, runs * driver)


def clock(seconds: float) -> str:
    h, rest = divmod(int(round(seconds)), 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="Seeds per row (runs = 2 x seeds).")
    parser.add_argument("--workers", default="1,2", help="Worker nodes of one CPU each, comma-separated.")
    args = parser.parse_args()
    os.environ.setdefault("SAO_ENV_CACHE", str(Path(tempfile.gettempdir()) / "sao-env-bench-cache"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for w in (int(x) for x in args.workers.split(",")):
            rows.append(measure(w, args.seeds, Path(tmp)))
    print(f"grid: 2 rows x {args.seeds} seeds on a cut of style-drift; local Ray cluster, one CPU per worker node; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("workers  runs  wall s  runs/h  start-up s  per-run s  driver CPU ms/run  ledger write ms/run")
    for r in rows:
        print(f"{r['workers']:>7}  {r['runs']:>4}  {r['wall_s']:>6.1f}  {r['runs_per_hour']:>6.0f}  "
              f"{r['startup_s']:>10.1f}  {r['cost_s']:>9.1f}  {r['driver_cpu_s'] * 1000:>17.1f}  "
              f"{r['ledger_s'] * 1000:>19.1f}")
    startup = max(r["startup_s"] for r in rows)
    driver = max(r["driver_cpu_s"] + r["ledger_s"] for r in rows)
    print(f"\nmodel: T(N) = S + max(ceil(R/N) c, R d), S = {startup:.0f} s (the largest start-up above), "
          f"d = {driver * 1000:.0f} ms (driver CPU + ledger write per run); the driver alone caps throughput at "
          f"{3600 / driver:,.0f} runs/h")
    for r in rows:
        print(f"  check at {r['workers']} worker(s): model {model(r['runs'], r['cost_s'], r['workers'], r['startup_s'], driver):.0f} s, "
              f"measured {r['wall_s']:.0f} s")
    print(f"regime map ({REGIME_RUNS} runs of {REGIME_COST_S[0]:.0f}-{REGIME_COST_S[1]:.0f} s of one core):")
    for n in (8, 64, 512):
        low, high = (model(REGIME_RUNS, c, n, startup, driver) for c in REGIME_COST_S)
        print(f"  {n:>3} cores: {clock(low)} to {clock(high)} ({math.ceil(REGIME_RUNS / n)} wave(s); "
              f"{min(n, REGIME_RUNS)} cores busy)")


if __name__ == "__main__":
    main()
