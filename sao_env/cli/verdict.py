"""The ``verdict`` command: pre-registered predictions read from a grid's per-seed table (held, failed, not resolved)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("verdict")(verdict)


DEFAULT_VERDICTS = Path("runs") / "verdicts"
"""Where verdicts go unless ``--out`` names a folder: under ``runs/`` (ignored by git), never a committed map's folder."""


def default_out(path: Path) -> Path:
    """``runs/verdicts/<the predictions file's folder name>``."""
    return DEFAULT_VERDICTS / (Path(path).resolve().parent.name or "predictions")


def verdict(
    path: Path = typer.Argument(..., help="The predictions file (YAML: metric, alpha, predictions with id, cell, contrast 'a - b', sign, optional minus)."),
    per_seed: Optional[Path] = typer.Option(None, "--per-seed", help="The grid's per-seed table (default: per-seed.csv beside the predictions file), or its ledger finished.jsonl (a map still running)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for verdict.md and verdict.csv (default: runs/verdicts/NAME, NAME the predictions file's folder, outside the tracked tree; the map's own folder, where the site shows the table, only when asked: --out leaderboards/critic)."),
    partial: bool = typer.Option(False, "--partial", help="A map still running: a cell or row not yet in the table gives 'no data' (counted in Holm's family with p = 1) instead of an error."),
) -> None:
    """Read pre-registered predictions from a grid's per-seed table: each held, failed or not resolved (Holm over the file)."""
    from sao_env.leaderboard.predictions import load_predictions, read_per_seed

    spec = load_predictions(path)  # before pandas and scipy: a bad file is one line within about a second
    per_seed = per_seed or path.parent / "per-seed.csv"
    table = read_per_seed(per_seed, spec.metric)

    from sao_env.experiment import writing
    from sao_env.leaderboard.predictions import VERDICT_CSV, VERDICT_MD, verdict_markdown, verdict_table, verdicts

    found = verdicts(table, spec, partial=partial, source=str(per_seed))
    given = out
    out = out if out is not None else default_out(path)
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        md, csv = out / VERDICT_MD, out / VERDICT_CSV
        command = shlex.join(["sao-env", "verdict", str(path), "--per-seed", str(per_seed), *(["--partial"] if partial else []),
                             *(["--out", str(given)] if given is not None else [])])
        md.write_text(verdict_markdown(found, spec, source=shlex.quote(str(path)), per_seed=str(per_seed), command=command))
        verdict_table(found).to_csv(csv, index=False, float_format="%.6g")
    typer.echo(md.read_text())
    typer.echo(f"verdicts: {md} and {csv}", err=True)

