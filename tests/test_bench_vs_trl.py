"""bench/bench_vs_trl.py gives TRL what sao-env's GRPO run gets: its prompts, its reward, its settings.

None of this needs trl (the bench imports it only where TRL trains), nor the full warm start: the
prompt and reward checks build no model, and the run uses the test session's shrunk one.
"""

from __future__ import annotations

import json

import pytest

from sao_env.experiment import run_experiment
from sao_env.scenario import Scenario
from conftest import SHRINK_TASKS, load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_vs_trl")


def test_first_task_prompt_and_reward_by_hand(bench):
    scenario = Scenario(bench.sao_config(0.01).env)
    tasks = bench.first_phase_tasks(scenario, 0, 2)
    rows = bench.trl_rows(tasks)
    # seed 0's first task is 5-8 in the boxed phase: the prompt lists the phase's four styles
    assert rows[0] == {"prompt": "5-8=? styles:boxed,sentence,terse,hash\n", "task_index": 0}
    reward = bench.EnvReward(tasks, scenario)
    prompts = [rows[0]["prompt"]] * 4
    # 5-8 = -3: right answer boxed -> 1; wrong sign boxed -> 0; right answer in another listed style -> 0
    assert reward(prompts, ["\\boxed{-3}", "\\boxed{3}", "The answer is -3.", "-3"], [0] * 4) == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(AssertionError, match="not the task's"):
        reward([rows[1]["prompt"]], ["\\boxed{-3}"], [0])


@pytest.mark.slow
def test_trl_gets_the_runs_prompts_and_rewards(bench, tmp_path):
    """Every episode of a short sao-env run replays, through the bench's TRL reward on the bench's task
    for its group, to the reward and correctness the run logged (and the run has both outcomes)."""
    config = bench.sao_config(0.004, SHRINK_TASKS)  # the session's shared warm start
    summary = run_experiment(config, tmp_path / "run", show_progress=False, save_checkpoint=False)
    episodes = [json.loads(line) for line in (tmp_path / "run" / "episodes.jsonl").open()]
    episodes = [e for e in episodes if e["phase"] == "boxed"]
    assert len(episodes) >= 32 and summary["episodes_completed"] >= len(episodes)
    scenario = Scenario(config.env)
    tasks = bench.first_phase_tasks(scenario, 0, max(e["group"] for e in episodes) + 1)
    rows = bench.trl_rows(tasks)
    reward = bench.EnvReward(tasks, scenario)
    for e in episodes:
        assert tasks[e["group"]].id == e["task"]
        assert reward([rows[e["group"]]["prompt"]], [e["response"]], [e["group"]]) == [e["reward"]]
        value = e["grade/value"]
        assert (value is not None and value == tasks[e["group"]].reference["answer"]) == e["grade/correct"]
    assert {e["grade/correct"] for e in episodes} == {True, False}  # 12 of 45 correct, 2 rewarded (measured)
    assert {e["reward"] for e in episodes} == {0.0, 1.0}


def test_trl_settings_follow_the_recipe(bench, tmp_path):
    settings = bench.trl_settings(bench.sao_config(0.01), 7, str(tmp_path))
    expected = {"max_steps": 7, "per_device_train_batch_size": 8, "num_generations": 4, "gradient_accumulation_steps": 1,
                "num_iterations": 1, "max_completion_length": 24, "learning_rate": 1e-4, "lr_scheduler_type": "constant",
                "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-5, "weight_decay": 0.0, "max_grad_norm": 1.0,
                "beta": 0.0, "epsilon": 0.2, "epsilon_high": 0.28, "loss_type": "dapo", "scale_rewards": "group",
                "temperature": 1.0, "top_p": 1.0, "top_k": 0, "bf16": False, "fp16": False, "use_cpu": True,
                "gradient_checkpointing": False,
                "shuffle_dataset": False}
    assert {k: settings[k] for k in expected} == expected
    bigger = bench.resolve_config("style-drift", "grpo", 0, ["agent.hparams.group_size=8", "agent.hparams.lr=2e-4"])
    moved = bench.trl_settings(bigger, 7, str(tmp_path))
    assert (moved["per_device_train_batch_size"], moved["num_generations"], moved["learning_rate"]) == (16, 8, 2e-4)
    with pytest.raises(ValueError, match="no longer what this bench maps"):
        bench.trl_settings(bench.resolve_config("style-drift", "grpo", 0, ["agent.hparams.loss=dis"]), 7, str(tmp_path))


def test_trl_is_prompted_on_the_chat_scenario_as_sao_env_prompts_smollm2(bench, tmp_path):
    """``--model smollm2``: TRL's conversational rows (the scenario's system message, then the task as the user's)
    render through SmolLM2's template to the tokens sao-env's policy is prompted with; a row without the system
    message is refused; conversational completions are graded by sao-env's environment; the settings are the
    real-model board's (lr 1e-5, fused Adam)."""
    from sao_env.errors import UserError
    from sao_env.policy.model import build_tokenizer

    config = bench.sao_config(0.01, model="smollm2")
    try:
        tokenizer = build_tokenizer(config.agent.model)
    except UserError as err:
        pytest.skip(str(err))
    scenario = Scenario(config.env)
    tasks = bench.first_phase_tasks(scenario, 0, 4)
    rows = bench.trl_rows(tasks, config.env.chat)
    assert tokenizer.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=False) == (
        "<|im_start|>system\nAnswer in one listed style.<|im_end|>\n"
        "<|im_start|>user\n5+8=? styles:boxed,sentence,terse,hash\n<|im_end|>\n<|im_start|>assistant\n")
    bench.check_chat_prompts(tokenizer, config.env.chat, rows)
    with pytest.raises(ValueError, match="not sao-env's prompt"):  # the template's own default system message
        bench.check_chat_prompts(tokenizer, config.env.chat, [dict(r, prompt=r["prompt"][1:]) for r in rows])
    reward = bench.EnvReward(tasks, scenario)
    said = [[{"role": "assistant", "content": text}] for text in ("\\boxed{13}", "The answer is 13.", "\\boxed{12}")]
    assert reward([rows[0]["prompt"]] * 3, said, [0] * 3) == [1.0, 0.0, 0.0]  # 5+8 = 13, boxed rewarded
    settings = bench.trl_settings(config, 3, str(tmp_path))
    assert (settings["optim"], settings["learning_rate"], settings["max_completion_length"]) == ("adamw_torch_fused", 1e-5, 24)
    assert bench.trl_settings(bench.sao_config(0.01), 3, str(tmp_path))["optim"] == "adamw_torch"
