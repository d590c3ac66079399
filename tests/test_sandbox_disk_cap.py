"""The working copy's size cap (``Limits.workdir_mb``, issue #50): a run that writes many files past it
is stopped with reason "disk limit" and leaves no more than the cap on the host; a run within it reads
back exactly what it wrote. Under bubblewrap, the rlimits-only fallback, a warm interpreter and Docker.

The cap is a tmpfs mounted over the working copy, so it needs the harness to run as root (as `make
test` does); elsewhere these tests skip with one line.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sao_env.sandbox import Limits, LocalExecutor
from sao_env.sandbox.local import INSTALL_HINT, _bwrap_check
from sao_env.sandbox.workdir import _libc, cap_available, reap_mounts

CAP_MB = 64
FILL = """
for i in range(25):
    with open(f"fill_{i}.bin", "wb") as handle:
        handle.write(b"x" * (8 << 20))
print("wrote 200 MB")
"""
WITHIN = """
import os
os.makedirs("out/deep", exist_ok=True)
with open("out/deep/data.bin", "wb") as handle:
    handle.write(bytes(range(256)) * 4096)
with open("kept.txt", "a") as handle:
    handle.write("appended\\n")
os.remove("gone.txt")
os.symlink("kept.txt", "link")
print("done")
"""
WITHIN_FILES = {"kept.txt": "original\nappended\n", "out/deep/data.bin": bytes(range(256)) * 4096}

BWRAP, BWRAP_DETAIL = _bwrap_check()
pytestmark = pytest.mark.skipif(not cap_available(), reason="the work-dir cap mounts a tmpfs: run as root")


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def _working_copy(tmp_path: Path, script: str) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "prog.py").write_text(script)
    (work / "kept.txt").write_text("original\n")
    (work / "gone.txt").write_text("removed by the run\n")
    return work


def _assert_stopped(result, work: Path) -> None:
    assert result.reason == "disk limit", (result.reason, result.stderr[-300:])
    assert not result.ok and result.returncode != 0
    assert "wrote 200 MB" not in result.stdout
    assert _tree_bytes(work) <= (CAP_MB << 20) + (1 << 20)
    assert not os.path.ismount(work)


def _assert_read_back(result, work: Path) -> None:
    assert result.ok and result.reason is None, (result.reason, result.stderr[-300:])
    assert result.stdout == "done\n"
    for name, content in WITHIN_FILES.items():
        path = work / name
        assert (path.read_bytes() if isinstance(content, bytes) else path.read_text()) == content
    assert not (work / "gone.txt").exists()
    assert os.readlink(work / "link") == "kept.txt"
    assert not os.path.ismount(work)


def _local(kind: str) -> LocalExecutor:
    if kind == "bubblewrap" and BWRAP is None:
        pytest.skip(f"{BWRAP_DETAIL}: {INSTALL_HINT}")
    return LocalExecutor(Limits(workdir_mb=CAP_MB), use_bwrap=kind == "bubblewrap")


@pytest.mark.parametrize("kind", ["bubblewrap", "rlimits-only"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_filling_the_work_dir_stops_at_the_cap(kind, tmp_path):
    executor = _local(kind)
    work = _working_copy(tmp_path, FILL)
    result = executor.run([executor.python, "prog.py"], workdir=work, timeout_s=20)
    _assert_stopped(result, work)
    assert (work / "kept.txt").read_text() == "original\n"


@pytest.mark.parametrize("kind", ["bubblewrap", "rlimits-only"])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_run_within_the_cap_reads_back_exactly(kind, tmp_path):
    executor = _local(kind)
    work = _working_copy(tmp_path, WITHIN)
    _assert_read_back(executor.run([executor.python, "prog.py"], workdir=work, timeout_s=20), work)


def test_a_warm_call_past_the_cap_is_a_disk_limit_and_the_next_call_is_clean():
    if BWRAP is None:
        pytest.skip(f"{BWRAP_DETAIL}: {INSTALL_HINT}")
    from sao_env.sandbox.warm import WarmInterpreter

    warm = WarmInterpreter(LocalExecutor(Limits(workdir_mb=CAP_MB)))
    try:
        filled = warm.run(["prog.py"], {"prog.py": FILL}, timeout_s=20)
        assert filled.reason == "disk limit" and not filled.ok
        listing = warm.run(["prog.py"], {"prog.py": "import os; print(sorted(os.listdir('.')))"}, timeout_s=20)
        assert listing.ok and listing.reason is None and listing.stdout == "['prog.py']\n"
        assert warm.starts == 1
    finally:
        warm.close()


def orphaned_cap(tmp_path: Path) -> Path:
    """A folder under ``tmp_path`` with a capped tmpfs over it whose harness process is gone (as root)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    work = tmp_path / "work"
    work.mkdir()
    source = f"sao-cap:{os.uname().nodename}:{dead.pid}:1".encode()
    assert _libc().mount(source, str(work).encode(), b"tmpfs", 0, b"size=1m") == 0
    return work


def test_a_cap_left_by_a_killed_harness_is_unmounted(tmp_path):
    """A harness killed mid-run leaves its tmpfs over the working copy; the next one removes it."""
    work = orphaned_cap(tmp_path)
    assert os.path.ismount(work)
    assert reap_mounts() >= 1
    assert not os.path.ismount(work)


# --- Docker -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def docker_capped():
    from sao_env.sandbox.docker_exec import DockerExecutor, engine_problem

    problem = engine_problem()
    if problem is not None:
        if os.environ.get("SAO_ENV_DOCKER") == "1":
            pytest.fail(f"an engine was expected (SAO_ENV_DOCKER=1) but none answers: {problem}", pytrace=False)
        pytest.skip(f"no Docker engine reachable ({problem})")
    from docker_support import built_image

    return DockerExecutor(built_image(), limits=Limits(workdir_mb=CAP_MB))


def test_docker_filling_the_work_dir_stops_at_the_cap(docker_capped, tmp_path):
    work = _working_copy(tmp_path, FILL)
    _assert_stopped(docker_capped.run(["python3", "prog.py"], workdir=work, timeout_s=30), work)


def test_docker_run_within_the_cap_reads_back_exactly(docker_capped, tmp_path):
    work = _working_copy(tmp_path, WITHIN)
    _assert_read_back(docker_capped.run(["python3", "prog.py"], workdir=work, timeout_s=30), work)
