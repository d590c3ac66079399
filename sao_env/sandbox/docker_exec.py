"""Run untrusted commands in Docker containers (the sandbox image, SWE-bench images, any image with a shell).

The docker SDK is imported when a ``DockerExecutor`` is constructed, never at package import.
Every container it creates carries the labels ``sao-env.sandbox`` and ``sao-env.owner``
(host, pid and start time of the harness process); constructing the first executor of a process
removes the labelled containers whose owner process is gone (a harness killed mid-episode leaves
its container running; the next start reaps it). ``reap()`` does the same on demand.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from sao_env.errors import UserError, install_command
from sao_env.sandbox.base import Capture, ExecResult, Limits, classify, one_line, sandbox_env
from sao_env.sandbox.owner import orphaned, owner_name

_READ_GRACE_S = 5.0
"""How long after the timeout we still wait for the output stream before giving up on it."""

LABEL = "sao-env.sandbox"
OWNER = "sao-env.owner"
SANDBOX_USER = "65534:65534"
"""The user a container's command runs as when the harness is root (``nobody``); otherwise the caller's ids."""
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_reaped: set[str] = set()
_reap_lock = threading.Lock()


def owner_labels() -> dict[str, str]:
    """The labels that mark a container as this process's: reaped once the process is gone."""
    return {LABEL: "1", OWNER: owner_name()}


def reap(client: Any) -> int:
    """Remove every labelled container whose owner process (on this host) is gone; how many. The list
    inspects each container it names: one removed meanwhile (by its own run, or another reaper) is
    passed over, not the end of the pass."""
    removed = 0
    for container in client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True):
        owner = (container.labels or {}).get(OWNER, "")
        if orphaned(owner):
            try:
                container.remove(force=True)
                removed += 1
            except Exception:  # noqa: BLE001 - removed by someone else meanwhile
                pass
    return removed


def _reap_once(client: Any) -> None:
    key = str(getattr(getattr(client, "api", None), "base_url", id(client)))
    with _reap_lock:
        if key in _reaped:
            return
        _reaped.add(key)
    try:
        reap(client)
    except Exception:  # noqa: BLE001 - reaping is housekeeping: never stop a run for it
        pass


def engine_problem() -> str | None:
    """None when a Docker engine answers a ping, else why not (one line)."""
    try:
        import docker
    except ImportError:
        return f"the docker SDK is not installed ({install_command('swe')})"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        client.close()
    except Exception as exc:  # noqa: BLE001
        return one_line(exc, 160)
    return None


