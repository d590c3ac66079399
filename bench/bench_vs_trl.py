"""One GRPO run of sao-env against TRL's ``GRPOTrainer``, side by side on this machine (episodes per second).

Both sides start from the same weights (style-drift's supervised warm start, read from the cache by
``sao_env.policy.warmstart.load_warm_started``: the tiny Qwen2 and its character tokenizer), in fp32,
on one torch thread each, and train on the prompts of style-drift's first phase (boxed) with the
same reward. The settings TRL gets are read from sao-env's own recipe and scenario
(``trl_settings``), so they cannot drift apart:

- 8 completions per step: 2 prompts x 4 completions each (sao-env: ``groups_per_update=2``,
  ``group_size=4``; TRL: ``per_device_train_batch_size=8``, ``num_generations=4``);
- at most 24 new tokens, sampled at temperature 1 with no top-p/top-k cut;
- Adam, lr 1e-4 constant, betas (0.9, 0.999), eps 1e-5, no weight decay, gradient norm clipped at 1;
- the PPO clipped loss with clip-higher (0.2/0.28), group advantages (r - mean) / std, the loss
  averaged over all action tokens of the batch (TRL's ``loss_type="dapo"`` with one process and
  no accumulation), one pass per batch, no KL (``beta=0``), no entropy bonus;
- the prompts: TRL's dataset is the first ``2 x steps`` tasks of the very stream sao-env's
  simulator draws from (``first_phase_tasks``), in order (``shuffle_dataset=False``);
- the reward: TRL's reward function (``EnvReward``) plays each completion through sao-env's own
  environment for its task (``make_task_env``, reset then step), i.e. sao-env's style grader:
  1 for the right answer in the rewarded form, else 0.

What each side does per step:

- sao-env (``sao-env run --env style-drift --agent grpo``, ``run_experiment``): the ``sim``
  runtime keeps 16 rollout slots busy; waiting requests are sampled together by sao-env's own
  KV-cached decoder (several groups per call), recording each token's log-probability; each
  episode is graded by its environment and completes after a simulated latency; the learner takes
  2 complete groups in completion order (admitting episodes up to 16 versions stale), does one
  forward and backward and an Adam step, and the new weights are copied to the rollout model. The
  run writes its logs (metrics, episodes, evaluations as JSON lines), its config and, at the end,
  its adaptation plot. Its held-out evaluation samples 64 prompts of each of the three phases'
  sets every 0.02 simulated hours and at the end. The run lasts ``steps`` updates' worth of
  simulated time in the first phase (sized by a short probe run); the two later phases are cut to
  0.36 simulated seconds (they are part of the scenario; only their held-out sets matter here).
- TRL (``GRPOTrainer.train``): each step generates the 8 completions with transformers'
  ``generate`` (KV-cached), decodes them, scores them with the reward function, computes group
  advantages, then one forward (log-probabilities and entropies) and backward pass and an AdamW
  step; logs stay in memory (``report_to="none"``), nothing is saved. Gradient checkpointing,
  on by default in TRL's ``GRPOConfig``, is turned off: it recomputes each layer's forward in the
  backward pass to save memory, which a 0.3M-parameter model does not need and sao-env does not
  do, so leaving it on would charge TRL for work the comparison is not about.

What differs, and cannot be made the same: sao-env is asynchronous (its learner trains on
episodes sampled by earlier weights, clipped against the recorded log-probabilities), TRL is
synchronous and on-policy (with one pass its ratio is exactly 1 and it computes no old
log-probabilities); sao-env's simulator batches generation across whatever requests are waiting,
TRL generates exactly one step's 8 rows per call; the two samplers are different code (sao-env's
decoder, transformers' generation loop); sao-env's run ends at a simulated time, so its updates
and episodes are close to, not exactly, ``steps`` and ``8 x steps`` (both are printed); the
advantage's std guard is 1e-6 in sao-env and 1e-4 in TRL; sao-env pays for writing its logs.

What is timed: for TRL, ``trainer.train()``; for sao-env, ``run_experiment`` less its warm-start
load (``timings.json``'s ``warm_start_s``: reading the weights and building the agent), with and
without its evaluation (less ``eval_s``: the simulation never lets evaluation change the training
run, ``sao_env/runtime/sim.py``, so that is the same run without it). Each is timed twice: wall
clock, and the process's CPU time (``time.process_time``, all its threads), which other processes
on shared cores move much less than the wall clock (not at all: shared caches and cores still slow
the same work). sao-env's CPU figures leave out the CPU time spent inside ``build_agent`` (the
warm-start load) and, without evaluation, inside ``evaluate_heldout`` (the bench wraps both for the
timed run); the few setup steps around ``build_agent`` that ``warm_start_s`` also covers (under
0.1 s: the scenario, the provenance, config.yaml) stay in its CPU figure. Each side runs in a fresh
process after an untimed warm-up run of its own (imports and lazy initialisation), and the rounds
alternate which side goes first. Episodes per second counts the episodes trained on (sao-env:
``episodes_consumed``; TRL: 8 per step). The figures are medians over the rounds.

``--model smollm2``: the same comparison on SmolLM2-135M-Instruct (packaged) and chat-style-drift, with the recipe
as the real-model board runs GRPO (lr 1e-5, fused Adam on both sides: TRL's ``adamw_torch_fused``), from the
scenario's warm start (40 supervised steps of the format). TRL gets conversational rows (the scenario's system
message, then the task as the user's message) and renders them through the tokenizer's chat template itself;
``check_chat_prompts`` stops the bench unless every row renders to the very tokens sao-env's policy is prompted
with. Its completions reach ``EnvReward`` as messages; their text is graded. 16 steps a run by default.

Run: ``python bench/bench_vs_trl.py [--model tiny|smollm2] [--rounds 3] [--steps N] [--quick] [--profile sao|trl]``;
needs trl (``pip install -e '.[bench]'``). ``--profile SIDE`` runs one timed run of that side in
this process under cProfile and prints where its time goes. The last line is
``sao-env/TRL episodes per second: X.XXx`` (sao-env with its evaluation included, wall clock);
the line before it gives the same ratio in CPU time.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import cProfile
import functools
import importlib
import importlib.util
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from sao_env.envs.base import make_task_env
from sao_env.experiment import RunConfig, build_agent_config, resolve_config, run_experiment
from sao_env.policy.warmstart import load_warm_started
from sao_env.scenario import Scenario
from sao_env.types import Task

RECIPE, SEED = "grpo", 0
MODELS = {
    "tiny": ("style-drift", ()),
    "smollm2": ("chat-style-drift", ("agent.model.name=smollm2-135m-instruct", "agent.hparams.lr=1.0e-5",
                                     "agent.hparams.fused_adam=true")),
}
"""``--model``: the scenario and the recipe's overrides. ``tiny``: the character model on style-drift (warm-started
Qwen2, 0.3M parameters); ``smollm2``: SmolLM2-135M-Instruct (packaged) on chat-style-drift, as the real-model board
runs GRPO (leaderboards/real-model/grid.yaml: lr 1e-5, fused Adam), prompts through its chat template."""
DEFAULT_STEPS = {"tiny": 100, "smollm2": 16}
LATER_PHASES_H = 1e-4
"""Simulated hours each phase after the first is cut to (0.36 s: the run is in the first phase)."""
PROBE_H = 0.01
"""The probe run's first phase, in simulated hours: its updates per hour size the timed run."""
WARMUP_STEPS = 2
"""TRL's untimed warm-up run, in steps."""
RESULT = "RESULT "


