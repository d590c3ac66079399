"""Grading forge instances the way SWE-bench grades, with outcomes the graded code cannot write.

``grade_forge(task, response)`` takes a unified diff against ``base_commit``; ``grade_files(ref,
files)`` the final state of a working copy (what ``RepoEnv`` grades). Either way the graded tree is
the base tree with the package directory taken from the model's state: the tests, and any file
outside the package (a ``conftest.py``, a ``pytest.ini``, a ``sitecustomize.py``), are the
instance's own, as SWE-bench resets test files before applying ``test_patch``; the paths the model
changed there are recorded in the verdict (``ignored_edits``). The tests then run in the sandbox
(``python -m pytest -rA`` with the grader's reporter plugin, ``report.py``), and the verdict comes
from the reporter's signed records, not from the printed log: resolved iff every FAIL_TO_PASS and
PASS_TO_PASS test was reported passed (setup, call and teardown; a skip or an xfail is not a pass),
the records are whole and untampered, and pytest's exit status agrees with them
(docs/sandbox.md, "Grading that the graded code cannot write").

Verdicts are cached by (instance, hash of the graded tree, timeout): identical final states, as
many tiny-model episodes end, are graded once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from sao_env.sandbox import ExecResult, Executor, default_executor, warm
from sao_env.tasks.forge import report
from sao_env.tasks.forge.repo import list_files, write_files
from sao_env.types import GradeResult, Task

DEFAULT_TIMEOUT_S = 10.0
PYTEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "COLUMNS": "120", "PYTHONHASHSEED": "0"}
"""Plugins of the host venv are not loaded (0.45 s instead of 1.3 s a run); lines stay short; sets
print in the same order in every run (assertion messages reach ``run_tests`` observations)."""
PYTEST_ARGS = ("-rA", "-q", "-p", "no:cacheprovider", "--rootdir=.")
MAX_FILE_BYTES = 256 * 1024
CACHE_SIZE = 8192

_FENCED = re.compile(r"```(?:diff|patch)?[^\n]*\n(.*?)```", re.DOTALL)
_TIMING = re.compile(r"\s+in [\d.]+s.*$")

_grades: OrderedDict[tuple, GradeResult] = OrderedDict()
_runs: OrderedDict[tuple, str] = OrderedDict()
_test_trees: OrderedDict[tuple, tuple] = OrderedDict()
_lock = threading.Lock()


def clear_caches() -> None:
    """Forget every cached verdict, test-run observation and test-patched tree (benchmarks measure
    uncached runs)."""
    with _lock:
        _grades.clear()
        _runs.clear()
        _test_trees.clear()


def _remember(cache: OrderedDict, key: tuple, value: Any) -> Any:
    with _lock:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > CACHE_SIZE:
            cache.popitem(last=False)
    return value


def _recall(cache: OrderedDict, key: tuple) -> Any:
    with _lock:
        return cache.get(key)


def digest(files: Mapping[str, str]) -> str:
    """A hash of a whole tree (paths and contents)."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return h.hexdigest()


# --- patches ------------------------------------------------------------------------------------

def extract_patch(response: str) -> str | None:
    """The unified diff in a response: a fenced block, else from the first ``diff --git`` or
    ``--- `` line. ``""`` for an empty response (no change); None when there is text but no diff."""
    if not response.strip():
        return ""
    for block in _FENCED.findall(response):
        if "@@" in block:
            return block if block.endswith("\n") else block + "\n"
    for marker in ("diff --git", "--- "):
        found = re.search(f"^{re.escape(marker)}", response, re.MULTILINE)
        if found:
            patch = response[found.start():]
            return patch if patch.endswith("\n") else patch + "\n"
    return None


