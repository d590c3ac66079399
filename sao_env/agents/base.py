"""What every agent shares: the config base, episode collation, a guarded optimizer step.

An agent is ``update(list[Episode]) -> metrics`` plus its sampling need (``group_size``,
``groups_per_update``); its algorithm lives in one file that reads like the paper's algorithm box
and calls the pure functions of ``sao_env.algos``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar, Iterable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from sao_env.algos import masked_mean
from sao_env.agents.configs import MAX_LR, AgentConfig  # noqa: F401 (defined in configs.py, without torch)
from sao_env.errors import UserError
from sao_env.policy.generate import sequence_logprobs
from sao_env.policy.lean import enable_checkpointing
from sao_env.policy.placement import autocast, model_device
from sao_env.types import Episode


@dataclass(frozen=True)
class Batch:
    """Episodes right-padded into tensors; token-aligned as in ``sao_env.algos``."""

    tokens_BT: torch.Tensor
    attention_BT: torch.Tensor
    mask_BT: torch.Tensor  # action tokens
    rollout_logp_BT: torch.Tensor
    rewards_BT: torch.Tensor  # outcome reward on the last action token
    rewards_B: torch.Tensor
    group_ids_B: torch.Tensor
    num_actions_B: torch.Tensor


def collate(episodes: list[Episode], pad_token_id: int, rewards: list[float] | None = None) -> Batch:
    width = max(len(e.tokens_T) for e in episodes)
    B = len(episodes)
    tokens = torch.full((B, width), pad_token_id, dtype=torch.long)
    attention = torch.zeros((B, width), dtype=torch.long)
    mask = torch.zeros((B, width), dtype=torch.bool)
    rollout_logp = torch.zeros((B, width))
    rewards_BT = torch.zeros((B, width))
    rewards_B = torch.tensor(rewards if rewards is not None else [e.reward for e in episodes], dtype=torch.float32)
    for i, e in enumerate(episodes):
        n = len(e.tokens_T)
        tokens[i, :n] = torch.tensor(e.tokens_T)
        attention[i, :n] = 1
        mask[i, :n] = torch.tensor(e.action_mask_T)
        rollout_logp[i, :n] = torch.tensor(e.rollout_logp_T)
        actions = mask[i].nonzero()
        if len(actions):
            rewards_BT[i, actions[-1, 0]] = rewards_B[i]
    return Batch(tokens, attention, mask, rollout_logp, rewards_BT, rewards_B,
                 torch.tensor([e.group_id for e in episodes]), mask.sum(-1))


def batch_to(batch: Batch, device: torch.device) -> Batch:
    """The batch on ``device`` (the same object where it already is there)."""
    if batch.tokens_BT.device == device:
        return batch
    return Batch(*(getattr(batch, f).to(device, non_blocking=True) for f in batch.__dataclass_fields__))


@dataclass(frozen=True)
class MicroBatch:
    """Rows of a batch trained together, cut to their own longest row (``width``): right padding beyond it
    carries no token of these rows, and a causal pass gives every real token the same value without it."""

    rows: torch.Tensor  # (b,) long, indices into the batch, on the batch's device
    width: int

    def take(self, x: torch.Tensor) -> torch.Tensor:
        """The micro-batch's part of a [B, T] (or [B]) tensor of the batch."""
        x = x[self.rows]
        return x[:, : self.width] if x.dim() > 1 else x

    def embed(self, full: torch.Tensor, part: torch.Tensor) -> torch.Tensor:
        """A copy of the [B, T] tensor ``full`` with the micro-batch's cells replaced by ``part`` (gradients flow
        to ``part`` only: every other row is a constant of the loss)."""
        out = full.clone()
        out[self.rows, : self.width] = part.to(out.dtype)
        return out


def plan_micro_batches(lengths: Sequence[int], budget: int | None, *,
                       device: torch.device | str = "cpu") -> list[MicroBatch] | None:
    """Pack rows of the given lengths into micro-batches of at most ``budget`` padded tokens each.

    Rows are sorted by length, longest first (ties by index), and cut greedily: a micro-batch takes the next
    rows while (rows x its longest row) stays within the budget, so rows of similar length train together and
    the padding is small; a row longer than the budget is a micro-batch of its own. Returns None when the
    whole batch fits (B x longest <= budget) or no budget is set: the batch is then trained in one piece, the
    exact code path of a recipe without micro-batches.
    """
    lengths = [int(n) for n in lengths]
    if budget is None or not lengths or len(lengths) * max(lengths) <= budget:
        return None
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for i in order:
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return [MicroBatch(torch.tensor(g, dtype=torch.long, device=device), lengths[g[0]]) for g in groups]


