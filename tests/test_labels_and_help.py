"""Labels and help: a cut that every row shares is said once, not in every label; an unknown key or name
suggests the known one it is closest to; ``--version`` names the commit; the project's pages speak of what
they mean, not of issue numbers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sao_env.cli import main
from test_leaderboard_site import CUT, cut_env, fake_run

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- a shared cut


def test_a_cut_every_row_shares_is_a_note_not_part_of_every_label(tmp_path):
    from sao_env.leaderboard import write_scenario_outputs
    from sao_env.leaderboard.board import board_from_csv, board_from_run_dirs

    runs = tmp_path / "runs"
    env = cut_env()
    dirs = [fake_run(runs, "sao", s, 0.50 + 0.01 * s, 0.7, overrides=CUT, env=env) for s in range(3)]
    dirs += [fake_run(runs, "grpo", s, 0.40 + 0.01 * s, 0.7, overrides=CUT, env=env) for s in range(3)]
    dirs += [fake_run(runs, "sao", s, 0.45 + 0.01 * s, 0.7, overrides=(*CUT, "agent.hparams.lr=3e-5"), env=env)
             for s in range(3)]
    board = board_from_run_dirs(dirs)
    assert sorted(board.frame["label"]) == ["grpo", "sao", "sao (agent.hparams.lr=3e-5)"]
    assert sorted(board.curves["label"].unique()) == ["grpo", "sao", "sao (agent.hparams.lr=3e-5)"]
    note = ("Every row was run with env.phases.0.duration_h=0.02; env.phases.1.duration_h=0.02; "
            "env.phases.2.duration_h=0.02 (shared by all rows, so left out of their labels; the per-seed table's "
            "overrides column keeps each run's whole list).")
    assert note in board.notes
    assert {c.a for c in board.comparisons("online_reward")} | {c.b for c in board.comparisons("online_reward")} \
        == {"grpo", "sao", "sao (agent.hparams.lr=3e-5)"}

    paths = write_scenario_outputs(dirs, tmp_path / "boards", "style-drift")
    md = paths["md"].read_text()
    assert note in md and "sao (env.phases" not in md
    assert "duration_h=0.02" in (tmp_path / "boards" / "style-drift-runs.csv").read_text()  # kept per run
    again = board_from_csv(tmp_path / "boards" / "style-drift-runs.csv")  # the same board from its table
    assert sorted(again.frame["label"]) == sorted(board.frame["label"]) and note in again.notes


def test_rows_without_a_shared_cut_keep_their_labels(tmp_path):
    from sao_env.leaderboard.board import board_from_run_dirs

    runs = tmp_path / "runs"
    dirs = [fake_run(runs, "sao", s, 0.5, 0.7) for s in range(2)]
    dirs += [fake_run(runs, "sao", s, 0.4, 0.7, overrides=("agent.hparams.lr=3e-5",)) for s in range(2)]
    board = board_from_run_dirs(dirs)
    assert sorted(board.frame["label"]) == ["sao", "sao (agent.hparams.lr=3e-5)"]
    assert not [n for n in board.notes if n.startswith("Every row was run with")]


# ----------------------------------------------------------------------------- did you mean


@pytest.mark.parametrize("argv, says", [
    (["run", "--agent", "sao", "--dry-run", "agent.hparams.learning_rate=1e-4"],
     "invalid configuration at agent.hparams.learning_rate: Extra inputs are not permitted; did you mean 'lr'?"),
    (["run", "--dry-run", "agent.runtime.max_stalenes=3"],
     "unknown override key 'agent.runtime.max_stalenes'; did you mean 'max_staleness'?"),
    (["run", "--dry-run", "env.phases.0.duraton_h=0.1"], "unknown override key 'env.phases.0.duraton_h'; did you mean 'duration_h'"),
    (["run", "--env", "style-drif", "--dry-run"], "unknown env 'style-drif'; did you mean 'style-drift'"),
    (["run", "--agent", "grpoo", "--dry-run"], "unknown agent 'grpoo'; did you mean 'grpo'"),
])
def test_an_unknown_key_or_name_suggests_the_closest(capsys, argv, says):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


def test_no_suggestion_when_nothing_is_close():
    from sao_env.errors import did_you_mean

    assert did_you_mean("zzz", ["lr", "clip_eps"]) == ""
    assert did_you_mean("learning_rate", ["lr", "clip_eps", "critic_lr"]) == "; did you mean 'lr'?"


# ----------------------------------------------------------------------------- --version


def test_version_names_the_commit_its_help_promises(capsys):
    from sao_env.provenance import code_key, code_version

    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    code = code_version()
    if code.get("git_commit"):
        assert f"commit {code['git_commit'][:12]}" in out
    assert f"code {code_key(code)}" in out


# ----------------------------------------------------------------------------- no issue numbers


PAGES = ["README.md", "Makefile", "docs", "agents", "bench", "sao_env", "leaderboards"]
FROZEN = {"leaderboards/recipes"}
"""Recipes kept byte for byte as the committed maps made them (a run's hash covers the description)."""
ISSUE = re.compile(r"\bissues? #?\d+|(?<![\w&`])#\d+\b(?![–-]\d)(?! of )", re.IGNORECASE)


def _pages() -> list[Path]:
    files = []
    for item in PAGES:
        path = REPO / item
        found = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in (".md", ".py", ".yaml", ".yml")
                                               or p.name == "grid.json"]
        files += [p for p in found if not any(str(p.relative_to(REPO)).startswith(f) for f in FROZEN)]
    return files


def test_the_projects_pages_do_not_speak_of_issue_numbers():
    hits = []
    for path in _pages():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if ISSUE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:100]}")
    assert hits == []


def test_makefile_and_recipes_do_not_say_three_seed_or_since_an_issue():
    for path in [REPO / "Makefile", *sorted((REPO / "agents").glob("*.yaml"))]:
        text = path.read_text()
        assert "three-seed" not in text and not re.search(r"since issue", text, re.IGNORECASE), path
