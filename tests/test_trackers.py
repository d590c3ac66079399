"""Trackers mirror metrics.jsonl: the TensorBoard event file read back, W&B offline, missing packages."""

from __future__ import annotations

import json
import sys
import types

import pytest

from conftest import SHRINK
from sao_env.cli import main
from sao_env.trackers import WandbTracker, parse_loggers, scalars


def _error_line(capsys, argv) -> str:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("sao-env: error: ") and "Traceback" not in out + err, err
    return lines[0]


def test_scalars_keep_numbers_only():
    record = {"kind": "eval", "phase": "1_boxed", "sim_time_s": 36.6, "version": 3, "eval/1_boxed/accuracy": 0.25,
              "flag": True, "nan": float("nan")}
    values = scalars(record)
    assert set(values) == {"version", "eval/1_boxed/accuracy", "nan"}
    assert values["version"] == 3.0 and values["eval/1_boxed/accuracy"] == 0.25


def test_tensorboard_event_file_mirrors_metrics_jsonl(capsys, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    assert main(["run", "--agent", "grpo", "--out", str(out), "--logger", "tensorboard", *SHRINK]) == 0
    capsys.readouterr()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    expected: dict[str, list[tuple[int, float]]] = {}
    for record in records:
        for name, value in scalars(record).items():
            expected.setdefault(name, []).append((round(record["sim_time_s"]), value))
    assert any(r.get("kind") == "eval" for r in records) and any("update" in r for r in records)

    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    assert set(events.Tags()["scalars"]) == set(expected)
    for name, points in expected.items():
        got = [(e.step, e.value) for e in events.Scalars(name)]
        assert [s for s, _ in got] == [s for s, _ in points], name
        assert [v for _, v in got] == pytest.approx([v for _, v in points], rel=1e-6, nan_ok=True), name


def test_wandb_tracker_logs_every_metric_against_simulated_time(monkeypatch, tmp_path):
    calls: list[tuple] = []

    class FakeRun:
        def define_metric(self, name, **kwargs):
            calls.append(("define", name, kwargs))

        def log(self, data):
            calls.append(("log", data))

        def finish(self):
            calls.append(("finish",))

    fake = types.SimpleNamespace(init=lambda **kwargs: calls.append(("init", kwargs)) or FakeRun(),
                                 Settings=lambda **kwargs: kwargs)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    tracker = WandbTracker(tmp_path, name="style-drift/sao/seed0", config={"seed": 0})
    tracker.log({"sim_time_s": 12.5, "update": 1, "actor/loss": -0.5, "kind": "x"})
    tracker.close()
    init = calls[0][1]
    assert init["mode"] == "offline" and init["dir"] == str(tmp_path) and init["name"] == "style-drift/sao/seed0"
    assert ("define", "*", {"step_metric": "sim_time_s"}) in calls
    assert ("log", {"sim_time_s": 12.5, "update": 1.0, "actor/loss": -0.5}) in calls
    assert calls[-1] == ("finish",)


def test_wandb_offline_run_is_written_in_the_run_directory(capsys, tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    out = tmp_path / "run"
    assert main(["run", "--agent", "running_mean", "--out", str(out), "--logger", "wandb", *SHRINK]) == 0
    capsys.readouterr()
    (history,) = list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    data = history.read_bytes()
    names = {n for line in (out / "metrics.jsonl").read_text().splitlines() for n in scalars(json.loads(line))}
    assert names and all(name.encode() in data for name in names)


@pytest.mark.parametrize("logger,module", [("tensorboard", "torch.utils.tensorboard"), ("wandb", "wandb")])
def test_a_missing_tracker_package_is_one_line_naming_the_extra(capsys, monkeypatch, tmp_path, logger, module):
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    line = _error_line(capsys, ["run", "--out", str(tmp_path / "r"), "--logger", logger])
    assert f"[{logger}]'" in line  # pip install -e '.[X]' in a checkout, 'sao-env[X]' from a wheel
    assert not (tmp_path / "r").exists()  # checked before the run starts
    line = _error_line(capsys, ["compare", "--runs-dir", str(tmp_path), "--logger", logger])
    assert f"[{logger}]'" in line  # pip install -e '.[X]' in a checkout, 'sao-env[X]' from a wheel


def test_logger_names_are_checked(capsys):
    assert parse_loggers(["tensorboard,wandb", "tensorboard"]) == ("tensorboard", "wandb")
    assert parse_loggers(None) == () and parse_loggers(["none"]) == ()
    line = _error_line(capsys, ["run", "--dry-run", "--logger", "mlflow"])
    assert "mlflow" in line and "tensorboard" in line
