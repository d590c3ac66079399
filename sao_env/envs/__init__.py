"""Gymnasium environments, registered under the ``sao`` namespace when ``sao_env`` is imported.

Each registered id is a scenario's drifting task stream (``ScenarioEnv``); the task environments
that play one task (single-turn text, the Python tool, repositories, SWE-bench) are in
``sao_env.envs.base.TASK_ENVS``.
"""

from __future__ import annotations

import gymnasium as gym

ENV_IDS: dict[str, str] = {
    "sao/StyleDrift-v0": "style-drift",
    "sao/TopicDrift-v0": "topic-drift",
    "sao/ToolDrift-v0": "tool-drift",
    "sao/BenchmarkStream-v0": "benchmark-stream",
    "sao/CodebaseDrift-v0": "codebase-drift",
    "sao/SWEBenchVerified-v0": "swebench-verified",
    "sao/ChatStyleDrift-v0": "chat-style-drift",
    "sao/ChatToolDrift-v0": "chat-tool-drift",
}
"""Registered id -> scenario spec name (envs/<name>.yaml)."""


def register_envs() -> None:
    for env_id, scenario in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="sao_env.envs.text_env:ScenarioEnv",
                         kwargs={"scenario": scenario}, disable_env_checker=False)
