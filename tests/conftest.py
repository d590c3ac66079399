"""Shared fixtures: an isolated warm-start cache and a shrunken style-drift scenario.

Every test that trains or runs the runtime uses ``SHRINK`` so that all of them share one warm
start (its cache key is the model spec + the warm-start settings + the phases' sources) and one
run of each configuration costs seconds.
"""

from __future__ import annotations

import os

# Idle OpenMP threads sleep instead of spinning: on a busy machine a spinning thread of a 2-thread
# forward took the core its partner needed (a --jobs 2 warm start: 127 s instead of 19 s, same bytes).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import sao_env.numerics  # noqa: F401  (first: pins the CPU numerics before torch loads, as the CLI does)
from sao_env.numerics import cpu_vendor  # noqa: E402

import contextlib
import json
from pathlib import Path

import pytest

SHRINK_TASKS: tuple[str, ...] = (
    "env.warm_start.steps=300",
    "env.warm_start.batch_size=16",
    "env.phases.0.sources.0.params.operators=[+]",
    "env.phases.1.sources.0.params.operators=[+]",
    "env.phases.2.sources.0.params.operators=[+]",
    "env.max_new_tokens=20",
)
"""The part of ``SHRINK`` that decides the warm start and the tasks: additions only, 300 warm-start
steps of 16 demonstrations. The learning tests keep it (with their own phase lengths), so every
test of the session shares one warm start of about 15 s instead of training the scenario's own."""

SHRINK_PHASE_H = 0.005
"""Each phase of the shrunken scenario lasts this many simulated hours (18 s; 54 s for the three)."""

SHRINK: tuple[str, ...] = SHRINK_TASKS + (
    *(f"env.phases.{i}.duration_h={SHRINK_PHASE_H}" for i in range(3)),
    "env.eval.interval_h=0.005",
    "env.eval.prompts_per_phase=8",
    "env.rollout_slots=8",
)
"""Overrides that shrink the style-drift scenario to under a simulated minute (3 phases of 18 s,
some 10 updates of 8 episodes), so that a run costs 1-2 core-seconds.

Why not fewer: with 60 warm-start steps the policy earns no reward at all (then no agent ever
moves and the runtime's on-policy checks are vacuous), and 12 new tokens truncate the
``sentence`` and ``tag`` forms (``<answer>12</answer>`` is 19 characters). Additions only
(``+``) with 300 small warm-start batches give a few percent of rewarded episodes in ~15 s. The
tests were calibrated on 8 rollout slots (the scenario now has 16), so the cut keeps 8. A test
that needs more of a run (a kill late in it, an update with a gradient) adds ``LONGER``.
"""

LONGER: tuple[str, ...] = tuple(f"env.phases.{i}.duration_h=0.01" for i in range(3))
"""Phases of 36 s (108 s in all, about twice ``SHRINK``'s updates), for the tests that need more of a run
than ``SHRINK`` gives: kills at a late generation or evaluation, a synchronous update with a gradient."""


