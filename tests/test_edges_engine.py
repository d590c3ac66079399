"""Edge values of the local inference server plumbing, without vLLM.

Covers ``sao_env.engine.process`` (finding the engine's interpreter, the command lines of both servers, the start
through the orphan guard, readiness and its deadline, the log's quoted line, HTTP refusals and dead servers,
stopping and the log folder) and ``sao_env.engine.server`` (its environment, the output layer's refresh, the
sampling parameters and weight reload it hands the engine, its HTTP endpoints and its command line). Real pieces
are small: sleeping or exiting Python children, and HTTP servers on 127.0.0.1 in threads.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from sao_env.engine import process, server
from sao_env.errors import UserError

CHECKOUT = Path(__file__).resolve().parents[1]
HINT = "make install-vllm in the checkout, or set SAO_ENV_VLLM_PYTHON to a Python with vLLM"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(30)"]


@pytest.fixture
def sleeper():
    """A real child that sleeps 30 s, killed at the end if still running."""
    child = subprocess.Popen(SLEEPER, stdin=subprocess.DEVNULL)
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def _serve(handler) -> ThreadingHTTPServer:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True).start()
    return httpd


def _stop(httpd: ThreadingHTTPServer) -> None:
    httpd.shutdown()
    httpd.server_close()


class FakeProcess:
    """A ``Popen`` stand-in that records what is asked of it; ``stubborn`` ignores SIGTERM until killed."""

    def __init__(self, *, running: bool = True, stubborn: bool = False, status: int | None = -15):
        self.calls: list = []
        self.running, self.stubborn, self.status = running, stubborn, status

    def poll(self):
        self.calls.append("poll")
        return None if self.running else 0

    def send_signal(self, sig):
        self.calls.append(("signal", sig))

    def wait(self, timeout=None):
        self.calls.append(("wait", timeout))
        if self.status is None or (self.stubborn and timeout is not None):
            raise subprocess.TimeoutExpired("server", timeout)
        self.running = False
        return self.status

    def kill(self):
        self.calls.append("kill")


# -- the engine's interpreter ---------------------------------------------------------------------------


def test_a_named_interpreter_wins_over_an_importable_vllm(monkeypatch, tmp_path):
    """``$SAO_ENV_VLLM_PYTHON`` naming a file is returned as given, before ``find_spec`` is asked."""
    named = tmp_path / "python"
    named.write_text("")
    monkeypatch.setenv("SAO_ENV_VLLM_PYTHON", str(named))
    monkeypatch.setattr(process, "find_spec", lambda name: pytest.fail("find_spec asked"))
    assert process.vllm_python() == str(named)


def test_a_named_folder_is_not_an_interpreter(monkeypatch, tmp_path):
    """A directory named by ``$SAO_ENV_VLLM_PYTHON`` is refused with the whole one-line hint (``is_file``)."""
    monkeypatch.setenv("SAO_ENV_VLLM_PYTHON", str(tmp_path))
    with pytest.raises(UserError) as err:
        process.vllm_python()
    assert str(err.value) == f"SAO_ENV_VLLM_PYTHON={tmp_path} is not a file; {HINT}"


def test_an_empty_variable_falls_through_to_this_interpreter_with_vllm(monkeypatch):
    """``SAO_ENV_VLLM_PYTHON=""`` names nothing; this interpreter is used where ``find_spec("vllm")`` finds it."""
    asked = []
    monkeypatch.setenv("SAO_ENV_VLLM_PYTHON", "")
    monkeypatch.setattr(process, "find_spec", lambda name: asked.append(name) or object())
    assert process.vllm_python() == sys.executable
    assert asked == ["vllm"]


def test_the_checkout_environment_counts_only_once_its_installation_finished(monkeypatch, tmp_path):
    """The vLLM folder is looked up beside ``sao_env`` (the checkout root) and used only with its ``.installed``."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    relative = os.path.relpath(venv, CHECKOUT)
    monkeypatch.delenv("SAO_ENV_VLLM_PYTHON", raising=False)
    monkeypatch.setattr(process, "find_spec", lambda name: None)
    monkeypatch.setattr(process, "VENV", relative)
    with pytest.raises(UserError) as err:
        process.vllm_python()
    assert str(err.value) == f"vLLM is not installed: {HINT}"
    (venv / ".installed").write_text("")
    found = process.vllm_python()
    assert found == str(CHECKOUT / relative / "bin" / "python")
    assert Path(found).resolve() == (venv / "bin" / "python").resolve()


# -- small helpers -------------------------------------------------------------------------------------


