"""Training commands: run, compare, verify, leaderboard, list."""

from __future__ import annotations

import json
import math
import os
import shlex
import textwrap
from pathlib import Path
from typing import Optional

import typer
import yaml
from rich.console import Console

from sao_env.cli.grid import CLUSTER_HELP, NODE_RUNS_HELP, RESOURCES_HELP, SHIP_HELP
from sao_env.errors import UserError

console = Console(stderr=True, soft_wrap=True)  # lines are never wrapped: a log or a pipe reads them whole


def register(app: typer.Typer) -> None:
    app.command("run", context_settings={"allow_extra_args": False})(run)
    app.command("compare")(compare)
    app.command("verify")(verify)
    app.command("leaderboard")(leaderboard)
    app.command("list")(list_specs)


CHECKPOINT_HELP = ("Resume checkpoints every N learner updates (25u), every M simulated minutes (5m), both (25u,5m) "
                   "or never (off); a sim run also writes one on SIGINT/SIGTERM, a threads/ray run stops at once "
                   "and keeps its last.")


def _checkpoint_every(text: str):
    from sao_env.runtime.checkpoint import CheckpointEvery

    try:
        return CheckpointEvery.parse(text)
    except ValueError as err:
        raise UserError(f"--checkpoint-every: {err}") from None


def precheck(env: str, agent: str, overrides: list[str], *, network: bool = True) -> None:
    """The scenario and recipe names, the overrides' form and the values of the scenario and the runtime
    (with the overrides applied), checked before torch is imported: a typo or a value that cannot run is
    one line in a second; the algorithm's hyper-parameters (``sao_env.agents.configs.check_hparams``: unknown
    keys, types, bounds); a policy model that cannot load here (``sao_env.hub.check_model``: a made-up id,
    offline, the hub unreachable; ``network=False``, a dry run, looks only at the disk). What this cannot see
    (unknown keys outside the hyper-parameters, the task sources' parameters) is checked when the configuration
    is resolved."""
    from pydantic import ValidationError

    from sao_env.agents.configs import check_hparams
    from sao_env.runtime.spec import RuntimeSpec
    from sao_env.scenario import ScenarioSpec
    from sao_env.specs import find_spec, load_yaml

    raw = {"env": load_yaml(find_spec("envs", env)), "agent": load_yaml(find_spec("agents", agent))}
    apply_known(raw, overrides)
    hparams = raw["agent"].get("hparams") or {}
    _finite_hparams(hparams)
    runtime = raw["agent"].get("runtime") or {}
    for prefix, model, data in (("env", ScenarioSpec, raw["env"]), ("agent.runtime", RuntimeSpec, runtime)):
        if not isinstance(data, dict):
            continue
        try:
            model.model_validate(data, context={"build_sources": False})
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join([prefix, *(str(p) for p in first["loc"])])
            raise UserError(f"invalid configuration at {where}: {first['msg']}") from None
    check_hparams(raw["agent"])
    model = raw["agent"].get("model") if isinstance(raw["agent"], dict) else None
    if isinstance(model, dict) and isinstance(model.get("name"), str):
        from sao_env.hub import check_model

        check_model(model["name"], network=network)
    if network and isinstance(raw["env"], dict):
        _benchmark_rows_here(raw["env"])


def apply_known(raw: dict, overrides: list[str]) -> None:
    """The ``key.sub=value`` overrides set into ``raw`` (``{"env": ..., "agent": ...}``, either may be left out)
    where ``_set_known`` can place them; a recipe without ``hparams`` gets an empty mapping for them."""
    if isinstance(raw.get("agent"), dict) and "hparams" not in raw["agent"]:
        raw["agent"]["hparams"] = {}
    for item in overrides:
        if "=" not in item:
            raise UserError(f"override {item!r} is not of the form key.sub=value")
        key, value = item.split("=", 1)
        _set_known(raw, key.split("."), value)


def _finite_hparams(hparams) -> None:
    """An infinite or NaN number among a recipe's hyper-parameters (a list's item too), named by its key."""
    for key, value in hparams.items() if isinstance(hparams, dict) else ():
        if any(_non_finite(v) for v in (value if isinstance(value, (list, tuple)) else [value])):
            raise UserError(f"invalid configuration at agent.hparams.{key}: Input should be a finite number")