def sao_config(first_phase_h: float, extra: tuple[str, ...] = (), model: str = "tiny") -> RunConfig:
    """sao-env's GRPO on ``model``'s scenario (``MODELS``), seed 0, the first phase lasting ``first_phase_h``
    simulated hours (``extra``: further overrides, for tests)."""
    env, overrides = MODELS[model]
    phases = len(resolve_config(env, RECIPE, SEED).env.phases)
    cut = [f"env.phases.0.duration_h={first_phase_h:.6g}"]
    cut += [f"env.phases.{i}.duration_h={LATER_PHASES_H}" for i in range(1, phases)]
    return resolve_config(env, RECIPE, SEED, [*overrides, *cut, *extra])


def first_phase_tasks(scenario: Scenario, seed: int, n: int) -> list[Task]:
    """The first ``n`` tasks the ``sim`` runtime of ``seed`` draws, had its first phase no end.

    The runtime draws one task per group from ``np.random.default_rng([seed, 1])`` with
    ``index`` = the group's number (``SimRuntime._start_request``); in the first phase the draw
    does not depend on the time (tests/test_bench_vs_trl.py checks it against a run's episodes).
    """
    rng = np.random.default_rng([seed, 1])
    return [scenario.next_task(0.0, rng, index=i) for i in range(n)]