def test_a_status_names_its_signal_only_when_negative():
    """``_signal_name``: negative statuses are signals (unknown numbers by number); 0 and above are exits."""
    got = [process._signal_name(s) for s in (-15, -9, -200, 0, 1, 3)]
    assert got == ["killed by SIGTERM", "killed by SIGKILL", "killed by signal 200", "its own exit", "its own exit",
                   "its own exit"]


@pytest.mark.parametrize(("content", "expected"), [
    (b"", ""),
    (b"\n   \n\t\n", ""),
    (b"INFO a\n   INFO b   \n\n", "INFO b"),
    (b"RuntimeError: x\nINFO later\n", "RuntimeError: x"),
    (b"ValueError: first\nOSError: second\nINFO done\n", "OSError: second"),
    (b"WARNING DeprecationError ahead\nINFO done\n", "INFO done"),
    (b"fatal error: no compiler\nINFO done\n", "fatal error: no compiler"),
    (b"no error here\nINFO done\n", "INFO done"),
    (b"RuntimeError: bad \xff byte\nINFO done\n", "RuntimeError: bad \ufffd byte"),
    (("RuntimeError: " + "x" * 400).encode(), "RuntimeError: " + "x" * 286),
    (b"a" * 300 + b"\n", "a" * 300),
], ids=["empty", "blank", "last-line-stripped", "error-before-later-lines", "last-error", "warning-not-error",
        "lowercase-error-colon", "error-without-colon", "undecodable-byte", "cut-at-300", "exactly-300"])
def test_the_quoted_log_line_is_the_last_error_else_the_last_line(tmp_path, content, expected):
    """``last_line``: the last line with ``Error`` or ``error:`` (not a WARNING), else the last non-blank line,
    stripped, bad bytes replaced, cut at 300 characters."""
    log = tmp_path / "server.log"
    log.write_bytes(content)
    assert process.last_line(log) == expected


def test_an_unreadable_log_quotes_nothing(tmp_path):
    """``last_line`` of a missing file or of a folder is the empty string (``OSError``), not an exception."""
    assert (process.last_line(tmp_path / "missing.log"), process.last_line(tmp_path)) == ("", "")


def test_the_server_url_is_loopback_on_its_port(tmp_path):
    """``Server.url`` is ``http://127.0.0.1:<port>``."""
    assert process.Server(None, 8123, tmp_path / "x.log", "s").url == "http://127.0.0.1:8123"


# -- command lines of the two servers ------------------------------------------------------------------


@pytest.fixture
def started(monkeypatch):
    """``_start`` replaced by a recorder; the interpreter and the port fixed."""
    calls = []
    monkeypatch.setattr(process, "vllm_python", lambda: "/venv/python")
    monkeypatch.setattr(process, "free_port", lambda: 4321)
    monkeypatch.setattr(process, "_start", lambda argv, **options: calls.append((argv, options)) or "started")
    return calls


def test_the_engine_server_command_line_and_its_defaults(started):
    """``engine_server``'s argv (defaults: float32, 1 thread, seed 0, version 0, no --compile) and start options."""
    assert process.engine_server(Path("/models/m")) == "started"
    process.engine_server("/models/m", threads=3, dtype="bfloat16", seed=5, version=2, compile=True,
                          log_dir=Path("/logs"), timeout_s=7.0)
    script = str(process.SERVER_SCRIPT)
    assert started == [
        (["/venv/python", script, "--model", "/models/m", "--dtype", "float32", "--threads", "1", "--seed", "0",
          "--version", "0", "--port", "4321"],
         {"port": 4321, "name": "vLLM engine server", "env": {}, "log_dir": None, "timeout_s": 600.0}),
        (["/venv/python", script, "--model", "/models/m", "--dtype", "bfloat16", "--threads", "3", "--seed", "5",
          "--version", "2", "--port", "4321", "--compile"],
         {"port": 4321, "name": "vLLM engine server", "env": {}, "log_dir": Path("/logs"), "timeout_s": 7.0}),
    ]
    assert Path(script).name == "server.py" and Path(script).parent == Path(process.__file__).parent


OPENAI_BASE = ["/venv/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/m", "--host",
               "127.0.0.1", "--port", "4321"]


