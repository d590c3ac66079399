"""Generated repositories: their structure, their files, their tests run in process, their git SHAs.

A repository is a small Python package (``<package>/<module>.py``) with a pytest file per module
(``tests/test_<module>.py``), described by a ``RepoSpec`` and rendered to text in memory
(``render``). Expected values in the tests are computed by running the rendered functions in
process: the code is the forge's own, never a model's. Git object ids are computed in pure Python
(``commit_sha``), so an instance knows its ``base_commit`` without touching the disk;
``materialize`` writes the real repository and checks that git agrees.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import random
import shutil
import subprocess
import tempfile
import types
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from sao_env.tasks.forge.templates import (
    INT_TEMPLATES,
    STR_TEMPLATES,
    TEMPLATES,
)

PACKAGES = ("mathkit", "numkit", "wordsmith", "tally", "pebble", "quill", "abacus", "sprig", "ledger", "tinker")
INT_MODULES = ("ops", "calc", "arith", "numbers")
STR_MODULES = ("text", "words", "strs", "fmt")
MIXED_MODULES = ("extra", "misc", "tools", "more", "bits", "parts")
HELPER_MODULES = ("core", "common", "base", "shared", "helpers", "util")
"""Module names: int helpers, string helpers, mixed, and the names a moved helper module gets."""

AUTHOR = ("Forge", "forge@sao-env.invalid")
EPOCH = 1704067200
"""2024-01-01T00:00:00Z: the initial commit's date; drift commit k is k days later."""


@dataclass(frozen=True)
class FunctionSpec:
    """One function of a repository.

    ``key`` is its identity across drift (renames change ``name`` only); ``consts`` the drawn
    constants (placeholder -> source text); ``promoted`` the constants turned into keyword
    parameters (placeholder -> parameter name); ``callee`` the key of the function it calls;
    ``cases`` the argument lists its test asserts on.
    """

    key: str
    name: str
    template: str
    consts: tuple[tuple[str, str], ...]
    cases: tuple[str, ...]
    callee: str | None = None
    promoted: tuple[tuple[str, str], ...] = ()

    @property
    def arity(self) -> int:
        return len(TEMPLATES[self.template].params)


@dataclass(frozen=True)
class ModuleSpec:
    name: str
    functions: tuple[FunctionSpec, ...]


@dataclass(frozen=True)
class RepoSpec:
    """A whole repository: the package name and its modules, in order."""

    package: str
    modules: tuple[ModuleSpec, ...]

    def function(self, key: str) -> tuple[ModuleSpec, FunctionSpec]:
        for module in self.modules:
            for fn in module.functions:
                if fn.key == key:
                    return module, fn
        raise KeyError(key)

    def names(self) -> set[str]:
        return {fn.name for module in self.modules for fn in module.functions}

    def templates(self) -> set[str]:
        return {fn.template for module in self.modules for fn in module.functions}

    def module_path(self, module: str) -> str:
        return f"{self.package}/{module}.py"

    def replace_function(self, key: str, fn: FunctionSpec) -> RepoSpec:
        modules = tuple(replace(m, functions=tuple(fn if f.key == key else f for f in m.functions))
                        for m in self.modules)
        return replace(self, modules=modules)


@dataclass(frozen=True)
class ForgeConfig:
    """What a repository's generation depends on: its seed and size."""

    repo_seed: int = 0
    modules: int = 2
    functions_per_module: int = 3


# --- generation -------------------------------------------------------------------------------

def new_function(template: str, key: str, used_names: set[str], rng: random.Random,
                 callee: str | None = None) -> FunctionSpec:
    """A function of ``template`` with an unused name, drawn constants and two test cases."""
    spec = TEMPLATES[template]
    free = [n for n in spec.names if n not in used_names]
    name = rng.choice(free) if free else f"{spec.names[0]}_{key}"
    cases = tuple(dict.fromkeys(spec.draw_args(rng) for _ in range(2)))
    return FunctionSpec(key, name, template, spec.draw_consts(rng), cases, callee)


