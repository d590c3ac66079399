"""Warm interpreters: one sandboxed Python kept running, each call run in a fresh fork of it.

A cold run (``LocalExecutor.run``) pays for a user namespace, bubblewrap's mounts and an
interpreter start-up (plus imports: pytest's are 0.3 s) on every call. A ``WarmInterpreter``
pays them once: it starts ``warm_server.py`` inside the same bubblewrap sandbox, the server
imports the modules it is asked to preload, and each call then runs in a child forked from that
clean state with the call's own CPU-time limit, working files, environment and wall clock; after
it, every process it left is killed and the sandbox's ``/tmp`` and ``/dev/shm`` are emptied. As
root, the working folder is a tmpfs resized per call to its files plus ``Limits.workdir_mb``; a
call that fills it gets reason ``"disk limit"``.
Calls do not see each other: the child's Python state is a copy that dies with it, its working
copy is written fresh per call, and the server cannot be traced or have its descriptors opened
by a child. A call's result depends only on the call (not on what ran before), so a run stays
deterministic; a child that kills the server gets reason ``"sandbox worker lost"`` and the next
call starts a new server.

    warm = WarmInterpreter(LocalExecutor(TOOL_LIMITS), preload=["tools"], library={"tools.py": source})
    result = warm.run(["snippet.py"], {"snippet.py": code}, timeout_s=2)   # as python -I -S snippet.py would

Needs bubblewrap (``available(executor)``): the server relies on its own PID namespace to sweep
leftover processes; with the rlimits-only fallback callers run cold. ``shared_pool`` keeps one
pool of servers per kind for the whole process (one server per concurrent caller).
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sao_env.errors import UserError
from sao_env.sandbox.base import Capture, ExecResult, at_disk_limit, classify, one_line, sandbox_env
from sao_env.sandbox.local import ISOLATED, SANDBOX_UID, LocalExecutor
from sao_env.sandbox.owner import owned_tempdir
from sao_env.sandbox.workdir import hand_over, unmount, cap_available, cap_full, mount_cap, reap_left_behind

SERVER = Path(__file__).with_name("warm_server.py")
SERVER_CPU_S = 7 * 24 * 3600
"""CPU-time limit of the server process itself; each call's child gets its own, from its timeout."""
START_TIMEOUT_S = 60.0
"""Seconds a server may take to start and preload (pytest: about 0.3 s)."""
REPLY_GRACE_S = 10.0
"""Beyond a call's timeout, how long the host waits for the server's answer before killing it."""
LOST = "sandbox worker lost"

_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sao-warm-start")


class SandboxBroken(UserError):
    """A warm interpreter's first server did not start: the machine's sandbox is broken, not the model's
    call (which has not run yet). Raised rather than returned, so that a run stops with one line instead of
    grading every call as the model's failure. A later start that fails (after a call killed the server)
    is returned as the call's ``reason``, as before: the sandbox worked, the call may have broken it."""


def available(executor: LocalExecutor) -> bool:
    """Whether warm interpreters can run under ``executor`` (bubblewrap isolation)."""
    return isinstance(executor, LocalExecutor) and executor.isolation == ISOLATED


