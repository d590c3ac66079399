"""Issue #50, wave 6, round 4: one test per planted bug the suite did not catch (B5 B9 B15 B16 B21 B22 B23 B24
B26 B28 B29). Each names its planted one-line change, fails with it and passes without it, and asserts values worked
out here, not read back from the code under test (no model loads, no network)."""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path

import pandas as pd
import pytest
from conftest import reporter_plugin
from test_planted_bugs_wave6c import KEY, _finish, _stream

from sao_env.errors import UserError
from sao_env.tasks.forge import report
from sao_env.types import Task

REPO = Path(__file__).resolve().parents[1]


def test_b5_a_failed_conversion_leaves_no_half_written_folder(monkeypatch, tmp_path):
    """Planted: ``packaged.materialize`` without ``shutil.rmtree(tmp, ...)`` after a failed conversion."""
    from conftest import fake_packaged_model

    fake = fake_packaged_model(monkeypatch, tmp_path)
    monkeypatch.setattr(fake.packaged, "gguf_path", lambda model: fake.gguf)

    def half_then_fail(model, source, out, *, quiet):
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"\0" * 64)  # what a conversion killed midway leaves
        raise RuntimeError("the GGUF file is cut short")

    monkeypatch.setattr(fake.packaged, "_convert", half_then_fail)
    with pytest.raises(UserError, match="converting 'fake-1m' from .* failed: the GGUF file is cut short"):
        fake.packaged.materialize("fake-1m")
    cache = fake.folder.parent
    assert sorted(p.name for p in cache.iterdir() if not p.name.endswith(".lock")) == []


def test_b9_the_site_reads_the_boards_it_is_given(tmp_path):
    """Planted: ``render`` calling ``places(folder)`` (the folder's own tables) instead of ``places(folder, boards)``.
    The boards are rendered into a folder without tables: the finding's lines are theirs all the same."""
    from sao_env.leaderboard.finding import finding_lines, places
    from sao_env.leaderboard.site import render
    from sao_env.leaderboard.summary import per_seed_boards

    tables = tmp_path / "tables"
    tables.mkdir()
    runs = pd.read_csv(REPO / "leaderboards" / "tool-drift-runs.csv")
    runs.to_csv(tables / "tool-drift-runs.csv", index=False)
    boards = per_seed_boards(tables)
    empty = tmp_path / "site"
    empty.mkdir()
    page = render(boards, None, folder=empty, generator="test")
    lines = finding_lines(places(tables))
    assert lines == ["**Multi-turn scenarios** (tool-drift): sao leads with support on tool-drift (+0.070 over "
                     "running_mean, the next best; Holm p 0.012)."]
    assert "sao leads with support on tool-drift (+0.070 over" in page[page.index("<header>"):page.index("</header>")]


def test_b15_a_kept_response_is_reused_only_for_a_sample_index_below_k(tmp_path):
    """Planted: ``_reusable_responses`` keeping ``0 <= j <= k``: a k = 2 run after a k = 3 run of the same settings
    would keep the earlier run's sample 2 as well, a third sample where two are asked for."""
    from sao_env.benchmarks.evaluate import _reusable_responses

    tasks = [Task(id="p0", prompt="1+1?", reference={"answer": "2"}, grader="math")]
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps({"id": "p0", "sample": j, "key": "K", "response": f"r{j}", "tokens": 1,
                                        "finished": True}) + "\n" for j in range(3)))
    kept = _reusable_responses(path, tasks, 2, ["K"])
    assert sorted(kept) == [(0, 0), (0, 1)]
    assert [kept[(0, j)]["response"] for j in (0, 1)] == ["r0", "r1"]
    assert _reusable_responses(path, tasks, 2, ["other settings"]) == {}


def test_b16_the_judges_reply_is_kept_by_its_end(monkeypatch):
    """Planted: ``judge_reply`` as ``content[:500]``: a long reply's verdict box sits at its end."""
    from sao_env.benchmarks import llm_grader

    content = "I compare the two answers. " * 40 + "Both are 4, so \\boxed{Correct}"
    assert len(content) > 1000
    monkeypatch.setattr(llm_grader, "post_json", lambda *a, **k: {"choices": [{"message": {"content": content}}]})
    judge = llm_grader.LLMJudge("judge", base_url="http://127.0.0.1:9")
    graded = judge.grade(Task(id="t", prompt="2+2?", reference={"answer": "4"}, grader="llm"), "so \\boxed{4}")
    assert graded.reward == 1.0 and graded.details["verdict"] == "correct"
    assert len(graded.details["judge_reply"]) == 500
    assert graded.details["judge_reply"].endswith("so \\boxed{Correct}")
    assert graded.details["judge_reply"] == content[len(content) - 500:]


def test_b21_only_a_root_harness_hands_the_work_dir_to_the_sandbox_user(monkeypatch):
    """Planted: ``DockerExecutor._hands_over`` with ``or``: a harness that is not root would try to chown the working
    copy to the sandbox user (EPERM), or hand it over when the user named one of their own."""
    from sao_env.sandbox import docker_exec
    from sao_env.sandbox.docker_exec import SANDBOX_USER, DockerExecutor

    executor = DockerExecutor.__new__(DockerExecutor)  # no engine needed for the rule
    cases = {(0, SANDBOX_USER): True, (0, "1000:1000"): False, (1000, SANDBOX_USER): False, (1000, "1000:1000"): False}
    for (euid, user), hands_over in cases.items():
        monkeypatch.setattr(docker_exec.os, "geteuid", lambda euid=euid: euid)
        executor.user = user
        assert executor._hands_over is hands_over, (euid, user)


