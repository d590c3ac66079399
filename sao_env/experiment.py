"""One run: a scenario, an agent recipe and a seed -> a run directory.

Run directory layout:
  config.yaml        the resolved configuration (scenario, recipe, seed)
  metrics.jsonl      one line per learner update (actor/*, critic/*, async/*, train/*, perf/*)
                     and per evaluation (eval/*); simulated quantities only, byte-identical per seed
  evals.jsonl        held-out evaluations at fixed simulated times
  episodes.jsonl     one line per completed episode (phase, reward, grade, version, times)
  summary.json       adaptation metrics, throughput, staleness, masked fraction
  splits.json        train/held-out split of each benchmark-stream source (only when there is one)
  timings.json       wall-clock figures (not deterministic, kept apart)
  adaptation.png     the run's adaptation curve
  checkpoints/final  the final policy, Hugging Face format (save_pretrained, tokenizer included)
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sao_env.agents import ALGORITHMS, Agent
from sao_env.errors import UserError
from sao_env.evaluation.adaptation import adaptation_summary
from sao_env.evaluation.heldout import evaluate_heldout
from sao_env.leaderboard.plots import plot_adaptation
from sao_env.policy.model import ModelSpec
from sao_env.policy.warmstart import load_warm_started
from sao_env.runtime.sim import RuntimeSpec, SimRuntime
from sao_env.scenario import Scenario, ScenarioSpec
from sao_env.specs import find_spec, load_yaml


class AgentRecipe(BaseModel):
    """An agent recipe (agents/*.yaml): algorithm + hyper-parameters + model + runtime."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    name: str
    """Label in leaderboards."""
    algorithm: str
    """Key of ``sao_env.agents.ALGORITHMS``."""
    description: str = ""
    tuning: str = ""
    """How the hyper-parameters were chosen (same effort and budget for every recipe)."""
    model: ModelSpec = ModelSpec()
    hparams: dict[str, Any] = {}
    """Validated by the algorithm's own config class (unknown keys are errors)."""
    runtime: RuntimeSpec = RuntimeSpec()


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: ScenarioSpec
    agent: AgentRecipe
    seed: int = Field(0, ge=0)
    threads: int = Field(1, ge=1)
    """CPU threads for torch; one is fastest for the tiny model and keeps results independent of the machine."""


def resolve_config(env: str, agent: str, seed: int = 0, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Load the env and agent specs by name or path, apply ``key.sub=value`` overrides, validate."""
    raw = {"env": load_yaml(find_spec("envs", env)), "agent": load_yaml(find_spec("agents", agent)), "seed": seed}
    for item in overrides:
        apply_override(raw, item)
    try:
        config = RunConfig(**raw)
        build_agent_config(config.agent)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"invalid configuration at {where}: {first['msg']}") from None
    return config


def apply_override(raw: dict, item: str) -> None:
    """``agent.hparams.lr=3e-4`` or ``env.phases.0.duration_h=0.1``; values are parsed as YAML."""
    if "=" not in item:
        raise UserError(f"override {item!r} is not of the form key.sub=value")
    key, value = item.split("=", 1)
    parts = key.split(".")
    node: Any = raw
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise UserError(f"unknown override key {key!r}: no item {part} in {'.'.join(parts[:i]) or 'config'}")
            part = int(part)
        elif not isinstance(node, dict) or (part not in node and not _may_add(parts[:i], part)):
            raise UserError(f"unknown override key {key!r}")
        if last:
            node[part] = yaml.safe_load(value)
        else:
            if isinstance(node, dict) and part not in node:
                node[part] = {}
            node = node[part]


def _may_add(path: list[str], part: str) -> bool:
    """A key absent from the YAML may be set where a model defines it (validated afterwards)."""
    from sao_env.scenario import EvalSpec, LatencySpec, PhaseSpec, SourceSpec, WarmStartSpec

    shape = tuple("*" if p.isdigit() else p for p in path)
    if shape in (("agent", "hparams"), ("env", "phases", "*", "sources", "*", "params")):
        return True  # validated by the algorithm's / the source's own model
    models = {(): RunConfig, ("env",): ScenarioSpec, ("agent",): AgentRecipe, ("agent", "runtime"): RuntimeSpec,
              ("agent", "model"): ModelSpec, ("env", "latency"): LatencySpec, ("env", "eval"): EvalSpec,
              ("env", "warm_start"): WarmStartSpec, ("env", "phases", "*"): PhaseSpec,
              ("env", "phases", "*", "sources", "*"): SourceSpec}
    model = models.get(shape)
    return model is not None and part in model.model_fields


def build_agent_config(recipe: AgentRecipe):
    if recipe.algorithm not in ALGORITHMS:
        raise UserError(f"unknown algorithm {recipe.algorithm!r} in recipe {recipe.name!r}; known: {', '.join(ALGORITHMS)}")
    try:
        return ALGORITHMS[recipe.algorithm].config_cls(**recipe.hparams)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"invalid configuration at agent.hparams.{where}: {first['msg']}") from None


def build_agent(config: RunConfig, scenario: Scenario, *, show_progress: bool = True) -> Agent:
    torch.manual_seed(config.seed)
    policy, tokenizer, _ = load_warm_started(config.agent.model, scenario, show_progress=show_progress)
    algo = ALGORITHMS[config.agent.algorithm]
    return algo(policy, tokenizer, build_agent_config(config.agent), dis_band=scenario.spec.dis_band)


class _JsonLines:
    def __init__(self, path: Path):
        self.file = path.open("w")

    def write(self, record: dict) -> None:
        """One record per line, flushed at once, so that a running or interrupted run can be read."""
        self.file.write(json.dumps(record, sort_keys=True, allow_nan=True) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


def run_experiment(config: RunConfig, out: Path, *, show_progress: bool = True, save_checkpoint: bool = True) -> dict:
    """Run one agent on one scenario; returns the summary also written to ``out/summary.json``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    wall_start = time.perf_counter()
    torch.set_num_threads(config.threads)
    scenario = Scenario(config.env)
    manifests = scenario.manifests()
    if manifests:
        (out / "splits.json").write_text(json.dumps(manifests, indent=2, sort_keys=True) + "\n")
    agent = build_agent(config, scenario, show_progress=show_progress)
    warm_s = time.perf_counter() - wall_start

    metrics, evals_log, episodes_log = (_JsonLines(out / f) for f in ("metrics.jsonl", "evals.jsonl", "episodes.jsonl"))
    evals: list[dict] = []
    masked: list[float] = []
    rewards: list[float] = []

    def on_update(record: dict) -> None:
        metrics.write(record)
        if "actor/dis_masked" in record:
            masked.append(record["actor/dis_masked"])

    def on_episode(episode, learner_version: int) -> None:
        rewards.append(episode.reward)
        episodes_log.write({"task": episode.task.id, "phase": episode.phase, "reward": episode.reward,
                            "response": episode.response, "version": episode.version, "group": episode.group_id,
                            "sim_start": episode.sim_start, "sim_end": episode.sim_end,
                            "tokens": episode.num_action_tokens, "turns": episode.turns, "end": episode.end,
                            **{f"grade/{k}": v for k, v in episode.grade_details.items()}})

    def on_eval(t: float, runtime: SimRuntime) -> None:
        result = evaluate_heldout(runtime.deployed, agent.tokenizer, scenario, eval_index=len(evals))
        record = {"sim_time_s": t, "episodes": runtime.state.consumed, "updates": runtime.state.updates,
                  "version": runtime.deployed_version, "phase": scenario.phase_at(min(t, scenario.duration_s - 1e-9)).name,
                  **result}
        evals.append(record)
        evals_log.write(record)
        metrics.write({"kind": "eval", **record})

    interval = config.env.eval.interval_h * 3600
    eval_times = list(np.arange(0.0, scenario.duration_s, interval)) + [scenario.duration_s]
    runtime = SimRuntime(scenario, agent, config.agent.runtime, seed=config.seed, on_update=on_update,
                         on_episode=on_episode, on_eval=on_eval, eval_times=[float(t) for t in eval_times])
    with _progress(show_progress, scenario, config) as report:
        state = runtime.run(progress=lambda s: report(s, runtime, rewards))
    for log in (metrics, evals_log, episodes_log):
        log.close()

    hours = scenario.duration_s / 3600
    staleness = np.array(state.staleness) if state.staleness else np.zeros(1)
    summary = {
        "env": config.env.name, "agent": config.agent.name, "algorithm": config.agent.algorithm, "seed": config.seed,
        "online_reward": float(np.mean(rewards)) if rewards else math.nan,
        **adaptation_summary(evals, scenario),
        "episodes_per_hour": state.consumed / hours, "updates_per_hour": state.updates / hours,
        "staleness_mean": float(staleness.mean()), "staleness_p95": float(np.percentile(staleness, 95)),
        "staleness_hist": np.bincount(staleness.astype(int)).tolist(), "learner_wait_s": state.learner_wait_s,
        "masked_fraction": float(np.mean(masked)) if masked else 0.0,
        "episodes_completed": state.completed, "episodes_consumed": state.consumed, "in_flight_at_end": runtime.in_flight,
        "dropped": state.dropped, "final_version": agent.version, "drift_times_h": [t / 3600 for t in scenario.drift_times_s],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    if save_checkpoint:
        final = out / "checkpoints" / "final"
        agent.policy.save_pretrained(final)
        agent.tokenizer.save_pretrained(final)
    timings = {"total_s": time.perf_counter() - wall_start, "warm_start_s": warm_s, **runtime.wall}
    (out / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    plot_adaptation({config.agent.name: [out]}, out / "adaptation.png")
    return summary


class _progress:
    """A live bar over simulated time: episodes, reward, version, staleness."""

    def __init__(self, enabled: bool, scenario: Scenario, config: RunConfig):
        self.enabled, self.scenario, self.config = enabled, scenario, config

    def __enter__(self):
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                                 TimeElapsedColumn(), disable=not self.enabled, transient=False)
        self.progress.__enter__()
        label = f"{self.config.agent.name} on {self.config.env.name} seed {self.config.seed}"
        self.task = self.progress.add_task(label, total=self.scenario.duration_s, info="")
        self.last = 0.0
        return self.report

    def report(self, state, runtime: SimRuntime, rewards: list[float]) -> None:
        if state.now - self.last < 30 and state.now < self.scenario.duration_s:
            return
        self.last = state.now
        recent = rewards[-64:]
        stale = state.staleness[-64:]
        info = (f"t={state.now / 3600:.2f}h ep={state.consumed} reward={np.mean(recent) if recent else 0:.2f} "
                f"v={runtime.deployed_version} stale={np.mean(stale) if stale else 0:.1f}")
        self.progress.update(self.task, completed=state.now, info=info)

    def __exit__(self, *exc):
        self.progress.update(self.task, completed=self.scenario.duration_s)
        self.progress.__exit__(*exc)
