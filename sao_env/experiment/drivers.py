"""Drivers above ``Run``: one planned run, many runs in worker processes, the warm starts they need.

They plan, order and report; they never reach inside a run (``sao_env.experiment.run``).
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

import torch

from sao_env.experiment.files import RunBusy, RunLock
from sao_env.experiment.plan import RunPlan, reuse_check
from sao_env.experiment.run import run_experiment
from sao_env.forking import fork_is_safe
from sao_env.policy.warmstart import is_cached, load_warm_started, warm_start_path
from sao_env import provenance
from sao_env.runtime.checkpoint import CheckpointEvery
from sao_env.scenario import Scenario


class MadeElsewhere(dict):
    """The summary of a run that another process made while this one waited for it (``run_plan``):
    reused, not made here, so a report does not say it finished in the seconds spent waiting."""


def run_plan(plan: RunPlan, *, loggers: tuple[str, ...] = (), code: dict | None = None,
             show_progress: bool = True, checkpoint_every: CheckpointEvery = CheckpointEvery()) -> tuple[dict, float]:
    """Make one planned run, resuming its checkpoint when it has one of the same configuration and
    code; returns its summary and wall-clock seconds. When another process is making the same run
    (its directory is locked), wait for it and reuse its result if it finished."""
    start = time.perf_counter()
    while True:
        try:
            summary = run_experiment(plan.config, plan.out, show_progress=show_progress, label=plan.label,
                                     overrides=plan.overrides, loggers=loggers, code=code, resume="auto",
                                     checkpoint_every=checkpoint_every)
            return summary, time.perf_counter() - start
        except RunBusy:
            lock = RunLock(plan.out)
            print(f"sao-env: {plan.out} is being made by {lock.owner()}; waiting for it", file=sys.stderr, flush=True)
            lock.acquire(wait=True)
            lock.release()
            if reuse_check(plan, code)[0]:
                print(f"sao-env: reuse {plan.out}: the other process finished it", file=sys.stderr, flush=True)
                return MadeElsewhere(json.loads((plan.out / "summary.json").read_text())), time.perf_counter() - start


def _init_worker(parent: int | None = None) -> None:
    torch.set_num_threads(1)
    if parent is not None:
        _die_with_parent(parent)


def _die_with_parent(parent: int) -> None:
    """End this worker when its parent ends, however it ends (kill -9 included).

    A pool's worker left without its parent would otherwise go on making every queued run, none of
    them reported or recorded, then wait forever for work holding its memory. On Linux the kernel
    sends SIGKILL (``PR_SET_PDEATHSIG``; no thread, so ``fork_is_safe`` still holds in the worker);
    elsewhere a daemon thread polls the parent's pid. A run killed this way resumes from its last
    checkpoint, and the runs that finished keep their directories, reused when the command runs again."""
    if sys.platform == "linux":
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0:  # PR_SET_PDEATHSIG
                if os.getppid() != parent:  # the parent ended before the request took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="sao-env-parent-watch", daemon=True).start()


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
    code = code or provenance.code_version()
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
                             initializer=_init_worker, initargs=(os.getpid(),)) as pool:
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
                             initializer=_init_worker, initargs=(os.getpid(),)) as pool:
        for future in [pool.submit(_train_warm_start, model, scenario, threads) for model, scenario in missing.values()]:
            future.result()
    say(f"warm start trained in {time.perf_counter() - start:.0f} s")


def _train_warm_start(model: Any, scenario: Scenario, forward_threads: int) -> None:
    load_warm_started(model, scenario, show_progress=False, forward_threads=forward_threads)
