"""The cross-scenario summary ``<leaderboard dir>/README.md``: algorithms x scenarios on one page.

Made from the committed per-seed tables alone (``<scenario>-runs.csv``), so it can be checked
against them: for each headline metric (online reward, then AUC) a table of recipes x scenarios
whose cells are mean ± half-width of the 95% Student-t interval over seeds, the number of seeds
and the rank within the scenario (by that metric's mean, highest first); then each recipe minus
the reference recipe (``grpo``), paired by seed (``tables.paired_frame``); links to each
scenario's page and per-seed table; and the tuning tables under ``tuning/`` (``sao_env.sweep``),
each with its sweep size, cut and winning trial; and the stability pages (``stability*.md``).

It is written by ``sao-env leaderboard --summary DIR`` and again whenever a scenario's tables
are written into a folder (``sao_env.leaderboard.write_board``).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pandas as pd

from sao_env.errors import UserError
from sao_env.leaderboard import tables
from sao_env.leaderboard.tables import REFERENCE, ScenarioBoard, column_format, finite_float

METRICS = ("online_reward", "auc")
"""The metrics summarised across scenarios, in this order (docs/metrics.md)."""


def per_seed_boards(folder: Path) -> list[ScenarioBoard]:
    """The board of every ``<scenario>-runs.csv`` in ``folder``, by scenario name."""
    return [tables.board_from_csv(p) for p in sorted(Path(folder).glob("*-runs.csv"))]


def metric_table(boards: list[ScenarioBoard], metric: str) -> list[str]:
    """Markdown lines: recipes x scenarios, ``mean ± CI (n=k) #rank`` per cell, ``—`` where a recipe did not run."""
    title = column_format(metric).title
    labels: list[str] = []
    for b in boards:
        labels += [str(x) for x in b.frame["label"] if str(x) not in labels]
    header = ["recipe", "algorithm"] + [f"[{b.env}]({b.env}.md)" for b in boards]
    lines = [f"## {title}", "",
             f"Mean ± half-width of the 95% t-interval over seeds, n seeds, and `#rank` within the scenario by the mean "
             f"{title} (highest first). `—`: not run on that scenario.", "",
             "| " + " | ".join(header) + " |", "|---|---|" + "|".join("---:" for _ in boards) + "|"]
    for label in labels:
        algorithm = next((str(b.frame.loc[b.frame["label"].astype(str) == label, "algorithm"].iloc[0])
                          for b in boards if (b.frame["label"].astype(str) == label).any()), tables.UNKNOWN)
        cells = [tables._md_escape(label), algorithm]
        for b in boards:
            mine = b.frame["label"].astype(str) == label
            if metric not in b.frame.columns or not mine.any():
                cells.append("—")
                continue
            ranks = pd.to_numeric(b.frame[metric], errors="coerce").rank(ascending=False, method="min")
            row, rank = b.frame[mine].iloc[0], finite_float(ranks[mine].iloc[0])
            text = tables.format_cell(row[metric], row[f"{metric}_ci95"], 0, row["seeds"], metric)
            cells.append(f"{text} (n={int(row['seeds'])})" + (f" #{int(rank)} of {len(b.frame)}" if rank else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def paired_table(boards: list[ScenarioBoard], metrics: tuple[str, ...] = METRICS) -> list[str]:
    """Markdown lines: each recipe minus the reference per scenario and metric, paired by seed."""
    frames = {b.env: tables.paired_frame(b, list(metrics)) for b in boards}
    frames = {env: f for env, f in frames.items() if f is not None and not f.empty}
    if not frames:
        return [f"## Paired differences to {REFERENCE}", "",
                f"No scenario has per-seed rows of {REFERENCE} and another recipe.", ""]
    envs = [b.env for b in boards if b.env in frames]
    lines = [f"## Paired differences to {REFERENCE}", "",
             f"Each recipe minus {REFERENCE}, paired by seed: mean ± half-width of the 95% t-interval over the seeds' "
             "differences, n paired seeds (no interval with n=1). An interval that excludes 0 is a difference the seeds "
             "support.", "",
             "| recipe − " + REFERENCE + " | metric | " + " | ".join(f"[{env}]({env}.md)" for env in envs) + " |",
             "|---|---|" + "|".join("---:" for _ in envs) + "|"]
    labels = list(dict.fromkeys(label for f in frames.values() for label in f["label"]))
    for label in labels:
        for metric in metrics:
            cells = []
            for env in envs:
                match = frames[env][(frames[env]["label"] == label) & (frames[env]["metric"] == metric)]
                if match.empty:
                    cells.append("—")
                else:
                    r = match.iloc[0]
                    cells.append(tables.format_difference(r["mean"], r["ci95"], int(r["n"]), metric))
            lines.append(f"| {tables._md_escape(label)} − {REFERENCE} | {column_format(metric).title} | " + " | ".join(cells) + " |")
    return lines + [""]


def scenario_lines(boards: list[ScenarioBoard]) -> list[str]:
    """Markdown lines: one bullet per scenario with its budget, seeds and links."""
    lines = ["## Scenarios", ""]
    for b in boards:
        facts = dict(tables.header_facts(b, ""))
        lines.append(f"- [{b.env}]({b.env}.md) ([per-seed table]({b.env}-runs.csv)): {facts['budget']}; "
                     f"{facts['phases']}; recovery threshold {tables._num(b.facts.get('recovery_threshold'))}; "
                     f"seeds {facts['seeds']}.")
    return lines + [""]


def tuning_lines(folder: Path) -> list[str]:
    """Markdown lines: every tuning table under ``folder/tuning`` with its size, cut and winner."""
    from sao_env.sweep import rank_trials

    paths = sorted((Path(folder) / "tuning").glob("*.csv"))
    lines = ["## Tuning tables", ""]
    if not paths:
        return lines + ["No tuning table in `tuning/` yet (`sao-env sweep` writes them).", ""]
    lines += ["Each recipe's hyper-parameters come from a sweep of the same size on the same cut and seeds "
              "(`tuning:` in its agents/*.yaml points here).", "",
              "| table | trials x seeds | cut | objective | winner | mean ± CI |", "|---|---|---|---|---|---:|"]
    for path in paths:
        try:
            table = pd.read_csv(path, dtype={"overrides": str, "cut": str})
            objective = str(table["objective"].iloc[0])
            ranked = rank_trials(table, objective)
        except (KeyError, IndexError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
            raise UserError(f"{path}: not a tuning table written by sao-env sweep ({type(err).__name__})") from None
        best = ranked.iloc[0]
        cut = "" if pd.isna(table["cut"].iloc[0]) else str(table["cut"].iloc[0])
        half = "" if pd.isna(best["ci95"]) else f" ± {best['ci95']:.3f}"
        lines.append(f"| [{path.stem}](tuning/{path.stem}.md) | {table['trial'].nunique()} x {table['seed'].nunique()} | "
                     f"`{cut or 'none'}` | {objective} | `{best['overrides']}` | {best['mean']:.3f}{half} |")
    return lines + [""]


def summary_markdown(folder: Path) -> str:
    """The whole README.md of a leaderboard folder (see the module doc)."""
    boards = per_seed_boards(folder)
    if not boards:
        raise UserError(f"{folder}: no per-seed table (<scenario>-runs.csv) to summarise")
    lines = ["# Leaderboards: every scenario", "",
             f"Generated on {date.today().isoformat()} by `sao-env leaderboard --summary` from the per-seed tables "
             f"({', '.join(f'`{b.env}-runs.csv`' for b in boards)}); any row can be re-run from its scenario, recipe, "
             "overrides and seed and compared. The rule (same scenario, simulated time and rollout slots for every "
             "recipe) is docs/leaderboard.md; the site `index.html` shows the same tables.", ""]
    for metric in METRICS:
        lines += metric_table(boards, metric)
    lines += paired_table(boards)
    lines += scenario_lines(boards)
    lines += tuning_lines(folder)
    stability = sorted(p.name for p in Path(folder).glob("stability*.md"))
    if stability:
        lines += ["## Stability", ""] + [f"- [{name}]({name}): long runs (>= 1,000 learner updates) and the verdict "
                                         "on collapse (bench/stability.py)." for name in stability] + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_summary(folder: Path) -> Path:
    """Write ``<folder>/README.md`` (``summary_markdown``); returns its path."""
    path = Path(folder) / "README.md"
    path.write_text(summary_markdown(folder))
    return path
