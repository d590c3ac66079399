"""Experiments: one run as one object, and the small drivers above it.

The parts, along their seams (docs/architecture.md, "Experiments as instruments"):

* ``config``    what a run is: scenario + recipe + seed, resolved, overridden, validated, expanded
* ``plan``      where a run goes (``runs/<env>/<label>/seed<N>``) and whether a finished one is reused
* ``files``     a run directory's files: atomic writes, flushed JSON-lines logs, the one-writer lock
* ``run``       ``Run``: one run's state and directory, from its first line to ``summary.json``,
                with its resume checkpoints
* ``progress``  a live bar on a terminal, plain lines at a steady interval in a log file
* ``drivers``   one planned run, many runs in worker processes, the warm starts they need

The names below are the package's interface; the commands (``sao_env.cli``), sweeps and grids use
only these. Each is imported from its part when first used.
"""

import importlib

_HOME = {
    **dict.fromkeys(("AgentRecipe", "RunConfig", "apply_override", "build_agent", "build_agent_config", "expand_config",
                     "load_run_config", "resolve_config"), "config"),
    **dict.fromkeys(("MadeElsewhere", "run_many", "run_plan"), "drivers"),
    **dict.fromkeys(("LOGS", "STALE_OUTPUTS", "JsonLines", "RunBusy", "RunLock", "write_atomic", "writing"), "files"),
    **dict.fromkeys(("RunPlan", "plan_run", "resume_point", "reuse_check"), "plan"),
    **dict.fromkeys(("Run", "RunInterrupted", "differing_keys", "run_experiment"), "run"),
}
_PARTS = ("config", "drivers", "files", "plan", "progress", "run")

__all__ = sorted(_HOME)


def __getattr__(name: str):
    """Each name is imported from its part when first used: a process that needs only ``RunLock``
    does not import torch."""
    if name in _PARTS:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOME])
