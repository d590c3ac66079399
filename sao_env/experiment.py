"""One run: a scenario, an agent recipe and a seed -> a run directory.

Where runs go: ``runs/<env>/<label>/seed<N>``. The label is the recipe's name when the resolved
configuration (seed apart) is the recipe's own, and ``<name>+<8 hex digits>`` (a hash of the
resolved configuration without its seed) when overrides change it, so runs of different
configurations never share a directory while every seed of one configuration shares a folder.

Run directory layout:
  config.yaml        the resolved configuration with every default expanded (scenario, recipe and
                     algorithm hyper-parameters, source parameters, seed), then ``provenance``: its
                     hash, label and overrides, the code version, package versions, datasets read
  metrics.jsonl      one line per learner update (actor/*, critic/*, async/*, train/*, perf/*)
                     and per evaluation (eval/*); simulated quantities only, byte-identical per seed
  evals.jsonl        held-out evaluations at fixed simulated times
  episodes.jsonl     one line per completed episode (phase, reward, grade, version, times)
  summary.json       adaptation metrics, throughput, staleness, masked fraction, provenance;
                     removed when a run starts and written last (atomically): present = finished
  splits.json        train/held-out split of each benchmark-stream source (only when there is one)
  timings.json       wall-clock figures (not deterministic, kept apart)
  adaptation.png     the run's adaptation curve
  checkpoints/final  the final policy, Hugging Face format (save_pretrained, tokenizer included)
  checkpoints/resume the last two resume checkpoints of an unfinished run (``sao_env.runtime.checkpoint``);
                     removed when the run finishes
  tensorboard/ wandb/  tracker mirrors of metrics.jsonl (only with ``loggers``)

A file that cannot be written (full disk, read-only or unwritable directory) is a ``UserError``
naming the path.

Resume: a run checkpoints every ``CheckpointEvery`` (default 25 learner updates) and when it gets
SIGINT or SIGTERM (then it stops with ``RunInterrupted``). ``run_experiment(..., resume=True)``
continues from the newest good checkpoint of the same configuration hash and code, truncating the
three logs to the lengths it recorded; the logs and summary.json end as an uninterrupted run's.
"""

from __future__ import annotations

import contextlib
import json
import math
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

import numpy as np
import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sao_env.agents import ALGORITHMS, Agent
from sao_env.errors import UserError
from sao_env.evaluation.adaptation import adaptation_summary, credit_summary
from sao_env.evaluation.heldout import evaluate_heldout
from sao_env.forking import fork_is_safe
from sao_env.leaderboard.plots import plot_adaptation
from sao_env.numerics import numerics_record
from sao_env.policy.model import ModelSpec
from sao_env.policy.warmstart import is_cached, load_warm_started, warm_start_path
from sao_env.provenance import code_key, code_version, config_hash, datasets_read, package_versions, short
from sao_env.runtime import checkpoint as ckpt
from sao_env.runtime.checkpoint import CheckpointEvery
from sao_env.runtime import runtime_class
from sao_env.runtime.sim import RuntimeSpec, SimRuntime
from sao_env.scenario import Scenario, ScenarioSpec
from sao_env.specs import find_spec, load_yaml
from sao_env.tasks import source_class
from sao_env.trackers import open_trackers


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
    agent = algo(policy, tokenizer, build_agent_config(config.agent), dis_band=scenario.spec.dis_band,
                 action_horizon=scenario.spec.max_new_tokens * scenario.spec.max_turns)
    if getattr(agent.config, "value_pretrain_episodes", 0):  # before t=0, not charged (agents/value_pretrain.py)
        from sao_env.agents.value_pretrain import pretrain_value
        pretrain_value(agent, scenario, episodes=agent.config.value_pretrain_episodes,
                       steps=agent.config.value_pretrain_steps, seed=config.seed)
    return agent


