"""The ``grid`` command: a grid of whole experiments (rows x axes x scenarios x seeds) into per-seed and aggregate tables and a map."""

from __future__ import annotations

import shlex
from datetime import datetime
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from sao_env.errors import UserError

console = Console(stderr=True, soft_wrap=True)  # lines are never wrapped: a log or a pipe reads them whole

FIGURES = ("value", "difference", "collapse")
CLUSTER_HELP = ("Run on a Ray cluster instead of this machine's cores: auto (one started here, or $RAY_ADDRESS), "
                "HOST:PORT or ray://HOST:PORT; each pending run is a task there, this process gathers the results and writes the outputs.")
RESOURCES_HELP = "With --cluster: what each run reserves, e.g. CPU=2,GPU=1,memory=4e9 (default CPU=1)."
NODE_RUNS_HELP = ("With --cluster: where each node writes run directories, on its own disk (default: --runs-dir, "
                  "a path every node shares); their rows come back to the ledger.")
SHIP_HELP = "With --cluster: send each finished run's folder back here, into --runs-dir (resume checkpoints left out)."


def register(app: typer.Typer) -> None:
    app.command("grid")(grid)


def default_out(path: Path) -> Path:
    """Where a grid's outputs go unless ``--out`` names a folder: ``runs/grids/<name>`` (outside the
    tracked tree), the name being the file's stem, or its folder's name for a file called ``grid.yaml``."""
    path = Path(path)
    name = path.parent.name if path.stem == "grid" and path.parent.name else path.stem
    return Path("runs") / "grids" / name


def cluster_options(cluster: str | None, resources: str | None, node_runs_dir: Path | None, ship: bool) -> list[str]:
    """The ``--cluster`` options as given (none without ``--cluster``): what a resume command repeats."""
    if cluster is None:
        return []
    return ["--cluster", cluster, *(["--run-resources", resources] if resources else []),
            *(["--node-runs-dir", str(node_runs_dir)] if node_runs_dir is not None else []), *(["--ship-runs"] if ship else [])]


def precheck_cells(spec) -> None:
    """The grid's scenario and recipe names and each row's hyper-parameters (its recipe's with the cut, the
    row's overrides and each axis point applied), checked before torch is imported: a typo there is one line
    in about a second, the line ``plan_grid`` would give (``scenario S, row 'R'[, axis=value]: ...``)."""
    import itertools

    from sao_env.cli.training import precheck_agent
    from sao_env.specs import find_spec

    axes = list(spec.axes)
    points = list(itertools.product(*spec.axis_values.values()))

    def where(scenario: str, row, point: tuple) -> str:
        return f"scenario {scenario}, row {row.label!r}" + "".join(f", {k}={v}" for k, v in zip(axes, point))

    for scenario in spec.scenarios:
        try:
            find_spec("envs", scenario)
        except UserError as err:
            raise UserError(f"{where(scenario, spec.rows[0], points[0])}: {err}") from None
    for row in spec.rows:
        seen: set[tuple[str, ...]] = set()
        for point in points:
            overrides = [*spec.cut, *row.overrides, *(f"{k}={v}" for k, v in zip(axes, point))]
            agent_part = tuple(x for x in overrides if x.split("=", 1)[0].strip().startswith("agent."))
            if agent_part in seen:
                continue
            seen.add(agent_part)
            try:
                precheck_agent(row.agent, list(agent_part))
            except UserError as err:
                raise UserError(f"{where(spec.scenarios[0], row, point)}: {err}") from None


