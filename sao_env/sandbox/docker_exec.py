"""Run untrusted commands in Docker containers (SWE-bench images, or any image with a shell).

The docker SDK is imported when a ``DockerExecutor`` is constructed, never at package import.
Only the "no engine" path is tested in CI (no engine there); the rest follows the SDK's
documented calls.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from sao_env.errors import UserError
from sao_env.sandbox.base import Capture, ExecResult, Limits, classify, one_line, sandbox_env

_READ_GRACE_S = 5.0
"""How long after the timeout we still wait for the output stream before giving up on it."""


class DockerExecutor:
    """``run`` starts a fresh container per command with ``workdir`` bind-mounted at ``mount``;
    ``exec_in`` runs a command inside an existing container (a SWE-bench instance's).

    Limits: memory (``mem_limit``, no swap), processes (``Limits.nproc`` as the pids cgroup
    limit), CPUs (``cpus``), open files / file size / core as ulimits, a size-capped /tmp
    tmpfs, all capabilities dropped, no-new-privileges, no network unless asked. The wall-clock
    timeout kills the container; output is capped like ``LocalExecutor``'s.
    """

    python: str = "python3"
    """The interpreter a tool should name inside the image."""

    def __init__(self, image: str, *, mem_limit: str = "2g", network_disabled: bool = True,
                 limits: Limits = Limits(), cpus: float = 1.0, mount: str = "/work",
                 user: str | None = None, client: Any = None):
        try:
            import docker
        except ImportError:
            raise UserError("the Docker executor needs the docker SDK: pip install 'sao-env[swe]'") from None
        try:
            self._client = client if client is not None else docker.from_env(timeout=10)
            self._client.ping()
        except Exception as exc:  # noqa: BLE001 - any failure to reach the engine is the same news
            raise UserError(f"no Docker engine reachable ({one_line(exc)}): the Docker executor needs one") from None
        self._docker = docker
        self.image = image
        self.mem_limit = mem_limit
        self.network_disabled = network_disabled
        self.limits = limits
        self.cpus = cpus
        self.mount = mount
        self.user = user

    def run(self, argv: list[str], *, workdir: Path, timeout_s: float,
            env: dict[str, str] | None = None) -> ExecResult:
        """Run ``argv`` in a new container of ``image``; ``workdir`` is mounted read-write at ``mount``.

        Files the container writes belong to the image's user (often root) on the host.
        """
        started = time.monotonic()
        lim = self.limits
        ulimit = self._docker.types.Ulimit
        container = self._client.containers.create(
            self.image, command=list(argv), working_dir=self.mount,
            volumes={str(Path(workdir).resolve()): {"bind": self.mount, "mode": "rw"}},
            environment=sandbox_env(path="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                    home=self.mount, extra=env),
            network_disabled=self.network_disabled, mem_limit=self.mem_limit,
            memswap_limit=self.mem_limit, pids_limit=lim.nproc, nano_cpus=int(self.cpus * 1e9),
            ulimits=[ulimit(name="nofile", soft=lim.nofile, hard=lim.nofile),
                     ulimit(name="fsize", soft=lim.fsize_mb << 20, hard=lim.fsize_mb << 20),
                     ulimit(name="cpu", soft=lim.cpu_seconds(timeout_s), hard=lim.cpu_seconds(timeout_s)),
                     ulimit(name="core", soft=0, hard=0)],
            cap_drop=["ALL"], security_opt=["no-new-privileges"],
            tmpfs={"/tmp": f"rw,nosuid,size={lim.tmpfs_mb}m"}, user=self.user,
            log_config=self._docker.types.LogConfig(type="json-file", config={"max-size": "1m"}),
            stdin_open=False, tty=False, detach=True)
        try:
            stream = container.attach(stdout=True, stderr=True, stream=True, demux=True, logs=True)
            out, err = Capture(lim.output_bytes), Capture(lim.output_bytes)
            reader = threading.Thread(target=_drain, args=(stream, out, err), daemon=True)
            container.start()
            reader.start()
            timed_out, returncode = False, None
            try:
                returncode = container.wait(timeout=timeout_s)["StatusCode"]
            except Exception:  # requests' ReadTimeout/ConnectionError: the wall clock ran out
                timed_out = True
                container.kill()
            reader.join(_READ_GRACE_S)
            container.reload()
            oom = bool(container.attrs.get("State", {}).get("OOMKilled"))
        finally:
            container.remove(force=True)
        if returncode is not None and returncode > 128:
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
