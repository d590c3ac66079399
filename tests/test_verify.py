"""``sao-env verify`` (sao_env/experiment/verify.py): a committed row or run directory is made again
here and judged identical, within its row's seed interval, or not reproduced."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from conftest import SHRINK
from sao_env.cli.app import main
from sao_env.experiment.verify import describe, judge, prediction_interval, targets_from_table
from sao_env.leaderboard.records import run_record

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    """Two seeds of grpo on the shrunk style-drift, made by ``compare`` with its board."""
    base = tmp_path_factory.mktemp("verify")
    code = main(["compare", "--agents", "grpo", "--seeds", "0,1", "--jobs", "1", "--runs-dir", str(base / "runs"),
                 "--leaderboard-dir", str(base / "board"), *SHRINK])
    assert code == 0
    return base


def test_prediction_interval_by_hand():
    # mean 0.5, sd 0.1, t(0.975, 2) = 4.302653; half = 4.302653 * 0.1 * sqrt(1 + 1/3) = 0.496828
    low, high = prediction_interval([0.4, 0.5, 0.6])
    assert low == pytest.approx(0.5 - 0.496828, abs=1e-6) and high == pytest.approx(0.5 + 0.496828, abs=1e-6)


def test_a_run_directory_made_again_is_identical_and_a_changed_number_is_named(board, tmp_path, capsys):
    (run,) = (board / "runs" / "style-drift").glob("grpo+*/seed0")  # the shrinking overrides label it grpo+HASH
    assert main(["verify", str(run), "--jobs", "1"]) == 0
    said = capsys.readouterr().out
    assert f"identical: {run}" in said and "3 logs byte for byte" in said and "verify: 1 of 1 identical" in said

    copy = tmp_path / "seed0"
    shutil.copytree(run, copy)
    summary = json.loads((copy / "summary.json").read_text())
    true_reward = summary["online_reward"]
    summary["online_reward"] = true_reward + 0.125
    (copy / "summary.json").write_text(json.dumps(summary))
    assert main(["verify", str(copy), "--jobs", "1"]) == 1
    said = capsys.readouterr().out
    assert f"differs: {copy} differs in 1 numbers" in said
    assert f"online_reward: recorded {true_reward + 0.125:.6g}, re-run {true_reward:.6g}" in said


def test_a_table_row_is_judged_against_its_seeds_interval(board, tmp_path, capsys):
    table = board / "board" / "style-drift-runs.csv"
    rows = pd.read_csv(table, dtype=str, keep_default_na=False)
    agent = rows["agent"][0]  # grpo+HASH: the shrinking overrides are part of the label
    assert main(["verify", str(table), "--label", agent, "--seeds", "1", "--jobs", "1"]) == 0
    assert f"identical: {agent} seed 1 on style-drift" in capsys.readouterr().out

    rewards = [float(v) for v in rows["online_reward"]]
    cases = {"within the seed interval": (rewards[0] + 1e-4, rewards[1]),  # seed 0 moved a little: inside
             "does not reproduce": (rewards[0] + 10, rewards[0] + 10.001)}  # both seeds far away: outside
    (run,) = (board / "runs" / "style-drift").glob("grpo+*/seed0")
    summary = json.loads((run / "summary.json").read_text())  # what a re-run of seed 0 gives (the test above)
    record, _ = run_record({**summary, "run_dir": str(run)})
    for expected, (seed0, seed1) in cases.items():
        # the interval comes from the recorded seeds; the re-run of seed 0 is judged against it
        edited = rows.copy()
        edited.loc[edited["seed"] == "0", "online_reward"] = "%.6g" % seed0
        edited.loc[edited["seed"] == "1", "online_reward"] = "%.6g" % seed1
        path = tmp_path / f"runs-{len(expected)}.csv"
        edited.to_csv(path, index=False)
        (target,) = targets_from_table(path, label=agent, seeds=[0], scratch=tmp_path / "scratch")
        verdict = judge(target, summary, record)
        low, high = prediction_interval([float("%.6g" % seed0), float("%.6g" % seed1)])
        assert verdict.differing == [("online_reward", "%.6g" % seed0, "%.6g" % rewards[0])]
        assert verdict.intervals[0] == ("online_reward", summary["online_reward"], low, high)
        assert verdict.plausible == (expected == "within the seed interval") == (low <= rewards[0] <= high)
        assert describe(verdict).startswith(f"{expected}: {agent} seed 0 on style-drift differs in 1 numbers")


def test_a_row_of_another_configuration_is_one_line(board, tmp_path, capsys):
    rows = pd.read_csv(board / "board" / "style-drift-runs.csv", dtype=str, keep_default_na=False)
    rows["config_hash"] = "000000000000"
    path = tmp_path / "other.csv"
    rows.to_csv(path, index=False)
    assert main(["verify", str(path), "--seeds", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the row was made with 000000000000: they changed since" in err[0]
    assert main(["verify", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv does not exist" in capsys.readouterr().err


def test_a_run_recorded_under_evaluation_version_2_is_made_again_under_it(tmp_path, capsys):
    """A run made when version 2 was the default (no ``eval.version`` in its config.yaml, ``eval_version`` 2 in
    its summary) is re-made under version 2, byte for byte; under version 3 the same training evaluates other
    tasks, so its evals differ and its episodes do not."""
    import yaml

    from sao_env.provenance import config_hash
    from sao_env.experiment.config import expand_config, load_run_config

    old = tmp_path / "v2"
    args = ["run", "--agent", "grpo", "--seed", "1", *SHRINK]
    assert main([*args, "--out", str(old), "env.eval.version=2"]) == 0
    assert main([*args, "--out", str(tmp_path / "v3")]) == 0
    config = yaml.safe_load((old / "config.yaml").read_text())
    assert config["env"]["eval"].pop("version") == 2
    (old / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert config_hash(expand_config(load_run_config(old))) == config_hash(expand_config(load_run_config(tmp_path / "v3")))
    assert json.loads((old / "summary.json").read_text())["eval_version"] == 2
    assert json.loads((tmp_path / "v3" / "summary.json").read_text())["eval_version"] == 3
    assert (old / "evals.jsonl").read_bytes() != (tmp_path / "v3" / "evals.jsonl").read_bytes()
    assert (old / "episodes.jsonl").read_bytes() == (tmp_path / "v3" / "episodes.jsonl").read_bytes()
    assert main(["verify", str(old), "--jobs", "1"]) == 0
    said = capsys.readouterr().out
    assert f"identical: {old}" in said and "3 logs byte for byte" in said
