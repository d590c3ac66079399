"""What a user does never destroys or mixes a result: boards go where the user says, hostile values are
one-line errors before any work, a diverged run stops, long work reports progress to a log file, and
the small rough edges (eval of a missing path, strict JSON, full names, plot legends, extras)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sao_env.cli import main
from tests.conftest import SHRINK, shrink_overrides

REPO = Path(__file__).resolve().parents[1]


# -- 1. boards go outside the tracked tree unless the user names a folder -----------------------------

BOARD_FILES = ("style-drift.md, style-drift.csv, style-drift-runs.csv, style-drift-curves.csv, style-drift.png, "
               "index.html, README.md")


def test_compare_dry_run_names_the_board_folder_and_files(capsys, tmp_path):
    runs = tmp_path / "runs"
    argv = ["compare", "--dry-run", "--agents", "sao", "--seeds", "0", "--runs-dir", str(runs), *SHRINK]
    assert main(argv) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == f"write  {runs / 'leaderboards'}  {BOARD_FILES}"
    assert main([*argv, "--leaderboard-dir", "leaderboards"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the committed board's runs have no run directory here: a compare into it would drop them, and says so
    assert lines[-2] == f"write  leaderboards  {BOARD_FILES}"
    assert re.fullmatch(r"merge  leaderboards/style-drift\.md  keeps no run of the earlier board; drops \d+ runs "
                        r"\(.*\) \(no finished run directory\)", lines[-1]), lines[-1]


def test_leaderboard_rebuild_writes_under_runs_by_default(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["leaderboard", str(REPO / "leaderboards" / "style-drift-runs.csv")]) == 0
    assert sorted(p.name for p in (tmp_path / "runs" / "leaderboards").iterdir()) == [
        "README.md", "index.html", "style-drift-curves.csv", "style-drift-runs.csv", "style-drift.csv",
        "style-drift.md", "style-drift.png"]
    assert not (tmp_path / "leaderboards").exists()


@pytest.mark.slow
def test_readme_compare_example_leaves_a_fresh_clone_clean(tmp_path):
    """The README's ``compare`` example (one seed, two recipes, shrunk) run in a fresh clone of the
    committed code leaves ``git status --porcelain`` empty: its runs and boards go under ``runs/``."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    env = {**os.environ, "PYTHONPATH": str(clone)}
    done = subprocess.run([sys.executable, "-m", "sao_env.cli", "compare", "--env", "style-drift", "--agents",
                           "sao,grpo", "--seeds", "0", "--jobs", "1", *SHRINK],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (clone / "runs" / "leaderboards" / "style-drift.md").is_file()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True, check=True)
    assert status.stdout == ""


# -- 6. hostile values: one line, exit 2, before any work ------------------------------------------------

