"""Hostile inputs: an oversized spec file, names with ``$`` or ``../``, sizes and scales that cannot run.

Each is one line on stderr and exit code 2 within seconds, or, for names, a run that goes to its
summary inside the output folder with the name shown as written.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from conftest import shrink_overrides
from sao_env.cli import main
from sao_env.errors import UserError
from sao_env.specs import MAX_SPEC_BYTES, load_yaml

ODD_NAME = r"sao$\frac{x$"
"""An odd number of ``$`` and a TeX command: mathtext raises on it."""


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


# ----------------------------------------------------------------------------- oversized spec files


def _oversized(path: Path) -> Path:
    """A recipe whose unknown key holds over 4 MB of nested lists (PyYAML's pure-Python loader took
    seconds and hundreds of MB on it; 50 MB took 16.9 GB and never ended)."""
    chunk = "  - [" + ", ".join(["[1, 2, 3]"] * 40) + "]\n"
    with path.open("w") as f:
        f.write("name: big\nalgorithm: sao\nunknown:\n")
        for _ in range(4 * MAX_SPEC_BYTES // len(chunk) + 1):
            f.write(chunk)
    return path


def test_an_oversized_spec_is_one_line_in_seconds_and_bounded_memory(tmp_path, capsys):
    big = _oversized(tmp_path / "big.yaml")
    assert big.stat().st_size > 4 * MAX_SPEC_BYTES
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(UserError, match=r"big\.yaml: the spec file is larger than 1 MiB; refused"):
            load_yaml(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_SPEC_BYTES
    assert main(["run", "--env", "style-drift", "--agent", str(big), "--dry-run"]) == 2
    assert "big.yaml: the spec file is larger than 1 MiB; refused" in _one_line(capsys)
    grid = big.with_name("grid.yaml")
    big.rename(grid)
    assert main(["grid", str(grid), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert "grid.yaml: the grid file is larger than 1 MiB; refused" in _one_line(capsys)
    assert time.perf_counter() - start < 10


def test_a_spec_that_is_not_utf8_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: caf\xe9\nalgorithm: sao\n")
    assert main(["run", "--env", "style-drift", "--agent", str(bad), "--dry-run"]) == 2
    assert "bad.yaml: the spec file is not UTF-8 (byte 9)" in _one_line(capsys)


# ----------------------------------------------------------------------------- sizes and scales


@pytest.mark.parametrize("overrides, message", [
    (["env.max_new_tokens=100000000"], "env.max_new_tokens: Input should be less than or equal to 131072"),
    (["env.max_context_tokens=10000000000"], "env.max_context_tokens: Input should be less than or equal to 1048576"),
    (["agent.runtime.time_scale=1e300"], "agent.runtime.time_scale: Input should be less than or equal to 100"),
    (["env.phases.0.duration_h=1e9", "env.eval.interval_h=1e5"],
     "the phases last 1e+09 simulated hours, more than 1,000: such a run would not end"),
])
def test_sizes_and_scales_that_cannot_run_are_one_line_and_exit_2(overrides, message, capsys, tmp_path):
    start = time.perf_counter()
    assert main(["run", "--env", "style-drift", "--agent", "sao", *overrides, "--out", str(tmp_path / "r")]) == 2
    assert message in _one_line(capsys)
    assert time.perf_counter() - start < 10
    assert not (tmp_path / "r").exists()


# ----------------------------------------------------------------------------- names


def test_names_with_dollars_reach_plots_as_plain_text(tmp_path):
    """An adaptation plot whose recipe and phase are named ``sao$\\frac{x$`` and a grid's map whose row
    is: both drawn (mathtext raised on them), the legend showing the name as written."""
    import matplotlib.pyplot as plt

    from sao_env.leaderboard import maps
    from sao_env.leaderboard.plots import plot_curves

    curves = pd.DataFrame([(ODD_NAME, 0, t, 0.5) for t in (0.0, 0.1, 0.2)],
                          columns=["label", "seed", "sim_time_h", "accuracy"])
    facts = {"drift_times_h": "0.1", "phases": f"{ODD_NAME};b", "duration_h": 0.2, "recovery_threshold": 0.6}
    drawn = []
    close = plt.close
    try:
        plt.close = lambda fig=None: (drawn.append(fig), close(fig))
        path = plot_curves(curves, facts, tmp_path / "a.png", title=f"{ODD_NAME}: curves")
        assert path.read_bytes()[:4] == b"\x89PNG"
        texts = [t.get_text() for t in drawn[0].findobj(lambda a: hasattr(a, "get_text"))]
        rows = pd.DataFrame([{"scenario": "s", "row": label, "seed": seed, "x": x, "config_hash": f"{label}{x}{seed}",
                              "online_reward": 0.5 + 0.1 * seed + (0.05 if label == "b" else 0.0)}
                             for label in ("base", ODD_NAME) for seed in range(3) for x in ("1", "$2")])
        agg = maps.aggregate(rows, axes=["x"], rows=["base", ODD_NAME], baseline="base", metric="online_reward")
        assert maps.plot_map(agg, tmp_path / "map.png", axes=["x"], rows=["base", ODD_NAME], baseline="base",
                             metric="online_reward").read_bytes()[:4] == b"\x89PNG"
    finally:
        plt.close = close
    # Shown as written: the escaped dollar renders as a dollar, and nothing else changed.
    assert any(t.replace("\\$", "$") == f"{ODD_NAME} (n=1)" for t in texts), texts


def test_a_name_never_leads_out_of_the_output_folder(tmp_path, capsys):
    """``../`` in a recipe's or scenario's name: the run directory and the board files stay inside
    the folders given (the names become ``.._.._x``)."""
    from sao_env.experiment import plan_run

    plan = plan_run("style-drift", "sao", 0, ["agent.name=../../x", "env.name=../../y"], runs_dir=tmp_path / "runs")
    assert plan.out.resolve().is_relative_to((tmp_path / "runs").resolve())
    assert plan.out.parent.parent == tmp_path / "runs" / ".._.._y" and plan.out.parent.name.startswith(".._.._x+")
    assert plan_run("style-drift", "sao", 0, ["agent.name=.."], runs_dir=tmp_path).out.parent.name.startswith("__")
    boards = tmp_path / "boards"
    assert main(["compare", "--env", "style-drift", "--agents", "sao", "--seeds", "0", "--runs-dir", str(tmp_path / "runs"),
                 "--leaderboard-dir", str(boards), "--dry-run", "env.name=../../y", "agent.name=../../x"]) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path / 'runs'}/.._.._y/.._.._x" in out and ".._.._y.md" in out and "../" not in out.replace(str(tmp_path), "")


@pytest.mark.slow
def test_a_run_named_with_dollars_and_dots_goes_to_its_summary_inside_its_folders(tmp_path, capsys):
    """compare of a recipe named ``../../sao$\\frac{x$`` on a scenario whose first phase is named
    ``sao$\\frac{x$``: exit 0, the run's summary and plot and the board inside the folders given,
    nothing written beside them; the board names the recipe as written (``/`` aside)."""
    short = [f"env.phases.{i}.duration_h=0.002" for i in range(3)]
    runs, boards = tmp_path / "work" / "runs", tmp_path / "work" / "boards"
    args = ["compare", "--env", "style-drift", "--agents", "running_mean", "--seeds", "0", "--jobs", "1",
            "--runs-dir", str(runs), "--leaderboard-dir", str(boards), *shrink_overrides("running_mean", short),
            f"agent.name=../../{ODD_NAME}", f"env.phases.0.name={ODD_NAME}"]
    assert main(args) == 0, capsys.readouterr().err
    (summary,) = runs.rglob("summary.json")
    assert summary.parent.resolve().is_relative_to(runs.resolve())
    assert (summary.parent / "adaptation.png").is_file()
    assert json.loads(summary.read_text())["episodes_consumed"] >= 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert sorted(p.name for p in (tmp_path / "work").iterdir()) == ["boards", "runs"]
    board = (boards / "style-drift.md").read_text()
    assert ".._.._sao$" in board


# ----------------------------------------------------------------------------- --resume without a checkpoint


@pytest.mark.slow
def test_resume_without_a_usable_checkpoint_keeps_the_logs_aside(shrunk_run, shrunk_config, tmp_path, capsys):
    """An unfinished run whose checkpoints are gone (a full disk) and whose logs cannot be made again
    (a real-time run's; marked here by an extra line): ``--resume`` starts from the beginning but moves
    the logs, byte for byte, into ``unresumed-1/`` and says so; a second such resume uses ``unresumed-2/``."""
    import shutil

    from sao_env.experiment import LOGS, run_experiment

    source, _ = shrunk_run("running_mean", 0)
    out = tmp_path / "run"
    shutil.copytree(source, out)
    (out / "summary.json").unlink()
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    (out / "metrics.jsonl").write_bytes((out / "metrics.jsonl").read_bytes() + b'{"written": "before the disk filled"}\n')
    before = {name: (out / name).read_bytes() for name in LOGS}
    run_experiment(shrunk_config("running_mean"), out, show_progress=False, resume=True)
    err = capsys.readouterr().err
    assert f"no usable checkpoint in {out / 'checkpoints' / 'resume'}; the logs written so far (metrics.jsonl, evals.jsonl, " \
           f"episodes.jsonl) are kept in {out / 'unresumed-1'}; starting from the beginning" in err, err.splitlines()[-1]
    assert {name: (out / "unresumed-1" / name).read_bytes() for name in LOGS} == before
    assert (out / "summary.json").is_file()
    assert (out / "metrics.jsonl").read_bytes() != before["metrics.jsonl"]  # made again, without the extra line
    (out / "summary.json").unlink()
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    run_experiment(shrunk_config("running_mean"), out, show_progress=False, resume=True)
    assert f"kept in {out / 'unresumed-2'}" in capsys.readouterr().err
    assert {name: (out / "unresumed-1" / name).read_bytes() for name in LOGS} == before


def test_a_boards_markdown_table_shows_a_recipe_named_like_markup_as_text():
    """A recipe labelled ``<script>alert(1)</script> & co`` appears in the board's table as entities (the
    HTML site escapes it too): no raw ``<script>`` in a table row."""
    from sao_env.leaderboard.board import board_from_records
    from sao_env.leaderboard.tables import markdown

    name = "<script>alert(1)</script> & co"
    records = [{"agent": a, "label": a, "seed": s, "online_reward": 0.1 * s + (0.05 if a == name else 0.0)}
               for a in ("grpo", name) for s in range(3)]
    md = markdown(board_from_records("hand", records, [], source="test"), generator="test")
    rows = [line for line in md.splitlines() if line.startswith("|")]
    assert not any("<script>" in line for line in rows)
    assert any("| &lt;script&gt;alert(1)&lt;/script&gt; &amp; co |" in line for line in rows), rows


# ----------------------------------------------------------------------------- grade


def _predictions(tmp_path: Path, lines: list[bytes]) -> tuple[Path, list]:
    from conftest import SHARED_DATA
    from sao_env.benchmarks.loaders import make_loader

    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark rows not found at {SHARED_DATA}")
    tasks = make_loader("beyond_aime", SHARED_DATA).load()[:3]
    path = tmp_path / "preds.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"ID", tasks[i % 3].id.encode()) for i, line in enumerate(lines)) + b"\n")
    return path, tasks


def test_grade_says_which_lines_hold_bytes_that_are_not_utf8(tmp_path, capsys):
    """Two of three lines hold invalid UTF-8 inside their strings: they are graded (U+FFFD in their
    place) and stderr says so, naming the count and the first line."""
    from conftest import SHARED_DATA

    path, _ = _predictions(tmp_path, [b'{"id": "ID", "response": "\\\\boxed{1}"}',
                                      b'{"id": "ID", "response": "raw \xff bytes \\\\boxed{2}"}',
                                      b'{"id": "ID", "response": "\xc3( \\\\boxed{3}"}'])
    assert main(["grade", "--suite", "beyond_aime", "--data", str(SHARED_DATA), "--predictions", str(path),
                 "--out", str(tmp_path / "g"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert (f"sao-env: warning: {path}: 2 line(s) hold bytes that are not UTF-8 (the first at line 2); they are "
            "graded with U+FFFD in their place") in err


def test_grade_prints_plain_progress_lines_when_stderr_is_not_a_terminal(tmp_path, capsys, monkeypatch):
    """stderr captured (not a terminal): a line at the start, one per interval (0 s here: one per batch
    graded) and the last at 3 of 3."""
    from conftest import SHARED_DATA
    from sao_env.benchmarks import evaluate

    monkeypatch.setattr(evaluate, "PLAIN_PROGRESS_S", 0.0)
    path, _ = _predictions(tmp_path, [b'{"id": "ID", "response": "\\\\boxed{%d}"}' % i for i in range(3)])
    assert main(["grade", "--suite", "beyond_aime", "--data", str(SHARED_DATA), "--predictions", str(path),
                 "--out", str(tmp_path / "g")]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if ": grading: " in line]
    counts = [line.split(": grading: ")[1].split(" (")[0] for line in lines]
    assert counts[0] == "0 of 3" and counts[-1] == "3 of 3" and counts == sorted(counts)
    assert lines[-1].startswith("sao-env: ") and "(100.0%)" in lines[-1]
