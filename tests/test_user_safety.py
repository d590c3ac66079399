"""What a user does never destroys or mixes a result: boards go where the user says, hostile values are
one-line errors before any work, a diverged run stops, long work reports progress to a log file, and
the small rough edges (eval of a missing path, strict JSON, full names, plot legends, extras)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sao_env.cli import main
from tests.conftest import SHRINK, shrink_overrides

REPO = Path(__file__).resolve().parents[1]


# -- 1. boards go outside the tracked tree unless the user names a folder -----------------------------

BOARD_FILES = ("style-drift.md, style-drift.csv, style-drift-runs.csv, style-drift-curves.csv, style-drift.png, "
               "index.html, README.md")


def test_compare_dry_run_names_the_board_folder_and_files(capsys, tmp_path):
    runs = tmp_path / "runs"
    argv = ["compare", "--dry-run", "--agents", "sao", "--seeds", "0", "--runs-dir", str(runs), *SHRINK]
    assert main(argv) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"write  {runs / 'leaderboards'}  {BOARD_FILES}"
    assert main([*argv, "--leaderboard-dir", "leaderboards"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"write  leaderboards  {BOARD_FILES}"


def test_leaderboard_rebuild_writes_under_runs_by_default(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["leaderboard", str(REPO / "leaderboards" / "style-drift-runs.csv")]) == 0
    assert sorted(p.name for p in (tmp_path / "runs" / "leaderboards").iterdir()) == [
        "README.md", "index.html", "style-drift-curves.csv", "style-drift-runs.csv", "style-drift.csv",
        "style-drift.md", "style-drift.png"]
    assert not (tmp_path / "leaderboards").exists()


@pytest.mark.slow
def test_readme_compare_example_leaves_a_fresh_clone_clean(tmp_path):
    """The README's ``compare`` example (one seed, two recipes, shrunk) run in a fresh clone of the
    committed code leaves ``git status --porcelain`` empty: its runs and boards go under ``runs/``."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env = {**os.environ, "PYTHONPATH": str(clone)}
    done = subprocess.run([sys.executable, "-m", "sao_env.cli", "compare", "--env", "style-drift", "--agents",
                           "sao,grpo", "--seeds", "0", "--jobs", "1", *SHRINK],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (clone / "runs" / "leaderboards" / "style-drift.md").is_file()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True)
    assert status.stdout == ""