def grid(
    path: Path = typer.Argument(..., help="The grid file (YAML: rows, scenarios, seeds, baseline; optional axes, cut, metric)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for the tables, the figure and the log (default: runs/grids/NAME)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="Runs at once, each in a worker process (default: the number of cores)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help=CLUSTER_HELP),
    run_resources: Optional[str] = typer.Option(None, "--run-resources", help=RESOURCES_HELP),
    node_runs_dir: Optional[Path] = typer.Option(None, "--node-runs-dir", help=NODE_RUNS_HELP),
    ship_runs: bool = typer.Option(False, "--ship-runs", help=SHIP_HELP),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Comma-separated seeds, replacing the grid's."),
    metric: Optional[str] = typer.Option(None, "--metric", help="The metric ranked, tested and drawn (default: the grid's, else online_reward)."),
    figure: str = typer.Option("value", "--figure", help="What the figure draws: value (the metric), difference (minus the baseline, paired by seed) or collapse (the share of seeds that collapsed)."),
    lines: bool = typer.Option(False, "--lines", help="With two axes: lines against the first (a panel per value of the second) instead of a heatmap per row."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run directories go."),
    skip_existing: bool = typer.Option(True, help="Reuse a run that finished with the same configuration hash and code version."),
    checkpoint_every: str = typer.Option("25u", "--checkpoint-every", help="Resume checkpoints of each run: every N updates (25u) or simulated seconds (600s)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List every run (run or reuse, and why; its directory) and the files it would write, then exit."),
    tables_only: bool = typer.Option(False, "--tables-only", help="Make no run: write the tables, figure and manifest from the finished runs (run directories, else the ledger; any code), leaving out and naming the rows not yet finished."),
) -> None:
    """Run a grid of experiments (every row x axis point x scenario x seed an ordinary run, reused by
    configuration hash) and write its per-seed table, aggregates with paired differences to the
    baseline, and its map."""
    from sao_env.cli.training import _checkpoint_every, _cores
    from sao_env.cluster import from_options
    from sao_env.grid import (LEDGER, Ledger, check_out, finished_part, grid_command, grid_table, load_grid, output_files,
                              plan_grid, reuse_decision, run_grid, write_grid)
    from sao_env.leaderboard.maps import provisional_text
    from sao_env.provenance import code_version

    if figure not in FIGURES:
        raise UserError(f"--figure must be one of {', '.join(FIGURES)}, got {figure!r}")
    if tables_only and (dry_run or not skip_existing):
        raise UserError(f"--tables-only makes no run; it does not go with {'--dry-run' if dry_run else '--no-skip-existing'}")
    on_cluster = from_options(cluster, resources=run_resources, node_runs_dir=node_runs_dir, ship=ship_runs, jobs=jobs)
    seed_list = None
    if seeds is not None:
        from sao_env.sweep import parse_seeds  # torch: only where --seeds is given (a grid file's typo is one line in a second)

        seed_list = parse_seeds(seeds)
    spec = load_grid(path, seeds=seed_list, metric=metric)
    precheck_cells(spec)
    every = _checkpoint_every(checkpoint_every)  # torch (the checkpoint module): after the grid file's checks
    planned = plan_grid(spec, source=path, runs_dir=runs_dir, build_sources=not dry_run)
    out = out if out is not None else default_out(path)
    check_out(planned, out)
    command = grid_command(planned, out, seeds_given=seeds is not None, metric_given=metric is not None,
                           runs_dir=runs_dir, figure=figure, lines=lines)
    code = code_version()
    ledger = Ledger(out / LEDGER)
    if dry_run:
        checks = [(run, *reuse_decision(run, code, ledger, skip_existing)) for run in planned.runs]
        reused = sum(1 for _, source, _ in checks if source is not None)
        from sao_env.grid_notes import cost_note, ledger_note
        from sao_env.provenance import code_key

        typer.echo(f"{len(planned.runs)} runs: {len(planned.runs) - reused} to run, {reused} to reuse")
        for line in [*ledger_note(planned.runs, ledger, code_key(code), out),
                     *cost_note([run for run, source, _ in checks if source is None], runs_dir, jobs or _cores())]:
            typer.echo(line)
        for run, source, why in checks:
            listed = ledger.get(run.plan) if source is None else None
            if listed is not None:
                why = f"{why}; the ledger lists it made by other code ({listed['code']})"
            typer.echo(f"{'reuse' if source else 'run':<5}  {run.describe(planned.axes)}  {run.plan.out}  {why}")
        typer.echo(f"would write into {out}:")
        for file in output_files(planned, out):
            typer.echo(f"  {file}")
        typer.echo(f"command: {command}")
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        log = (out / "grid.log").open("a", encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot write {err.filename or out}: {err.strerror or err}") from None

    def report(line: str) -> None:
        console.print(line, soft_wrap=True, highlight=False, markup=False)
        log.write(line + "\n")
        log.flush()

    with log:
        log.write(f"# {datetime.now().isoformat(timespec='seconds')} {command}{' --tables-only' if tables_only else ''}\n")
        if tables_only:
            part, left_out = finished_part(planned, ledger)
            table = grid_table(part, ledger=ledger)
            paths = write_grid(part, table, out, command=command, figure=figure, lines=lines, left_out=left_out)
            report(f"tables of {len(part.runs)} finished runs" + (f"; {provisional_text(left_out)}" if left_out else "")
                   + "; wrote " + ", ".join(shlex.quote(str(p)) for p in paths.values()))
            return
        try:
            done = run_grid(planned, jobs=jobs or _cores(), code=code, skip_existing=skip_existing, report=report,
                            checkpoint_every=every, ledger=ledger, cluster=on_cluster)
        except (Exception, KeyboardInterrupt) as err:  # a cluster's runs stopped by a signal: a KeyboardInterrupt
            if not hasattr(err, "exit_code") or not hasattr(err, "signal_name"):  # not runs stopped by a signal
                raise
            resume = command + "".join(f" {shlex.quote(x)}" for x in cluster_options(cluster, run_resources, node_runs_dir, ship_runs))
            report(f"sao-env: {err}; resume with: {resume}")
            raise SystemExit(err.exit_code) from None
        table = grid_table(planned, ledger=ledger, code=code)
        paths = write_grid(planned, table, out, command=command, figure=figure, lines=lines)
        report(f"{len(done.made)} runs made, {len(done.reused)} reused; wrote "
               + ", ".join(shlex.quote(str(p)) for p in paths.values()))
