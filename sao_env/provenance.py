"""What a run was made from: the hash of its resolved configuration, the code, the packages, the data.

``config_hash`` is the sha256 of the canonical JSON (sorted keys, no spaces) of the configuration
with every default expanded (``sao_env.experiment.expand_config``); ``short`` is its first 12 hex
digits. ``code_version`` identifies the code. What decides reuse is ``source_sha256``: the sha256
of what a run executes and reads, by content: every file of the ``sao_env`` package, the spec
folders (``envs/``, ``agents/``, ``evals/``) beside it, and the versions of Python, torch,
transformers and numpy (``SOURCE_PARTS``, ``source_digest``). A commit that touches only tests,
docs, benchmarks or boards leaves it as it was, so finished runs stay reusable across such commits
(a grid can span sessions); any edit of the package or a spec changes it. For people, the record
also names the git commit of the checkout and whether its tracked files differ from that commit
(``dirty``, with ``diff_sha256`` of ``git diff HEAD``; the harness's own outputs, ``OUTPUT_PATHS``,
are left out of that diff). ``code_key`` turns a record into one string: two runs have the same code
exactly when their keys are equal (``src.<12 hex>``; records older than the source hash fall back
to the commit and its diff).
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import sao_env

PACKAGES = ("torch", "transformers", "datasets", "math-verify", "swebench", "sao-env")
"""Distributions whose versions a run records (None where one is not installed)."""

OUTPUT_PATHS = ("leaderboards", "runs", "results")
"""Folders of the checkout that the harness writes (``compare``/``leaderboard``/``sweep`` boards and
plots, run directories, ``eval`` results): outside the code version even when tracked."""

SOURCE_ROOT = Path(sao_env.__file__).resolve().parent.parent
"""The folder holding the ``sao_env`` package: the checkout in an editable install."""


def canonical_json(value: Any) -> str:
    """The one JSON text of ``value``: sorted keys, no whitespace, non-ASCII kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def config_hash(expanded: dict) -> str:
    """sha256 (hex) of the canonical JSON of an expanded configuration."""
    return hashlib.sha256(canonical_json(expanded).encode()).hexdigest()


def short(digest: str) -> str:
    """The short form of a hash shown to people (12 hex digits)."""
    return digest[:12]


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(SOURCE_ROOT), *args], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None


SOURCE_PARTS = ("sao_env", "envs", "agents", "evals")
"""Folders of ``SOURCE_ROOT`` whose files a run executes or reads (the package and the spec folders)."""
RUNTIME_PACKAGES = ("torch", "transformers", "numpy")
"""Libraries whose versions are part of the source hash (with Python's): they compute every number of a run."""


def source_digest(root: Path | None = None) -> str:
    """sha256 of the files under ``SOURCE_PARTS`` of ``root`` (default ``SOURCE_ROOT``), each as its
    relative path and bytes in path order (byte-compiled caches aside), and of the runtime's versions."""
    root = Path(root) if root is not None else SOURCE_ROOT
    digest = hashlib.sha256()
    for part in SOURCE_PARTS:
        folder = root / part
        if not folder.is_dir():
            continue
        for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                           and p.suffix not in (".pyc", ".pyo")):
            data = path.read_bytes()
            digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
            digest.update(data)
    versions = {"python": platform.python_version()}
    for name in RUNTIME_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    digest.update(canonical_json(versions).encode())
    return digest.hexdigest()


@lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """``{"git_commit", "dirty", "diff_sha256", "sao_env", "source_sha256"}`` of the running code, read
    once per process; changes under ``OUTPUT_PATHS`` are not part of ``dirty`` and ``diff_sha256``.

    Git fields are None where the package is not in a git checkout (an installed wheel); the source
    hash is there in every case.
    """
    commit = _git("rev-parse", "HEAD") if (SOURCE_ROOT / ".git").exists() else None
    out: dict[str, Any] = {"git_commit": None, "dirty": None, "diff_sha256": None, "sao_env": sao_env.__version__,
                           "source_sha256": source_digest()}
    if commit is None:
        return out
    diff = _git("diff", "HEAD", "--binary", "--", ".", *(f":(exclude){p}" for p in OUTPUT_PATHS)) or ""
    out.update(git_commit=commit.strip(), dirty=bool(diff),
               diff_sha256=hashlib.sha256(diff.encode()).hexdigest() if diff else None)
    return out


def code_key(code: dict[str, Any] | None) -> str:
    """``src.<source12>``; for records made before the source hash, ``<commit12>``, ``<commit12>+dirty.<diff8>``
    or ``sao-env==<version>``; "unknown" when unrecorded."""
    if not code:
        return "unknown"
    if code.get("source_sha256"):
        return f"src.{code['source_sha256'][:12]}"
    if not code.get("git_commit"):
        return f"sao-env=={code.get('sao_env')}"
    key = code["git_commit"][:12]
    return f"{key}+dirty.{code['diff_sha256'][:8]}" if code.get("dirty") else key


def package_versions() -> dict[str, str | None]:
    """Python's version and each of ``PACKAGES``'s (None where not installed)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def datasets_read(scenario) -> list[dict[str, Any]]:
    """The benchmark rows a scenario's sources read: per (suite, origin) the suite's dataset id,
    split and pinned revision (None: the hub's default branch), where the rows came from (a hub id,
    a URL or a local file), how many distinct rows the sources kept, and the sha256 of a local file.

    Sources that read benchmark rows keep them in ``tasks`` (id -> Task) with the loader's
    ``metadata["suite"]`` and ``metadata["source"]``; procedural sources read no data.
    """
    from sao_env.benchmarks.suites import load_suite

    rows_read: dict[tuple[str, str], set] = {}
    for sources in scenario.sources:
        for source in sources:
            for task in getattr(source, "tasks", {}).values():
                suite, origin = task.metadata.get("suite"), task.metadata.get("source")
                if suite and origin:
                    rows_read.setdefault((suite, str(origin)), set()).add(task.metadata.get("row", task.id))
    out = []
    for (suite, origin), rows in sorted(rows_read.items()):
        spec = load_suite(suite)
        path = Path(origin)
        out.append({"suite": suite, "dataset": spec.dataset, "split": spec.split,
                    "revision": getattr(spec, "revision", None), "read_from": origin, "rows": len(rows),
                    "file_sha256": _file_sha256(path) if path.is_file() else None})
    return out


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