def test_the_openai_server_adds_tensor_parallelism_only_above_one_and_a_served_name_only_when_given(started):
    """``openai_server``'s argv and environment: defaults, ``tensor_parallel_size=1`` and an empty served name add
    nothing; 2 and a name add their flags; the thread count goes to ``OMP_NUM_THREADS``."""
    process.openai_server(Path("/models/m"))
    process.openai_server("/models/m", tensor_parallel_size=1, served_name="")
    process.openai_server("/models/m", served_name="judge", threads=3, dtype="bfloat16", max_model_len=1024, seed=5,
                          tensor_parallel_size=2, log_dir=Path("/logs"), timeout_s=9.0)
    default = OPENAI_BASE + ["--dtype", "float32", "--max-model-len", "4096", "--seed", "0", "--enforce-eager",
                             "--disable-uvicorn-access-log"]
    env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    options = {"port": 4321, "name": "vLLM OpenAI server", "env": env, "log_dir": None, "timeout_s": 600.0}
    assert started[0] == (default, options) and started[1] == (default, options)
    assert started[2] == (
        OPENAI_BASE + ["--dtype", "bfloat16", "--max-model-len", "1024", "--seed", "5", "--enforce-eager",
                       "--disable-uvicorn-access-log", "--tensor-parallel-size", "2", "--served-model-name", "judge"],
        {**options, "env": {**env, "OMP_NUM_THREADS": "3"}, "log_dir": Path("/logs"), "timeout_s": 9.0})


# -- starting through the orphan guard -----------------------------------------------------------------

DEATH_SIGNAL = ("import ctypes, os; sig = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0); "
                "print('deathsig', sig.value, 'parent', os.getppid())")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_orphan_guard_asks_for_sigterm_and_runs_the_program_only_under_its_starter():
    """``ORPHAN_GUARD``: with the starter's pid the program runs with parent-death signal 15 (SIGTERM); with another
    pid it starts nothing and exits 0."""
    guard = [sys.executable, "-c", process.ORPHAN_GUARD]
    program = [sys.executable, "-c", DEATH_SIGNAL]
    ran = subprocess.run([*guard, str(os.getpid()), *program], capture_output=True, text=True, timeout=20)
    skipped = subprocess.run([*guard, "0", *program], capture_output=True, text=True, timeout=20)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, f"deathsig 15 parent {os.getpid()}\n", "")
    assert (skipped.returncode, skipped.stdout, skipped.stderr) == (0, "", "")


