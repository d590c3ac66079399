"""A user's first hour (issue #54, sections 2 and 3): extras and clusters work on the first try, and an
interruption is predictable. Each test is one friction point; one shrunken run without a warm start (about
2 s) serves the two that need a finished run, and no warm start is trained whole."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sao_env.cli.app import main
from tests.conftest import SHRINK

REPO = Path(__file__).resolve().parents[1]


def _error(capsys) -> str:
    """stderr of a command that failed with a user error: exactly one line."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ------------------------------------------------------------------ 2. extras and clusters


def test_a_missing_extra_names_the_command_that_works_in_this_checkout(monkeypatch):
    """`--cluster auto` answered `pip install 'sao-env[ray]'`, which a checkout cannot use; `images status`
    demanded pytest the same way. The checkout's form is `pip install -e '.[X]'`, or `make install-all`."""
    from sao_env import cluster
    from sao_env.errors import UserError, checkout
    from sao_env.sandbox import images

    assert checkout()  # the package folder has pyproject.toml beside it
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(UserError) as err:
        with cluster.connected(cluster.Cluster("auto")):
            pass
    assert "pip install -e '.[ray]'" in str(err.value) and "make install-all" in str(err.value)
    assert "sao-env[ray]" not in str(err.value)

    def lacking(name):
        raise images.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(images.importlib.metadata, "version", lacking)
    with pytest.raises(UserError, match=r"pip install -e '\.\[dev\]'"):
        images.recipe()


def test_make_install_all_installs_every_extra_the_commands_use():
    """One command for every extra: `make install-all`, next to `install` (test and demo untouched)."""
    plan = subprocess.run(["make", "-n", "-s", "install-all"], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert plan.returncode == 0, plan.stderr
    extras = {e for line in plan.stdout.splitlines() if "-e \".[" in line
              for e in line.split("-e \".[", 1)[1].split("]", 1)[0].split(",")}
    assert {"dev", "ray", "swe", "tensorboard", "wandb", "models"} <= extras, plan.stdout


@pytest.mark.timeout(60)
def test_cluster_with_none_running_fails_in_seconds_naming_ray_start(capfd):
    """No cluster at the address: Ray retried for 40 s and the line did not say `ray start --head`."""
    pytest.importorskip("ray")
    from sao_env.cluster import Cluster, connected
    from sao_env.errors import UserError

    start = time.monotonic()
    with pytest.raises(UserError) as err:
        with connected(Cluster(f"127.0.0.1:{_free_port()}")):
            pass
    assert time.monotonic() - start < 10
    assert "ray start --head" in str(err.value)
    assert "gcs_client" not in capfd.readouterr().err


@pytest.mark.timeout(60)
def test_cluster_wanting_a_token_says_ray_auth_mode_in_one_line(monkeypatch, capfd):
    """A cluster with token authentication joined without RAY_AUTH_MODE=token: 20 lines of Ray's
    `gcs_client.cc ... InvalidAuthToken` over 31 s, then a line without the variable. Ray's client is made to
    answer as such a cluster's does (its AuthenticationError, at once)."""
    ray = pytest.importorskip("ray")
    import ray._raylet
    from ray.exceptions import AuthenticationError

    from sao_env.cluster import Cluster, connected
    from sao_env.errors import UserError

    def refused(*args, **kwargs):
        os.write(2, b"[W] gcs_client.cc:210: Failed to get cluster ID from GCS server: InvalidAuthToken\n")
        raise AuthenticationError("RPC error: InvalidAuthToken: Authentication token is missing or incorrect")

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.setattr(ray._raylet, "GcsClient", refused)
    with socket.socket() as gcs:
        gcs.bind(("", 0))  # every address: Ray names this machine by its IP, not 127.0.0.1
        gcs.listen()
        start = time.monotonic()
        with pytest.raises(UserError) as err:
            with connected(Cluster(f"127.0.0.1:{gcs.getsockname()[1]}")):
                pass
    assert time.monotonic() - start < 10 and not ray.is_initialized()
    assert "RAY_AUTH_MODE=token" in str(err.value) and "\n" not in str(err.value)
    assert "gcs_client" not in capfd.readouterr().err  # Ray's own lines are not shown


NO_WARM_START = (*SHRINK, "env.warm_start.steps=0", "agent.model.device=auto")
"""A shrunken run of a randomly initialised tiny model (no warm start to train: about 2 s) on device=auto."""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> tuple[Path, dict]:
    """(run directory, summary) of one finished ``NO_WARM_START`` run of running_mean."""
    out = tmp_path_factory.mktemp("first-hour") / "run"
    with pytest.warns(UserWarning) if not _gpu() else _nothing():
        assert main(["run", "--agent", "running_mean", "--out", str(out), *NO_WARM_START]) == 0
    return out, json.loads((out / "summary.json").read_text())


def _gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def _nothing():
    import contextlib

    return contextlib.nullcontext()


def test_device_auto_without_a_gpu_says_so_and_the_run_records_its_device(monkeypatch, finished_run):
    """device=auto fell back to the CPU without a word, and the provenance did not record the device."""
    import torch

    from sao_env.policy.placement import resolve_device

    run_dir, summary = finished_run
    expected = "cuda:0" if _gpu() else "cpu"
    assert summary["provenance"]["device"] == expected
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["provenance"]["device"] == expected
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="device=auto: torch sees no CUDA GPU here; the model runs on the CPU"):
        assert resolve_device("auto") == torch.device("cpu")


# ------------------------------------------------------------------ 3. interruption


