"""`compare --jobs N`: runs in worker processes give the same bytes as one after another, and workers
that build the same warm start at once train it once and leave a whole cache entry."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import pytest

from conftest import SHRINK, shrink_overrides
from sao_env.cli import main
from sao_env.experiment import plan_run
from sao_env.policy import warmstart
from sao_env.scenario import Scenario

LOGS = ("metrics.jsonl", "evals.jsonl", "episodes.jsonl", "summary.json")

FORKED_COMPARE = """
import sys
from sao_env.experiment import drivers, progress
from sao_env.cli import main
choose = drivers._worker_context
progress.RUN_AMONG_OTHERS_EVERY_S = 0.0  # each worker's run: a line at every report, not every 300 s

def reporting():
    context = choose()
    print(f"workers started by {context.get_start_method()}", file=sys.stderr)
    return context

drivers._worker_context = reporting
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_jobs_2_writes_the_same_runs_and_leaderboard_as_jobs_1(capsys, tmp_path):
    """``--jobs 1`` in this process; ``--jobs 2`` as a user runs it, in a process of its own whose
    workers are forked (a test runner's worker has threads, where runs are spawned instead), and with
    an empty warm-start cache: it trains the warm start before the runs, forward passes on two
    threads, and the runs still match byte for byte. (grpo: the cheapest recipe that learns; the
    critic's passes run on the same threads as the policy's.) The warm start is cut to 60 steps: both
    sides train it (this process in the session's cache), and the comparison needs equal bytes, not a
    policy that has learned (300 steps cost the subprocess about 18 s of a core)."""
    overrides = shrink_overrides("grpo", ("env.warm_start.steps=60",))
    outputs = {}
    for jobs in (1, 2):
        runs, boards = tmp_path / f"runs{jobs}", tmp_path / f"boards{jobs}"
        argv = ["compare", "--agents", "grpo", "--seeds", "0,1", "--runs-dir", str(runs),
                "--leaderboard-dir", str(boards), "--jobs", str(jobs), *overrides]
        if jobs == 1:
            code = main(argv)
            out, err = capsys.readouterr()
        else:
            env = {**os.environ, "SAO_ENV_CACHE": str(tmp_path / "empty-cache")}
            done = subprocess.run([sys.executable, "-c", FORKED_COMPARE, *argv], capture_output=True, text=True, env=env)
            code, out, err = done.returncode, done.stdout, done.stderr
            assert "workers started by fork" in err and "2 thread(s) on its forward passes" in err, err
            assert "warm start trained in" in err, err
            for seed in (0, 1):  # each worker's run says where it stands, on the stderr it shares with this process
                shares = [int(m.group(1)) for m in re.finditer(rf"^sao-env: grpo on style-drift seed {seed}: (\d+)% ", err, re.M)]
                assert len(shares) > 10 and shares == sorted(shares) and shares[-1] <= 100, err[-2000:]
        assert code == 0, err
        # One progress line per finished run.
        assert sum(1 for line in err.splitlines() if "finished in" in line) == 2, err
        plans = [plan_run("style-drift", "grpo", seed, overrides, runs_dir=runs) for seed in (0, 1)]
        outputs[jobs] = ({(p.out.name, name): (p.out / name).read_bytes() for p in plans for name in LOGS},
                         (boards / "style-drift.csv").read_bytes(), (boards / "style-drift.md").read_text(), out)
    (runs1, csv1, md1, out1), (runs2, csv2, md2, out2) = outputs[1], outputs[2]
    assert runs1.keys() == runs2.keys()
    for key in runs1:
        assert runs1[key] and runs1[key] == runs2[key], key
    assert csv1 == csv2 and md1 == md2
    # The printed table too (the warm start's transient progress bar may leave a blank line before it).
    assert out1.strip() == out2.strip() == md1.strip()


