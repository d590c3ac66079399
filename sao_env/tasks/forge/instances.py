"""Forge instances: a bug injected at a repository's head, in SWE-bench's schema.

The bug is committed on top of the head (SWE-smith's way), so ``base_commit`` is the commit with
the bug; the model's patch is against it. ``test_patch`` adds a regression test with the input
from the issue (SWE-bench's way: the tests that prove the fix come with the instance, hidden from
the model); ``FAIL_TO_PASS`` are the tests that fail at ``base_commit`` with the test patch applied
(the regression test and any existing test the bug breaks), ``PASS_TO_PASS`` all the others.
"""

from __future__ import annotations

import difflib
import json
import random
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from sao_env.tasks.forge.bugs import BUG_KINDS, candidates
from sao_env.tasks.forge.drift import history
from sao_env.tasks.forge.repo import (
    ForgeConfig,
    LoadedPackage,
    RepoSpec,
    commit_all,
    load_package,
    make_commit,
    materialize_history,
    render,
    run_tests_in_process,
)
from sao_env.tasks.forge.templates import TEMPLATES

BUG_DELAY_S = 3600
"""The bug commit comes this many seconds after the head commit."""


@dataclass(frozen=True)
class BugSite:
    """Where the bug is: ``path``, 1-based ``line``, the ``buggy`` and ``fixed`` text of that line,
    the bug ``kind``, and the ``module`` and ``function`` it sits in."""

    path: str
    line: int
    buggy: str
    fixed: str
    kind: str
    module: str
    function: str


@dataclass(frozen=True)
class ForgeInstance:
    """One task instance: SWE-bench's fields (upper-case test lists kept as tuples here, JSON
    strings in ``swebench_row``) plus what the environment needs: the files at ``base_commit``
    (``files``), the bug site and the forge coordinates."""

    instance_id: str
    repo: str
    base_commit: str
    problem_statement: str
    patch: str
    test_patch: str
    FAIL_TO_PASS: tuple[str, ...]
    PASS_TO_PASS: tuple[str, ...]
    created_at: str
    version: str
    environment_setup_commit: str
    hints_text: str
    files: Mapping[str, str] = field(repr=False)
    bug: BugSite
    package: str
    repo_seed: int
    head: int
    config: ForgeConfig
    instance_seed: int

    def swebench_row(self) -> dict[str, Any]:
        """The instance as a SWE-bench dataset row (test lists JSON-encoded, as on the Hub)."""
        row = {name: getattr(self, name) for name in (
            "instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "created_at",
            "version", "environment_setup_commit", "hints_text")}
        row["FAIL_TO_PASS"] = json.dumps(list(self.FAIL_TO_PASS))
        row["PASS_TO_PASS"] = json.dumps(list(self.PASS_TO_PASS))
        return row

    def reference(self) -> dict[str, Any]:
        """``Task.reference``: the SWE-bench fields (test lists as lists) plus ``files``, ``package``,
        ``bug`` (a dict) and the forge coordinates."""
        ref = {name: getattr(self, name) for name in (
            "instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch", "created_at",
            "version", "environment_setup_commit", "hints_text", "package", "repo_seed", "head", "instance_seed")}
        ref["FAIL_TO_PASS"] = list(self.FAIL_TO_PASS)
        ref["PASS_TO_PASS"] = list(self.PASS_TO_PASS)
        ref["files"] = dict(self.files)
        ref["bug"] = asdict(self.bug)
        ref["forge"] = asdict(self.config)
        return ref