def generate(config: ForgeConfig) -> RepoSpec:
    """The initial repository of ``config``: an int helper module, a string module (with one
    function calling the helpers) and, for 3 modules, another int module with such a caller."""
    rng = random.Random(f"forge-repo:{config.repo_seed}:{config.modules}:{config.functions_per_module}")
    package = rng.choice(PACKAGES)
    count = config.functions_per_module
    used: set[str] = set()
    keys = iter(f"f{i}" for i in range(1000))

    def build(templates: list[str]) -> tuple[FunctionSpec, ...]:
        out = []
        for template in templates:
            fn = new_function(template, next(keys), used, rng)
            used.add(fn.name)
            out.append(fn)
        return tuple(out)

    int_pool = list(INT_TEMPLATES)
    rng.shuffle(int_pool)
    helpers = build([int_pool.pop() for _ in range(count)])
    modules = [ModuleSpec(rng.choice(INT_MODULES), helpers)]
    strings = list(build(rng.sample(STR_TEMPLATES, count - 1)))
    strings.append(_compose(rng, "of_length", helpers, next(keys), used))
    modules.append(ModuleSpec(rng.choice(STR_MODULES), tuple(strings)))
    if config.modules >= 3:
        ints = list(build([int_pool.pop() for _ in range(count - 1)]))
        ints.append(_compose(rng, rng.choice(("then_add", "then_scale")), helpers, next(keys), used))
        modules.append(ModuleSpec(rng.choice(MIXED_MODULES), tuple(ints)))
    return RepoSpec(package, tuple(modules))


def _compose(rng: random.Random, template: str, helpers: tuple[FunctionSpec, ...], key: str,
             used: set[str]) -> FunctionSpec:
    arity = TEMPLATES[template].callee_arity
    callees = [fn for fn in helpers if fn.arity == arity]
    if not callees:
        template, arity = ("then_add", 1) if template == "then_scale" else ("then_scale", 2)
        callees = [fn for fn in helpers if fn.arity == arity]
    fn = new_function(template, key, used, rng, callee=rng.choice(callees).key)
    used.add(fn.name)
    return fn


# --- rendering --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rendered:
    """A repository's files and where each function body line is.

    ``files``: path -> text; ``body_lines``: (path, 1-based line, module, function key) of every
    line of code inside a function (docstrings excluded): the lines a bug may be injected into.
    """

    files: Mapping[str, str]
    body_lines: tuple[tuple[str, int, str, str], ...]


def call_expression(spec: RepoSpec, module: str, key: str) -> str:
    """How code in ``module`` names the function ``key``: bare in its own module, else ``mod.name``."""
    owner, fn = spec.function(key)
    return fn.name if owner.name == module else f"{owner.name}.{fn.name}"


def render_function(spec: RepoSpec, module: str, fn: FunctionSpec) -> list[str]:
    template = TEMPLATES[fn.template]
    values = dict(fn.consts)
    code_values = {**values, **dict(fn.promoted)}
    callee = spec.function(fn.callee)[1].name if fn.callee else ""
    call = call_expression(spec, module, fn.callee) if fn.callee else ""
    params = list(template.params) + [f"{name}={values[ph]}" for ph, name in fn.promoted]
    lines = [f"def {fn.name}({', '.join(params)}):",
             f'    """{template.doc.format(**values, callee=callee)}"""']
    lines += [f"    {line.format(**code_values, call=call)}" for line in template.body]
    return lines


def render_module(spec: RepoSpec, module: ModuleSpec) -> tuple[str, list[tuple[int, str]]]:
    """The module's source and its body lines as (1-based line, function key)."""
    imported = sorted({spec.function(fn.callee)[0].name for fn in module.functions if fn.callee}
                      - {module.name})
    lines = [f"from {spec.package} import {name}" for name in imported]
    body: list[tuple[int, str]] = []
    for fn in module.functions:
        if lines:
            lines.append("")
        fn_lines = render_function(spec, module.name, fn)
        start = len(lines) + 1
        body += [(start + i, fn.key) for i in range(2, len(fn_lines))]
        lines += fn_lines
    return "\n".join(lines) + "\n", body


def render_test(spec: RepoSpec, module: ModuleSpec, loaded: LoadedPackage) -> str:
    lines = [f"from {spec.package} import {module.name}"]
    for fn in module.functions:
        lines += ["", f"def test_{fn.name}():"]
        for case in fn.cases:
            call = f"{module.name}.{fn.name}({case})"
            lines.append(f"    assert {call} == {loaded.evaluate(call)!r}")
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=256)
def render(spec: RepoSpec) -> Rendered:
    """The repository's files (package, modules, tests), with expected values computed in process."""
    files = {f"{spec.package}/__init__.py": f'"""{spec.package}: small helpers."""\n'}
    body_lines: list[tuple[str, int, str, str]] = []
    for module in spec.modules:
        path = spec.module_path(module.name)
        files[path], lines = render_module(spec, module)
        body_lines += [(path, line, module.name, key) for line, key in lines]
    loaded = load_package(files, spec.package)
    for module in spec.modules:
        files[f"tests/test_{module.name}.py"] = render_test(spec, module, loaded)
    return Rendered(dict(sorted(files.items())), tuple(body_lines))


