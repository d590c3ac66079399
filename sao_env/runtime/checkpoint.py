"""Lossless resume of the ``sim`` backend: atomic, checksummed checkpoints of a run's whole state.

A checkpoint is taken at a clean point of the event loop (between two events, when no request
is waiting to be admitted) and holds everything the rest of the run depends on: the runtime's
attributes (the agent with its policy, critic, optimizers, version, warm-up counter and running
reward statistics; the deployed weights; the scenario and its sources; the task and latency
random generators; the event queue with the learner's pending update and every in-flight
episode; the unplayed requests; the buffer and the blocked list; the admission counters; the
remaining evaluation times), the global random states (python, numpy, torch), the experiment's
running lists (evaluations, rewards, masked fractions) and the byte length of ``metrics.jsonl``,
``evals.jsonl`` and ``episodes.jsonl`` at that point. Resuming restores them, truncates the logs
to those lengths and continues the same event loop, so the three logs end byte-identical to an
uninterrupted run (tests/test_resume.py kills runs with SIGKILL to check it).

On disk: ``<run>/checkpoints/resume/ckpt-<NNNNNN>.pt``, a header line ``SAO-CKPT1 <sha256 of the
body>`` and the body (``torch.save`` of the state). A file is written to a temporary name,
fsynced and renamed, then the folder is fsynced; the last ``KEEP`` are kept. A torn or corrupt
file fails its checksum and the one before it is used. Bodies are pickles: load only
checkpoints your own runs wrote.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

FOLDER = Path("checkpoints") / "resume"
"""Where a run directory keeps its resume checkpoints."""
KEEP = 2
"""Checkpoints kept: the newest and the one before it (the fallback when the newest is corrupt)."""
MAGIC = b"SAO-CKPT1 "
FORMAT = 1

RUNTIME_HOOKS = frozenset({"on_update", "on_episode", "on_eval"})
"""Runtime attributes that are the experiment's callbacks: re-bound on resume, never saved."""


class CorruptCheckpoint(Exception):
    """A checkpoint file that is torn, truncated or altered (its checksum does not match)."""


@dataclass(frozen=True)
class CheckpointEvery:
    """When a run checkpoints: every ``updates`` learner updates and/or every ``sim_minutes``
    simulated minutes, whichever comes first (None turns that trigger off; both None: never)."""

    updates: int | None = 25
    sim_minutes: float | None = None

    def due(self, updates: int, now: float, last_updates: int, last_now: float) -> bool:
        by_updates = self.updates is not None and updates - last_updates >= self.updates
        by_time = self.sim_minutes is not None and now - last_now >= self.sim_minutes * 60
        return by_updates or by_time

    @property
    def enabled(self) -> bool:
        return self.updates is not None or self.sim_minutes is not None

    @classmethod
    def parse(cls, text: str) -> "CheckpointEvery":
        """``25u`` (updates), ``5m`` (simulated minutes), ``25u,5m`` (both) or ``off``."""
        text = text.strip().lower()
        if text in ("off", "never", "0"):
            return cls(updates=None, sim_minutes=None)
        updates, minutes = None, None
        for part in (p.strip() for p in text.split(",") if p.strip()):
            try:
                if part.endswith("u") and int(part[:-1]) > 0:
                    updates = int(part[:-1])
                    continue
                if part.endswith("m") and float(part[:-1]) > 0:
                    minutes = float(part[:-1])
                    continue
            except ValueError:
                pass
            raise ValueError(f"checkpoint interval {text!r}: expected e.g. 25u (updates), 5m (simulated minutes), 25u,5m or off")
        return cls(updates=updates, sim_minutes=minutes)


# -- what is saved -------------------------------------------------------------------------------


def runtime_state(runtime: Any) -> dict[str, Any]:
    """The runtime's attributes but its callbacks; ``itertools.count`` objects as their next value."""
    state = {}
    for key, value in vars(runtime).items():
        if key in RUNTIME_HOOKS:
            continue
        if isinstance(value, itertools.count):
            value = _Count(next(value))
            setattr(runtime, key, itertools.count(value.start))
        state[key] = value
    return state


def restore_runtime(runtime: Any, state: dict[str, Any]) -> None:
    """Overwrite a freshly built runtime's attributes (its callbacks stay) with a saved state."""
    for key, value in state.items():
        setattr(runtime, key, itertools.count(value.start) if isinstance(value, _Count) else value)


@dataclass(frozen=True)
class _Count:
    start: int


