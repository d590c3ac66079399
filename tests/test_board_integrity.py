"""No fault loses a board's finished rows (issue #50).

Comparisons that finish at once into one leaderboard folder each keep the others' rows (the folder's
board lock: real processes released together by a barrier); a write killed midway leaves the previous
table or page byte for byte (each is written to a temporary file and renamed); and a per-seed table that
cannot be read (empty, truncated, unparsable) is a one-line error naming it, never a merge without rows.
Run directories are hand-made (``fake_run``): no model is trained.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import matplotlib.figure
import pandas as pd
import pytest

import sao_env.leaderboard.plots  # noqa: F401  (imported once here, before the workers fork)
from sao_env.cli import main
from sao_env.cli.training import earlier_rows, write_merged_board
from sao_env.errors import UserError
from sao_env.leaderboard import write_scenario_outputs
from sao_env.leaderboard.board import board_from_csv
from test_leaderboard_site import fake_run

ENV = "style-drift"
RECIPES = ("grpo", "running_mean", "sao")
FIX = "restore it or delete it, and write the board again"


def _runs(root: Path) -> dict[str, list[Path]]:
    """Seeds 0 and 1 of each of ``RECIPES``, by recipe."""
    return {recipe: [fake_run(root, recipe, seed, 0.3 + 0.1 * i + 0.01 * seed, 0.7) for seed in (0, 1)]
            for i, recipe in enumerate(RECIPES)}


def _board_runs(folder: Path) -> list[tuple[str, int]]:
    table = pd.read_csv(folder / f"{ENV}-runs.csv")
    return sorted(zip(table["agent"], table["seed"].astype(int)))


def _merge_after(barrier, folder: Path, runs_root: Path, recipe: str, dirs: list[Path]) -> None:
    barrier.wait(timeout=60)
    write_merged_board(folder, ENV, runs_root, {recipe: dirs})


def test_three_comparisons_finishing_at_once_keep_every_recipes_rows(tmp_path):
    runs = tmp_path / "runs"
    by_recipe = _runs(runs)
    boards = tmp_path / "boards"
    fork = multiprocessing.get_context("fork")
    barrier = fork.Barrier(len(RECIPES))
    workers = [fork.Process(target=_merge_after, args=(barrier, boards, runs, recipe, dirs))
               for recipe, dirs in by_recipe.items()]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    assert _board_runs(boards) == [(recipe, seed) for recipe in RECIPES for seed in (0, 1)]
    assert sorted(pd.read_csv(boards / f"{ENV}.csv")["agent"]) == list(RECIPES)
    assert sorted(p.name for p in boards.iterdir() if p.name.startswith(".")) == []  # no lock, no temporary left


class Killed(Exception):
    """A write stopped midway (what SIGKILL does to a process, raised where the test can see it)."""


def _kill_midway(monkeypatch, name: str) -> None:
    """Make the writer of the file called ``name`` write half its bytes, then stop (``Killed``)."""
    to_csv, write_text, savefig = pd.DataFrame.to_csv, Path.write_text, matplotlib.figure.Figure.savefig

    def half(path, data) -> None:
        with open(path, "wb") as out:
            out.write(data[: len(data) // 2])
        raise Killed(path)

    def csv(frame, path=None, *args, **kwargs):
        if path is not None and Path(path).name == name:
            half(path, to_csv(frame, None, *args, **kwargs).encode())
        return to_csv(frame, path, *args, **kwargs)

    def text(path, data, *args, **kwargs):
        if path.name == name:
            half(path, data.encode())
        return write_text(path, data, *args, **kwargs)

    def figure(fig, path, *args, **kwargs):
        if Path(path).name == name:
            half(path, b"\x89PNG\r\n\x1a\n" + bytes(64))
        return savefig(fig, path, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", csv)
    monkeypatch.setattr(Path, "write_text", text)
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", figure)


@pytest.mark.parametrize("name", [f"{ENV}-runs.csv", f"{ENV}-curves.csv", f"{ENV}.csv", f"{ENV}.md", f"{ENV}.png",
                                  "index.html", "README.md"])
def test_a_write_killed_midway_leaves_the_previous_file_byte_identical(tmp_path, monkeypatch, name):
    by_recipe = _runs(tmp_path / "runs")
    boards = tmp_path / "boards"
    write_scenario_outputs(by_recipe["grpo"] + by_recipe["sao"], boards, ENV)
    before = {p.name: p.read_bytes() for p in boards.iterdir()}
    _kill_midway(monkeypatch, name)
    with pytest.raises(Killed):
        write_scenario_outputs([d for dirs in by_recipe.values() for d in dirs], boards, ENV)
    assert (boards / name).read_bytes() == before[name]
    assert sorted(p.name for p in boards.iterdir()) == sorted(before)  # no temporary file or lock left behind


UNREADABLE = {
    "empty": (b"", "an empty table (0 bytes)"),
    "truncated": (b"agent,seed,online_reward\ngrpo,0,0.3\nsao,0,0.", "a truncated table (its last line is unfinished)"),
    "unparsable": (b'agent,seed\n"grpo,0\n', "not a readable CSV table (ParserError)"),
    "not text": (b"\xff\xfe\x00agent,seed\n", "not a readable CSV table (UnicodeDecodeError)"),
    "header only": (b"agent,seed,online_reward\n", "a table without rows"),
}


@pytest.mark.parametrize("case", sorted(UNREADABLE))
@pytest.mark.parametrize("reader", ["merge", "rebuild"])
def test_a_per_seed_table_that_cannot_be_read_is_an_error_naming_it(tmp_path, case, reader):
    content, words = UNREADABLE[case]
    table = tmp_path / f"{ENV}-runs.csv"
    table.write_bytes(content)
    with pytest.raises(UserError) as err:
        if reader == "merge":
            earlier_rows(tmp_path, ENV, tmp_path / "runs", set())
        else:
            board_from_csv(table)
    assert str(err.value) == f"{table}: {words}; {FIX}"


def test_compare_into_a_folder_with_an_empty_per_seed_table_is_one_line_and_exit_2(tmp_path, capsys):
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / f"{ENV}-runs.csv").write_bytes(b"")
    assert main(["compare", "--agents", "sao", "--seeds", "0", "--runs-dir", str(tmp_path / "runs"),
                 "--leaderboard-dir", str(boards), "--dry-run"]) == 2
    assert capsys.readouterr().err == f"sao-env: error: {boards / ENV}-runs.csv: an empty table (0 bytes); {FIX}\n"


def test_a_merge_into_an_empty_per_seed_table_writes_nothing(tmp_path):
    by_recipe = _runs(tmp_path / "runs")
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / f"{ENV}-runs.csv").write_bytes(b"")
    with pytest.raises(UserError, match="an empty table"):
        write_merged_board(boards, ENV, tmp_path / "runs", {"sao": by_recipe["sao"]})
    assert sorted(p.name for p in boards.iterdir()) == [f"{ENV}-runs.csv"]
    assert (boards / f"{ENV}-runs.csv").read_bytes() == b""


def _record_after(barrier, folder: Path, model: str) -> None:
    from sao_env.leaderboard.benchmarks import record_benchmark

    barrier.wait()
    record_benchmark(folder, {"model": model, "suite": "hmmt", "k": 1, "accuracy": 0.25, "n": 4, "problems": 4,
                              "code_version": "test"})


def test_evaluations_recorded_at_once_keep_every_row_and_a_killed_write_keeps_the_old_table(tmp_path, monkeypatch):
    """``record_benchmark`` (sao-env eval's board): three processes at once leave three rows; a write killed
    midway leaves benchmarks.csv byte-identical."""
    from sao_env.leaderboard.benchmarks import record_benchmark

    folder = tmp_path / "bench"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(3)
    workers = [ctx.Process(target=_record_after, args=(barrier, folder, f"m{i}")) for i in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [worker.exitcode for worker in workers] == [0, 0, 0]
    assert sorted(pd.read_csv(folder / "benchmarks.csv")["model"]) == ["m0", "m1", "m2"]
    before = (folder / "benchmarks.csv").read_bytes()

    def half_then_fail(self, path_or_buf=None, *args, **kwargs):
        Path(path_or_buf).write_text("model,suite\nm9,hm")
        raise OSError("killed")

    monkeypatch.setattr(pd.DataFrame, "to_csv", half_then_fail)
    with pytest.raises(OSError):
        record_benchmark(folder, {"model": "m9", "suite": "hmmt", "k": 1, "accuracy": 0.5, "n": 4, "code_version": "t"})
    assert (folder / "benchmarks.csv").read_bytes() == before
