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
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Callable

import torch

from sao_env.experiment.files import RunBusy, RunLock, writing
from sao_env.experiment.plan import RunPlan, reuse_check
from sao_env.errors import UserError
from sao_env.experiment import progress
from sao_env.experiment.run import RunInterrupted, run_experiment
from sao_env.forking import fork_is_safe
from sao_env.policy.warmstart import is_cached, load_warm_started, warm_start_path
from sao_env import provenance
from sao_env.runtime.checkpoint import CheckpointEvery
from sao_env.scenario import Scenario


class MadeElsewhere(dict):
    """The summary of a run that another process made while this one waited for it (``run_plan``):
    reused, not made here, so a report does not say it finished in the seconds spent waiting."""


def run_plan(plan: RunPlan, *, loggers: tuple[str, ...] = (), code: dict | None = None,
             show_progress: bool | float = True, checkpoint_every: CheckpointEvery = CheckpointEvery()) -> tuple[dict, float]:
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


_STOP: Any = None
"""In a pool's worker: the pool's stop event (``run_many``); once set, a queued run is not started."""


def _init_worker(parent: int | None = None, stop: Any = None) -> None:
    global _STOP
    torch.set_num_threads(1)
    _STOP = stop
    if stop is not None:  # between runs a signal is the parent's to handle; during one, ``_run_in_worker`` says
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
    if parent is not None:
        _die_with_parent(parent)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def _run_in_worker(plan: RunPlan, **options: Any) -> tuple[dict, float] | None:
    """``run_plan`` in a pool's worker, or None when the pool was asked to stop before it started.

    While the run lasts SIGINT and SIGTERM reach it (a ``sim`` run writes a checkpoint and raises
    ``RunInterrupted``; a real-time run stops with KeyboardInterrupt); between runs they are ignored."""
    if _STOP is not None and _STOP.is_set():
        return None
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, _interrupt)
    try:
        return run_plan(plan, **options)
    finally:
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        close_sandboxes()


def close_sandboxes() -> None:
    """Stop the run's warm sandbox servers and remove their folders, in a process that outlives the run
    without exiting normally: a pool's worker ends with ``os._exit`` and a Ray worker is killed, so the
    ``atexit`` that does it in a command's own process never runs there (a grid at ``--jobs 2`` left two
    folders in /tmp per worker process). A run that made no sandboxed call imported none of it."""
    warm = sys.modules.get("sao_env.sandbox.warm")
    if warm is not None:
        warm.close_all()


class RunsInterrupted(RunInterrupted):
    """Runs of a pool stopped by SIGINT or SIGTERM, each after writing a resume checkpoint:
    ``(signal name, [RunInterrupted of each run])``. A ``RunInterrupted``, so that a command's
    handler prints its one line with the command that resumes them all."""

    def __str__(self) -> str:
        runs = self.args[1]
        where = "; ".join(f"{run.args[1]} at simulated {run.args[3] / 3600:.3f} h" for run in runs)
        return f"{self.args[0]}: {len(runs)} run{'s' if len(runs) != 1 else ''} stopped at a checkpoint ({where})"


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
             show_progress: bool | float = True, on_done: Callable[[RunPlan, dict, float], None] | None = None,
             checkpoint_every: CheckpointEvery = CheckpointEvery(),
             on_warm_start: Callable[[str], None] | None = None) -> None:
    """Make independent runs, ``jobs`` at a time in worker processes (one torch thread each, started
    as ``_worker_context`` says), or one after another in this process when ``jobs`` is 1 or there
    is a single run.

    A run's results do not depend on where it ran. ``on_done(plan, summary, seconds)`` is called
    in this process as each run finishes; the first failure stops the rest and is raised. A signal
    (SIGINT, SIGTERM) stops the pool in order (``_stop_pool``): the runs in flight write their
    checkpoints and ``RunsInterrupted`` names them.
    ``on_warm_start(line)`` hears when missing warm starts are trained before the runs.
    ``show_progress`` as ``RunProgress``'s ``enabled``; in a worker, where no bar can be drawn, True
    becomes a line every ``progress.RUN_AMONG_OTHERS_EVERY_S`` (a worker's stderr is this process's).
    """
    code = code or provenance.code_version()
    _check_run_folders(plans)
    if jobs > 1 and len(plans) > 1 and fork_is_safe():
        _train_warm_starts(plans, jobs, on_warm_start or (lambda line: None))
    if jobs <= 1 or len(plans) <= 1:
        for plan in plans:
            summary, seconds = run_plan(plan, loggers=loggers, code=code, show_progress=show_progress,
                                        checkpoint_every=checkpoint_every)
            if on_done:
                on_done(plan, summary, seconds)
        return
    context = _worker_context()
    stop = context.Event()
    with ProcessPoolExecutor(max_workers=min(jobs, len(plans)), mp_context=context,
                             initializer=_init_worker, initargs=(os.getpid(), stop)) as pool:
        in_worker = progress.RUN_AMONG_OTHERS_EVERY_S if show_progress is True else show_progress
        futures = {pool.submit(_run_in_worker, plan, loggers=loggers, code=code, show_progress=in_worker,
                               checkpoint_every=checkpoint_every): plan for plan in plans}
        workers = _processes(pool)
        try:
            for future in as_completed(futures):
                summary, seconds = future.result()
                if on_done:
                    on_done(futures[future], summary, seconds)
        except BaseException as err:
            _stop_pool(pool, stop, futures, err)
            if isinstance(err, BrokenProcessPool):
                raise UserError(worker_death(workers, plans)) from None
            raise


