"""The package's layers depend one way: task sources never import environments (envs build on tasks)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import sao_env

TASKS = Path(sao_env.__file__).parent / "tasks"


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at top level or inside functions (relative imports resolved)."""
    package = ".".join(path.relative_to(TASKS.parent.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


def test_no_task_module_imports_an_environment():
    offenders = {str(path.relative_to(TASKS)): sorted(m for m in imported_modules(path) if m.startswith("sao_env.envs"))
                 for path in sorted(TASKS.rglob("*.py"))}
    assert len(offenders) > 10  # the walk found the task modules
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_tool_demonstrations_run_without_loading_the_environments():
    """``import sao_env`` loads only the registry ``sao_env.envs``; no environment module."""
    code = ("import sys, numpy as np\n"
            "from sao_env.tasks import build_source\n"
            "source = build_source('tool_arithmetic', {'api': 'v2', 'retry_share': 1.0})\n"
            "task = source.sample(np.random.default_rng(0), phase='p', created_at=0.0, index=0)\n"
            "turns = source.demonstrate(task, np.random.default_rng(0))\n"
            "assert 'Error' in turns[0].observation, turns\n"
            "print(sorted(m for m in sys.modules if m.startswith('sao_env.envs.')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
