"""One sandbox for every tool that runs model-written code (docs/sandbox.md).

    from sao_env.sandbox import LocalExecutor, fresh_workdir, run_python

    result = run_python("print(2**10)")                    # -> ExecResult(returncode=0, stdout="1024\\n", ...)
    ex = LocalExecutor()                                    # bubblewrap if it works here, else rlimits-only
    work = fresh_workdir(repo)                              # each episode its own copy
    result = ex.run([ex.python, "-m", "pytest", "-q"], workdir=work, timeout_s=60)

Executors: ``LocalExecutor`` (bubblewrap; rlimits-only fallback, reported by ``.isolation`` and
``sandbox_status()``) and ``DockerExecutor`` (containers; ``exec_in`` for SWE-bench images).
A scenario picks one with its ``sandbox`` key: ``bubblewrap`` (the default: ``LocalExecutor``, warm
interpreters) or ``docker`` (``docker_sandbox``: a container of the sandbox image per run, the image
built from Debian's packages when missing, ``sao_env.sandbox.images``).
``sao_env.sandbox.warm`` keeps a sandboxed interpreter running and forks it per call (the Python
tool and forge test runs use it: no namespace or interpreter start-up per call).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import uuid
from functools import lru_cache
from pathlib import Path

from sao_env.sandbox.base import ExecResult, Executor, Limits
from sao_env.sandbox.docker_exec import DockerExecutor
from sao_env.sandbox.local import LocalExecutor, sandbox_status
from sao_env.sandbox.workdir import fresh_workdir

__all__ = ["SANDBOXES", "DockerExecutor", "ExecResult", "Executor", "Limits", "LocalExecutor", "default_executor",
           "docker_sandbox", "fresh_workdir", "run_python", "sandbox_status"]

SANDBOXES = ("bubblewrap", "docker")
"""The values of a scenario's ``sandbox`` key."""


@lru_cache(maxsize=1)
def default_executor() -> LocalExecutor:
    """The shared ``LocalExecutor()`` (default limits, no network); it holds no per-run state."""
    return LocalExecutor()


_docker_lock = threading.Lock()


def docker_sandbox(limits: Limits = Limits()) -> DockerExecutor:
    """The shared ``DockerExecutor`` of the sandbox image with ``limits`` (memory ``limits.memory_mb``,
    one CPU): a scenario's executor under ``sandbox: docker``. The image is built first when it is
    missing (one line on stderr says so); no engine or no way to build is a one-line ``UserError``."""
    with _docker_lock:  # one executor per limits in a process: caches key verdicts by executor
        return _docker_sandbox(limits)


@lru_cache(maxsize=None)
def _docker_sandbox(limits: Limits) -> DockerExecutor:
    from sao_env.sandbox.images import client, ensure_image

    engine = client()

    def report(line: str) -> None:
        if line.startswith("built"):
            print(f"sao-env: {line}", file=sys.stderr)

    executor = DockerExecutor(ensure_image(report=report, docker_client=engine), limits=limits, client=engine)
    executor.shared = True  # one per process: callers may remember its outputs (tool_math.run_tool_call)
    return executor


def run_python(code: str, *, executor: Executor | None = None, timeout_s: float = 5.0,
               workdir: Path | None = None, site_packages: bool = False,
               env: dict[str, str] | None = None) -> ExecResult:
    """Run a Python snippet in the sandbox: ``python -I -S snippet.py`` in a working copy.

    ``workdir`` None: a fresh temporary one, removed afterwards; otherwise the snippet is written
    there and removed after the run (other files stay). ``site_packages=True`` drops ``-S`` so
    the interpreter's installed packages (sympy, numpy) import. The interpreter is the
    executor's ``python`` attribute (the venv's for LocalExecutor, ``python3`` in Docker).
    """
    executor = executor if executor is not None else default_executor()
    own = workdir is None
    folder = Path(tempfile.mkdtemp(prefix="sao-py-")) if own else Path(workdir)
    name = f"snippet_{uuid.uuid4().hex[:12]}.py"
    (folder / name).write_text(code, encoding="utf-8")
    argv = [getattr(executor, "python", "python3"), "-I"] + ([] if site_packages else ["-S"]) + [name]
    try:
        return executor.run(argv, workdir=folder, timeout_s=timeout_s, env=env)
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            (folder / name).unlink(missing_ok=True)