# --- running the forge's own code in process --------------------------------------------------

@dataclass(frozen=True)
class LoadedPackage:
    """A package's modules executed in process: ``modules`` (name -> module, the package itself
    under its own name) and the ``builtins`` namespace whose ``__import__`` resolves
    ``from <package> import <module>`` to these objects (nothing enters ``sys.modules``)."""

    modules: Mapping[str, types.ModuleType]
    builtins: Mapping[str, Any]

    def evaluate(self, expression: str) -> Any:
        """The value of an expression over the modules (e.g. ``"ops.scale(3, 4)"``)."""
        return eval(expression, {"__builtins__": self.builtins, **self.modules})

    def outcome(self, expression: str) -> tuple[str, Any]:
        """``("value", v)`` or ``("raises", exception class name)``."""
        try:
            return "value", self.evaluate(expression)
        except Exception as exc:  # noqa: BLE001 - a bug may raise anything; that is the outcome
            return "raises", type(exc).__name__

    def execute(self, source: str, path: str) -> dict[str, Any]:
        namespace: dict[str, Any] = {"__builtins__": self.builtins, "__name__": path}
        exec(compiled(source, path), namespace)  # noqa: S102 - the forge's own code
        return namespace


@lru_cache(maxsize=8192)
def compiled(source: str, path: str) -> types.CodeType:
    """``compile(source, path, "exec")``, remembered: the instances of one head load the same
    modules and tests again and again (compiling was 40% of building an instance)."""
    return compile(source, path, "exec")


def load_package(files: Mapping[str, str], package: str) -> LoadedPackage:
    """Execute the package's modules from ``files`` in fresh module objects. Only for the forge's
    own code (never a model's): a module that fails to execute raises."""
    package_module = types.ModuleType(package)
    package_module.__path__ = []
    modules: dict[str, types.ModuleType] = {package: package_module}
    namespace = dict(vars(builtins))

    def load(name: str) -> types.ModuleType:
        if name in modules:
            return modules[name]
        path = f"{package}/{name}.py"
        if path not in files:
            raise ImportError(f"no module {package}.{name}")
        module = types.ModuleType(f"{package}.{name}")
        module.__dict__["__builtins__"] = namespace
        modules[name] = module
        setattr(package_module, name, module)
        exec(compiled(files[path], path), module.__dict__)  # noqa: S102 - the forge's own code
        return module

    def importer(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0):
        if name != package and not name.startswith(package + "."):
            return builtins.__import__(name, globals, locals, fromlist, level)
        parts = name.split(".")[1:]
        for part in parts:
            load(part)
        for item in fromlist or ():
            if not parts and f"{package}/{item}.py" in files:
                load(item)
        return modules[parts[-1]] if parts and fromlist else package_module

    namespace["__import__"] = importer
    for path in files:
        if path.startswith(package + "/") and path.endswith(".py") and path.count("/") == 1:
            name = path[len(package) + 1: -3]
            if name != "__init__":
                load(name)
    return LoadedPackage(modules, namespace)


def test_names(text: str) -> list[str]:
    """The top-level ``test_*`` functions of a test file, in order."""
    return [line[4:].split("(")[0] for line in text.splitlines() if line.startswith("def test")]


def run_tests_in_process(files: Mapping[str, str], package: str) -> dict[str, bool]:
    """Pytest node id -> passed, for every ``test_*`` function of ``tests/test_*.py``, run in
    process on the forge's own code (when the package fails to load, every test fails)."""
    results: dict[str, bool] = {}
    try:
        loaded: LoadedPackage | None = load_package(files, package)
    except Exception:  # noqa: BLE001
        loaded = None
    for path, text in files.items():
        if not (path.startswith("tests/test_") and path.endswith(".py")):
            continue
        names = test_names(text)
        try:
            if loaded is None:
                raise ImportError(package)
            namespace = loaded.execute(text, path)
        except Exception:  # noqa: BLE001
            results.update({f"{path}::{name}": False for name in names})
            continue
        for name in names:
            try:
                namespace[name]()
                results[f"{path}::{name}"] = True
            except Exception:  # noqa: BLE001
                results[f"{path}::{name}"] = False
    return results


# --- git ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Commit:
    """One commit of a repository's history: its full tree, message, date and (computed) SHA."""

    files: Mapping[str, str]
    message: str
    timestamp: int
    sha: str
    parent: str | None