def apply_patch(files: Mapping[str, str], patch: str,
                parent: Path | None = None) -> tuple[dict[str, str] | None, str]:
    """Apply a unified diff to ``files`` with ``git apply`` in a scratch folder (no repository,
    none looked for above it): (new files, "") or (None, git's error). A second try recounts the
    hunk lengths (hand-written patches often miscount). Symlinks the patch makes are dropped."""
    if not patch.strip():
        return dict(files), ""
    folder = Path(tempfile.mkdtemp(prefix="sao-forge-patch-", dir=parent))
    try:
        write_files(folder, files)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder), "LANG": "C",
               "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
               "GIT_CEILING_DIRECTORIES": str(folder.parent)}
        error = ""
        for extra in ((), ("--recount",)):
            done = subprocess.run(["git", "apply", "--whitespace=nowarn", *extra, "-"], input=patch, cwd=folder,
                                  env=env, capture_output=True, text=True, timeout=30, check=False)
            if done.returncode == 0:
                out = {}
                for path in list_files(folder):
                    target = folder / path
                    if target.stat().st_size <= MAX_FILE_BYTES:
                        out[path] = target.read_text(encoding="utf-8", errors="replace")
                return out, ""
            error = error or " ".join(done.stderr.split())[:200]
        return None, error or "git apply failed"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- running tests ----------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _pytest_modules() -> tuple[str, ...]:
    """What a pytest run imports before it reads a test file: pytest, its built-in plugins and pdb."""
    if importlib.util.find_spec("pytest") is None:
        return ()
    from _pytest.config import default_plugins

    return ("pytest", *(f"_pytest.{name}" for name in default_plugins), "pdb")


def _warm_pytest() -> warm.WarmPool:
    return warm.shared_pool("forge-pytest", lambda: warm.WarmInterpreter(
        default_executor(), flags=(), preload=_pytest_modules(), env=PYTEST_ENV))


def run_pytest(files: Mapping[str, str], targets: list[str], *, timeout_s: float,
               executor: Executor | None = None, parent: Path | None = None,
               extra_args: tuple[str, ...] = ()) -> ExecResult:
    """``python -m pytest -rA`` on ``targets`` in a fresh working copy of ``files``, in the sandbox.

    With ``executor`` None and bubblewrap here, a fork of a warm interpreter that imported pytest
    once runs it (0.2-0.3 s instead of 0.7-0.9 s; the same log but for object addresses); else a
    fresh interpreter in a new folder under ``parent`` (removed afterwards). ``extra_args`` go before
    the targets (the grader's ``-p`` reporter)."""
    argv = ["-m", "pytest", *PYTEST_ARGS, *extra_args, *targets]
    if executor is None and warm.available(default_executor()) and _pytest_modules():
        return _warm_pytest().run(argv, files, timeout_s=timeout_s, env=PYTEST_ENV)
    executor = executor if executor is not None else default_executor()
    folder = Path(tempfile.mkdtemp(prefix="sao-forge-run-", dir=parent))
    try:
        write_files(folder, files)
        return executor.run([getattr(executor, "python", "python3"), *argv], workdir=folder, timeout_s=timeout_s,
                            env=dict(PYTEST_ENV))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _statuses(log: str) -> dict[str, str]:
    from swebench.harness.log_parsers.python import parse_log_pytest

    return parse_log_pytest(log, None)  # the pytest parser never reads its test_spec


def summarize(result: ExecResult, timeout_s: float, *, max_failures: int = 4, max_errors: int = 3) -> str:
    """The ``run_tests`` observation: failing tests, the first assertion lines, the count line."""
    if result.timed_out:
        return f"timeout: the tests ran longer than {timeout_s:g}s\n"
    if result.reason and result.reason.startswith("sandbox"):
        return f"error: {result.reason}\n"
    statuses = _statuses(result.stdout)
    failed = [f"{status} {test}" for test, status in statuses.items() if status in ("FAILED", "ERROR")]
    errors: list[str] = []
    for line in result.stdout.splitlines():
        if line.startswith("E ") and " where " not in line and "+  " not in line:
            text = "E " + " ".join(line[1:].split())
            if text not in errors:
                errors.append(text)
    lines = [line.strip("= ") for line in result.stdout.splitlines() if line.strip()]
    count = _TIMING.sub("", lines[-1]) if lines else f"no output (exit status {result.returncode})"
    out = failed[:max_failures] + (["..."] if len(failed) > max_failures else []) + errors[:max_errors]
    return "\n".join(out + [count]) + "\n"


