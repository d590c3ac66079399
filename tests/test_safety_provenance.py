"""The code version ignores the harness's own outputs: writing a board, a plot or a run directory
into a checkout leaves ``code_key`` as it was, while an edit of the code changes it."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest

from sao_env import provenance
from sao_env.provenance import code_key


def _git(root, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """A fresh clone of this checkout's HEAD, standing in for the checkout ``code_version`` reads."""
    if shutil.which("git") is None or not (provenance.SOURCE_ROOT / ".git").exists():
        pytest.skip("not running from a git checkout")
    root = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", "--depth", "1", f"file://{provenance.SOURCE_ROOT}", str(root)],
                   check=True, capture_output=True)
    monkeypatch.setattr(provenance, "SOURCE_ROOT", root)
    provenance.code_version.cache_clear()
    yield root
    provenance.code_version.cache_clear()


def _key(root) -> str:
    provenance.code_version.cache_clear()
    return code_key(provenance.code_version())


def test_writing_boards_plots_and_runs_leaves_the_code_key(clone):
    head = _git(clone, "rev-parse", "HEAD").strip()
    assert _key(clone) == head[:12]
    board = clone / "leaderboards" / "style-drift.md"
    assert _git(clone, "ls-files", "leaderboards/style-drift.md").strip()  # a committed board
    board.write_text("| agent | auc |\n| sao | 0.5 |\n")  # a cut run's board replaces it
    (clone / "leaderboards" / "style-drift.png").write_bytes(b"\x89PNG not the committed plot")
    (clone / "leaderboards" / "README.md").unlink()
    (clone / "runs" / "style-drift" / "sao" / "seed0").mkdir(parents=True)
    (clone / "runs" / "style-drift" / "sao" / "seed0" / "summary.json").write_text("{}\n")
    (clone / "results" / "benchmarks").mkdir(parents=True)
    (clone / "results" / "benchmarks" / "summary.json").write_text("{}\n")
    assert "leaderboards/style-drift.md" in _git(clone, "status", "--porcelain")  # the tree is dirty ...
    code = provenance.code_version()
    assert code == {"git_commit": head, "dirty": False, "diff_sha256": None, "sao_env": code["sao_env"]}
    assert _key(clone) == head[:12]  # ... but not its code


def test_an_edit_of_the_code_beside_a_board_changes_the_key_by_the_code_diff_alone(clone):
    head = _git(clone, "rev-parse", "HEAD").strip()
    source = clone / "sao_env" / "errors.py"
    source.write_text(source.read_text() + "# an edit\n")
    code_only = _git(clone, "diff", "HEAD", "--binary", "--", "sao_env")
    key = _key(clone)
    assert key == f"{head[:12]}+dirty.{hashlib.sha256(code_only.encode()).hexdigest()[:8]}"
    (clone / "leaderboards" / "style-drift.md").write_text("rewritten\n")
    assert _key(clone) == key  # the board adds nothing to the diff that names the code