class WarmInterpreter:
    """A sandboxed Python server under ``executor``'s isolation and limits; ``run`` forks it per call.

    ``flags`` are the interpreter's (``("-I", "-S")`` as ``run_python``; ``()`` for site-packages
    and ``python -m pytest``'s path rules); ``preload`` names modules imported once at start;
    ``library`` holds module files (name -> source) importable while preloading, bound read-only;
    ``env`` is the server's environment from its start (``PYTHONHASHSEED`` acts only there), a
    call's ``env`` is added to its child's. Thread-safe: calls on one interpreter are serialised
    (a ``WarmPool`` runs them in parallel).
    """

    def __init__(self, executor: LocalExecutor, *, flags: Sequence[str] = ("-I", "-S"),
                 preload: Sequence[str] = (), library: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None):
        if not available(executor):
            raise RuntimeError(f"warm interpreters need bubblewrap; the executor is {executor.isolation}")
        self.executor = executor
        self.flags = tuple(flags)
        self.preload = tuple(preload)
        self.library = dict(library or {})
        self.env = dict(env or {})
        sandbox_env(path="", home="", extra=self.env)  # refuse secrets now
        self.starts = 0
        """Servers started and ready so far (1 unless a call killed one)."""
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._proc: subprocess.Popen | None = None
        self._lib: Path | None = None
        self._run: Path | None = None
        self._capped = False
        self._buffer = b""

    # public -------------------------------------------------------------------------------------

    def run(self, argv: list[str], files: Mapping[str, str], *, timeout_s: float,
            env: Mapping[str, str] | None = None) -> ExecResult:
        """Run ``python FLAGS *argv`` (``["FILE", ...]`` or ``["-m", "MODULE", ...]``) in a fresh
        working copy holding ``files`` (relative path -> text); same result as a cold run."""
        if not argv:
            raise ValueError("empty argv")
        sandbox_env(path="", home="", extra=dict(env or {}))  # refuses secrets
        call_env = {str(name): str(value) for name, value in (env or {}).items()}
        with self._lock:
            started = time.monotonic()
            error = self._ensure_started()
            if error is not None and self.starts == 0:
                raise SandboxBroken(f"the sandbox's interpreter does not start here ({error}); stopping rather "
                                    f"than grade every call as the model's failure")
            if error is not None:
                return ExecResult(None, "", "", False, error, time.monotonic() - started, False)
            assert self._run is not None
            full = False
            if self._capped:
                try:
                    mount_cap(self._run, self._cap_mb, *_files_footprint(files), remount=True)
                except OSError as exc:  # a leftover the host could not remove: start afresh next call
                    self.close_locked()
                    return ExecResult(None, "", "", False, f"sandbox unavailable: {one_line(exc)}",
                                      time.monotonic() - started, False)
            try:
                _write_tree(self._run, files)
                if os.geteuid() == 0:
                    hand_over(self._run, SANDBOX_UID)
                request = {"argv": list(argv), "cwd": str(self._run), "timeout_s": float(timeout_s),
                           "cpu_s": self.executor.limits.cpu_seconds(timeout_s),
                           "env": {"HOME": str(self._run), **call_env}}
                reply = self._exchange(request, timeout_s + REPLY_GRACE_S)
                full = self._capped and cap_full(self._run)
            finally:
                _empty(self._run)
            if not isinstance(reply, dict):  # the server died, or hung past the grace period
                self.close_locked()
                timed_out = reply == "deadline"
                return ExecResult(None, "", "", timed_out, "timeout" if timed_out else LOST,
                                  time.monotonic() - started, False)
            result = _result(reply, self.executor.limits.output_bytes, time.monotonic() - started)
            return at_disk_limit(result) if full else result

    def close(self) -> None:
        """Stop the server (the next ``run`` starts a new one)."""
        with self._lock:
            self.close_locked()

    def close_locked(self) -> None:
        if self._pid != os.getpid():
            return
        if self._proc is not None:
            _kill(self._proc)
            self._proc = None
        if self._capped and self._run is not None:
            try:
                unmount(self._run)
            except OSError:
                pass
        for folder in (self._lib, self._run):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
        self._lib = self._run = None
        self._capped = False
        self._buffer = b""

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __del__(self) -> None:
        try:
            self.close_locked()
        except Exception:  # noqa: BLE001, S110 - interpreter shutdown
            pass

    # internals ----------------------------------------------------------------------------------

    def _ensure_started(self) -> str | None:
        """Start the server unless it runs; None, or the ``reason`` of a failed start."""
        if self._pid != os.getpid():  # a forked copy of the harness: the server is the parent's
            self._proc, self._lib, self._run, self._buffer, self._pid = None, None, None, b"", os.getpid()
            self._capped = False
        if self.alive:
            return None
        self.close_locked()
        reap_left_behind(LIB_PREFIX, RUN_PREFIX)
        self._lib = owned_tempdir(LIB_PREFIX)
        self._run = owned_tempdir(RUN_PREFIX)
        os.chmod(self._lib, 0o755)
        try:
            self._cap_run()
        except OSError as exc:
            self.close_locked()
            return f"sandbox unavailable: {one_line(exc)}"
        for name, text in {**self.library, SERVER.name: SERVER.read_text(encoding="utf-8")}.items():
            (self._lib / name).write_text(text, encoding="utf-8")
            os.chmod(self._lib / name, 0o644)
        inner = LocalExecutor(self.executor.limits, network=self.executor.network,
                              ro_paths=(*self.executor.ro_paths, self._lib))
        stderr = tempfile.TemporaryFile()
        try:
            # started from a thread that lives as long as the process: bubblewrap's --die-with-parent
            # follows the thread that started it, and a caller's worker thread may end before the server
            self._proc = _SPAWNER.submit(inner.start, [inner.python, *self.flags, str(self._lib / SERVER.name)],
                                         workdir=self._run, cpu_s=SERVER_CPU_S, env=self.env, stderr=stderr).result()
        except OSError as exc:
            stderr.close()
            self.close_locked()
            return f"sandbox unavailable: {one_line(exc)}"
        setup = {"preload": list(self.preload), "library": str(self._lib),
                 "output_bytes": self.executor.limits.output_bytes, "keep": [str(self._lib), str(self._run)]}
        reply = self._exchange(setup, START_TIMEOUT_S)
        if not isinstance(reply, dict) or not reply.get("ready"):
            stderr.seek(0)
            detail = reply.get("error") if isinstance(reply, dict) else (
                stderr.read().decode(errors="replace") or f"no answer ({reply})")
            stderr.close()
            self.close_locked()
            return f"sandbox setup failed: {one_line(detail)}"
        stderr.close()
        self.starts += 1
        return None

    @property
    def _cap_mb(self) -> int:
        return self.executor.limits.workdir_mb or 0

    def _cap_run(self) -> None:
        """Put the server's working folder on a tmpfs (resized per call to its files plus ``workdir_mb``)
        before the sandbox binds it, where the working copy can be capped here."""
        if self._cap_mb and cap_available():
            os.chmod(self._run, 0o755)
            mount_cap(self._run, self._cap_mb)
            self._capped = True

    def _exchange(self, message: dict, timeout_s: float) -> dict | str:
        """Send one line, read one line back: the reply, or ``"eof"`` (the server died, or answered
        garbage) or ``"deadline"`` (no answer within ``timeout_s``)."""
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(message).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            return "eof"
        deadline = time.monotonic() + timeout_s
        fd = proc.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not selector.select(timeout=remaining):
                    return "deadline"
                data = os.read(fd, 1 << 20)
                if not data:
                    return "eof"
                self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError:
            return "eof"
        return reply if isinstance(reply, dict) else "eof"


