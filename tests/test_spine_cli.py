"""The command line, in-process (``sao_env.cli.main(argv) -> exit code``): list, run --dry-run,
one-line user errors, compare -> leaderboard files, and leaderboard rebuilding them."""

from __future__ import annotations

import csv
import io

import gymnasium as gym
import pytest
import yaml

from sao_env.cli import main
from sao_env.specs import available


def _errors(capsys, argv) -> str:
    """Run ``argv``, expect exit code 2 and exactly one stderr line "sao-env: error: ..."; return it."""
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("sao-env: error: ")
    assert "Traceback" not in err + out
    return lines[0]


def test_list_names_every_recipe_and_env_id(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    names = {line.split()[0] for line in out.splitlines() if line.startswith("  ")}
    for recipe in available("agents"):
        assert recipe in names, recipe
    for scenario in available("envs"):
        assert scenario in names, scenario
    assert "sao/StyleDrift-v0" in names
    assert {k for k in gym.registry if k.startswith("sao/")} <= names


def test_dry_run_prints_the_resolved_config(capsys):
    assert main(["run", "--env", "style-drift", "--agent", "sao", "--seed", "3", "--dry-run",
                 "agent.hparams.lr=0.123", "env.phases.1.duration_h=0.5"]) == 0
    out, err = capsys.readouterr()
    config = yaml.safe_load(out)
    assert config["agent"]["hparams"]["lr"] == 0.123
    assert config["env"]["phases"][1]["duration_h"] == 0.5
    assert config["seed"] == 3
    assert config["agent"]["name"] == "sao" and config["env"]["name"] == "style-drift"
    # Defaults are filled in: the dump is the whole resolved configuration, not the YAML file.
    assert config["agent"]["runtime"]["on_full"] == "block"
    assert "warm_start" in config["env"] and "latency" in config["env"]


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--dry-run", "--env", "no-such-env"],
        ["run", "--dry-run", "--agent", "no-such-agent"],
        ["run", "--dry-run", "agent.hparams.bogus=1"],
        ["run", "--dry-run", "env.nope=1"],
        ["run", "--dry-run", "env.latency.nope=1"],
        ["run", "--dry-run", "env.phases.7.duration_h=1"],
        ["run", "--dry-run", "agent.hparams.lr"],  # no '='
        ["run", "--dry-run", "agent.hparams.lr=-1"],  # out of bounds
        ["run", "--dry-run", "env.phases.0.duration_h=soon"],  # wrong type
        ["run", "--dry-run", "agent.runtime.on_full=sometimes"],
        ["run", "--dry-run", "--seed", "-1"],
        ["run", "--dry-run", "--env", "missing.yaml"],
        ["compare", "--seeds", "a,b"],
        ["compare", "--jobs", "0"],
        ["compare", "--dry-run", "--logger", "bogus"],
        ["run", "--dry-run", "--logger", "mlflow"],
        ["no-such-command"],
    ],
    ids=lambda argv: " ".join(argv[1:]) if len(argv) > 1 else argv[0],
)
def test_user_errors_are_one_line(capsys, argv):
    _errors(capsys, argv)


def test_no_arguments_prints_help_without_traceback(capsys):
    code = main([])
    out, err = capsys.readouterr()
    assert code in (0, 2)
    assert "Usage" in out + err and "Traceback" not in out + err


def test_unknown_names_are_listed_in_the_error(capsys):
    line = _errors(capsys, ["run", "--dry-run", "--agent", "no-such-agent"])
    assert "no-such-agent" in line and "sao" in line
    line = _errors(capsys, ["run", "--dry-run", "agent.hparams.bogus=1"])
    assert "bogus" in line


@pytest.mark.parametrize(
    "text",
    ["name: broken\nphases: [unclosed\n", "- just\n- a list\n", "name: x\nphases: 3\n", "name: [x\n  y: {"],
    ids=["unclosed", "list", "invalid-spec", "garbage"],
)
def test_invalid_env_file_is_one_line(capsys, tmp_path, text):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    line = _errors(capsys, ["run", "--dry-run", "--env", str(path)])
    assert "bad.yaml" in line or "invalid" in line


def test_optional_keys_absent_from_the_yaml_can_be_overridden(capsys):
    # Keys the spec models define may be set even where the YAML file leaves them out, at every level.
    assert main(["run", "--dry-run", "agent.runtime.on_full=drop_oldest", "env.dis_eps_low=0.25",
                 "env.phases.1.transition_h=0.05"]) == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["agent"]["runtime"]["on_full"] == "drop_oldest"
    assert config["env"]["dis_eps_low"] == 0.25
    assert config["env"]["phases"][1]["transition_h"] == 0.05


def _csv_rows(path):
    return list(csv.DictReader(io.StringIO(path.read_text())))