def test_grader_workers_ignore_ctrl_c(capfd):
    """Ctrl-C reaches the whole process group: each math grading worker printed an 18-line
    KeyboardInterrupt traceback before the command's one line. A worker now ignores SIGINT."""
    from sao_env.graders.math import MathGradingPool

    pool = MathGradingPool(workers=1)
    try:
        assert pool.verify_many([("2", "2")])[0].correct
        worker = pool._workers[0].process
        os.kill(worker.pid, signal.SIGINT)
        time.sleep(0.5)
        assert worker.is_alive()
        assert pool.verify_many([("3", "3")])[0].correct and pool.restarts == 0
    finally:
        pool.close()
    assert "KeyboardInterrupt" not in capfd.readouterr().err


def test_an_interrupted_warm_start_says_what_it_costs_and_how_to_resume(monkeypatch, tmp_path, capsys):
    """SIGINT during the warm start printed no resume command, and nothing had said beforehand that the
    warm start is lost on interruption. The signal arrives (as ``cli.app.Stopped``) at its fifth batch."""
    from sao_env.cli.app import Stopped
    from sao_env.policy import warmstart

    real = warmstart.demonstration_batches

    def interrupted(tokenizer, scenario, spec, *, helper):
        for step, batch in enumerate(real(tokenizer, scenario, spec, helper=False)):
            if step == 4:
                raise Stopped(signal.SIGINT)
            yield batch

    monkeypatch.setenv("SAO_ENV_CACHE", str(tmp_path / "cache"))  # a fresh cache: the warm start trains
    monkeypatch.setattr(warmstart, "demonstration_batches", interrupted)
    out = tmp_path / "run"
    assert main(["run", "--agent", "running_mean", "--out", str(out), *SHRINK]) == 130
    err = capsys.readouterr().err
    assert "not checkpointed: an interruption loses it" in err  # said before it starts
    assert "warm start of style-drift (supervised): about " in err  # and how long it takes, once measured
    last = err.rstrip("\n").splitlines()[-1]
    assert last.startswith("sao-env: stopped by SIGINT; the warm start stopped at step 4 of 300"), last
    assert f"resume with: sao-env run --env style-drift --agent running_mean --seed 0 --out {out}" in last
    assert last.endswith("--resume (exit 130)") and "Traceback" not in err


def test_resume_of_a_finished_run_prints_its_summary_with_its_directory(finished_run, capsys):
    """`--resume` on a finished run exited 0 with nothing on stdout."""
    run_dir, summary = finished_run
    capsys.readouterr()
    assert main(["run", "--agent", "running_mean", "--out", str(run_dir), *NO_WARM_START, "--resume"]) == 0
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert printed["run_dir"] == str(run_dir)
    assert printed["online_reward"] == summary["online_reward"] and printed["agent"] == summary["agent"]
    assert "has nothing to resume" in err


def test_run_out_refuses_a_folder_holding_other_files(tmp_path, capsys):
    """`run --out DIR` wrote the run among the folder's own files."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "notes.md").write_text("mine\n")
    assert main(["run", "--agent", "running_mean", "--out", str(folder), *SHRINK]) == 2
    line = _error(capsys)
    assert "holds other files and no run (notes.md)" in line and "another --out" in line
    assert sorted(p.name for p in folder.iterdir()) == ["notes.md"]


def test_a_grid_typo_is_one_line_with_a_suggestion_before_torch_loads(tmp_path):
    """`unknown key 'metrc'` got no suggestion, after 12-15 s (torch loaded first). A fresh interpreter is the
    point here: whether the command imports torch before it answers."""
    grid = tmp_path / "grid.yaml"
    grid.write_text("rows:\n  - {label: a, agent: sao}\nscenarios: [style-drift]\nseeds: [0]\nbaseline: a\nmetrc: auc\n")
    probe = ("import sys\nfrom sao_env.cli.app import main\ncode = main(['grid', sys.argv[1]])\n"
             "print(code, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, str(grid)], capture_output=True, text=True, timeout=60,
                          cwd=REPO)
    assert done.stdout.split() == ["2", "False"], done.stdout + done.stderr
    assert done.stderr == f"sao-env: error: {grid}: unknown key 'metrc'; did you mean 'metric'?\n"


def test_eval_of_a_folder_without_a_model_says_so(tmp_path, capsys):
    """`eval docs` (neither a run nor a model folder) answered with a tokenizer error."""
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "index.md").write_text("# docs\n")
    assert main(["eval", str(folder), "--suite", "beyond_aime"]) == 2
    line = _error(capsys)
    assert "holds no checkpoints/final" in line and "no model" in line


def test_verdict_writes_under_runs_unless_asked(tmp_path, monkeypatch, capsys):
    """`verdict` wrote into the committed map folder (beside the predictions file) by default."""
    from tests.test_bad_input_lines import per_seed_csv, predictions_file

    monkeypatch.chdir(tmp_path)
    committed = tmp_path / "leaderboards" / "critic"
    committed.mkdir(parents=True)
    per_seed_csv(committed / "per-seed.csv")
    path = predictions_file(committed / "predictions.yaml")
    assert main(["verdict", str(path)]) == 0
    assert sorted(p.name for p in committed.iterdir()) == ["per-seed.csv", "predictions.yaml"]
    assert (tmp_path / "runs" / "verdicts" / "critic" / "verdict.md").is_file()
    assert main(["verdict", str(path), "--out", str(committed)]) == 0  # asked: the map's own folder
    assert (committed / "verdict.csv").is_file()
    capsys.readouterr()
