"""Wave 6, round 2: one cheap test per planted bug the suite did not catch (no model loads, no network
beyond 127.0.0.1). Each asserts values worked out here, not read back from the code under test."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
import threading
import time
import types

import pytest
from conftest import fake_packaged_model, reporter_plugin

from sao_env.sandbox import ExecResult
from sao_env.tasks.forge import report

# --- the forge report channel: hand-signed records (as tests/test_forgery.py signs them) -------------

KEY = b"0123456789abcdef0123456789abcdef"
START = {"kind": "start", "pid": 7}


def _line(record: dict, key: bytes = KEY) -> str:
    body = json.dumps(record, sort_keys=True, separators=(",", ":"))
    return f"{report.MARK} {body} {hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}"


def _run(*records: dict, returncode: int) -> ExecResult:
    lines = [_line(dict(r, seq=i)) for i, r in enumerate(records)]
    return ExecResult(returncode, "", "\n".join(lines) + "\n", False, None, 0.1, False)


def _phase(nodeid: str, when: str, outcome: str = "passed") -> dict:
    return {"kind": "report", "nodeid": nodeid, "when": when, "outcome": outcome, "xfail": False}


def _finish(exitstatus: int, failed: int, testsfailed: int | None = None) -> dict:
    return {"kind": "finish", "exitstatus": exitstatus, "failed": failed,
            "testsfailed": failed if testsfailed is None else testsfailed, "collected": 1, "changes": []}


def test_q1_a_test_without_a_teardown_record_is_not_passed():
    whole = [_phase("t::a", "setup"), _phase("t::a", "call"), _phase("t::a", "teardown")]
    assert report.judge(_run(START, *whole, _finish(0, 0), returncode=0), KEY).statuses == {"t::a": "PASSED"}
    # setup and call passed, the teardown never reported: the run is not a pass
    cut = report.judge(_run(START, *whole[:2], _finish(0, 0), returncode=0), KEY)
    assert cut.problem is None
    assert cut.statuses == {"t::a": "INCOMPLETE"}


def test_q3_two_finish_records_are_a_missing_report():
    records = [START, _phase("t::a", "setup"), _phase("t::a", "call"), _phase("t::a", "teardown")]
    verdict = report.judge(_run(*records, _finish(0, 0), _finish(0, 0), returncode=0), KEY)
    assert (verdict.problem, verdict.detail) == ("report-missing", "the run ended before the reporter's last record")
    assert verdict.statuses == {}


def test_q4_exit_status_2_without_failures_is_an_aborted_run():
    records = [START, _phase("t::a", "setup"), _phase("t::a", "call"), _phase("t::a", "teardown")]
    verdict = report.judge(_run(*records, _finish(2, 0), returncode=2), KEY)
    assert (verdict.problem, verdict.detail) == ("pytest-aborted", "pytest ended with exit status 2 (interrupted)")


def test_q5_a_failure_count_pytest_disagrees_with_is_an_exit_status_mismatch():
    records = [START, _phase("t::a", "setup"), _phase("t::a", "call", "failed"), _phase("t::a", "teardown")]
    agreed = report.judge(_run(*records, _finish(1, 1, 1), returncode=1), KEY)
    assert agreed.problem is None and agreed.statuses == {"t::a": "FAILED"}
    verdict = report.judge(_run(*records, _finish(1, 1, 2), returncode=1), KEY)
    assert (verdict.problem, verdict.detail) == ("exit-status-mismatch",
                                                 "1 failures reported, pytest counted 2, exit status 1")


# --- the reporter plugin: a hook that appears after collection started ----------------------------

class _Caller:
    def __init__(self, *impls):
        self.impls = list(impls)

    def get_hookimpls(self):
        return list(self.impls)


def _impl(name: str):
    def function():
        return None

    return types.SimpleNamespace(plugin_name=name, function=function, hookwrapper=False, wrapper=False)


def test_q7_a_hook_added_after_collection_started_is_reported():
    module = reporter_plugin("reporter_wave6b")
    written = []
    reporter = module._Reporter(written.append)
    hook = types.SimpleNamespace(pytest_runtest_call=_Caller(_impl("runner")))
    reporter._pluginmanager = types.SimpleNamespace(hook=hook)
    reporter._hooks = module._hook_table(reporter._pluginmanager)
    reporter._check("t::a")
    assert [c for c in reporter._changes if c.startswith("hook ")] == []
    hook.pytest_sneaky_new_hook = _Caller(_impl("package"))  # registered by the tested code
    reporter._check("t::b")
    assert [c for c in reporter._changes if c.startswith("hook ")] == ["hook pytest_sneaky_new_hook changed (t::b)"]


# --- packaged models: a fake model, no conversion --------------------------------------------------

@pytest.fixture
def fake(monkeypatch, tmp_path):
    return fake_packaged_model(monkeypatch, tmp_path)


def _installed(fake, monkeypatch):
    monkeypatch.setattr(fake.packaged, "gguf_path", lambda model: fake.gguf)


def test_q13_a_folder_without_the_marker_is_not_materialized(fake, monkeypatch):
    packaged = fake.packaged
    fake.folder.mkdir(parents=True)
    (fake.folder / "config.json").write_text("{}")  # half written: no marker
    assert packaged.status("fake-1m").startswith("not installed (")
    _installed(fake, monkeypatch)
    assert packaged.status("fake-1m") == "installed (converted into the cache on first use)"
    (fake.folder / packaged.DONE).write_text("{}")
    assert packaged.status("fake-1m") == f"materialized at {fake.folder}"


def test_q15_a_conversion_finished_while_waiting_for_the_lock_is_not_done_again(fake, monkeypatch, tmp_path):
    packaged = fake.packaged
    _installed(fake, monkeypatch)
    monkeypatch.setattr(packaged, "importlib",
                        types.SimpleNamespace(util=types.SimpleNamespace(find_spec=lambda name: object())))
    conversions = []

    def convert(model, source, out, *, quiet):
        conversions.append((model.name, source))
        out.mkdir(parents=True)
        (out / packaged.DONE).write_text("{}")

    monkeypatch.setattr(packaged, "_convert", convert)
    # first: nobody else converts; this process does, once
    assert packaged.materialize("fake-1m") == fake.folder
    assert conversions == [("fake-1m", fake.gguf)] and (fake.folder / packaged.DONE).is_file()

    # then: another process finishes the folder while this one waits for the lock
    other = tmp_path / "cache2" / "fake-1m"
    monkeypatch.setenv("SAO_ENV_MODEL_CACHE", str(other.parent))

    @contextlib.contextmanager
    def locked(lock_path):
        other.mkdir(parents=True, exist_ok=True)
        (other / packaged.DONE).write_text('{"by": "the other process"}')
        yield

    monkeypatch.setattr(packaged, "_locked", locked)
    conversions.clear()
    assert packaged.materialize("fake-1m") == other
    assert conversions == []
    assert json.loads((other / packaged.DONE).read_text()) == {"by": "the other process"}


def test_q16_resolved_name_converts_a_packaged_model_on_first_use(fake, monkeypatch, tmp_path):
    from sao_env.policy.model import resolved_name

    packaged = fake.packaged
    converted = tmp_path / "converted-here"
    calls = []
    monkeypatch.setattr(packaged, "materialize", lambda name, **kw: calls.append(name) or converted)
    assert resolved_name("fake-1m") == str(converted)
    assert calls == ["fake-1m"]
    assert resolved_name("org/model") == "org/model" and calls == ["fake-1m"]


def test_q17_models_materialize_converts_an_installed_model_and_only_then(fake, monkeypatch, capsys):
    from sao_env.cli.app import main

    packaged = fake.packaged
    _installed(fake, monkeypatch)
    calls = []
    monkeypatch.setattr(packaged, "materialize", lambda name, **kw: calls.append(name) or fake.folder)
    assert main(["models"]) == 0
    assert calls == []
    assert main(["models", "--materialize"]) == 0
    assert calls == ["fake-1m"]
    capsys.readouterr()


# --- grid files: a nested unknown key is matched against its own parent's keys ---------------------

def test_q19_a_nested_unknown_key_gets_its_parents_keys_as_suggestion(monkeypatch, tmp_path):
    from pydantic import BaseModel, ConfigDict, ValidationError

    from sao_env import grid
    from sao_env.errors import UserError

    # through a real grid file: a row's typo
    path = tmp_path / "grid.yaml"
    path.write_text("rows:\n  - {label: a, agent: sao, overides: []}\nscenarios: [style-drift]\nseeds: [0]\nbaseline: a\n")
    with pytest.raises(UserError) as caught:
        grid.load_grid(path)
    assert str(caught.value) == f"{path}: unknown key 'rows.0.overides'; did you mean 'overrides'?"

    # a mapping nested directly (no list index between): the parent is loc[:-1], not one level further up.
    # (GridSpec nests models only under the list `rows`, whose index _fields_at skips, so the file above
    # cannot tell loc[:-1] from loc[:-2]; a directly nested model stands in for GridSpec here.)
    class Inner(BaseModel):
        model_config = ConfigDict(extra="forbid")
        agent: str = "x"
        label: str = "y"

    class Outer(BaseModel):
        model_config = ConfigDict(extra="forbid")
        row: Inner = Inner()
        seeds: list[int] = []

    monkeypatch.setattr(grid, "GridSpec", Outer)
    with pytest.raises(ValidationError) as caught:
        Outer(row={"agnet": "sao"})
    assert grid._one_line(caught.value, "g.yaml") == "g.yaml: unknown key 'row.agnet'; did you mean 'agent'?"
    with pytest.raises(ValidationError) as caught:
        Outer(seeeds=[0])
    assert grid._one_line(caught.value, "g.yaml") == "g.yaml: unknown key 'seeeds'; did you mean 'seeds'?"


# --- HTTP: stop_all ends a request whose body is being read ----------------------------------------

def test_q29_stop_all_ends_a_body_being_trickled(monkeypatch):
    from sao_env.benchmarks import _http

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(10)
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        conn.settimeout(0.2)
        data = b""
        with conn:
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            end = time.monotonic() + 6
            while time.monotonic() < end:  # one more byte now and then, never the whole body
                try:
                    if conn.recv(4096) == b"":
                        return  # the client hung up
                except socket.timeout:
                    pass
                except OSError:
                    return
                try:
                    conn.sendall(b" ")
                except OSError:
                    return

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    _http.reset_stop()
    stopper = threading.Timer(0.6, _http.stop_all)
    start = time.monotonic()
    stopper.start()
    try:
        with pytest.raises(_http.RequestFailed) as caught:
            _http.post_json(f"http://127.0.0.1:{port}/v1/chat/completions", {"x": 1}, deadline_s=4.0, retries=0)
        elapsed = time.monotonic() - start
    finally:
        stopper.cancel()
        _http.reset_stop()
        listener.close()
    assert caught.value.reason == "stopped"
    assert 0.5 <= elapsed < 1.6, elapsed  # at the stop, not at the 4-s deadline
    server.join(timeout=7)


# --- evaluate: a judge verdict is reused only for the same response --------------------------------

def test_q30_a_changed_response_is_graded_again(tmp_path):
    from sao_env.benchmarks.evaluate import _reusable_verdicts
    from sao_env.types import Task

    tasks = [Task(id=f"p{i}", prompt=f"q{i}", reference={"answer": str(i)}, grader="math") for i in range(2)]
    old = [
        {"id": "p0", "sample": 0, "response": "answer 0", "verdict": "correct", "reward": 1.0, "grader": "llm:judge",
         "extracted": "0", "gold": "0", "reason": None},
        {"id": "p1", "sample": 0, "response": "answer 1 (old)", "verdict": "correct", "reward": 1.0,
         "grader": "llm:judge", "extracted": "1", "gold": "1", "reason": None},
    ]
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in old))
    samples = [(tasks[0], 0, "answer 0"), (tasks[1], 0, "answer 1 (new)")]
    reused = _reusable_verdicts(path, samples, "llm:judge")
    assert sorted(reused) == [0]
    assert reused[0].reward == 1.0 and reused[0].details["verdict"] == "correct"
