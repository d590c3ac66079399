"""The sandbox against adversarial code: every attack ends as a failed run with a reason, the host untouched.

Real bubblewrap, real processes, no mocks. The bubblewrap tests skip (with the install command)
where bwrap is missing or unusable; CI installs it. The fallback and Docker tests run anywhere.
"""

from __future__ import annotations

import os
import subprocess
import resource
import socket
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from sao_env.errors import UserError
from sao_env.sandbox import (DockerExecutor, ExecResult, Executor, Limits, LocalExecutor, fresh_workdir,
                             run_python, sandbox_status)
from sao_env.sandbox.local import FALLBACK, INSTALL_HINT, _bwrap_check

BWRAP, BWRAP_DETAIL = _bwrap_check()
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason=f"{BWRAP_DETAIL}: {INSTALL_HINT}")


@pytest.fixture(scope="module")
def sandbox() -> LocalExecutor:
    return LocalExecutor(require_isolation=True) if BWRAP else None


def py(executor: LocalExecutor, code: str, workdir: Path, timeout_s: float = 5.0, **kw) -> ExecResult:
    """Run a dedented snippet with the sandbox's python (site-packages off, like run_python)."""
    script = workdir / f"snippet_{uuid.uuid4().hex[:8]}.py"
    script.write_text(textwrap.dedent(code))
    return executor.run([executor.python, "-I", "-S", script.name], workdir=workdir, timeout_s=timeout_s, **kw)


def host_pids() -> set[int]:
    return {int(name) for name in os.listdir("/proc") if name.isdigit()}


