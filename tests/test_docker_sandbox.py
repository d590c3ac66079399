"""The Docker sandbox against a real engine: the image built from Debian's packages (once, reused), the
hostile probes with bubblewrap's outcome classes, coding episodes graded as under bubblewrap, and no
container left behind by a run killed with SIGKILL.

`make test` provides the engine (.ci/with-docker: found, or Debian's dockerd started for the run, as
root) and sets SAO_ENV_DOCKER=1, under which a missing engine fails these tests; elsewhere they skip
with one line saying why.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from docker_support import built_image, require_engine  # noqa: E402
from sao_env.sandbox.docker_exec import LABEL, OWNER

require_engine()

from sao_env.envs.base import make_task_env  # noqa: E402
from sao_env.sandbox import Limits, LocalExecutor, docker_sandbox  # noqa: E402
from sao_env.sandbox.images import apt_mirror, client, host_suite, recipe  # noqa: E402
from sao_env.sandbox.local import INSTALL_HINT, _bwrap_check  # noqa: E402
from sao_env.sandbox.probes import PROBE_LIMITS, PROBES, Bait, run_probe  # noqa: E402
from sao_env.tasks.forge import grading  # noqa: E402
from sao_env.tasks.forge.source import ForgeParams, ForgeSource  # noqa: E402

BWRAP, BWRAP_DETAIL = _bwrap_check()
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason=f"{BWRAP_DETAIL}: {INSTALL_HINT}")


@pytest.fixture(scope="module")
def image() -> str:
    """The sandbox image: built once per machine (make test starts the build in the background; a
    process that needs it meanwhile waits on the build's lock), then found by its recipe's tag."""
    return built_image()


@pytest.fixture(scope="module")
def docker(image):
    return docker_sandbox(PROBE_LIMITS)


def test_the_image_is_tagged_by_its_recipe_and_reused(image, capsys):
    from sao_env.cli.app import main

    spec = recipe()
    assert image == spec.tag and image.startswith("sao-env/sandbox:")
    assert spec.suite == host_suite() and spec.mirror == apt_mirror(spec.suite)
    assert client().images.get(image).labels["sao-env.recipe"] == spec.digest
    assert main(["images", "build"]) == 0
    assert capsys.readouterr().out.startswith(f"{image} present: Debian {spec.suite} (python3, git, patch, tini)")


@pytest.mark.parametrize("name", list(PROBES))
def test_probe_outcome_is_the_same_in_docker_as_under_bubblewrap(name, docker):
    probe = PROBES[name]
    with Bait() as bait:
        outcome = run_probe(docker, probe, bait)
    assert outcome.cls == probe.expected, outcome
    if BWRAP is not None:
        with Bait() as bait:
            local = run_probe(LocalExecutor(PROBE_LIMITS, require_isolation=True), probe, bait)
        assert local.cls == outcome.cls, local


def _play(task, actions, sandbox):
    grading.clear_caches()  # each sandbox runs every test run and grade itself
    env = make_task_env(task, max_turns=len(actions), sandbox=sandbox)
    observations = [env.reset(seed=0, options={"task": task})[0]]
    for action in actions:
        observation, reward, _, _, info = env.step(action)
        observations.append(observation)
    env.close()
    return observations, reward, info["grade"]


@needs_bwrap
def test_codebase_drift_episodes_grade_the_same_in_both_sandboxes(image):
    task = ForgeSource(ForgeParams(repo_seed=0, head=1, bug_kinds=["operator_swap"])).task(7)
    bug = task.reference["bug"]
    episodes = {
        "fix": [f"view {bug['path']}", f"edit {bug['path']} {bug['line']}\n{bug['fixed']}", "run_tests", "submit"],
        "wrong": [f"edit {bug['path']} {bug['line']}\n    return 0", "run_tests", "submit"],
    }
    for name, actions in episodes.items():
        local = _play(task, actions, "bubblewrap")
        contained = _play(task, actions, "docker")
        assert contained == local, name  # every observation, the reward and the grader's details
        assert contained[1] == (1.0 if name == "fix" else 0.0)
    assert make_task_env(task, sandbox="docker").executor is docker_sandbox(Limits())  # one executor: caches hold


@needs_bwrap
def test_tool_drift_calls_answer_the_same_in_both_sandboxes(image):
    import numpy as np

    from sao_env.tasks import build_source

    source = build_source("tool_arithmetic", {"digits": 2, "operations": ["*"], "api": "v2", "retry_share": 0.0})
    task = source.sample(np.random.default_rng(0), phase="v2", created_at=0.0, index=0)
    actions = ["<py>print(mul(3, 4))</py>", "<py>print(times(3, 4))</py>", "<py>print(1 / 0)</py>",
               "12"]
    contained, local = _play(task, actions, "docker"), _play(task, actions, "bubblewrap")
    assert contained == local
    assert "NameError: name 'mul' is not defined" in contained[0][1] and contained[0][2] == "<out>12</out>\n"


def test_a_killed_run_leaves_no_container_after_the_next_start(image, tmp_path):
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        from sao_env.envs.repo_env import RepoEnv
        from sao_env.tasks.forge.source import ForgeParams, ForgeSource
        task = ForgeSource(ForgeParams(repo_seed=0, head=1, bug_kinds=["operator_swap"])).task(7)
        env = RepoEnv(max_turns=4, test_timeout_s=600, **RepoEnv.sandbox_options("docker"))
        env.reset(seed=0, options={"task": task})
        path = task.reference["bug"]["path"]
        env.step(f"edit {path} 1\\nimport time; time.sleep(600)")
        env.step("run_tests")  # hangs in its container until the kill
    """)], cwd=tmp_path)
    engine = client()

    def mine():  # list() inspects each container: another test's may be removed in between
        return [c for c in engine.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)
                if c.labels.get(OWNER, "").split(":")[-2:-1] == [str(child.pid)]]

    try:
        deadline = time.monotonic() + 120  # a loaded machine can leave a container 'created' for seconds
        while (not mine() or mine()[0].status != "running") and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [c.status for c in mine()] == ["running"], "the episode never started its test run"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert [c.status for c in mine()] == ["running"]  # nothing cleaned up after a SIGKILL...
    started = subprocess.run([sys.executable, "-c", "from sao_env.sandbox import docker_sandbox; docker_sandbox()"],
                             capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    assert mine() == []  # ...until the next process that starts a Docker sandbox reaps it


def test_the_reaper_passes_over_a_container_removed_while_it_lists(image, monkeypatch):
    """Between the engine's list and the inspection of each container another process can remove one (its run
    ended, another reaper got there first): the pass goes on and removes the other orphans. Two containers of a
    process that has exited; the first inspected of them is removed just before its inspection."""
    from docker.models.containers import ContainerCollection

    from sao_env.sandbox.docker_exec import reap

    engine = client()
    dead = subprocess.Popen(["true"])
    dead.wait()
    owner = f"{socket.gethostname()}:{dead.pid}:0"  # a start time no live process of that pid has
    made = [engine.containers.create(image, ["true"], labels={LABEL: "1", OWNER: owner}).id for _ in range(2)]
    inspect = ContainerCollection.get
    removed_first = []

    def removed_meanwhile(self, container_id):
        if container_id in made and not removed_first:
            removed_first.append(container_id)
            engine.api.remove_container(container_id, force=True)
        return inspect(self, container_id)

    monkeypatch.setattr(ContainerCollection, "get", removed_meanwhile)
    try:
        assert reap(engine) >= 1
    finally:
        monkeypatch.undo()
        left = [c.id for c in engine.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True)]
        for container_id in set(made) & set(left):
            engine.api.remove_container(container_id, force=True)
    assert len(removed_first) == 1
    assert not set(made) & set(left)
