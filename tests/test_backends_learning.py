"""The real-time ``threads`` backend learns: on style-drift's boxed phase it ends within sim's
seed-to-seed allowance. A file of its own (not tests/test_backends.py) so that the parallel test run
can place this ~1-2 minute test beside the other backend tests rather than after them."""

from __future__ import annotations

import json

import pytest

from sao_env.experiment import run_experiment


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def boxed_phase(backend: str, seed: int, out):
    """style-drift's first phase (boxed) for 0.15 h (the others cut to 3.6 s) on 8 slots, the sao recipe; the boxed share of the
    held-out answers at each evaluation (every 0.05 h). ``threads`` at time_scale 0.1: 54 s of wall clock,
    enough for the 2 cores to keep up with the scaled latencies (at 0.05 it makes ~20% fewer updates)."""
    from sao_env.experiment import RunConfig
    from sao_env.specs import find_spec, load_yaml

    env = load_yaml(find_spec("envs", "style-drift"))
    for phase, hours in zip(env["phases"], (0.15, 0.001, 0.001)):  # all three kept: the scenario's own warm start
        phase["duration_h"] = hours
    env["eval"]["interval_h"] = 0.05
    env["rollout_slots"] = 8
    agent = load_yaml(find_spec("agents", "sao"))
    agent["runtime"].update(backend=backend, time_scale=0.1)
    run_experiment(RunConfig(env=env, agent=agent, seed=seed), out, show_progress=False, save_checkpoint=False)
    return [e["eval/boxed/style_match"] for e in read_jsonl(out / "evals.jsonl")]


@pytest.mark.slow
def test_threads_learns_within_sims_seed_to_seed_spread(tmp_path):
    # Measured: sim seeds 0-2 end at 0.73, 0.75, 0.72 (from 0.19), a seed-to-seed spread of 0.03, below the
    # 0.1 allowed here, so sim's seed 0 alone is the reference; threads at time_scale 0.05 ended at 0.64.
    sim = boxed_phase("sim", 0, tmp_path / "sim")
    real = boxed_phase("threads", 0, tmp_path / "threads")
    assert real[-1] >= sim[-1] - 0.1, f"threads ends at {real[-1]:.2f}; sim at {sim[-1]:.2f}"
    assert real[-1] >= real[0] + 0.2, f"threads did not learn the boxed style: {real}"
