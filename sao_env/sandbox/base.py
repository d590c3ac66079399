"""What every executor shares: the result record, the limits, output capture, the scrubbed env.

Nothing here starts a process; ``local.py`` (bubblewrap or rlimits) and ``docker_exec.py``
(containers) do.
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable


DISK_LIMIT = "disk limit"
"""``ExecResult.reason`` of a run that filled its capped working copy."""


@dataclass(frozen=True)
class ExecResult:
    """The outcome of one sandboxed command.

    ``returncode`` follows ``subprocess``: the exit status, ``-N`` when killed by signal N, and
    ``None`` when the sandbox killed the run on its wall-clock timeout (or could not start it).
    ``reason`` is set when the sandbox, not the program, decided the outcome (or explains it):
    "timeout", "memory limit", "cpu time limit", "file size limit", "disk limit" (the working
    copy filled its ``Limits.workdir_mb``: a failed run whatever its exit status, ``ok`` is False),
    "killed by signal N", "output truncated", "command not found", "sandbox setup failed: ...",
    "sandbox unavailable: ...", "sandbox worker lost" (a warm interpreter's server died during
    the call, see ``warm.py``); ``None`` for an ordinary exit, whatever its status.
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    reason: str | None
    duration_s: float
    truncated: bool

    @property
    def ok(self) -> bool:
        """Exited with status 0 inside its limits (output may still be truncated)."""
        return self.returncode == 0 and not self.timed_out and self.reason != DISK_LIMIT


@dataclass(frozen=True)
class Limits:
    """Resource limits of one run: per process inside the sandbox (rlimits), but for the sizes of
    /tmp and of the working copy (tmpfs), which hold for the run as a whole."""

    cpu_s: int | None = None
    """CPU seconds per process (RLIMIT_CPU); None: ceil(timeout_s) + 1, so never above the wall clock."""
    memory_mb: int = 2048
    """Address space per process in MiB (RLIMIT_AS); an allocation beyond it fails (MemoryError)."""
    fsize_mb: int = 256
    """Largest file a process may write, in MiB (RLIMIT_FSIZE)."""
    nproc: int = 64
    """Processes and threads of the sandbox user (RLIMIT_NPROC): the fork-bomb bound."""
    nofile: int = 256
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    output_bytes: int = 64 * 1024
    """Bytes kept of stdout and of stderr each; the rest is read and discarded (truncated=True)."""
    tmpfs_mb: int = 256
    """Size of the private /tmp and /dev/shm (bubblewrap and Docker only): tmpfs is RAM."""
    workdir_mb: int | None = 256
    """MiB a run may add to its working copy, all files together (and 64 new files or folders per
    MiB): the copy runs on a tmpfs of its own size plus this, so it is RAM while the run lasts.
    Needs the harness to run as root (it mounts the tmpfs); None: no cap."""

    def cpu_seconds(self, timeout_s: float) -> int:
        return self.cpu_s if self.cpu_s is not None else math.ceil(timeout_s) + 1


@runtime_checkable
class Executor(Protocol):
    """Runs one command on a working copy, inside limits, and reports what happened."""

    def run(self, argv: list[str], *, workdir: Path, timeout_s: float,
            env: dict[str, str] | None = None) -> ExecResult:
        """Run ``argv`` with ``workdir`` as its current (and only writable) directory."""
        ...


# --- environment -----------------------------------------------------------------------------

SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|COOKIE|SESSION|^AWS_|^OPENAI_|^ANTHROPIC_|^AZURE_|^GCP_"
    r"|^GOOGLE_|^HF_|^HUGGING|^GITHUB_|^GH_|^WANDB_|^DOCKER_|^SSH_",
    re.IGNORECASE)
"""Variable names that may hold credentials: never passed into a sandbox."""

SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Thread pools count against ``Limits.nproc``; one thread each keeps numpy & co. inside it."""


def sandbox_env(*, path: str, home: str, extra: dict[str, str] | None) -> dict[str, str]:
    """The whole environment of a sandboxed process: nothing is inherited from the host.

    ``extra`` (the caller's) is added last; a name that looks like a credential is refused
    (ValueError), so merging ``os.environ`` into it by mistake fails loudly.
    """
    env = {"PATH": path, "HOME": home, "TMPDIR": "/tmp" if home != "/tmp" else home,
           "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", **SINGLE_THREAD}
    for name, value in (extra or {}).items():
        if SECRET_NAME.search(name):
            raise ValueError(f"refusing to pass {name} into the sandbox: its name looks like a secret")
        env[str(name)] = str(value)
    return env


# --- output capture ---------------------------------------------------------------------------

class Capture:
    """Keeps the first ``limit`` bytes of a stream and a short tail; counts the rest, stores nothing."""

    TAIL = 4096

    def __init__(self, limit: int):
        self.limit = limit
        self.head = bytearray()
        self.tail = b""
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.tail = (self.tail + data)[-self.TAIL:]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        return self.head.decode("utf-8", errors="replace")


# --- why a run ended --------------------------------------------------------------------------

_MEMORY = re.compile(rb"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory", re.IGNORECASE)
_SIGNAL_REASON = {signal.SIGXCPU: "cpu time limit", signal.SIGXFSZ: "file size limit"}


def classify(returncode: int | None, *, timed_out: bool, stderr: Capture, truncated: bool,
             oom_killed: bool = False) -> str | None:
    """The ``ExecResult.reason`` of a finished run (see ExecResult)."""
    if timed_out:
        return "timeout"
    if oom_killed:
        return "memory limit"
    if returncode not in (0, None):
        if _MEMORY.search(stderr.tail) or _MEMORY.search(bytes(stderr.head[-Capture.TAIL:])):
            return "memory limit"
        if b"File too large" in stderr.tail:
            return "file size limit"
        if returncode < 0:
            return _SIGNAL_REASON.get(-returncode, f"killed by signal {-returncode}")
        if returncode == 127 and b"failed to execute" in stderr.tail:
            return "command not found"
    if truncated:
        return "output truncated"
    return None


def at_disk_limit(result: ExecResult) -> ExecResult:
    """``result`` of a run that filled its capped working copy, with reason "disk limit" (a timeout
    or a sandbox failure keeps its reason: it says more)."""
    if result.timed_out or (result.reason or "").startswith("sandbox"):
        return result
    return replace(result, reason=DISK_LIMIT)


def one_line(exc: BaseException | str, width: int = 200) -> str:
    """An exception (or text) as one short line, for UserError messages."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= width else text[: width - 3] + "..."
