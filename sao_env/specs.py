"""Find and load the YAML specs (envs/, agents/, evals/) by name or path.

Spec folders sit at the repository root; a wheel ships them inside the package as
``sao_env/_specs/<kind>/``, so a non-editable install finds them too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sao_env.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parent
SPEC_KINDS = ("envs", "agents", "evals")


def spec_dirs(kind: str) -> list[Path]:
    """Folders searched for ``kind`` specs, in order: the checkout's, then the installed package's."""
    return [d for d in (PACKAGE_DIR.parent / kind, PACKAGE_DIR / "_specs" / kind) if d.is_dir()]


def available(kind: str) -> list[str]:
    names: set[str] = set()
    for d in spec_dirs(kind):
        names.update(p.stem for p in d.glob("*.yaml"))
    return sorted(names)


def find_spec(kind: str, name_or_path: str) -> Path:
    """Resolve ``style-drift`` to ``envs/style-drift.yaml``; a path to a YAML file is used as is."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise UserError(f"{kind[:-1]} file not found: {name_or_path}")
        return path
    for d in spec_dirs(kind):
        candidate = d / f"{name_or_path}.yaml"
        if candidate.is_file():
            return candidate
    known = ", ".join(available(kind)) or "none"
    raise UserError(f"unknown {kind[:-1]} {name_or_path!r}; known: {known}")


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"invalid YAML in {path}{where}: {problem}") from None
    if not isinstance(data, dict):
        raise UserError(f"invalid spec {path}: expected a mapping at the top level")
    return data