@pytest.mark.slow
def test_compare_then_leaderboard(capsys, tmp_path, shrink):
    runs, boards, rebuilt = tmp_path / "runs", tmp_path / "boards", tmp_path / "rebuilt"
    code = main(["compare", "--agents", "sao,grpo", "--seeds", "0", "--jobs", "1", "--runs-dir", str(runs),
                 "--leaderboard-dir", str(boards), *shrink])
    out, err = capsys.readouterr()
    assert code == 0, err
    md, csv_path, png = boards / "style-drift.md", boards / "style-drift.csv", boards / "style-drift.png"
    for path in (md, csv_path, png):
        assert path.is_file() and path.stat().st_size > 0, path
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _csv_rows(csv_path)
    # The shrinking overrides change each recipe's configuration: its runs go to <recipe>+<hash>.
    from sao_env.experiment import plan_run

    labels = {a: plan_run("style-drift", a, 0, list(shrink), runs_dir=runs).label for a in ("sao", "grpo")}
    assert sorted(r["agent"] for r in rows) == sorted(labels.values())
    assert all(labels[a].startswith(f"{a}+") for a in labels)
    assert sorted(r["recipe"] for r in rows) == ["grpo", "sao"]
    assert all(r["seeds"] == "1" for r in rows)
    for column in ("online_reward", "auc", "episodes_per_hour", "staleness_mean"):
        assert column in rows[0]
    # The table's numbers are the runs' summaries (one seed: the mean is the value).
    import json

    for r in rows:
        summary = json.loads((runs / "style-drift" / r["agent"] / "seed0" / "summary.json").read_text())
        assert float(r["online_reward"]) == pytest.approx(summary["online_reward"], rel=1e-5)
    table_rows = [line for line in md.read_text().splitlines() if line.startswith("| ")]
    for recipe in ("sao", "grpo"):
        assert any(f"| {recipe} " in line for line in table_rows), recipe
    assert "style-drift.png" in md.read_text()
    assert md.read_text() in out  # compare prints the table

    assert main(["leaderboard", str(runs), "--out", str(rebuilt)]) == 0
    capsys.readouterr()
    assert (rebuilt / "style-drift.csv").read_bytes() == csv_path.read_bytes()
    assert (rebuilt / "style-drift.png").is_file()
    # Rebuilding in place from the run directories listed one by one gives the same table too.
    assert main(["leaderboard", str(runs / "style-drift" / labels["sao"]), str(runs / "style-drift" / labels["grpo"]),
                 "--out", str(rebuilt)]) == 0
    assert (rebuilt / "style-drift.csv").read_bytes() == csv_path.read_bytes()


def test_leaderboard_without_runs_is_a_user_error(capsys, tmp_path):
    _errors(capsys, ["leaderboard", str(tmp_path), "--out", str(tmp_path / "out")])


def test_eval_reads_the_checkpoint_a_training_run_wrote(shrunk_run, tmp_path):
    """`sao-env eval RUN_DIR` evaluates the run's checkpoints/final on a real benchmark slice."""
    import json
    from pathlib import Path

    data = Path(__file__).resolve().parents[2] / "shared" / "data"
    if not data.is_dir():
        pytest.skip("../shared/data is not beside the checkout")
    run_dir, _ = shrunk_run("sao")
    code = main(["eval", str(run_dir), "--suite", "beyond_aime", "--data", str(data), "--limit", "2", "--k", "2",
                 "--max-new-tokens", "8", "--out", str(tmp_path), "--no-progress"])
    assert code == 0
    summary = json.loads((tmp_path / "beyond_aime" / "summary.json").read_text())
    assert summary["n"] == 4 and summary["problems"] == 2
    samples = [json.loads(line) for line in (tmp_path / "beyond_aime" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4
    # avg@k by hand from the graded samples: the mean over the 2 problems of each one's mean reward.
    by_problem: dict[str, list[float]] = {}
    for sample in samples:
        by_problem.setdefault(sample["id"], []).append(float(sample["reward"] >= 0.5))
    assert sorted(len(v) for v in by_problem.values()) == [2, 2]
    assert summary["accuracy"] == pytest.approx(sum(sum(v) / len(v) for v in by_problem.values()) / 2)

    # The same evaluation, through the harness's own functions on checkpoints/final, samples the
    # same responses: the command evaluated the run's trained weights.
    from sao_env.benchmarks.backends import make_backend
    from sao_env.benchmarks.evaluate import EvalOptions, evaluate_suite, prepare_suite
    from sao_env.benchmarks.suites import load_suite

    options = EvalOptions(k=2, limit=2, max_new_tokens=8, seed=0, show_progress=False)
    again = evaluate_suite(prepare_suite(load_suite("beyond_aime"), data, options.limit),
                           make_backend("transformers", run_dir / "checkpoints" / "final", seed=0),
                           model_name="again", out_dir=tmp_path / "again", options=options)
    resampled = [json.loads(line) for line in (tmp_path / "again" / "samples.jsonl").read_text().splitlines()]
    assert [(r["id"], r["response"]) for r in resampled] == [(r["id"], r["response"]) for r in samples]
    assert again["accuracy"] == summary["accuracy"] and again["n"] == 4
