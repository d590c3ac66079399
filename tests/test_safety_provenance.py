"""The code key is the content of what a run executes: writing a board, a plot or a run directory
into a checkout, or editing its tests and docs, leaves ``code_key`` as it was; an edit of the package or a spec changes it."""

from __future__ import annotations

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
    key = _key(clone)
    assert key == f"src.{provenance.source_digest(clone)[:12]}"
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
    assert {k: code[k] for k in ("git_commit", "dirty", "diff_sha256")} == \
        {"git_commit": head, "dirty": False, "diff_sha256": None}
    assert _key(clone) == key  # ... but not its code


def test_tests_docs_and_benches_leave_the_key_and_an_edit_of_the_package_changes_it(clone):
    key = _key(clone)
    for other in ("tests/conftest.py", "README.md", "docs/metrics.md", "bench/bench_runtime.py"):
        (clone / other).write_text((clone / other).read_text() + "# an edit\n")
    assert _git(clone, "status", "--porcelain")  # a dirty checkout, and a commit of it would be another commit ...
    assert _key(clone) == key  # ... that runs the same code: finished runs stay reusable
    source = clone / "sao_env" / "errors.py"
    source.write_text(source.read_text() + "# an edit\n")
    edited = _key(clone)
    assert edited != key and edited == f"src.{provenance.source_digest(clone)[:12]}"
    spec = clone / "agents" / "sao.yaml"
    spec.write_text(spec.read_text() + "# an edit\n")
    assert _key(clone) not in (key, edited)
