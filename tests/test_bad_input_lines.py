"""Bad input gets one line: a predictions file or per-seed table that `sao-env verdict` cannot use is one
line naming the file and the value, exit 2, before pandas and scipy load; `sao-env leaderboard` leaves a
run whose files are cut off (or hold a sort key that is NaN, a number that is infinite) out of the board
in one line that names the run and the file and counts it, and writes the board from the others; a
cluster grid stopped by a signal names its unfinished runs and the command that resumes them, in
grid.log too. Every input is made by hand: no run trains."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sao_env.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_leaderboard_site import fake_run  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BASE = [0.50, 0.52, 0.48, 0.51, 0.49, 0.53, 0.47, 0.50, 0.52, 0.48]
PREDICTION = {"id": "A", "cell": "x", "contrast": "critic - mean", "sign": ">"}


def per_seed_csv(path: Path, extra_rows: bool = True) -> Path:
    """A grid's per-seed table: cells x (rows mean and critic) and y (row mean only), 10 seeds; its line
    14 (after the header) is cell x, row mean, seed 4, online_reward 0.49."""
    rows = []
    for s, base in enumerate(BASE):
        rows.append({"scenario": "x", "row": "mean", "seed": s, "online_reward": base})
        rows.append({"scenario": "x", "row": "critic", "seed": s, "online_reward": base + 0.01 * (s + 1)})
        if extra_rows:
            rows.append({"scenario": "y", "row": "mean", "seed": s, "online_reward": base})
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def predictions_file(path: Path, *, text: str | None = None, **fields) -> Path:
    path.write_text(text if text is not None else yaml.safe_dump({"predictions": [PREDICTION], **fields}))
    return path


def one_error(capsys) -> str:
    """stderr, which must be exactly one line."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


# ----------------------------------------------------------------------------- sao-env verdict


@pytest.mark.parametrize("alpha, shown", [("5", "5.0"), ("0", "0.0"), ("-1", "-1.0"), (".nan", "nan"), (".inf", "inf")])
def test_an_alpha_that_is_no_level_is_one_line_and_exit_2(tmp_path, capsys, alpha, shown):
    """alpha 5 read p = 0.457 as held; 0 and -1 gave a traceback after 12 s; NaN made every prediction
    not resolved."""
    csv = per_seed_csv(tmp_path / "per-seed.csv")
    path = predictions_file(tmp_path / "predictions.yaml", text=f"alpha: {alpha}\npredictions:\n"
                            "- {id: A, cell: x, contrast: critic - mean, sign: '>'}\n")
    assert main(["verdict", str(path), "--per-seed", str(csv)]) == 2
    assert one_error(capsys) == (f"sao-env: error: {path}: alpha: {shown} is not a level: "
                                 "alpha must be finite, 0 < alpha < 1")
    assert not (tmp_path / "verdict.md").exists()


