"""Agents: one algorithm per file, registered by the ``algorithm`` name used in agents/*.yaml."""

from __future__ import annotations

from sao_env.agents.base import Agent, AgentConfig
from sao_env.agents.baselines import ReinforceAgent, RunningMeanAgent
from sao_env.agents.grpo import GRPOAgent
from sao_env.agents.prompt_baselines import OracleClassAgent, PerPromptAgent
from sao_env.agents.sao import SAOAgent
from sao_env.agents.vapo import VAPOAgent

ALGORITHMS: dict[str, type[Agent]] = {
    cls.name: cls for cls in (SAOAgent, GRPOAgent, VAPOAgent, RunningMeanAgent, ReinforceAgent, PerPromptAgent,
                              OracleClassAgent)
}

__all__ = ["ALGORITHMS", "Agent", "AgentConfig"]
