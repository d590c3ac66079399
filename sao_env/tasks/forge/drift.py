"""Codebase drift: a repository evolves by commits, and tasks are cut from its current head.

Head k is the repository after k drift commits, a deterministic function of the forge
configuration (the commits of head k+1 extend those of head k). Drift commit kinds:

- ``rename_function``: a function gets a new name; its callers and its test follow.
- ``change_signature``: a constant of a function becomes a keyword parameter with the constant as
  default; the test gains a case that passes the parameter.
- ``add_module``: a new module with two functions and its test file.
- ``rename_module``: a new convention for the helper module (``ops.py`` -> ``core.py``): the
  module and its test file move, and every module that imports it is updated.

Commits come in blocks of four, one of each kind, shuffled per block (the first block starts with
a rename, so head 1 always renames a function); a kind that does not apply (no constant left to
promote) falls back to a rename. The repository's own tests pass at every head.
"""

from __future__ import annotations

import random
from dataclasses import replace
from functools import lru_cache

from sao_env.tasks.forge.repo import (
    EPOCH,
    HELPER_MODULES,
    INT_MODULES,
    MIXED_MODULES,
    STR_MODULES,
    Commit,
    ForgeConfig,
    ModuleSpec,
    RepoSpec,
    generate,
    make_commit,
    new_function,
    render,
)
from sao_env.tasks.forge.templates import INT_TEMPLATES, STR_TEMPLATES, TEMPLATES

DRIFT_KINDS = ("rename_function", "change_signature", "add_module", "rename_module")
DAY = 86400


@lru_cache(maxsize=128)
def history(config: ForgeConfig, head: int) -> tuple[tuple[RepoSpec, Commit], ...]:
    """The repository's commits up to ``head``: (spec, commit) for the initial commit and each drift commit."""
    if head < 0:
        raise ValueError(f"head must be >= 0, got {head}")
    if head == 0:
        spec = generate(config)
        return ((spec, make_commit(render(spec).files, f"Initial commit of {spec.package}", EPOCH, None)),)
    earlier = history(config, head - 1)
    spec, message = drift_step(earlier[-1][0], config.repo_seed, head)
    commit = make_commit(render(spec).files, message, EPOCH + head * DAY, earlier[-1][1].sha)
    return earlier + ((spec, commit),)


def spec_at(config: ForgeConfig, head: int) -> RepoSpec:
    return history(config, head)[-1][0]


def drift_kind(repo_seed: int, index: int) -> str:
    """The kind of drift commit number ``index`` (1-based)."""
    block = (index - 1) // len(DRIFT_KINDS)
    rng = random.Random(f"forge-drift-order:{repo_seed}:{block}")
    if block == 0:
        rest = list(DRIFT_KINDS[1:])
        rng.shuffle(rest)
        order = ["rename_function"] + rest
    else:
        order = list(DRIFT_KINDS)
        rng.shuffle(order)
    return order[(index - 1) % len(DRIFT_KINDS)]


def drift_step(spec: RepoSpec, repo_seed: int, index: int) -> tuple[RepoSpec, str]:
    """Apply drift commit number ``index``: the new spec and the commit message."""
    rng = random.Random(f"forge-drift:{repo_seed}:{index}")
    kind = drift_kind(repo_seed, index)
    changed = _KINDS[kind](spec, rng, index)
    return changed if changed is not None else rename_function(spec, rng, index)


def rename_function(spec: RepoSpec, rng: random.Random, index: int) -> tuple[RepoSpec, str]:
    module = rng.choice(spec.modules)
    fn = rng.choice(module.functions)
    free = [n for n in TEMPLATES[fn.template].names if n not in spec.names()]
    new_name = rng.choice(free) if free else f"{fn.name}_v{index}"
    return (spec.replace_function(fn.key, replace(fn, name=new_name)),
            f"Rename {module.name}.{fn.name} to {module.name}.{new_name}")


def change_signature(spec: RepoSpec, rng: random.Random, index: int) -> tuple[RepoSpec, str] | None:
    candidates = [(m, f) for m in spec.modules for f in m.functions
                  if TEMPLATES[f.template].promotable and not f.promoted]
    if not candidates:
        return None
    module, fn = rng.choice(candidates)
    template = TEMPLATES[fn.template]
    placeholder, parameter = template.promotable, template.promoted_name
    current = dict(fn.consts)[placeholder]
    other = rng.choice([v for v in dict(template.consts)[placeholder] if v != current])
    case = f"{template.draw_args(rng)}, {parameter}={other}"
    changed = replace(fn, promoted=((placeholder, parameter),), cases=fn.cases + (case,))
    return (spec.replace_function(fn.key, changed),
            f"Add parameter {parameter} (default {current}) to {module.name}.{fn.name}")


def add_module(spec: RepoSpec, rng: random.Random, index: int) -> tuple[RepoSpec, str] | None:
    used_modules = {m.name for m in spec.modules}
    free_modules = [n for n in MIXED_MODULES + INT_MODULES + STR_MODULES if n not in used_modules]
    name = rng.choice(free_modules) if free_modules else f"mod{index}"
    unused = [t for t in INT_TEMPLATES + STR_TEMPLATES if t not in spec.templates()]
    pool = unused if len(unused) >= 2 else list(INT_TEMPLATES + STR_TEMPLATES)
    next_key = 1 + max(int(f.key[1:]) for m in spec.modules for f in m.functions)
    used = spec.names()
    functions = []
    for offset, template in enumerate(rng.sample(pool, 2)):
        fn = new_function(template, f"f{next_key + offset}", used, rng)
        used.add(fn.name)
        functions.append(fn)
    return (replace(spec, modules=spec.modules + (ModuleSpec(name, tuple(functions)),)),
            f"Add module {spec.package}/{name}.py")


def rename_module(spec: RepoSpec, rng: random.Random, index: int) -> tuple[RepoSpec, str] | None:
    helper = spec.modules[0]
    used_modules = {m.name for m in spec.modules}
    free = [n for n in HELPER_MODULES if n not in used_modules]
    if not free:
        return None
    new_name = rng.choice(free)
    modules = (replace(helper, name=new_name),) + spec.modules[1:]
    return (replace(spec, modules=modules),
            f"Move {spec.package}/{helper.name}.py to {spec.package}/{new_name}.py")


_KINDS = {"rename_function": rename_function, "change_signature": change_signature,
          "add_module": add_module, "rename_module": rename_module}