class WarmPool:
    """Warm interpreters made by ``factory``, one per concurrent caller; ``run`` as on one."""

    def __init__(self, factory: Callable[[], WarmInterpreter]):
        self.factory = factory
        self._idle: list[WarmInterpreter] = []
        self._all: list[WarmInterpreter] = []
        self._lock = threading.Lock()

    def run(self, argv: list[str], files: Mapping[str, str], *, timeout_s: float,
            env: Mapping[str, str] | None = None) -> ExecResult:
        with self._lock:
            interpreter = self._idle.pop() if self._idle else None
        if interpreter is None:
            interpreter = self.factory()
            with self._lock:
                self._all.append(interpreter)
        try:
            return interpreter.run(argv, files, timeout_s=timeout_s, env=env)
        finally:
            with self._lock:
                self._idle.append(interpreter)

    @property
    def starts(self) -> int:
        """Servers started by this pool's interpreters."""
        with self._lock:
            return sum(i.starts for i in self._all)

    def close(self) -> None:
        with self._lock:
            interpreters, self._idle, self._all = list(self._all), [], []
        for interpreter in interpreters:
            interpreter.close()


LIB_PREFIX, RUN_PREFIX = "sao-warm-lib-", "sao-warm-run-"
"""A server's two folders in the temporary folder (``owner.owned_tempdir``): its library and its working folder."""


_pools: dict[Hashable, WarmPool] = {}
_pools_lock = threading.Lock()


def shared_pool(key: Hashable, factory: Callable[[], WarmInterpreter]) -> WarmPool:
    """The process-wide pool for ``key`` (made with ``factory`` on first use; closed at exit)."""
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = WarmPool(factory)
        return pool


def _after_fork_in_child() -> None:
    """A forked harness starts its own servers (and its own starter thread, which fork does not copy)."""
    global _SPAWNER, _pools_lock
    _SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sao-warm-start")
    _pools_lock = threading.Lock()
    _pools.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def close_all() -> None:
    """Stop every shared warm interpreter (their sandboxes die with this process anyway)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


# --- helpers ------------------------------------------------------------------------------------

def _result(reply: dict, limit: int, duration_s: float) -> ExecResult:
    out, err = _capture(reply["stdout"], limit), _capture(reply["stderr"], limit)
    returncode, timed_out = reply["returncode"], bool(reply["timed_out"])
    truncated = out.truncated or err.truncated
    reason = classify(returncode, timed_out=timed_out, stderr=err, truncated=truncated)
    return ExecResult(returncode, out.text(), err.text(), timed_out, reason, duration_s, truncated)


def _capture(fields: list, limit: int) -> Capture:
    head, tail, total = fields
    capture = Capture(limit)
    capture.head = bytearray(base64.b64decode(head))
    capture.tail = base64.b64decode(tail)
    capture.total = int(total)
    return capture


def _files_footprint(files: Mapping[str, str]) -> tuple[int, int]:
    """(bytes, entries) ``files`` take on a tmpfs, folders counted generously."""
    page = os.sysconf("SC_PAGE_SIZE")
    size = sum(max(1, -(-len(text.encode("utf-8")) // page)) * page for text in files.values())
    return size, 2 * len(files)


def _write_tree(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = (root / rel).resolve()
        if root.resolve() not in path.parents:
            raise ValueError(f"file path {rel!r} leaves the working copy")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _empty(folder: Path) -> None:
    """Remove everything inside ``folder`` (whatever a call did to modes), keep the folder."""
    def force(function, path, _exc):
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            function(path)
        except OSError:
            pass

    try:
        os.chmod(folder, 0o755)
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, onerror=force)
        else:
            try:
                os.unlink(entry.path)
            except OSError:
                pass


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    proc.wait()
