"""A watchdog that ends a local Ray cluster's processes when the driver that started them dies.

``ray.init()`` without an address starts the cluster as the driver's descendants. Its head processes
(GCS, raylet) share the driver's fate, but the agents they start (``DashboardAgent``,
``RuntimeEnvAgent``) outlived a driver killed with SIGKILL by about a minute and its rollout actors by
about two seconds (measured on Ray 2.60, docs/runtime.md). ``Reaper`` runs this file as a child of
the driver, with only the standard library: every ``PERIOD`` seconds it records the driver's
descendants (pid and start time, read from ``/proc``); when the driver dies (its pipe to the reaper
closes without the word ``release``, or its pid is gone) it sends SIGKILL to every recorded process
that is still the same process. A driver that shuts its cluster down itself releases the reaper first.

Linux only (``/proc``); elsewhere ``Reaper`` does nothing.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys

PERIOD = 0.25
"""Seconds between two records of the driver's descendants (and two checks that it lives)."""


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot; tells a pid's reuse apart), None if gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == b"Z" else int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """Every live descendant of ``root`` as ``{pid: start time}``."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        for pid in children.get(todo.pop(), []):
            started = start_time(pid)
            if started is not None and pid not in found:
                found[pid] = started
                todo.append(pid)
    return found


def watch(driver: int) -> None:
    """Record ``driver``'s descendants until it releases the reaper or dies; on its death kill them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C or SIGTERM of the process group is the driver's to handle
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    me, born = os.getpid(), start_time(driver)
    seen: dict[int, int] = {}
    while True:
        ready, _, _ = select.select([sys.stdin.buffer], [], [], PERIOD)
        if ready:
            line = sys.stdin.buffer.readline()
            if line.strip() == b"release":
                return
            if not line:
                break
            continue
        if born is None or start_time(driver) != born:
            break
        seen.update(descendants(driver))
        seen.pop(me, None)
    for pid, started in seen.items():
        if start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class Reaper:
    """The driver's side: starts the watchdog (``watch(os.getpid())``) and releases it on a clean shutdown."""

    def __init__(self):
        self.process = None
        if sys.platform.startswith("linux"):
            self.process = subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), str(os.getpid())],
                                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def release(self) -> None:
        """The driver ended its cluster itself: the watchdog exits without killing anything."""
        if self.process is None:
            return
        try:
            self.process.stdin.write(b"release\n")
            self.process.stdin.close()
        except OSError:
            pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.process = None


if __name__ == "__main__":
    watch(int(sys.argv[1]))