def shrink_overrides(agent: str, extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    """``SHRINK`` plus a short critic warm-up where the recipe's algorithm has one, plus ``extra``."""
    from sao_env.agents import ALGORITHMS
    from sao_env.specs import find_spec, load_yaml

    algorithm = ALGORITHMS.get(load_yaml(find_spec("agents", agent)).get("algorithm"))
    out = list(SHRINK)
    if algorithm is not None and "critic_warmup_updates" in algorithm.config_cls.model_fields:
        out.append("agent.hparams.critic_warmup_updates=2")
    return out + list(extra)


def _shrunk_config(agent: str, seed: int = 0, extra: tuple[str, ...] | list[str] = ()):
    from sao_env.experiment import resolve_config

    return resolve_config("style-drift", agent, seed, shrink_overrides(agent, extra))


SIM_BOXED_MATCHES_BY_VENDOR = {"AuthenticAMD": (102, 207), "GenuineIntel": (115, 206)}
"""sim's boxed-phase training episodes that end between 0.10 h and 0.15 h of ``learning_cut("sao", 0, ...)``
(seed 0, pinned numerics), as (boxed style matches, episodes): 0.493 on AMD machines, 0.558 on an Intel Xeon (the
two vendors' MKL kernels give different bits: sao_env/numerics.py). The first phase's training does not depend on
the later phases' lengths, so test_learning's run checks these counts exactly and test_backends holds the
``threads`` run of the same cut to them instead of making the sim run again. On AMD, seeds 1 and 2 give 100/205
and 87/183 (0.488, 0.475)."""
SIM_BOXED_MATCHES_010_015H = SIM_BOXED_MATCHES_BY_VENDOR.get(cpu_vendor(), (0, 0))


def boxed_matches(run_dir: Path, start_s: float, end_s: float) -> tuple[int, int]:
    """(boxed style matches, episodes) among a run's boxed-phase training episodes ending in [start_s, end_s] of
    simulated time: some 200 episodes per 0.05 h on 8 slots, a binomial standard error of about 0.035, where one
    evaluation of 32 held-out prompts has about 0.09."""
    episodes = [json.loads(line) for line in (run_dir / "episodes.jsonl").read_text().splitlines()]
    window = [e for e in episodes if e["phase"] == "boxed" and start_s <= e["sim_end"] <= end_s]
    return sum(bool(e["grade/style_match"]) for e in window), len(window)


def learning_cut(agent: str, seed: int, hours: tuple[float, float, float], extra: tuple[str, ...] = ()):
    """style-drift with ``SHRINK_TASKS`` (the session's shared warm start and tasks), phases of ``hours``
    (a phase kept at 0.001 h still serves its tasks to the warm start), evaluations every 0.05 h and
    8 slots (the learning tests were calibrated on 8): the set-up of the tests that check learning."""
    from sao_env.experiment import resolve_config

    phases = [f"env.phases.{i}.duration_h={h}" for i, h in enumerate(hours)]
    return resolve_config("style-drift", agent, seed,
                          [*SHRINK_TASKS, *phases, "env.eval.interval_h=0.05", "env.rollout_slots=8", *extra])


@pytest.fixture(scope="session")
def shrink() -> tuple[str, ...]:
    """The shrinking overrides common to every recipe (``SHRINK``)."""
    return SHRINK


@pytest.fixture(scope="session")
def shrunk_config():
    """``shrunk_config(agent, seed=0, extra=())`` -> the validated RunConfig of a shrunken run."""
    return _shrunk_config


@contextlib.contextmanager
def session_env(name: str, value: str):
    """Set an environment variable for the session, restoring its previous state afterwards."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


@pytest.fixture(scope="session", autouse=True)
def sao_env_cache(tmp_path_factory):
    """Point ``$SAO_ENV_CACHE`` at a session temporary folder, shared by pytest-xdist's workers (the
    warm-start cache locks each entry, so one worker trains a warm start and the others read it); packaged
    models (``make test`` converts them while setting up) are read from the user's cache."""
    from sao_env.policy.packaged import cache_folder

    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "sao-env-cache"
    path.mkdir(exist_ok=True)
    models = str(cache_folder("_").parent)  # packaged models are conversions, not results: the user's cache serves
    with session_env("SAO_ENV_MODEL_CACHE", models), session_env("SAO_ENV_CACHE", str(path)):
        yield path


SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
"""Real benchmark rows kept beside the checkout (never committed)."""

needs_shared_data = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"benchmark rows not found at {SHARED_DATA}")
"""For tests of streams over the real benchmark rows (skipped where ../shared/data is absent)."""


@pytest.fixture(scope="session", autouse=True)
def local_benchmark_data():
    """Serve benchmark streams from ``../shared/data`` (``$SAO_ENV_DATA``): no hub access in tests."""
    with session_env("SAO_ENV_DATA", str(SHARED_DATA)):
        yield SHARED_DATA


