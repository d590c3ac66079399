"""Find and load the YAML specs (envs/, agents/, evals/) by name or path.

Spec folders sit at the repository root; a wheel ships them inside the package as
``sao_env/_specs/<kind>/``, so a non-editable install finds them too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from sao_env.errors import UserError, did_you_mean

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
    raise UserError(f"unknown {kind[:-1]} {name_or_path!r}{did_you_mean(name_or_path, available(kind))}; known: {known}")


MAX_SPEC_BYTES = 1 << 20
"""The largest spec file read (1 MiB; the largest committed spec, a grid, is 5 KB): a larger one is
refused in one line before it is parsed, since a YAML parser's memory grows with the document (a 50 MB
file of lists took over 16 GB and ten minutes)."""

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML was built with it (ten times faster), else the pure-Python one."""


def read_spec_text(path: Path, what: str = "spec") -> str:
    """The text of the spec file ``path``, read at most ``MAX_SPEC_BYTES`` (so a pipe or a device ends too);
    a larger, unreadable or non-UTF-8 file is a UserError in one line."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise UserError(f"{path}: cannot read the {what} ({err.strerror or err})") from None
    if len(data) > MAX_SPEC_BYTES:
        raise UserError(f"{path}: the {what} file is larger than {MAX_SPEC_BYTES >> 20} MiB; refused")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path}: the {what} file is not UTF-8 (byte {err.start})") from None


def parse_yaml(text: str) -> Any:
    """``yaml.safe_load`` with libyaml's loader where it is available."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506  (a safe loader)


def path_safe_name(name: str) -> str:
    """``name`` as one path component: ``/`` (and the platform's other separator), and NUL become ``_``;
    ``.``, ``..`` or nothing become underscores. Scenario and recipe names name run directories and board
    files, so a name such as ``../../x`` must not lead out of the output folder (it becomes ``.._.._x``)."""
    safe = name.replace("/", "_").replace("\0", "_")
    if os.altsep or os.sep != "/":
        safe = safe.replace(os.sep, "_").replace(os.altsep or os.sep, "_")
    return "_" * max(len(safe), 1) if safe.strip(".") == "" else safe


def load_yaml(path: Path) -> dict[str, Any]:
    try:
        data = parse_yaml(read_spec_text(path))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(f"invalid YAML in {path}{where}: {problem}") from None
    if not isinstance(data, dict):
        raise UserError(f"invalid spec {path}: expected a mapping at the top level")
    return data
