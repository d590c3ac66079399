"""When this process may start helpers by ``fork`` rather than ``spawn``.

A forked child starts with its parent's imports (torch and transformers take about 6 s to import
here) and objects, so it starts at once and needs nothing pickled. It is only safe where the
platform supports it well (Linux) and where no other thread runs: a child inherits every lock as it
was at the fork, and a lock held by another thread (a test runner's I/O thread, say) stays held
forever in the child.
"""

from __future__ import annotations

import sys
import threading


def fork_is_safe() -> bool:
    """Linux, and this process runs no thread but the main one."""
    return sys.platform == "linux" and threading.active_count() == 1