def unified_diff(path: str, before: str, after: str) -> str:
    """A git-style unified diff of one file (``diff --git`` header, ``a/`` and ``b/`` prefixes)."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}", n=3)
    body = "".join(lines)
    return f"diff --git a/{path} b/{path}\n{body}" if body else ""


def _arities(spec: RepoSpec, module: str) -> dict[str, dict[str, int]]:
    out = {m.name: {f.name: f.arity for f in m.functions} for m in spec.modules}
    out[""] = out[module]
    return out


def _issue_case(spec: RepoSpec, key: str, clean: LoadedPackage, buggy: LoadedPackage,
                rng: random.Random) -> tuple[str, tuple[str, Any], tuple[str, Any]] | None:
    """A call of the buggy function whose outcome the bug changes: (call, expected, got)."""
    module, fn = spec.function(key)
    template = TEMPLATES[fn.template]
    fresh = [template.draw_args(rng) for _ in range(12)]
    for args in dict.fromkeys(fresh + list(fn.cases)):
        call = f"{module.name}.{fn.name}({args})"
        expected, got = clean.outcome(call), buggy.outcome(call)
        if expected[0] == "value" and (expected[0], repr(expected[1])) != (got[0], repr(got[1])):
            return call, expected, got
    return None


def problem_statement(call: str, expected: Any, got: tuple[str, Any], path: str, function: str) -> str:
    """The issue text: the failing call, what it does and what it should do, and where."""
    did = f"returns {got[1]!r}" if got[0] == "value" else f"raises {got[1]}"
    return f"`{call}` {did}, expected {expected!r}.\nThe function is `{function}` in {path}.\n"


@lru_cache(maxsize=4096)
def build_instance(config: ForgeConfig, head: int, bug_kinds: tuple[str, ...], instance_seed: int) -> ForgeInstance:
    """The instance of ``instance_seed``: a bug of a kind drawn from ``bug_kinds`` at ``head``.

    Deterministic: the same arguments give the same instance, byte for byte. Raises ValueError
    when no mutation of any listed kind changes behaviour (not seen with the shipped templates).
    """
    commits = history(config, head)
    spec, head_commit = commits[-1]
    rendered = render(spec)
    clean = load_package(rendered.files, spec.package)
    rng = random.Random(f"forge-bug:{config.repo_seed}:{head}:{instance_seed}:{','.join(bug_kinds)}")
    kinds = list(bug_kinds)
    rng.shuffle(kinds)
    for kind in kinds:
        sites = list(rendered.body_lines)
        rng.shuffle(sites)
        mutations = []
        for path, line, module, key in sites:
            options = candidates(rendered.files[path].splitlines()[line - 1], kind, _arities(spec, module))
            rng.shuffle(options)
            mutations += [(path, line, module, key, new) for new in options]
        for path, line, module, key, new in mutations:
            lines = rendered.files[path].splitlines()
            fixed, lines[line - 1] = lines[line - 1], new
            buggy_files = {**rendered.files, path: "\n".join(lines) + "\n"}
            try:
                buggy = load_package(buggy_files, spec.package)
            except Exception:  # noqa: BLE001, S112 - a mutation that breaks the module is not used
                continue
            case = _issue_case(spec, key, clean, buggy, rng)
            if case is None:
                continue
            return _assemble(config, head, instance_seed, spec, head_commit.sha, head_commit.timestamp,
                             rendered.files, buggy_files, BugSite(path, line, new, fixed, kind, module,
                                                                  spec.function(key)[1].name), case)
    raise ValueError(f"no behaviour-changing bug of kinds {bug_kinds} in {spec.package} at head {head}")


def _assemble(config: ForgeConfig, head: int, instance_seed: int, spec: RepoSpec, head_sha: str, head_time: int,
              clean_files: Mapping[str, str], buggy_files: dict[str, str], bug: BugSite,
              case: tuple[str, tuple[str, Any], tuple[str, Any]]) -> ForgeInstance:
    call, expected, got = case
    test_path = f"tests/test_{bug.module}.py"
    test_name = f"test_{bug.function}_issue"
    tests_after = buggy_files[test_path] + f"\ndef {test_name}():\n    assert {call} == {expected[1]!r}\n"
    results = run_tests_in_process({**buggy_files, test_path: tests_after}, spec.package)
    timestamp = head_time + BUG_DELAY_S
    message = f"Update {bug.module}.{bug.function}"
    base = make_commit(buggy_files, message, timestamp, head_sha)
    name = f"forge__{spec.package}-h{head}-{instance_seed}"
    return ForgeInstance(
        instance_id=name,
        repo=f"forge/{spec.package}",
        base_commit=base.sha,
        problem_statement=problem_statement(call, expected[1], got, bug.path, bug.function),
        patch=unified_diff(bug.path, buggy_files[bug.path], clean_files[bug.path]),
        test_patch=unified_diff(test_path, buggy_files[test_path], tests_after),
        FAIL_TO_PASS=tuple(test for test, passed in results.items() if not passed),
        PASS_TO_PASS=tuple(test for test, passed in results.items() if passed),
        created_at=datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        version=f"0.{head}",
        environment_setup_commit=base.sha,
        hints_text="",
        files=buggy_files,
        bug=bug,
        package=spec.package,
        repo_seed=config.repo_seed,
        head=head,
        config=config,
        instance_seed=instance_seed,
    )


def materialize(instance: ForgeInstance | Mapping[str, Any], dest: Path) -> Path:
    """Write the instance's repository (its whole history, the bug commit last) as a git
    repository at ``dest`` (which must not exist) and return it; HEAD is ``base_commit``.

    The history up to the head is built once per (forge configuration, head) and cached.
    Raises RuntimeError when git's SHA differs from ``base_commit``.
    """
    ref = instance.reference() if isinstance(instance, ForgeInstance) else instance
    config = ForgeConfig(**ref["forge"])
    commits = tuple(commit for _, commit in history(config, ref["head"]))
    key = f"r{config.repo_seed}-m{config.modules}-f{config.functions_per_module}-h{ref['head']}"
    cached = materialize_history(commits, key)
    shutil.copytree(cached, dest, symlinks=True)
    bug = make_commit(ref["files"], f"Update {ref['bug']['module']}.{ref['bug']['function']}",
                      commits[-1].timestamp + BUG_DELAY_S, commits[-1].sha)
    sha = commit_all(dest, bug)
    if sha != ref["base_commit"]:
        raise RuntimeError(f"git made {sha} where the instance says base_commit {ref['base_commit']}")
    return dest


def instance_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    unknown = sorted(set(kinds) - set(BUG_KINDS))
    if unknown or not kinds:
        raise ValueError(f"bug_kinds must be a non-empty subset of {list(BUG_KINDS)}, got {list(kinds)}")
    return tuple(kinds)