def expand_config(config: RunConfig) -> dict:
    """The configuration as plain data with every default written out: the recipe's hyper-parameters
    through the algorithm's config class and each source's parameters through its ``Params`` model."""
    data = config.model_dump(mode="json")
    data["agent"]["hparams"] = build_agent_config(config.agent).model_dump(mode="json")
    for phase in data["env"]["phases"]:
        for source in phase["sources"]:
            source["params"] = source_class(source["name"]).Params(**source["params"]).model_dump(mode="json")
    return data


def load_run_config(run_dir: Path) -> RunConfig:
    """The RunConfig a run directory's ``config.yaml`` records (its provenance block set aside)."""
    data = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    data.pop("provenance", None)
    return RunConfig(**data)


@dataclass(frozen=True)
class RunPlan:
    """One run to make or reuse: its configuration, where it goes and what identifies it."""

    config: RunConfig
    label: str
    """Directory name and leaderboard label: the recipe's name, ``+<hash>`` when overrides change it."""
    overrides: tuple[str, ...]
    """The ``key.sub=value`` overrides as given (recorded; the hash, not this text, decides reuse)."""
    config_hash: str
    """sha256 of the expanded configuration (``expand_config``)."""
    out: Path


def plan_run(env: str, agent: str, seed: int = 0, overrides: list[str] | tuple[str, ...] = (), *,
             runs_dir: Path = Path("runs"), out: Path | None = None) -> RunPlan:
    """Resolve a run and its directory ``runs_dir/<env>/<label>/seed<N>`` (``out`` when given)."""
    config = resolve_config(env, agent, seed, overrides)
    expanded = expand_config(config)
    label = config.agent.name
    if overrides:
        unseeded = config_hash({k: v for k, v in expanded.items() if k != "seed"})
        base = expand_config(resolve_config(env, agent, config.seed))
        if unseeded != config_hash({k: v for k, v in base.items() if k != "seed"}):
            label = f"{config.agent.name}+{unseeded[:8]}"
    out = out if out is not None else Path(runs_dir) / config.env.name / label / f"seed{config.seed}"
    return RunPlan(config, label, tuple(overrides), config_hash(expanded), Path(out))


def reuse_check(plan: RunPlan, code: dict | None = None) -> tuple[bool, str]:
    """``(reuse, why)``: a run is reused only when it finished (``summary.json``) with the same
    configuration hash and the same code (``provenance.code_key``)."""
    code = code or code_version()
    path = plan.out / "summary.json"
    if not plan.out.exists():
        return False, "new"
    if not path.is_file():
        resumable = resume_point(plan, code)
        if resumable is not None:
            return False, f"unfinished; resumes from its checkpoint at simulated {resumable / 3600:.3f} h"
        return False, "unfinished (no summary.json)"
    try:
        recorded = json.loads(path.read_text()).get("provenance") or {}
    except (OSError, ValueError):
        return False, "summary.json unreadable"
    if not recorded.get("config_hash"):
        return False, "no configuration hash recorded (an older run)"
    if recorded["config_hash"] != plan.config_hash:
        return False, f"configuration changed ({short(recorded['config_hash'])} -> {short(plan.config_hash)})"
    if code_key(recorded.get("code")) != code_key(code):
        return False, f"code changed ({code_key(recorded.get('code'))} -> {code_key(code)})"
    return True, f"finished with the same configuration ({short(plan.config_hash)}) and code ({code_key(code)})"


def resume_point(plan: RunPlan, code: dict) -> float | None:
    """Simulated seconds of the checkpoint a run of ``plan`` would resume from, or None."""
    for _, state, _ in ckpt.newest_good(plan.out / ckpt.FOLDER):
        if state is not None:
            same = state["config_hash"] == plan.config_hash and state["code_key"] == code_key(code)
            return state["sim_time_s"] if same else None
    return None


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """Turn a failed write (full disk, read-only or unwritable folder) into a one-line UserError naming the path."""
    try:
        yield
    except OSError as err:
        raise UserError(f"cannot write {err.filename or path}: {err.strerror or err}") from None


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it: readers see all or nothing."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with writing(path):
        try:
            tmp.write_text(text)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


