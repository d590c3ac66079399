"""Hostile programs, and the outcome class a sandbox must give each (docs/sandbox.md, "Probes").

    from sao_env.sandbox.probes import PROBES, PROBE_LIMITS, Bait, run_probe
    with Bait() as bait:
        outcome = run_probe(executor, PROBES["network"], bait)   # -> Outcome("no network", ...)

Every probe is a Python script run with the executor's interpreter (``-I -S``) in a fresh working
copy; its outcome is read from the result and from the host afterwards (did the loopback listener
get a connection, is a planted secret in the output, does a file outside the working copy exist,
is a process left). ``expected`` is the class a sandbox passes with; ``python -m
sao_env.sandbox.probes`` prints the table for the sandboxes this machine has.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
import textwrap
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sao_env.sandbox.base import ExecResult, Limits

PROBE_LIMITS = Limits(memory_mb=256, nproc=32, fsize_mb=16, tmpfs_mb=16)
"""Small limits, so that each probe ends in about a second."""


class Bait:
    """What a hostile program would go for on the host: a loopback listener, a secret file outside the
    working copy, a secret in the harness's environment, and host paths it must not create."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:12]
        self.number = str(uuid.uuid4().int)[:9]
        """A unique ``sleep`` argument (``3600.<number>``) to find a left process by."""
        self.secret = f"probe-secret-{uuid.uuid4().hex}"
        self.env_name = f"SAO_PROBE_PRIVATE_{self.tag.upper()}"
        self.root = Path(tempfile.mkdtemp(prefix="sao-probe-host-"))
        self.secret_file = self.root / "secret.txt"
        self.listener: socket.socket | None = None

    def __enter__(self) -> "Bait":
        self.secret_file.write_text(self.secret)
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.setblocking(False)
        os.environ[self.env_name] = self.secret
        return self

    def __exit__(self, *exc: object) -> None:
        os.environ.pop(self.env_name, None)
        if self.listener is not None:
            self.listener.close()
        shutil.rmtree(self.root, ignore_errors=True)
        for path in self.write_targets():
            if not path.startswith(str(self.root)):
                try:
                    os.unlink(path)
                except OSError:
                    pass

    @property
    def port(self) -> int:
        assert self.listener is not None
        return self.listener.getsockname()[1]

    def reached(self) -> bool:
        """Whether anything connected to the host's loopback listener."""
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
            conn.close()
            return True
        except BlockingIOError:
            return False

    def write_targets(self) -> list[str]:
        repo = Path(__file__).resolve().parents[2]
        return [str(self.root / f"escape_{self.tag}"), f"/root/escape_{self.tag}", f"/usr/escape_{self.tag}",
                f"/escape_{self.tag}", str(repo / f"escape_{self.tag}"), f"{sys.prefix}/escape_{self.tag}"]


@dataclass(frozen=True)
class Outcome:
    cls: str
    """The outcome class (compared across sandboxes)."""
    detail: str
    """What the run reported: exit status, reason, the telling line."""


@dataclass(frozen=True)
class Probe:
    name: str
    what: str
    script: Callable[[Bait, Limits], str]
    judge: Callable[[ExecResult, Bait, Limits], str]
    expected: str
    timeout_s: float = 5.0
    env: Callable[[Bait], dict[str, str]] = field(default=lambda bait: {})


def _detail(result: ExecResult) -> str:
    lines = [line for line in (result.stdout + "\n" + result.stderr).splitlines() if line.strip()]
    last = lines[-1].strip()[:100] if lines else ""
    status = "timeout" if result.timed_out else f"exit {result.returncode}"
    return f"{status}, reason {result.reason or '-'}" + (f": {last}" if last else "")


# --- the probes ------------------------------------------------------------------------------------

def _network(bait: Bait, limits: Limits) -> str:
    return f"""
        import socket
        for host, port in (("127.0.0.1", {bait.port}), ("1.1.1.1", 53), ("10.0.2.2", 80)):
            try:
                socket.create_connection((host, port), timeout=1).close()
                print("connected", host)
            except OSError as exc:
                print("refused", host, type(exc).__name__)
        try:
            socket.getaddrinfo("deb.debian.org", 80)
            print("resolved")
        except OSError as exc:
            print("no dns", type(exc).__name__)
    """


def _judge_network(result: ExecResult, bait: Bait, limits: Limits) -> str:
    if bait.reached() or "connected" in result.stdout or "resolved" in result.stdout:
        return "network reached"
    return "no network" if result.ok else "error"


