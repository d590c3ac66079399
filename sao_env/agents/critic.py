"""The value model of SAO (arXiv 2607.07508): the policy's backbone with a scalar head, attention frozen.

Initialised from the policy (a deep copy of its backbone), the head zero-initialised so that the
first values are 0; every attention module is frozen (matched by module name), so the critic
adapts only its MLPs, norms, embeddings and head (``freeze_attention=False``, an ablation, trains
every weight). Its update is a separate step with its own
optimizer and metrics, so that at scale it can run in its own worker.
"""

from __future__ import annotations

import copy
import re

import torch
from torch import nn
from transformers import PreTrainedModel

from sao_env.agents.base import Batch, MicroBatch, accumulated_step, guarded_step, nonfinite_streak
from sao_env.algos import gae, value_loss
from sao_env.policy.lean import enable_checkpointing, lean_decoder
from sao_env.policy.placement import autocast, model_device, precision_of, set_precision


class ValueModel(nn.Module):
    """``values[b, t]`` = V(state just before token t), read from the hidden state at t-1; 0 at t=0."""

    def __init__(self, policy: PreTrainedModel, *, frozen_pattern: str = r"(^|\.)(self_attn|attn|attention)$",
                 freeze_attention: bool = True):
        super().__init__()
        self.backbone = copy.deepcopy(getattr(policy, policy.base_model_prefix))
        hidden = policy.config.hidden_size
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        device = model_device(self.backbone)
        if device.type != "cpu":  # the policy's device (``agent.model.device``) and its precision
            self.head.to(device)
        set_precision(self, precision_of(policy))
        self.frozen_modules: list[str] = []
        if not freeze_attention:
            return
        pattern = re.compile(frozen_pattern)
        frozen = [name for name, _ in self.backbone.named_modules() if pattern.search(name)]
        if not frozen:
            raise ValueError(f"no attention module of the critic's backbone matches {frozen_pattern!r}; "
                             f"set critic_frozen_pattern for this architecture")
        for name in frozen:
            for p in self.backbone.get_submodule(name).parameters():
                p.requires_grad_(False)
        self.frozen_modules = frozen

    def forward(self, tokens_BT: torch.Tensor, attention_BT: torch.Tensor) -> torch.Tensor:
        lean = lean_decoder(self.backbone)
        with autocast(self):
            if lean is not None:  # right padding: a causal pass gives every real token the same state
                hidden = lean.hidden(tokens_BT[:, :-1])  # (B, T-1, H)
            else:
                hidden = self.backbone(input_ids=tokens_BT, attention_mask=attention_BT).last_hidden_state[:, :-1]
        v = self.head(hidden.float()).squeeze(-1)  # (B, T-1), the head in float32
        return torch.cat([torch.zeros_like(v[:, :1]), v], dim=1)  # (B, T)