def test_concurrent_builders_of_one_warm_start_train_it_once(monkeypatch, tmp_path, shrunk_config):
    monkeypatch.setenv("SAO_ENV_CACHE", str(tmp_path))
    trained = []

    def slow_training(model, tokenizer, scenario, spec, *, show_progress=True, forward_threads=None):
        trained.append(threading.get_ident())
        time.sleep(1.0)  # long enough for the other builder to arrive while this one trains
        return []

    monkeypatch.setattr(warmstart, "supervised_warm_start", slow_training)
    config = shrunk_config("sao")
    scenario = Scenario(config.env)
    results = []

    def build():
        results.append(warmstart.load_warm_started(config.agent.model, scenario, show_progress=False))

    threads = [threading.Thread(target=build) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trained) == 1 and len(results) == 2
    (entry,) = [p for p in (tmp_path / "warmstart").iterdir() if p.is_dir()]
    assert (entry / "config.json").is_file() and results[0][2] == results[1][2] == entry
    assert not [p for p in (tmp_path / "warmstart").iterdir() if ".tmp" in p.name]
    first, second = (r[0].state_dict() for r in results)
    assert all((first[k] == second[k]).all() for k in first)


def test_a_run_folder_that_cannot_be_written_is_one_line_before_any_warm_start_or_worker(tmp_path):
    """As a user runs it (its own process, where workers would be forked and missing warm starts trained
    first), with an empty warm-start cache: the unwritable run folder is one line and exit 2 at once.
    It used to come from the workers, after the warm start had trained (minutes on codebase-drift)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "style-drift").write_text("a file where the scenario's folder should be\n")
    argv = ["compare", "--agents", "sao,grpo", "--seeds", "0", "--runs-dir", str(runs), "--jobs", "2",
            "--leaderboard-dir", str(tmp_path / "boards"), *SHRINK]
    cache = tmp_path / "empty-cache"
    done = subprocess.run([sys.executable, "-c", FORKED_COMPARE, *argv], capture_output=True, text=True,
                          env={**os.environ, "SAO_ENV_CACHE": str(cache)})
    out, err = done.stdout, done.stderr
    assert done.returncode == 2, err
    (line,) = err.splitlines()
    assert line.startswith(f"sao-env: error: cannot write {runs / 'style-drift'}") and line.endswith("Not a directory"), err
    assert "warm start" not in err and "workers started" not in err and not out
    assert not (cache / "warmstart").exists() or not any((cache / "warmstart").iterdir())


KILLED_WORKER = """
import os, signal, sys
import torch
from sao_env.experiment import drivers
from sao_env.cli import main
made = drivers.run_plan

def run_plan(plan, **options):
    if plan.config.seed == 1:  # this worker dies as the out-of-memory killer ends one: SIGKILL, at its 1st update
        step, calls = torch.optim.Adam.step, [0]

        def killing_step(self, *a, **k):
            calls[0] += 1
            if calls[0] == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            return step(self, *a, **k)

        torch.optim.Adam.step = killing_step
    return made(plan, **options)

drivers.run_plan = run_plan
sys.exit(main(sys.argv[1:]))
"""


def test_a_worker_killed_mid_run_is_one_line_naming_its_run_and_the_likely_cause(tmp_path):
    """As a user runs it (its own process, forked workers): one worker is killed with SIGKILL inside its run, as
    the out-of-memory killer does (the real-model board's two SAO runs at once on 24 GB). The pool breaks; the
    command says so in one line that names the worker, the signal, the run it was making (from the run's lock)
    and the likely cause, exits 2, and prints no traceback."""
    runs = tmp_path / "runs"
    argv = ["compare", "--agents", "grpo", "--seeds", "0,1", "--runs-dir", str(runs), "--jobs", "2",
            "--leaderboard-dir", str(tmp_path / "boards"), *shrink_overrides("grpo")]
    done = subprocess.run([sys.executable, "-c", KILLED_WORKER, *argv], capture_output=True, text=True)
    assert done.returncode == 2, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("sao-env: error:")]
    seed1 = plan_run("style-drift", "grpo", 1, shrink_overrides("grpo"), runs_dir=runs).out
    found = re.fullmatch(r"sao-env: error: worker (\d+) was killed by SIGKILL while making (\S+) \(on Linux most often "
                         r"the out-of-memory killer: `dmesg` says; fewer runs at once with --jobs, or more memory or "
                         r"swap, avoids it\); the runs in flight resume from their checkpoints when the command is run "
                         r"again", line)
    assert found and found.group(2) == str(seed1), line
    assert (seed1 / ".lock").read_text().startswith(f"pid {found.group(1)} on host ")
    assert "Traceback" not in done.stderr and not (seed1 / "summary.json").exists()