def _fork_bomb(bait: Bait, limits: Limits) -> str:
    return """
        import os, time
        for _ in range(9):  # 2**9 processes at most, even with no limit at all
            try:
                os.fork()
            except OSError as exc:
                print("fork refused:", exc.strerror, flush=True)
        time.sleep(0.5)
    """


def _judge_fork_bomb(result: ExecResult, bait: Bait, limits: Limits) -> str:
    return "forks refused at the process limit" if "fork refused" in result.stdout else "unbounded"


def _disk_fill(bait: Bait, limits: Limits) -> str:
    return f"""
        chunk = b"x" * (1 << 20)
        with open("fill.bin", "wb") as handle:
            for _ in range({2 * limits.fsize_mb + 8}):
                handle.write(chunk)
        print("wrote everything")
    """


def _judge_disk_fill(result: ExecResult, bait: Bait, limits: Limits) -> str:
    return "file size limit" if result.reason == "file size limit" else f"unbounded ({result.reason})"


def _tmp_fill(bait: Bait, limits: Limits) -> str:
    return f"""
        import errno
        chunk = b"x" * (1 << 20)
        for i in range({limits.tmpfs_mb + 8}):
            try:
                with open(f"/tmp/fill_{{i}}", "wb") as handle:
                    handle.write(chunk)
            except OSError as exc:
                print("tmp full:", errno.errorcode.get(exc.errno), "after", i, "MiB")
                break
        else:
            print("wrote everything")
    """


def _judge_tmp_fill(result: ExecResult, bait: Bait, limits: Limits) -> str:
    return "tmp full at its size" if "tmp full: ENOSPC" in result.stdout else "unbounded"


def _memory(bait: Bait, limits: Limits) -> str:
    return f"""
        blob = bytearray({4 * limits.memory_mb} * 1024 * 1024)
        print("allocated", len(blob))
    """


def _judge_memory(result: ExecResult, bait: Bait, limits: Limits) -> str:
    return "memory limit" if result.reason == "memory limit" and "allocated" not in result.stdout else "unbounded"


def _read_host(bait: Bait, limits: Limits) -> str:
    return f"""
        import os
        print(sorted(os.environ.items()))
        for path in ({str(bait.secret_file)!r}, "/proc/{os.getpid()}/environ", "/proc/1/environ", "/etc/shadow"):
            try:
                with open(path, "rb") as handle:
                    print(path, handle.read()[:2000])
            except OSError as exc:
                print(path, "unreadable", type(exc).__name__)
        print("/root/.ssh:", "there" if os.path.exists("/root/.ssh") else "absent",
              "- the secret file:", "there" if os.path.exists({str(bait.secret_file)!r}) else "absent")
    """


def _judge_read_host(result: ExecResult, bait: Bait, limits: Limits) -> str:
    text = result.stdout + result.stderr
    if bait.secret in text:
        return "host secrets read"
    return "nothing of the host read" if result.ok else "error"


def _write_outside(bait: Bait, limits: Limits) -> str:
    return f"""
        for path in {bait.write_targets()!r} + ["/tmp/inside_{bait.tag}"]:
            try:
                with open(path, "w") as handle:
                    handle.write("escaped")
                print("wrote", path)
            except OSError as exc:
                print("refused", path, type(exc).__name__)
    """


def _judge_write_outside(result: ExecResult, bait: Bait, limits: Limits) -> str:
    if any(os.path.exists(path) for path in bait.write_targets()):
        return "host written"
    if not result.ok or f"wrote /tmp/inside_{bait.tag}" not in result.stdout:
        return "error"
    return "only the work dir and a private /tmp"


def _sleep(bait: Bait, limits: Limits) -> str:
    return f"""
        import subprocess, time
        subprocess.Popen(["sleep", "3600.{bait.number}"], start_new_session=True)  # a daemon, own session
        print("daemon started", flush=True)
        time.sleep(3600)
    """


def _judge_sleep(result: ExecResult, bait: Bait, limits: Limits) -> str:
    deadline = time.monotonic() + 5
    while _processes_with(f"3600.{bait.number}") and time.monotonic() < deadline:
        time.sleep(0.05)
    if _processes_with(f"3600.{bait.number}"):
        return "a process outlived the run"
    if "daemon started" not in result.stdout:
        return "error"
    if not result.timed_out or result.reason != "timeout" or result.duration_s > 1.5 + 10:
        return "not stopped"
    return "killed at the timeout, nothing left"


def _processes_with(marker: str) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    count += marker.encode() in handle.read()
            except OSError:
                pass
    return count


