"""VAPO and PPO: SAO's critic pipeline with the PPO clip loss instead of DIS.

Per update (episodes as they complete, ``episodes_per_update`` at a time), exactly SAO's steps 1-5
(``sao.py``): V_old before the critic's K steps, critic targets GAE(lambda=1) + V_old, then
  A <- GAE(r, V_old; gamma, lambda)   VAPO (Yue et al. 2025): lambda = 1 - 1/(alpha*l)
                                       PPO  (Schulman et al. 2017): a fixed lambda (agents/ppo.yaml)
and an actor step on the PPO clip loss (clip-higher 0.2/0.28 by default) against the rollout
log-probs. Same critic, same advantages, another loss: VAPO - SAO isolates what DIS adds.

Before SAO and VAPO shared one critic pipeline, VAPO computed its advantages on the values *after* the critic's K steps, so the
comparison changed two things at once; ``advantage_values: after_fit`` keeps that order.
"""

from __future__ import annotations

from sao_env.agents.configs import VAPOConfig
from sao_env.agents.sao import SAOAgent


class VAPOAgent(SAOAgent):
    name = "vapo"
    config_cls = VAPOConfig
    config: VAPOConfig
