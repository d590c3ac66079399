"""The benchmark leaderboard: one row per (model, suite, k), the latest evaluation of each.

``sao-env eval`` and ``sao-env grade`` add their summaries here only when asked
(``--leaderboard DIR``): ``DIR/benchmarks.csv`` is the table (a new evaluation replaces the row
with the same model, suite and k), ``DIR/benchmarks.md`` its Markdown view and ``DIR/index.html``
the site, rebuilt with it.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd

from sao_env.errors import UserError
from sao_env.leaderboard.columns import finite_float
from sao_env.provenance import code_key, code_version

KEY = ["model", "suite", "k"]
COLUMNS = ["model", "suite", "k", "avg_at_k", "ci95_half_width", "ci95_low", "ci95_high", "pass_at_k", "problems",
           "suite_problems", "samples", "grader", "answer_fallback", "backend", "date", "code_version"]
"""``avg_at_k``, ``pass_at_k`` (at the row's k) and the interval are fractions in [0, 1]; ``samples``
is the number of graded responses; ``suite_problems`` the suite's size before ``--limit``."""


def benchmark_row(summary: dict[str, Any]) -> dict[str, Any]:
    """The table row of an evaluation summary (``sao_env.benchmarks.evaluate.write_results``)."""
    k = int(summary["k"])
    table = summary.get("pass_at_k") or {}
    pass_k = table.get(str(k))
    if pass_k is None and table:
        pass_k = table[max(table, key=int)]
    return {
        "model": summary["model"], "suite": summary["suite"], "k": k, "avg_at_k": summary.get("accuracy"),
        "ci95_half_width": summary.get("ci95_half_width"), "ci95_low": summary.get("ci95_low"),
        "ci95_high": summary.get("ci95_high"), "pass_at_k": pass_k, "problems": summary.get("problems"),
        "suite_problems": summary.get("suite_problems", summary.get("problems")), "samples": summary.get("n"),
        "grader": summary.get("grader"), "answer_fallback": summary.get("answer_fallback", "none"),
        "backend": summary.get("backend"), "date": str(summary.get("date", ""))[:19],
        "code_version": summary.get("code_version") or code_key(code_version()),
    }


def read_benchmarks(path: Path) -> pd.DataFrame | None:
    """The benchmark table at ``path`` (None when there is none); missing columns are empty."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        frame = pd.read_csv(path, dtype={"model": str, "suite": str})
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not a readable benchmark table ({type(err).__name__})") from None
    missing = [c for c in KEY if c not in frame.columns]
    if missing:
        raise UserError(f"{path}: no column(s) {', '.join(missing)}; expected a table written by sao-env eval")
    for column in COLUMNS:
        if column not in frame.columns:
            frame[column] = None
    return frame[COLUMNS]


def check_folder(folder: Path) -> Path:
    """``folder`` as a Path; a UserError when it names a file such as the older ``benchmarks.md``."""
    folder = Path(folder)
    if folder.suffix in (".md", ".csv", ".html") or folder.is_file():
        raise UserError(f"--leaderboard takes a folder (benchmarks.csv, benchmarks.md and index.html go there), "
                        f"not the file {folder}")
    return folder


def record_benchmark(folder: Path, summary: dict[str, Any], *, generator: str = "`sao-env eval`") -> dict[str, Path]:
    """Put ``summary``'s row into ``folder/benchmarks.csv`` (replacing the row of the same model,
    suite and k), rewrite ``benchmarks.md`` and the site; returns the paths written."""
    from sao_env.leaderboard.site import write_site

    from sao_env.experiment.files import replacing
    from sao_env.leaderboard import board_lock

    folder = check_folder(folder)
    folder.mkdir(parents=True, exist_ok=True)
    row = benchmark_row(summary)
    with board_lock(folder):  # evaluations finishing at once each merge into what the one before wrote
        old = read_benchmarks(folder / "benchmarks.csv")
        frame = pd.DataFrame([row], columns=COLUMNS)
        if old is not None:
            same = (old["model"].astype(str) == str(row["model"])) & (old["suite"].astype(str) == str(row["suite"])) \
                & (pd.to_numeric(old["k"], errors="coerce") == row["k"])
            frame = pd.concat([old[~same], frame], ignore_index=True)
        frame = frame.sort_values(["suite", "avg_at_k", "model"], ascending=[True, False, True], kind="stable",
                                  na_position="last").reset_index(drop=True)
        csv_path, md_path = folder / "benchmarks.csv", folder / "benchmarks.md"
        with replacing(csv_path) as tmp:
            frame.to_csv(tmp, index=False, float_format="%.6g")
        with replacing(md_path) as tmp:
            tmp.write_text(benchmarks_markdown(frame, generator=generator), encoding="utf-8")
        return {"csv": csv_path, "md": md_path, "html": write_site(folder, generator=generator)}


def interval_text(low: Any, high: Any) -> str:
    """`` [0.0, 56.1]``: a 95% interval in %, or nothing where it is unknown."""
    low, high = finite_float(low), finite_float(high)
    return "" if low is None or high is None else f" [{100 * low:.1f}, {100 * high:.1f}]"


def benchmarks_markdown(frame: pd.DataFrame, *, generator: str) -> str:
    """The Markdown view: one table, suites together, best first."""
    lines = [
        "# Benchmarks", "",
        f"Generated on {date.today().isoformat()} by {generator}. avg@k: the fraction of k samples per problem graded "
        "correct, averaged over problems, in %, with its 95% Wilson score interval over problems in brackets; pass@k "
        "is unbiased (Chen et al. 2021). One row per (model, suite, k), the latest evaluation. `m of N`: evaluated on "
        "the suite's first m problems only. Answers are graded from the last `\\boxed{}` unless the fallback column "
        "names another rule.", "",
        "| model | suite | avg@k (%) | pass@k (%) | k | problems | samples | grader | fallback | date | code version |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---|---|",
    ]
    for _, r in frame.iterrows():
        acc, passk = finite_float(r["avg_at_k"]), finite_float(r["pass_at_k"])
        score = "n/a" if acc is None else f"{100 * acc:.1f}" + interval_text(r.get("ci95_low"), r.get("ci95_high"))
        problems = str(int(r["problems"]))
        if finite_float(r["suite_problems"]) is not None and int(r["suite_problems"]) != int(r["problems"]):
            problems += f" of {int(r['suite_problems'])}"
        cells = [str(r["model"]), str(r["suite"]), score, "n/a" if passk is None else f"{100 * passk:.1f}",
                 str(int(r["k"])), problems, str(int(r["samples"])) if finite_float(r["samples"]) is not None else "n/a",
                 str(r["grader"]), str(r["answer_fallback"] or "none"), str(r["date"])[:10],
                 str(r["code_version"] or "?")]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"
