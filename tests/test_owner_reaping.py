"""What a harness process killed mid-run leaves in the temporary folder (its warm servers' two folders, a coding
episode's scratch folder) carries the process's name, and the next harness process to make one of the same kind
removes it (``sandbox.owner``). A suite run used to leave five such folders in /tmp: two warm servers of a
tool-drift run killed with SIGKILL, and the scratch folder of a coding run killed the same way. What a live process
owns, what names another host, and what carries no owner's name stay where they are."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sao_env.sandbox import owner

HARNESS = """
import sys, time
from sao_env.tasks.tool_math import execute_tool_call
result = execute_tool_call("v1", "print(6 * 7)", timeout_s=30)
print(result.stdout.strip(), flush=True)
if sys.argv[1] == "hang":
    time.sleep(600)
"""
"""A harness process that makes one warm tool call (its server's folders), then waits to be killed or exits."""


def _folders_of(pid: int) -> list[Path]:
    return sorted(p for p in Path(tempfile.gettempdir()).iterdir()
                  if p.name.startswith((f"sao-warm-lib-{pid}.", f"sao-warm-run-{pid}.", f"sao-repo-env-{pid}.")))


def _gone_owner() -> str:
    """``PID.START.HOST`` of a process of this host that ran and ended, as a folder's name holds it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    name = f"{child.pid}.{owner.start_time(child.pid)}.{socket.gethostname()}"
    child.kill()
    child.wait()
    return name


def test_the_next_warm_server_removes_the_folders_of_a_killed_harnesss_servers(tmp_path):
    from sao_env.sandbox import warm
    from sao_env.tasks.tool_math import tool_executor

    if not warm.available(tool_executor()):
        pytest.skip("no warm sandbox here (it needs bubblewrap)")
    killed = subprocess.Popen([sys.executable, "-c", HARNESS, "hang"], stdout=subprocess.PIPE, text=True)
    try:
        assert killed.stdout.readline().strip() == "42"
        left = _folders_of(killed.pid)
        start = owner.start_time(killed.pid)
        assert [p.name.rpartition("-")[0] for p in left] == [
            f"sao-warm-lib-{killed.pid}.{start}.{socket.gethostname()}", f"sao-warm-run-{killed.pid}.{start}.{socket.gethostname()}"]
    finally:
        killed.send_signal(signal.SIGKILL)
        killed.wait()
    assert all(p.is_dir() for p in left)  # SIGKILL: nothing of the killed process removed them
    live = owner.owned_tempdir(warm.LIB_PREFIX)  # this test's process: alive
    elsewhere = Path(tempfile.mkdtemp(prefix=f"{warm.LIB_PREFIX}{killed.pid}.{start}.another-host-"))
    unnamed = Path(tempfile.mkdtemp(prefix=warm.RUN_PREFIX))
    try:
        nxt = subprocess.run([sys.executable, "-c", HARNESS, "exit"], capture_output=True, text=True, timeout=120)
        assert nxt.returncode == 0 and nxt.stdout.strip() == "42", nxt.stderr[-2000:]
        assert not any(p.exists() for p in left)
        assert live.is_dir() and elsewhere.is_dir() and unnamed.is_dir()
    finally:
        for folder in (live, elsewhere, unnamed):
            folder.rmdir()


def test_reaping_removes_only_the_named_folders_of_processes_that_are_gone(tmp_path, monkeypatch):
    """The coding episode's scratch folder, reaped by the next episode's; the parse on hand-made names, on a host
    whose name has dashes (as most CI runners' do: the owner's name ends at the last one)."""
    from sao_env.envs import repo_env
    from sao_env.sandbox import workdir

    monkeypatch.setattr(socket, "gethostname", lambda: "ci-runner-7")
    gone = _gone_owner()
    prefix = repo_env.SCRATCH_PREFIX
    orphan = Path(tempfile.mkdtemp(prefix=f"{prefix}{gone}-"))
    (orphan / "sao-forge-run-x" / "pkg").mkdir(parents=True)
    (orphan / "sao-forge-run-x" / "pkg" / "mod.py").write_text("x = 1\n")
    mine = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.{owner.start_time(os.getpid())}.ci-runner-7-"))
    garbage = Path(tempfile.mkdtemp(prefix=f"{prefix}not-an-owner-"))
    link = Path(tempfile.gettempdir()) / f"{prefix}{gone}-link{os.getpid()}"
    link.symlink_to(tmp_path, target_is_directory=True)
    try:
        monkeypatch.setattr(workdir, "_reaped_prefixes", set())
        env = repo_env.RepoEnv()
        scratch = env.scratch()
        assert not orphan.exists()
        assert mine.is_dir() and garbage.is_dir() and link.is_symlink() and tmp_path.is_dir()
        assert scratch.name.startswith(f"{prefix}{os.getpid()}.{owner.start_time(os.getpid())}.ci-runner-7-")
        assert ":" not in str(scratch) and scratch.is_dir()  # a path with a colon cannot be bound into a container
        env.close()
        assert not scratch.exists()
    finally:
        mine.rmdir()
        garbage.rmdir()
        link.unlink()