def test_a_bad_predictions_file_is_refused_before_pandas_and_scipy_load(tmp_path):
    """In a fresh process: the error line and exit 2 come with neither pandas nor scipy imported."""
    csv = per_seed_csv(tmp_path / "per-seed.csv")
    path = predictions_file(tmp_path / "predictions.yaml", alpha=5)
    probe = ("import sys; from sao_env.cli import main; code = main(sys.argv[1:]); "
             "print(code, 'pandas' in sys.modules, 'scipy' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe, "verdict", str(path), "--per-seed", str(csv)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.stdout.split() == ["2", "False", "False"], done.stdout + done.stderr
    assert done.stderr == f"sao-env: error: {path}: alpha: 5.0 is not a level: alpha must be finite, 0 < alpha < 1\n"
    from sao_env.leaderboard import predictions, stats

    assert predictions.ALPHA == stats.ALPHA  # the default level, named twice so that the first imports no scipy


def test_an_oversized_predictions_file_is_refused_not_echoed(tmp_path, capsys):
    """A 2 MiB title was read, parsed and echoed into verdict.md and stdout."""
    csv = per_seed_csv(tmp_path / "per-seed.csv")
    path = predictions_file(tmp_path / "predictions.yaml", title="t" * (2 << 20))
    assert main(["verdict", str(path), "--per-seed", str(csv)]) == 2
    assert one_error(capsys) == f"sao-env: error: {path}: the predictions file is larger than 1 MiB; refused"
    assert capsys.readouterr().out == "" and not (tmp_path / "verdict.md").exists()


@pytest.mark.parametrize("before, after, message", [
    ("x,mean,4,0.49", "x,mean,x4,0.49", "line 14: the seed is 'x4', not a whole number"),
    ("x,mean,4,0.49", "x,mean,,0.49", "line 14: the seed is empty, not a whole number"),
    ("x,mean,4,0.49", "x,mean,4,oops", "line 14: online_reward is 'oops', not a number"),
])
def test_a_bad_seed_or_value_in_the_per_seed_table_is_one_line(tmp_path, capsys, before, after, message):
    """Each raised ValueError (int('x4'), int(nan), float('oops')) with a traceback."""
    csv = per_seed_csv(tmp_path / "per-seed.csv")
    text = csv.read_text()
    assert text.splitlines()[13] == before
    csv.write_text(text.replace(before, after))
    path = predictions_file(tmp_path / "predictions.yaml")
    assert main(["verdict", str(path), "--per-seed", str(csv)]) == 2
    assert one_error(capsys) == f"sao-env: error: {csv}: {message}"


def test_a_row_missing_from_a_cell_is_an_error_unless_partial(tmp_path, capsys):
    """Cell y and row critic are both in the table, but no run of critic at y: that gave 'no data' and
    exit 0; the README promises an error unless --partial."""
    csv = per_seed_csv(tmp_path / "per-seed.csv")
    path = predictions_file(tmp_path / "predictions.yaml", predictions=[{**PREDICTION, "cell": "y"}])
    assert main(["verdict", str(path), "--per-seed", str(csv)]) == 2
    assert one_error(capsys) == (f"sao-env: error: prediction A: no run of row 'critic' at cell 'y' in {csv} "
                                 "(rows there: mean); with --partial it has no data")
    assert main(["verdict", str(path), "--per-seed", str(csv), "--partial", "--out", str(tmp_path)]) == 0
    assert pd.read_csv(tmp_path / "verdict.csv")["verdict"].tolist() == ["no data"]


# ----------------------------------------------------------------------------- sao-env leaderboard


def _cut(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def _edit_summary(path: Path, **values) -> None:
    path.write_text(json.dumps(json.loads(path.read_text()) | values))


def test_runs_with_cut_or_non_finite_files_are_left_out_and_counted(tmp_path, capsys):
    """Three good grpo seeds (online_reward 0.40, 0.41, 0.42) and five bad ones: evals.jsonl cut
    mid-line, episodes.jsonl cut mid-line, summary.json cut, online_reward NaN (listed as a seed, left
    out of the mean), auc infinite (printed as inf). Before: a 25-line JSONDecodeError naming no file."""
    runs = {s: fake_run(tmp_path / "runs", "grpo", s, 0.40 + 0.01 * s, 0.7) for s in range(8)}
    _cut(runs[3] / "evals.jsonl")
    (runs[4] / "episodes.jsonl").write_text('{"phase": "1_boxed", "reward": 1.0}\n{"phase": "1_bo')
    (runs[5] / "summary.json").write_text('{"env": "style-drift", "agent": "gr')
    _edit_summary(runs[6] / "summary.json", online_reward=math.nan)
    _edit_summary(runs[7] / "summary.json", auc=math.inf)
    out = tmp_path / "board"
    assert main(["leaderboard", str(tmp_path / "runs"), "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    why = ["evals.jsonl line 17 is cut off or not a JSON object",
           "episodes.jsonl line 2 is cut off or not a JSON object",
           "summary.json is cut off or not JSON at line 1, column 33",
           "summary.json: online_reward is nan, not a finite number",
           "summary.json: auc is inf, not a finite number"]
    line = "sao-env: warning: 5 runs left out: " + "; ".join(f"{runs[s]} ({w})" for s, w in zip(range(3, 8), why))
    assert [x for x in err.splitlines() if x.startswith("sao-env:")] == [line]
    board = pd.read_csv(out / "style-drift.csv")
    assert board["label"].tolist() == ["grpo"] and board["seeds"].tolist() == [3]
    assert board.loc[0, "online_reward"] == pytest.approx(0.41)
    assert board.loc[0, "seed_list"] == "0, 1, 2"
    assert sorted(pd.read_csv(out / "style-drift-runs.csv")["seed"]) == [0, 1, 2]
    assert "inf" not in (out / "style-drift.md").read_text()


def test_only_bad_runs_is_one_error_line(tmp_path, capsys):
    """Every run left out: exit 2, one line counting them, no board."""
    run = fake_run(tmp_path / "runs", "grpo", 0, 0.4, 0.7)
    _cut(run / "evals.jsonl")
    assert main(["leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "board")]) == 2
    assert one_error(capsys) == (f"sao-env: error: 1 run left out: {run} (evals.jsonl line 17 is cut off or not "
                                 "a JSON object); no board written")
    assert not (tmp_path / "board" / "style-drift.csv").exists()


# ----------------------------------------------------------------------------- a stopped cluster grid


CUT = ["env.warm_start.steps=20", "env.max_new_tokens=20", *(f"env.phases.{i}.duration_h=0.005" for i in range(3))]
SPEC = {"title": "cluster grid", "scenarios": ["style-drift"], "seeds": [0], "baseline": "grpo", "cut": CUT,
        "rows": [{"label": "grpo", "agent": "grpo"}, {"label": "running mean", "agent": "running_mean"}]}


class _Task:
    """A Ray task handle: each ``remote`` call returns the next reference, ``ref0``, ``ref1``, ..."""

    def __init__(self):
        self.submitted = 0

    def remote(self, *args):
        self.submitted += 1
        return f"ref{self.submitted - 1}"


class _StoppedRay:
    """Ray as ``cluster.run_many`` uses it, on a cluster where SIGINT arrives while the driver waits."""

    def __init__(self):
        self.cancelled = []

    def nodes(self):
        return [{"Alive": True, "Resources": {"CPU": 2.0}}]

    def cluster_resources(self):
        return {"CPU": 2.0}

    def remote(self, fn):
        return self

    def options(self, **options):
        return _Task()

    def wait(self, refs, num_returns=1, timeout=None):
        from sao_env.cli.app import Stopped

        raise Stopped(signal.SIGINT)

    def cancel(self, ref, force=False):
        self.cancelled.append(ref)


def test_a_stopped_cluster_grid_names_its_runs_and_the_resume_command(tmp_path, monkeypatch, capsys):
    """Before: 'sao-env: stopped by SIGINT (exit 130)', no run named, no resume command, nothing in grid.log."""
    from sao_env import cluster as on_cluster
    from sao_env.grid import load_grid, plan_grid

    ray = _StoppedRay()

    @contextmanager
    def connected(cluster):
        yield ray

    monkeypatch.setattr(on_cluster, "connected", connected)
    monkeypatch.chdir(tmp_path)
    Path("grid.yaml").write_text(yaml.safe_dump(SPEC, sort_keys=False))
    code = main(["grid", "grid.yaml", "--out", "out", "--cluster", "auto", "--run-resources", "CPU=2"])
    assert code == 130
    planned = plan_grid(load_grid(Path("grid.yaml")), source=Path("grid.yaml"), build_sources=False)
    runs = "; ".join(f"{run.describe([])} {run.plan.out}" for run in planned.runs)
    assert runs.startswith("style-drift | grpo | seed 0 runs/style-drift/grpo")
    line = (f"sao-env: SIGINT: 2 runs stopped on the cluster unfinished ({runs}); each resumes from its last "
            "checkpoint where its run directory is kept; resume with: sao-env grid grid.yaml --out out "
            "--cluster auto --run-resources CPU=2")
    assert capsys.readouterr().err.splitlines()[-1] == line
    assert (tmp_path / "out" / "grid.log").read_text().splitlines()[-1] == line
    assert ray.cancelled == ["ref0", "ref1"]