class RunningMeanStd:
    """Running reward statistics (Welford) for the ``reward_norm`` option."""

    def __init__(self) -> None:
        self.count, self.mean, self.m2 = 0, 0.0, 0.0

    def update(self, values: list[float]) -> None:
        """Fold in the finite values (a non-finite reward must not poison every later update)."""
        for x in filter(math.isfinite, values):
            self.count += 1
            delta = x - self.mean
            self.mean += delta / self.count
            self.m2 += delta * (x - self.mean)

    def normalize(self, values: list[float]) -> list[float]:
        std = math.sqrt(self.m2 / self.count) if self.count > 1 else 1.0
        return [(x - self.mean) / (std + 1e-6) for x in values]


def resolve_band(eps_low: float | None, eps_high: float | None, default: tuple[float, float]) -> tuple[float, float]:
    """A recipe's band widths, each None falling back to the scenario's DIS band."""
    return (default[0] if eps_low is None else eps_low, default[1] if eps_high is None else eps_high)


NONFINITE_LIMIT = 3
"""Optimizer steps of one model in a row (the actor's, or the critic's) skipped for a non-finite loss or
gradient, after which the run stops with ``Diverged``: one such step (a NaN reward) is skipped and the run
goes on; a loss that stays non-finite (an infinite or huge learning rate, a broken grader) would otherwise
train nothing and still produce a board."""


class Diverged(UserError):
    """The learner's loss or gradient stayed non-finite for ``NONFINITE_LIMIT`` steps in a row."""


def nonfinite_streak(streak: int, skipped: bool, *, model: str, setting: str) -> int:
    """The count of consecutive skipped steps after one more step; raises ``Diverged`` at ``NONFINITE_LIMIT``.
    ``setting`` names the learning rate to lower, e.g. ``agent.hparams.lr (now 1e+300)``."""
    streak = streak + 1 if skipped else 0
    if streak >= NONFINITE_LIMIT:
        raise Diverged(f"the {model}'s loss or gradient was non-finite at {streak} optimizer steps in a row: "
                       f"the run diverged and stops without a summary; "
                       f"lower {setting} or check the rewards")
    return streak


def guarded_step(
    loss: torch.Tensor, params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer, grad_clip: float | None
) -> tuple[float, bool]:
    """Backward and step, unless the loss or the gradient is non-finite: then skip, weights untouched.

    Returns (gradient norm before clipping, whether the step was skipped).
    """
    optimizer.zero_grad(set_to_none=True)
    if not torch.isfinite(loss):
        return float("nan"), True
    loss.backward()
    return _clip_and_step(params, optimizer, grad_clip)


def accumulated_step(
    losses: Iterable[Callable[[], torch.Tensor]], params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
    grad_clip: float | None,
) -> tuple[float, bool]:
    """``guarded_step`` over micro-batches: each callable makes one micro-batch's loss, whose gradient is
    accumulated (backward) before the next is made; one clip and one optimizer step at the end. A non-finite
    micro-batch loss or accumulated gradient skips the step, weights untouched."""
    optimizer.zero_grad(set_to_none=True)
    for make_loss in losses:
        loss = make_loss()
        if not torch.isfinite(loss):
            optimizer.zero_grad(set_to_none=True)
            return float("nan"), True
        loss.backward()
    return _clip_and_step(params, optimizer, grad_clip)


def _clip_and_step(params: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer,
                   grad_clip: float | None) -> tuple[float, bool]:
    """The gradient's norm, then clip and step, unless the norm is non-finite (skipped, gradients dropped)."""
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])) if grads else torch.tensor(0.0)
    if not torch.isfinite(norm):
        optimizer.zero_grad(set_to_none=True)
        return float("nan"), True
    if grad_clip is not None:
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
    optimizer.step()
    return norm.item(), False