STARTING_CHILD = """
import ctypes, os, sys
sig = ctypes.c_int()
ctypes.CDLL(None).prctl(2, ctypes.byref(sig), 0, 0, 0)
print("deathsig", sig.value, "unbuffered", os.environ.get("PYTHONUNBUFFERED"), "extra", os.environ.get("SAO_EXTRA"),
      "pinned", os.environ.get("ONEDNN_MAX_CPU_ISA"))
print("RuntimeError: no kernel for this CPU")
sys.exit(5)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the orphan guard is Linux's")
def test_a_start_appends_to_the_named_log_through_the_guard_with_the_callers_environment_last(tmp_path, monkeypatch):
    """``_start``: the log is ``<log_dir>/<name with dashes>.log``, opened for appending; the child runs under the
    orphan guard (SIGTERM on the starter's death) with the pinned numerics removed, ``PYTHONUNBUFFERED=1``
    overridden by the caller's ``env``; an exit while starting is one line with the status and the last error."""
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    log = log_dir / "fake-engine-server.log"
    log.write_text("earlier run\n")
    with pytest.raises(UserError) as err:
        process._start([sys.executable, "-c", STARTING_CHILD], port=process.free_port(), name="fake engine server",
                       env={"PYTHONUNBUFFERED": "0", "SAO_EXTRA": "yes"}, log_dir=log_dir, timeout_s=20)
    assert str(err.value) == (f"the fake engine server exited with status 5 while starting; its log: {log}: "
                              "RuntimeError: no kernel for this CPU")
    assert log.read_text() == ("earlier run\ndeathsig 15 unbuffered 0 extra yes pinned None\n"
                               "RuntimeError: no kernel for this CPU\n")
    assert sorted(p.name for p in log_dir.iterdir()) == ["fake-engine-server.log"]


# -- readiness and its deadline ------------------------------------------------------------------------


def test_ready_on_the_first_look_returns_at_once_and_leaves_the_server_running(sleeper, tmp_path):
    """``wait_ready`` asks ``ready`` once when it says yes, marks nothing failed and stops nothing."""
    looks = []
    srv = process.Server(sleeper, 1, tmp_path / "s.log", "quick server")
    srv.wait_ready(lambda: looks.append(1) or True, timeout_s=5)
    assert (looks, srv.failed, sleeper.poll()) == ([1], False, None)


def test_an_exited_process_is_reported_even_when_ready_says_yes(tmp_path):
    """``wait_ready`` checks the process before ``ready``: a server gone with status 7 is an error, not ready."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"], stdin=subprocess.DEVNULL)
    child.wait(timeout=20)
    log = tmp_path / "s.log"
    log.write_text("INFO up\nImportError: no module named vllm\n")
    srv = process.Server(child, 1, log, "gone server")
    with pytest.raises(UserError) as err:
        srv.wait_ready(lambda: True, timeout_s=5)
    assert str(err.value) == (f"the gone server exited with status 7 while starting; its log: {log}: "
                              "ImportError: no module named vllm")
    assert srv.failed is True


def test_not_ready_by_the_deadline_stops_the_server_and_keeps_its_own_log_folder(sleeper, tmp_path):
    """``wait_ready`` past ``timeout_s`` (0.2 s, printed rounded: 0 s) marks the server failed, sends it SIGTERM,
    and keeps the scratch folder that holds the log the message names."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    log = scratch / "slow.log"
    log.write_text("INFO loading weights\n")
    srv = process.Server(sleeper, 1, log, "slow server", scratch)
    with pytest.raises(UserError) as err:
        srv.wait_ready(lambda: False, timeout_s=0.2)
    assert str(err.value) == f"the slow server was not ready in 0 s; its log: {log}: INFO loading weights"
    assert (srv.failed, sleeper.wait(timeout=20), log.is_file()) == (True, -signal.SIGTERM, True)


class FakeClock:
    """``time`` for ``wait_ready``: the clock moves only when it sleeps."""

    def __init__(self):
        self.now, self.sleeps = 100.0, []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(("timeout_s", "looks", "shown"), [(0.75, 3, "1"), (0.0, 0, "0")])
def test_readiness_is_asked_every_quarter_second_strictly_before_the_deadline(monkeypatch, tmp_path, timeout_s, looks,
                                                                               shown):
    """``wait_ready`` on a clock that moves only by its sleeps: with 0.75 s it looks at 0, 0.25 and 0.5 s (not at
    the deadline itself), sleeping 0.25 s after each look; with 0 s it never looks. Then the server is stopped."""
    clock = FakeClock()
    monkeypatch.setattr(process, "time", clock)
    fake, asked = FakeProcess(), []
    srv = process.Server(fake, 1, tmp_path / "s.log", "engine server")
    with pytest.raises(UserError) as err:
        srv.wait_ready(lambda: asked.append(clock.now) or False, timeout_s=timeout_s)
    assert str(err.value) == f"the engine server was not ready in {shown} s; its log: {tmp_path / 's.log'}: "
    assert (asked, clock.sleeps) == ([100.0, 100.25, 100.5][:looks], [0.25] * looks)
    assert fake.calls[-3:] == ["poll", ("signal", signal.SIGTERM), ("wait", 30)]


# -- stopping and the log folder -----------------------------------------------------------------------


def test_a_server_that_ignores_sigterm_is_killed_after_30_s_and_closed_once(tmp_path):
    """``close``: SIGTERM, a 30 s wait, then SIGKILL and a wait without limit; a second close does nothing."""
    fake = FakeProcess(stubborn=True)
    srv = process.Server(fake, 1, tmp_path / "s.log", "stubborn server")
    srv.close()
    srv.close()
    assert fake.calls == ["poll", ("signal", signal.SIGTERM), ("wait", 30), "kill", ("wait", None)]


def test_closing_an_exited_server_signals_nothing_and_the_context_manager_closes(tmp_path):
    """``close`` of a process already gone only polls; leaving ``with`` closes the server."""
    gone = FakeProcess(running=False)
    with process.Server(gone, 1, tmp_path / "s.log", "gone server") as srv:
        assert gone.calls == []
    assert (gone.calls, srv._closed) == (["poll"], True)


def test_a_real_server_closed_gets_sigterm(sleeper, tmp_path):
    """``close`` of a running child ends it by SIGTERM (status -15)."""
    process.Server(sleeper, 1, tmp_path / "s.log", "sleeper").close()
    assert sleeper.returncode == -signal.SIGTERM


@pytest.mark.parametrize(("failed", "log_inside", "kept"), [(False, True, False), (True, True, True),
                                                             (True, False, False), (False, False, False)])
def test_the_scratch_folder_is_kept_only_for_a_failed_server_whose_log_is_in_it(tmp_path, failed, log_inside, kept):
    """``_discard_scratch`` via ``close``: removed unless the server failed and its log lies in the folder."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "other.txt").write_text("x")
    log = (scratch if log_inside else tmp_path) / "s.log"
    srv = process.Server(FakeProcess(running=False), 1, log, "s", scratch, failed=failed)
    srv.close()
    assert scratch.exists() is kept


def test_no_scratch_folder_means_nothing_is_removed(tmp_path):
    """``_discard_scratch`` with ``scratch=None`` leaves the log's own (named) folder alone."""
    log = tmp_path / "s.log"
    log.write_text("x")
    process.Server(FakeProcess(running=False), 1, log, "s").close()
    assert log.read_text() == "x"


# -- HTTP: refusals, dead servers, hang-ups ------------------------------------------------------------

CANNED = {"/named": (409, b'{"error": "busy"}'), "/blank": (400, b'{"error": ""}'), "/text": (502, b"upstream down"),
          "/list": (500, b"[1, 2]"), "/other": (500, b'{"detail": "x"}'), "/fine": (200, b'{"ok": [1, 2]}')}


class CannedHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.seen.append((self.path, self.headers.get("Content-Type"), body))
        if self.path == "/hangup":
            self.close_connection = True
            return
        status, data = CANNED[self.path]
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def canned(tmp_path):
    httpd = _serve(CannedHandler)
    httpd.seen = []
    try:
        yield httpd, process.Server(FakeProcess(status=None), httpd.server_address[1], tmp_path / "s.log", "judge")
    finally:
        _stop(httpd)


def test_a_post_sends_json_and_returns_the_parsed_reply(canned):
    """``Server.post``: the body is JSON with ``Content-Type: application/json``; a 200 reply is parsed."""
    httpd, srv = canned
    assert srv.post("/fine", {"a": [1, "b"]}) == {"ok": [1, 2]}
    assert httpd.seen == [("/fine", "application/json", b'{"a": [1, "b"]}')]


@pytest.mark.parametrize(("path", "message"), [
    ("/named", "the judge refused /named: busy"),
    ("/blank", "the judge refused /blank: HTTP Error 400: Bad Request"),
    ("/text", "the judge refused /text: HTTP Error 502: Bad Gateway"),
    ("/list", "the judge refused /list: HTTP Error 500: Internal Server Error"),
    ("/other", "the judge refused /other: HTTP Error 500: Internal Server Error"),
])
def test_a_refusal_quotes_the_servers_error_else_the_http_status(canned, path, message):
    """``Server.post`` on an HTTP error: the JSON ``error`` when there is one, else the status line (a body that
    is not JSON, a JSON list, or no ``error`` key); the server is not marked failed."""
    _, srv = canned
    with pytest.raises(UserError) as err:
        srv.post(path, {})
    assert (str(err.value), srv.failed) == (message, False)


def test_a_hang_up_from_a_live_server_is_did_not_answer(canned, tmp_path):
    """``Server.post``: a connection closed without a reply (``ConnectionError``), with the process still running
    after a 5 s wait, is "did not answer" with the error, and the server is marked failed."""
    _, srv = canned
    (tmp_path / "s.log").write_text("INFO busy\n")
    with pytest.raises(UserError) as err:
        srv.post("/hangup", {"x": 1})
    assert str(err.value) == (f"the judge did not answer /hangup (Remote end closed connection without response); "
                              f"its log: {tmp_path / 's.log'}: INFO busy")
    assert (srv.failed, srv.process.calls) == (True, [("wait", 5)])


def test_a_refused_connection_to_a_server_that_exited_by_itself_names_its_status(tmp_path):
    """``Server.post`` to a closed port of a process that exited with status 0: "exited with status 0 (its own
    exit)", not "did not answer" (status 0 is a status)."""
    log = tmp_path / "s.log"
    log.write_text("RuntimeError: boom\nINFO bye\n")
    fake = FakeProcess(running=False, status=0)
    srv = process.Server(fake, process.free_port(), log, "engine server")
    with pytest.raises(UserError) as err:
        srv.post("/generate", {})
    assert str(err.value) == (f"the engine server exited with status 0 (its own exit) while answering /generate; "
                              f"its log: {log}: RuntimeError: boom")
    assert (srv.failed, fake.calls) == (True, [("wait", 5)])


def test_a_refused_connection_to_a_live_server_quotes_the_url_error(tmp_path):
    """``Server.post`` to a closed port while the process lives on: "did not answer" with the URL error, and an
    empty quote for a log that does not exist."""
    srv = process.Server(FakeProcess(status=None), process.free_port(), tmp_path / "none.log", "engine server")
    with pytest.raises(UserError) as err:
        srv.post("/load_weights", {})
    assert str(err.value) == (f"the engine server did not answer /load_weights (<urlopen error [Errno 111] Connection "
                              f"refused>); its log: {tmp_path / 'none.log'}: ")
    assert srv.failed is True


# -- the engine server's own pieces --------------------------------------------------------------------

ENGINE_VARIABLES = ("VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_KVCACHE_SPACE",
                    "OMP_NUM_THREADS", "VLLM_LOGGING_LEVEL")


def test_the_engine_environment_fills_only_what_is_unset(monkeypatch):
    """``engine_environment(threads=3, kv_cache_gib=2)``: each of vLLM's settings set when absent, a preset one
    (``VLLM_LOGGING_LEVEL``) kept."""
    for name in ENGINE_VARIABLES:
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")
    server.engine_environment(3, 2)
    assert {name: os.environ[name] for name in ENGINE_VARIABLES} == {
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CPU_KVCACHE_SPACE": "2",
        "OMP_NUM_THREADS": "3", "VLLM_LOGGING_LEVEL": "DEBUG"}


def _model(*, tied=True, embed=True, head=True, method="prepares"):
    done = []
    quant = {"prepares": SimpleNamespace(process_weights_after_loading=lambda layer: done.append(layer)),
             "plain": SimpleNamespace(), "none": None}[method]
    config = SimpleNamespace() if tied is None else SimpleNamespace(tie_word_embeddings=tied)
    model = SimpleNamespace(config=config,
                            model=SimpleNamespace(embed_tokens=SimpleNamespace(weight="E") if embed else None))
    if head:
        model.lm_head = SimpleNamespace(weight="H", quant_method=quant)
    return model, done


@pytest.mark.parametrize(("options", "weight", "prepared"), [
    ({}, "E", 1),
    ({"tied": False}, "H", 1),
    ({"tied": None}, "H", 1),
    ({"embed": False}, "H", 1),
    ({"method": "plain"}, "E", 0),
    ({"method": "none"}, "E", 0),
], ids=["tied", "untied", "tying-unsaid", "no-embeddings", "method-without-preparation", "no-method"])
def test_the_output_layer_is_retied_only_with_tied_embeddings_and_prepared_when_it_can_be(options, weight, prepared):
    """``refresh_lm_head``: the head takes the embeddings' weight only when the config ties them (not when it does
    not say) and they exist; its quant method prepares it again (once) only when it has
    ``process_weights_after_loading``."""
    model, done = _model(**options)
    server.refresh_lm_head(model)
    assert (model.lm_head.weight, done) == (weight, [model.lm_head] * prepared)


def test_a_model_without_an_output_layer_is_left_alone():
    """``refresh_lm_head`` on a model with no ``lm_head`` changes nothing."""
    model, done = _model(head=False)
    server.refresh_lm_head(model)
    assert (sorted(vars(model)), model.model.embed_tokens.weight, done) == (["config", "model"], "E", [])


def _engine(outputs=None):
    calls = []

    class LLM:
        def generate(self, inputs, sampling, use_tqdm=True):
            calls.append(("generate", inputs, sampling, use_tqdm))
            return outputs

        def collective_rpc(self, method, kwargs):
            calls.append(("rpc", method, list(kwargs["weights_iterator"]), engine.lock.locked()))

        def apply_model(self, fn):
            calls.append(("apply", fn, engine.lock.locked()))

        def reset_prefix_cache(self):
            calls.append(("reset", engine.lock.locked()))

    engine = object.__new__(server.Engine)
    engine.vllm = SimpleNamespace(SamplingParams=lambda **kw: kw)
    engine.llm, engine.version, engine.lock = LLM(), 0, threading.Lock()
    return engine, calls


def _completion(token_ids, logprobs):
    return SimpleNamespace(outputs=[SimpleNamespace(token_ids=token_ids, logprobs=logprobs)])


def test_generation_converts_the_request_and_reads_each_sampled_tokens_logprob():
    """``Engine.generate``: sampling parameters converted (defaults top_p 1.0, no stop tokens; one sample, sampled
    token's logprob only, no detokenizing), prompts as token-id inputs without a progress bar; each sample's
    log-probabilities read from an entry's ``logprob`` or the entry itself, none when vLLM gave none."""
    outputs = [_completion([5, 9], [{5: SimpleNamespace(logprob=-0.5), 6: -9.0}, {9: -1.25}]),
               _completion([3], None),
               _completion([4, 4, 4], [{4: -0.1}, {4: -0.2}])]
    engine, calls = _engine(outputs)
    samples = engine.generate([["1", 2], [3], []],
                              [{"max_tokens": "4", "temperature": "0.7", "seed": "11"},
                               {"max_tokens": 2, "temperature": 1, "top_p": "0.5", "seed": 3, "stop_token_ids": ["2"]},
                               {"max_tokens": 1, "temperature": 0, "seed": 0}])
    assert samples == [{"token_ids": [5, 9], "logprobs": [-0.5, -1.25]}, {"token_ids": [3], "logprobs": []},
                       {"token_ids": [4, 4, 4], "logprobs": [-0.1, -0.2]}]
    common = {"n": 1, "logprobs": 0, "detokenize": False, "skip_special_tokens": False}
    assert calls == [("generate", [{"prompt_token_ids": [1, 2]}, {"prompt_token_ids": [3]}, {"prompt_token_ids": []}],
                      [{**common, "max_tokens": 4, "temperature": 0.7, "top_p": 1.0, "seed": 11, "stop_token_ids": []},
                       {**common, "max_tokens": 2, "temperature": 1.0, "top_p": 0.5, "seed": 3, "stop_token_ids": [2]},
                       {**common, "max_tokens": 1, "temperature": 0.0, "top_p": 1.0, "seed": 0, "stop_token_ids": []}],
                      False)]


def test_generation_refuses_prompts_and_parameters_of_different_lengths():
    """``Engine.generate`` with 2 prompts and 1 parameter set: a ValueError naming both counts, nothing generated."""
    engine, calls = _engine()
    with pytest.raises(ValueError) as err:
        engine.generate([[1], [2]], [{"max_tokens": 1, "temperature": 1, "seed": 0}])
    assert (str(err.value), calls) == ("2 prompts but 1 sampling parameters", [])


def test_a_weight_reload_runs_in_place_under_the_lock_and_reports_its_seconds(monkeypatch):
    """``Engine.load_weights``: the file's tensors go to ``reload_weights``, then the head refresh and a prefix-cache
    reset, all under the lock; the version becomes ``int(version)``; the seconds are end minus start."""
    monkeypatch.setitem(sys.modules, "safetensors.torch",
                        SimpleNamespace(load_file=lambda path: {"a": path, "b": 2}))
    monkeypatch.setattr(server, "time", SimpleNamespace(perf_counter=iter([100.0, 102.5]).__next__))
    engine, calls = _engine()
    assert engine.load_weights("/w.safetensors", "3") == 2.5
    assert engine.version == 3 and not engine.lock.locked()
    assert calls == [("rpc", "reload_weights", [("a", "/w.safetensors"), ("b", 2)], True),
                     ("apply", server.refresh_lm_head, True), ("reset", True)]


# -- the engine server's HTTP endpoints ----------------------------------------------------------------


@pytest.fixture
def endpoints(tmp_path):
    """``handler_for`` on a fake engine (version 4), served on 127.0.0.1, and a ``Server`` client for it."""
    asked = []

    def generate(prompts, params):
        asked.append(("generate", prompts, params))
        if len(prompts) != len(params):
            raise ValueError(f"{len(prompts)} prompts but {len(params)} sampling parameters")
        return [{"token_ids": [7], "logprobs": [-0.5]}]

    def load_weights(path, version):
        asked.append(("load", path, version))
        engine.version = int(version)
        return 1.5

    engine = SimpleNamespace(version=4, generate=generate, load_weights=load_weights)
    stop = threading.Event()
    httpd = _serve(server.handler_for(engine, stop))
    try:
        yield SimpleNamespace(httpd=httpd, stop=stop, asked=asked,
                              client=process.Server(None, httpd.server_address[1], tmp_path / "s.log", "engine"))
    finally:
        _stop(httpd)


def test_the_endpoints_generate_reload_and_report_the_version(endpoints):
    """``/health`` gives the served version; ``/generate`` passes prompts and params and adds the version;
    ``/load_weights`` reloads and answers the version the engine then serves (not the one asked for, "5") and the
    seconds; none of them stops the server."""
    client = endpoints.client
    assert client.get("/health") == {"version": 4}
    assert client.post("/generate", {"prompts": [[1, 2]], "params": [{"seed": 1}]}) == {
        "samples": [{"token_ids": [7], "logprobs": [-0.5]}], "version": 4}
    assert client.post("/load_weights", {"path": "/w.safetensors", "version": "5"}) == {"version": 5, "seconds": 1.5}
    assert client.get("/health") == {"version": 5}
    assert endpoints.asked == [("generate", [[1, 2]], [{"seed": 1}]), ("load", "/w.safetensors", "5")]
    assert not endpoints.stop.is_set()


def test_unknown_endpoints_are_404_and_engine_errors_are_500_with_their_type(endpoints):
    """An unknown GET or POST is 404 naming the method and path; a missing field or an engine error is 500 with
    ``<type>: <message>``, quoted by the client's refusal; none of them stops the server."""
    client = endpoints.client
    with pytest.raises(urllib.error.HTTPError) as err:
        client.get("/generate")
    assert (err.value.code, json.loads(err.value.read())) == (404, {"error": "no such endpoint: GET /generate"})
    refusals = []
    for path, body in [("/health", {}), ("/generate", {"params": []}),
                       ("/generate", {"prompts": [[1], [2]], "params": [{}]}), ("/load_weights", {"version": 1})]:
        with pytest.raises(UserError) as err:
            client.post(path, body)
        refusals.append(str(err.value))
    assert refusals == ["the engine refused /health: no such endpoint: POST /health",
                        "the engine refused /generate: KeyError: 'prompts'",
                        "the engine refused /generate: ValueError: 2 prompts but 1 sampling parameters",
                        "the engine refused /load_weights: KeyError: 'path'"]
    codes = []
    for path in ("/health", "/generate"):
        request = urllib.request.Request(client.url + path, data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=5)
        codes.append((err.value.code, json.loads(err.value.read())))
    assert codes == [(404, {"error": "no such endpoint: POST /health"}), (500, {"error": "KeyError: 'prompts'"})]
    assert not endpoints.stop.is_set()


def test_shutdown_with_an_empty_body_answers_over_http_1_1_then_stops(endpoints):
    """``POST /shutdown`` with no Content-Length (read as 0, the body taken as ``{}``) answers 200
    ``{"stopping": true}`` as HTTP/1.1 JSON with its exact length, then sets the stop event."""
    conn = http.client.HTTPConnection("127.0.0.1", endpoints.httpd.server_address[1], timeout=5)
    try:
        conn.putrequest("POST", "/shutdown")
        conn.endheaders()
        reply = conn.getresponse()
        got = (reply.status, reply.version, reply.getheader("Content-Type"), reply.getheader("Content-Length"),
               reply.read())
    finally:
        conn.close()
    assert got == (200, 11, "application/json", "18", b'{"stopping": true}')
    assert endpoints.stop.wait(5)


# -- the engine server's command line ------------------------------------------------------------------


def _run_main(monkeypatch, capsys, argv):
    """Run ``server.main(argv)`` with a fake engine until a ``POST /shutdown``; what it built and printed."""
    seen = {"servers": [], "environment": [], "engines": []}
    made = threading.Event()

    class FakeEngine:
        def __init__(self, model, **options):
            seen["engines"].append((model, options))
            self.version = options["version"]

    class Recorded(ThreadingHTTPServer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            seen["servers"].append(self)
            made.set()

        def serve_forever(self, poll_interval=0.5):
            super().serve_forever(0.02)

    monkeypatch.setattr(server, "Engine", FakeEngine)
    monkeypatch.setattr(server, "ThreadingHTTPServer", Recorded)
    monkeypatch.setattr(server, "engine_environment", lambda *a: seen["environment"].append(a))
    result = []
    runner = threading.Thread(target=lambda: result.append(server.main(argv)), daemon=True)
    runner.start()
    try:
        assert made.wait(10)
        port = seen["servers"][0].server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
            seen["health"] = json.loads(reply.read())
        request = urllib.request.Request(f"http://127.0.0.1:{port}/shutdown", data=b"", method="POST")
        urllib.request.urlopen(request, timeout=5).close()
        runner.join(10)
    finally:
        for httpd in seen["servers"]:
            httpd.shutdown()
            httpd.server_close()
    return result, seen, port, capsys.readouterr().out


def test_the_command_line_defaults_reach_the_engine(monkeypatch, capsys):
    """``server.main(["--model", "m"])``: environment (1 thread, 1 GiB), engine float32 / seed 0 / 2048 tokens /
    eager / version 0 / 1 thread, a server on 127.0.0.1 that prints ``READY <port>`` and returns 0 on shutdown."""
    result, seen, port, out = _run_main(monkeypatch, capsys, ["--model", "m"])
    assert (result, out, seen["environment"], seen["health"]) == ([0], f"READY {port}\n", [(1, 1)], {"version": 0})
    assert seen["engines"] == [("m", {"dtype": "float32", "seed": 0, "max_model_len": 2048, "enforce_eager": True,
                                      "version": 0, "threads": 1})]
    assert seen["servers"][0].server_address[0] == "127.0.0.1"


def test_the_command_line_options_reach_the_engine_and_the_port(monkeypatch, capsys):
    """``server.main`` with every option: ``--compile`` turns eager off, threads and KV cache reach the environment
    in that order, the named port is the one served and printed."""
    wanted = process.free_port()
    result, seen, port, out = _run_main(monkeypatch, capsys, [
        "--model", "/m", "--dtype", "bfloat16", "--seed", "9", "--threads", "3", "--kv-cache-gib", "4",
        "--max-model-len", "512", "--compile", "--port", str(wanted), "--version", "2"])
    assert (result, port, out, seen["environment"], seen["health"]) == ([0], wanted, f"READY {wanted}\n", [(3, 4)],
                                                                         {"version": 2})
    assert seen["engines"] == [("/m", {"dtype": "bfloat16", "seed": 9, "max_model_len": 512, "enforce_eager": False,
                                       "version": 2, "threads": 3})]


def test_a_port_that_answers_something_other_than_http_is_not_ready():
    """Another program on the port (it took the port between the free-port probe and the server's bind) answers a
    line that is not HTTP: the server is not ready, and waiting goes on, rather than a traceback."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def answer_garbage():
        conn, _ = listener.accept()
        conn.recv(1000)
        conn.sendall(b"garbage\r\n\r\n")
        conn.close()

    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    try:
        assert process.Server.healthy(SimpleNamespace(url=f"http://127.0.0.1:{listener.getsockname()[1]}")) is False
    finally:
        thread.join(timeout=5)
        listener.close()