class EnvReward:
    """TRL reward function: each completion played through sao-env's environment for its task.

    ``task_index`` is the dataset's column naming the task of each completion's prompt; the reward
    is the environment's after one step with the completion's text (style-drift: the style grader,
    1.0 for the right answer in the rewarded form, else 0.0).
    """

    __name__ = "sao_env_reward"

    def __init__(self, tasks: list[Task], scenario: Scenario):
        self.tasks, self.spec = tasks, scenario.spec

    def __call__(self, prompts: list, completions: list, task_index: list[int], **_) -> list[float]:
        rewards = []
        for prompt, completion, i in zip(prompts, completions, task_index):
            env = make_task_env(self.tasks[i], latency=self.spec.latency, max_turns=self.spec.max_turns)
            observation, _ = env.reset(seed=i, options={"task": self.tasks[i]})
            assert observation == _text(prompt), "the prompt TRL was given is not the task's"
            _, reward, *_ = env.step(_text(completion))
            env.close()
            rewards.append(float(reward))
        return rewards


def _text(message) -> str:
    """A prompt or completion as TRL hands it to a reward function: text, or (conversational) its last message's."""
    return message[-1]["content"] if isinstance(message, list) else message


def trl_settings(config: RunConfig, steps: int, out: str) -> dict:
    """``GRPOConfig`` keyword arguments equivalent to sao-env's recipe and scenario in ``config``."""
    hp = build_agent_config(config.agent)
    if config.agent.algorithm != "grpo" or hp.loss != "ppo_clip" or hp.agg != "token_mean" or not hp.normalize_std \
            or hp.epochs != 1 or hp.minibatches != 1 or hp.dual_clip is not None or hp.reward_norm:
        raise ValueError(f"the {config.agent.name} recipe is no longer what this bench maps onto TRL: {hp}")
    return {
        "output_dir": out, "max_steps": steps, "seed": config.seed,
        "per_device_train_batch_size": hp.group_size * hp.groups_per_update, "num_generations": hp.group_size,
        "gradient_accumulation_steps": 1, "num_iterations": 1,
        "max_completion_length": config.env.max_new_tokens,
        "temperature": config.agent.runtime.temperature, "top_p": config.agent.runtime.top_p, "top_k": 0,
        "learning_rate": hp.lr, "lr_scheduler_type": "constant", "warmup_steps": 0,
        "optim": "adamw_torch_fused" if hp.fused_adam else "adamw_torch",
        "weight_decay": 0.0, "adam_beta1": hp.adam_betas[0], "adam_beta2": hp.adam_betas[1], "adam_epsilon": hp.adam_eps,
        "max_grad_norm": hp.grad_clip,
        "beta": 0.0, "epsilon": hp.eps_low, "epsilon_high": hp.eps_high, "loss_type": "dapo",
        "scale_rewards": "group", "mask_truncated_completions": False,
        "shuffle_dataset": False, "bf16": False, "fp16": False, "use_cpu": True, "gradient_checkpointing": False,
        "report_to": "none", "save_strategy": "no", "logging_steps": 10, "disable_tqdm": True,
        "dataloader_num_workers": 0, "dataloader_pin_memory": False,
    }


