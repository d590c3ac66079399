"""The ``verdict`` command: pre-registered predictions read from a grid's per-seed table (held, failed, not resolved)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Optional

import typer

from sao_env.errors import UserError


def register(app: typer.Typer) -> None:
    app.command("verdict")(verdict)


def verdict(
    path: Path = typer.Argument(..., help="The predictions file (YAML: metric, alpha, predictions with id, cell, contrast 'a - b', sign, optional minus)."),
    per_seed: Optional[Path] = typer.Option(None, "--per-seed", help="The grid's per-seed table (default: per-seed.csv beside the predictions file), or its ledger finished.jsonl (a map still running)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Folder for verdict.md and verdict.csv (default: the predictions file's folder)."),
    partial: bool = typer.Option(False, "--partial", help="A map still running: a cell or row not yet in the table gives 'no data' (counted in Holm's family with p = 1) instead of an error."),
) -> None:
    """Read pre-registered predictions from a grid's per-seed table: each held, failed or not resolved (Holm over the file)."""
    import pandas as pd

    from sao_env.experiment import writing
    from sao_env.grid import Ledger
    from sao_env.leaderboard.predictions import (VERDICT_CSV, VERDICT_MD, load_predictions, verdict_markdown,
                                                 verdict_table, verdicts)

    spec = load_predictions(path)
    per_seed = per_seed or path.parent / "per-seed.csv"
    if not per_seed.is_file():
        raise UserError(f"{per_seed}: no per-seed table (a grid writes per-seed.csv into its --out folder; name another with --per-seed)")
    try:
        table = pd.DataFrame(Ledger(per_seed).rows()) if per_seed.suffix == ".jsonl" else pd.read_csv(per_seed)
    except (OSError, ValueError) as err:
        raise UserError(f"{per_seed}: not a readable table ({' '.join(str(err).split())})") from None
    missing = {"scenario", "row", "seed"} - set(table.columns)
    if missing:
        raise UserError(f"{per_seed}: not a grid's per-seed table (no {', '.join(sorted(missing))} column)")
    found = verdicts(table, spec, partial=partial)
    out = out or path.parent
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        md, csv = out / VERDICT_MD, out / VERDICT_CSV
        command = shlex.join(["sao-env", "verdict", str(path), "--per-seed", str(per_seed), *(["--partial"] if partial else [])])
        md.write_text(verdict_markdown(found, spec, source=shlex.quote(str(path)), per_seed=str(per_seed), command=command))
        verdict_table(found).to_csv(csv, index=False, float_format="%.6g")
    typer.echo(md.read_text())
    typer.echo(f"verdicts: {md} and {csv}", err=True)

