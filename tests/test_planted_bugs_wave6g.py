"""Wave 6, the sixth by-hand round (bench/mutants.py --planted bench/planted/wave6-hand6.jsonl: 30 slips planted by a
helper who read only the package's diff): one test per survivor. Each names its change, fails with it and passes
without it, and asserts values worked out here."""

from __future__ import annotations

import math

import pytest


def test_class_rewards_leave_out_infinite_rewards_as_well_as_nan():
    """Changed: ``math.isfinite(r)`` -> ``not math.isnan(r)`` in ``variance.class_rewards``: an infinite reward (a
    grader's overflow) is left out like NaN, so one such episode does not make its class's mean infinite."""
    from sao_env.evaluation.variance import class_rewards

    records = [{"task": "a", "reward": 1.0, "difficulty_class": "easy"},
               {"task": "b", "reward": math.inf, "difficulty_class": "easy"},
               {"task": "c", "reward": -math.inf, "difficulty_class": "hard"},
               {"task": "d", "reward": 0.0, "difficulty_class": "hard"},
               {"task": "e", "reward": 0.0, "difficulty_class": "easy"}]
    got = class_rewards(records, late_fraction=0.4)
    assert got["all"] == {"easy": 0.5, "hard": 0.0}
    assert got["late"] == {"hard": 0.0, "easy": 0.0}  # the last ceil(0.4 * 5) = 2 records: d and e


def test_a_blank_line_in_a_runs_log_is_not_a_cut_off_line(tmp_path):
    """Changed: ``line.strip() and`` -> ``line and`` in ``tables._check_lines``: a blank line between records is
    skipped (as the readers skip it), while a line cut off mid-record is refused by its number."""
    from sao_env.leaderboard.tables import BadRun, _check_lines

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1}\n\n   \n{"step": 2}\n')
    _check_lines(log, "metrics.jsonl")
    log.write_text('{"step": 1}\n\n{"step": 2}\n{"st')
    with pytest.raises(BadRun, match=r"^metrics\.jsonl line 4 is cut off or not a JSON object$"):
        _check_lines(log, "metrics.jsonl")


def test_a_seed_that_is_a_boolean_is_not_a_whole_number(tmp_path):
    """Changed: ``isinstance(value, bool) or`` dropped in ``predictions._seed``: ``true`` in a ledger is not seed 1."""
    from pathlib import Path

    from sao_env.errors import UserError
    from sao_env.leaderboard.predictions import _seed

    assert _seed("3", Path("per-seed.csv"), 0) == 3 and _seed(2.0, Path("finished.jsonl"), 4) == 2
    with pytest.raises(UserError, match=r"^finished\.jsonl: record 5: the seed is True, not a whole number$"):
        _seed(True, Path("finished.jsonl"), 4)
    with pytest.raises(UserError, match=r"^per-seed\.csv: line 3: the seed is 1\.5, not a whole number$"):
        _seed(1.5, Path("per-seed.csv"), 1)


def test_a_server_is_healthy_only_on_200():
    """Changed: ``reply.status == 200`` -> ``< 500`` in ``Server.healthy``: a /health that answers 204 (or any other
    success without the 200 both servers give when ready) is not taken for a ready server. A real local HTTP server."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from types import SimpleNamespace

    from sao_env.engine.process import Server

    codes = {"/ok/health": 200, "/empty/health": 204, "/down/health": 503}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(codes.get(self.path, 404))
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        seen = {name: Server.healthy(SimpleNamespace(url=f"{base}/{name}")) for name in ("ok", "empty", "down", "gone")}
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert seen == {"ok": True, "empty": False, "down": False, "gone": False}


def test_a_test_passes_only_with_its_setup_and_teardown_reported_passed():
    """Changed: the setup clause dropped from ``report._status``'s PASSED rule: a test whose records show its call and
    teardown passed but no setup is INCOMPLETE (the reporter writes all three phases of a test that ran)."""
    from sao_env.tasks.forge import report

    passed = {"outcome": "passed"}
    assert report._status({"setup": passed, "call": passed, "teardown": passed}) == "PASSED"
    assert report._status({"call": passed, "teardown": passed}) == "INCOMPLETE"
    assert report._status({"setup": passed, "call": passed}) == "INCOMPLETE"