def run_visible_tests(files: Mapping[str, str], *, timeout_s: float = DEFAULT_TIMEOUT_S,
                      executor: Executor | None = None, parent: Path | None = None) -> str:
    """Run the working copy's own tests (``tests/``) and summarize (cached by tree and timeout)."""
    key = (digest(files), timeout_s, id(executor) if executor is not None else None)
    cached = _recall(_runs, key)
    if cached is not None:
        return cached
    targets = ["tests"] if any(p.startswith("tests/") for p in files) else []
    result = run_pytest(files, targets, timeout_s=timeout_s, executor=executor, parent=parent)
    return _remember(_runs, key, summarize(result, timeout_s))


# --- grading -------------------------------------------------------------------------------------

def graded_tree(reference: Mapping[str, Any], files: Mapping[str, str]) -> dict[str, str]:
    """The base tree with the package directory taken from ``files`` (see the module docstring)."""
    package = reference["package"] + "/"
    tree = {path: text for path, text in reference["files"].items() if not path.startswith(package)}
    tree.update({path: text for path, text in files.items() if path.startswith(package)})
    return dict(sorted(tree.items()))


def patched_paths(patch: str) -> set[str] | None:
    """The files a unified diff touches (both sides of each ``diff --git`` / ``---``/``+++`` pair),
    or None when it has a header this reading does not know (quoted names, renames, binary)."""
    paths: set[str] = set()
    for line in patch.splitlines():
        if line.startswith(("rename ", "copy ", "Binary ", "GIT binary")):
            return None
        if line.startswith(("--- ", "+++ ")):
            name = line[4:].split("\t")[0].strip()
            if name.startswith('"'):
                return None
            if name != "/dev/null":
                paths.add(name[2:] if name.startswith(("a/", "b/")) else name)
    return paths


def with_test_patch(reference: Mapping[str, Any], tree: Mapping[str, str],
                    parent: Path | None = None) -> tuple[dict[str, str] | None, str]:
    """``apply_patch(tree, test_patch)``, with the patch applied once per instance when it touches
    only files outside the package: those are the instance's own in every graded tree
    (``graded_tree``), so the result is the patched base files plus the tree's package."""
    patch = reference.get("test_patch", "")
    package = reference["package"] + "/"
    paths = patched_paths(patch)
    if not patch.strip() or paths is None or any(p.startswith(package) for p in paths):
        return apply_patch(tree, patch, parent)
    key = (reference["instance_id"], reference["base_commit"], hashlib.sha256(patch.encode()).hexdigest())
    outside = _recall(_test_trees, key)
    if outside is None:
        base = {path: text for path, text in reference["files"].items() if not path.startswith(package)}
        outside = _remember(_test_trees, key, apply_patch(base, patch, parent))
    patched, error = outside
    if patched is None:
        return None, error
    # what apply_patch's read-back of the package gives: newlines normalised, big files dropped
    mine = {path: text.replace("\r\n", "\n").replace("\r", "\n") for path, text in tree.items()
            if path.startswith(package)}
    mine = {path: text for path, text in mine.items() if len(text.encode("utf-8")) <= MAX_FILE_BYTES}
    return dict(sorted({**patched, **mine}.items())), ""


def _failure(reference: Mapping[str, Any], reason: str, **extra: Any) -> GradeResult:
    return GradeResult(0.0, {"instance_id": reference["instance_id"], "resolved": False, "reason": reason,
                             "resolution": "RESOLVED_NO", "fail_to_pass": {}, "pass_to_pass": {}, **extra})


