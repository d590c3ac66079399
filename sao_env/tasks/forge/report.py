"""The harness's side of forge grading's report channel: a key per run, and the verdict from signed records.

``prepare(tree)`` adds the reporter plugin (``pytest_reporter.py``, as ``_sao_grade_report.py``) and a
fresh key to a graded tree and returns the key and pytest's extra arguments; after the run,
``judge(result, key)`` reads the records the plugin signed on stderr and returns each test's status, or
the reason the run cannot be trusted. A test passes only when its setup, call and teardown were each
reported ``passed`` (no skip, no xfail) by the plugin; nothing the tested code prints, writes or exits
with is read as an outcome, and the exit status is cross-checked with the plugin's own count.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Mapping

from sao_env.sandbox import ExecResult

PLUGIN_MODULE = "_sao_grade_report"
PLUGIN_PATH = PLUGIN_MODULE + ".py"
KEY_FILE = ".sao-grade-key"
MARK = "@@sao-grade@@"
RESERVED = (PLUGIN_PATH, KEY_FILE)
"""Paths of the graded tree that the harness writes last: a working copy's own files there are replaced."""
PYTEST_PLUGIN_ARGS = ("-p", PLUGIN_MODULE)
EXIT_NAMES = {2: "interrupted", 3: "internal error", 4: "usage error"}
"""pytest's exit statuses other than 0 (all passed), 1 (some failed) and 5 (none collected)."""


@lru_cache(maxsize=1)
def process_key() -> bytes:
    """One key for every run of this process whose key cannot travel with the run (swebench's harness,
    whose evaluation script is fixed per repository): records also carry the plugin's own run nonce,
    so a record seen in one run's log does not pass in another's."""
    return secrets.token_hex(32).encode()


@lru_cache(maxsize=1)
def plugin_source() -> str:
    return (Path(__file__).with_name("pytest_reporter.py")).read_text(encoding="utf-8")


def prepare(tree: Mapping[str, str]) -> tuple[dict[str, str], bytes]:
    """``tree`` plus the plugin and a fresh 32-byte key (hex, as the key file holds it): (files, key)."""
    key = secrets.token_hex(32).encode()
    files = {path: text for path, text in tree.items() if path not in RESERVED}
    files[PLUGIN_PATH] = plugin_source()
    files[KEY_FILE] = key.decode()
    return files, key


@dataclass
class Verdict:
    """What the signed records say: per-test statuses, or why they cannot be trusted (``problem``)."""

    statuses: dict[str, str] = field(default_factory=dict)
    problem: str | None = None
    detail: str = ""
    exitstatus: int | None = None


def _records(stream: str, key: bytes) -> tuple[list[dict], str | None, str]:
    records: list[dict] = []
    for line in stream.splitlines():
        if MARK not in line:
            continue
        parts = line[line.index(MARK) + len(MARK):].strip().rsplit(" ", 1)
        if not line.startswith(MARK) or len(parts) != 2:
            return records, "report-forged", "a report line not in the reporter's form"
        body, mac = parts
        expected = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, mac):
            return records, "report-forged", "a report line whose signature does not match this run's key"
        try:
            record = json.loads(body)
        except json.JSONDecodeError:
            return records, "report-forged", "a signed report line that is not JSON"
        if record.get("seq") != len(records):
            return records, "report-forged", f"report {record.get('seq')} where {len(records)} was due"
        records.append(record)
    return records, None, ""


def _status(phases: dict[str, dict]) -> str:
    if any(r["outcome"] == "failed" for r in phases.values()):
        return "ERROR" if phases.get("call") is None or phases["call"]["outcome"] != "failed" else "FAILED"
    call = phases.get("call")
    if call is None or call["outcome"] == "skipped" or phases.get("setup", {}).get("outcome") == "skipped":
        return "SKIPPED"
    if call.get("xfail"):
        return "XPASS"
    if phases.get("setup", {}).get("outcome") == "passed" and phases.get("teardown", {}).get("outcome") == "passed":
        return "PASSED"
    return "INCOMPLETE"


def judge(result: ExecResult, key: bytes) -> Verdict:
    """The verdict on one reporter-instrumented pytest run (see the module docstring)."""
    return judge_stream(result.stderr, result.returncode, key)


def judge_stream(stream: str, returncode: int | None, key: bytes) -> Verdict:
    """The verdict from the text that holds the records (stderr, or a log with stderr merged in) and
    the exit status of the process that ran pytest."""
    records, problem, detail = _records(stream, key)
    if problem is not None:
        return Verdict(problem=problem, detail=detail)
    if not records or records[0]["kind"] != "start":
        return Verdict(problem="report-missing", detail="the reporter never started")
    if any(record.get("run") != records[0].get("run") for record in records):
        return Verdict(problem="report-forged", detail="records of another run")
    finish = records[-1] if records[-1]["kind"] == "finish" else None
    if finish is None or sum(r["kind"] == "finish" for r in records) != 1:
        return Verdict(problem="report-missing", detail="the run ended before the reporter's last record")
    phases: dict[str, dict[str, dict]] = {}
    for record in records:
        if record["kind"] != "report":
            continue
        seen = phases.setdefault(record["nodeid"], {})
        if record["when"] in seen:
            return Verdict(problem="report-forged", detail=f"{record['nodeid']} {record['when']} reported twice")
        seen[record["when"]] = record
    statuses = {nodeid: _status(seen) for nodeid, seen in phases.items()}
    exitstatus = finish["exitstatus"]
    verdict = Verdict(statuses=statuses, exitstatus=exitstatus)
    if finish["changes"]:
        verdict.problem, verdict.detail = "runner-tampered", "; ".join(finish["changes"][:5])
    elif exitstatus not in (0, 1, 5):
        verdict.problem = "pytest-aborted"
        verdict.detail = f"pytest ended with exit status {exitstatus} ({EXIT_NAMES.get(exitstatus, 'unknown')})"
    elif returncode != exitstatus:
        verdict.problem = "exit-status-mismatch"
        verdict.detail = f"pytest finished with {exitstatus}, the process exited with {returncode}"
    elif (finish["failed"] > 0) != (exitstatus == 1) or finish["failed"] != finish["testsfailed"]:
        verdict.problem = "exit-status-mismatch"
        verdict.detail = (f"{finish['failed']} failures reported, pytest counted {finish['testsfailed']}, "
                          f"exit status {exitstatus}")
    return verdict