PROBES: dict[str, Probe] = {p.name: p for p in (
    Probe("network", "connect to the host's loopback, a public address and the gateway; resolve a name",
          _network, _judge_network, "no network"),
    Probe("fork bomb", "fork 9 times over (up to 512 processes)", _fork_bomb, _judge_fork_bomb,
          "forks refused at the process limit"),
    Probe("disk fill", "write one file of twice the file-size limit into the work dir", _disk_fill,
          _judge_disk_fill, "file size limit", timeout_s=10.0),
    Probe("tmp fill", "fill /tmp with 1 MiB files", _tmp_fill, _judge_tmp_fill, "tmp full at its size"),
    Probe("memory", "allocate and touch 4x the memory limit", _memory, _judge_memory, "memory limit",
          timeout_s=10.0),
    Probe("read the host", "read a secret file outside the work dir, the harness's environment and "
          "/proc/<harness>/environ, /etc/shadow", _read_host, _judge_read_host, "nothing of the host read"),
    Probe("write outside", "write into /, /usr, /root, the repository, the venv and the work dir's parent; "
          "and /tmp", _write_outside, _judge_write_outside, "only the work dir and a private /tmp"),
    Probe("sleep past the timeout", "sleep an hour (and leave a daemon in its own session) under a 1.5 s "
          "timeout", _sleep, _judge_sleep, "killed at the timeout, nothing left", timeout_s=1.5),
)}


HOW: dict[str, dict[str, str]] = {
    "network": {"bubblewrap": "own network namespace (no interface up)",
                "docker": "network mode none (the container's own loopback only)"},
    "fork bomb": {"bubblewrap": "RLIMIT_NPROC of uid 65534 in the run's own user namespace",
                  "docker": "pids cgroup (pids_limit = nproc)"},
    "disk fill": {"bubblewrap": "RLIMIT_FSIZE", "docker": "ulimit fsize"},
    "tmp fill": {"bubblewrap": "/tmp a private tmpfs of tmpfs_mb", "docker": "/tmp a private tmpfs of tmpfs_mb"},
    "memory": {"bubblewrap": "RLIMIT_AS per process: the allocation fails",
               "docker": "memory cgroup without swap: the OOM killer"},
    "read the host": {"bubblewrap": "only /usr, /bin, /lib*, a few /etc files and Python's prefixes bound; "
                                    "own PID namespace; scrubbed environment",
                      "docker": "the image's files only; own PID namespace; scrubbed environment"},
    "write outside": {"bubblewrap": "read-only root tmpfs and binds; the work dir the only writable host folder",
                      "docker": "read-only root file system; the work dir the only bind mount"},
    "sleep past the timeout": {"bubblewrap": "process group killed; the PID namespace dies with bwrap",
                               "docker": "container killed, then removed"},
}
"""How each sandbox produces the outcome (the probe table's column)."""


def run_probe(executor, probe: Probe, bait: Bait) -> Outcome:
    """Run ``probe`` with ``executor`` in a fresh working copy under the bait's folder; its outcome."""
    limits: Limits = executor.limits
    work = Path(tempfile.mkdtemp(prefix="work-", dir=bait.root))
    script = work / f"probe_{bait.tag}.py"
    script.write_text(textwrap.dedent(probe.script(bait, limits)))
    try:
        result = executor.run([getattr(executor, "python", "python3"), "-I", "-S", script.name], workdir=work,
                              timeout_s=probe.timeout_s, env=probe.env(bait))
        return Outcome(probe.judge(result, bait, limits), _detail(result))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    """Print the probe table (Markdown) for bubblewrap and, where an engine answers, Docker."""
    from sao_env.sandbox import LocalExecutor, docker_sandbox
    from sao_env.sandbox.docker_exec import engine_problem

    executors = {"bubblewrap": LocalExecutor(PROBE_LIMITS)}
    if engine_problem() is None:
        executors["docker"] = docker_sandbox(PROBE_LIMITS)
    print("| probe | sandbox | outcome | how | what the run reported |")
    print("|---|---|---|---|---|")
    for probe in PROBES.values():
        for name, executor in executors.items():
            with Bait() as bait:
                outcome = run_probe(executor, probe, bait)
            shown = outcome.cls if outcome.cls == probe.expected else f"**{outcome.cls}** (expected {probe.expected})"
            print(f"| {probe.name} | {name} | {shown} | {HOW[probe.name][name]} | {outcome.detail.replace('|', '/')} |")


if __name__ == "__main__":
    main()