class Critic:
    """A ValueModel with its own Adam optimizer; ``step`` is one regression step on fixed returns."""

    def __init__(self, policy: PreTrainedModel, *, lr: float, grad_clip: float | None, agg: str,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-5, frozen_pattern: str | None = None,
                 freeze_attention: bool = True, gradient_checkpointing: bool = False, fused_adam: bool = False):
        kwargs = {"frozen_pattern": frozen_pattern} if frozen_pattern else {}
        self.model = ValueModel(policy, freeze_attention=freeze_attention, **kwargs).eval()  # no dropout, as for the policy
        if gradient_checkpointing:
            enable_checkpointing(self.model.backbone)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=lr, betas=betas, eps=eps, **({"fused": True} if fused_adam else {}))
        self.grad_clip, self.agg, self.lr = grad_clip, agg, lr
        self.skipped = 0
        self.nonfinite = 0
        """Steps in a row skipped for a non-finite loss or gradient (``nonfinite_streak``)."""

    @classmethod
    def for_agent(cls, policy: PreTrainedModel, config) -> "Critic":
        """Build from a critic agent's config (``SAOConfig`` and its subclasses)."""
        return cls(policy, lr=config.critic_lr, grad_clip=config.grad_clip, agg=config.agg,
                   betas=config.adam_betas, eps=config.adam_eps, frozen_pattern=config.critic_frozen_pattern,
                   freeze_attention=config.critic_freeze_attention,
                   gradient_checkpointing=config.gradient_checkpointing, fused_adam=config.fused_adam)

    @torch.no_grad()
    def values(self, batch: Batch) -> torch.Tensor:
        return self.model(batch.tokens_BT, batch.attention_BT)

    def fit(self, batch: Batch, *, steps: int, gamma: float = 1.0,
            plan: list[MicroBatch] | None = None) -> tuple[dict[str, float], torch.Tensor]:
        """SAO's critic update: targets from the pre-update values with lambda=1, then ``steps`` steps.

        R = GAE(r, V_old; gamma, lambda=1) + V_old, i.e. the discounted reward-to-go. Returns the last
        step's metrics and V_old. V_old is the first step's own forward pass, detached: the weights are
        those before the update and a forward pass with autograd gives the bits of one without it
        (``tests/test_critic.py``), so the separate no-grad pass is not needed. With a micro-batch ``plan``
        (the actor's, ``Agent.plan``) every step accumulates over it (``_fit_micro``).
        """
        if plan is not None:
            return self._fit_micro(batch, steps=steps, gamma=gamma, plan=plan)
        values = self.model(batch.tokens_BT, batch.attention_BT)
        old = values.detach()
        _, returns = gae(batch.rewards_BT, old, batch.mask_BT, gamma=gamma, lam=1.0)
        for k in range(steps):
            metrics = self.step(batch, returns, values=values if k == 0 else None)
        return metrics, old

    def _fit_micro(self, batch: Batch, *, steps: int, gamma: float,
                   plan: list[MicroBatch]) -> tuple[dict[str, float], torch.Tensor]:
        """``fit`` over micro-batches. GAE runs along each row alone, so a micro-batch's targets come from its
        own first pass (V_old of its rows, detached) as the whole batch's would; each step's loss is the value
        loss of a [B, T] tensor holding the micro-batch's values (with gradient) and constants elsewhere, whose
        gradient for those rows is the whole-batch loss's (as in ``Agent._actor_step_micro``)."""
        old = torch.zeros_like(batch.rewards_BT)
        returns = torch.zeros_like(batch.rewards_BT)

        def first(mb: MicroBatch):
            def make() -> torch.Tensor:
                values = self.model(mb.take(batch.tokens_BT), mb.take(batch.attention_BT))
                old[mb.rows, : mb.width] = values.detach()
                _, part = gae(mb.take(batch.rewards_BT), values.detach(), mb.take(batch.mask_BT), gamma=gamma, lam=1.0)
                returns[mb.rows, : mb.width] = part
                return value_loss(mb.embed(old, values), returns, batch.mask_BT, agg=self.agg)[0]
            return make

        metrics = self._micro_step([first(mb) for mb in plan], old, returns, batch)
        for _ in range(steps - 1):
            metrics = self.step(batch, returns, plan=plan)
        return metrics, old

    def _micro_step(self, losses: list, values: torch.Tensor, returns_BT: torch.Tensor, batch: Batch) -> dict[str, float]:
        """One accumulated critic step; metrics of the whole batch from ``values`` (filled by the passes)."""
        grad_norm, skipped = accumulated_step(losses, self.params, self.optimizer, self.grad_clip)
        with torch.no_grad():
            _, metrics = value_loss(values, returns_BT, batch.mask_BT, agg=self.agg)
        return self._after_step(metrics, grad_norm, skipped)

    def step(self, batch: Batch, returns_BT: torch.Tensor, *, values: torch.Tensor | None = None,
             plan: list[MicroBatch] | None = None) -> dict[str, float]:
        """One regression step towards ``returns_BT``; ``values`` is this step's forward pass when the
        caller has made it (with autograd, on the current weights)."""
        if plan is not None:
            current = torch.zeros_like(returns_BT)

            def micro(mb: MicroBatch):
                def make() -> torch.Tensor:
                    part = self.model(mb.take(batch.tokens_BT), mb.take(batch.attention_BT))
                    current[mb.rows, : mb.width] = part.detach()
                    return value_loss(mb.embed(current, part), returns_BT, batch.mask_BT, agg=self.agg)[0]
                return make

            return self._micro_step([micro(mb) for mb in plan], current, returns_BT, batch)
        if values is None:
            values = self.model(batch.tokens_BT, batch.attention_BT)
        loss, metrics = value_loss(values, returns_BT, batch.mask_BT, agg=self.agg)
        grad_norm, skipped = guarded_step(loss, self.params, self.optimizer, self.grad_clip)
        return self._after_step(metrics, grad_norm, skipped)

    def _after_step(self, metrics: dict[str, float], grad_norm: float, skipped: bool) -> dict[str, float]:
        self.skipped += skipped
        self.nonfinite = nonfinite_streak(self.nonfinite, skipped, model="critic",
                                          setting=f"agent.hparams.critic_lr (now {self.lr:g})")
        out = {f"critic/{k}": v for k, v in metrics.items()}
        out.update({"critic/grad_norm": grad_norm, "critic/skipped_nonfinite": float(self.skipped)})
        return out
