"""SWE-bench Verified: predictions in swebench's format, evaluation through swebench's harness.

What needs no Docker engine is done here with the ``swebench`` package itself (an optional extra,
``pip install swebench``, 4.x): building an instance's test spec (image, eval script) from a row,
parsing a test log with the repository's own log parser, and grading a finished log: resolved
when every FAIL_TO_PASS and PASS_TO_PASS test passes (``swebench.harness.grading``).

Running the tests needs Docker: :func:`run_harness` calls ``swebench.harness.run_evaluation.main``
and then grades each instance's ``test_output.txt`` with :func:`grade_swebench`. SWE-bench
Verified's instance images come from their registry (``docker pull``; a missing one is a one-line
``UserError`` naming it). The forge's procedural instances go through the same harness with images
built here (:func:`forge_task`, :func:`build_forge_image`): the sandbox image plus the instance's
repository at ``/testbed``, registered in swebench's tables like any repository swebench knows.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import resource
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from sao_env.benchmarks.loaders import SWEBENCH_COLUMNS
from sao_env.errors import UserError
from sao_env.types import GradeResult, Task

GRADER_NAME = "swebench"
GRADING_COLUMNS = ("instance_id", "repo", "version", "base_commit", "test_patch", "FAIL_TO_PASS",
                   "PASS_TO_PASS", "environment_setup_commit")
"""Row columns needed to build a test spec and grade a log."""

_DIFF_BLOCK_RE = re.compile(r"```(?:diff|patch)[^\n]*\n(.*?)```", re.DOTALL)
_ANY_BLOCK_RE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)


def _swebench():
    try:
        import swebench
    except ImportError as err:
        raise UserError("SWE-bench support needs the swebench package (pip install 'swebench>=4,<5')") from err
    try:
        from swebench.harness import grading
        from swebench.harness.test_spec import test_spec
    except ImportError as err:
        version = getattr(swebench, "__version__", "?")
        raise UserError(f"SWE-bench support needs swebench 4.x (found {version}); pip install 'swebench>=4,<5'") from err
    return grading, test_spec


# ----------------------------------------------------------------------------- predictions


def extract_patch(response: str) -> str | None:
    """The unified diff in a response: the last ```diff block, else the last fenced block that
    is a diff, else everything from the first ``diff --git`` line. None when there is none."""
    for block in reversed(_DIFF_BLOCK_RE.findall(response)):
        if block.strip():
            return _ensure_newline(block)
    for block in reversed(_ANY_BLOCK_RE.findall(response)):
        if "diff --git" in block or block.lstrip().startswith("--- "):
            return _ensure_newline(block)
    start = response.find("diff --git")
    if start >= 0:
        return _ensure_newline(response[start:])
    return None


def _ensure_newline(patch: str) -> str:
    return patch if patch.endswith("\n") else patch + "\n"


def prediction(instance_id: str, model: str, patch: str | None) -> dict[str, Any]:
    """One line of a swebench predictions file."""
    return {"instance_id": instance_id, "model_name_or_path": model, "model_patch": patch or ""}


def write_predictions(path: Path, predictions: Iterable[Mapping[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for record in predictions:
            handle.write(json.dumps(dict(record)) + "\n")
    return path


# ----------------------------------------------------------------------------- rows and specs


def instance_row(task: Task) -> dict[str, Any]:
    """The dataset row behind a SWE-bench task (``task.reference["instance"]``)."""
    row = task.reference.get("instance")
    if not isinstance(row, Mapping):
        raise UserError(f"task {task.id} carries no SWE-bench row (reference['instance'])")
    return dict(row)


def require_full_rows(rows: Iterable[Mapping[str, Any]], *, source: str = "the data") -> None:
    """A UserError naming the columns grading needs when the rows lack them."""
    for row in rows:
        missing = [c for c in GRADING_COLUMNS if c not in row]
        if missing:
            raise UserError(
                f"{source} lacks {', '.join(missing)}, needed to evaluate SWE-bench; "
                "use the hub rows (princeton-nlp/SWE-bench_Verified) or a complete file"
            )


def make_test_spec(row: Mapping[str, Any], namespace: str | None = None):
    """swebench's full TestSpec for one row: image keys, environment/repo/eval scripts, the test lists.

    For repositories that install from a requirements file (django, ...) swebench fetches that file
    from GitHub while writing the environment script, as the harness itself does; a network failure
    becomes a UserError. Grading a finished log does not need this (see :func:`grading_spec`).
    """
    _, test_spec = _swebench()
    require_full_rows([row], source=f"row {row.get('instance_id', '?')}")
    register_forge_repo(row)
    try:
        return test_spec.make_test_spec(dict(row), namespace=namespace)
    except KeyError as err:
        raise UserError(f"swebench has no specs for {row.get('repo')} version {row.get('version')} ({err})") from err
    except OSError as err:  # requests' ConnectionError is an OSError
        raise UserError(f"building the test spec of {row.get('instance_id')} needs the network ({type(err).__name__})") from err


def grading_spec(row: Mapping[str, Any]):
    """A TestSpec holding only what grading a log reads (repo, version, the test lists); no scripts,
    so no network access, whatever the repository."""
    _, test_spec = _swebench()
    from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS

    require_full_rows([row], source=f"row {row.get('instance_id', '?')}")
    register_forge_repo(row)
    repo, version = str(row["repo"]), str(row["version"])
    if version not in MAP_REPO_VERSION_TO_SPECS.get(repo, {}):
        raise UserError(f"swebench has no specs for {repo} version {version}")

    def tests(key: str) -> list[str]:
        value = row[key]
        return json.loads(value) if isinstance(value, str) else list(value)

    return test_spec.TestSpec(
        instance_id=str(row["instance_id"]), repo=repo, version=version, repo_script_list=[],
        eval_script_list=[], env_script_list=[], arch="x86_64", FAIL_TO_PASS=tests("FAIL_TO_PASS"),
        PASS_TO_PASS=tests("PASS_TO_PASS"), language=MAP_REPO_TO_EXT[repo], docker_specs={}, namespace=None,
    )


def parse_test_log(row: Mapping[str, Any], log: str) -> tuple[dict[str, str], bool]:
    """``(status by test name, log usable)`` with the repository's swebench log parser.

    The log is a harness ``test_output.txt``: the test run between swebench's start/end markers;
    a failed patch application or missing markers give ``({}, False)``.
    """
    grading, _ = _swebench()
    with _temporary_log(log) as path:
        return grading.get_logs_eval(grading_spec(row), str(path))


def grade_swebench(task: Task, test_log: str, *, model_patch: str | None = "<patch>") -> GradeResult:
    """Grade a finished test log: reward 1 when the instance is resolved (swebench's rule: every
    FAIL_TO_PASS and PASS_TO_PASS test passes), else 0. ``details`` keeps the per-test report."""
    grading, _ = _swebench()
    spec = grading_spec(instance_row(task))
    with _temporary_log(test_log) as path:
        report = grading.get_eval_report(
            test_spec=spec,
            prediction={"instance_id": task.id, "model_name_or_path": "sao-env", "model_patch": model_patch},
            test_log_path=str(path),
            include_tests_status=True,
        )[task.id]
    resolved = bool(report.get("resolved"))
    status = report.get("tests_status") or {}
    details = {
        "verdict": "correct" if resolved else "wrong",
        "reason": "resolved" if resolved else (
            "patch-not-applied" if not report.get("patch_successfully_applied") else "tests-failed"),
        "grader": GRADER_NAME,
        "patch_applied": bool(report.get("patch_successfully_applied")),
        "fail_to_pass": status.get("FAIL_TO_PASS"),
        "pass_to_pass": status.get("PASS_TO_PASS"),
    }
    if is_forge(instance_row(task)) and details["patch_applied"]:
        resolved = _judge_forge_log(spec, test_log, details)
    return GradeResult(reward=1.0 if resolved else 0.0, details=details)


def _judge_forge_log(spec: Any, test_log: str, details: dict[str, Any]) -> bool:
    """A forge instance's verdict from the reporter's signed records in the log (``forge_specs``), not
    from the printed test lines: fills ``details`` as the forge grader does and says whether resolved."""
    from sao_env.tasks.forge import report

    exits = [line[len(EXIT_LINE):].strip() for line in test_log.splitlines() if line.startswith(EXIT_LINE)]
    returncode = int(exits[-1]) if exits and exits[-1].lstrip("-").isdigit() else None
    verdict = report.judge_stream(test_log, returncode, report.process_key())
    shown = {test: ("UNTRUSTED" if verdict.problem else verdict.statuses.get(test, "MISSING"))
             for test in [*spec.FAIL_TO_PASS, *spec.PASS_TO_PASS]}
    resolved = verdict.problem is None and all(value == "PASSED" for value in shown.values())
    details.update(verdict="correct" if resolved else "wrong",
                   reason="resolved" if resolved else (verdict.problem or "tests-failed"),
                   fail_to_pass={test: shown[test] for test in spec.FAIL_TO_PASS},
                   pass_to_pass={test: shown[test] for test in spec.PASS_TO_PASS})
    if verdict.problem:
        details["integrity"] = verdict.detail
    return resolved


@contextlib.contextmanager
def _temporary_log(text: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="sao-env-swebench-") as folder:
        path = Path(folder) / "test_output.txt"
        path.write_text(text, encoding="utf-8")
        yield path


# ----------------------------------------------------------------------------- Docker harness


def docker_unreachable_reason() -> str | None:
    """None when a Docker engine answers a ping, else why not (one line)."""
    try:
        import docker
    except ImportError:
        return "the docker Python package is not installed"
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        client.close()
    except Exception as err:  # noqa: BLE001  (DockerException, requests errors, ...)
        text = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return f"{type(err).__name__}: {text[:160]}"
    return None


def require_docker() -> None:
    reason = docker_unreachable_reason()
    if reason is not None:
        raise UserError(f"no Docker engine reachable ({reason}): SWE-bench evaluation needs one")


def require_instance_image(client: Any, image: str) -> None:
    """A one-line UserError naming ``image`` and how to get it when the engine does not have it.

    SWE-bench Verified's images come only from their registry (``docker pull``): the one step of
    the harness this project does not run in its tests. A forge instance's image is built here."""
    try:
        client.images.get(image)
        return
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound and friends
        pass
    if image.split("/")[0] == FORGE_NAMESPACE:
        how = "build it with sao_env.benchmarks.swebench.build_forge_image(task)"
    else:
        how = f"docker pull {image} (from the SWE-bench registry on Docker Hub)"
    raise UserError(f"the SWE-bench instance image {image} is not here: {how}")


def run_harness(
    tasks: list[Task],
    predictions: list[Mapping[str, Any]],
    *,
    workdir: Path,
    run_id: str,
    max_workers: int = 4,
    timeout_s: int = 1800,
    namespace: str | None = "swebench",
) -> dict[str, GradeResult]:
    """Run swebench's Docker harness on ``predictions`` and grade each instance's test log.

    Writes the instances (full rows) and predictions under ``workdir``; swebench's logs land in
    ``workdir/logs/run_evaluation/<run_id>/``. Instances without a log grade 0 (reason ``no-log``).
    """
    require_docker()
    _swebench()
    import docker
    from swebench.harness import run_evaluation

    rows = [instance_row(t) for t in tasks]
    require_full_rows(rows)
    engine = docker.from_env()
    for row in rows:
        spec = make_test_spec(row, namespace=FORGE_NAMESPACE if is_forge(row) else namespace)
        require_instance_image(engine, spec.instance_image_key)
    namespaces = {FORGE_NAMESPACE if is_forge(row) else namespace for row in rows}
    if len(namespaces) > 1:
        raise UserError("run forge instances and SWE-bench Verified instances in separate harness runs")
    namespace = namespaces.pop()
    workdir.mkdir(parents=True, exist_ok=True)
    instances_path = workdir / "swebench_instances.jsonl"
    with instances_path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, default=str) + "\n")
    predictions_path = write_predictions(workdir / "predictions.jsonl", predictions)
    previous = Path.cwd()
    files = resource.getrlimit(resource.RLIMIT_NOFILE)  # the harness sets soft = hard = open_file_limit
    os.chdir(workdir)
    try:
        run_evaluation.main(
            dataset_name=str(instances_path.resolve()), split="test", instance_ids=[t.id for t in tasks],
            predictions_path=str(predictions_path.resolve()), max_workers=max_workers, force_rebuild=False,
            cache_level="env", clean=False, open_file_limit=files[1], run_id=run_id, timeout=timeout_s,
            namespace=namespace, rewrite_reports=False, modal=False, report_dir=str(workdir),
        )
    finally:
        os.chdir(previous)
        resource.setrlimit(resource.RLIMIT_NOFILE, files)
    results = {}
    by_id = {p["instance_id"]: p for p in predictions}
    for task in tasks:
        model = str(by_id.get(task.id, {}).get("model_name_or_path", "None")).replace("/", "__")
        log_path = workdir / "logs" / "run_evaluation" / run_id / model / task.id / "test_output.txt"
        if log_path.is_file():
            patch = by_id.get(task.id, {}).get("model_patch") or None
            results[task.id] = grade_swebench(task, log_path.read_text(encoding="utf-8", errors="replace"),
                                              model_patch=patch)
        else:
            results[task.id] = GradeResult(0.0, {"verdict": "wrong", "reason": "no-log", "grader": GRADER_NAME})
    return results


# ----------------------------------------------------------------------------- forge instances


FORGE_NAMESPACE = "sao-env"
"""The image namespace of forge instances' images (``sao-env/sweb.eval.x86_64.<id>:latest``): local only."""
FORGE_SPECS = {"python": "3.11", "test_cmd": "sao_grade tests"}
"""swebench's specs of a forge repository (every version): the sandbox image's interpreter runs pytest on
the whole ``tests/`` folder, as the forge grader does (a forge instance's PASS_TO_PASS spans every test file;
the test patch's files, which swebench appends, are collected once), through ``sao_grade``, the function
that ``forge_specs`` defines (the grader's reporter loaded, the exit status printed after the run)."""
EXIT_LINE = "@@sao-grade-exit "


def forge_specs(repo: str) -> dict[str, Any]:
    """``FORGE_SPECS`` with the commands that run before the test patch is applied: every file outside
    the package is restored from the base commit (untracked ones removed), so that the patch's tests,
    conftest files and pytest configuration change nothing; the reporter plugin and this process's key
    are written untraced (the script runs under ``set -x``); ``sao_grade`` runs pytest with the plugin."""
    from sao_env.tasks.forge import report

    package = repo.split("/", 1)[1]
    outside = f"-- . ':(exclude){package}'"
    return {**FORGE_SPECS, "eval_commands": [
        f"git checkout -q HEAD {outside}",
        f"git clean -fdqx {outside}",
        "{ set +x; } 2>/dev/null",
        f"cat > {report.PLUGIN_PATH} <<'SAO_GRADE_PLUGIN'\n{report.plugin_source()}SAO_GRADE_PLUGIN",
        f"printf %s {report.process_key().decode()} > {report.KEY_FILE}",
        f'sao_grade() {{ python3 -m pytest -rA -p no:cacheprovider {" ".join(report.PYTEST_PLUGIN_ARGS)} "$@"; '
        f'echo "{EXIT_LINE}$?"; }}',
        "set -x",
    ]}


CONDA_SHIM = """\
# sao-env: swebench's scripts source this file and run `conda activate testbed`; in a forge
# instance's image the image's own python3 is the environment, so there is nothing to activate.
conda() { :; }
"""
TESTBED = "testbed"
BASE_LABEL = "sao-env.base"
"""The sandbox image a forge instance's image was built on: another base (a new recipe) rebuilds it."""


def is_forge(row: Mapping[str, Any]) -> bool:
    return str(row.get("repo", "")).startswith("forge/")


def register_forge_repo(row: Mapping[str, Any]) -> None:
    """Enter a forge repository in swebench's tables, as swebench lists the repositories it knows:
    its specs (``FORGE_SPECS``), the pytest log parser and the Python extension. Other rows: nothing."""
    if not is_forge(row):
        return
    from swebench.harness.constants import MAP_REPO_TO_EXT, MAP_REPO_VERSION_TO_SPECS
    from swebench.harness.log_parsers import MAP_REPO_TO_PARSER
    from swebench.harness.log_parsers.python import parse_log_pytest

    repo = str(row["repo"])
    MAP_REPO_VERSION_TO_SPECS.setdefault(repo, {})[str(row["version"])] = forge_specs(repo)
    MAP_REPO_TO_PARSER[repo] = parse_log_pytest
    MAP_REPO_TO_EXT[repo] = "py"


def forge_task(task: Task) -> Task:
    """A forge task (``env="repo"``) as a SWE-bench task (``env="swebench"``): the same instance, its
    dataset row in ``reference["instance"]`` and the forge's reference kept beside it."""
    import dataclasses

    ref = task.reference
    row = {name: ref[name] for name in ("instance_id", "repo", "base_commit", "problem_statement", "patch",
                                        "test_patch", "created_at", "version", "environment_setup_commit",
                                        "hints_text")}
    row["FAIL_TO_PASS"] = json.dumps(list(ref["FAIL_TO_PASS"]))  # the hub's form, as ForgeInstance.swebench_row
    row["PASS_TO_PASS"] = json.dumps(list(ref["PASS_TO_PASS"]))
    return dataclasses.replace(task, env="swebench", grader=GRADER_NAME,
                               reference={"instance": row, "forge": dict(ref)})


def build_forge_image(task: Task, *, client: Any = None, base: str | None = None) -> str:
    """The instance image swebench's harness looks for, for a forge task (``forge_task`` form or the
    forge's own): the sandbox image (``base``; built when missing) plus the instance's git repository
    at ``/testbed`` on ``base_commit``, a ``conda`` shim (``CONDA_SHIM``) and tini as its init (so that
    swebench's ``container.stop`` ends the container at once). Reused when present on the same base;
    returns its key (``sao-env/sweb.eval.x86_64.<id>:latest``)."""
    from sao_env.sandbox.images import client as engine
    from sao_env.sandbox.images import ensure_image
    from sao_env.tasks.forge.instances import materialize

    handle = client if client is not None else engine()
    swe = task if task.env == "swebench" else forge_task(task)
    forge_ref = swe.reference.get("forge")
    if forge_ref is None:
        raise UserError(f"task {task.id} is not a forge instance")
    key = make_test_spec(instance_row(swe), namespace=FORGE_NAMESPACE).instance_image_key
    base = base or ensure_image(docker_client=handle)
    try:
        if handle.images.get(key).labels.get(BASE_LABEL) == base:
            return key
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound: build it
        pass
    with tempfile.TemporaryDirectory(prefix="sao-forge-image-") as folder:
        repo = materialize(forge_ref, Path(folder) / TESTBED)
        payload = io.BytesIO()
        with tarfile.open(fileobj=payload, mode="w") as tar:
            def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                return info

            tar.add(repo, arcname=TESTBED, filter=owned_by_root)
            shim = CONDA_SHIM.encode()
            for name in ("opt", "opt/miniconda3", "opt/miniconda3/bin"):
                info = tarfile.TarInfo(name)
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            info = tarfile.TarInfo("opt/miniconda3/bin/activate")
            info.size, info.mode = len(shim), 0o644
            tar.addfile(info, io.BytesIO(shim))
        container = handle.containers.create(base, command=["true"])  # unlabelled: its labels would be committed
        try:
            container.put_archive("/", payload.getvalue())
            repository, tag = key.rsplit(":", 1)
            container.commit(repository=repository, tag=tag,
                             changes=["WORKDIR /testbed", 'ENTRYPOINT ["/usr/bin/tini", "--"]',
                                      f"LABEL {BASE_LABEL}={base}"])
        finally:
            container.remove(force=True)
    return key


__all__ = [
    "GRADING_COLUMNS", "SWEBENCH_COLUMNS", "extract_patch", "prediction", "write_predictions", "instance_row",
    "require_full_rows", "make_test_spec", "grading_spec", "parse_test_log", "grade_swebench", "docker_unreachable_reason",
    "require_docker", "run_harness", "require_instance_image", "register_forge_repo", "forge_task",
    "build_forge_image", "FORGE_NAMESPACE",
]
