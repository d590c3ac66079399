"""Gymnasium environments, registered under the ``sao`` namespace when ``sao_env`` is imported."""

from __future__ import annotations

import gymnasium as gym

ENV_IDS: dict[str, str] = {"sao/StyleDrift-v0": "style-drift"}
"""Registered id -> scenario spec name (envs/<name>.yaml)."""


def register_envs() -> None:
    for env_id, scenario in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="sao_env.envs.text_env:ScenarioTextEnv",
                         kwargs={"scenario": scenario}, disable_env_checker=False)
