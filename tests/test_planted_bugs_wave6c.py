"""Issue #50, wave 6, round 3: one test per planted bug the suite did not catch (R3 P2 G1 G2 PL1 H2 F1 F3 T1
K2 C1 C2). Each names its planted one-line change, fails with it and passes without it, and asserts values
worked out here, not read back from the code under test (no model loads, only the packaged tokenizer; no
network)."""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import threading
import time
import types
from pathlib import Path

import pytest
from conftest import fake_packaged_model, reporter_plugin

from sao_env.errors import UserError
from sao_env.tasks.forge import grading, report

KEY = b"00112233445566778899aabbccddeeff"


def _signed(record: dict, seq: int, key: bytes = KEY, run: str = "r1") -> str:
    body = json.dumps(dict(record, seq=seq, run=run), sort_keys=True, separators=(",", ":"))
    return f"{report.MARK} {body} {hmac.new(key, body.encode(), hashlib.sha256).hexdigest()}"


def _phases(nodeid: str, call: str = "passed") -> list[dict]:
    return [{"kind": "report", "nodeid": nodeid, "when": when, "outcome": call if when == "call" else "passed",
             "xfail": False} for when in ("setup", "call", "teardown")]


def _finish(exitstatus: int, failed: int) -> dict:
    return {"kind": "finish", "exitstatus": exitstatus, "failed": failed, "testsfailed": failed, "collected": 1,
            "changes": []}


def _stream(*records: dict, key: bytes = KEY) -> str:
    return "".join(_signed(r, i, key) + "\n" for i, r in enumerate([{"kind": "start", "pid": 1}, *records]))


# --- the report channel ----------------------------------------------------------------------------

def test_r3_an_unknown_exit_status_is_a_mismatch():
    """Planted in ``report.judge_stream``: ``elif returncode is not None and returncode != exitstatus`` (a run
    whose exit status is unknown, as a log without its exit line, passed the cross-check)."""
    stream = _stream(*_phases("t::a"), _finish(0, 0))
    assert report.judge_stream(stream, 0, KEY).problem is None
    verdict = report.judge_stream(stream, None, KEY)
    assert (verdict.problem, verdict.detail) == ("exit-status-mismatch",
                                                 "pytest finished with 0, the process exited with None")


def test_p2_a_replaced_excepthook_is_a_change_of_the_import_system(monkeypatch):
    """Planted in ``pytest_reporter._import_system``: ``id(sys.excepthook)`` left out of the tuple."""
    import sys

    module = reporter_plugin("reporter_wave6c")
    reporter = module._Reporter(lambda record: None)
    reporter._imports = module._import_system()
    reporter._check("t::a")
    assert reporter._changes == []
    monkeypatch.setattr(sys, "excepthook", lambda *args: None)
    reporter._check("t::b")
    assert reporter._changes == ["import system changed (t::b)"]


# --- forge grading: patches and the test patch ------------------------------------------------------

TEST_PATCH = ("--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -1,2 +1,3 @@\n from pkg.a import f\n"
              " assert f() == 1\n+assert f() + 1 == 2\n")


def _reference(test_patch: str = TEST_PATCH) -> dict:
    return {"instance_id": "pkg__pkg-1", "base_commit": "0" * 40, "package": "pkg", "test_patch": test_patch,
            "files": {"pkg/__init__.py": "", "pkg/a.py": "def f():\n    return 1\n",
                      "tests/test_a.py": "from pkg.a import f\nassert f() == 1\n"}}


PATCHED_TEST = "from pkg.a import f\nassert f() == 1\nassert f() + 1 == 2\n"


