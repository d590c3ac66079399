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
only these.
"""

from sao_env.experiment.config import (AgentRecipe, RunConfig, apply_override, build_agent, build_agent_config,
                                       expand_config, load_run_config, resolve_config)
from sao_env.experiment.drivers import run_many, run_plan
from sao_env.experiment.files import LOGS, STALE_OUTPUTS, JsonLines, RunBusy, RunLock, write_atomic, writing
from sao_env.experiment.plan import RunPlan, plan_run, resume_point, reuse_check
from sao_env.experiment.run import Run, RunInterrupted, differing_keys, run_experiment

__all__ = ["AgentRecipe", "LOGS", "JsonLines", "Run", "RunBusy", "RunConfig", "RunInterrupted", "RunLock", "RunPlan",
           "STALE_OUTPUTS", "apply_override", "build_agent", "build_agent_config", "differing_keys", "expand_config",
           "load_run_config", "plan_run", "resolve_config", "resume_point", "reuse_check", "run_experiment",
           "run_many", "run_plan", "write_atomic", "writing"]
