"""Learning is real: SAO follows a switch of the rewarded style on held-out prompts.

A two-phase cut of style-drift (boxed for 0.25 h, then sentence for 0.55 h; tag kept for 3.6 s so that the
warm start is the scenario's own, shared with the other tests that need it; evaluations every
0.05 h), the default warm start and the sao recipe as shipped (8 single-rollout episodes per update,
lr 1e-4). SAO must raise the rewarded style's share on the held-out prompts from its warm-start level
(about one in five) to at least 0.8 during phase 1 (0.94 at the switch), and, from near zero right
after the switch, reach the scenario's recovery threshold (0.6) on the new style. The realignment
is slow at this recipe: the sentence share stays near 0.1 for 0.3 h after the switch, then climbs to
0.89 by 0.8 h. About 70 s on 2 idle cores (training does not depend on the evaluation schedule).
"""

from __future__ import annotations

import json

import pytest

from sao_env.experiment import RunConfig, run_experiment
from sao_env.specs import find_spec, load_yaml

pytestmark = pytest.mark.slow


def two_phase_config(agent: str) -> RunConfig:
    env = load_yaml(find_spec("envs", "style-drift"))
    for phase, hours in zip(env["phases"], (0.25, 0.55, 0.001)):  # the tag phase kept (3.6 s) for the shared warm start
        phase["duration_h"] = hours
    env["eval"]["interval_h"] = 0.05
    env["rollout_slots"] = 8  # calibrated on 8 slots (the scenario has 16 since its redesign)
    return RunConfig(env=env, agent=load_yaml(find_spec("agents", agent)), seed=0)


def test_sao_aligns_then_realigns_after_the_switch(tmp_path):
    config = two_phase_config("sao")
    run_experiment(config, tmp_path, show_progress=False, save_checkpoint=False)
    evals = [json.loads(line) for line in (tmp_path / "evals.jsonl").read_text().splitlines()]
    switch_s = config.env.phases[0].duration_h * 3600

    start = evals[0]["eval/boxed/style_match"]
    phase1 = [e["eval/boxed/style_match"] for e in evals if e["sim_time_s"] <= switch_s]
    phase2 = [e["eval/sentence/style_match"] for e in evals if e["sim_time_s"] > switch_s]
    assert start < 0.5, f"the warm start should not prefer boxed already: {start}"
    assert max(phase1) >= 0.8, f"boxed share in phase 1: {phase1}"
    assert phase2[0] < 0.5, f"sentence share right after the switch: {phase2}"
    assert max(phase2) >= config.env.eval.recovery_threshold, f"sentence share after the switch: {phase2}"