def trl_rows(tasks: list[Task], chat=None) -> list[dict]:
    """TRL's dataset rows: the task's prompt as sao-env renders it and its index (for ``EnvReward``); with the
    scenario's ``chat`` spec, the prompt as TRL's conversational rows (the system message, then the prompt as the
    user's), which TRL renders through the tokenizer's chat template (``check_chat_prompts``)."""
    rows = []
    for i, task in enumerate(tasks):
        prompt, _ = make_task_env(task).reset(seed=i, options={"task": task})
        if chat is not None:
            prompt = ([{"role": "system", "content": chat.system}] if chat.system is not None else []) + [
                {"role": "user", "content": prompt}]
        rows.append({"prompt": prompt, "task_index": i})
    return rows


def check_chat_prompts(tokenizer, chat, rows: list[dict]) -> None:
    """Each conversational row, rendered as TRL renders it, is the token sequence sao-env's policy is prompted with
    (``ChatFormat.prompt_ids``): otherwise the two sides would not learn the same task."""
    from sao_env.policy.chat import conversation_format

    layout = conversation_format(tokenizer, chat)
    for row in rows:
        trl = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        ids = tuple(tokenizer(trl, add_special_tokens=False)["input_ids"])
        if ids != layout.prompt_ids(_text(row["prompt"])):
            raise ValueError(f"TRL's rendering of row {row['task_index']} is not sao-env's prompt: {trl!r}")


def run_trl(steps: int, profile: cProfile.Profile | None = None, model_name: str = "tiny") -> dict:
    """One timed ``GRPOTrainer.train()`` of ``steps`` steps (after an untimed warm-up run)."""
    import transformers
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    transformers.logging.set_verbosity_error()
    config = sao_config(steps / 1000, model=model_name)
    scenario = Scenario(config.env)
    model, tokenizer, _ = load_warm_started(config.agent.model, scenario, show_progress=False)
    per_step = build_agent_config(config.agent).groups_per_update
    tasks = first_phase_tasks(scenario, config.seed, per_step * steps)
    rows = trl_rows(tasks, config.env.chat)
    if config.env.chat is not None:
        check_chat_prompts(tokenizer, config.env.chat, rows)

    def trainer(policy, n: int, out: str):
        return GRPOTrainer(model=policy, processing_class=tokenizer, reward_funcs=EnvReward(tasks, scenario),
                           args=GRPOConfig(**trl_settings(config, n, out)),
                           train_dataset=Dataset.from_list(rows[: per_step * n]))

    with tempfile.TemporaryDirectory() as tmp:
        trainer(copy.deepcopy(model), WARMUP_STEPS, f"{tmp}/warm").train()
        timed = trainer(model, steps, f"{tmp}/run")
        start, cpu_start = time.perf_counter(), time.process_time()
        if profile:
            profile.enable()
        timed.train()
        if profile:
            profile.disable()
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    rewards = [entry["reward"] for entry in timed.state.log_history if "reward" in entry]
    done = timed.state.global_step
    return {"side": "trl", "steps": done, "episodes": done * timed.args.per_device_train_batch_size, "wall_s": wall,
            "cpu_s": cpu, "reward_mean": float(np.mean(rewards)) if rewards else float("nan")}


@contextlib.contextmanager
def cpu_inside(module_name: str, *names: str):
    """Yields a dict of the process CPU seconds spent inside each function ``names`` of the module
    (wrapped for the ``with`` block, then restored); the calls go through the module's own globals."""
    module = importlib.import_module(module_name)
    spent = dict.fromkeys(names, 0.0)
    originals = {name: getattr(module, name) for name in names}

    def timed(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] += time.process_time() - start
        return wrapper

    for name, fn in originals.items():
        setattr(module, name, timed(name, fn))
    try:
        yield spent
    finally:
        for name, fn in originals.items():
            setattr(module, name, fn)