def precheck_agent(agent: str, overrides: list[str]) -> None:
    """A recipe's name and, with the overrides applied, its hyper-parameters (``precheck``'s checks of the
    agent alone), before torch is imported: what a grid's row is checked with."""
    from sao_env.agents.configs import check_hparams
    from sao_env.specs import find_spec, load_yaml

    raw = {"agent": load_yaml(find_spec("agents", agent))}
    apply_known(raw, overrides)
    if isinstance(raw["agent"], dict):
        _finite_hparams(raw["agent"].get("hparams") or {})
        check_hparams(raw["agent"])


def _benchmark_rows_here(env: dict) -> None:
    """A benchmark stream that would read its rows from the hub while the hub is offline or unreachable:
    its sources are built now (the local cache only, at once), so that rows neither there nor under
    ``$SAO_ENV_DATA`` are one line before torch loads instead of after it."""
    from sao_env.benchmarks.loaders import DATA_ENV_VAR

    phases = env.get("phases") if isinstance(env.get("phases"), list) else []
    warm = env.get("warm_start") if isinstance(env.get("warm_start"), dict) else {}
    sources = [s for p in phases if isinstance(p, dict) for s in (p.get("sources") or [])]
    sources += list(warm.get("sources") or [])
    hub_rows = [s for s in sources if isinstance(s, dict) and s.get("name") == "benchmark"
                and isinstance(s.get("params"), dict) and not s["params"].get("data")]
    if not hub_rows or os.environ.get(DATA_ENV_VAR):
        return
    from sao_env.hub import offline, unreachable

    if not offline() and unreachable() is None:
        return  # the hub answers: the run reads the rows when it builds its scenario
    from sao_env.tasks import build_source

    for source in hub_rows:
        build_source(source["name"], source["params"])


def _non_finite(value) -> bool:
    """An infinite or NaN number, or text that a float field would read as one (``inf``, ``nan``)."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, str):
        try:
            return not math.isfinite(float(value))
        except ValueError:
            return False
    return False


def _set_known(raw: dict, parts: list[str], value: str) -> None:
    """Set ``parts`` to the YAML ``value`` where the path exists or a model of the scenario or the runtime
    defines its last key; anything else is left to the full resolution, which names unknown keys."""
    from sao_env.runtime.spec import RuntimeSpec
    from sao_env.scenario import EvalSpec, LatencySpec, PhaseSpec, ScenarioSpec, WarmStartSpec

    models = {("env",): ScenarioSpec, ("env", "eval"): EvalSpec, ("env", "latency"): LatencySpec,
              ("env", "warm_start"): WarmStartSpec, ("env", "phases", "*"): PhaseSpec, ("agent", "runtime"): RuntimeSpec}
    node = raw
    for i, part in enumerate(parts):
        shape = tuple("*" if p.isdigit() else p for p in parts[:i])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                return
            part = int(part)
        elif not isinstance(node, dict):
            return
        elif part not in node:
            model = models.get(shape)
            if shape != ("agent", "hparams") and (model is None or part not in model.model_fields):
                return
            if i < len(parts) - 1:
                node[part] = {}
        if i == len(parts) - 1:
            try:
                node[part] = yaml.safe_load(value)
            except yaml.YAMLError:
                return
        else:
            node = node[part]


def _interrupted(err, resume_command: list[str]) -> None:
    """A run stopped by a signal: one line on stderr saying how to resume, and the signal's exit code."""
    console.print(f"sao-env: {err}; resume with: {shlex.join(resume_command)}", soft_wrap=True, highlight=False,
                  markup=False)
    raise SystemExit(err.exit_code)  # typer.Exit's code is dropped when the app runs with standalone_mode=False


def _stopped(err: KeyboardInterrupt, what: str) -> None:
    """A command stopped by SIGINT/SIGTERM without a checkpoint: one line saying what is left, 128 + signal."""
    import signal

    from sao_env.cli.app import stopped_line

    signum = getattr(err, "signum", signal.SIGINT)
    console.print(stopped_line(signum, what), soft_wrap=True, highlight=False, markup=False)
    raise SystemExit(128 + signum)


