"""bench/stability.py: its per-run numbers are the run's own logs, read independently, and its table's
cells are the mean and Student-t interval over seeds."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from conftest import load_bench
from sao_env.evaluation.collapse import collapse_record


@pytest.fixture(scope="module")
def bench():
    return load_bench("stability")


def test_cell_is_the_mean_and_the_t_interval_by_hand(bench):
    # 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.3027: half-width 4.3027 / sqrt(3) = 2.484
    assert bench.cell([1, 2, 3], ".3f") == "2.000 ± 2.484"
    assert bench.cell([0.5], ".2f") == "0.50"
    assert bench.cell([float("nan")], ".2f") == "–"


def test_verdict_numbers_are_the_runs_logs(bench, shrunk_run):
    run_dir, summary = shrunk_run("sao")
    numbers = bench.verdict_numbers(run_dir, window=5)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    updates = [r for r in records if "update" in r and r.get("kind") != "eval"]
    stepped = [r for r in updates if "actor/masked_fraction" in r]
    assert stepped, "no actor step in the shrunk run"
    assert numbers["updates"] == len(updates)
    assert numbers["masked_fraction_mean"] == pytest.approx(sum(r["actor/masked_fraction"] for r in stepped) / len(stepped))
    assert numbers["ess_token_frac_min"] == min(r["actor/ess_token_frac"] for r in stepped)
    assert numbers["grad_spikes"] == sum(r["actor/grad_norm"] > bench.SPIKE for r in stepped)
    assert numbers["zero_grad_updates"] == sum(r["actor/grad_norm"] == 0 for r in stepped)
    assert bench._longest_run(pd.Series([False, True, True, False, True, True, True, False])) == 3
    assert bench._longest_run(pd.Series([False, False])) == 0
    shares = [numbers[f"staleness_share_{b}"] for b in bench.STALENESS_BINS]
    assert math.fsum(shares) == pytest.approx(1.0)
    assert numbers["staleness_share_0"] == pytest.approx(
        sum(r["async/staleness_frac_0"] for r in updates) / len(updates))
    assert numbers["online_reward"] == summary["online_reward"] and numbers["auc"] == summary["auc"]
    assert numbers["collapsed"] == int(collapse_record(run_dir)["collapsed"])


def test_table_counts_collapses_per_agent(bench):
    rows = [{key: 0.0 for _, key, _ in bench.ROWS} | {"agent": a, "seed": s, "collapsed": c, "entropy_collapse_at_update": e}
            for a, s, c, e in [("sao", 0, 0, None), ("sao", 1, 1, 120), ("grpo", 0, 0, None)]]
    table = bench.markdown_table(pd.DataFrame(rows), ["sao", "grpo"])
    assert "| sao (2 seeds) | grpo (1 seed) |" in table
    assert "| collapsed runs (leaderboards' rule, docs/metrics.md) | 1 of 2 | 0 of 1 |" in table
    assert "nats/token | 1 of 2 | 0 of 1 |" in table
