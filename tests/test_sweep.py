"""`sao-env sweep`: the grid's runs on a tiny real cut of style-drift, the per-seed table, the ranking,
reuse of finished runs, and one-line errors for bad grid keys and values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from conftest import SHRINK_PHASE_H, shrink_overrides
from sao_env import sweep as sweep_module
from sao_env.cli import main
from sao_env.errors import UserError
from sao_env.sweep import parse_axis, plan_sweep, rank_trials, run_sweep, split_values, sweep_command, write_sweep

FIXED_CODE = {"git_commit": "0" * 40, "dirty": False, "diff_sha256": None, "sao_env": "test"}
"""The code version recorded and compared in these tests: other edits to the tree between two calls
must not decide whether a run is reused."""


def test_split_values_keeps_brackets_and_quotes_whole():
    assert split_values("1e-4,2e-4") == ["1e-4", "2e-4"]
    assert split_values("[+,-],[+]") == ["[+,-]", "[+]"]
    assert split_values("'a,b',c") == ["'a,b'", "c"]
    assert split_values("{x: 1, y: 2}") == ["{x: 1, y: 2}"]


def test_rank_trials_by_mean_over_seeds_with_t_interval():
    table = pd.DataFrame([
        {"trial": 1, "overrides": "lr=1", "config_hash": "a", "seed": 0, "auc": 0.30, "online_reward": 0.1},
        {"trial": 1, "overrides": "lr=1", "config_hash": "a", "seed": 1, "auc": 0.40, "online_reward": 0.2},
        {"trial": 2, "overrides": "lr=2", "config_hash": "b", "seed": 1, "auc": 0.50, "online_reward": 0.3},
        {"trial": 2, "overrides": "lr=2", "config_hash": "b", "seed": 0, "auc": 0.60, "online_reward": 0.4},
        {"trial": 3, "overrides": "lr=3", "config_hash": "c", "seed": 0, "auc": 0.35, "online_reward": 0.5},
        {"trial": 3, "overrides": "lr=3", "config_hash": "c", "seed": 1, "auc": 0.35, "online_reward": 0.5},
    ])
    ranked = rank_trials(table, "auc")
    assert list(ranked["trial"]) == [2, 1, 3]  # 0.55 > 0.35 = 0.35: a tie keeps grid order
    assert list(ranked["rank"]) == [1, 2, 3]
    # Two seeds 0.5, 0.6: sd = 0.0707, t(0.975, 1) = 12.706, half = 12.706 * 0.0707 / sqrt(2) = 0.6353.
    assert ranked.loc[0, "mean"] == pytest.approx(0.55)
    assert ranked.loc[0, "ci95"] == pytest.approx(0.63531, abs=1e-4)
    assert ranked.loc[0, "seed_list"] == "0, 1"
    assert ranked.loc[0, "per_seed"] == "0.600, 0.500"  # in seed order: seed 0 then seed 1
    assert ranked.loc[2, "ci95"] == 0.0
    assert ranked.loc[0, "online_reward"] == pytest.approx(0.35)
    by_reward = rank_trials(table, "online_reward")
    assert list(by_reward["trial"]) == [3, 2, 1]


def test_one_seed_has_no_interval():
    table = pd.DataFrame([{"trial": 1, "overrides": "x=1", "config_hash": "a", "seed": 0, "auc": 0.3}])
    ranked = rank_trials(table, "auc")
    assert ranked.loc[0, "mean"] == 0.3 and math.isnan(ranked.loc[0, "ci95"])


@pytest.mark.parametrize("args, message", [
    (["--grid", "agent.hparams.lrr=1e-4,2e-4"], "--grid agent.hparams.lrr=1e-4: invalid configuration at agent.hparams.lrr"),
    (["--grid", "agent.hparams.lr=fast"], "--grid agent.hparams.lr=fast: invalid configuration at agent.hparams.lr"),
    (["--grid", "agent.hparams.lr=-1e-4"], "--grid agent.hparams.lr=-1e-4: invalid configuration"),
    (["--grid", "agent.nonsense.lr=1"], "--grid agent.nonsense.lr=1: unknown override key"),
    (["--grid", "agent.hparams.lr"], "is not of the form key=v1,v2,..."),
    (["--grid", "agent.hparams.lr=1e-4,,2e-4"], "--grid agent.hparams.lr: empty value"),
    (["--grid", "agent.hparams.lr=1e-4,1e-4"], "listed twice"),
    (["--grid", "agent.hparams.lr=1e-4,0.0001"], "resolve to the same configuration"),
    (["--grid", "agent.hparams.lr=1e-4", "--grid", "agent.hparams.lr=2e-4"], "--grid agent.hparams.lr is given twice"),
    (["--grid", "seed=0,1"], "give them with --seeds"),
    (["--grid", "env.eval.interval_h=0.01", "--cut", "env.eval.interval_h=0.02"], "also set by --cut"),
    (["--grid", "agent.hparams.lr=1e-4", "--cut", "env.phases.9.duration_h=0.1"], "--cut env.phases.9.duration_h=0.1: unknown override key"),
    (["--grid", "agent.hparams.lr=1e-4", "--objective", "reward"], "--objective must be one of auc, online_reward"),
    (["--grid", "agent.hparams.lr=1e-4", "--seeds", "0,x"], "--seeds must be comma-separated integers"),
    (["--grid", "agent.hparams.lr=1e-4", "--seeds", "1,1"], "--seeds must list distinct"),
    ([], "at least one --grid"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, message):
    code = main(["sweep", "--env", "style-drift", "--agent", "sao", "--runs-dir", str(tmp_path / "runs"),
                 "--out", str(tmp_path / "tuning"), *args])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("sao-env: error: ") and message in err, err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "tuning").exists()


def test_parse_axis_keeps_values_as_written():
    axis = parse_axis("env.phases.0.sources.0.params.operators=[+,-],[+]")
    assert axis.key == "env.phases.0.sources.0.params.operators" and axis.values == ("[+,-]", "[+]")
    with pytest.raises(UserError, match="not valid YAML"):
        parse_axis("agent.hparams.lr=[1e-4")


@pytest.mark.slow
def test_sweep_on_a_tiny_cut_table_ranking_markdown_and_reuse(monkeypatch, tmp_path):
    monkeypatch.setattr(sweep_module, "code_version", lambda: FIXED_CODE)
    cut = shrink_overrides("sao")
    planned = plan_sweep("style-drift", "sao", ["agent.hparams.lr=1e-4,1e-3"], (0, 1), cut,
                         objective="online_reward", runs_dir=tmp_path / "runs")
    assert planned.size == 4 and [t.overrides for t in planned.trials] == [("agent.hparams.lr=1e-4",),
                                                                            ("agent.hparams.lr=1e-3",)]
    table = run_sweep(planned, jobs=1)

    # One row per trial x seed, identified well enough to re-run it.
    assert len(table) == 4
    assert list(zip(table["trial"], table["seed"])) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    assert list(table["agent.hparams.lr"]) == ["1e-4", "1e-4", "1e-3", "1e-3"]
    assert set(table["cut"]) == {" ".join(cut)} and set(table["objective"]) == {"online_reward"}
    hashes = table.groupby("trial")["config_hash"].nunique()
    assert (hashes == 1).all() and table["config_hash"].nunique() == 2
    for _, row in table.iterrows():
        summary = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
        assert row["online_reward"] == summary["online_reward"] and row["auc"] == summary["auc"]
        assert summary["provenance"]["overrides"] == [*cut, row["overrides"]]
        assert row["code_version"] == "000000000000"  # the commit, 12 hex digits
        assert summary["seed"] == row["seed"]
    # SAO's nominal batch is 8 episodes; an update takes at least that many (more when groups about to
    # exceed the staleness bound are flushed into it), so the mean sits at 8 or a little above (some 10 updates here).
    assert set(table["episodes_per_update_nominal"]) == {8}
    assert all(8 <= x <= 9 for x in table["episodes_per_update"]), list(table["episodes_per_update"])
    # The two learning rates lead to different runs.
    assert table.loc[0, "online_reward"] != table.loc[2, "online_reward"]

    ranked = rank_trials(table, "online_reward")
    means = table.groupby("trial")["online_reward"].mean()
    assert list(ranked["trial"]) == sorted(means.index, key=lambda t: -means[t])
    md, csv = write_sweep(planned, table, tmp_path / "tuning", command=sweep_command(planned))
    assert md.name == "style-drift-sao.md" and csv.name == "style-drift-sao.csv"
    assert pd.read_csv(csv)["trial"].tolist() == [1, 1, 2, 2]
    text = md.read_text()
    assert "2 trials x 2 seeds = 4 runs" in text
    assert "`agent.hparams.lr` in {1e-4, 1e-3} (recipe: 0.0001)" in text
    assert f"`env.phases.0.duration_h={SHRINK_PHASE_H}`" in text
    assert sweep_command(planned) in text and "--grid agent.hparams.lr=1e-4,1e-3" in sweep_command(planned)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`agent.hparams.lr=" in line]
    assert [r.split(" | ")[1] for r in rows] == [str(t) for t in ranked["trial"]]
    assert f"Winner: trial {ranked.loc[0, 'trial']}" in text

    # A second sweep reuses every finished run; a run without summary.json is made again, alone.
    made = []
    real = sweep_module.run_many
    monkeypatch.setattr(sweep_module, "run_many", lambda plans, **kw: (made.append([p.out for p in plans]), real(plans, **kw)))
    again = run_sweep(plan_sweep("style-drift", "sao", ["agent.hparams.lr=1e-4,1e-3"], (0, 1), cut,
                                 objective="online_reward", runs_dir=tmp_path / "runs"), jobs=1)
    assert made == [[]]
    pd.testing.assert_frame_equal(again, table)
    (planned.plans[(2, 1)].out / "summary.json").unlink()
    made.clear()
    rerun = run_sweep(planned, jobs=1)
    assert made == [[planned.plans[(2, 1)].out]]
    pd.testing.assert_frame_equal(rerun, table)  # the same bytes again: one seed, one result


def test_the_default_tuning_folder_is_outside_the_tracked_tree_and_dry_run_names_it(capsys, tmp_path):
    code = main(["sweep", "--env", "style-drift", "--agent", "grpo", "--runs-dir", str(tmp_path / "runs"),
                 "--grid", "agent.hparams.lr=5e-5,1e-4", "--seeds", "0", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[-1] == "write  runs/leaderboards/tuning  style-drift-grpo.md, style-drift-grpo.csv"
    assert not (tmp_path / "runs").exists()


def test_a_sweep_stopped_by_a_signal_says_how_to_resume_and_exits_143(monkeypatch, capsys, tmp_path):
    """Runs stopped at their checkpoints by SIGTERM (``RunsInterrupted`` from the pool) end the command
    with one line and the sweep command that resumes it; it was a traceback and exit 1."""
    from sao_env.experiment import RunInterrupted
    from sao_env.experiment.drivers import RunsInterrupted

    def stopped(*args, **kwargs):
        raise RunsInterrupted("SIGTERM", [RunInterrupted("SIGTERM", "runs/a/seed0", "ckpt", 720.0)])

    monkeypatch.setattr(sweep_module, "run_sweep", stopped)
    runs = tmp_path / "runs"
    code = main(["sweep", "--env", "style-drift", "--agent", "grpo", "--grid", "agent.hparams.lr=1e-4,2e-4",
                 "--seeds", "0", "--runs-dir", str(runs), "--out", str(tmp_path / "t")])
    assert code == 143
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"sao-env: SIGTERM: 1 run stopped at a checkpoint (runs/a/seed0 at simulated 0.200 h); resume with: "
                     f"sao-env sweep --env style-drift --agent grpo --grid agent.hparams.lr=1e-4,2e-4 --seeds 0 "
                     f"--objective auc --runs-dir {runs} --out {tmp_path / 't'}"]
