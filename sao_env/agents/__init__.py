"""Agents: one algorithm per file, registered by the ``algorithm`` name used in agents/*.yaml.

Their hyper-parameters' models live in ``configs.py``, which needs no torch: importing this package (or
``sao_env.agents.configs``) loads none; ``ALGORITHMS`` and ``Agent`` import the agents when first read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sao_env.agents.configs import CONFIGS, AgentConfig

if TYPE_CHECKING:
    from sao_env.agents.base import Agent

    ALGORITHMS: dict[str, type[Agent]]


def _algorithms() -> dict[str, type]:
    from sao_env.agents.baselines import ReinforceAgent, RunningMeanAgent
    from sao_env.agents.grpo import GRPOAgent
    from sao_env.agents.prompt_baselines import OracleClassAgent, PerPromptAgent
    from sao_env.agents.sao import SAOAgent
    from sao_env.agents.vapo import VAPOAgent

    return {cls.name: cls for cls in (SAOAgent, GRPOAgent, VAPOAgent, RunningMeanAgent, ReinforceAgent, PerPromptAgent,
                                      OracleClassAgent)}


def __getattr__(name: str) -> Any:
    """``ALGORITHMS`` and ``Agent``, imported (with torch) when first asked for."""
    if name == "ALGORITHMS":
        globals()["ALGORITHMS"] = found = _algorithms()
        return found
    if name == "Agent":
        from sao_env.agents.base import Agent

        globals()["Agent"] = Agent
        return Agent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ALGORITHMS", "CONFIGS", "Agent", "AgentConfig"]