def run_sao(steps: int, profile: cProfile.Profile | None = None, model_name: str = "tiny") -> dict:
    """One timed sao-env GRPO run of about ``steps`` updates (after an untimed probe run that sizes it)."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = run_experiment(sao_config(PROBE_H, model=model_name), Path(tmp) / "probe", show_progress=False,
                               save_checkpoint=False)
        config = sao_config(steps / probe["updates_per_hour"], model=model_name)
        with cpu_inside("sao_env.experiment.run", "build_agent", "evaluate_heldout") as inside:
            start, cpu_start = time.perf_counter(), time.process_time()
            if profile:
                profile.enable()
            summary = run_experiment(config, Path(tmp) / "run", show_progress=False, save_checkpoint=False)
            if profile:
                profile.disable()
            wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        timings = json.loads((Path(tmp) / "run" / "timings.json").read_text())
        evals = sum(1 for _ in (Path(tmp) / "run" / "evals.jsonl").open())
    return {"side": "sao", "steps": summary["final_version"], "episodes": summary["episodes_consumed"],
            "generated": timings["generate_rows"], "wall_s": wall - timings["warm_start_s"],
            "eval_s": timings["eval_s"], "cpu_s": cpu - inside["build_agent"], "eval_cpu_s": inside["evaluate_heldout"],
            "generate_s": timings["generate_s"], "update_s": timings["update_s"],
            "generate_batches": timings["generate_batches"], "evals": evals, "reward_mean": summary["online_reward"]}


SIDES = {"sao": run_sao, "trl": run_trl}


def child(side: str, steps: int, model: str) -> None:
    torch.set_num_threads(1)
    print(RESULT + json.dumps(SIDES[side](steps, model_name=model)), flush=True)


def measure(side: str, steps: int, model: str) -> dict:
    """One side's run in a fresh process of this interpreter, on one thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, __file__, "--child", side, "--steps", str(steps), "--model", model], env=env,
                          capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode or not lines:
        sys.exit(f"bench_vs_trl: the {side} run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(RESULT):])


def rates(result: dict) -> dict:
    """Episodes per second of one run, of wall clock and (``_cpu``) of CPU time (sao-env: with and
    without its evaluation)."""
    if result["side"] == "trl":
        return {"trl": result["episodes"] / result["wall_s"], "trl_cpu": result["episodes"] / result["cpu_s"]}
    return {"sao": result["episodes"] / result["wall_s"],
            "sao_no_eval": result["episodes"] / (result["wall_s"] - result["eval_s"]),
            "sao_cpu": result["episodes"] / result["cpu_s"],
            "sao_no_eval_cpu": result["episodes"] / (result["cpu_s"] - result["eval_cpu_s"])}


def describe(result: dict) -> str:
    r = rates(result)
    if result["side"] == "trl":
        return (f"TRL      {r['trl']:6.2f} episodes/s  (CPU: {r['trl_cpu']:.2f}; {result['episodes']} episodes, "
                f"{result['steps']} steps, {result['wall_s']:.1f} s, CPU {result['cpu_s']:.1f} s; "
                f"mean reward {result['reward_mean']:.3f})")
    return (f"sao-env  {r['sao']:6.2f} episodes/s with evaluation, {r['sao_no_eval']:.2f} without  (CPU: "
            f"{r['sao_cpu']:.2f} and {r['sao_no_eval_cpu']:.2f}; {result['episodes']} episodes, "
            f"{result['steps']} updates, "
            f"{result['wall_s']:.1f} s, CPU {result['cpu_s']:.1f} s: generation "
            f"{result['generate_s']:.1f} s in {result['generate_batches']} calls, learner {result['update_s']:.1f} s, "
            f"evaluation {result['eval_s']:.1f} s in {result['evals']}; online reward {result['reward_mean']:.3f})")


def profile_side(side: str, steps: int, model: str, top: int = 15) -> None:
    """One timed run of ``side`` in this process under cProfile: its time split, then the top entries."""
    torch.set_num_threads(1)
    profile = cProfile.Profile()
    result = SIDES[side](steps, profile, model_name=model)
    print(describe(result))
    if side == "sao":
        other = result["wall_s"] - result["generate_s"] - result["update_s"] - result["eval_s"]
        print(f"time split (wall, profiled): generation {result['generate_s']:.2f} s, learner {result['update_s']:.2f} s, "
              f"evaluation {result['eval_s']:.2f} s, everything else {other:.2f} s of {result['wall_s']:.2f} s")
    stats = pstats.Stats(profile)
    for key, title in (("tottime", "self"), ("cumulative", "cumulative")):
        print(f"\ntop {top} by {title} time (cProfile; its overhead inflates Python-heavy code):")
        print(f"{'self s':>8}{'cum s':>8}{'calls':>9}  function")
        rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2 if key == "tottime" else 3], reverse=True)[:top]
        for (path, line, name), (_, calls, self_s, cum_s, _) in rows:
            where = f"{Path(path).parent.name}/{Path(path).name}:{line}" if line else path
            print(f"{self_s:8.2f}{cum_s:8.2f}{calls:9d}  {name}  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="Interleaved rounds (each: one run of each side).")
    parser.add_argument("--steps", type=int, help="Learner steps per run (default: 100 for tiny, style-drift's first "
                        "phase; 16 for smollm2).")
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny",
                        help="tiny: the character model on style-drift; smollm2: SmolLM2-135M-Instruct on chat-style-drift.")
    parser.add_argument("--quick", action="store_true", help="Smoke mode: one round of 10 steps.")
    parser.add_argument("--profile", choices=sorted(SIDES), help="Profile one run of this side instead.")
    parser.add_argument("--child", choices=sorted(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.steps = args.steps if args.steps is not None else DEFAULT_STEPS[args.model]
    if args.quick:
        args.rounds, args.steps = 1, 10 if args.model == "tiny" else 3
    if args.child:
        child(args.child, args.steps, args.model)
        return
    if args.rounds < 1 or args.steps < 1:
        sys.exit("bench_vs_trl: --rounds and --steps must be at least 1")
    if importlib.util.find_spec("trl") is None:
        sys.exit("bench_vs_trl: needs trl (pip install -e '.[bench]')")
    import trl

    config = sao_config(args.steps / 1000, model=args.model)
    print(f"warm start: {load_warm_started(config.agent.model, Scenario(config.env))[2]}", flush=True)
    if args.profile:
        profile_side(args.profile, args.steps, args.model)
        return
    hp = build_agent_config(config.agent)
    print(f"sao-env GRPO against TRL {trl.__version__} GRPOTrainer on {config.agent.model.name} ({config.env.name}): "
          f"{args.rounds} rounds x {args.steps} steps; "
          f"{hp.groups_per_update} prompts x {hp.group_size} completions of <= {config.env.max_new_tokens} "
          f"tokens per step, lr {hp.lr:g}, fp32, torch {torch.__version__}, one thread per run", flush=True)
    figures: dict[str, list[float]] = {key: [] for key in ("sao", "sao_no_eval", "trl", "sao_cpu", "sao_no_eval_cpu",
                                                            "trl_cpu")}
    for r in range(args.rounds):
        for side in ("sao", "trl") if r % 2 == 0 else ("trl", "sao"):
            result = measure(side, args.steps, args.model)
            for key, value in rates(result).items():
                figures[key].append(value)
            print(f"round {r + 1}/{args.rounds}: {describe(result)}", flush=True)
    median = {key: statistics.median(values) for key, values in figures.items()}
    spread = lambda key: f"(rounds: {', '.join(f'{v:.2f}' for v in figures[key])})"  # noqa: E731
    for clock, unit in (("_cpu", "episodes per CPU second"), ("", "episodes per second (wall clock)")):
        print(f"{unit}, medians over the rounds:")
        print(f"  TRL {trl.__version__} GRPOTrainer:        {median['trl' + clock]:6.2f} {spread('trl' + clock)}")
        print(f"  sao-env GRPO without evaluation: {median['sao_no_eval' + clock]:6.2f} {spread('sao_no_eval' + clock)}  "
              f"{median['sao_no_eval' + clock] / median['trl' + clock]:.2f}x")
        print(f"  sao-env GRPO with evaluation:    {median['sao' + clock]:6.2f} {spread('sao' + clock)}  "
              f"{median['sao' + clock] / median['trl' + clock]:.2f}x")
    print(f"sao-env/TRL episodes per CPU second: {median['sao_cpu'] / median['trl_cpu']:.2f}x")
    print(f"sao-env/TRL episodes per second: {median['sao'] / median['trl']:.2f}x")


if __name__ == "__main__":
    main()
