"""`sao-env grid`: a grid of whole experiments on a tiny real cut of style-drift (2 rows x a 2-value
scenario axis x 2 seeds), its per-seed table against the runs' summaries, its aggregate against
numpy, reuse of every finished run, an interrupted grid that resumes to the same table, one-line
errors for bad grid files, and the maps section of the site."""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import shutil
import signal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from pydantic import ValidationError
from scipy import stats as sps

from conftest import SHRINK_PHASE_H, shrink_overrides
from sao_env.cli import main
from sao_env.errors import UserError
from sao_env.experiment import progress
from sao_env.grid import (LEDGER, Grid, GridRun, GridSpec, Ledger, axis_text, figure_caption, grid_command, grid_table, load_grid,
                          plan_grid, reuse_decision, run_grid, time_left, write_grid)
from sao_env.leaderboard import maps
from sao_env.leaderboard.site import write_site

REPO = Path(__file__).resolve().parents[1]
FIXED_CODE = {"git_commit": "0" * 40, "dirty": False, "diff_sha256": None, "sao_env": "test"}
"""The code version recorded and compared here: other edits to the tree between two calls must not
decide whether a run is reused."""
AXIS = "env.latency.task_sigma"


def tiny_spec(**changes) -> dict:
    spec = {"title": "tiny grid", "scenarios": ["style-drift"], "seeds": [0, 1], "baseline": "grpo",
            "cut": shrink_overrides("grpo"), "axes": {AXIS: [0.0, 1.0]},
            "rows": [{"label": "grpo", "agent": "grpo"}, {"label": "running mean", "agent": "running_mean"}]}
    return spec | changes