def _cli(args: list[str], cwd: Path) -> tuple[int, str, bool]:
    """``sao-env ARGS`` in a fresh interpreter: (exit code, stderr, whether torch was imported)."""
    snippet = ("import sys\nfrom sao_env.cli import main\ncode = main(sys.argv[1:])\n"
               "print('torch' in sys.modules)\nsys.exit(code)\n")
    done = subprocess.run([sys.executable, "-c", snippet, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    return done.returncode, done.stderr, done.stdout.strip().endswith("True")


@pytest.mark.parametrize(("override", "line"), [
    ("env.phases.0.duration_h=1e9", "invalid configuration at env: Value error, 1e+09 simulated hours evaluated every "
     "0.02 h is 5e+10 evaluations, more than 100,000: shorten the phases or raise eval.interval_h"),
    ("env.phases.1.duration_h=.inf", "invalid configuration at env.phases.1.duration_h: Input should be a finite number"),
    ("env.eval.interval_h=.nan", "invalid configuration at env.eval.interval_h: Input should be a finite number"),
    ("env.latency.decode_s_per_token=-1", "invalid configuration at env.latency.decode_s_per_token: "
     "Input should be greater than or equal to 0"),
    ("env.rollout_slots=0", "invalid configuration at env.rollout_slots: Input should be greater than 0"),
    ("env.eval.prompts_per_phase=-3", "invalid configuration at env.eval.prompts_per_phase: Input should be greater than 0"),
    ("env.eval.seed=-1", "invalid configuration at env.eval.seed: Input should be greater than or equal to 0"),
    ("agent.runtime.time_scale=.inf", "invalid configuration at agent.runtime.time_scale: Input should be a finite number"),
    ("agent.hparams.lr=.inf", "invalid configuration at agent.hparams.lr: Input should be a finite number"),
    ("agent.hparams.critic_lr=nan", "invalid configuration at agent.hparams.critic_lr: Input should be a finite number"),
    ("agent.hparams.adam_betas=[0.9,.nan]", "invalid configuration at agent.hparams.adam_betas: Input should be a finite number"),
])
def test_hostile_scenario_and_runtime_values_fail_before_torch_loads(tmp_path, override, line):
    code, err, torch_loaded = _cli(["run", "--out", str(tmp_path / "run"), override], tmp_path)
    assert (code, err, torch_loaded) == (2, f"sao-env: error: {line}\n", False)
    assert not (tmp_path / "run").exists()


def test_unknown_names_fail_before_torch_loads(tmp_path):
    code, err, torch_loaded = _cli(["run", "--env", "no-such-env"], tmp_path)
    assert code == 2 and not torch_loaded
    assert err.startswith("sao-env: error: unknown env 'no-such-env'; known: ") and err.count("\n") == 1
    code, err, torch_loaded = _cli(["compare", "--agents", "sao,nope"], tmp_path)
    assert code == 2 and not torch_loaded and err.startswith("sao-env: error: unknown agent 'nope'; known: ")


@pytest.mark.parametrize(("override", "line"), [
    ("agent.hparams.lr=.inf", "invalid configuration at agent.hparams.lr: Input should be a finite number"),
    ("agent.hparams.lr=.nan", "invalid configuration at agent.hparams.lr: Input should be a finite number"),
    ("agent.hparams.lr=1e300", "invalid configuration at agent.hparams.lr: Input should be less than or equal to 1000000"),
    ("agent.hparams.critic_lr=-1e-4", "invalid configuration at agent.hparams.critic_lr: Input should be greater than 0"),
    ("agent.hparams.adam_betas=[0.9,1.5]", "invalid configuration at agent.hparams.adam_betas: "
     "Value error, Adam's betas must lie in [0, 1), got [0.9, 1.5]"),
    ("agent.hparams.episodes_per_update=0", "invalid configuration at agent.hparams.episodes_per_update: "
     "Input should be greater than or equal to 1"),
])
def test_hostile_hyperparameters_are_one_line_errors(capsys, tmp_path, override, line):
    assert main(["run", "--agent", "sao", "--out", str(tmp_path / "run"), override]) == 2
    assert capsys.readouterr().err == f"sao-env: error: {line}\n"
    assert not (tmp_path / "run").exists()


def test_a_loss_that_stays_nonfinite_stops_the_learner(tiny):
    """One skipped step is tolerated (a NaN reward); NONFINITE_LIMIT = 3 in a row stop the run."""
    from sao_env.agents import ALGORITHMS
    from sao_env.agents.base import NONFINITE_LIMIT, Diverged
    from sao_env.envs.text_env import load_scenario
    from tests.test_spine_agents import make_episodes

    policy, tok = tiny
    cls = ALGORITHMS["running_mean"]
    agent = cls(policy, tok, cls.config_cls(lr=1e-3, episodes_per_update=4))
    scenario = load_scenario("style-drift")
    nan = make_episodes(policy, tok, scenario, [float("nan")] * 4)
    good = make_episodes(policy, tok, scenario, [1.0, 0.0, 1.0, 0.0], seed=1)
    assert NONFINITE_LIMIT == 3
    for episodes in (nan, nan, good, nan, nan):  # a finite step in between resets the count
        agent.update(episodes)
    assert agent.skipped == 4 and agent.nonfinite == 2
    with pytest.raises(Diverged) as err:
        agent.update(nan)
    assert str(err.value) == ("the actor's loss or gradient was non-finite at 3 optimizer steps in a row: the run "
                              "diverged and stops without a summary; lower agent.hparams.lr (now 0.001) or check the rewards")


@pytest.mark.slow
def test_a_diverging_run_stops_with_one_line_and_no_summary(capsys, tmp_path):
    out = tmp_path / "run"
    code = main(["run", "--agent", "running_mean", "--out", str(out), *SHRINK, "agent.hparams.lr=1e6"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines()[-1] == (
        "sao-env: error: the actor's loss or gradient was non-finite at 3 optimizer steps in a row: the run diverged "
        "and stops without a summary; lower agent.hparams.lr (now 1e+06) or check the rewards")
    assert not (out / "summary.json").exists()


# -- 8. eval of a local path that does not exist ----------------------------------------------------------

@pytest.mark.parametrize("argument", ["runs/does-not-exist", "./nope", "/nowhere/model", "a/b/c"])
def test_eval_of_a_missing_local_path_is_one_line_at_once(capsys, tmp_path, monkeypatch, argument):
    import time

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    start = time.perf_counter()
    assert main(["eval", argument, "--suite", "beyond_aime", "--limit", "1"]) == 2
    assert time.perf_counter() - start < 5
    assert capsys.readouterr().err == (f"sao-env: error: {argument}: no such run directory or model folder "
                                       "(a Hugging Face id is NAME or ORG/NAME)\n")


def test_eval_names_a_broken_link_and_keeps_hub_ids(capsys, tmp_path, monkeypatch):
    from sao_env.benchmarks.runner import resolve_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    assert main(["eval", "link", "--suite", "beyond_aime"]) == 2
    assert capsys.readouterr().err == "sao-env: error: link: a broken link (a Hugging Face id is NAME or ORG/NAME)\n"
    assert resolve_model("Qwen/Qwen2.5-Math-1.5B").load == "Qwen/Qwen2.5-Math-1.5B"
    assert resolve_model("./served-name", local=False).load == "./served-name"  # --backend openai: a served name


# -- 9. smaller: a sweep cut that cuts, strict JSON, full names, legends of overrides ----------------------

def test_readme_sweep_example_cuts_the_scenario():
    """Every ``--cut key=value`` of the README's sweep example changes the scenario it names."""
    import re

    import yaml

    from sao_env.experiment import apply_override

    cuts = re.findall(r"sao-env sweep .*?--cut (\S+)", (REPO / "README.md").read_text())
    assert cuts == ["env.phases.0.duration_h=0.05"]
    raw = {"env": yaml.safe_load((REPO / "envs" / "style-drift.yaml").read_text())}
    before = raw["env"]["phases"][0]["duration_h"]
    apply_override(raw, cuts[0])
    assert (before, raw["env"]["phases"][0]["duration_h"]) == (0.1, 0.05)


def test_strict_json_writes_null_for_non_finite_numbers():
    from sao_env.cli.training import strict_json

    assert strict_json({"auc": 0.25, "recovery_h": float("nan"), "rate": float("inf"), "n": 3}) == (
        '{\n "auc": 0.25,\n "recovery_h": null,\n "rate": null,\n "n": 3\n}')


def test_list_prints_whole_descriptions(capsys):
    import yaml

    assert main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    for kind in ("envs", "agents", "evals"):
        for path in sorted((REPO / kind).glob("*.yaml")):
            description = " ".join(str(yaml.safe_load(path.read_text()).get("description", "")).split())
            assert f"{path.stem} " in out and description in out, path


def test_eval_table_prints_whole_names_on_a_narrow_terminal(capsys, monkeypatch):
    from sao_env.cli.benchmarks import _print_summaries

    monkeypatch.setenv("COLUMNS", "40")
    _print_summaries([{"model": "a-long-model-name/checkpoint-final", "suite": "imo_answerbench_combinatorics",
                       "accuracy": 0.5, "ci95_low": 0.1, "ci95_high": 0.9, "k": 4, "problems": 30, "grader": "rule",
                       "answer_fallback": "last-number"}])
    out = capsys.readouterr().out
    assert "…" not in out
    for text in ("a-long-model-name/checkpoint-final", "imo_answerbench_combinatorics", "[10.0, 90.0]",
                 "box, answer is, last number"):
        assert text in out


@pytest.mark.slow
def test_run_prints_strict_json_and_its_plot_names_the_overrides(capsys, tmp_path, monkeypatch):
    import json

    from sao_env.leaderboard import plots

    drawn: list[list[str]] = []
    original = plots.plot_curves

    def spy(curves, *args, **kwargs):
        drawn.append(sorted(curves["label"].unique()))
        return original(curves, *args, **kwargs)

    monkeypatch.setattr(plots, "plot_curves", spy)
    out = tmp_path / "run"
    overrides = [*SHRINK, "agent.hparams.lr=3e-5"]
    assert main(["run", "--agent", "running_mean", "--out", str(out), *overrides]) == 0
    printed = capsys.readouterr().out  # the summary alone on stdout, progress on stderr

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    shown = json.loads(printed, parse_constant=refuse)
    summary = json.loads((out / "summary.json").read_text())
    assert shown.pop("run_dir") == str(out)  # printed beside the summary's figures
    for key, value in shown.items():
        if isinstance(summary[key], float) and summary[key] != summary[key]:
            assert value is None, key
        else:
            assert value == summary[key], key
    assert drawn == [[f"running_mean ({'; '.join(overrides)})"]]


# -- 7. long work reports to a log file; names are checked before torch loads ----------------------------

def test_warm_start_prints_plain_lines_when_stderr_is_not_a_terminal(capsys, monkeypatch):
    import re

    from sao_env.policy import warmstart
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer
    from sao_env.scenario import Scenario, WarmStartSpec
    from tests.conftest import _shrunk_config

    monkeypatch.setattr(warmstart, "HEARTBEAT_S", 0.0)  # every step, instead of every 30 s
    config = _shrunk_config("running_mean")
    spec = WarmStartSpec(steps=3, batch_size=2)
    tok = build_tokenizer(ModelSpec(name="tiny-qwen2"))
    model = build_policy(ModelSpec(name="tiny-qwen2"), tok, seed=0)
    losses = warmstart.supervised_warm_start(model, tok, Scenario(config.env), spec, show_progress=True)
    lines = capsys.readouterr().err.splitlines()
    prefix = "sao-env: warm start of style-drift (supervised): "
    assert lines[0] == prefix + ("training 3 steps of 2 demonstrations once (then cached); it is not checkpointed: "
                                 "an interruption loses it and the next start trains it again; a line every 0 s")
    estimates = [line for line in lines if line.startswith(prefix + "about ")]  # after the first steps: how long
    assert len(estimates) == 1 and len(lines) == 5
    for step, (line, loss) in enumerate(zip([x for x in lines[1:] if x not in estimates], losses), start=1):
        assert re.fullmatch(re.escape(f"{prefix}{step}/3 steps ({100 * step / 3:.0f}%), loss {loss:.3f}, ") + r"\d+ s elapsed",
                            line), line


def test_heartbeat_is_quiet_on_a_terminal_and_steady_otherwise():
    import io

    from sao_env.policy.warmstart import Heartbeat

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal, log = Terminal(), io.StringIO()
    for stream in (terminal, log):
        beat = Heartbeat("bench", 4, unit="runs", every_s=3600.0, stream=stream)
        beat.tick(1)  # within the interval: nothing
        beat.every_s = 0.0
        beat.tick(2, "threads-async")
    assert terminal.getvalue() == ""
    assert log.getvalue().startswith("sao-env: bench: 2/4 runs (50%), threads-async, ")
    assert log.getvalue().count("\n") == 1


# -- 11. the default install runs every CPU scenario ------------------------------------------------------

def test_swebench_is_a_core_dependency():
    """codebase-drift (CPU, tiny model) grades with swebench's rule; ``make install`` (``pip install -e .``)
    must bring it, not only the ``swe`` extra that ``make test`` adds."""
    import re

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0].lower() for req in project["dependencies"]}
    assert "swebench" in core
    assert "swebench.harness.grading" in (REPO / "sao_env" / "tasks" / "forge" / "grading.py").read_text()