def test_b22_a_run_that_timed_out_is_never_resolved(monkeypatch):
    """Planted: ``grade_files`` without ``not result.timed_out`` in ``resolved``: a sandbox that reports its
    timeout with the exit status pytest's report gives (0) would have the run graded resolved."""
    from sao_env.sandbox.base import ExecResult
    from sao_env.tasks.forge import grading
    from sao_env.tasks import build_source

    reference = build_source("forge_repo", {"repo_seed": 0, "head": 0}).task(7, phase="p").reference
    f2p, p2p = list(reference["FAIL_TO_PASS"]), list(reference["PASS_TO_PASS"])
    passed = [{"kind": "report", "nodeid": test, "when": when, "outcome": "passed", "xfail": False}
              for test in f2p + p2p for when in ("setup", "call", "teardown")]
    stream = _stream(*passed, _finish(0, 0))
    monkeypatch.setattr(grading.report, "prepare", lambda tree: (tree, KEY))
    for timed_out, expected in ((False, (1.0, "resolved")), (True, (0.0, "timeout"))):
        result = ExecResult(returncode=0, stdout="", stderr=stream, timed_out=timed_out,
                            reason="timeout" if timed_out else None, duration_s=1.0, truncated=False)
        monkeypatch.setattr(grading, "run_pytest", lambda *a, result=result, **k: result)
        monkeypatch.setattr(grading, "_grades", OrderedDict())
        graded = grading.grade_files(reference, dict(reference["files"]))
        assert (graded.reward, graded.details["reason"]) == expected, graded.details


def test_b23_a_test_skipped_in_its_setup_is_skipped_whatever_its_call_says():
    """Planted: ``report._status`` without the setup-skipped clause: a test whose setup was skipped and whose call
    phase reads passed (a forged or stray record) is INCOMPLETE instead of SKIPPED."""
    phases = {"setup": {"outcome": "skipped"}, "call": {"outcome": "passed"}, "teardown": {"outcome": "passed"}}
    assert report._status(phases) == "SKIPPED"
    assert report._status({"setup": {"outcome": "passed"}, "call": {"outcome": "passed"},
                           "teardown": {"outcome": "passed"}}) == "PASSED"


def test_b24_a_record_after_output_without_a_newline_starts_its_own_line(tmp_path):
    """Planted: the reporter's record without its leading newline: a test that printed to stderr without ending
    its line (``sys.stderr.write("50%")``) would glue the next record to that text, and an honest run would be
    judged forged."""
    module = reporter_plugin("reporter_wave6d")
    read, write = os.pipe()
    try:
        os.write(write, b"progress 50%")  # the tested code's output, its line not ended
        writer = module._writer(KEY, write)
        writer({"kind": "start", "pid": 1})
        os.close(write)
        with os.fdopen(read, "rb") as stream:
            text = stream.read().decode()
    finally:
        for fd in (read, write):
            try:
                os.close(fd)
            except OSError:
                pass
    assert text.startswith("progress 50%\n" + report.MARK + " ")
    records, problem, _ = report._records(text, KEY)
    assert problem is None and [r["kind"] for r in records] == ["start"]


def test_b26_an_override_whose_value_holds_an_equals_sign_is_set_whole():
    """Planted: ``apply_known`` splitting on every ``=``: ``env.description=a=b`` would stop in a ValueError."""
    from sao_env.cli.training import apply_known

    raw = {"env": {"name": "x", "description": "old"}, "agent": {"name": "grpo"}}
    apply_known(raw, ["env.description=lr=1e-4 and k=2", "env.rollout_slots=4"])
    assert raw["env"]["description"] == "lr=1e-4 and k=2" and raw["env"]["rollout_slots"] == 4


def test_b28_a_failed_replacing_block_leaves_the_old_file_and_nothing_beside_it(tmp_path):
    """Planted: ``replacing`` without ``tmp.unlink(missing_ok=True)``: a block that fails leaves its half-written
    temporary file, and the hidden ``.writing-<pid>`` folder holding it, beside the table."""
    from sao_env.experiment.files import replacing

    table = tmp_path / "board.csv"
    table.write_text("old\n")
    with pytest.raises(RuntimeError, match="disk went away"):
        with replacing(table) as tmp:
            tmp.write_text("half")
            raise RuntimeError("disk went away")
    assert table.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["board.csv"]


def test_b29_a_run_folder_with_logs_kept_aside_holds_no_foreign_files(tmp_path):
    """Planted: ``foreign_entries`` without ``not n.startswith("unresumed-")``: a run whose logs an earlier resume
    kept aside (``unresumed-1/``) would be refused as a folder of other files."""
    from sao_env.experiment.run import foreign_entries

    for name in ("config.yaml", "metrics.jsonl", "episodes.jsonl"):
        (tmp_path / name).write_text("")
    (tmp_path / "unresumed-1").mkdir()
    assert foreign_entries(tmp_path) == []
    (tmp_path / "notes.txt").write_text("mine")
    assert foreign_entries(tmp_path) == ["notes.txt"]