def _object(kind: bytes, body: bytes) -> bytes:
    return hashlib.sha1(kind + b" " + str(len(body)).encode() + b"\0" + body).digest()


def tree_sha(files: Mapping[str, str]) -> str:
    """Git's tree id of ``files`` (all regular, non-executable files)."""
    return _tree(files).hex()


def _tree(files: Mapping[str, str]) -> bytes:
    entries: dict[str, tuple[bytes, bytes]] = {}
    subtrees: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        head, _, rest = path.partition("/")
        if rest:
            subtrees.setdefault(head, {})[rest] = text
        else:
            entries[head] = (b"100644", _object(b"blob", text.encode()))
    for name, sub in subtrees.items():
        entries[name + "/"] = (b"40000", _tree(sub))
    body = b"".join(mode + b" " + name.rstrip("/").encode() + b"\0" + sha
                    for name, (mode, sha) in sorted(entries.items(), key=lambda kv: kv[0].encode()))
    return _object(b"tree", body)


def commit_sha(files: Mapping[str, str], message: str, timestamp: int, parent: str | None) -> str:
    """Git's commit id of a commit of ``files`` by ``AUTHOR`` at ``timestamp`` (UTC) on ``parent``."""
    who = f"{AUTHOR[0]} <{AUTHOR[1]}> {timestamp} +0000"
    lines = [f"tree {tree_sha(files)}"] + ([f"parent {parent}"] if parent else [])
    lines += [f"author {who}", f"committer {who}", "", message]
    return _object(b"commit", ("\n".join(lines) + "\n").encode()).hex()


def make_commit(files: Mapping[str, str], message: str, timestamp: int, parent: str | None) -> Commit:
    return Commit(dict(files), message, timestamp, commit_sha(files, message, timestamp, parent), parent)


def _git_env(timestamp: int) -> dict[str, str]:
    date = f"{timestamp} +0000"
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": tempfile.gettempdir(),
            "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "LANG": "C",
            "GIT_AUTHOR_NAME": AUTHOR[0], "GIT_AUTHOR_EMAIL": AUTHOR[1], "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_NAME": AUTHOR[0], "GIT_COMMITTER_EMAIL": AUTHOR[1], "GIT_COMMITTER_DATE": date}


def _git(folder: Path, *args: str, timestamp: int = EPOCH) -> str:
    done = subprocess.run(["git", "-c", "commit.gpgsign=false", "-c", "core.autocrlf=false", *args],
                          cwd=folder, env=_git_env(timestamp), capture_output=True, text=True, check=True)
    return done.stdout.strip()


def write_files(folder: Path, files: Mapping[str, str]) -> None:
    """Make ``folder``'s files (outside ``.git``) exactly ``files``."""
    for path in list_files(folder):
        if path not in files:
            (folder / path).unlink()
    for path, text in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def list_files(folder: Path) -> list[str]:
    """Relative paths of the regular files under ``folder``, ``.git`` excluded."""
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            full = Path(root) / name
            if full.is_file() and not full.is_symlink():
                out.append(full.relative_to(folder).as_posix())
    return sorted(out)


def commit_all(folder: Path, commit: Commit) -> str:
    """Write ``commit``'s tree into the git repository ``folder``, commit it, return the new SHA."""
    write_files(folder, commit.files)
    _git(folder, "add", "-A")
    _git(folder, "commit", "-q", "--no-verify", "--allow-empty", "-m", commit.message, timestamp=commit.timestamp)
    return _git(folder, "rev-parse", "HEAD")


def cache_root() -> Path:
    """Where materialized repositories are cached (one folder per repository and head)."""
    return Path(tempfile.gettempdir()) / f"sao-forge-{os.getuid()}"


def materialize_history(commits: tuple[Commit, ...], key: str) -> Path:
    """The git repository with ``commits`` as its history, built once and cached under ``key``.

    Raises RuntimeError when git's SHAs differ from the computed ones (then the forge's
    ``base_commit`` would be wrong).
    """
    target = cache_root() / key
    if (target / ".git").is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=target.parent))
    try:
        _git(building, "-c", "init.defaultBranch=main", "init", "-q")
        for commit in commits:
            sha = commit_all(building, commit)
            if sha != commit.sha:
                raise RuntimeError(f"git made commit {sha} where the forge computed {commit.sha}")
        try:
            building.rename(target)
        except OSError:  # another process built it first
            shutil.rmtree(building, ignore_errors=True)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise
    return target