class Agent:
    """Base of every agent: holds the policy, its optimizer and the actor version counter."""

    name: ClassVar[str]
    config_cls: ClassVar[type[AgentConfig]] = AgentConfig

    def __init__(
        self,
        policy: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        config: AgentConfig,
        *,
        dis_band: tuple[float, float] = (0.3, 5.0),
        action_horizon: int | None = None,
    ):
        self.policy = policy.eval()
        self.action_horizon = action_horizon
        """The most action tokens an episode can have (max_new_tokens x max_turns): the constant
        normaliser of ``seq_mean_token_sum_norm`` (Dr. GRPO), never the batch's padded width."""
        self.tokenizer = tokenizer
        self.config = config
        self.dis_band = dis_band
        self.version = 0
        self.updates = 0
        self.skipped = 0
        self.nonfinite = 0
        """Actor steps in a row skipped for a non-finite loss or gradient (``nonfinite_streak``)."""
        self.reward_stats = RunningMeanStd()
        self.device = model_device(policy)
        """Where the policy lives (``agent.model.device``): batches are moved there, the critic is made there."""
        if config.gradient_checkpointing:
            enable_checkpointing(policy)
        self.actor_params = [p for p in policy.parameters() if p.requires_grad]
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=config.lr, betas=config.adam_betas, eps=config.adam_eps,
                                                **({"fused": True} if config.fused_adam else {}))

    group_size: int = 1
    """Rollouts per prompt the runtime must sample (G); 1 for single-rollout algorithms."""
    groups_per_update: int = 1
    """Groups (of ``group_size`` episodes) the learner consumes per update."""

    @property
    def train_passes(self) -> int:
        """Forward+backward passes over each consumed token per update (sets the simulated update cost)."""
        return 1

    def update(self, episodes: list[Episode]) -> dict[str, float]:
        raise NotImplementedError

    def batch(self, episodes: list[Episode]) -> Batch:
        rewards = [e.reward for e in episodes]
        if self.config.reward_norm:
            self.reward_stats.update(rewards)
            rewards = self.reward_stats.normalize(rewards)
        return batch_to(collate(episodes, self.tokenizer.pad_token_id, rewards), self.device)

    def plan(self, batch: Batch) -> list[MicroBatch] | None:
        """The batch's micro-batches under ``micro_batch_tokens`` (None: one piece), shared by every pass of an
        update over it (the actor's and, in critic agents, the critic's)."""
        return plan_micro_batches(batch.attention_BT.sum(-1).tolist(), self.config.micro_batch_tokens,
                                  device=batch.tokens_BT.device)

    def actor_step(self, batch: Batch, loss_fn, plan: list[MicroBatch] | None = None) -> dict[str, float]:
        """One actor gradient step: ``loss_fn(logp_BT) -> (loss, metrics)``; bumps the version if applied.

        The policy stays in eval mode (no dropout): the learner's log-probabilities must be those of the
        function that sampled, or the importance ratios drift from 1 for no reason. ``plan`` (default: this
        batch's ``self.plan``) splits the pass into micro-batches (``_micro_logprobs``).
        """
        plan = self.plan(batch) if plan is None else plan
        if plan is not None:
            return self._actor_step_micro(batch, loss_fn, plan)
        with autocast(self.policy):
            logp, entropy = sequence_logprobs(self.policy, batch.tokens_BT, batch.attention_BT)
        loss, metrics = loss_fn(logp)
        grad_norm, skipped = guarded_step(loss, self.actor_params, self.actor_optimizer, self.config.grad_clip)
        return self._after_step(batch, loss, metrics, entropy, grad_norm, skipped)

    def _actor_step_micro(self, batch: Batch, loss_fn, plan: list[MicroBatch]) -> dict[str, float]:
        """``actor_step`` with gradient accumulation over ``plan``.

        Each micro-batch's log-probabilities (with gradient) are placed into a [B, T] tensor whose other rows
        hold constants (the rollout log-probabilities: ratio 1, finite for every loss), and ``loss_fn`` is
        evaluated on that whole tensor. Every loss of the registry is a sum of per-row terms over a batch-wide
        normaliser (action tokens, rows, or B x horizon), so the gradient reaching a micro-batch's rows is
        exactly the whole-batch loss's gradient for them, whatever the aggregation, and the accumulated sum is
        the whole-batch gradient (``tests/test_micro_batches.py``). The logged loss and metrics are
        ``loss_fn`` of the whole batch's log-probabilities, gathered detached from the passes.
        """
        logp_all = batch.rollout_logp_BT.clone()
        entropy_all = torch.zeros_like(batch.rollout_logp_BT)
        failed: list[torch.Tensor] = []

        def micro_loss(mb: MicroBatch):
            def make() -> torch.Tensor:
                with autocast(self.policy):
                    logp, entropy = sequence_logprobs(self.policy, mb.take(batch.tokens_BT), mb.take(batch.attention_BT))
                loss, _ = loss_fn(mb.embed(batch.rollout_logp_BT, logp))
                logp_all[mb.rows, : mb.width] = logp.detach().to(logp_all.dtype)
                entropy_all[mb.rows, : mb.width] = entropy.detach().to(entropy_all.dtype)
                if not torch.isfinite(loss):
                    failed.append(loss.detach())
                return loss
            return make

        grad_norm, skipped = accumulated_step([micro_loss(mb) for mb in plan], self.actor_params,
                                              self.actor_optimizer, self.config.grad_clip)
        with torch.no_grad():
            loss, metrics = loss_fn(logp_all)
        if failed:
            loss = failed[0]
        return self._after_step(batch, loss, metrics, entropy_all, grad_norm, skipped)

    def _after_step(self, batch: Batch, loss: torch.Tensor, metrics: dict, entropy: torch.Tensor, grad_norm: float,
                    skipped: bool) -> dict[str, float]:
        self.skipped += skipped
        self.nonfinite = nonfinite_streak(self.nonfinite, skipped, model="actor",
                                          setting=f"agent.hparams.lr (now {self.config.lr:g})")
        if not skipped:
            self.version += 1
        with torch.no_grad():
            entropy_mean = masked_mean(entropy, batch.mask_BT)
        out = {f"actor/{k}": v for k, v in metrics.items()}
        out.update({"actor/loss": loss.item(), "actor/entropy": entropy_mean.item(),
                    "actor/grad_norm": grad_norm, "actor/skipped_nonfinite": float(self.skipped)})
        return out
