"""Wave 6, the fifth by-hand round (bench/mutants.py --planted, 30 slips planted by a helper who read only the
wave's diff): one test per survivor. Each names its change, fails with it and passes without it, and asserts values
worked out here."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


def test_an_adam_beta_of_one_is_refused():
    """Changed: ``0 <= b < 1`` -> ``0 <= b <= 1`` in ``AgentConfig``'s betas check: beta 1 never forgets, and
    Adam's bias correction divides by 1 - beta^t = 0."""
    from sao_env.agents.configs import AgentConfig

    assert AgentConfig(adam_betas=(0.0, 0.999)).adam_betas == (0.0, 0.999)
    for betas in ((0.9, 1.0), (1.0, 0.999)):
        with pytest.raises(ValueError, match=r"Adam's betas must lie in \[0, 1\)"):
            AgentConfig(adam_betas=betas)


def test_the_value_at_the_prompt_ignores_lambda():
    """Changed: ``lam=1.0`` -> ``lam=cfg.lam`` in ``SAOAgent.advantages`` (value_at: prompt): the return from t is
    the undiscounted reward-to-go whatever lambda the config holds, so A_t = G_t - V(s_0) with G_t = 1 here."""
    from sao_env.agents.base import Batch
    from sao_env.agents.sao import SAOAgent, SAOConfig

    mask = torch.tensor([[0, 1, 1, 1]], dtype=torch.bool)
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    z = torch.zeros(mask.shape)
    batch = Batch(z.long(), mask.long(), mask, z, rewards, torch.tensor([1.0]), torch.zeros(1).long(), mask.sum(-1))
    values = torch.tensor([[9.0, 0.25, 0.5, 0.75]])
    for lam, adaptive in ((0.5, False), (0.95, True)):
        config = SAOConfig(value_at="prompt", lam=lam, adaptive_lambda=adaptive)
        adv = SAOAgent.advantages(SimpleNamespace(config=config), batch, values)
        assert torch.allclose(adv, torch.tensor([[0.0, 0.75, 0.75, 0.75]])), (lam, adaptive)
