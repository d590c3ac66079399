"""What a user meets at the command line: an unreachable model or hub is one line at once, results go to
stdout whole, and nothing is restarted or replaced without a word.

Fast: no run is made here. Finished runs are stood in for by ``summary.json`` files that carry the
configuration hash and code version a real run records, so ``compare`` reuses them and writes its board.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SHRINK
from sao_env.cli import main

SAO_ENV = [sys.executable, "-m", "sao_env.cli"]


def _offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    return env | {"HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"} | extra


# ----------------------------------------------------------------------------- the hub


def test_a_made_up_model_id_offline_is_one_line_and_exit_2_at_once(tmp_path):
    start = time.monotonic()
    done = subprocess.run([*SAO_ENV, "run", "--env", "style-drift", "--agent", "sao", "--out", str(tmp_path / "run"),
                           "agent.model.name=nobody-here/made-up-model-0"],
                          capture_output=True, text=True, env=_offline_env(), timeout=120)
    seconds = time.monotonic() - start
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert lines[0].startswith("sao-env: error: model 'nobody-here/made-up-model-0' is not in the local Hugging Face cache")
    assert "HF_HUB_OFFLINE" in lines[0]
    assert seconds < 30, f"{seconds:.0f} s: the check should come before torch and the data load"
    assert not (tmp_path / "run").exists()


def test_an_unreachable_hub_is_one_line_naming_why(monkeypatch, capsys, tmp_path):
    from huggingface_hub import constants

    from sao_env import hub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setitem(hub._reachable, hub.endpoint(), "huggingface.co:443: Name or service not known")
    assert main(["run", "--agent", "sao", "--out", str(tmp_path / "run"), "agent.model.name=Qwen/Made-Up-0.5B"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["sao-env: error: model 'Qwen/Made-Up-0.5B' is not in the local Hugging Face cache and the hub "
                   "cannot be reached (huggingface.co:443: Name or service not known); check the id and the "
                   "network, or give a local folder"]


@pytest.mark.parametrize("name, says", [("./no/such/folder", "no such folder"),
                                        ("not a model id!", "neither a local folder nor a Hugging Face model id")])
def test_a_model_that_is_neither_a_folder_nor_an_id_is_one_line(capsys, name, says):
    assert main(["run", "--agent", "sao", "--dry-run", f"agent.model.name={name}"]) == 2
    assert says in capsys.readouterr().err


def _no_network(monkeypatch) -> list:
    """Every connection or name lookup is recorded and refused."""
    tried = []

    def refuse(*args, **kwargs):
        tried.append(args[:2])
        raise OSError("the network is off in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    return tried


def test_dry_run_of_a_benchmark_stream_never_touches_the_network_or_its_rows(monkeypatch, capsys):
    from huggingface_hub import constants

    import datasets

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.delenv("SAO_ENV_DATA", raising=False)  # the rows would come from the hub
    tried = _no_network(monkeypatch)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("a dry run read benchmark rows"))
    assert main(["run", "--env", "benchmark-stream", "--agent", "sao", "--dry-run",
                 "agent.model.name=Qwen/Qwen2.5-0.5B"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# config_hash: ") and "name: benchmark-stream" in out
    assert tried == []


def test_an_unreachable_hub_reads_the_cache_only_without_retrying(monkeypatch):
    """``datasets`` would retry the host for half a minute; offline mode fails at once."""
    from huggingface_hub import constants

    from sao_env import hub
    from sao_env.benchmarks.loaders import DataUnreachable, load_hub_rows

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setitem(hub._reachable, hub.endpoint(), "huggingface.co:443: Name or service not known")
    seen = []

    def load_dataset(*args, **kwargs):
        import datasets.config

        seen.append((constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE))
        raise ConnectionError("Couldn't reach 'made-up/rows' on the Hub (LocalEntryNotFoundError)")

    import datasets

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    with pytest.raises(DataUnreachable, match=r"cannot reach the Hugging Face hub for made-up/rows \(revision main; "
                                              r"cannot reach https://huggingface.co \(huggingface.co:443: Name or "
                                              r"service not known\); not in the local cache\)"):
        load_hub_rows("made-up/rows", "test")
    assert seen == [(True, True)]
    assert constants.HF_HUB_OFFLINE is False  # put back after


def test_benchmark_rows_missing_offline_are_one_line_before_the_run_is_planned(monkeypatch, capsys, tmp_path):
    """The hub offline and no local rows: the benchmark stream's sources are built in the quick check,
    before torch is needed, and fail in one line (no retries, no run planned)."""
    import datasets
    from huggingface_hub import constants

    import sao_env.experiment

    monkeypatch.delenv("SAO_ENV_DATA", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(sao_env.experiment, "plan_run", lambda *a, **k: pytest.fail("the run was planned"))

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'ByteDance-Seed/BeyondAIME' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    assert main(["run", "--env", "benchmark-stream", "--agent", "sao", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("sao-env: error: cannot reach the Hugging Face hub for "
                                               "ByteDance-Seed/BeyondAIME (revision main; HF_HUB_OFFLINE is set")
    assert err[0].endswith("set SAO_ENV_DATA=PATH (a folder or file holding the rows, e.g. ../shared/data) or the "
                           "source's params.data")


# ----------------------------------------------------------------------------- stdout


def _fake_run(monkeypatch, summary: dict | None = None) -> list:
    """``run_experiment`` replaced by one that returns ``summary`` (records the calls)."""
    import sao_env.experiment

    calls = []

    def fake(config, out, **options):
        calls.append(options)
        return summary or {"env": "style-drift", "agent": "sao", "online_reward": 0.5, "auc": float("nan"),
                           "phases": [{"name": "boxed"}]}

    monkeypatch.setattr(sao_env.experiment, "run_experiment", fake)
    return calls


def test_run_prints_its_summary_json_on_stdout(monkeypatch, capsys, tmp_path):
    _fake_run(monkeypatch)
    assert main(["run", "--agent", "sao", "--out", str(tmp_path / "run"), *SHRINK]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out) == {"env": "style-drift", "agent": "sao", "online_reward": 0.5, "auc": None,
                               "run_dir": str(tmp_path / "run")}
    assert f"run directory: {tmp_path / 'run'}" in err


def test_help_piped_is_not_cut_at_80_columns(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("TERMINAL_WIDTH", raising=False)
    assert main(["eval", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--answer-fallback" in out and "…" not in out


def test_console_lines_are_not_wrapped_when_piped(capsys):
    from sao_env.cli.training import console

    long = "leaderboard: " + "/".join(["runs"] * 30) + ".md and runs/leaderboards/style-drift.csv"
    console.print(long, highlight=False)
    assert capsys.readouterr().err == long + "\n"


# ----------------------------------------------------------------------------- no silent restarts


def test_run_into_an_interrupted_directory_says_resume_would_continue_it(monkeypatch, capsys, tmp_path):
    import sao_env.experiment.plan as plan_module

    out = tmp_path / "run"
    out.mkdir()
    calls = _fake_run(monkeypatch)
    monkeypatch.setattr(plan_module, "resume_point", lambda plan, code: 0.1 * 3600)
    assert main(["run", "--agent", "sao", "--out", str(out), *SHRINK]) == 0
    err = capsys.readouterr().err
    assert (f"sao-env: warning: {out} holds an unfinished run of this configuration that --resume would continue "
            f"(from its checkpoint at simulated 0.100 h); starting it over from the beginning. To continue it "
            f"instead: sao-env run --env style-drift --agent sao --seed 0 --out {out} ") in err
    assert err.split("To continue it instead: ")[1].splitlines()[0].endswith(" --resume")
    assert calls[0]["resume"] is False


def test_a_released_lock_leaves_no_file_and_a_waiter_locks_the_path_anew(tmp_path):
    from sao_env.experiment import RunLock

    folder = tmp_path / "run"
    first = RunLock(folder)
    first.acquire()
    waiter = RunLock(folder)
    got = threading.Event()
    thread = threading.Thread(target=lambda: (waiter.acquire(wait=True), got.set()))
    thread.start()
    time.sleep(0.3)
    assert not got.is_set()
    first.release()
    thread.join(10)
    assert got.is_set()
    assert (folder / ".lock").is_file() and RunLock(folder).held_by_another()  # the waiter holds the path's file
    waiter.release()
    assert not (folder / ".lock").exists()


def _fake_finished(plan, online_reward: float) -> None:
    """The files of a finished run of ``plan`` made by this code, as ``reuse_check`` and the board read
    them: ``config.yaml`` with its provenance, an ``evals.jsonl`` of a flat curve, ``summary.json``."""
    import yaml

    from sao_env.experiment import expand_config
    from sao_env.provenance import code_version

    plan.out.mkdir(parents=True, exist_ok=True)
    provenance = {"config_hash": plan.config_hash, "code": code_version(), "overrides": list(plan.overrides)}
    (plan.out / "config.yaml").write_text(yaml.safe_dump(expand_config(plan.config) | {"provenance": provenance}))
    phases = [p.name for p in plan.config.env.phases]
    end = sum(p.duration_h for p in plan.config.env.phases) * 3600
    (plan.out / "evals.jsonl").write_text("".join(
        json.dumps({"sim_time_s": end * i / 4, **{f"eval/{p}/accuracy": online_reward for p in phases}}) + "\n"
        for i in range(5)))
    summary = {"env": plan.config.env.name, "agent": plan.label, "recipe": plan.config.agent.name,
               "algorithm": plan.config.agent.algorithm, "seed": plan.config.seed, "online_reward": online_reward,
               "auc": online_reward, "provenance": provenance}
    (plan.out / "summary.json").write_text(json.dumps(summary))


AGENTS = ("sao", "grpo", "grpo_dis", "running_mean")


@pytest.fixture
def finished_runs(tmp_path):
    from sao_env.experiment import plan_run

    runs = tmp_path / "runs"
    for i, agent in enumerate(AGENTS):
        for seed in (0, 1):
            _fake_finished(plan_run("style-drift", agent, seed, list(SHRINK), runs_dir=runs), 0.1 * (i + 1) + 0.01 * seed)
    return runs


def _compare(runs: Path, boards: Path, agents: str, capsys) -> str:
    assert main(["compare", "--agents", agents, "--seeds", "0,1", "--runs-dir", str(runs), "--leaderboard-dir",
                 str(boards), "--jobs", "1", *SHRINK]) == 0
    return capsys.readouterr().err


def _board_rows(boards: Path) -> dict[str, list[int]]:
    import pandas as pd

    table = pd.read_csv(boards / "style-drift-runs.csv")
    return {recipe: sorted(int(s) for s in group["seed"]) for recipe, group in table.groupby("recipe")}


@pytest.mark.slow  # three comparisons, each writing its board, plot and site: 5-10 s
def test_compare_merges_into_the_scenarios_earlier_board(finished_runs, tmp_path, capsys):
    boards = tmp_path / "boards"
    _compare(finished_runs, boards, ",".join(AGENTS), capsys)
    assert _board_rows(boards) == {a: [0, 1] for a in AGENTS}

    err = _compare(finished_runs, boards, "sao,grpo", capsys)
    assert _board_rows(boards) == {a: [0, 1] for a in AGENTS}  # a 2-row comparison no longer replaces a 4-row board
    assert re.search(r"merged with the earlier one; kept its 4 runs \(grpo_dis\+\w+: seeds 0, 1; running_mean\+\w+: "
                     r"seeds 0, 1\) \(their run directories are here\)", err), err

    import shutil

    for folder in (finished_runs / "style-drift").glob("running_mean+*"):
        shutil.rmtree(folder)
    err = _compare(finished_runs, boards, "sao,grpo", capsys)
    assert _board_rows(boards) == {a: [0, 1] for a in ("sao", "grpo", "grpo_dis")}
    assert re.search(r"dropped 2 runs \(running_mean\+\w+: seeds 0, 1\) \(no finished run directory under", err), err


def test_compare_dry_run_says_what_it_would_merge(finished_runs, tmp_path, capsys):
    boards = tmp_path / "boards"
    _compare(finished_runs, boards, ",".join(AGENTS), capsys)
    assert main(["compare", "--agents", "sao", "--seeds", "0,1", "--runs-dir", str(finished_runs),
                 "--leaderboard-dir", str(boards), "--dry-run", *SHRINK]) == 0
    out = capsys.readouterr().out
    assert re.search(re.escape(f"merge  {boards / 'style-drift'}.md  keeps 6 runs (") + r"grpo\+\w+: seeds 0, 1; "
                     r"grpo_dis\+\w+: seeds 0, 1; running_mean\+\w+: seeds 0, 1\) of the earlier board", out), out


HOLD_THEN_FINISH = """
import json, sys, time
from sao_env.experiment import RunLock
lock = RunLock(sys.argv[1]); lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[3]))
open(sys.argv[1] + "/summary.json", "w").write(sys.argv[2])
lock.release()
"""


def test_the_waiting_compare_does_not_claim_a_run_it_did_not_make(tmp_path, capsys):
    from sao_env.experiment import plan_run

    runs, boards = tmp_path / "runs", tmp_path / "boards"
    plan = plan_run("style-drift", "running_mean", 0, list(SHRINK), runs_dir=runs)
    _fake_finished(plan, 0.4)
    summary = (plan.out / "summary.json").read_text()
    (plan.out / "summary.json").unlink()  # unfinished: this compare would make it, but another process holds it
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THEN_FINISH, str(plan.out), summary, "2"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["compare", "--agents", "running_mean", "--seeds", "0", "--runs-dir", str(runs),
                     "--leaderboard-dir", str(boards), "--jobs", "1", *SHRINK]) == 0
    finally:
        holder.wait(30)
    err = capsys.readouterr().err
    assert f"[1/1] {plan.out} made by another process while this one waited (" in err
    assert "finished in" not in err


# ----------------------------------------------------------------------------- grids across code versions


def test_grid_dry_run_says_the_ledger_is_of_other_code_and_what_the_runs_cost(tmp_path, capsys):
    import yaml

    from sao_env.grid import load_grid, plan_grid

    folder = tmp_path / "grid"
    folder.mkdir()
    grid = folder / "grid.yaml"
    grid.write_text(yaml.safe_dump({"title": "tiny grid", "scenarios": ["style-drift"], "seeds": [0, 1],
                                    "baseline": "grpo", "cut": list(SHRINK),
                                    "rows": [{"label": "grpo", "agent": "grpo"},
                                             {"label": "running mean", "agent": "running_mean"}]}, sort_keys=False))
    (folder / "README.md").write_text("Made by commit 0123abc with Python 3.11.\n")
    runs = tmp_path / "runs"
    planned = plan_grid(load_grid(grid), source=grid, runs_dir=runs)
    (folder / "finished.jsonl").write_text("".join(
        json.dumps({"config_hash": r.plan.config_hash, "code": "src.0123456789ab", "row": {"seed": r.seed},
                    "numbers": {"online_reward": 0.5}}) + "\n" for r in planned.runs[:3]))
    timed = runs / "style-drift" / "someone" / "seed0"  # a finished run of the scenario, 3 simulated minutes in 90 s
    timed.mkdir(parents=True)
    (timed / "summary.json").write_text("{}")
    (timed / "config.yaml").write_text(yaml.safe_dump({"env": {"phases": [{"duration_h": 0.02}, {"duration_h": 0.03}]}}))
    (timed / "timings.json").write_text(json.dumps({"total_s": 100.0, "warm_start_s": 10.0, "resumed_at_sim_s": None}))

    assert main(["grid", str(grid), "--out", str(folder), "--runs-dir", str(runs), "--jobs", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "4 runs: 4 to run, 0 to reuse"
    assert out[1].startswith(f"ledger: {folder / 'finished.jsonl'} lists 3 of these runs, made by other code: "
                             "src.0123456789ab (3 runs); this code is src.")
    assert f"({folder / 'README.md'} says which commit and versions made them)" in out[3]
    assert "add --tables-only" in out[3]
    # 4 runs of 3 phases of 0.005 h = 0.06 h; at 1,800 s per simulated hour 108 core-s (0.03 h), 54 s on 2 jobs
    assert out[4] == (f"cost: 4 runs, 0.06 simulated hours; about 0.03 core-hours, 1 min at --jobs 2 (style-drift: "
                      f"1,800 s per simulated hour, the median of 1 finished run under {runs / 'style-drift'}; "
                      "a warm start not cached yet adds its training)")
    assert sum("the ledger lists it made by other code (src.0123456789ab)" in line for line in out) == 3
