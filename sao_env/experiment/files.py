"""A run directory's files: atomic writes, flushed JSON-lines logs, one-line errors for failed writes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import time
from pathlib import Path
from typing import Iterator

from sao_env.errors import UserError

LOGS = ("metrics.jsonl", "evals.jsonl", "episodes.jsonl")
"""The deterministic logs; a checkpoint records the length of each."""

@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn a failed write (full disk, read-only or unwritable folder) into a one-line UserError naming the path."""
    try:
        yield
    except OSError as err:
        raise UserError(f"cannot write {err.filename or path}: {err.strerror or err}") from None


def write_failure_reason(err: Exception) -> str:
    """One line for a failed write that a library reports as its own error type: the system's words where it
    names an OS error (safetensors: ``Error while serializing: I/O error: No space left on device (os error
    28)`` -> ``No space left on device``, as the run's other writes say it), else its first line."""
    text = str(err).strip()
    code = re.search(r"\(os error (\d+)\)", text)
    if code:
        return os.strerror(int(code.group(1)))
    return (text.splitlines() or [type(err).__name__])[0][:160]


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it: readers see all or nothing."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with writing(path):
        try:
            tmp.write_text(text)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path for ``path``'s new content, renamed onto ``path`` when the block ends without an
    error: a reader, or a kill midway, finds the old file or the new one, never a part of one.

    The temporary file has ``path``'s name (a writer that picks the format by suffix, matplotlib, works) in
    a hidden folder of this process beside it (``.writing-<pid>``), where no ``*.csv`` of the folder sees it."""
    path = Path(path)
    tmp = path.parent / f".writing-{os.getpid()}" / path.name
    with writing(path):
        tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield tmp
        with writing(path):
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            tmp.parent.rmdir()


class JsonLines:
    def __init__(self, path: Path, *, resume_at: int | None = None):
        """A new, empty log; or, with ``resume_at``, the existing one cut to that many bytes."""
        self.path = path
        with writing(path):
            if resume_at is None:
                self.file = path.open("wb")
            else:
                self.file = path.open("r+b")
                self.file.truncate(resume_at)
                self.file.seek(resume_at)

    def write(self, record: dict) -> None:
        """One record per line, flushed at once, so that a running or interrupted run can be read."""
        with writing(self.path):
            self.file.write((json.dumps(record, sort_keys=True, allow_nan=True) + "\n").encode())
            self.file.flush()

    @property
    def offset(self) -> int:
        """Bytes written so far (every record is flushed)."""
        return self.file.tell()

    def close(self) -> None:
        with writing(self.path):
            self.file.close()


STALE_OUTPUTS = ("summary.json", "timings.json", "splits.json", "adaptation.png", "tensorboard", "wandb")
"""Outputs of an earlier run in the same directory, removed when a run starts (summary.json first)."""


@contextlib.contextmanager
def _releasing_on_error(lock: "RunLock") -> Iterator[None]:
    try:
        yield
    except BaseException:
        lock.release()
        raise


class RunBusy(UserError):
    """Another live process holds the run directory's lock (its owner is named in the message)."""


class RunLock:
    """One writer per run directory: an advisory lock (``fcntl.flock``) on ``<run>/.lock``.

    The file holds the owner's PID, host and start time, so a refusal can name who writes. The
    kernel drops the lock when its owner dies (even by SIGKILL), so a stale lock of a dead process is
    taken over at once. ``release`` removes the file while it still holds the lock, so a finished run
    keeps no ``.lock``; a process that was waiting on the removed file finds, once it holds it, that the
    path no longer names it, and locks the path anew (so no two processes ever hold locks on two files
    of one path). Where ``fcntl`` is missing (Windows) runs are not locked.
    """

    NAME = ".lock"

    def __init__(self, folder: Path):
        self.path = Path(folder) / self.NAME
        self.fd: int | None = None

    def owner(self) -> str:
        """``pid P on host H since T`` as the holder wrote it ("another process" if unreadable)."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            text = ""
        return text or "another process"

    def acquire(self, *, wait: bool = False) -> None:
        """Take the lock; when another process holds it, ``RunBusy`` (``wait=False``) or block until it is free."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover  (not POSIX)
            return
        while True:
            with writing(self.path):
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)  # read-only: a held lock never keeps a disk busy
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not wait:
                    os.close(fd)
                    raise RunBusy(f"run directory {self.path.parent} is being written by {self.owner()}; "
                                  f"wait for it to finish or use another --out") from None
                fcntl.flock(fd, fcntl.LOCK_EX)
            if self._names(fd):
                break
            os.close(fd)  # its holder removed the file on release: lock the path as it is now
        self.fd = fd
        with writing(self.path), _releasing_on_error(self):
            self.path.write_text(f"pid {os.getpid()} on host {socket.gethostname()} since "
                                 f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n")

    def held_by_another(self) -> bool:
        """True when a live process other than this one holds the lock now (a probe; takes nothing)."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover
            return False
        if self.fd is not None or not self.path.is_file():
            return False
        fd = os.open(self.path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def _names(self, fd: int) -> bool:
        """True when the lock file's path still names the file open as ``fd``."""
        try:
            here = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        if self.fd is not None:
            try:
                if self._names(self.fd):
                    self.path.unlink()  # while still held: a waiter then sees the path gone and locks anew
            except OSError:
                pass  # a read-only or vanished folder: the flock is what matters
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = None

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@contextlib.contextmanager
def flocked(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock on ``lock_path`` (flock), held for the block: one process builds a cache entry
    (a warm start, a converted model), the others wait and then read it."""
    with Path(lock_path).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