DEFAULT_BOARDS = Path("runs") / "leaderboards"
"""Where boards go unless the user names a folder: under ``runs/`` (ignored by git), never the committed ``leaderboards/``."""


def board_folder(leaderboard_dir: Path | None, runs_dir: Path) -> Path:
    """The folder ``compare`` writes its boards to: the one given, else ``RUNS_DIR/leaderboards``."""
    return Path(leaderboard_dir) if leaderboard_dir is not None else Path(runs_dir) / "leaderboards"


def board_files(env_name: str) -> list[str]:
    """The files one scenario's board writes into its folder (``sao_env.leaderboard.write_board``)."""
    return [f"{env_name}.md", f"{env_name}.csv", f"{env_name}-runs.csv", f"{env_name}-curves.csv",
            f"{env_name}.png", "index.html", "README.md"]


LOGGER_HELP = "Mirror metrics.jsonl to a tracker: tensorboard, wandb (offline unless $WANDB_MODE says otherwise); repeat or comma-separate."


def run(
    env: str = typer.Option("style-drift", "--env", help="Scenario name (envs/NAME.yaml) or a YAML path."),
    agent: str = typer.Option("sao", "--agent", help="Agent recipe name (agents/NAME.yaml) or a YAML path."),
    seed: int = typer.Option(0, "--seed", min=0, help="Run seed (tasks, sampling, latency)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run directory (default runs/ENV/LABEL/seedN; LABEL is AGENT, +HASH with overrides)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the expanded configuration (every default filled in) and exit."),
    logger: Optional[list[str]] = typer.Option(None, "--logger", help=LOGGER_HELP),
    resume: bool = typer.Option(False, "--resume", help="Continue from the run directory's last good checkpoint (same configuration and code), truncating its logs to it."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a run of another configuration that --out holds (refused otherwise)."),
    checkpoint_every: str = typer.Option("25u", "--checkpoint-every", help=CHECKPOINT_HELP),
    overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides, e.g. agent.hparams.lr=3e-4"),
) -> None:
    """Run one agent on one drifting scenario in simulated time."""
    precheck(env, agent, overrides or [], network=not dry_run)
    from sao_env.experiment import RunInterrupted, expand_config, plan_run, reuse_check, run_experiment
    from sao_env.provenance import code_key, code_version
    from sao_env.trackers import parse_loggers, require

    plan = plan_run(env, agent, seed, overrides or [], out=out, build_sources=not dry_run)
    loggers = parse_loggers(logger)
    every = _checkpoint_every(checkpoint_every)
    if dry_run:
        typer.echo(f"# config_hash: {plan.config_hash}\n# code: {code_key(code_version())}\n# run directory: {plan.out}")
        typer.echo(yaml.safe_dump(expand_config(plan.config), sort_keys=False), nl=False)
        return
    require(loggers)
    resume_command = ["sao-env", "run", "--env", env, "--agent", agent, "--seed", str(seed),
                      *(["--out", str(out)] if out is not None else []), *[f"--logger={x}" for x in loggers],
                      *([f"--checkpoint-every={checkpoint_every}"] if checkpoint_every != "25u" else []),
                      *(overrides or []), "--resume"]
    finished, why = reuse_check(plan) if resume or plan.out.exists() else (False, "")
    if finished and resume:
        console.print(f"run directory {plan.out} has nothing to resume: it {why}; its summary:", soft_wrap=True,
                      highlight=False, markup=False)
        summary = json.loads((plan.out / "summary.json").read_text())
        typer.echo(strict_json({**{k: v for k, v in summary.items() if not isinstance(v, (list, dict))},
                                "run_dir": str(plan.out)}))
        return
    if not resume and why.startswith("unfinished; resumes from"):
        console.print(f"sao-env: warning: {plan.out} holds an unfinished run of this configuration that --resume "
                      f"would continue ({why.removeprefix('unfinished; resumes ')}); starting it over from the "
                      f"beginning. To continue it instead: {shlex.join(resume_command)}",
                      soft_wrap=True, highlight=False, markup=False)
    try:
        summary = run_experiment(plan.config, plan.out, label=plan.label, overrides=plan.overrides, loggers=loggers,
                                 resume=resume, checkpoint_every=every, overwrite=overwrite)
    except RunInterrupted as err:  # a sim run: it wrote a checkpoint
        _interrupted(err, resume_command)
    except KeyboardInterrupt as err:  # SIGINT or SIGTERM (``cli.app.Stopped``): a real-time run, or the warm start
        warm = getattr(err, "sao_warm_start", None)
        what = (f"the warm start stopped at step {warm[0]} of {warm[1]} (not checkpointed: it trains again)"
                if warm else f"{plan.out} is unfinished (no summary.json)")
        _stopped(err, f"{what}; resume with: {shlex.join(resume_command)}")
    console.print(f"run directory: {plan.out}", soft_wrap=True, highlight=False, markup=False)
    typer.echo(strict_json({**{k: v for k, v in summary.items() if not isinstance(v, (list, dict))},
                            "run_dir": str(plan.out)}))  # stdout: | jq


def strict_json(data: dict) -> str:
    """``data`` as JSON that strict parsers read: a non-finite number (a recovery never reached) is null."""
    return json.dumps({k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in data.items()},
                      indent=1, allow_nan=False)


def compare(
    env: str = typer.Option("style-drift", "--env", help="Scenario name or YAML path."),
    agents: str = typer.Option("sao,grpo", "--agents", help="Comma-separated agent recipes."),
    seeds: str = typer.Option("0", "--seeds", help="Comma-separated seeds, or a count like 3 (= 0,1,2) with --num-seeds."),
    num_seeds: Optional[int] = typer.Option(None, "--num-seeds", min=1, help="Use seeds 0..N-1 (overrides --seeds)."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run directories go."),
    leaderboard_dir: Optional[Path] = typer.Option(None, "--leaderboard-dir", help="Where tables, the plot, the site and the summary go (default: RUNS_DIR/leaderboards, outside the tracked tree; the committed boards only when asked: --leaderboard-dir leaderboards)."),
    skip_existing: bool = typer.Option(True, help="Reuse a run that finished with the same configuration hash and code version."),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="Runs at once, each in a worker process with one torch thread (default: the number of cores)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help=CLUSTER_HELP),
    run_resources: Optional[str] = typer.Option(None, "--run-resources", help=RESOURCES_HELP),
    node_runs_dir: Optional[Path] = typer.Option(None, "--node-runs-dir", help=NODE_RUNS_HELP),
    ship_runs: bool = typer.Option(False, "--ship-runs", help=SHIP_HELP),
    logger: Optional[list[str]] = typer.Option(None, "--logger", help=LOGGER_HELP),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the runs it would make and those it would reuse, with why, and the board files it would write, and exit."),
    checkpoint_every: str = typer.Option("25u", "--checkpoint-every", help=CHECKPOINT_HELP),
    overrides: Optional[list[str]] = typer.Argument(None, help="key.sub=value overrides applied to every run."),
) -> None:
    """Run agents x seeds on one scenario, then write the leaderboard table and adaptation plot.

    An unfinished run whose checkpoint has the same configuration hash and code is resumed."""
    from sao_env.cluster import from_options

    on_cluster = from_options(cluster, resources=run_resources, node_runs_dir=node_runs_dir, ship=ship_runs, jobs=jobs,
                              needs_run_dirs=True)
    for name in dict.fromkeys(a.strip() for a in agents.split(",") if a.strip()):
        precheck(env, name, overrides or [], network=not dry_run)
    from sao_env.experiment import MadeElsewhere, RunInterrupted, plan_run, reuse_check, run_many, writing
    from sao_env.provenance import code_version
    from sao_env.trackers import parse_loggers, require

    seed_list = list(range(num_seeds)) if num_seeds else _int_list(seeds)
    names = [a.strip() for a in agents.split(",") if a.strip()]
    leaderboard_dir = board_folder(leaderboard_dir, runs_dir)
    loggers = parse_loggers(logger)
    every = _checkpoint_every(checkpoint_every)
    plans = list({p.out: p for p in (plan_run(env, a, s, overrides or [], runs_dir=runs_dir, build_sources=not dry_run)
                                     for a in names for s in seed_list)}.values())
    code = code_version()
    decisions = [(p, *(reuse_check(p, code) if skip_existing else (False, "rerun asked (--no-skip-existing)")))
                 for p in plans]
    if dry_run:
        for plan, reuse, why in decisions:
            typer.echo(f"{'reuse' if reuse else 'run':<5}  {plan.out}  {why}")
        typer.echo(f"write  {leaderboard_dir}  {', '.join(board_files(plans[0].config.env.name))}")
        kept, dropped = earlier_rows(leaderboard_dir, plans[0].config.env.name, runs_dir, {p.out for p in plans})
        if kept or dropped:
            typer.echo(f"merge  {leaderboard_dir / plans[0].config.env.name}.md  keeps {_rows(kept) if kept else 'no run'} "
                       f"of the earlier board" + (f"; drops {_rows(dropped)} (no finished run directory)" if dropped else ""))
        return
    require(loggers)
    todo = [plan for plan, reuse, why in decisions if not reuse]
    for plan, reuse, why in decisions:
        if reuse:
            console.print(f"reuse {plan.out}: {why}", soft_wrap=True)
    finished = 0

    def report(plan, summary: dict, seconds: float) -> None:
        nonlocal finished
        finished += 1
        how = (f"made by another process while this one waited ({seconds:.0f} s); reused"
               if isinstance(summary, MadeElsewhere) else f"finished in {seconds:.0f} s")
        console.print(f"[{finished}/{len(todo)}] {plan.out} {how}: "
                      f"online_reward {summary['online_reward']:.3f}, auc {summary.get('auc', float('nan')):.3f}", soft_wrap=True)

    try:
        if on_cluster is not None:
            from sao_env.cluster import run_many as run_on_cluster

            run_on_cluster(todo, cluster=on_cluster, loggers=loggers, code=code, on_done=report, checkpoint_every=every,
                           report=lambda line: console.print(line, soft_wrap=True, highlight=False, markup=False))
        else:
            run_many(todo, jobs=jobs or _cores(), loggers=loggers, code=code, on_done=report, checkpoint_every=every,
                     on_warm_start=lambda line: console.print(line, soft_wrap=True))
    except RunInterrupted as err:
        _interrupted(err, ["sao-env", "compare", "--env", env, "--agents", agents,
                           *(["--num-seeds", str(num_seeds)] if num_seeds else ["--seeds", seeds]),
                           "--runs-dir", str(runs_dir), "--leaderboard-dir", str(leaderboard_dir),
                           *([f"--jobs={jobs}"] if jobs else []), *[f"--logger={x}" for x in loggers],
                           *([f"--checkpoint-every={checkpoint_every}"] if checkpoint_every != "25u" else []),
                           *(overrides or [])])
    dirs: dict[str, list[Path]] = {}
    for plan in plans:
        dirs.setdefault(plan.label, []).append(plan.out)
    with writing(leaderboard_dir):
        md, csv, plot = write_merged_board(leaderboard_dir, plans[0].config.env.name, runs_dir, dirs)
    console.print(f"leaderboard: {md} and {csv}\nadaptation plot: {plot}")
    typer.echo(md.read_text())


def write_merged_board(folder: Path, env_name: str, runs_dir: Path,
                       dirs: dict[str, list[Path]]) -> tuple[Path, Path, Path]:
    """What ``compare`` ends with: the scenario's board in ``folder`` from this comparison's run directories
    (``{label: [run dirs]}``) and the earlier board's rows it keeps (``earlier_rows``), read and written under
    the folder's lock (``board_lock``), so that comparisons finishing at once into one folder each keep the
    others' rows. Returns the paths of the Markdown page, the CSV table and the plot."""
    from sao_env.experiment.files import replacing
    from sao_env.leaderboard import board_lock
    from sao_env.leaderboard.plots import plot_adaptation
    from sao_env.leaderboard.records import load_summaries
    from sao_env.leaderboard.tables import write_leaderboard

    dirs = {label: list(ds) for label, ds in dirs.items()}
    with board_lock(folder):
        kept, dropped = earlier_rows(folder, env_name, runs_dir, {d for ds in dirs.values() for d in ds})
        for label, run_dir in kept:
            dirs.setdefault(label, []).append(run_dir)
        if kept or dropped:
            console.print(f"board {Path(folder) / env_name}.md: merged with the earlier one"
                          + (f"; kept its {_rows(kept)} (their run directories are here)" if kept else "")
                          + (f"; dropped {_rows(dropped)} (no finished run directory under {runs_dir})" if dropped else ""),
                          highlight=False, markup=False)
        plot = Path(folder) / f"{env_name}.png"
        with replacing(plot) as tmp:
            plot_adaptation(dirs, tmp)
        md, csv = write_leaderboard(load_summaries([d for ds in dirs.values() for d in ds]), folder, env_name, plot=plot)
    return md, csv, plot


def earlier_rows(folder: Path, env_name: str, runs_dir: Path, made: set[Path]) -> tuple[list, list]:
    """The rows of the scenario's earlier board in ``folder`` (its per-seed table) that ``compare``
    keeps beside its own: ``(kept, dropped)``, each a list of ``(run label, run directory)``. A row of a
    recipe this comparison does not make is kept when its run directory (``RUNS_DIR/<env>/<agent>/seed<N>``)
    still holds a finished run; a recipe this comparison makes is replaced by its new seeds, so a row's
    seeds are always one comparison's. A table that cannot be read is a UserError (``board.read_table``),
    never a board without rows."""
    from sao_env.leaderboard.board import read_table

    table = Path(folder) / f"{env_name}-runs.csv"
    if not table.is_file():
        return [], []
    rows = read_table(table, usecols=lambda c: c in ("agent", "seed"), dtype=str)
    if not {"agent", "seed"} <= set(rows.columns):
        raise UserError(f"{table}: no 'agent' and 'seed' columns; expected the per-seed table sao-env writes")
    made_labels = {p.parent.name for p in made}  # the runs' own labels (directory names)
    kept, dropped = [], []
    for row in rows.itertuples():
        if row.agent in made_labels:
            continue
        run_dir = Path(runs_dir) / env_name / str(row.agent) / f"seed{row.seed}"
        (kept if (run_dir / "summary.json").is_file() else dropped).append((str(row.agent), run_dir))
    return kept, dropped


def _rows(rows: list) -> str:
    """``2 runs (grpo_dis: seeds 0, 1; ...)``: what ``earlier_rows`` found, for one line."""
    seeds: dict[str, list[str]] = {}
    for label, run_dir in rows:
        seeds.setdefault(label, []).append(run_dir.name.removeprefix("seed"))
    return (f"{len(rows)} run{'s' if len(rows) != 1 else ''} ("
            + "; ".join(f"{label}: seed{'s' if len(s) > 1 else ''} {', '.join(s)}" for label, s in seeds.items()) + ")")


def verify(
    target: Path = typer.Argument(..., help="A per-seed table (leaderboards/ENV-runs.csv, a grid's per-seed.csv) or a finished run directory."),
    label: Optional[str] = typer.Option(None, "--label", help="Only the rows with this label (a table's `label` or `agent`, a grid's `row`)."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="Only these seeds (comma-separated)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Keep the re-runs here (default: a temporary folder, removed after)."),
    jobs: Optional[int] = typer.Option(None, "--jobs", min=1, help="Re-runs at once, in worker processes (default: the number of cores)."),
) -> None:
    """Re-run committed rows (or a run directory) here and say whether each is identical or within its
    row's seed interval. Exit 0 when every one is identical, 1 otherwise."""
    import tempfile

    if not target.exists():
        raise UserError(f"{target} does not exist")
    with tempfile.TemporaryDirectory(prefix="sao-env-verify-") as scratch_dir:
        scratch = out if out is not None else Path(scratch_dir)
        from sao_env.experiment import progress, run_many
        from sao_env.experiment.verify import describe, judge, target_from_run, targets_from_table
        from sao_env.leaderboard.records import run_record

        seed_list = _int_list(seeds) if seeds else None
        if target.is_dir():
            if label is not None or seed_list is not None:
                raise UserError("--label and --seeds select rows of a table; a run directory is one run")
            targets = [target_from_run(target, scratch=scratch)]
        else:
            targets = targets_from_table(target, label=label, seeds=seed_list, scratch=scratch)
        console.print(f"verify: re-running {len(targets)} run(s) into {scratch}", soft_wrap=True)
        by_out = {t.plan.out: t for t in targets}
        verdicts = []

        def report(plan, summary: dict, seconds: float) -> None:
            record, _ = run_record({**summary, "run_dir": str(plan.out)})
            verdicts.append(judge(by_out[plan.out], summary, record))
            typer.echo(describe(verdicts[-1]))

        run_many([t.plan for t in targets], jobs=jobs or _cores(), on_done=report,
                 show_progress=progress.RUN_AMONG_OTHERS_EVERY_S)
    same = sum(v.identical for v in verdicts)
    typer.echo(f"verify: {same} of {len(verdicts)} identical"
               + (f"; {sum(v.plausible for v in verdicts if not v.identical)} of the others within their row's "
                  f"seed interval" if same < len(verdicts) else ""))
    if same < len(verdicts):
        raise typer.Exit(1)


def leaderboard(
    runs: Optional[list[Path]] = typer.Argument(None, help="Run directories, folders containing them, or leaderboard tables: per-seed <env>-runs.csv or aggregated <env>.csv."),
    out_dir: Path = typer.Option(DEFAULT_BOARDS, "--out", help="Where the tables, plots, index.html and README.md go (default: runs/leaderboards, outside the tracked tree; the committed boards only when asked: --out leaderboards)."),
    summary: Optional[Path] = typer.Option(None, "--summary", help="Write DIR/README.md, the cross-scenario summary, from DIR's per-seed tables (<env>-runs.csv) and DIR/tuning/, and DIR/index.html, the site, from every table and plot in DIR."),
) -> None:
    """Rebuild leaderboard tables, plots, the site (index.html) and the summary (README.md) from runs or committed tables."""
    from sao_env.leaderboard import rebuild
    from sao_env.leaderboard.summary import write_summary

    if not runs and summary is None:
        raise UserError("give run directories or tables to rebuild, or --summary DIR")
    if runs:
        for md in rebuild(runs, out_dir):
            console.print(f"wrote {md}")
        console.print(f"site: {out_dir / 'index.html'}")
    if summary is not None:
        if not summary.is_dir():
            raise UserError(f"--summary {summary}: no such folder")
        console.print(f"summary: {write_summary(summary)}")
        from sao_env.leaderboard.site import write_site

        console.print(f"site: {write_site(summary, generator='sao-env leaderboard')}")


LIST_WIDTH = 110
"""``sao-env list`` wraps descriptions at this many characters, between words; names are never cut."""


def list_specs() -> None:
    """List scenarios, agent recipes, benchmark suites and registered Gymnasium ids."""
    import gymnasium as gym

    from sao_env.specs import available, find_spec, load_yaml

    for kind, label in (("envs", "scenarios (--env)"), ("agents", "agents (--agent)"), ("evals", "benchmark suites (--suite)")):
        typer.echo(f"{label}:")
        for name in available(kind):
            data = load_yaml(find_spec(kind, name))
            extra = f"[{data.get('algorithm')}] " if kind == "agents" else ""
            first = f"  {name:<20} "
            text = f"{extra}{' '.join(str(data.get('description', '')).split())}"
            typer.echo(textwrap.fill(text, LIST_WIDTH, initial_indent=first, subsequent_indent=" " * 23,
                                     break_long_words=False, break_on_hyphens=False) if text else first.rstrip())
    typer.echo("gymnasium ids:")
    for env_id in sorted(k for k in gym.registry if k.startswith("sao/")):
        typer.echo(f"  {env_id}")


def _cores() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--seeds must be comma-separated integers, got {text!r}") from None
