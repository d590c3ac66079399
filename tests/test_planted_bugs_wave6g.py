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