def worker_death(workers: list, plans: list[RunPlan]) -> str:
    """One line for a pool that broke because a worker died: the worker, the signal that ended it, the run it was
    making (from the run directory's lock, which names its writer's PID) and what to do. SIGKILL is, on Linux, most
    often the kernel's out-of-memory killer; the pool then stops the other workers with SIGTERM."""
    dead = [w for w in workers if w.exitcode is not None and w.exitcode not in (0, -signal.SIGTERM)]
    if not dead:
        return "a worker process ended abruptly; the runs in flight resume from their checkpoints when the command is run again"
    parts = []
    for worker in dead:
        how = (f"killed by {signal.Signals(-worker.exitcode).name}" if worker.exitcode < 0
               else f"ended with status {worker.exitcode}")
        making = [str(plan.out) for plan in plans if (plan.out / ".lock").is_file()
                  and RunLock(plan.out).owner().startswith(f"pid {worker.pid} ")]
        parts.append(f"worker {worker.pid} was {how}" + (f" while making {', '.join(making)}" if making else ""))
    oom = any(w.exitcode == -signal.SIGKILL for w in dead)
    return ("; ".join(parts) + (" (on Linux most often the out-of-memory killer: `dmesg` says; fewer runs at once with "
                                "--jobs, or more memory or swap, avoids it)" if oom else "")
            + "; the runs in flight resume from their checkpoints when the command is run again")


def _processes(pool: ProcessPoolExecutor) -> list:
    """The pool's live worker processes (the executor keeps them in ``_processes``; none once shut down)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _check_run_folders(plans: list[RunPlan]) -> None:
    """Make every run's parent folder now, so that one that cannot be written is a one-line error at once,
    not after a warm start has trained for minutes and the workers have started."""
    for plan in plans:
        with writing(plan.out.parent):
            plan.out.parent.mkdir(parents=True, exist_ok=True)


def _stop_pool(pool: ProcessPoolExecutor, stop: Any, futures: dict, err: BaseException) -> None:
    """Stop a pool in order after ``err``: no queued run starts, the runs in flight get the signal
    that stopped this process (SIGTERM for any other failure) even when it reached this process
    alone (``kill PID``), and the pool is waited for: a ``sim`` run writes its checkpoint within one
    event. When the cause was a signal and runs stopped at a checkpoint, raises ``RunsInterrupted``
    naming them all (from ``err``)."""
    stop.set()
    for future in futures:
        future.cancel()
    if isinstance(err, RunInterrupted):
        signum = getattr(signal, err.signal_name, signal.SIGTERM)
    elif isinstance(err, KeyboardInterrupt):  # ``cli.app.Stopped`` names its signal; a bare Ctrl-C is SIGINT
        signum = getattr(err, "signum", signal.SIGINT)
    else:
        signum = signal.SIGTERM
    for process in _processes(pool):
        try:
            os.kill(process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
    pool.shutdown(wait=True, cancel_futures=True)
    if not isinstance(err, (KeyboardInterrupt, RunInterrupted)):
        return
    stopped = [f.exception() for f in futures if f.done() and not f.cancelled()
               and isinstance(f.exception(), RunInterrupted)]
    if stopped:
        raise RunsInterrupted(stopped[0].signal_name, stopped) from err


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
        try:
            for future in [pool.submit(_train_warm_start, model, scenario, threads) for model, scenario in missing.values()]:
                future.result()
        except BaseException:  # a signal or a failure: the others are not waited for (a cached warm start is whole or absent)
            for process in _processes(pool):
                process.kill()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    say(f"warm start trained in {time.perf_counter() - start:.0f} s")


def _train_warm_start(model: Any, scenario: Scenario, forward_threads: int) -> None:
    load_warm_started(model, scenario, show_progress=False, forward_threads=forward_threads)
