"""bench/bench_gpu.py in its smoke mode: every part of the GPU check runs on the CPU at tiny sizes, so the
script a GPU session runs is known to work before a device is lent."""

from __future__ import annotations

import json

import pytest

from conftest import load_bench

pytestmark = pytest.mark.slow


def test_smoke_mode_runs_every_part(tmp_path):
    bench = load_bench("bench_gpu")
    report = bench.main(["--smoke", "--out", str(tmp_path / "out.json")])
    assert json.loads((tmp_path / "out.json").read_text())["smoke"] is True
    for agent in ("sao", "grpo"):
        run = report["recipe"][agent]
        assert run["device_run"]["updates"] > 0 and run["cpu"]["online_reward"]["n"] == 1
        assert run["curve_points_inside_cpu_range"][1] == len(run["device_run"]["curve"]) > 0
    large = report["large"]
    assert large["generation"][0]["generated_tokens_per_s"] > 0
    row = large["learner"][0]
    assert row["grpo"]["tokens_per_s"] > 0 and row["sao"]["tokens_per_s"] > 0 and row["sao_over_grpo"] > 0
    assert bench.model_flops(bench.build_large(bench.SMOKE_MODEL, bench.torch.device("cpu")), 10, 10) > 0