def test_g1_a_file_of_exactly_the_size_cap_is_kept():
    """Planted in ``grading.apply_patch``: ``st_size < MAX_FILE_BYTES`` for ``<=`` (a file of exactly the cap
    dropped, where ``with_test_patch`` keeps it)."""
    ref = _reference()
    tree = dict(ref["files"], **{"pkg/data.txt": "x" * grading.MAX_FILE_BYTES,
                                 "pkg/more.txt": "y" * (grading.MAX_FILE_BYTES + 1)})
    files, error = grading.apply_patch(tree, TEST_PATCH)
    assert error == "" and files["tests/test_a.py"] == PATCHED_TEST
    assert len(files["pkg/data.txt"]) == 262144 and "pkg/more.txt" not in files
    assert grading.with_test_patch(ref, tree) == (files, "")


def test_g2_a_test_patch_that_touches_the_package_is_applied_to_each_tree():
    """Planted in ``grading.with_test_patch``: ``all(p.startswith(package) ...)`` for ``any(...)``: a test patch
    that also changes the package took the once-per-instance path, which applies it outside the package only."""
    grading.clear_caches()
    patch = TEST_PATCH + ("--- a/pkg/a.py\n+++ b/pkg/a.py\n@@ -1,2 +1,4 @@\n def f():\n     return 1\n+\n"
                          "+HELPER = 2\n")
    ref = _reference(patch)
    tree = dict(ref["files"], **{"pkg/b.py": "B = 3\n"})  # the model's own new module
    files, error = grading.with_test_patch(ref, tree)
    assert error == ""
    assert files == {"pkg/__init__.py": "", "pkg/a.py": "def f():\n    return 1\n\nHELPER = 2\n", "pkg/b.py": "B = 3\n",
                     "tests/test_a.py": PATCHED_TEST}


# --- requests to a server: the worker pool and the HTTP client -------------------------------------------

def test_pl1_no_job_starts_after_the_pool_is_stopped():
    """Planted in ``_pool._worker``: ``while True:`` for ``while not _http.STOP.is_set():`` (after a stop the
    workers went on starting every queued job)."""
    from sao_env.benchmarks import _http
    from sao_env.benchmarks._pool import each_done

    started: list[int] = []

    def work(item: int) -> int:
        started.append(item)
        if item == 0:
            _http.stop_all()  # as the caller does when it stops
            raise RuntimeError("the first job fails")
        return item

    try:
        with pytest.raises(RuntimeError, match="the first job fails"):
            for _ in each_done(list(range(6)), work, 1):
                pass
        time.sleep(0.3)
        assert started == [0]
    finally:
        _http.reset_stop()


def test_h2_a_reply_cap_of_zero_bytes_is_refused():
    """Planted in ``_http.max_reply_bytes``: ``if value < 0`` for ``if value < 1`` (a cap of 0 accepted, then read
    as the 8-MiB default by ``post_json``)."""
    from sao_env.benchmarks._http import max_reply_bytes

    with pytest.raises(UserError, match="^--max-reply-bytes must be at least 1$"):
        max_reply_bytes(0)
    assert max_reply_bytes(1) == 1


# --- files and locks -------------------------------------------------------------------------------------

def test_f1_flocked_waits_for_a_shared_holder(tmp_path):
    """Planted in ``files.flocked``: ``fcntl.LOCK_SH`` for ``LOCK_EX`` (a builder entered while another
    held the lock)."""
    from sao_env.experiment.files import flocked

    lock = tmp_path / "entry.lock"
    lock.touch()
    holder = os.open(lock, os.O_RDONLY)
    entered = threading.Event()

    def build() -> None:
        with flocked(lock):
            entered.set()

    try:
        fcntl.flock(holder, fcntl.LOCK_SH)
        worker = threading.Thread(target=build, daemon=True)
        worker.start()
        assert not entered.wait(0.5)
    finally:
        os.close(holder)
    assert entered.wait(5)
    worker.join(5)


def test_f3_board_lock_is_reentrant_whatever_the_folders_spelling(tmp_path, monkeypatch):
    """Planted in ``leaderboard.board_lock``: ``key = Path(folder)`` for ``Path(folder).resolve()`` (the folder
    spelled relatively was not seen as held, and waited on the lock this process holds)."""
    from sao_env.leaderboard import board_lock

    monkeypatch.chdir(tmp_path)
    inner = threading.Event()

    def nested() -> None:
        with board_lock(Path("board")):
            inner.set()

    with board_lock(tmp_path / "board"):
        worker = threading.Thread(target=nested, daemon=True)
        worker.start()
        assert inner.wait(3)
    worker.join(5)
    assert not (tmp_path / "board" / ".board.lock").exists()