def grade_files(reference: Mapping[str, Any], files: Mapping[str, str], *, timeout_s: float | None = None,
                executor: Executor | None = None, parent: Path | None = None) -> GradeResult:
    """The verdict on a final working-copy state ``files`` of the instance ``reference``."""
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status

    timeout_s = float(timeout_s if timeout_s is not None else reference.get("timeout_s", DEFAULT_TIMEOUT_S))
    tree = graded_tree(reference, files)
    key_ = (reference["instance_id"], reference["base_commit"], digest(tree), digest(files), timeout_s,
            id(executor) if executor is not None else None)
    cached = _recall(_grades, key_)
    if cached is not None:
        return cached
    tree_with_tests, error = with_test_patch(reference, tree, parent)
    if tree_with_tests is None:
        return _remember(_grades, key_, _failure(reference, "test-patch-not-applied", error=error))
    f2p, p2p = list(reference["FAIL_TO_PASS"]), list(reference["PASS_TO_PASS"])
    targets = sorted({test.split("::")[0] for test in f2p + p2p})
    instrumented, key = report.prepare(tree_with_tests)
    result = run_pytest(instrumented, targets, timeout_s=timeout_s, executor=executor, parent=parent,
                        extra_args=report.PYTEST_PLUGIN_ARGS)
    verdict = report.judge(result, key)
    # anything but a test the reporter saw pass counts as a failure (swebench counts SKIPPED as neither)
    graded = {test: "PASSED" if verdict.statuses.get(test) == "PASSED" else "FAILED" for test in f2p + p2p}
    resolution = get_resolution_status(get_eval_tests_report(graded, {FAIL_TO_PASS: f2p, PASS_TO_PASS: p2p}))
    at_limit = result.reason == "disk limit"
    resolved = (resolution == ResolvedStatus.FULL.value and not result.timed_out and not at_limit
                and verdict.problem is None)
    if result.timed_out:
        reason = "timeout"
    elif result.reason and result.reason.startswith("sandbox"):
        reason = f"sandbox-error: {result.reason}"
    elif at_limit:
        reason = "disk-limit"
    elif verdict.problem is not None:
        reason = verdict.problem
    else:
        reason = "resolved" if resolved else "tests-failed"
    details = {"instance_id": reference["instance_id"], "resolved": resolved, "reason": reason,
               "resolution": resolution if verdict.problem is None else ResolvedStatus.NO.value,
               "fail_to_pass": {test: _shown(verdict, test) for test in f2p},
               "pass_to_pass": {test: _shown(verdict, test) for test in p2p}}
    if verdict.problem is not None and reason == verdict.problem:
        details["integrity"] = verdict.detail
    ignored = ignored_edits(reference, files)
    if ignored:
        details["ignored_edits"] = ignored
    return _remember(_grades, key_, GradeResult(1.0 if resolved else 0.0, details))


def _shown(verdict: report.Verdict, test: str) -> str:
    """A test's status in the details: UNTRUSTED for every test of a run whose report cannot be trusted."""
    return "UNTRUSTED" if verdict.problem is not None else verdict.statuses.get(test, "MISSING")


def ignored_edits(reference: Mapping[str, Any], files: Mapping[str, str]) -> list[str]:
    """Paths outside the package that ``files`` adds, changes or removes: the graded tree takes the
    instance's own there (tests, conftest files, pytest configuration), so the edit changed nothing;
    the verdict records that it was tried."""
    package = reference["package"] + "/"
    base = {path: text for path, text in reference["files"].items() if not path.startswith(package)}
    mine = {path: text for path, text in files.items() if not path.startswith(package)}
    return sorted(path for path in set(base) | set(mine) if base.get(path) != mine.get(path))


def grade_forge(task: Task, response: str) -> GradeResult:
    """Grade a model patch (a unified diff against the task's ``base_commit``, bare or fenced)."""
    reference = task.reference
    patch = extract_patch(response)
    if patch is None:
        return _failure(reference, "patch-not-applied", error="no unified diff in the response")
    files, error = apply_patch(reference["files"], patch)
    if files is None:
        return _failure(reference, "patch-not-applied", error=error)
    return grade_files(reference, files)