@pytest.fixture(scope="session", autouse=True)
def restore_torch_threads():
    """run_experiment sets torch's thread count; put it back after the session."""
    import torch

    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def shrunk_run(sao_env_cache):
    """``shrunk_run(agent, seed=0, extra=())`` -> (run dir, summary).

    Each resolved configuration runs once per session, across pytest-xdist's workers: the first worker
    that needs it makes it in the session's shared folder under a lock (keyed by the configuration), and
    the others read it (a ``sim`` run's bytes do not depend on the process that made it). Overrides that
    restate a recipe's own value share its run; tests must not modify the run directory.
    """
    import fcntl
    import hashlib
    import json
    import shutil

    from sao_env.experiment import run_experiment

    folder = sao_env_cache.parent / "shrunk-runs"
    folder.mkdir(exist_ok=True)
    done: dict[str, tuple[Path, dict]] = {}

    def run(agent: str, seed: int = 0, extra: tuple[str, ...] = ()) -> tuple[Path, dict]:
        config = _shrunk_config(agent, seed, extra)
        key = config.model_dump_json()
        if key not in done:
            digest = hashlib.sha256(key.encode()).hexdigest()[:16]
            out = folder / f"run-{agent}-s{seed}-{digest}"
            with (folder / f"{digest}.lock").open("a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if (out / "summary.json").is_file():
                    summary = json.loads((out / "summary.json").read_text())
                else:
                    shutil.rmtree(out, ignore_errors=True)  # a run a failed test left unfinished
                    summary = run_experiment(config, out, show_progress=False)
            done[key] = (out, summary)
        return done[key]

    return run


SCENARIO_SHRINK: dict[str, tuple[str, ...]] = {
    "topic-drift": (
        "env.warm_start.steps=60", "env.warm_start.batch_size=16",
        *(f"env.phases.{i}.duration_h=0.008" for i in range(2)),
        "env.eval.interval_h=0.008", "env.eval.prompts_per_phase=6",
    ),
    "tool-drift": (
        "env.warm_start.steps=60", "env.warm_start.batch_size=16",
        *(f"env.phases.{i}.duration_h=0.008" for i in range(2)),
        "env.eval.interval_h=0.008", "env.eval.prompts_per_phase=6",
    ),
    "codebase-drift": (
        "env.warm_start.steps=80", "env.warm_start.batch_size=2",
        *(f"env.phases.{i}.duration_h=0.014" for i in range(2)), "env.rollout_slots=4",
        "env.eval.interval_h=0.02", "env.eval.prompts_per_phase=2",
    ),
}
"""Overrides that cut the multi-turn and topic scenarios to a few simulated minutes with a short
warm start: enough for the runtime, the envs and the learner to run end to end (not to learn).

The topic and tool warm starts are 60 steps of 16 (150 cost 11 and 15 core-s, 60 about 40 % of that): the
tool-drift runs still call the tool in 41 of 54 (sao) and 34 of 42 (grpo) episodes, updates train on 2 turns.
codebase-drift's warm start is 80 steps of 2 demonstrations (its demonstrations are long: 80 of 8 was
most of the test's minute): measured, 18 of its 25 episodes still pass the test's view-or-edit check
(80 of 4: 24 of 27; 40 of 8: none, the check fails), and 2 evaluation prompts a phase instead of 4. Its
phases are 50 s (72 s: 25 episodes; 50 s: 17, 12 of them view or edit, 3 evaluations, about 30 % less time)."""


def load_bench(name: str):
    """The script ``bench/<name>.py`` as a module (bench/ is not a package)."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[1] / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def scenario_config(env: str, agent: str, seed: int = 0, extra: tuple[str, ...] = ()):
    from sao_env.experiment import resolve_config

    return resolve_config(env, agent, seed, [*SCENARIO_SHRINK[env], *shrink_overrides(agent)[len(SHRINK):], *extra])


TIMELINE = os.environ.get("SAO_ENV_TEST_TIMELINE")
"""A file to which each test appends one JSON line: worker, test id, start and end (epoch seconds), and
the CPU seconds this worker process and its reaped children spent on it (``bench/bench_suite.py``)."""

if TIMELINE:
    import json
    import resource
    import time

    def _cpu() -> tuple[float, float]:
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime

    def pytest_sessionstart(session):
        _append({"event": "start", "t": time.time(), "cpu": sum(_cpu())})

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        (own, kids), start = _cpu(), time.time()
        yield
        (own2, kids2), end = _cpu(), time.time()
        _append({"event": "test", "id": item.nodeid, "start": start, "end": end, "cpu": own2 - own,
                 "children_cpu": kids2 - kids})

    def _append(record: dict) -> None:
        record["worker"] = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(TIMELINE, "a") as handle:
            handle.write(json.dumps(record) + "\n")


START_FIRST = ("test_vllm_serve.py",)
"""Files that start before the other slow ones. pytest-xdist hands the first files out in turn, one to each worker:
the first ones after these (test_backends, test_backends_ray) both wait for the session's shared warm start, which one
worker trains (about 18 core-s) while the other sat idle on its lock. This file needs no warm start, and its vLLM
server's start keeps that core busy meanwhile."""


def pytest_collection_modifyitems(config, items):
    """Slow tests first (a stable sort keeps each file's order; ``START_FIRST`` before the others): with ``--dist
    loadfile`` their files start at once on the workers instead of forming the run's tail."""
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, item.path.name not in START_FIRST))


@pytest.fixture
def tiny():
    """A fresh tiny Qwen2 policy (seeded) and the character tokenizer."""
    import torch

    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer

    torch.set_num_threads(1)
    spec = ModelSpec(name="tiny-qwen2")
    tok = build_tokenizer(spec)
    return build_policy(spec, tok, seed=0), tok


def reporter_plugin(name: str = "reporter_under_test"):
    """The grading reporter plugin (sao_env/tasks/forge/pytest_reporter.py) loaded afresh as module ``name``: with no
    key file in the cwd it reports nothing, and its classes and helpers are there to test."""
    import importlib.util

    from sao_env.tasks.forge import report

    spec = importlib.util.spec_from_file_location(name, Path(report.__file__).with_name("pytest_reporter.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_packaged_model(monkeypatch, tmp_path):
    """A packaged model named ``fake-1m`` whose GGUF file is 4 bytes and whose cache is under ``tmp_path``: the
    registry (``packaged.PACKAGED``) holds it alone. For the planted-bug tests of ``sao_env.policy.packaged``."""
    import dataclasses
    import types

    from sao_env.policy import packaged

    model = dataclasses.replace(packaged.PACKAGED["smollm2-135m-instruct"], name="fake-1m", module="no_such_module_x")
    monkeypatch.setattr(packaged, "PACKAGED", {"fake-1m": model})
    monkeypatch.setenv("SAO_ENV_MODEL_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "pkg" / "fake.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    return types.SimpleNamespace(model=model, gguf=gguf, folder=tmp_path / "cache" / "fake-1m", packaged=packaged)


def reply_json(handler, payload: bytes, status: int = 200) -> None:
    """Answer a test HTTP server's request (a ``BaseHTTPRequestHandler``) with ``payload`` as JSON."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)
