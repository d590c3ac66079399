"""Which harness process owns a container, a mount or a temporary folder, and whether that process is gone.

A process is named by ``HOST:PID:START`` (its start time in clock ticks since boot), so that a pid used again by
another process does not pass for the owner. What a harness killed mid-run leaves behind carries that name (a
container's label, a capped working copy's mount source, a temporary folder's name), and the next harness
process to start one of the same kind removes it: ``docker_exec.reap``, ``workdir.reap_mounts`` and
``reap_tempdirs`` here. What names a process of another host, or no process, is left alone.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def owner_name() -> str:
    """This process's name: ``HOST:PID:START``."""
    return f"{socket.gethostname()}:{os.getpid()}:{start_time(os.getpid())}"


def orphaned(owner: str) -> bool:
    """``owner`` names a process of this host that no longer runs."""
    try:
        host, pid, started = owner.rsplit(":", 2)
        pid_number = int(pid)
    except ValueError:
        return False
    if host != socket.gethostname():
        return False
    return start_time(pid_number) != started


def owned_tempdir(prefix: str) -> Path:
    """A new folder in the temporary folder, named ``PREFIX`` + ``PID.START.HOST`` of this process + ``-`` + a random
    part, that ``reap_tempdirs(PREFIX)`` removes once this process is gone (killed before it could remove it
    itself). No colon in the name: a path with one cannot be bound into a container, nor stand in a search path."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}.{start_time(os.getpid())}.{socket.gethostname()}-"))


def folder_owner(name: str, prefix: str) -> str | None:
    """The ``HOST:PID:START`` that a folder named by ``owned_tempdir(prefix)`` carries, else None."""
    if not name.startswith(prefix):
        return None
    pid, _, rest = name[len(prefix):].rpartition("-")[0].partition(".")
    started, _, host = rest.partition(".")
    return f"{host}:{pid}:{started}" if pid.isdigit() and started.isdigit() else None


def reap_tempdirs(prefix: str) -> int:
    """Remove the folders ``owned_tempdir(prefix)`` made for processes of this host that are gone; how many.
    A folder without an owner's name (made another way, or by an older version) is left alone."""
    removed = 0
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return 0
    for entry in entries:
        owner = folder_owner(entry.name, prefix)
        if owner is not None and entry.is_dir(follow_symlinks=False) and orphaned(owner):
            shutil.rmtree(entry.path, ignore_errors=True)
            removed += not os.path.lexists(entry.path)
    return removed
