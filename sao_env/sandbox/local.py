"""Run untrusted commands on this machine: bubblewrap isolation, or a reported rlimits-only fallback.

With bubblewrap (``bwrap``) a run gets its own user, PID, network, IPC, UTS and mount namespaces;
the host's /usr, /bin, /lib*, a few files of /etc and the Python prefixes are bound read-only;
the working copy is the only writable host directory; /tmp and /dev/shm are private, size-capped
tmpfs; the command runs as uid/gid 65534 with no capabilities, under rlimits applied inside the
sandbox (``prlimit``), with a scrubbed environment.

Why the user namespace is built by hand when the harness runs as root: the kernel never applies
RLIMIT_NPROC to processes of the host's root user, and plain ``bwrap --unshare-user --uid 65534``
maps the sandbox user onto the caller's uid (root), so a fork bomb would not be bounded. As root
we create a fresh user namespace per run whose uid 65534 is the host's uid 65534 (plus root, for
bwrap's mounts), let bwrap set up the mounts as namespace root, and drop to 65534 with ``setpriv``
before the command starts. The working copy is handed to uid 65534 (chown) before each run.
Not as root, ``bwrap --unshare-user`` maps the sandbox user onto the caller's (non-root) uid,
where the limit holds already. In both cases the process count is per user namespace, so
concurrent runs never share it.

The working copy itself (a fresh copy per episode, its hand-over to the sandbox user, its size cap) is
``sao_env.sandbox.workdir``'s.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from sao_env.errors import UserError
from sao_env.sandbox.base import Capture, ExecResult, Limits, classify, one_line, sandbox_env
from sao_env.sandbox.workdir import WorkdirCap, cap_available, checked_workdir, hand_over

INSTALL_HINT = "apt-get install -y bubblewrap"
"""How to get bwrap on Debian/Ubuntu (dnf/pacman/apk: package ``bubblewrap`` too)."""

FALLBACK = "rlimits-only (no filesystem/network isolation: install bubblewrap)"
ISOLATED = "bubblewrap"

SANDBOX_UID = 65534
"""The uid/gid sandboxed code runs as (``nobody`` on most systems)."""

_SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group",
        "nsswitch.conf", "hosts", "host.conf", "gai.conf", "localtime", "protocols", "services",
        "mime.types", "ssl", "ca-certificates", "python3", f"python3.{sys.version_info.minor}")
_ETC_NETWORK = ("resolv.conf",)


# --- what this machine offers ------------------------------------------------------------------

def _tool(name: str) -> str | None:
    for folder in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        if os.access(f"{folder}/{name}", os.X_OK):
            return f"{folder}/{name}"
    return shutil.which(name)


@lru_cache(maxsize=1)
def _bwrap_check() -> tuple[str | None, str]:
    """(path to a working bwrap or None, one line saying why or what)."""
    bwrap = _tool("bwrap")
    if bwrap is None:
        return None, "bubblewrap not installed"
    missing = [t for t in ("prlimit",) + (("setpriv", "unshare") if os.geteuid() == 0 else ())
               if _tool(t) is None]
    if missing:
        return None, f"bubblewrap found but util-linux tools missing: {', '.join(missing)}"
    probe = LocalExecutor._probe(bwrap)
    if probe is not None:
        return None, f"bubblewrap unusable here ({probe})"
    version = subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip()
    return bwrap, version or "bubblewrap"


def sandbox_status() -> str:
    """One line: which isolation ``LocalExecutor()`` gets on this machine (and Docker's SDK)."""
    bwrap, detail = _bwrap_check()
    docker_sdk = "docker SDK installed" if importlib.util.find_spec("docker") else "docker SDK not installed"
    cap = "work dir capped (tmpfs)" if cap_available() else "work dir not capped (needs root)"
    if bwrap:
        user = "as root: per-run user namespace" if os.geteuid() == 0 else "unprivileged user namespace"
        return (f"sandbox: {ISOLATED} ({detail} at {bwrap}; {user}, uid {SANDBOX_UID}); "
                f"{cap}; {docker_sdk}")
    return f"sandbox: {FALLBACK} - {detail}: {INSTALL_HINT}; {cap}; {docker_sdk}"


_warned = False
_warn_lock = threading.Lock()


def _warn_fallback(detail: str) -> None:
    global _warned
    with _warn_lock:
        if _warned:
            return
        _warned = True
    warnings.warn(f"sandbox: {detail}; LocalExecutor falls back to {FALLBACK}: {INSTALL_HINT}",
                  RuntimeWarning, stacklevel=3)


# --- the executor -----------------------------------------------------------------------------

class LocalExecutor:
    """Runs commands on this machine, isolated by bubblewrap when it works, else rlimits only.

    ``isolation`` says which: "bubblewrap" or the rlimits-only fallback line. Stateless between
    runs (safe to share across threads): each run gets its own namespaces and tmpfs.
    """

    python: str = os.path.join(os.path.realpath(os.path.dirname(sys.executable)), os.path.basename(sys.executable))
    """The interpreter a tool should run inside this sandbox: the venv's, in its folder's real path. Python
    keeps the path it was started by (``/work/run/../venv/bin/python``), and ``/work/run`` is not in the
    sandbox; the file name is kept, a venv's link to its base interpreter."""

    def __init__(self, limits: Limits = Limits(), *, network: bool = False, use_bwrap: bool = True,
                 require_isolation: bool = False, ro_paths: Sequence[Path | str] = ()):
        """``use_bwrap=False`` forces the fallback; ``require_isolation`` raises instead of falling
        back; ``ro_paths`` are extra host paths bound read-only (ignored by the fallback)."""
        self.limits = limits
        self.network = network
        self.ro_paths = tuple(Path(p) for p in ro_paths)
        bwrap, detail = _bwrap_check() if use_bwrap else (None, "bubblewrap disabled (use_bwrap=False)")
        if bwrap is None and require_isolation:
            raise UserError(f"sandbox isolation required but {detail}: {INSTALL_HINT}")
        self._bwrap = bwrap
        self.isolation = ISOLATED if bwrap else FALLBACK
        if bwrap is None and use_bwrap:
            _warn_fallback(detail)

    def __repr__(self) -> str:
        return f"LocalExecutor(isolation={self.isolation!r}, network={self.network}, limits={self.limits})"

    # public ---------------------------------------------------------------------------------

    def run(self, argv: list[str], *, workdir: Path, timeout_s: float,
            env: dict[str, str] | None = None) -> ExecResult:
        """Run ``argv`` in ``workdir`` (its only writable host directory) within the limits."""
        started = time.monotonic()
        home: Path | None = None
        if not argv:
            raise ValueError("empty argv")
        workdir = checked_workdir(workdir)
        sandbox_env(path="", home="", extra=env)  # refuse secrets before making anything
        owner = SANDBOX_UID if self._bwrap and os.geteuid() == 0 else None  # handed over as it is copied
        cap = WorkdirCap(workdir, self.limits.workdir_mb, owner)
        try:
            try:
                cap.open()
                if not self._bwrap:
                    home = Path(tempfile.mkdtemp(prefix="sao-home-"))
                    (home / "tmp").mkdir()
                proc = self._popen(argv, workdir, self.limits.cpu_seconds(timeout_s), env, home, subprocess.DEVNULL)
            except OSError as exc:
                return ExecResult(None, "", "", False, f"sandbox unavailable: {one_line(exc)}",
                                  time.monotonic() - started, False)
            return cap.judge(self._collect(proc, started, timeout_s))
        finally:
            cap.close()
            if home is not None:
                shutil.rmtree(home, ignore_errors=True)

    def start(self, argv: list[str], *, workdir: Path, cpu_s: int, env: dict[str, str] | None = None,
              stderr: Any = subprocess.DEVNULL) -> subprocess.Popen:
        """Start ``argv`` in the bubblewrap sandbox and return at once, stdin and stdout piped: a
        long-lived process that the caller talks to, waits for and kills (``warm.WarmInterpreter``).
        ``cpu_s`` is its CPU-time limit; the other limits are the executor's. Raises RuntimeError
        without bubblewrap (the fallback has no PID namespace to contain a long-lived process) and
        OSError when it cannot be started."""
        if not self._bwrap:
            raise RuntimeError(f"a long-lived sandboxed process needs bubblewrap; this executor is {self.isolation}")
        return self._popen(argv, workdir, cpu_s, env, None, subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr)

    # internals ------------------------------------------------------------------------------

    def _popen(self, argv: list[str], workdir: Path, cpu_s: int, env: dict[str, str] | None, home: Path | None,
               stdin: Any, stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE) -> subprocess.Popen:
        """Start ``argv`` in ``workdir`` under the limits: in bubblewrap, else with ``home`` as the
        fallback's HOME (and its ``tmp`` as TMPDIR)."""
        if not argv:
            raise ValueError("empty argv")
        workdir = checked_workdir(workdir)
        userns_fd = -1
        try:
            if self._bwrap:
                child_env = sandbox_env(path=_sandbox_path(), home=str(workdir), extra=env)
                if os.geteuid() == 0:
                    hand_over(workdir, SANDBOX_UID)
                    userns_fd = _new_userns(SANDBOX_UID)
                cmd = self._bwrap_argv(self._bwrap, workdir, userns_fd) + self._limit_argv(argv, cpu_s)
            else:
                assert home is not None
                child_env = sandbox_env(path=_sandbox_path(), home=str(home), extra=env)
                child_env["TMPDIR"] = str(home / "tmp")
                cmd = self._limit_argv(argv, cpu_s)
            return subprocess.Popen(
                cmd, cwd=workdir, env=child_env, stdin=stdin, stdout=stdout, stderr=stderr,
                start_new_session=True, close_fds=True, pass_fds=(userns_fd,) if userns_fd >= 0 else ())
        finally:
            if userns_fd >= 0:
                os.close(userns_fd)

    def _limit_argv(self, argv: list[str], cpu_s: int) -> list[str]:
        lim = self.limits
        wanted = {"cpu": (resource.RLIMIT_CPU, cpu_s),
                  "as": (resource.RLIMIT_AS, lim.memory_mb << 20),
                  "fsize": (resource.RLIMIT_FSIZE, lim.fsize_mb << 20),
                  "nproc": (resource.RLIMIT_NPROC, lim.nproc),
                  "nofile": (resource.RLIMIT_NOFILE, lim.nofile),
                  "core": (resource.RLIMIT_CORE, 0)}
        prefix = [_tool("prlimit") or "prlimit"]
        for name, (which, value) in wanted.items():
            hard = resource.getrlimit(which)[1]  # inherited: a limit can only go down
            prefix.append(f"--{name}={value if hard == resource.RLIM_INFINITY else min(value, hard)}")
        prefix.append("--")
        if self._bwrap and os.geteuid() == 0:
            # bwrap ran as root of the run's own user namespace: become the sandbox user, no caps
            prefix = [_tool("setpriv") or "setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
                      "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
                      "--"] + prefix
        return prefix + list(argv)

    def _bwrap_argv(self, bwrap: str, workdir: Path, userns_fd: int) -> list[str]:
        tmpfs = str(self.limits.tmpfs_mb << 20)
        cmd = [bwrap, "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if userns_fd >= 0:  # root: the namespace was made by _new_userns; bwrap is its root
            cmd += ["--userns", str(userns_fd), "--uid", "0", "--gid", "0", "--unshare-pid",
                    "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
            if not self.network:
                cmd.append("--unshare-net")
        else:
            cmd += ["--unshare-all", "--unshare-user", "--uid", str(SANDBOX_UID),
                    "--gid", str(SANDBOX_UID)]
            if self.network:
                cmd.append("--share-net")
        cmd += ["--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", tmpfs, "--tmpfs", "/dev/shm",
                "--perms", "1777", "--size", tmpfs, "--tmpfs", "/tmp"]
        bound: list[str] = []
        for name in _SYSTEM_DIRS:
            path = f"/{name}"
            if os.path.islink(path):
                cmd += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                cmd += ["--ro-bind", path, path]
                bound.append(path)
        cmd += ["--perms", "0755", "--dir", "/etc"]
        for name in _ETC + (_ETC_NETWORK if self.network else ()):
            path = f"/etc/{name}"
            if os.path.exists(path):
                cmd += ["--ro-bind", path, path]
        made: set[str] = set()
        read_only: list[str] = []
        for path in _prefixes() + [str(p.resolve()) for p in self.ro_paths]:
            if _under(path, bound) or not os.path.exists(path):
                continue
            cmd += _mkdirs(path, bound, made) + ["--ro-bind", path, path]
            bound.append(path)
            read_only.append(path)
        cmd += _mkdirs(str(workdir), bound, made) + ["--bind", str(workdir), str(workdir)]
        for path in read_only:  # a venv (or ro_path) inside the working copy stays read-only
            if _under(path, [str(workdir)]) and path != str(workdir):
                cmd += ["--ro-bind", path, path]
        return cmd + ["--chdir", str(workdir), "--remount-ro", "/", "--"]

    def _collect(self, proc: subprocess.Popen, started: float, timeout_s: float) -> ExecResult:
        out, err = Capture(self.limits.output_bytes), Capture(self.limits.output_bytes)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ, out)
        sel.register(proc.stderr, selectors.EVENT_READ, err)
        deadline = started + timeout_s
        timed_out = False
        exited_at: float | None = None
        try:
            while sel.get_map():
                now = time.monotonic()
                if now >= deadline:
                    timed_out = proc.poll() is None
                    break
                if proc.poll() is not None:
                    exited_at = exited_at or now
                    if now - exited_at > 0.5:  # a leftover child holds the pipes open
                        break
                for key, _ in sel.select(timeout=min(0.1, deadline - now)):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        key.data.feed(data)
                    else:
                        sel.unregister(key.fileobj)
            if not timed_out and proc.poll() is None:  # it closed its pipes but runs on
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    timed_out = True
        finally:
            _kill_group(proc)
            sel.close()
            proc.stdout.close()
            proc.stderr.close()
        returncode = proc.wait()
        if timed_out:
            returncode = None
        elif self._bwrap and returncode > 128 and returncode - 128 < signal.NSIG:
            returncode = 128 - returncode  # bwrap reports "killed by N" as 128+N
        truncated = out.truncated or err.truncated
        reason = classify(returncode, timed_out=timed_out, stderr=err, truncated=truncated)
        if returncode == 1 and err.head.startswith((b"bwrap:", b"prlimit:", b"setpriv:")):
            reason = f"sandbox setup failed: {one_line(err.head.decode(errors='replace'))}"
        return ExecResult(returncode, out.text(), err.text(), timed_out, reason,
                          time.monotonic() - started, truncated)

    @staticmethod
    def _probe(bwrap: str) -> str | None:
        """Run ``true`` the way real runs go; None when it works, else the first error line."""
        probe = LocalExecutor(use_bwrap=False)  # then point it at bwrap without re-probing
        probe._bwrap, probe.isolation = bwrap, ISOLATED
        with tempfile.TemporaryDirectory(prefix="sao-probe-") as tmp:
            os.chmod(tmp, 0o755)
            result = probe.run([_tool("true") or "true"], workdir=Path(tmp), timeout_s=10)
        if result.returncode == 0:
            return None
        return one_line(result.stderr or result.reason or f"exit status {result.returncode}")


# --- helpers ----------------------------------------------------------------------------------

def _sandbox_path() -> str:
    folders = [os.path.dirname(LocalExecutor.python), "/usr/local/bin", "/usr/bin", "/bin"]
    return ":".join(dict.fromkeys(folders))


def _prefixes() -> list[str]:
    """Python's install folders (venv and base), as given and resolved, without duplicates."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))]
    out: list[str] = []
    for path in paths:
        for candidate in (os.path.abspath(path), os.path.realpath(path)):
            if candidate not in out and candidate != "/":
                out.append(candidate)
    return out


def _under(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _mkdirs(path: str, bound: list[str], made: set[str]) -> list[str]:
    """``--dir`` ops (mode 0755) for the parents of a mount point not yet in the sandbox."""
    ops: list[str] = []
    parents = [str(p) for p in reversed(Path(path).parents) if str(p) != "/"]
    for parent in parents:
        if parent in made or _under(parent, bound) or parent in ("/tmp", "/etc", "/dev", "/proc"):
            continue
        made.add(parent)
        ops += ["--perms", "0755", "--dir", parent]
    return ops


def _new_userns(uid: int) -> int:
    """A fresh user namespace (fd) mapping root and ``uid`` onto themselves; needs root.

    A short-lived ``unshare --user sleep`` creates it; we write its maps (root may map any ids)
    and keep only an fd, which bwrap joins with ``--userns``.
    """
    holder = subprocess.Popen([_tool("unshare") or "unshare", "--user", "--", _tool("sleep") or "sleep", "30"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, close_fds=True)
    try:
        mine = os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + 5
        while True:
            try:
                if os.readlink(f"/proc/{holder.pid}/ns/user") != mine:
                    break
            except OSError:
                pass
            if holder.poll() is not None or time.monotonic() > deadline:
                raise OSError("could not create a user namespace (unshare --user failed)")
            time.sleep(0.0005)
        mapping = f"0 0 1\n{uid} {uid} 1\n"
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{holder.pid}/{name}", "w") as handle:
                handle.write(mapping)
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group (bwrap's death takes its PID namespace with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
