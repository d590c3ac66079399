"""Training commands: run, compare, leaderboard, list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
import yaml
from rich.console import Console

from sao_env.errors import UserError

console = Console(stderr=True)


def register(app: typer.Typer) -> None:
    app.command("run", context_settings={"allow_extra_args": False})(run)
    app.command("compare")(compare)
    app.command("leaderboard")(leaderboard)
    app.command("list")(list_specs)


def run(
    env: str = typer.Option("style-drift", "--env", help="Scenario name (envs/NAME.yaml) or a YAML path."),
    agent: str = typer.Option("sao", "--agent", help="Agent recipe name (agents/NAME.yaml) or a YAML path."),
    seed: int = typer.Option(0, "--seed", min=0, help="Run seed (tasks, sampling, latency)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/ENV/AGENT/seedN)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved configuration and exit."),
    overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides, e.g. agent.hparams.lr=3e-4"),
) -> None:
    """Run one agent on one drifting scenario in simulated time."""
    from sao_env.experiment import resolve_config, run_experiment

    config = resolve_config(env, agent, seed, overrides or [])
    if dry_run:
        typer.echo(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False), nl=False)
        return
    out = out or Path("runs") / config.env.name / config.agent.name / f"seed{seed}"
    summary = run_experiment(config, out)
    console.print(f"run directory: {out}")
    console.print(json.dumps({k: v for k, v in summary.items() if not isinstance(v, list)}, indent=1))


def compare(
    env: str = typer.Option("style-drift", "--env", help="Scenario name or YAML path."),
    agents: str = typer.Option("sao,grpo", "--agents", help="Comma-separated agent recipes."),
    seeds: str = typer.Option("0", "--seeds", help="Comma-separated seeds, or a count like 3 (= 0,1,2) with --num-seeds."),
    num_seeds: Optional[int] = typer.Option(None, "--num-seeds", min=1, help="Use seeds 0..N-1 (overrides --seeds)."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run directories go."),
    leaderboard_dir: Path = typer.Option(Path("leaderboards"), "--leaderboard-dir", help="Where tables and the plot go."),
    skip_existing: bool = typer.Option(True, help="Reuse finished runs (summary.json present): resumable comparisons."),
    overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides applied to every run."),
) -> None:
    """Run agents x seeds on one scenario, then write the leaderboard table and adaptation plot."""
    from sao_env.experiment import resolve_config, run_experiment
    from sao_env.leaderboard.plots import plot_adaptation
    from sao_env.leaderboard.tables import load_summaries, write_leaderboard

    seed_list = list(range(num_seeds)) if num_seeds else _int_list(seeds)
    names = [a.strip() for a in agents.split(",") if a.strip()]
    configs = [(resolve_config(env, a, s, overrides or []), s) for a in names for s in seed_list]
    dirs: dict[str, list[Path]] = {}
    for config, s in configs:
        out = runs_dir / config.env.name / config.agent.name / f"seed{s}"
        if not (skip_existing and (out / "summary.json").is_file()):
            run_experiment(config, out)
        dirs.setdefault(config.agent.name, []).append(out)
    env_name = configs[0][0].env.name
    plot = plot_adaptation(dirs, leaderboard_dir / f"{env_name}.png")
    md, csv = write_leaderboard(load_summaries([d for ds in dirs.values() for d in ds]), leaderboard_dir, env_name, plot=plot)
    console.print(f"leaderboard: {md} and {csv}\nadaptation plot: {plot}")
    typer.echo(md.read_text())


def leaderboard(
    runs: list[Path] = typer.Argument(..., help="Run directories, folders containing them, or leaderboard tables: per-seed <env>-runs.csv or aggregated <env>.csv."),
    out_dir: Path = typer.Option(Path("leaderboards"), "--out", help="Where the tables, plots and index.html go."),
) -> None:
    """Rebuild leaderboard tables, plots and the site (index.html) from runs or committed tables."""
    from sao_env.leaderboard import rebuild

    for md in rebuild(runs, out_dir):
        console.print(f"wrote {md}")
    console.print(f"site: {out_dir / 'index.html'}")


def list_specs() -> None:
    """List scenarios, agent recipes, benchmark suites and registered Gymnasium ids."""
    import gymnasium as gym

    from sao_env.specs import available, find_spec, load_yaml

    for kind, label in (("envs", "scenarios (--env)"), ("agents", "agents (--agent)"), ("evals", "benchmark suites (--suite)")):
        typer.echo(f"{label}:")
        for name in available(kind):
            data = load_yaml(find_spec(kind, name))
            extra = f"[{data.get('algorithm')}] " if kind == "agents" else ""
            typer.echo(f"  {name:<20} {extra}{' '.join(str(data.get('description', '')).split())[:90]}")
    typer.echo("gymnasium ids:")
    for env_id in sorted(k for k in gym.registry if k.startswith("sao/")):
        typer.echo(f"  {env_id}")


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--seeds must be comma-separated integers, got {text!r}") from None
