"""One run as one object: a ``Run`` owns one run's state (scenario, agent, runtime, clock, random
streams) and its directory (logs, checkpoints, summary); the drivers above it (``run_experiment``,
``sao_env.experiment.drivers``) only open, execute and read it.

Run directory layout:
  config.yaml        the resolved configuration with every default expanded (scenario, recipe and
                     algorithm hyper-parameters, source parameters, seed), then ``provenance``: its
                     hash, label and overrides, the code version, package versions, datasets read
  metrics.jsonl      one line per learner update (actor/*, critic/*, async/*, train/*, perf/*)
                     and per evaluation (eval/*); simulated quantities only, byte-identical per seed
  evals.jsonl        held-out evaluations at fixed simulated times
  episodes.jsonl     one line per completed episode (phase, reward, grade, version, times; prompt_id and
                     difficulty_class where the task's source stamps them, sao_env/tasks/variants.py)
  summary.json       adaptation metrics, throughput, staleness, masked fraction, provenance;
                     removed when a run starts and written last (atomically): present = finished
  splits.json        train/held-out split of each benchmark-stream source (only when there is one)
  timings.json       wall-clock figures (not deterministic, kept apart)
  adaptation.png     the run's adaptation curve
  checkpoints/final  the final policy, Hugging Face format (save_pretrained, tokenizer included)
  checkpoints/resume the last two resume checkpoints of an unfinished run (``sao_env.runtime.checkpoint``);
                     removed when the run finishes
  .lock              the advisory lock of the process writing the run (``RunLock``: PID, host, start)
  tensorboard/ wandb/  tracker mirrors of metrics.jsonl (only with ``loggers``)

A file that cannot be written (full disk, read-only or unwritable directory) is a ``UserError``
naming the path. One process writes a run directory at a time (``RunLock``).

Resume: a run checkpoints every ``CheckpointEvery`` (default 25 learner updates) and, in ``sim``, when
it gets SIGINT or SIGTERM (then it stops with ``RunInterrupted``). ``resume=True`` continues from the
newest good checkpoint of the same configuration hash and code, truncating the three logs to the
lengths it recorded; a ``sim`` run's logs and summary.json end as an uninterrupted run's. A
``threads`` or ``ray`` run checkpoints after an update is published (``RealtimeRuntime.snapshot``)
and resumes with every request then in flight played again; a signal stops it at once (its last
checkpoint stays). Nothing finished is ever
replaced by surprise: a directory holding a run of another configuration is refused (one line
naming the keys that differ) unless ``overwrite``, and ``resume=True`` on a finished run is refused
rather than started over.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Literal

import numpy as np
import torch
import yaml

from sao_env.agents import Agent
from sao_env.errors import UserError
from sao_env.evaluation.adaptation import adaptation_summary, credit_summary
from sao_env.evaluation.critic_fit import critic_summary
from sao_env.evaluation.heldout import evaluate_heldout
from sao_env.experiment.config import RunConfig, build_agent, expand_config
from sao_env.experiment.files import LOGS, STALE_OUTPUTS, JsonLines, RunLock, write_atomic, write_failure_reason, writing
from sao_env.experiment.progress import RunProgress
from sao_env.numerics import describe_numerics, numerics_record, resumed_segments
from sao_env import provenance as provenance_of
from sao_env.provenance import code_key, config_hash, datasets_read, package_versions, short
from sao_env.runtime import checkpoint as ckpt
from sao_env.runtime import runtime_class
from sao_env.runtime.checkpoint import CheckpointEvery
from sao_env.runtime.sim import SimRuntime
from sao_env.scenario import Scenario
from sao_env.trackers import open_trackers


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


class Run:
    """One agent on one scenario at one seed, written to ``out``.

    ``label`` names the run in its summary and plots (default: the recipe's name); ``overrides``
    are recorded as given; ``loggers`` mirror metrics.jsonl to trackers (``sao_env.trackers``);
    ``code`` is the code version to record (default: this process's ``provenance.code_version()``).
    ``checkpoint_every`` paces the resume checkpoints. ``resume=True`` continues from the newest
    good checkpoint in ``out`` (a checkpoint of another configuration or code is a ``UserError``;
    none at all starts from the beginning, said on stderr, unless the directory holds a finished
    run, which is refused); ``"auto"`` resumes only a checkpoint of the same configuration and code
    and otherwise starts afresh; ``False`` starts afresh. ``overwrite`` allows replacing a run of
    another configuration in ``out``. ``show_progress`` as ``sao_env.experiment.progress.RunProgress``'s
    ``enabled`` (a number: a run among others, a line that often and no warm-start bar).
    """

    def __init__(self, config: RunConfig, out: Path, *, show_progress: bool | float = True, save_checkpoint: bool = True,
                 label: str | None = None, overrides: tuple[str, ...] | list[str] = (),
                 loggers: tuple[str, ...] = (), code: dict | None = None,
                 resume: bool | Literal["auto"] = False, checkpoint_every: CheckpointEvery = CheckpointEvery(),
                 overwrite: bool = False):
        self.config, self.out = config, Path(out)
        self.label = label or config.agent.name
        self.overrides, self.loggers = tuple(overrides), tuple(loggers)
        self.show_progress, self.save_checkpoint = show_progress, save_checkpoint
        self.expanded = expand_config(config)
        self.config_hash = config_hash(self.expanded)
        self.code = code or provenance_of.code_version()
        self.sim = config.agent.runtime.backend == "sim"
        self.resume, self.overwrite = resume, overwrite
        self.checkpoint_every = checkpoint_every
        self.checkpoints = self.out / ckpt.FOLDER
        self.lock = RunLock(self.out)

    # -- the whole run ----------------------------------------------------------------------------
    def execute(self) -> dict:
        """Make the run under the directory's lock; returns the summary also written (last) to ``summary.json``."""
        self.lock.acquire()
        try:
            self._guard_existing()
            restored = self._find_resume() if self.resume else None
            if self.resume and restored is None:
                self._keep_logs_aside()
            self._clear(restored)
            return self._make(restored)
        finally:
            self.lock.release()

    # -- the directory before the run -------------------------------------------------------------
    def _recorded(self) -> tuple[dict | None, bool]:
        """The expanded configuration ``out/config.yaml`` records (None if none) and whether the run finished."""
        try:
            recorded = yaml.safe_load((self.out / "config.yaml").read_text())
        except (OSError, yaml.YAMLError):
            recorded = None
        return (recorded if isinstance(recorded, dict) else None), (self.out / "summary.json").is_file()

    def _guard_existing(self) -> None:
        """Refuse to replace another configuration's run, and a finished run on ``resume=True``."""
        recorded, finished = self._recorded()
        if recorded is None:
            others = foreign_entries(self.out)
            if others:
                shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
                raise UserError(f"{self.out} holds other files and no run ({shown}); a run writes config.yaml, "
                                f"its logs and checkpoints there: use another --out (a new or empty folder)")
            return
        provenance = recorded.pop("provenance", None) or {}
        if provenance.get("config_hash") != self.config_hash and not self.overwrite:
            what = "a finished run" if finished else "an unfinished run"
            raise UserError(f"{self.out} holds {what} of another configuration (differs at "
                            f"{', '.join(differing_keys(recorded, self.expanded)) or 'its provenance'}); "
                            f"use another --out, or --overwrite to replace it")
        if self.resume is True and finished:
            recorded_code = code_key(provenance.get("code"))
            raise UserError(f"{self.out} holds a finished run (code {recorded_code}); --resume has nothing to "
                            f"continue: run without --resume to make it again")

    def _find_resume(self) -> dict | None:
        """The newest good checkpoint in ``out`` of this configuration and code, or None (start afresh).

        A corrupt one, or one whose logs are shorter than it recorded, is passed over for the one before
        (said on stderr). ``resume=True``: one of another configuration or code is a UserError.
        """
        strict = self.resume is True
        for path, state, why in ckpt.newest_good(self.checkpoints):
            if state is None:
                print(f"sao-env: warning: checkpoint {path} is unusable ({why}); trying the previous one", file=sys.stderr)
                continue
            if state["config_hash"] != self.config_hash or state["code_key"] != code_key(self.code):
                if not strict:
                    return None
                raise UserError(f"the checkpoint in {self.out} is of configuration {short(state['config_hash'])} and "
                                f"code {state['code_key']}, this run is {short(self.config_hash)} and "
                                f"{code_key(self.code)}: run without --resume to start afresh")
            short_logs = [name for name, size in state["offsets"].items()
                          if not (self.out / name).is_file() or (self.out / name).stat().st_size < size]
            if short_logs:
                print(f"sao-env: warning: checkpoint {path} is ahead of {', '.join(short_logs)}; trying the previous one",
                      file=sys.stderr)
                continue
            print(f"sao-env: resuming {self.out} from simulated {state['sim_time_s'] / 3600:.3f} h "
                  f"(update {state['runtime']['state'].updates})", file=sys.stderr)
            return state
        return None

    def _keep_logs_aside(self) -> None:
        """Without a usable checkpoint the run starts from the beginning. Under ``--resume`` (and in a
        real-time run, whose logs cannot be made again) the logs already written are moved, not
        replaced, into ``out/unresumed-<n>/``, and stderr says where."""
        logs = [self.out / name for name in LOGS if (self.out / name).is_file() and (self.out / name).stat().st_size]
        if not logs or (self.resume is not True and self.sim):
            if self.resume is True:
                print(f"sao-env: warning: no usable checkpoint in {self.checkpoints}; starting from the beginning",
                      file=sys.stderr)
            return
        n = 1
        while (self.out / f"unresumed-{n}").exists():
            n += 1
        aside = self.out / f"unresumed-{n}"
        with writing(aside):
            aside.mkdir()
            for path in logs:
                path.rename(aside / path.name)
        print(f"sao-env: warning: no usable checkpoint in {self.checkpoints}; the logs written so far "
              f"({', '.join(p.name for p in logs)}) are kept in {aside}; starting from the beginning", file=sys.stderr)

    def _clear(self, restored: dict | None) -> None:
        """Remove an earlier run's outputs (summary.json first); its checkpoints too unless resuming."""
        with writing(self.out):
            self.out.mkdir(parents=True, exist_ok=True)
            for name in STALE_OUTPUTS:
                if (self.out / name).is_dir():
                    shutil.rmtree(self.out / name)
                else:
                    (self.out / name).unlink(missing_ok=True)
            if restored is None:
                shutil.rmtree(self.checkpoints, ignore_errors=True)

    # -- the run itself ---------------------------------------------------------------------------
    def _make(self, restored: dict | None) -> dict:
        config, out = self.config, self.out
        wall_start = time.perf_counter()
        torch.set_num_threads(config.threads)
        if config.agent.runtime.generator == "vllm":  # before the warm start: a missing engine is one line at once
            from sao_env.engine.process import vllm_python

            vllm_python()
        scenario = Scenario(config.env, seed=config.seed)
        provenance = {"config_hash": self.config_hash, "label": self.label, "overrides": list(self.overrides),
                      "code": self.code, "versions": package_versions(), "numerics": numerics_record(),
                      "datasets": datasets_read(scenario), "device": _device(config)}
        segments = _numerics_segments(restored, provenance["numerics"])
        if len(segments) > 1:
            provenance["numerics_segments"] = segments
        write_atomic(out / "config.yaml", yaml.safe_dump({**self.expanded, "provenance": provenance}, sort_keys=False))
        manifests = scenario.manifests()
        if manifests:
            write_atomic(out / "splits.json", json.dumps(manifests, indent=2, sort_keys=True) + "\n")
        trackers = open_trackers(self.loggers, out, name=f"{config.env.name}/{self.label}/seed{config.seed}",
                                 config=self.expanded)
        logs: list[JsonLines] = []
        saver = _Checkpoints(self.checkpoints, self.checkpoint_every, provenance, restored, segments, on_signal=self.sim)
        try:
            if restored is None:
                agent = build_agent(config, scenario, show_progress=self.show_progress is True)
            else:
                agent, scenario = restored["runtime"]["agent"], restored["runtime"]["scenario"]
                ckpt.set_rng_states(restored["rng"])
            warm_s = time.perf_counter() - wall_start
            offsets = restored["offsets"] if restored else {}
            logs = [JsonLines(out / f, resume_at=offsets.get(f)) for f in LOGS]
            if restored:
                _replay(out / "metrics.jsonl", trackers)
            with saver.signals():
                state, runtime, evals, rewards, masked = _simulate(config, scenario, agent, *logs, trackers,
                                                                   self.show_progress, saver)
        except BaseException:
            for closing in [*logs, *trackers]:
                with contextlib.suppress(Exception):
                    closing.close()
            raise
        for closing in [*logs, *trackers]:
            closing.close()

        summary = _summary(config, self.label, scenario, agent, state, runtime, evals, rewards, masked, out, provenance)
        if self.save_checkpoint:
            save_final(agent, out / "checkpoints" / "final")
        timings = {"total_s": time.perf_counter() - wall_start, "warm_start_s": warm_s, **runtime.wall,
                   "checkpoints": saver.written, "checkpoint_s": saver.seconds, "checkpoint_mb": saver.megabytes,
                   "resumed_at_sim_s": restored["sim_time_s"] if restored else None}
        write_atomic(out / "timings.json", json.dumps(timings, indent=2) + "\n")
        from sao_env.leaderboard.plots import plot_adaptation  # matplotlib, pandas, scipy: 1.2 s, needed only here

        with writing(out / "adaptation.png"):
            plot_adaptation({self.label: [out]}, out / "adaptation.png")
        write_atomic(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
        shutil.rmtree(self.checkpoints, ignore_errors=True)
        return summary


RUN_ENTRIES = frozenset({"config.yaml", "checkpoints", RunLock.NAME, *LOGS, *STALE_OUTPUTS})
"""What a run directory holds (``unresumed-<n>/`` too): a folder with anything else and no config.yaml is
not a run's, and a run is not written among its files."""


def foreign_entries(out: Path) -> list[str]:
    """The names in ``out`` (sorted) that no run writes; [] where ``out`` is missing or holds only a run's files."""
    try:
        names = sorted(entry.name for entry in Path(out).iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [n for n in names if n not in RUN_ENTRIES and not n.startswith("unresumed-")]


def _device(config: RunConfig) -> str:
    """The device the policy runs on (``agent.model.device`` resolved: ``auto`` is a GPU or the CPU)."""
    from sao_env.policy.placement import resolve_device

    return str(resolve_device(getattr(config.agent.model, "device", None) or "cpu"))


def run_experiment(config: RunConfig, out: Path, **options: Any) -> dict:
    """Run one agent on one scenario (``Run(config, out, **options).execute()``); returns the summary
    also written (last) to ``out/summary.json``. SIGINT/SIGTERM write a checkpoint and raise
    ``RunInterrupted``."""
    return Run(config, out, **options).execute()


def differing_keys(a: dict, b: dict, *, limit: int = 3) -> list[str]:
    """Dotted paths (``agent.hparams.lr``) where two expanded configurations differ, the first ``limit``."""
    found: list[str] = []

    def walk(x: Any, y: Any, path: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y), key=str):
                walk(x.get(key), y.get(key), f"{path}.{key}" if path else str(key))
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for i, (u, v) in enumerate(zip(x, y)):
                walk(u, v, f"{path}.{i}")
        elif x != y:
            found.append(path)

    walk(a, b, "")
    return found


def _summary(config: RunConfig, label: str, scenario: Scenario, agent: Agent, state, runtime, evals: list[dict],
             rewards: list[float], masked: list[float], out: Path, provenance: dict) -> dict:
    """The run's headline figures (summary.json), from its final state and logs. ``final_version`` is the
    version of the last update logged (the weights the final evaluation measured): an update the run
    ended during is not counted, as metrics.jsonl does not log it (its batch is in ``episodes_consumed``)."""
    hours = scenario.duration_s / 3600
    staleness = np.array(state.staleness) if state.staleness else np.zeros(1)
    return {
        "env": config.env.name, "agent": label, "recipe": config.agent.name, "algorithm": config.agent.algorithm,
        "seed": config.seed, "eval_version": scenario.eval_version,
        "online_reward": float(np.mean(rewards)) if rewards else math.nan,
        **adaptation_summary(evals, scenario), **credit_summary(out, scenario), **critic_summary(out, scenario),
        "episodes_per_hour": state.consumed / hours, "updates_per_hour": state.updates / hours,
        "staleness_mean": float(staleness.mean()), "staleness_p95": float(np.percentile(staleness, 95)),
        "staleness_hist": np.bincount(staleness.astype(int)).tolist(), "learner_wait_s": state.learner_wait_s,
        "masked_fraction": float(np.mean(masked)) if masked else 0.0,
        "episodes_per_update": state.consumed / max(state.updates, 1),
        "episodes_per_update_nominal": agent.group_size * agent.groups_per_update,
        "episodes_completed": state.completed, "episodes_consumed": state.consumed, "in_flight_at_end": runtime.in_flight,
        "dropped": state.dropped, "final_version": runtime.deployed_version, "drift_times_h": [t / 3600 for t in scenario.drift_times_s],
        "provenance": provenance,
    }


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
    """Writes resume checkpoints on schedule at clean points: between two events of ``sim``'s loop,
    after a published update of a real-time run. ``on_signal`` (``sim``): SIGINT/SIGTERM also write one
    and stop the run; otherwise signals keep their effect (a real-time run stops at once)."""

    def __init__(self, folder: Path, every: CheckpointEvery, provenance: dict, restored: dict | None,
                 numerics: list[dict], *, on_signal: bool = True):
        self.folder, self.every, self.on_signal = folder, every, on_signal
        self.identity = {"config_hash": provenance["config_hash"], "code_key": code_key(provenance["code"]),
                         "numerics": numerics}
        self.index = ckpt.index_of(ckpt.checkpoints(folder)[0]) if restored and ckpt.checkpoints(folder) else 0
        self.last_updates = restored["runtime"]["state"].updates if restored else 0
        self.last_now = restored["sim_time_s"] if restored else 0.0
        self.restored = restored
        self.stop_signal: str | None = None
        self.written, self.seconds, self.megabytes = 0, 0.0, 0.0

    @contextlib.contextmanager
    def signals(self) -> Iterator[None]:
        """While the run lasts, SIGINT and SIGTERM ask it to stop at its next clean point (main thread only)."""
        if not self.on_signal or threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def ask_stop(signum, frame) -> None:
            if self.stop_signal is not None:  # asked twice: stop now (from the last checkpoint), as the caller stops
                signal.signal(signum, previous[signum])
                os.kill(os.getpid(), signum)
                return
            self.stop_signal = signal.Signals(signum).name
            last = f" (about {self.seconds / self.written:.1f} s each so far)" if self.written else ""
            print(f"sao-env: stopping: the update in progress finishes, then a checkpoint is written{last}; "
                  "signal again to stop at once without it", file=sys.stderr, flush=True)

        for s in previous:
            signal.signal(s, ask_stop)
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def at_clean_point(self, runtime, extra: dict, logs: list[JsonLines]) -> None:
        """Checkpoint when due or asked to stop (then raise ``RunInterrupted``)."""
        now, updates = runtime.state.now, runtime.state.updates
        if not self.stop_signal and not self.every.due(updates, now, self.last_updates, self.last_now):
            return
        start = time.perf_counter()
        if isinstance(runtime, SimRuntime):
            if not ckpt.clean_point(runtime):
                return
            state = {**self.identity, "sim_time_s": now, "runtime": ckpt.runtime_state(runtime), "rng": ckpt.rng_states(),
                     "experiment": extra, "offsets": {log.path.name: log.offset for log in logs}}
        else:
            saved, (kept, offsets) = runtime.snapshot(lambda: (copy.deepcopy(extra),
                                                               {log.path.name: log.offset for log in logs}))
            now = saved["now"]
            state = {**self.identity, "sim_time_s": now, "runtime": saved, "rng": ckpt.rng_states(),
                     "experiment": kept, "offsets": offsets}
        self.index += 1
        with writing(self.folder):
            path = ckpt.write(self.folder, self.index, state)
        self.written += 1
        self.seconds += time.perf_counter() - start
        self.megabytes = path.stat().st_size / 2**20
        self.last_updates, self.last_now = updates, now
        if self.stop_signal:
            raise RunInterrupted(self.stop_signal, str(self.folder.parent.parent), str(path), now)


def _numerics_segments(restored: dict | None, now: dict) -> list[dict]:
    """The numerics the run is made under, per segment (``numerics.resumed_segments``). Resumed under other
    numerics than its checkpoint's, the run's bytes from then on are neither machine's: stderr says so, and the
    provenance keeps every segment (``numerics_segments``) so that ``verify`` expects no identical re-run."""
    if restored is None:
        return resumed_segments(None, now, 0.0)
    earlier = restored.get("numerics")
    segments = resumed_segments(earlier, now, restored["sim_time_s"])
    if earlier and len(segments) > len(earlier):
        print(f"sao-env: warning: resuming under other numerics than the checkpoint's: it was made on "
              f"{describe_numerics(earlier[-1])}, this machine is {describe_numerics(now)}; from simulated "
              f"{restored['sim_time_s'] / 3600:.3f} h on, the run's bytes are neither machine's alone "
              f"(recorded in its provenance as numerics_segments)", file=sys.stderr)
    return segments


def _simulate(config: RunConfig, scenario: Scenario, agent: Agent, metrics: JsonLines, evals_log: JsonLines,
              episodes_log: JsonLines, trackers: list, show_progress: bool | float, saver: _Checkpoints):
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
        identity = {k: episode.task.metadata[k] for k in ("prompt_id", "difficulty_class") if k in episode.task.metadata}
        episodes_log.write({"task": episode.task.id, **identity, "phase": episode.phase, "reward": episode.reward,
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
    if saver.restored and isinstance(runtime, SimRuntime):
        ckpt.restore_runtime(runtime, saver.restored["runtime"])
    elif saver.restored:
        runtime.restore(saver.restored["runtime"])
    extra = {"evals": evals, "rewards": rewards, "masked": masked}
    logs = [metrics, evals_log, episodes_log]

    def step(state) -> None:
        report(state, runtime, rewards)
        saver.at_clean_point(runtime, extra, logs)

    with RunProgress(show_progress, scenario, config) as report:
        state = runtime.run(progress=step)
    return state, runtime, evals, rewards, masked


def save_final(agent: Agent, final: Path) -> None:
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
                raise UserError(f"cannot write {tmp}: {write_failure_reason(err)}") from None
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
