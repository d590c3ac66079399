"""sao-env: drifting environments and a benchmark harness for asynchronous, agentic RL of LMs."""

from sao_env.numerics import pin as _pin_numerics

_pin_numerics()  # before torch is loaded: sao_env/numerics.py

from sao_env.envs import register_envs  # noqa: E402

__version__ = "0.1.0"

register_envs()
