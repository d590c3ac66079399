"""Leaderboards: per-seed tables, aggregated tables (Markdown, CSV), plots and the static site.

Entry points (what ``sao-env compare`` and ``sao-env leaderboard`` call):

- ``write_scenario_outputs(run_dirs, leaderboard_dir, env_name)``: one scenario's finished run
  directories -> ``<env>-runs.csv``, ``<env>-curves.csv``, ``<env>.csv``, ``<env>.md``,
  ``<env>.png``, then ``index.html`` and the summary ``README.md`` rebuilt from every table in the folder;
- ``write_table_outputs(csv_path, leaderboard_dir)``: the same from a committed per-seed table
  (``<env>-runs.csv``) or an aggregated one (``<env>.csv``);
- ``rebuild(inputs, leaderboard_dir)``: what ``sao-env leaderboard`` does with any mix of run
  directories, folders holding them, and tables;
- ``sao_env.leaderboard.summary.write_summary(dir)``: the cross-scenario ``README.md`` from the
  folder's per-seed tables and its ``tuning/`` tables (``sao-env leaderboard --summary DIR``);
- ``sao_env.leaderboard.benchmarks.record_benchmark(dir, summary)``: a benchmark evaluation's row.

The parts, each depending only on those above it: ``columns`` (which metrics a board shows, titled and
printed how), ``records`` (a finished run read into its per-seed row and curve), ``stats`` (the paired
tests, Holm, power), ``board`` (a scenario's rows aggregated and ranked: ``ScenarioBoard``, from runs or
tables), ``tables`` (the CSV and Markdown files of a board), then ``plots``, ``site``, ``summary``,
``maps`` and ``finding``, which read boards.

Every table and page is written whole (a temporary file renamed onto it), and each folder's boards are
read, merged and written by one process at a time (``board_lock``).
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import Iterator

from sao_env.experiment.files import RunLock

__all__ = ["board_lock", "rebuild", "write_board", "write_scenario_outputs", "write_table_outputs"]


class BoardLock(RunLock):
    """The lock of a leaderboard folder (``board_lock``): ``RunLock``'s, on ``<folder>/.board.lock``."""

    NAME = ".board.lock"


_held: set[Path] = set()
"""The folders whose board lock this process holds (the lock is re-entrant)."""


@contextlib.contextmanager
def board_lock(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s board lock for the block, waiting for another process that holds it: an
    ``fcntl.flock`` on ``<folder>/.board.lock`` (``RunLock``'s, which the kernel drops when its holder
    dies), so that writers finishing at once each read the board the one before wrote. Re-entrant."""
    key = Path(folder).resolve()
    if key in _held:
        yield
        return
    lock = BoardLock(folder)
    lock.acquire(wait=True)
    _held.add(key)
    try:
        yield
    finally:
        _held.discard(key)
        lock.release()


def write_board(board, folder: Path, *, generator: str, plot_from: Path | None = None) -> dict[str, Path]:
    """Write a ``ScenarioBoard``'s tables and plot into ``folder`` and rebuild the site and, when the
    folder holds per-seed tables, the cross-scenario summary ``README.md`` there.

    The plot is drawn from the board's curves; without curves, ``plot_from`` (an earlier plot of
    the same table) is copied when given. Returns the paths written by kind.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with board_lock(folder):
        return _write_board(board, folder, generator=generator, plot_from=plot_from)


def _write_board(board, folder: Path, *, generator: str, plot_from: Path | None) -> dict[str, Path]:
    from sao_env.experiment.files import replacing
    from sao_env.leaderboard.plots import plot_curves
    from sao_env.leaderboard.site import write_site
    from sao_env.leaderboard.tables import write_tables

    png = folder / f"{board.env}.png"
    if board.curves is not None and len(board.curves):
        with replacing(png) as tmp:
            plot_curves(board.curves, board.facts, tmp, title=f"{board.env}: adaptation curves",
                        order=[str(x) for x in board.frame["label"]])
    elif plot_from is not None and Path(plot_from).is_file() and Path(plot_from).resolve() != png.resolve():
        with replacing(png) as tmp:
            shutil.copyfile(plot_from, tmp)
    paths = write_tables(board, folder, generator=generator, plot=png if png.is_file() else None)
    if png.is_file():
        paths["png"] = png
    paths["html"] = write_site(folder, generator=generator)
    if any(folder.glob("*-runs.csv")):
        from sao_env.leaderboard.summary import write_summary

        paths["summary"] = write_summary(folder)
    return paths