class DockerExecutor:
    """``run`` starts a fresh container per command with ``workdir`` bind-mounted at ``mount``;
    ``exec_in`` runs a command inside an existing container (a SWE-bench instance's).

    Limits: memory (``mem_limit``, default ``Limits.memory_mb``, no swap), processes
    (``Limits.nproc`` as the pids cgroup limit), CPUs (``cpus``), open files / file size / CPU time /
    core as ulimits, a read-only root file system with a size-capped /tmp tmpfs (and /dev/shm), the
    working copy on a tmpfs capped at ``Limits.workdir_mb`` more than it holds (as root, see ``WorkdirCap``),
    all capabilities dropped, no-new-privileges, no network unless asked, the wall clock (the
    container is killed). The command runs as uid/gid 65534 when the harness is root (the working
    copy is handed to it first, as under bubblewrap), else as the caller's ids. Output is capped
    like ``LocalExecutor``'s.
    """

    python: str = "python3"
    """The interpreter a tool should name inside the image."""
    shared: bool = False
    """True for ``docker_sandbox``'s process-wide executors: a run's output depends on the run alone, so
    callers may remember it (tool calls)."""

    def __init__(self, image: str, *, mem_limit: str | None = None, network_disabled: bool = True,
                 limits: Limits = Limits(), cpus: float = 1.0, mount: str = "/work",
                 user: str | None = None, client: Any = None):
        try:
            import docker
        except ImportError:
            raise UserError(f"the Docker executor needs the docker SDK: {install_command('swe')}") from None
        try:
            self._client = client if client is not None else docker.from_env(timeout=30)
            self._client.ping()
        except Exception as exc:  # noqa: BLE001 - any failure to reach the engine is the same news
            raise UserError(f"no Docker engine reachable ({one_line(exc)}): the Docker executor needs one") from None
        self._docker = docker
        self.image = image
        self.mem_limit = mem_limit or f"{limits.memory_mb}m"
        self.network_disabled = network_disabled
        self.limits = limits
        self.cpus = cpus
        self.mount = mount
        self.user = user if user is not None else (SANDBOX_USER if os.geteuid() == 0 else f"{os.getuid()}:{os.getgid()}")
        self.isolation = f"docker ({image})"
        _reap_once(self._client)

    def __repr__(self) -> str:
        return f"DockerExecutor(image={self.image!r}, mem_limit={self.mem_limit!r}, limits={self.limits})"

    @property
    def _hands_over(self) -> bool:
        """The working copy is handed to the sandbox user (root harness, default user)."""
        return os.geteuid() == 0 and self.user == SANDBOX_USER

    def run(self, argv: list[str], *, workdir: Path, timeout_s: float,
            env: dict[str, str] | None = None) -> ExecResult:
        """Run ``argv`` in a new container of ``image``; ``workdir`` is mounted read-write at ``mount``."""
        from sao_env.sandbox.local import SANDBOX_UID
        from sao_env.sandbox.workdir import WorkdirCap, checked_workdir

        started = time.monotonic()
        workdir = checked_workdir(workdir)
        environment = sandbox_env(path=PATH, home=self.mount, extra=env)
        cap = WorkdirCap(workdir, self.limits.workdir_mb, SANDBOX_UID if self._hands_over else None)
        try:
            try:
                cap.open()
            except OSError as exc:
                return ExecResult(None, "", "", False, f"sandbox unavailable: {one_line(exc)}",
                                  time.monotonic() - started, False)
            return cap.judge(self._run_container(argv, workdir, timeout_s, environment, started))
        finally:
            cap.close()

    def _run_container(self, argv: list[str], workdir: Path, timeout_s: float, environment: dict[str, str],
                       started: float) -> ExecResult:
        """One container of ``argv`` on ``workdir`` (checked, capped), removed afterwards."""
        lim = self.limits
        if self._hands_over:
            from sao_env.sandbox.local import SANDBOX_UID
            from sao_env.sandbox.workdir import hand_over

            hand_over(workdir, SANDBOX_UID)
        ulimit = self._docker.types.Ulimit
        cpu_s = lim.cpu_seconds(timeout_s)
        try:
            container = self._client.containers.create(
                self.image, command=list(argv), working_dir=self.mount, labels=owner_labels(),
                volumes={str(workdir): {"bind": self.mount, "mode": "rw"}}, environment=environment,
                network_mode="none" if self.network_disabled else None, mem_limit=self.mem_limit,
                memswap_limit=self.mem_limit, pids_limit=lim.nproc, nano_cpus=int(self.cpus * 1e9),
                ulimits=[ulimit(name="nofile", soft=lim.nofile, hard=lim.nofile),
                         ulimit(name="fsize", soft=lim.fsize_mb << 20, hard=lim.fsize_mb << 20),
                         ulimit(name="cpu", soft=cpu_s, hard=cpu_s),
                         ulimit(name="core", soft=0, hard=0)],
                cap_drop=["ALL"], security_opt=["no-new-privileges"], read_only=True,
                tmpfs={"/tmp": f"rw,nosuid,nodev,size={lim.tmpfs_mb}m"}, shm_size=f"{lim.tmpfs_mb}m",
                user=self.user, hostname="sandbox",
                log_config=self._docker.types.LogConfig(type="json-file", config={"max-size": "1m"}),
                stdin_open=False, tty=False, detach=True)
        except Exception as exc:  # noqa: BLE001 - ImageNotFound, APIError: the sandbox, not the program
            return ExecResult(None, "", "", False, f"sandbox unavailable: {one_line(exc)}",
                              time.monotonic() - started, False)
        out, err = Capture(lim.output_bytes), Capture(lim.output_bytes)
        timed_out, returncode, oom = False, None, False
        try:
            stream = container.attach(stdout=True, stderr=True, stream=True, demux=True, logs=True)
            reader = threading.Thread(target=_drain, args=(stream, out, err), daemon=True)
            reader.start()
            container.start()
            deadline = time.monotonic() + timeout_s
            try:
                returncode = container.wait(timeout=timeout_s)["StatusCode"]
            except Exception:  # requests' ReadTimeout/ConnectionError: the wall clock ran out
                timed_out = time.monotonic() >= deadline - 0.05
                if not timed_out:
                    raise
                container.kill()
            reader.join(_READ_GRACE_S)
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        except Exception as exc:  # noqa: BLE001 - the engine failed us mid-run
            if not timed_out:
                return ExecResult(None, out.text(), err.text(), False, f"sandbox setup failed: {one_line(exc)}",
                                  time.monotonic() - started, out.truncated or err.truncated)
        finally:
            try:
                container.remove(force=True)
            except Exception:  # noqa: BLE001 - gone already; reaping covers the rest
                pass
        if timed_out:
            returncode = None
        elif returncode is not None and returncode > 128:
            returncode = 128 - returncode  # the shell convention 128+N: killed by signal N
        truncated = out.truncated or err.truncated
        reason = classify(returncode, timed_out=timed_out, stderr=err, truncated=truncated, oom_killed=oom)
        return ExecResult(returncode, out.text(), err.text(), timed_out, reason,
                          time.monotonic() - started, truncated)

    def exec_in(self, container: Any, argv: list[str], *, timeout_s: float, workdir: str | None = None,
                env: dict[str, str] | None = None, user: str | None = None) -> ExecResult:
        """Run ``argv`` inside an existing, running container (object, id or name).

        The container's own limits apply (set when it was created). Docker cannot kill an exec'd
        process, so the command is wrapped in coreutils ``timeout`` inside the image (TERM at
        ``timeout_s``, KILL 2 s later); exit status 124 or 137 after the deadline is a timeout.
        ``env`` is added to the container's environment (credential-looking names refused).
        """
        started = time.monotonic()
        api = self._client.api
        cid = container if isinstance(container, str) else container.id
        cmd = ["timeout", "--kill-after=2", f"{timeout_s:g}s", *argv]
        exec_id = api.exec_create(cid, cmd, stdout=True, stderr=True, workdir=workdir,
                                  environment=_checked(env), user=user or "")["Id"]
        out, err = Capture(self.limits.output_bytes), Capture(self.limits.output_bytes)
        stream = api.exec_start(exec_id, stream=True, demux=True)
        reader = threading.Thread(target=_drain, args=(stream, out, err), daemon=True)
        reader.start()
        reader.join(timeout_s + 2 + _READ_GRACE_S)
        returncode = api.exec_inspect(exec_id).get("ExitCode")
        elapsed = time.monotonic() - started
        timed_out = reader.is_alive() or (returncode in (124, 137) and elapsed >= timeout_s)
        if timed_out:
            returncode = None
        elif returncode is not None and returncode > 128:
            returncode = 128 - returncode
        truncated = out.truncated or err.truncated
        reason = classify(returncode, timed_out=timed_out, stderr=err, truncated=truncated)
        return ExecResult(returncode, out.text(), err.text(), timed_out, reason, elapsed, truncated)


def _drain(stream: Any, out: Capture, err: Capture) -> None:
    """Read a demultiplexed docker stream of (stdout, stderr) chunks into two captures."""
    try:
        for chunk_out, chunk_err in stream:
            if chunk_out:
                out.feed(chunk_out)
            if chunk_err:
                err.feed(chunk_err)
    except Exception:  # noqa: BLE001 - the stream ends with the container, however it ends
        pass


def _checked(env: dict[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    full = sandbox_env(path="", home="", extra=env)
    return {name: full[name] for name in env}
