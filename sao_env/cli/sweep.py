"""The ``sweep`` command: a grid of overrides on a cut of a scenario, ranked into a tuning table."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from sao_env.cli.grid import CLUSTER_HELP, NODE_RUNS_HELP, RESOURCES_HELP, SHIP_HELP

console = Console(stderr=True, soft_wrap=True)  # lines are never wrapped: a log or a pipe reads them whole


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)


def sweep(
    env: str = typer.Option("style-drift", "--env", help="Scenario name (envs/NAME.yaml) or a YAML path."),
    agent: str = typer.Option("sao", "--agent", help="Agent recipe name (agents/NAME.yaml) or a YAML path."),
    grid: Optional[list[str]] = typer.Option(None, "--grid", help="key=v1,v2,... (repeat for more axes; trials are their product), e.g. agent.hparams.lr=5e-5,1e-4"),
    seeds: str = typer.Option("0", "--seeds", help="Comma-separated seeds; every trial runs at each."),
    cut: Optional[list[str]] = typer.Option(None, "--cut", help="key=value override applied to every trial (the cut of the scenario), e.g. env.phases.0.duration_h=0.25; repeat."),
    objective: str = typer.Option("auc", "--objective", help="Rank trials by the mean over seeds of: auc, online_reward."),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="Runs at once, each in a worker process (default: the number of cores)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help=CLUSTER_HELP),
    run_resources: Optional[str] = typer.Option(None, "--run-resources", help=RESOURCES_HELP),
    node_runs_dir: Optional[Path] = typer.Option(None, "--node-runs-dir", help=NODE_RUNS_HELP),
    ship_runs: bool = typer.Option(False, "--ship-runs", help=SHIP_HELP),
    out: Path = typer.Option(Path("runs/leaderboards/tuning"), "--out", help="Where <env>-<agent>.csv and .md go (default outside the tracked tree; the committed tables only when asked: --out leaderboards/tuning)."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run directories go."),
    skip_existing: bool = typer.Option(True, help="Reuse a run that finished with the same configuration hash and code version."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the trials and their runs (run or reuse, with why) and exit."),
) -> None:
    """Run a hyper-parameter grid on a cut of a scenario and write the ranked tuning table."""
    from sao_env.cli.training import _cores
    from sao_env.cluster import from_options
    from sao_env.experiment import reuse_check
    from sao_env.sweep import parse_seeds, plan_sweep, run_sweep, sweep_command, write_sweep

    on_cluster = from_options(cluster, resources=run_resources, node_runs_dir=node_runs_dir, ship=ship_runs, jobs=jobs,
                              needs_run_dirs=True)
    planned = plan_sweep(env, agent, grid or [], parse_seeds(seeds), cut or [], objective=objective, runs_dir=runs_dir)
    if dry_run:
        typer.echo(f"{len(planned.trials)} trials x {len(planned.seeds)} seeds = {planned.size} runs")
        for (number, seed), plan in planned.plans.items():
            reuse, why = reuse_check(plan) if skip_existing else (False, "rerun asked")
            trial = planned.trials[number - 1]
            typer.echo(f"{'reuse' if reuse else 'run':<5}  trial {number} seed {seed}  {trial.text}  {plan.out}  {why}")
        typer.echo(f"write  {out}  {planned.name}.md, {planned.name}.csv")
        return
    from sao_env.experiment import RunInterrupted

    try:
        table = run_sweep(planned, jobs=jobs or _cores(), skip_existing=skip_existing,
                          report=lambda line: console.print(line, soft_wrap=True), cluster=on_cluster)
    except RunInterrupted as err:  # runs stopped by a signal at their checkpoints
        resume = f"{sweep_command(planned, jobs)} --runs-dir {shlex.quote(str(runs_dir))} --out {shlex.quote(str(out))}"
        console.print(f"sao-env: {err}; resume with: {resume}", soft_wrap=True, highlight=False, markup=False)
        raise SystemExit(err.exit_code) from None
    md, csv = write_sweep(planned, table, out, command=sweep_command(planned))
    console.print(f"tuning table: {md} and {csv}")
    typer.echo(md.read_text())