def clean_point(runtime: Any) -> bool:
    """True where the loop may be cut: the runtime's next step (its ``_dispatch`` on resume, which
    ``run`` calls first) would start no request, so a resumed loop takes exactly the uninterrupted
    loop's next step. (A request an update unblocked starts at the next event, not here.)"""
    core = runtime.core
    return not (core.free_slots >= runtime.agent.group_size and runtime.state.now < runtime.scenario.duration_s
                and core.admitted())


def rng_states() -> dict[str, Any]:
    """The process-wide random states (python, numpy's legacy global, torch's CPU generator)."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


# -- files ---------------------------------------------------------------------------------------


HEADER_BYTES = len(MAGIC) + 64 + 1
"""The header line's length: the magic, the body's sha256 in hex, a newline."""


class _HashingWriter:
    """The file ``torch.save`` writes the body into: each piece goes to ``fd`` as it comes and into the
    sha256, so that no copy of the body is held in memory (a real model's is gigabytes)."""

    def __init__(self, fd: int):
        self.fd, self.sha = fd, hashlib.sha256()

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.sha.update(view)
        size = len(view)
        while view:
            view = view[os.write(self.fd, view):]
        return size

    def flush(self) -> None:
        pass


def encode(state: dict[str, Any]) -> bytes:
    """Header line (magic and sha256 of the body) followed by the body (``torch.save`` of ``state``): the bytes
    ``write`` streams to its file, in memory."""
    buffer = io.BytesIO()
    torch.save({"format": FORMAT, **state}, buffer)
    body = buffer.getvalue()
    return MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def decode(data: bytes) -> dict[str, Any]:
    """The state of an encoded checkpoint; ``CorruptCheckpoint`` when its header or checksum fails. The body is
    hashed and read in place (a view and an offset, not a copy)."""
    header = data[:HEADER_BYTES]
    if not header.startswith(MAGIC) or not header.endswith(b"\n") or len(header) != HEADER_BYTES:
        raise CorruptCheckpoint("no checkpoint header")
    if hashlib.sha256(memoryview(data)[HEADER_BYTES:]).hexdigest().encode() != header[len(MAGIC):-1]:
        raise CorruptCheckpoint("checksum mismatch (torn or altered file)")
    buffer = io.BytesIO(data)  # shares the bytes' memory until written to
    buffer.seek(HEADER_BYTES)
    state = torch.load(buffer, weights_only=False)
    if state.get("format") != FORMAT:
        raise CorruptCheckpoint(f"unknown checkpoint format {state.get('format')!r}")
    return state


def write(folder: Path, index: int, state: dict[str, Any]) -> Path:
    """Write checkpoint ``index`` atomically (temporary file, fsync, rename, fsync of the folder),
    then delete all but the newest ``KEEP``. An ``OSError`` (full disk, read-only folder) leaves the
    earlier checkpoints as they were."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"ckpt-{index:06d}.pt"
    tmp = folder / f".{path.name}.tmp{os.getpid()}"
    try:
        _write_streamed(tmp, state)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(folder)
    for old in checkpoints(folder)[KEEP:]:
        old.unlink(missing_ok=True)
    return path


def _write_streamed(path: Path, state: dict[str, Any]) -> None:
    """``encode(state)``'s bytes into ``path`` without holding them: a blank header, the body streamed after it
    (``_HashingWriter``), then the header with the body's sha256 written over the blank, and an fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, b" " * HEADER_BYTES)
        body = _HashingWriter(fd)
        torch.save({"format": FORMAT, **state}, body)
        header = MAGIC + body.sha.hexdigest().encode() + b"\n"
        if os.pwrite(fd, header, 0) != HEADER_BYTES:
            raise OSError(f"{path}: short write of the checkpoint's header")
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def checkpoints(folder: Path) -> list[Path]:
    """The folder's checkpoint files, newest first."""
    if not folder.is_dir():
        return []
    return sorted(folder.glob("ckpt-*.pt"), reverse=True)


def index_of(path: Path) -> int:
    return int(path.stem.split("-")[1])


def newest_good(folder: Path) -> Iterator[tuple[Path, dict[str, Any] | None, str]]:
    """Each checkpoint, newest first, as ``(path, state, "")`` or, when it cannot be read,
    ``(path, None, why)``; the caller takes the first whose state it accepts."""
    for path in checkpoints(folder):
        try:
            yield path, decode(path.read_bytes()), ""
        except (CorruptCheckpoint, OSError, EOFError, RuntimeError, ValueError) as err:
            yield path, None, str(err).splitlines()[0] if str(err) else type(err).__name__