def write_spec(folder: Path, spec: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "grid.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("changes, message", [
    ({"sedes": [0]}, "unknown key 'sedes'"),
    ({"rows": [{"label": "grpo", "agent": "grpo", "overides": []}]}, "unknown key 'rows.0.overides'"),
    ({"baseline": "sao"}, "baseline 'sao' is not a row label (grpo, running mean)"),
    ({"seeds": []}, "seeds: at least one seed is needed"),
    ({"seeds": [0, 0]}, "seeds must be distinct non-negative integers"),
    ({"scenarios": []}, "scenarios: at least one scenario is needed"),
    ({"rows": [{"label": "grpo", "agent": "grpo"}, {"label": "grpo", "agent": "sao"}]}, "the label 'grpo' is used twice"),
    ({"axes": {"seed": [0, 1]}}, "seed is not an axis"),
    ({"axes": {AXIS: []}}, f"axis {AXIS} has no values"),
    ({"axes": {"env.max_new_tokens": [20, 24]}}, "axis env.max_new_tokens is also set by the cut"),
    ({"cut": ["env.max_new_tokens"]}, "'env.max_new_tokens' is not of the form key=value"),
    ({"axes": {"env.latency.nonsense": [1, 2]}}, "unknown override key"),
    ({"contrasts": ["grpo"]}, "contrasts: 'grpo' is not 'a - b'"),
    ({"contrasts": ["grpo - sao"]}, "contrasts: 'sao' is not a row label (grpo, running mean)"),
    ({"contrasts": ["grpo - grpo"]}, "contrasts: 'grpo - grpo' compares a row with itself"),
    ({"test": "wilcoxon"}, "test: Input should be 'sign-flip' or 't'"),
    ({"rows": [{"label": "grpo", "agent": "grpo"}, {"label": "again", "agent": "grpo"}]},
     "resolves to the same configuration as scenario style-drift, row 'grpo'"),
])
def test_a_bad_grid_is_one_line_and_exit_2(capsys, tmp_path, changes, message):
    path = write_spec(tmp_path, tiny_spec(**changes))
    code = main(["grid", str(path), "--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("sao-env: error: ") and message in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()


def test_bad_options_and_files_are_one_line(capsys, tmp_path):
    path = write_spec(tmp_path, tiny_spec())
    for args, message in ([str(tmp_path / "none.yaml")], "cannot read the grid"), \
                         ([str(path), "--seeds", "0,x"], "--seeds must be comma-separated integers"), \
                         ([str(path), "--figure", "bars"], "--figure must be one of value, difference"):
        assert main(["grid", *args, "--out", str(tmp_path / "out"), "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "style-drift-runs.csv").write_text("env,label\n")
    assert main(["grid", str(path), "--out", str(boards), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {boards} holds a leaderboard (style-drift-runs.csv)" in err, err
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(UserError, match="a grid is a mapping"):
        load_grid(tmp_path / "list.yaml")


def test_the_committed_ablation_grid_is_valid():
    spec = load_grid(REPO / "leaderboards" / "ablations" / "grid.yaml")
    assert spec.baseline == "sao" and spec.scenarios == ["style-drift", "tool-drift"]
    assert spec.seeds == list(range(10)) and len(spec.rows) == 15 and not spec.axes
    assert spec.rows[0].label == "sao" and spec.rows[0].overrides == []


def test_the_committed_regime_map_spans_1x_to_50x_tails_in_both_regimes():
    """leaderboards/regimes/grid.yaml: the heterogeneity axis's p99/median (computed from the latency
    model itself) runs from 1x to 50x, every arm resolves at every point, and only the axis keys differ
    from the shipped scenario."""
    grid = plan_grid(load_grid(REPO / "leaderboards" / "regimes" / "grid.yaml"))
    spec = grid.spec
    assert spec.baseline == "grpo" and len(spec.seeds) >= 5 and len(grid.runs) == 9 * 5 * 2 * len(spec.seeds)
    recipes = {r.row: r.plan.config.agent for r in grid.runs}
    assert set(recipes) == {"sync_grpo", "sync_sao", "grpo", "grpo_dis", "sao", "sao_critic_parallel",
                            "sao_streaming", "running_mean", "sao_critic5x"}
    assert {r.label: r.agent for r in spec.rows}["sao_critic5x"] == "sao"
    for label in ("sao", "sync_sao", "sao_critic_parallel"):  # made with the critic at the actor's lr
        assert recipes[label].hparams["critic_lr"] == recipes[label].hparams["lr"] == 1e-4
    assert recipes["sao_critic5x"].hparams["critic_lr"] == 5 * recipes["sao_critic5x"].hparams["lr"]
    ratios = []
    for sigma in spec.axis_values["env.latency.env_sigma"]:
        run = next(r for r in grid.runs if r.row == "sao" and r.point[0] == axis_text(sigma))
        latency = run.plan.config.env.latency
        assert latency.env_sigma == float(sigma) and latency.env_median_s == 4.0 and latency.task_sigma == 0.0
        ratios.append(latency.from_normal(1.0, float(sps.norm.ppf(0.99))))
    assert ratios[0] == 1.0 and ratios[-1] == pytest.approx(50, rel=0.01) and ratios == sorted(ratios)
    assert {r.plan.config.env.latency.update_s_per_token for r in grid.runs} == {0.0005, 0.008}
    # a cell can be supported at all: after Holm over the 7 comparisons with the baseline, the
    # exact sign-flip test would need 7 x 2 / 2^n <= 0.05; otherwise the grid must use the t-test
    assert spec.test == "t" or (len(spec.rows) - 1) * 2 / 2 ** len(spec.seeds) <= 0.05
    assert grid_command(grid, Path("out"), figure="difference", lines=True) == \
        "sao-env grid grid.yaml --out out --figure difference --lines"
    assert figure_caption(grid, "difference", lines=True) == (
        "online reward minus grpo at the same axis point, paired by seed against env.latency.env_sigma: line, the mean "
        "over seeds; band, its 95% t-interval; one panel per scenario and value of the other axes.")
    assert figure_caption(grid, "value").endswith("one panel per scenario and row.")


def test_the_stress_follow_up_is_the_maps_cap_64_cells_at_10_seeds():
    """leaderboards/stress/cap64.yaml: every cell resolves to the configuration of the stress map's cell
    at cap 64, lr 1e-4 (same loss and mismatch), seed for seed, and 10 seeds let the sign-flip test support
    a row after Holm over its 5 comparisons with DIS."""
    follow = plan_grid(load_grid(REPO / "leaderboards" / "stress" / "cap64.yaml"))
    stress = plan_grid(load_grid(REPO / "leaderboards" / "stress" / "grid.yaml"))
    axes = stress.axes
    at = {(r.row, r.point[axes.index("agent.runtime.rollout_mismatch")], r.seed): r.plan.config_hash
          for r in stress.runs if r.point[axes.index("agent.runtime.max_staleness")] == "64"
          and float(r.point[axes.index("agent.hparams.lr")]) == 1e-4}
    assert len(follow.runs) == 120 and follow.spec.seeds == list(range(10))
    for run in follow.runs:
        if run.seed <= 2:
            assert at[(run.row, run.point[0], run.seed)] == run.plan.config_hash
    assert (len(follow.spec.rows) - 1) * 2 / 2 ** len(follow.spec.seeds) <= 0.05


def test_the_committed_stress_map_crosses_every_loss_with_staleness_lr_and_mismatch():
    grid = plan_grid(load_grid(REPO / "leaderboards" / "stress" / "grid.yaml"))
    spec = grid.spec
    losses = {r.row: r.plan.config.agent.hparams.get("loss", "dis") for r in grid.runs}  # sao's default: dis
    assert losses == {"dis": "dis", "ppo_clip": "ppo_clip", "tis": "tis", "mis_token": "mis_token",
                      "mis_seq": "mis_seq", "gspo": "gspo", "pg": "pg"}
    caps = {r.plan.config.agent.runtime.max_staleness for r in grid.runs}
    assert min(caps) == 0 and max(caps) >= 64
    lrs = {r.plan.config.agent.hparams["lr"] for r in grid.runs}
    assert max(lrs) >= 10 * min(lrs) == 10 * 1e-4
    assert {r.plan.config.agent.runtime.rollout_mismatch for r in grid.runs} == {"none", "logit_noise"}
    assert all(r.plan.config.env.rollout_slots == 64 for r in grid.runs) and len(spec.seeds) >= 3


# ----------------------------------------------------------------------------- statistics on a hand-made table


def hand_table() -> pd.DataFrame:
    """Three rows x two axis points x four seeds with known values; row c collapses once."""
    rng = np.random.default_rng(7)
    rows = []
    for point in ("0.5", "2"):
        for label, shift in (("a", 0.0), ("b", 0.3), ("c", -0.05)):
            for seed in range(4):
                rows.append({"scenario": "s", "row": label, "x": point, "seed": seed, "config_hash": label + point,
                             "code_version": "v", "run_dir": "", "agent": label, "overrides": "",
                             "collapsed": float(label == "c" and seed == 1), "collapsed_phases": "",
                             "online_reward": 0.1 * seed + shift + float(rng.normal(0, 0.005)),
                             "auc": float(rng.uniform())})
    return pd.DataFrame(rows)


def test_aggregate_matches_numpy_on_a_hand_made_table():
    table = hand_table()
    agg = maps.aggregate(table, axes=["x"], rows=["a", "b", "c"], baseline="a", metric="online_reward")
    assert list(zip(agg["x"], agg["row"])) == [("0.5", "a"), ("0.5", "b"), ("0.5", "c"), ("2", "a"), ("2", "b"), ("2", "c")]
    t = sps.t.ppf(0.975, 3)
    for _, cell in agg.iterrows():
        mine = table[(table["x"] == cell["x"]) & (table["row"] == cell["row"])].sort_values("seed")
        base = table[(table["x"] == cell["x"]) & (table["row"] == "a")].sort_values("seed")
        v = mine["online_reward"].to_numpy()
        assert cell["online_reward"] == pytest.approx(v.mean())
        assert cell["online_reward_ci95"] == pytest.approx(t * v.std(ddof=1) / 2)
        d = v - base["online_reward"].to_numpy()
        if cell["row"] == "a":
            assert math.isnan(cell["online_reward_diff"]) and math.isnan(cell["mde"])
            continue
        assert cell["online_reward_diff"] == pytest.approx(d.mean())
        assert cell["online_reward_diff_ci95"] == pytest.approx(t * d.std(ddof=1) / 2)
        assert cell["online_reward_diff_n"] == 4
        # Two comparisons with the baseline at the point: the sign-flip test's smallest p at 4 seeds,
        # 2/16, is above Holm's first step 0.05/2, so no difference is detectable at this n.
        assert cell["mde"] == math.inf
        # 4 seeds, every difference of one sign: the exact sign-flip p is 2 / 16; Holm over 3 pairs
        assert cell["p"] == pytest.approx(0.125)
    assert list(agg["collapses"]) == [0, 0, 1, 0, 0, 1] and set(agg["collapse_checked"]) == {4}
    # b is 0.3 above a and c on every seed, but 4 seeds cannot support any order: every rank a tie.
    assert list(agg["rank"][:3]) == [2, 1, 3] and set(agg["rank_text"]) == {"1–3"}


def test_ranks_are_supported_with_enough_seeds():
    rows = [{"scenario": "s", "row": label, "seed": seed, "config_hash": label, "code_version": "v", "run_dir": "",
             "agent": label, "overrides": "", "online_reward": seed * 0.01 + shift}
            for label, shift in (("base", 0.0), ("up", 0.2)) for seed in range(7)]
    agg = maps.aggregate(pd.DataFrame(rows), axes=[], rows=["base", "up"], baseline="base", metric="online_reward")
    assert list(agg["rank_text"]) == ["2", "1"]  # 7 seeds, one pair: p = 2 / 128 < 0.05
    assert agg.loc[1, "p_holm"] == pytest.approx(2 / 128) and agg.loc[1, "online_reward_diff"] == pytest.approx(0.2)
    header, body = maps.display_table(agg, axes=[], baseline="base", metric="online_reward")
    assert body[1][header.index("− base (paired, 95% CI)")] == "+0.200 ± 0.000 (n=7)"
    assert body[0][header.index("− base (paired, 95% CI)")] == "baseline"


# ----------------------------------------------------------------------------- the tiny real grid


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The tiny grid, run once uninterrupted: (grid, per-seed table, report, output paths, folder)."""
    root = tmp_path_factory.mktemp("grid")
    path = write_spec(root, tiny_spec(contrasts=["running mean - grpo"]))
    grid = plan_grid(load_grid(path), source=path, runs_dir=root / "runs")
    lines: list[str] = []
    report = run_grid(grid, jobs=1, code=FIXED_CODE, report=lines.append, ledger=Ledger(root / "out" / LEDGER))
    table = grid_table(grid)
    paths = write_grid(grid, table, root / "out", command=grid_command(grid, root / "out"))
    return grid, table, report, paths, root, lines


@pytest.mark.slow
def test_grid_runs_every_cell_and_the_per_seed_rows_are_the_summaries(made):
    grid, table, report, paths, root, lines = made
    assert len(grid.runs) == 8 and len(report.made) == 8 and not report.reused
    assert [line.split("]")[0] for line in lines if line.startswith("[")] == [f"[{i}/8" for i in range(1, 9)]
    assert all("elapsed 0:" in line for line in lines if line.startswith("["))
    finished = [line for line in lines if line.startswith("[")]
    assert all(re.search(r", about 0:\d\d:\d\d left  ", line) for line in finished[:-1]), finished
    assert " left  " not in finished[-1]
    csv = pd.read_csv(paths["per_seed"], dtype={AXIS: str, "code_version": str, "config_hash": str})
    assert list(zip(csv["row"], csv[AXIS], csv["seed"])) == [
        (r, x, s) for r in ("grpo", "running mean") for x in ("0.0", "1.0") for s in (0, 1)]
    assert csv["config_hash"].nunique() == 4 and set(csv["code_version"]) == {"000000000000"}
    for _, row in csv.iterrows():
        summary = json.loads((Path(row["run_dir"]) / "summary.json").read_text())
        assert summary["seed"] == row["seed"]
        assert summary["provenance"]["overrides"] == [*shrink_overrides("grpo"), f"{AXIS}={row[AXIS]}"]
        numbers = {k: v for k, v in summary.items() if isinstance(v, (int, float)) and k != "seed"}
        assert numbers and all(row[k] == pytest.approx(v, rel=1e-5, nan_ok=True) for k, v in numbers.items())
    # The axis is a real knob: the task factor changes what runs.
    on = csv[(csv["row"] == "grpo") & (csv["seed"] == 0)]
    assert on.iloc[0]["episodes_completed"] != on.iloc[1]["episodes_completed"] or \
        on.iloc[0]["online_reward"] != on.iloc[1]["online_reward"]


@pytest.mark.slow
def test_the_aggregate_is_the_per_seed_table_by_numpy(made):
    grid, table, report, paths, root, lines = made
    csv = pd.read_csv(paths["per_seed"], dtype={AXIS: str, "code_version": str, "config_hash": str})
    agg = pd.read_csv(paths["style-drift.csv"], dtype={AXIS: str})
    t = sps.t.ppf(0.975, 1)
    assert len(agg) == 4
    for _, cell in agg.iterrows():
        mine = csv[(csv["row"] == cell["row"]) & (csv[AXIS] == cell[AXIS])].sort_values("seed")
        base = csv[(csv["row"] == "grpo") & (csv[AXIS] == cell[AXIS])].sort_values("seed")
        v = mine["online_reward"].to_numpy()
        assert cell["online_reward"] == pytest.approx(v.mean(), abs=1e-6)
        assert cell["online_reward_ci95"] == pytest.approx(t * v.std(ddof=1) / math.sqrt(2), abs=1e-5)
        assert cell["n"] == 2 and cell["collapses"] == mine["collapsed"].sum()
        if cell["row"] != "grpo":
            d = v - base["online_reward"].to_numpy()
            assert cell["online_reward_diff"] == pytest.approx(d.mean(), abs=1e-6)
            assert cell["online_reward_diff_ci95"] == pytest.approx(t * d.std(ddof=1) / math.sqrt(2), abs=1e-5)
            assert cell["mde"] == math.inf  # 2 seeds: the sign-flip test's smallest p is 0.5
    md = paths["style-drift.md"].read_text()
    assert "`sao-env grid " in md and "`env.latency.task_sigma` in {0.0, 1.0}" in md
    assert "- **seeds**: 0, 1; n per cell: 2" in md and f"`env.phases.0.duration_h={SHRINK_PHASE_H}`" in md
    running = agg[(agg["row"] == "running mean") & (agg[AXIS] == "1.0")].iloc[0]
    assert f"{running['online_reward_diff']:+.3f} ± {running['online_reward_diff_ci95']:.3f} (n=2)" in md
    assert paths["figure"].stat().st_size > 10_000
    manifest = json.loads(paths["manifest"].read_text())
    assert manifest["axis_values"] == {AXIS: ["0.0", "1.0"]} and manifest["baseline"] == "grpo"
    assert manifest["contrasts"] == ["running mean - grpo"] and manifest["test"] == "sign-flip"
    named = pd.read_csv(paths["style-drift-contrasts.csv"], dtype={AXIS: str})
    assert list(zip(named[AXIS], named["contrast"])) == [("0.0", "running mean − grpo"), ("1.0", "running mean − grpo")]
    for _, c in named.iterrows():  # the contrast with the baseline is the aggregate's own difference
        same = agg[(agg["row"] == "running mean") & (agg[AXIS] == c[AXIS])].iloc[0]
        assert c["online_reward_diff"] == pytest.approx(same["online_reward_diff"])
        assert c["p"] == pytest.approx(same["p"]) and c["p_holm"] == pytest.approx(same["p"])  # one contrast
    assert "## Contrasts" in md and f"{named.iloc[1]['online_reward_diff']:+.3f} ± " in md.split("## Contrasts")[1]


@pytest.mark.slow
def test_a_second_grid_reuses_every_run(made, monkeypatch, capsys):
    from sao_env import provenance

    grid, table, report, paths, root, lines = made
    again = run_grid(plan_grid(grid.spec, source=grid.source, runs_dir=root / "runs"), jobs=1, code=FIXED_CODE)
    assert again.made == [] and len(again.reused) == 8
    pd.testing.assert_frame_equal(grid_table(grid), table)
    monkeypatch.setattr(provenance, "code_version", lambda: FIXED_CODE)
    out = root / "again"
    args = ["grid", str(grid.source), "--out", str(out), "--runs-dir", str(root / "runs"), "--jobs", "1"]
    assert main([*args, "--dry-run"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == "8 runs: 0 to run, 8 to reuse"
    assert sum(line.startswith("reuse  style-drift | ") for line in listed) == 8
    assert f"  {out / 'per-seed.csv'}" in listed and not out.exists()
    assert main([*args, "--metric", "nonsense"]) == 2  # checked on the reused runs before anything runs
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metric 'nonsense' is not in the runs' summaries (known: online_reward, auc" in err
    assert main([*args, "--figure", "difference"]) == 0
    log = (out / "grid.log").read_text()
    assert "reusing 8 of 8 runs" in log and "0 runs made, 8 reused" in log and "--figure difference" in log
    pd.testing.assert_frame_equal(pd.read_csv(out / "per-seed.csv"), pd.read_csv(paths["per_seed"]))


@pytest.mark.slow
def test_the_ledger_carries_a_grid_to_a_checkout_without_its_run_directories(made, tmp_path, monkeypatch, capsys):
    """The ledger the grid wrote as each run ended lists every run in the order it finished; a checkout
    without the run directories (another --runs-dir) reuses all 8 from it and writes the same tables."""
    from sao_env import provenance

    grid, table, report, paths, root, lines = made
    made_ledger = root / "out" / LEDGER
    records = [json.loads(line) for line in made_ledger.read_text().splitlines()]
    assert [r["config_hash"] for r in records] == [run.plan.config_hash for run in report.made]
    assert {r["code"] for r in records} == {"000000000000"}
    first = records[0]
    summary = json.loads((report.made[0].plan.out / "summary.json").read_text())
    assert first["numbers"]["online_reward"] == summary["online_reward"]  # the exact float, not a rounding
    assert first["row"]["point"] == list(report.made[0].point) and first["row"]["seed"] == report.made[0].seed

    elsewhere = plan_grid(grid.spec, source=grid.source, runs_dir=tmp_path / "no-runs")
    ledger = Ledger(made_ledger)
    pd.testing.assert_frame_equal(grid_table(elsewhere, ledger=ledger, code=FIXED_CODE), table)
    other_code = {**FIXED_CODE, "git_commit": "1" * 40}
    assert reuse_decision(elsewhere.runs[0], other_code, ledger) == (None, "new")
    with pytest.raises(UserError, match="the run did not finish"):
        grid_table(elsewhere, ledger=Ledger(tmp_path / "absent.jsonl"))

    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(made_ledger, out / LEDGER)
    monkeypatch.setattr(provenance, "code_version", lambda: FIXED_CODE)
    args = ["grid", str(grid.source), "--out", str(out), "--runs-dir", str(tmp_path / "no-runs"), "--jobs", "1"]
    assert main([*args, "--dry-run"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[0] == "8 runs: 0 to run, 8 to reuse"
    assert sum(line.endswith("listed in finished.jsonl with the same configuration and code (000000000000)")
               for line in listed) == 8
    assert main(args) == 0
    log = (out / "grid.log").read_text()
    assert f"reusing 8 of 8 runs (finished with the same configuration and code); 8 of them from {out / LEDGER}" in log
    assert "0 runs made, 8 reused" in log and not (tmp_path / "no-runs").exists()
    assert (out / "per-seed.csv").read_bytes() == paths["per_seed"].read_bytes()
    assert (out / "style-drift.csv").read_bytes() == paths["style-drift.csv"].read_bytes()
    assert (out / LEDGER).read_bytes() == made_ledger.read_bytes()  # nothing added for runs it already lists


@pytest.mark.slow
def test_a_torn_last_line_is_replaced_and_a_foreign_line_refused(made, tmp_path):
    grid, table, report, paths, root, lines = made
    path = tmp_path / LEDGER
    whole = (root / "out" / LEDGER).read_text()
    path.write_text(whole + '{"config_hash": "ab')  # a kill in the middle of a write
    ledger = Ledger(path)
    assert len(ledger) == 8
    ledger.add(report.made[0], "feedfeedfeed")
    again = path.read_text().splitlines()
    assert len(again) == 9 and "\n".join(again[:8]) + "\n" == whole
    assert json.loads(again[8])["code"] == "feedfeedfeed" and len(Ledger(path)) == 9
    assert Ledger(path).get(report.made[0].plan) == json.loads(again[8])  # no code given: the last recorded
    assert Ledger(path).get(report.made[0].plan, "000000000000") == json.loads(again[0])
    path.write_text(whole.replace("\n", "\nnot json\n", 1))
    with pytest.raises(UserError) as err:
        Ledger(path)
    assert str(err.value) == (f"{path}:2: not a finished run's record (a JSON object with config_hash, code, row and "
                              "numbers); the ledger is only written by sao-env grid")


@pytest.mark.slow
def test_tables_only_writes_the_finished_rows_from_the_ledger_and_names_the_rest(made, tmp_path, monkeypatch, capsys):
    """--tables-only makes no run: from a ledger of other code it writes the tables the grid wrote; with
    the running-mean row half finished it leaves that row (and its contrast) out and says so in the
    Markdown, the manifest and the site; with the baseline unfinished it refuses in one line."""
    from sao_env import provenance

    grid, table, report, paths, root, lines = made
    monkeypatch.setattr(provenance, "code_version", lambda: {**FIXED_CODE, "git_commit": "1" * 40})
    records = (root / "out" / LEDGER).read_text().splitlines(keepends=True)
    runs_dir = tmp_path / "no-runs"

    def tables_only(out: Path, kept: list[str]) -> int:
        out.mkdir()
        (out / LEDGER).write_text("".join(kept))
        return main(["grid", str(grid.source), "--out", str(out), "--runs-dir", str(runs_dir), "--tables-only"])

    whole = tmp_path / "whole"
    assert tables_only(whole, records) == 0
    assert (whole / "per-seed.csv").read_bytes() == paths["per_seed"].read_bytes()
    assert (whole / "style-drift.csv").read_bytes() == paths["style-drift.csv"].read_bytes()
    assert (whole / "style-drift-contrasts.csv").read_bytes() == paths["style-drift-contrasts.csv"].read_bytes()
    assert "Provisional" not in (whole / "style-drift.md").read_text() and not runs_dir.exists()
    assert "left_out" not in json.loads((whole / maps.MANIFEST).read_text())

    running = {run.plan.config_hash for run in grid.runs if run.row == "running mean"}
    half = [r for r in records if json.loads(r)["config_hash"] not in running] + \
           [r for r in records if json.loads(r)["config_hash"] in running][:2]
    part = tmp_path / "part"
    assert tables_only(part, half) == 0
    per_seed = pd.read_csv(part / "per-seed.csv")
    expected = pd.read_csv(paths["per_seed"])
    pd.testing.assert_frame_equal(per_seed, expected[expected["row"] == "grpo"].reset_index(drop=True), check_dtype=False)
    md = (part / "style-drift.md").read_text()
    assert "**Provisional**: the rows not yet finished are left out: running mean (2 of 4 runs)." in md
    assert "## Contrasts" not in md and not (part / "style-drift-contrasts.csv").exists()
    manifest = json.loads((part / maps.MANIFEST).read_text())
    assert manifest["left_out"] == {"running mean": [2, 4]} and manifest["contrasts"] == []
    assert [r["label"] for r in manifest["rows"]] == ["grpo"]
    assert "Provisional: the rows not yet finished are left out: running mean (2 of 4 runs)." in maps.maps_section(tmp_path)
    assert (part / LEDGER).read_text() == "".join(half)  # read, never written
    from sao_env.leaderboard.summary import grid_lines
    pd.DataFrame({"id": ["P1", "P2", "P3", "P4"], "verdict": ["not resolved", "held", "failed", "held"]}).to_csv(
        whole / "verdict.csv", index=False)
    listed = {line.split("|")[5].strip().split("](")[1].split("/")[0]: line for line in grid_lines(tmp_path)
              if line.startswith("| tiny grid")}
    assert listed["part"].endswith("| 1 x 2 x 2 | grpo | sign-flip | [style-drift](part/style-drift.md) (provisional: "
                                   "running mean 2 of 4 runs left out) | none |")
    assert listed["whole"].endswith("| 2 x 2 x 2 | grpo | sign-flip | [style-drift](whole/style-drift.md) | "
                                    "[2 held, 1 failed, 1 not resolved](whole/verdict.md) |")
    assert "left out: running mean (2 of 4 runs)" in (part / "grid.log").read_text()

    capsys.readouterr()
    baseline = {run.plan.config_hash for run in grid.runs if run.row == "grpo"}
    assert tables_only(tmp_path / "none", [r for r in records if json.loads(r)["config_hash"] not in baseline][:3]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the baseline 'grpo' has 0 of 4 runs finished" in err, err
    assert main(["grid", str(grid.source), "--out", str(tmp_path / "x"), "--tables-only", "--dry-run"]) == 2
    assert "--tables-only makes no run; it does not go with --dry-run" in capsys.readouterr().err


def _forget_parents_workers() -> None:
    """In a forked child: the parent's math-grading workers and their fork server are not its own."""
    from multiprocessing import forkserver

    from sao_env.graders import math as math_grader

    math_grader._POOLS.clear()
    server = forkserver._forkserver
    server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None


@pytest.mark.slow
def test_an_interrupted_grid_resumes_to_the_same_table(made, tmp_path, monkeypatch, capsys):
    """A child process runs a grid of the grpo row at seed 0 (two runs, one per axis value) and is
    killed (SIGKILL) inside the second run, after its first checkpoints; ``sao-env grid`` run again
    reuses the first run, resumes the second from its checkpoint, logs it, and ends with the
    uninterrupted grid's rows."""
    import torch

    from sao_env import provenance
    from sao_env.runtime.checkpoint import CheckpointEvery

    grid, table, report, paths, *_ = made
    path = write_spec(tmp_path, tiny_spec(seeds=[0], rows=[{"label": "grpo", "agent": "grpo"}]))
    mine = plan_grid(load_grid(path), source=path, runs_dir=tmp_path / "runs")

    def child() -> None:
        _forget_parents_workers()
        step, calls = torch.optim.Adam.step, [0]

        def killing_step(self, *a, **k):
            out = step(self, *a, **k)
            calls[0] += 1
            if calls[0] == 6:
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        def arm(run, summary, seconds) -> None:
            torch.optim.Adam.step = killing_step

        run_grid(mine, jobs=1, code=FIXED_CODE, on_done=arm, checkpoint_every=CheckpointEvery(updates=2))
        os._exit(0)

    process = multiprocessing.get_context("fork").Process(target=child)
    process.start()
    process.join()
    assert process.exitcode == -signal.SIGKILL
    monkeypatch.setattr(provenance, "code_version", lambda: FIXED_CODE)
    args = ["grid", str(path), "--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs"), "--jobs", "1",
            "--checkpoint-every", "2u"]
    assert main([*args, "--dry-run"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if not line.startswith("cost: ")]
    first, second = (run.plan.out for run in mine.runs)
    assert listed[1].startswith(f"reuse  style-drift | grpo {AXIS}=0.0 | seed 0  {first}  finished with the same")
    assert listed[2].startswith(f"run    style-drift | grpo {AXIS}=1.0 | seed 0  {second}  unfinished; resumes from "
                                "its checkpoint at simulated"), listed
    monkeypatch.setattr(progress, "RUN_AMONG_OTHERS_EVERY_S", 0.0)  # a line at every report, not every 300 s
    assert main(args) == 0
    err = capsys.readouterr().err
    shares = [int(m.group(1)) for m in re.finditer(r"^sao-env: grpo on style-drift seed 0: (\d+)% t=\S+h ep=\d+ ", err, re.M)]
    assert len(shares) > 10 and shares == sorted(shares) and shares[-1] <= 100, err[-2000:]
    assert "started," not in err and "simulated to its end" not in err  # the grid's own lines say that
    log = (tmp_path / "out" / "grid.log").read_text().splitlines()
    assert log[1] == "reusing 1 of 2 runs (finished with the same configuration and code)"
    assert log[2].startswith(f"[1/1] style-drift | grpo {AXIS}=1.0 | seed 0: online_reward ") and "elapsed 0:" in log[2]
    assert log[3].startswith("1 runs made, 1 reused; wrote ")
    text = {"code_version": str, "config_hash": str, AXIS: str}
    after = pd.read_csv(tmp_path / "out" / "per-seed.csv", dtype=text).drop(columns=["run_dir"])
    before = pd.read_csv(paths["per_seed"], dtype=text)
    before = before[(before["seed"] == 0) & (before["row"] == "grpo")].drop(columns=["run_dir"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(after, before, check_dtype=False)  # a column of whole numbers reads back as int


# ----------------------------------------------------------------------------- figure and site


def test_figures_for_no_one_and_two_axes(tmp_path):
    table = hand_table()
    two = pd.concat([table.assign(y="p"), table.assign(y="q", online_reward=table["online_reward"] + 0.1)],
                    ignore_index=True)
    for axes, frame in (([], table[table["x"] == "2"]), (["x"], table), (["x", "y"], two)):
        agg = maps.aggregate(frame, axes=axes, rows=["a", "b", "c"], baseline="a", metric="online_reward")
        for difference in (False, True):
            path = maps.plot_map(agg, tmp_path / f"{len(axes)}-{difference}.png", axes=axes, rows=["a", "b", "c"],
                                 baseline="a", metric="online_reward", difference=difference)
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_two_axes_as_lines_draw_each_row_against_the_first_a_panel_per_value_of_the_second(tmp_path, monkeypatch):
    """--lines: the y = p and y = q panels each hold rows a, b, c against x at their aggregate means;
    without it, a heatmap per row."""
    import matplotlib.pyplot as plt

    table = hand_table()
    two = pd.concat([table.assign(y="p"), table.assign(y="q", online_reward=table["online_reward"] + 0.1)],
                    ignore_index=True)
    agg = maps.aggregate(two, axes=["x", "y"], rows=["a", "b", "c"], baseline="a", metric="online_reward")
    drawn = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (drawn.append(fig), close(fig)))
    for lines in (True, False):
        maps.plot_map(agg, tmp_path / f"{lines}.png", axes=["x", "y"], rows=["a", "b", "c"], baseline="a",
                      metric="online_reward", lines=lines)
    as_lines, as_heatmaps = ([ax for ax in fig.axes if ax.axison and ax.get_label() != "<colorbar>"] for fig in drawn)
    assert [ax.get_title() for ax in as_lines] == ["s\ny=p", "s\ny=q"]
    for ax, y in zip(as_lines, ("p", "q")):
        assert [line.get_label() for line in ax.get_lines()] == ["a", "b", "c"]
        for line in ax.get_lines():
            cells = agg[(agg["row"] == line.get_label()) & (agg["y"] == y)]
            assert list(line.get_ydata()) == pytest.approx(list(cells["online_reward"]))
            assert list(line.get_xdata()) == [0.5, 2.0]
    assert [ax.get_title() for ax in as_heatmaps if ax.images] == ["s: a", "s: b", "s: c"]


def test_more_metrics_beside_the_grids_by_hand(tmp_path):
    """show: [auc]: each cell's mean ± CI, and for rows b and c the paired difference to a, from numpy."""
    table = hand_table()
    agg = maps.aggregate(table, axes=["x"], rows=["a", "b", "c"], baseline="a", metric="online_reward")
    header, body = maps.metrics_table(agg, axes=["x"], baseline="a", metrics=["auc"])
    assert header == ["x", "row", "AUC"]
    t = sps.t.ppf(0.975, 3)
    for (x, row, cell) in body:
        v = table[(table["x"] == x) & (table["row"] == row)].sort_values("seed")["auc"].to_numpy()
        text = f"{v.mean():.3f} ± {t * v.std(ddof=1) / 2:.3f}"
        if row != "a":
            d = v - table[(table["x"] == x) & (table["row"] == "a")].sort_values("seed")["auc"].to_numpy()
            text += f"; {d.mean():+.3f} ± {t * d.std(ddof=1) / 2:.3f} (n=4)"
        assert cell == text


@pytest.mark.slow
def test_show_puts_more_metrics_in_the_markdown_and_refuses_an_unknown_one(made, tmp_path):
    grid, table, report, paths, root, lines = made
    shown = plan_grid(GridSpec(**(grid.spec.model_dump() | {"show": ["episodes_per_hour", "auc"]})),
                      source=grid.source, runs_dir=root / "runs")
    out = write_grid(shown, table, tmp_path / "out", command="c")
    md = out["style-drift.md"].read_text()
    agg = pd.read_csv(out["style-drift.csv"], dtype={AXIS: str})
    header, body = maps.metrics_table(agg, axes=[AXIS], baseline="grpo", metrics=["episodes_per_hour", "auc"],
                                      eval_tag="eval v3")
    assert header[-2:] == ["episodes / h", "AUC (eval v3)"]
    assert "## Beside online reward" in md and "| " + " | ".join(header) + " |" in md
    assert set(table["eval_version"]) == {3}
    assert "- **evaluation**: version 3 (one held-out set per phase fixed by the scenario, shared by every seed" in md
    assert all("| " + " | ".join(r) + " |" in md for r in body) and len(body) == 4
    cell = agg[(agg["row"] == "running mean") & (agg[AXIS] == "1.0")].iloc[0]
    assert f"{cell['auc']:.3f} ± {cell['auc_ci95']:.3f}; {cell['auc_diff']:+.3f} ± " in md
    assert json.loads(out["manifest"].read_text())["show"] == ["episodes_per_hour", "auc"]
    assert "running mean: beside" not in maps.maps_section(tmp_path) and "style-drift: beside online reward" in \
        maps.maps_section(tmp_path)
    wrong = plan_grid(GridSpec(**(grid.spec.model_dump() | {"show": ["reward_per_day"]})), source=grid.source,
                      runs_dir=root / "runs")
    with pytest.raises(UserError, match="show: metric 'reward_per_day' is not in the runs' summaries"):
        write_grid(wrong, table, tmp_path / "wrong", command="c")


def test_the_site_lists_the_maps_of_its_subfolders(tmp_path):
    board = tmp_path / "boards"
    where = board / "regimes"
    where.mkdir(parents=True)
    agg = maps.aggregate(hand_table(), axes=["x"], rows=["a", "b", "c"], baseline="a", metric="online_reward")
    agg.to_csv(where / "s.csv", index=False)
    maps.plot_map(agg, where / maps.FIGURE, axes=["x"], rows=["a", "b", "c"], baseline="a", metric="online_reward")
    (where / maps.MANIFEST).write_text(json.dumps({
        "title": "Regime map", "scenarios": ["s"], "rows": [{"label": x, "agent": x, "overrides": []} for x in "abc"],
        "axes": ["x"], "axis_values": {"x": ["0.5", "2"]}, "cut": [], "seeds": [0, 1, 2, 3], "baseline": "a",
        "metric": "online_reward", "command": "sao-env grid g.yaml --out boards/regimes", "contrasts": ["b - c"]}))
    named = maps.contrasts(hand_table(), axes=["x"], pairs=[("b", "c")], metric="online_reward")
    named.to_csv(where / "s-contrasts.csv", index=False)
    page = write_site(board, generator="test").read_text()
    bc = named[named["x"] == "2"].iloc[0]
    assert "s: contrasts</b> (b - c)" in page
    assert f"{bc['online_reward_diff']:+.3f} ± {bc['online_reward_diff_ci95']:.3f} (n=4)" in page.split("s: contrasts")[1]
    assert '<section id="maps">' in page and "Regime map" in page and '<a href="#maps">maps</a>' in page
    assert "sao-env grid g.yaml --out boards/regimes" in page and 'alt="map: regimes"' in page
    b = agg[(agg["row"] == "b") & (agg["x"] == "2")].iloc[0]
    assert f"{b['online_reward']:.3f} ± {b['online_reward_ci95']:.3f}" in page
    assert f"{b['online_reward_diff']:+.3f} ± {b['online_reward_diff_ci95']:.3f} (n=4)" in page
    empty = tmp_path / "plain"
    assert 'id="maps"' not in write_site(empty, generator="test").read_text()


def test_the_p_shown_is_holm_over_the_comparisons_with_the_baseline():
    """Four rows, 7 seeds, each row above the last on every seed: every exact sign-flip p is 2/128.
    Over the 3 comparisons with the baseline Holm gives 3 x 2/128 = 0.046875 (supported); over all 6
    pairs, 6 x 2/128 = 0.09375 (not)."""
    rows = [{"scenario": "s", "row": label, "seed": seed, "config_hash": label, "code_version": "v", "run_dir": "",
             "agent": label, "overrides": "", "online_reward": seed * 0.01 + shift}
            for label, shift in (("base", 0.0), ("b", 0.1), ("c", 0.2), ("d", 0.3)) for seed in range(7)]
    agg = maps.aggregate(pd.DataFrame(rows), axes=[], rows=["base", "b", "c", "d"], baseline="base",
                         metric="online_reward")
    assert list(agg["p"][1:]) == pytest.approx([2 / 128] * 3)
    assert list(agg["p_holm_baseline"][1:]) == pytest.approx([3 * 2 / 128] * 3)
    assert list(agg["p_holm"][1:]) == pytest.approx([6 * 2 / 128] * 3)
    assert math.isnan(agg.loc[0, "p_holm_baseline"])
    header, body = maps.display_table(agg, axes=[], baseline="base", metric="online_reward")
    column = header.index("p vs base (Holm)")
    assert [r[column] for r in body] == ["", *[maps.format_p(3 * 2 / 128)] * 3]


def test_a_grid_can_test_with_the_paired_t_test():
    """Five seeds where b is above the baseline on every seed by 0.10-0.14: the sign-flip p is 2/32
    (0.0625) and can never be supported; the paired t-test's p is scipy's ttest_rel, and the table
    says which test it shows."""
    shifts = [0.10, 0.12, 0.14, 0.11, 0.13]
    rows = [{"scenario": "s", "row": label, "seed": seed, "config_hash": label, "code_version": "v", "run_dir": "",
             "agent": label, "overrides": "", "online_reward": 0.3 + seed * 0.02 + (shifts[seed] if label == "b" else 0.0)}
            for label in ("base", "b") for seed in range(5)]
    table = pd.DataFrame(rows)
    flip = maps.aggregate(table, axes=[], rows=["base", "b"], baseline="base", metric="online_reward")
    t = maps.aggregate(table, axes=[], rows=["base", "b"], baseline="base", metric="online_reward", test="t")
    assert flip.loc[1, "p"] == pytest.approx(2 / 32) and flip.loc[1, "rank_text"] == "1–2"
    base = [r["online_reward"] for r in rows if r["row"] == "base"]
    b = [r["online_reward"] for r in rows if r["row"] == "b"]
    assert t.loc[1, "p"] == pytest.approx(sps.ttest_rel(b, base).pvalue, rel=1e-9)
    assert t.loc[1, "p_holm_baseline"] == pytest.approx(t.loc[1, "p"]) and t.loc[1, "rank_text"] == "1"
    header, _ = maps.display_table(t, axes=[], baseline="base", metric="online_reward", test="t")
    assert "p vs base (paired t, Holm)" in header
    with pytest.raises(ValidationError, match="test"):
        GridSpec(scenarios=["s"], seeds=[0], baseline="a", rows=[{"label": "a", "agent": "sao"}], test="wilcoxon")


def test_the_detectable_difference_is_stated_for_the_comparisons_with_the_baseline():
    """hand_table with the paired t-test (no floor): 2 comparisons with the baseline at each point, so
    MDE = (t(1 - 0.05/4, 3) + t(0.8, 3)) * sd / sqrt(4), and the table prints it."""
    table = hand_table()
    agg = maps.aggregate(table, axes=["x"], rows=["a", "b", "c"], baseline="a", metric="online_reward", test="t")
    for _, cell in agg[agg["row"] != "a"].iterrows():
        def seeds(label):
            return table[(table["x"] == cell["x"]) & (table["row"] == label)].sort_values("seed")["online_reward"].to_numpy()
        sd = (seeds(cell["row"]) - seeds("a")).std(ddof=1)
        assert cell["mde"] == pytest.approx((sps.t.ppf(1 - 0.0125, 3) + sps.t.ppf(0.8, 3)) * sd / 2)
    header, body = maps.display_table(agg, axes=["x"], baseline="a", metric="online_reward", test="t")
    assert body[1][header.index("detectable at n")] == f"{agg.loc[1, 'mde']:.3f}"
    flip = maps.aggregate(table, axes=["x"], rows=["a", "b", "c"], baseline="a", metric="online_reward")
    header, body = maps.display_table(flip, axes=["x"], baseline="a", metric="online_reward")
    assert body[1][header.index("detectable at n")] == "none"


def _ordered_rows(seeds: int = 7) -> pd.DataFrame:
    """Four rows, each above the last on every seed (noise far smaller than the steps of 0.1)."""
    noise = [0.0, 0.003, -0.002, 0.001, -0.003, 0.002, -0.001, 0.0025]
    return pd.DataFrame([{"scenario": "s", "row": label, "seed": seed, "config_hash": label, "code_version": "v",
                          "run_dir": "", "agent": label, "overrides": "", "collapsed": 0.0,
                          "online_reward": 0.3 + seed * 0.01 + shift + noise[(seed + k) % 8]}
                         for k, (label, shift) in enumerate((("base", 0.0), ("b", 0.1), ("c", 0.2), ("d", 0.3)))
                         for seed in range(seeds)])


def test_post_hoc_contrasts_are_their_own_family_and_say_so_everywhere(tmp_path):
    """7 seeds, every row above the last on every seed: every exact sign-flip p is 2/2^7 = 0.015625.
    The planned contrast c - b is alone in its family: Holm p 0.015625, supported. The post-hoc d - b is
    corrected over every pair of the 4 rows: 6 x 0.015625 = 0.09375, not supported, whatever else is
    named; and at 7 seeds the sign-flip test cannot reach 0.05/6 (2/128 > 0.00833): no detectable
    difference. The label "post hoc" is in the CSV, the Markdown and the site."""
    spec = GridSpec(title="post hoc", scenarios=["s"], seeds=list(range(7)), baseline="base",
                    rows=[{"label": x, "agent": x} for x in ("base", "b", "c", "d")],
                    contrasts=["c - b"], post_hoc=["d - b"])
    grid = Grid(spec, Path("grid.yaml"), ())
    table = _ordered_rows()
    out = tmp_path / "board" / "posthoc"
    paths = write_grid(grid, table, out, command="sao-env grid grid.yaml")
    named = pd.read_csv(paths["s-contrasts.csv"])
    assert list(zip(named["contrast"], named["family"], named["family_size"])) == [
        ("c − b", "planned", 1), ("d − b", "post hoc", 6)]
    planned, post = named.iloc[0], named.iloc[1]
    assert planned["p"] == pytest.approx(2 / 128) and planned["p_holm"] == pytest.approx(2 / 128)
    assert post["p"] == pytest.approx(2 / 128) and post["p_holm"] == pytest.approx(6 * 2 / 128)
    d = (table[table["row"] == "c"]["online_reward"].to_numpy() - table[table["row"] == "b"]["online_reward"].to_numpy())
    assert planned["mde"] == pytest.approx((sps.t.ppf(0.975, 6) + sps.t.ppf(0.8, 6)) * d.std(ddof=1) / math.sqrt(7))
    assert post["mde"] == math.inf
    md = paths["s.md"].read_text()
    planned_md, post_md = md.split("## Contrasts")[1].split("## Post-hoc contrasts")
    assert "d − b" not in planned_md and "| c − b | " in planned_md and "| 0.0156 |" in planned_md
    assert "post hoc" in post_md and "every pair of the 4 rows at the axis point (6 comparisons, Holm" in post_md
    assert "| d − b (post hoc) | " in post_md and "| none | 0.0938 |" in post_md
    assert json.loads(paths["manifest"].read_text())["post_hoc"] == ["d - b"]
    page = write_site(tmp_path / "board", generator="test").read_text()
    assert "s: post-hoc contrasts</b> (d - b; chosen after the results were read: post hoc" in page
    assert ">d − b (post hoc)</td>" in page and "Holm over every pair of rows: post hoc" in page
    assert "s: contrasts</b> (c - b)" in page


def test_a_pair_is_either_planned_or_post_hoc():
    rows = [{"label": x, "agent": x} for x in ("a", "b")]
    with pytest.raises(ValidationError, match="post_hoc: 'b - a' names the same pair of rows as contrasts 'a - b'"):
        GridSpec(scenarios=["s"], seeds=[0], baseline="a", rows=rows, contrasts=["a - b"], post_hoc=["b - a"])
    with pytest.raises(ValidationError, match="post_hoc: 'c' is not a row label"):
        GridSpec(scenarios=["s"], seeds=[0], baseline="a", rows=rows, post_hoc=["a - c"])


def test_named_contrasts_are_paired_differences_with_holm_over_the_contrasts():
    """hand_table: b is 0.3 above a, c 0.05 below, with small noise. The contrasts b - c and a - c at
    each axis point are numpy's paired differences; their t-test p is scipy's ttest_rel, and Holm
    runs over the two contrasts at the point (2 x the smaller p, then the larger if larger)."""
    table = hand_table()
    got = maps.contrasts(table, axes=["x"], pairs=[("b", "c"), ("a", "c")], metric="online_reward", test="t")
    assert list(zip(got["x"], got["contrast"])) == [("0.5", "b − c"), ("0.5", "a − c"), ("2", "b − c"), ("2", "a − c")]
    t975 = sps.t.ppf(0.975, 3)
    for x in ("0.5", "2"):
        def seeds(label):
            return table[(table["x"] == x) & (table["row"] == label)].sort_values("seed")["online_reward"].to_numpy()
        raw = []
        for name, (a, b) in (("b − c", ("b", "c")), ("a − c", ("a", "c"))):
            d = seeds(a) - seeds(b)
            cell = got[(got["x"] == x) & (got["contrast"] == name)].iloc[0]
            assert cell["online_reward_diff"] == pytest.approx(d.mean())
            assert cell["online_reward_diff_ci95"] == pytest.approx(t975 * d.std(ddof=1) / 2)
            assert cell["p"] == pytest.approx(sps.ttest_rel(seeds(a), seeds(b)).pvalue)
            raw.append(cell["p"])
        low, high = sorted(raw)
        cells = got[got["x"] == x].set_index("contrast")
        assert sorted(cells["p_holm"]) == pytest.approx([min(1, 2 * low), max(min(1, 2 * low), high)])
    header, body = maps.contrasts_display(got, axes=["x"], metric="online_reward", test="t")
    assert header[-1] == "p (paired t, Holm over the contrasts)"
    assert body[0][:2] == ["0.5", "b − c"] and body[0][2].endswith("(n=4)")


def test_the_collapse_figure_draws_the_share_of_seeds_that_collapsed(tmp_path):
    """hand_table: row c collapses at seed 1 of 4 at both axis points, a and b never."""
    agg = maps.aggregate(hand_table(), axes=["x"], rows=["a", "b", "c"], baseline="a", metric="online_reward")
    assert list(maps.collapse_rate(agg)) == [0.0, 0.0, 0.25, 0.0, 0.0, 0.25]
    unjudged = agg.assign(collapse_checked=0)
    assert maps.collapse_rate(unjudged).isna().all()
    value = maps.plot_map(agg, tmp_path / "value.png", axes=["x"], rows=["a", "b", "c"], baseline="a",
                          metric="online_reward")
    rate = maps.plot_map(agg, tmp_path / "collapse.png", axes=["x"], rows=["a", "b", "c"], baseline="a",
                         metric="online_reward", collapse=True)
    assert rate.stat().st_size > 10_000 and rate.read_bytes() != value.read_bytes()


def test_a_scenario_s_aggregate_leaves_out_the_other_scenario_s_phase_columns():
    table = hand_table()
    table["final_accuracy/1_v1"] = float("nan")  # a column that only another scenario's runs fill
    agg = maps.aggregate(table, axes=["x"], rows=["a", "b", "c"], baseline="a", metric="online_reward")
    assert "final_accuracy/1_v1" not in agg.columns and "auc" in agg.columns and "auc_diff" in agg.columns
    assert maps.metric_names(table, ["x"]) == ["online_reward", "auc"]


def test_evaluation_versions_and_which_metrics_they_mark():
    from sao_env.leaderboard.columns import eval_versions, evaluation_text, is_eval_metric

    assert eval_versions([float("nan"), 2.0, None, 2]) == [1, 2] and eval_versions([]) == []
    assert [m for m in ["online_reward", "auc", "auc_updates", "recovery_h/2_tag", "final_accuracy/1_boxed",
                        "forgetting/1_boxed", "time_to_threshold_h/1_boxed", "reward_per_hour", "staleness_mean"]
            if is_eval_metric(m)] == ["auc", "auc_updates", "recovery_h/2_tag", "final_accuracy/1_boxed",
                                      "forgetting/1_boxed", "time_to_threshold_h/1_boxed"]
    assert evaluation_text([1]).startswith("version 1 (held-out prompts and sampling streams shared by every seed")


def test_time_left_takes_each_run_at_its_cells_mean_else_its_rows_else_all_runs():
    """Hand case: sao runs of style took 300 and 500 s, a grpo run of style 100 s, a grpo run of tool 60 s.
    Left: a sao run of style (400, its cell's mean), a sao run of tool (400, its row's mean: no sao run of tool
    yet), a grpo run of tool (60, its cell's), a running-mean run of tool (240, the mean of all four), 1,100 s
    in all; two at a time, half of that; one at a time, all of it."""
    def run(scenario, row, seed=0):
        return GridRun(scenario, row, (), seed, None)

    took = [(run("style", "sao"), 300.0), (run("style", "sao", 1), 500.0), (run("style", "grpo"), 100.0),
            (run("tool", "grpo"), 60.0)]
    left = [run("style", "sao", 2), run("tool", "sao"), run("tool", "grpo", 1), run("tool", "running mean")]
    assert time_left(left, took, jobs=1) == pytest.approx(400 + 400 + 60 + 240)
    assert time_left(left, took, jobs=2) == pytest.approx(1100 / 2)
    assert time_left(left[:1], took, jobs=2) == pytest.approx(400)  # one run left: one job at work