def _names(pid: int, words: tuple[str, ...]) -> bool:
    """Whether process ``pid``'s command line holds one of ``words`` (False once it has gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read()
    except OSError:
        return False
    return any(word.encode() in command for word in words)


def pids_running(marker: str) -> int:
    """Host processes whose command line contains ``marker`` (a run's unique script name)."""
    return sum(_names(pid, (marker,)) for pid in host_pids())


# --- normal code ----------------------------------------------------------------------------

@needs_bwrap
def test_normal_run_writes_workdir_sees_caller_env_and_no_stdin(sandbox, tmp_path):
    result = py(sandbox, """
        import os, sys
        open("out.txt", "w").write("hello")
        print(os.environ["SAO_TOOL_FLAG"], repr(sys.stdin.read()), os.getcwd() == os.environ["HOME"])
    """, tmp_path, env={"SAO_TOOL_FLAG": "on"})
    assert result.ok and result.reason is None and not result.truncated, result
    assert result.stdout.split() == ["on", "''", "True"]
    assert (tmp_path / "out.txt").read_text() == "hello"  # visible on the host afterwards
    assert sandbox.isolation == "bubblewrap"


@needs_bwrap
def test_run_python_and_exit_status(sandbox, tmp_path):
    assert run_python("print(6 * 7)", executor=sandbox).stdout == "42\n"
    failed = run_python("raise SystemExit(3)", executor=sandbox, workdir=tmp_path)
    assert (failed.returncode, failed.reason, failed.timed_out) == (3, None, False)
    assert list(tmp_path.iterdir()) == []  # the snippet is removed from a caller's workdir
    missing = sandbox.run(["no-such-tool-xyz"], workdir=tmp_path, timeout_s=5)
    assert missing.returncode == 127 and missing.reason == "command not found"


@needs_bwrap
def test_concurrent_runs_do_not_interfere(sandbox, tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    results: dict[str, ExecResult] = {}

    def one(folder: Path) -> None:
        folder.mkdir()
        results[folder.name] = py(sandbox, f"""
            import os, time
            open("/tmp/who", "w").write("{folder.name}")      # each run has its own /tmp
            open("mine.txt", "w").write("{folder.name}")
            time.sleep(0.3)
            print(open("/tmp/who").read(), sorted(os.listdir(".")))
        """, folder)

    threads = [threading.Thread(target=one, args=(d,)) for d in dirs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for folder in dirs:
        result = results[folder.name]
        assert result.ok, result
        assert result.stdout.startswith(folder.name + " ")
        assert (folder / "mine.txt").read_text() == folder.name
        assert [p.name for p in folder.iterdir() if p.suffix == ".txt"] == ["mine.txt"]


def test_fresh_workdir_copies_into_a_new_directory(tmp_path):
    src = tmp_path / "repo"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("x = 1\n")
    (src / "link").symlink_to("pkg/a.py")
    first, second = fresh_workdir(src, tmp_path), fresh_workdir(src, tmp_path)
    assert first != second and first.parent == tmp_path
    assert (first / "pkg" / "a.py").read_text() == "x = 1\n" and (first / "link").is_symlink()
    (first / "pkg" / "a.py").write_text("changed")
    assert (second / "pkg" / "a.py").read_text() == "x = 1\n" == (src / "pkg" / "a.py").read_text()


# --- attacks ----------------------------------------------------------------------------------

@needs_bwrap
def test_infinite_loop_times_out(sandbox, tmp_path):
    started = time.monotonic()
    result = py(sandbox, "while True: pass", tmp_path, timeout_s=0.5)  # CPU limit 2 s: the wall clock ends it
    elapsed = time.monotonic() - started
    assert result.timed_out and result.reason == "timeout" and result.returncode is None
    assert 0.5 <= elapsed < 1.5


@needs_bwrap
def test_fork_bomb_is_bounded_by_the_process_limit(tmp_path):
    nproc = 24
    executor = LocalExecutor(Limits(nproc=nproc), require_isolation=True)
    marker = f"bomb_{uuid.uuid4().hex}"
    # Each process keeps forking; at most 2**9 = 512 processes even with no limit at all, so a
    # broken sandbox cannot take the host down. Processes that cannot fork say so, then sleep: the run ends at
    # its timeout. All forks are done 0.03 s after the script starts (measured); the watcher has the rest.
    (tmp_path / f"{marker}.py").write_text(textwrap.dedent("""
        import os, time
        for _ in range(9):
            try:
                os.fork()
            except OSError as exc:
                print("fork refused:", exc.strerror, flush=True)
        time.sleep(60)
    """))
    before = host_pids()
    peak = 0
    stop = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, pids_running(marker))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = executor.run([executor.python, "-I", "-S", f"{marker}.py"], workdir=tmp_path, timeout_s=1.5)
    finally:
        stop.set()
        watcher.join()
    assert result.timed_out and result.reason == "timeout"
    assert "fork refused: Resource temporarily unavailable" in result.stdout
    # the run's processes: bwrap (outside), bwrap's init, and at most nproc python processes
    assert 10 <= peak <= nproc + 2, peak
    deadline = time.monotonic() + 5
    while pids_running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids_running(marker) == 0
    # Nothing the run started is left, not even under another name: no new process names the script or the work
    # dir (bwrap's own command line does). Counting every host process instead failed once when another test
    # worker started a Ray cluster meanwhile (59 new processes).
    assert [pid for pid in host_pids() - before if _names(pid, (marker, str(tmp_path)))] == []


@needs_bwrap
def test_a_process_that_leaves_the_session_dies_with_the_run(sandbox, tmp_path):
    seconds = f"{300 + uuid.uuid4().int % 10_000}.5"  # a unique "sleep N" to find on the host
    result = py(sandbox, f"""
        import subprocess
        subprocess.Popen(["sleep", "{seconds}"], start_new_session=True)  # a daemon, own session
        print("started")
    """, tmp_path)
    assert result.ok and result.stdout == "started\n", result
    time.sleep(0.2)
    assert pids_running(f"sleep\0{seconds}") == 0  # the PID namespace took it along


@needs_bwrap
def test_memory_bomb_fails_with_memory_reason(sandbox, tmp_path):
    result = py(sandbox, "blob = bytearray(4 * 1024**3)\nprint(len(blob))", tmp_path)
    assert result.returncode not in (0, None) and "memory" in result.reason
    assert "MemoryError" in result.stderr and result.stdout == ""
    # No child ever held the 4 GiB: the peak RSS of any child (KiB) stays under 3 GiB, measured in a fresh
    # process whose only children are the sandbox's (this worker's own forks can be large: a fork of a worker
    # that held a 135M-parameter model and its optimizer peaked at 6.4 GB).
    probe = textwrap.dedent(f"""
        import resource
        from pathlib import Path
        from sao_env.sandbox import LocalExecutor
        ex = LocalExecutor()
        ex.run([ex.python, "-I", "-S", "-c", "blob = bytearray(4 * 1024**3)"], workdir=Path({str(tmp_path)!r}), timeout_s=5)
        print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    """)
    peak_kib = int(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout)
    assert peak_kib < 3 * (1 << 20)


@needs_bwrap
def test_huge_output_is_capped_and_never_buffered(sandbox, tmp_path):
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = py(sandbox, """
        import sys
        chunk = "x" * (1 << 20)
        for _ in range(100):
            sys.stdout.write(chunk)
        sys.stderr.write("done")
    """, tmp_path, timeout_s=20)
    assert result.returncode == 0 and result.truncated and result.reason == "output truncated"
    assert len(result.stdout) == sandbox.limits.output_bytes and set(result.stdout) == {"x"}
    assert result.stderr == "done"
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before
    assert grown_kib < 30 * 1024  # 100 MB went through; well under 30 MiB stayed with us


@needs_bwrap
def test_writes_outside_the_working_copy_never_reach_the_host(sandbox, tmp_path):
    tag = uuid.uuid4().hex
    targets = [f"/root/escape_{tag}.txt", str(Path(__file__).resolve().parents[1] / f"escape_{tag}.txt"),
               f"/tmp/escape_{tag}.txt", f"{sys.prefix}/escape_{tag}.txt", f"/usr/escape_{tag}.txt",
               f"/escape_{tag}.txt"]
    assert not any(os.path.exists(t) for t in targets)
    (tmp_path / "vendored").mkdir()  # a read-only path inside the working copy stays read-only
    targets.append(str(tmp_path / "vendored" / f"escape_{tag}.txt"))
    sandbox = LocalExecutor(ro_paths=[tmp_path / "vendored"], require_isolation=True)
    result = py(sandbox, f"""
        for path in {targets!r}:
            try:
                with open(path, "w") as handle:
                    handle.write("escaped")
                print("wrote", path, open(path).read())
            except OSError as exc:
                print("refused", path, type(exc).__name__)
    """, tmp_path)
    assert result.ok, result
    assert f"wrote /tmp/escape_{tag}.txt escaped" in result.stdout  # the private tmpfs took it
    for target in targets:
        if not target.startswith("/tmp/"):  # (a checkout under /tmp lands in the tmpfs too)
            assert f"refused {target}" in result.stdout
    assert not any(os.path.exists(t) for t in targets)


@needs_bwrap
def test_host_secrets_are_not_visible(sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("SAO_TEST_SECRET_TOKEN", "s3cret")
    monkeypatch.setenv("OPENAI_API_KEY", "s3cret-openai")
    result = py(sandbox, f"""
        import os
        print(dict(os.environ))
        for path in ("/proc/1/environ", "/proc/{os.getpid()}/environ", "/proc/self/environ"):
            try:
                print(path, open(path, "rb").read())
            except OSError as exc:
                print(path, "unreadable", type(exc).__name__)
    """, tmp_path)
    assert result.ok, result
    assert "s3cret" not in result.stdout + result.stderr
    assert f"/proc/{os.getpid()}/environ unreadable" in result.stdout  # host PIDs are not even visible
    hidden = py(sandbox, "import os; print([p for p in ('/etc/shadow', '/root/.ssh', '/home') if os.path.exists(p)])",
                tmp_path)
    assert hidden.stdout == "[]\n", hidden
    with pytest.raises(ValueError, match="looks like a secret"):
        sandbox.run(["true"], workdir=tmp_path, timeout_s=5, env={"MY_API_KEY": "x"})


@needs_bwrap
def test_network_is_cut_off(sandbox, tmp_path):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        result = py(sandbox, f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
                print("connected")
            except OSError as exc:
                print("connect failed", type(exc).__name__)
            try:
                socket.getaddrinfo("example.com", 80)
                print("resolved")
            except OSError as exc:
                print("resolve failed", type(exc).__name__)
        """, tmp_path)
        assert result.ok, result
        assert "connect failed" in result.stdout and "resolve failed" in result.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever reached the host's loopback
        # network=True shares the host's network: the same loopback connection now arrives
        shared = py(LocalExecutor(network=True, require_isolation=True),
                    f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2).close()",
                    tmp_path)
        assert shared.ok, shared
        conn, _ = listener.accept()
        conn.close()
    finally:
        listener.close()


# --- the fallback -----------------------------------------------------------------------------

def test_fallback_still_times_out_and_caps_output(tmp_path):
    executor = LocalExecutor(use_bwrap=False)
    assert executor.isolation == FALLBACK == "rlimits-only (no filesystem/network isolation: install bubblewrap)"
    started = time.monotonic()
    looped = py(executor, "while True: pass", tmp_path, timeout_s=0.5)
    assert looped.timed_out and looped.reason == "timeout" and time.monotonic() - started < 1.5
    loud = py(executor, "import sys\nsys.stdout.write('y' * 10_000_000)", tmp_path)
    assert loud.returncode == 0 and loud.truncated and len(loud.stdout) == executor.limits.output_bytes
    memory = py(executor, "bytearray(4 * 1024**3)", tmp_path)
    assert memory.reason == "memory limit"


def test_fallback_scrubs_the_environment_and_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SAO_TEST_SECRET_TOKEN", "s3cret")
    result = py(LocalExecutor(use_bwrap=False), "import os; print(dict(os.environ))", tmp_path)
    assert result.ok and "s3cret" not in result.stdout
    home = eval(result.stdout)["HOME"]  # noqa: S307 - our own repr of a dict of strings
    assert home != os.environ.get("HOME") and not os.path.exists(home)  # a temporary HOME, removed


def test_missing_bwrap_falls_back_with_one_warning(monkeypatch, tmp_path):
    from sao_env.sandbox import local

    # as on a machine without bubblewrap: the availability check says so (the sandbox is real)
    monkeypatch.setattr(local, "_bwrap_check", lambda: (None, "bubblewrap not installed"))
    monkeypatch.setattr(local, "_warned", False)
    with pytest.warns(RuntimeWarning, match="falls back to rlimits-only.*apt-get install -y bubblewrap") as caught:
        first, second = LocalExecutor(), LocalExecutor()
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
    assert first.isolation == second.isolation == FALLBACK
    assert run_python("print('still runs')", executor=first).stdout == "still runs\n"
    with pytest.raises(UserError, match="bubblewrap not installed"):
        LocalExecutor(require_isolation=True)


def test_require_isolation_without_bwrap_raises():
    with pytest.raises(UserError, match="isolation required.*install|apt-get install -y bubblewrap"):
        LocalExecutor(use_bwrap=False, require_isolation=True)


def test_status_line_and_protocol():
    line = sandbox_status()
    assert "\n" not in line and line.startswith("sandbox: ")
    assert ("bubblewrap" in line) if BWRAP else (FALLBACK in line)
    assert isinstance(LocalExecutor(use_bwrap=False), Executor)


# --- Docker -----------------------------------------------------------------------------------

def test_docker_without_an_engine_is_one_user_error(tmp_path, monkeypatch):
    pytest.importorskip("docker", reason="docker SDK not installed (pip install 'sao-env[swe]')")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    with pytest.raises(UserError) as caught:
        DockerExecutor("python:3.11-slim")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("no Docker engine reachable (") and message.endswith(
        "): the Docker executor needs one")