def test_t1_a_table_of_blank_lines_is_an_empty_table(tmp_path):
    """Planted in ``tables.read_table`` (now ``board.read_table``): ``if not data:`` for ``if not data.strip():`` (blank lines were reported
    as not CSV instead of an empty table)."""
    from sao_env.leaderboard.board import read_table

    path = tmp_path / "style-drift-runs.csv"
    path.write_text("\n\n")
    with pytest.raises(UserError) as caught:
        read_table(path)
    assert str(caught.value) == (f"{path}: an empty table (2 bytes); restore it or delete it, and write the board "
                                 "again")


# --- packaged models --------------------------------------------------------------------------

@pytest.fixture
def fake(monkeypatch, tmp_path):
    """The fake packaged model, with its (missing) package taken as installed and its file where the fake says."""
    model = fake_packaged_model(monkeypatch, tmp_path)
    packaged = model.packaged
    monkeypatch.setattr(packaged, "gguf_path", lambda m: model.gguf)
    monkeypatch.setattr(packaged, "importlib",
                        types.SimpleNamespace(util=types.SimpleNamespace(find_spec=lambda name: object())))
    return model


def test_k2_a_half_written_folder_is_replaced_by_the_conversion(fake, monkeypatch):
    """Planted in ``packaged.materialize``: ``shutil.rmtree(folder, ...)`` before ``tmp.replace(folder)`` removed
    (a half-written folder, no marker, stayed, and renaming the new one onto it failed)."""
    packaged = fake.packaged
    fake.folder.mkdir(parents=True)
    (fake.folder / "config.json").write_text("{}")  # a conversion killed midway: no marker

    def convert(model, source, out, *, quiet):
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"weights")
        (out / packaged.DONE).write_text("{}")

    monkeypatch.setattr(packaged, "_convert", convert)
    assert packaged.materialize("fake-1m") == fake.folder
    assert sorted(p.name for p in fake.folder.iterdir()) == sorted(["model.safetensors", packaged.DONE])
    assert sorted(p.name for p in fake.folder.parent.iterdir()) == ["fake-1m", "fake-1m.lock"]


# --- the chat layout -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chat_tokenizer():
    pytest.importorskip("sao_env.policy.chat")  # the chat layout (ScenarioSpec.chat)
    from sao_env.policy import packaged
    from sao_env.policy.model import ModelSpec, build_tokenizer

    name = "smollm2-135m-instruct"
    try:
        packaged.gguf_path(packaged.PACKAGED[name])
    except UserError as err:
        pytest.skip(str(err))
    return build_tokenizer(ModelSpec(name=name))


def test_c1_an_empty_system_message_is_sent_as_given(chat_tokenizer):
    """Planted in ``chat.split_template``: ``if system else []`` for ``if system is not None else []`` (an empty
    system message became the template's default one)."""
    from sao_env.policy.chat import split_template

    assert split_template(chat_tokenizer, system="", observation_role="tool")[0] == (
        "<|im_start|>system\n<|im_end|>\n<|im_start|>user\n")


def test_c2_the_scenarios_observation_role_reaches_the_layout(chat_tokenizer):
    """Planted in ``chat.conversation_format``: ``"tool"`` passed for ``chat.observation_role``."""
    from sao_env.policy.chat import conversation_format
    from sao_env.scenario import ChatSpec

    layout = conversation_format(chat_tokenizer, ChatSpec(system="s", observation_role="user"))
    assert layout.observation_text("<out>7</out>") == (
        "\n<|im_start|>user\n<out>7</out><|im_end|>\n<|im_start|>assistant\n")
    assert layout.prompt_text("q") == (
        "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")