class _JsonLines:
    def __init__(self, path: Path, *, resume_at: int | None = None):
        """A new, empty log; or, with ``resume_at``, the existing one cut to that many bytes."""
        self.path = path
        with writing(path):
            if resume_at is None:
                self.file = path.open("wb")
            else:
                self.file = path.open("r+b")
                self.file.truncate(resume_at)
                self.file.seek(resume_at)

    def write(self, record: dict) -> None:
        """One record per line, flushed at once, so that a running or interrupted run can be read."""
        with writing(self.path):
            self.file.write((json.dumps(record, sort_keys=True, allow_nan=True) + "\n").encode())
            self.file.flush()

    @property
    def offset(self) -> int:
        """Bytes written so far (every record is flushed)."""
        return self.file.tell()

    def close(self) -> None:
        with writing(self.path):
            self.file.close()


STALE_OUTPUTS = ("summary.json", "timings.json", "splits.json", "adaptation.png", "tensorboard", "wandb")
"""Outputs of an earlier run in the same directory, removed when a run starts (summary.json first)."""


class RunInterrupted(Exception):
    """A run stopped by SIGINT or SIGTERM after writing a resume checkpoint: ``(signal name, run
    directory, checkpoint path, simulated seconds)``."""

    @property
    def signal_name(self) -> str:
        return self.args[0]

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended."""
        return 128 + int(getattr(signal, self.args[0], signal.SIGTERM))

    def __str__(self) -> str:
        return f"{self.args[0]}: stopped at simulated {self.args[3] / 3600:.3f} h, checkpoint {self.args[2]}"


def run_experiment(config: RunConfig, out: Path, *, show_progress: bool = True, save_checkpoint: bool = True,
                   label: str | None = None, overrides: tuple[str, ...] | list[str] = (),
                   loggers: tuple[str, ...] = (), code: dict | None = None,
                   resume: bool | Literal["auto"] = False, checkpoint_every: CheckpointEvery = CheckpointEvery()) -> dict:
    """Run one agent on one scenario; returns the summary also written (last) to ``out/summary.json``.

    ``label`` names the run in its summary and plots (default: the recipe's name); ``overrides``
    are recorded as given; ``loggers`` mirror metrics.jsonl to trackers (``sao_env.trackers``);
    ``code`` is the code version to record (default: this process's ``provenance.code_version()``).
    ``checkpoint_every`` paces the resume checkpoints. ``resume=True`` continues from the newest
    good checkpoint in ``out`` (a checkpoint of another configuration or code is a ``UserError``;
    none at all starts from the beginning, said on stderr); ``"auto"`` resumes only a checkpoint of
    the same configuration and code and otherwise starts afresh; ``False`` starts afresh.
    SIGINT/SIGTERM write a checkpoint and raise ``RunInterrupted``.
    """
    out = Path(out)
    label = label or config.agent.name
    expanded = expand_config(config)
    code = code or code_version()
    folder = out / ckpt.FOLDER
    sim = config.agent.runtime.backend == "sim"
    if resume is True and not sim:
        raise UserError(f"--resume needs the sim backend (this run's is {config.agent.runtime.backend!r})")
    restored = _find_resume(out, config_hash(expanded), code, strict=resume is True) if resume and sim else None
    with writing(out):
        out.mkdir(parents=True, exist_ok=True)
        for name in STALE_OUTPUTS:
            if (out / name).is_dir():
                shutil.rmtree(out / name)
            else:
                (out / name).unlink(missing_ok=True)
        if restored is None:
            shutil.rmtree(folder, ignore_errors=True)
    wall_start = time.perf_counter()
    torch.set_num_threads(config.threads)
    scenario = Scenario(config.env, seed=config.seed)
    provenance = {"config_hash": config_hash(expanded), "label": label, "overrides": list(overrides),
                  "code": code, "versions": package_versions(), "numerics": numerics_record(),
                  "datasets": datasets_read(scenario)}
    write_atomic(out / "config.yaml", yaml.safe_dump({**expanded, "provenance": provenance}, sort_keys=False))
    manifests = scenario.manifests()
    if manifests:
        write_atomic(out / "splits.json", json.dumps(manifests, indent=2, sort_keys=True) + "\n")
    trackers = open_trackers(tuple(loggers), out, name=f"{config.env.name}/{label}/seed{config.seed}", config=expanded)
    logs: list[_JsonLines] = []
    saver = _Checkpoints(folder, checkpoint_every if sim else None, provenance, restored)
    try:
        if restored is None:
            agent = build_agent(config, scenario, show_progress=show_progress)
        else:
            agent, scenario = restored["runtime"]["agent"], restored["runtime"]["scenario"]
            ckpt.set_rng_states(restored["rng"])
        warm_s = time.perf_counter() - wall_start
        offsets = restored["offsets"] if restored else {}
        logs = [_JsonLines(out / f, resume_at=offsets.get(f)) for f in LOGS]
        if restored:
            _replay(out / "metrics.jsonl", trackers)
        with saver.signals():
            state, runtime, evals, rewards, masked = _simulate(config, scenario, agent, *logs, trackers, show_progress,
                                                               saver)
    except BaseException:
        for closing in [*logs, *trackers]:
            with contextlib.suppress(Exception):
                closing.close()
        raise
    for closing in [*logs, *trackers]:
        closing.close()

    hours = scenario.duration_s / 3600
    staleness = np.array(state.staleness) if state.staleness else np.zeros(1)
    summary = {
        "env": config.env.name, "agent": label, "recipe": config.agent.name, "algorithm": config.agent.algorithm,
        "seed": config.seed,
        "online_reward": float(np.mean(rewards)) if rewards else math.nan,
        **adaptation_summary(evals, scenario), **credit_summary(out, scenario),
        "episodes_per_hour": state.consumed / hours, "updates_per_hour": state.updates / hours,
        "staleness_mean": float(staleness.mean()), "staleness_p95": float(np.percentile(staleness, 95)),
        "staleness_hist": np.bincount(staleness.astype(int)).tolist(), "learner_wait_s": state.learner_wait_s,
        "masked_fraction": float(np.mean(masked)) if masked else 0.0,
        "episodes_per_update": state.consumed / max(state.updates, 1),
        "episodes_per_update_nominal": agent.group_size * agent.groups_per_update,
        "episodes_completed": state.completed, "episodes_consumed": state.consumed, "in_flight_at_end": runtime.in_flight,
        "dropped": state.dropped, "final_version": agent.version, "drift_times_h": [t / 3600 for t in scenario.drift_times_s],
        "provenance": provenance,
    }
    if save_checkpoint:
        _save_checkpoint(agent, out / "checkpoints" / "final")
    timings = {"total_s": time.perf_counter() - wall_start, "warm_start_s": warm_s, **runtime.wall,
               "checkpoints": saver.written, "checkpoint_s": saver.seconds, "checkpoint_mb": saver.megabytes,
               "resumed_at_sim_s": restored["sim_time_s"] if restored else None}
    write_atomic(out / "timings.json", json.dumps(timings, indent=2) + "\n")
    with writing(out / "adaptation.png"):
        plot_adaptation({label: [out]}, out / "adaptation.png")
    write_atomic(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    shutil.rmtree(folder, ignore_errors=True)
    return summary


LOGS = ("metrics.jsonl", "evals.jsonl", "episodes.jsonl")
"""The deterministic logs; a checkpoint records the length of each."""


def _find_resume(out: Path, chash: str, code: dict, *, strict: bool) -> dict | None:
    """The newest good checkpoint in ``out`` of this configuration and code, or None (start afresh).

    A corrupt one, or one whose logs are shorter than it recorded, is passed over for the one before
    (said on stderr). ``strict`` (``--resume``): one of another configuration or code is a UserError.
    """
    for path, state, why in ckpt.newest_good(out / ckpt.FOLDER):
        if state is None:
            print(f"sao-env: warning: checkpoint {path} is unusable ({why}); trying the previous one", file=sys.stderr)
            continue
        if state["config_hash"] != chash or state["code_key"] != code_key(code):
            if not strict:
                return None
            raise UserError(f"the checkpoint in {out} is of configuration {short(state['config_hash'])} and code "
                            f"{state['code_key']}, this run is {short(chash)} and {code_key(code)}: "
                            f"run without --resume to start afresh")
        short_logs = [name for name, size in state["offsets"].items()
                      if not (out / name).is_file() or (out / name).stat().st_size < size]
        if short_logs:
            print(f"sao-env: warning: checkpoint {path} is ahead of {', '.join(short_logs)}; trying the previous one",
                  file=sys.stderr)
            continue
        print(f"sao-env: resuming {out} from simulated {state['sim_time_s'] / 3600:.3f} h "
              f"(update {state['runtime']['state'].updates})", file=sys.stderr)
        return state
    if strict:
        print(f"sao-env: warning: no usable checkpoint in {out / ckpt.FOLDER}; starting from the beginning",
              file=sys.stderr)
    return None


def _replay(metrics: Path, trackers: list) -> None:
    """Send the kept records of metrics.jsonl to freshly opened trackers (a resumed run's mirrors)."""
    if not trackers:
        return
    with metrics.open() as lines:
        for line in lines:
            record = json.loads(line)
            for tracker in trackers:
                tracker.log(record)


class _Checkpoints:
    """Writes resume checkpoints at clean points of the event loop, on schedule and on SIGINT/SIGTERM.
    ``every`` None: a backend without resume (the real-time ones); signals keep their default effect."""

    def __init__(self, folder: Path, every: CheckpointEvery | None, provenance: dict, restored: dict | None):
        self.folder, self.every = folder, every
        self.identity = {"config_hash": provenance["config_hash"], "code_key": code_key(provenance["code"])}
        self.index = ckpt.index_of(ckpt.checkpoints(folder)[0]) if restored and ckpt.checkpoints(folder) else 0
        self.last_updates = restored["runtime"]["state"].updates if restored else 0
        self.last_now = restored["sim_time_s"] if restored else 0.0
        self.restored = restored
        self.stop_signal: str | None = None
        self.written, self.seconds, self.megabytes = 0, 0.0, 0.0

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """While the run lasts, SIGINT and SIGTERM ask it to stop at its next clean point (main thread only)."""
        if self.every is None or threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def ask_stop(signum, frame) -> None:
            self.stop_signal = signal.Signals(signum).name

        for s in previous:
            signal.signal(s, ask_stop)
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def at_clean_point(self, runtime: SimRuntime, extra: dict, logs: list[_JsonLines]) -> None:
        """Checkpoint when due or asked to stop (then raise ``RunInterrupted``)."""
        if self.every is None:
            return
        now, updates = runtime.state.now, runtime.state.updates
        if not self.stop_signal and not self.every.due(updates, now, self.last_updates, self.last_now):
            return
        if not ckpt.clean_point(runtime):
            return
        start = time.perf_counter()
        state = {**self.identity, "sim_time_s": now, "runtime": ckpt.runtime_state(runtime), "rng": ckpt.rng_states(),
                 "experiment": extra, "offsets": {log.path.name: log.offset for log in logs}}
        self.index += 1
        with writing(self.folder):
            path = ckpt.write(self.folder, self.index, state)
        self.written += 1
        self.seconds += time.perf_counter() - start
        self.megabytes = path.stat().st_size / 2**20
        self.last_updates, self.last_now = updates, now
        if self.stop_signal:
            raise RunInterrupted(self.stop_signal, str(self.folder.parent.parent), str(path), now)


def _simulate(config: RunConfig, scenario: Scenario, agent: Agent, metrics: _JsonLines, evals_log: _JsonLines,
              episodes_log: _JsonLines, trackers: list, show_progress: bool, saver: _Checkpoints):
    """The simulated run, each record logged as it happens; returns (state, runtime, evals, rewards, masked).

    ``saver`` checkpoints at clean points; when it holds a restored checkpoint the runtime and the
    running lists continue from it."""
    restored = saver.restored["experiment"] if saver.restored else {"evals": [], "rewards": [], "masked": []}
    evals: list[dict] = restored["evals"]
    masked: list[float] = restored["masked"]
    rewards: list[float] = restored["rewards"]

    def log_metrics(record: dict) -> None:
        metrics.write(record)
        for tracker in trackers:
            tracker.log(record)

    def on_update(record: dict) -> None:
        log_metrics(record)
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
        result = evaluate_heldout(runtime.deployed, agent.tokenizer, scenario, eval_key=int(round(t)))
        record = {"sim_time_s": t, "episodes": runtime.state.consumed, "updates": runtime.state.updates,
                  "version": runtime.deployed_version, "phase": scenario.phase_at(min(t, scenario.duration_s - 1e-9)).name,
                  **result}
        evals.append(record)
        evals_log.write(record)
        log_metrics({"kind": "eval", **record})

    interval = config.env.eval.interval_h * 3600
    eval_times = list(np.arange(0.0, scenario.duration_s, interval)) + [scenario.duration_s]
    runtime_cls = runtime_class(config.agent.runtime.backend)
    runtime = runtime_cls(scenario, agent, config.agent.runtime, seed=config.seed, on_update=on_update,
                          on_episode=on_episode, on_eval=on_eval, eval_times=[float(t) for t in eval_times])
    if saver.restored:
        ckpt.restore_runtime(runtime, saver.restored["runtime"])
    extra = {"evals": evals, "rewards": rewards, "masked": masked}
    logs = [metrics, evals_log, episodes_log]

    def step(state) -> None:
        report(state, runtime, rewards)
        saver.at_clean_point(runtime, extra, logs)

    with _progress(show_progress, scenario, config) as report:
        state = runtime.run(progress=step)
    return state, runtime, evals, rewards, masked


def _save_checkpoint(agent: Agent, final: Path) -> None:
    """Save the policy and tokenizer to a temporary folder, then rename it to ``final``."""
    tmp = final.with_name(f".{final.name}.tmp{os.getpid()}")
    try:
        with writing(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                agent.policy.save_pretrained(tmp)
                agent.tokenizer.save_pretrained(tmp)
            except OSError:
                raise
            except Exception as err:  # noqa: BLE001  (safetensors reports a failed write as its own error type)
                reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
                raise UserError(f"cannot write {tmp}: {reason}") from None
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_plan(plan: RunPlan, *, loggers: tuple[str, ...] = (), code: dict | None = None,
             show_progress: bool = True, checkpoint_every: CheckpointEvery = CheckpointEvery()) -> tuple[dict, float]:
    """Make one planned run, resuming its checkpoint when it has one of the same configuration and
    code; returns its summary and wall-clock seconds."""
    start = time.perf_counter()
    summary = run_experiment(plan.config, plan.out, show_progress=show_progress, label=plan.label,
                             overrides=plan.overrides, loggers=loggers, code=code, resume="auto",
                             checkpoint_every=checkpoint_every)
    return summary, time.perf_counter() - start


def _init_worker() -> None:
    torch.set_num_threads(1)


def _worker_context() -> multiprocessing.context.BaseContext:
    """Fork where ``fork_is_safe``: the workers then start with this process's imports instead of
    repeating them (about 6 s each); spawn otherwise (macOS, a test runner's worker with threads)."""
    return multiprocessing.get_context("fork" if fork_is_safe() else "spawn")


def run_many(plans: list[RunPlan], *, jobs: int = 1, loggers: tuple[str, ...] = (), code: dict | None = None,
             show_progress: bool = True, on_done: Callable[[RunPlan, dict, float], None] | None = None,
             checkpoint_every: CheckpointEvery = CheckpointEvery(),
             on_warm_start: Callable[[str], None] | None = None) -> None:
    """Make independent runs, ``jobs`` at a time in worker processes (one torch thread each, started
    as ``_worker_context`` says), or one after another in this process when ``jobs`` is 1 or there
    is a single run.

    A run's results do not depend on where it ran. ``on_done(plan, summary, seconds)`` is called
    in this process as each run finishes; the first failure stops the rest and is raised.
    ``on_warm_start(line)`` hears when missing warm starts are trained before the runs.
    """
    code = code or code_version()
    if jobs > 1 and len(plans) > 1 and fork_is_safe():
        _train_warm_starts(plans, jobs, on_warm_start or (lambda line: None))
    if jobs <= 1 or len(plans) <= 1:
        for plan in plans:
            summary, seconds = run_plan(plan, loggers=loggers, code=code, show_progress=show_progress,
                                        checkpoint_every=checkpoint_every)
            if on_done:
                on_done(plan, summary, seconds)
        return
    with ProcessPoolExecutor(max_workers=min(jobs, len(plans)), mp_context=_worker_context(),
                             initializer=_init_worker) as pool:
        futures = {pool.submit(run_plan, plan, loggers=loggers, code=code, show_progress=False,
                               checkpoint_every=checkpoint_every): plan for plan in plans}
        try:
            for future in as_completed(futures):
                summary, seconds = future.result()
                if on_done:
                    on_done(futures[future], summary, seconds)
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _train_warm_starts(plans: list[RunPlan], jobs: int, say: Callable[[str], None]) -> None:
    """Train the warm starts that the runs need and the cache lacks before the runs start, each in a
    forked process with its share of the ``jobs`` cores (at most the machine's) on its forward passes
    (same bits as on one thread: ``supervised_warm_start``). Otherwise the first run to need one
    trains it on one core while the runs waiting for it leave theirs idle (style-drift's, 2 cores:
    about 10% shorter, 6.7 s -> 6.0 s per 40 steps, interleaved medians of 4)."""
    missing: dict[Path, tuple[Any, Scenario]] = {}
    for plan in plans:
        scenario = Scenario(plan.config.env)
        path = warm_start_path(plan.config.agent.model, scenario)
        if path is not None and not is_cached(path):
            missing.setdefault(path, (plan.config.agent.model, scenario))
    if not missing:
        return
    threads = max(1, min(jobs, os.cpu_count() or 1) // len(missing))
    start = time.perf_counter()
    steps = ", ".join(f"{s.spec.warm_start.steps} steps of {s.spec.warm_start.batch_size}" for _, s in missing.values())
    say(f"warm start ({steps}): training it once before the runs, {threads} thread(s) on its forward passes; "
        f"cached in {next(iter(missing)).parent}")
    with ProcessPoolExecutor(max_workers=min(jobs, len(missing)), mp_context=multiprocessing.get_context("fork"),
                             initializer=_init_worker) as pool:
        for future in [pool.submit(_train_warm_start, model, scenario, threads) for model, scenario in missing.values()]:
            future.result()
    say(f"warm start trained in {time.perf_counter() - start:.0f} s")


def _train_warm_start(model: Any, scenario: Scenario, forward_threads: int) -> None:
    load_warm_started(model, scenario, show_progress=False, forward_threads=forward_threads)


class _progress:
    """A live bar over simulated time: episodes, reward, version, staleness."""

    def __init__(self, enabled: bool, scenario: Scenario, config: RunConfig):
        self.enabled, self.scenario, self.config = enabled, scenario, config

    def __enter__(self):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                                 TimeElapsedColumn(), disable=not self.enabled, transient=False,
                                 console=Console(stderr=True))  # stdout carries results only
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