def write_scenario_outputs(run_dirs: list[Path], leaderboard_dir: Path, env_name: str | None = None, *,
                           generator: str = "`sao-env compare`") -> dict[str, Path]:
    """Tables, plot and site of one scenario from its finished run directories (see the module doc)."""
    from sao_env.leaderboard.board import board_from_run_dirs

    return write_board(board_from_run_dirs([Path(d) for d in run_dirs], env_name), leaderboard_dir, generator=generator)


def write_table_outputs(csv_path: Path, leaderboard_dir: Path, *,
                        generator: str = "`sao-env leaderboard`") -> dict[str, Path]:
    """Tables, plot and site of one scenario from a per-seed or aggregated CSV table."""
    from sao_env.leaderboard.board import board_from_csv

    csv_path = Path(csv_path)
    with board_lock(leaderboard_dir):  # the table may be the folder's own: read it under the lock too
        board = board_from_csv(csv_path)
        return write_board(board, leaderboard_dir, generator=generator, plot_from=csv_path.with_name(f"{board.env}.png"))


def left_out_text(left_out: list[tuple[Path, str]]) -> str:
    """``1 run left out: runs/a/seed3 (evals.jsonl line 9 is cut off or not a JSON object)``."""
    runs = f"{len(left_out)} run{'s' if len(left_out) != 1 else ''}"
    return f"{runs} left out: " + "; ".join(f"{d} ({why})" for d, why in left_out)


def rebuild(inputs: list[Path], leaderboard_dir: Path, *, generator: str = "`sao-env leaderboard`") -> list[Path]:
    """Rebuild scenario outputs and the site from ``inputs``: run directories, folders holding
    them (searched for ``summary.json``), per-seed or aggregated CSV tables, or a leaderboard
    folder without runs (its tables). Returns the Markdown paths written; a UserError when an
    input holds nothing usable."""
    from sao_env.errors import UserError
    from sao_env.leaderboard.records import load_summaries

    run_dirs: list[Path] = []
    tables: list[Path] = []
    for item in map(Path, inputs):
        if item.is_file() and item.suffix == ".csv":
            tables.append(item)
        elif item.is_file():
            raise UserError(f"{item}: expected a run directory, a folder of runs or a .csv table")
        elif not item.exists():
            raise UserError(f"{item}: no such file or folder")
        elif (item / "summary.json").is_file():
            run_dirs.append(item)
        elif found := sorted(p.parent for p in item.rglob("summary.json")):
            run_dirs += found
        else:
            per_seed = {p.stem.removesuffix("-runs") for p in item.glob("*-runs.csv")}
            own = [p for p in sorted(item.glob("*.csv")) if p.stem not in ("benchmarks",)
                   and not p.stem.endswith("-curves") and (p.stem.endswith("-runs") or p.stem not in per_seed)]
            if not own:
                raise UserError(f"{item}: no finished run (summary.json) and no leaderboard table (.csv) in it")
            tables += own
    written = []
    by_env: dict[str, list[Path]] = {}
    left_out: list[tuple[Path, str]] = []
    for summary in load_summaries(sorted(set(run_dirs)), left_out):
        by_env.setdefault(str(summary.get("env")), []).append(Path(summary["run_dir"]))
    if left_out and not by_env and not tables:
        raise UserError(f"{left_out_text(left_out)}; no board written")
    if left_out:
        import sys

        print(f"sao-env: warning: {left_out_text(left_out)}", file=sys.stderr)
    for env, dirs in sorted(by_env.items()):
        written.append(write_scenario_outputs(dirs, leaderboard_dir, env, generator=generator)["md"])
    for table in tables:
        written.append(write_table_outputs(table, leaderboard_dir, generator=generator)["md"])
    return written
