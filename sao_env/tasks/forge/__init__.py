"""The repository forge: generated Python packages with injected bugs, as SWE-bench instances.

Modules: ``templates`` (the function kinds), ``repo`` (repository specs, rendering, in-process
test runs, git SHAs and materialization), ``drift`` (the commits that evolve a repository),
``bugs`` (SWE-smith-style mutations), ``instances`` (an instance in SWE-bench's schema),
``grading`` (the sandboxed verdict) and ``source`` (``ForgeSource``, whose demonstrations speak
``sao_env.tasks.coding_tools``, the command language ``RepoEnv`` answers). See docs/coding.md.
"""

from __future__ import annotations

from sao_env.tasks.forge.bugs import BUG_KINDS
from sao_env.tasks.forge.drift import DRIFT_KINDS
from sao_env.tasks.forge.instances import ForgeInstance, build_instance, materialize
from sao_env.tasks.forge.repo import ForgeConfig
from sao_env.tasks.forge.source import ForgeParams, ForgeSource

__all__ = ["BUG_KINDS", "DRIFT_KINDS", "ForgeConfig", "ForgeInstance", "ForgeParams", "ForgeSource",
           "build_instance", "materialize"]
