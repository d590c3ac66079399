"""sao-env: drifting environments and a benchmark harness for asynchronous, agentic RL of LMs."""

from sao_env.envs import register_envs

__version__ = "0.1.0"

register_envs()
