"""Advantage estimators: pure tensor functions, no state, no config objects.

Shape contract (shared with ``losses.py``): tensors are ``[B, T]`` unless noted; ``mask`` is a
bool or 0/1 ``[B, T]`` tensor marking action tokens (tokens the policy generated). Values are
token-aligned: ``values[b, t]`` is V(state just before token t is generated); outcome rewards sit
on the last action token of each row. Every output is exactly 0 at non-action positions, and
whatever the inputs hold there (even NaN) never reaches an action position.
"""

from __future__ import annotations

import math
from typing import Hashable, Mapping, Sequence

import torch

Tensor = torch.Tensor


def _check_shapes(mask: Tensor, **tensors: Tensor) -> None:
    for name, x in tensors.items():
        if x.shape != mask.shape:
            raise ValueError(f"{name} has shape {tuple(x.shape)} but mask has {tuple(mask.shape)}")


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over the positions where ``mask`` is set; 0 (not NaN) if there are none.

    Args:
        x: any shape.
        mask: bool or 0/1, same shape as ``x``.
    Returns:
        A scalar tensor (differentiable in ``x``).
    """
    m = mask.bool()
    return torch.where(m, x, 0).sum() / m.sum().clamp(min=1)


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """Whiten ``x`` over action tokens: (x - mean) / sqrt(var + eps), 0 elsewhere.

    Mean and variance are taken over the action tokens only; the variance is the population
    one (divide by N, no Bessel correction), so one action token whitens to 0 instead of NaN.

    Args:
        x: [B, T].
        mask: [B, T] bool or 0/1.
    Returns:
        [B, T], zero at non-action positions.
    """
    m = mask.bool()
    mean = masked_mean(x, m)
    var = masked_mean((x - mean) ** 2, m)
    return torch.where(m, (x - mean) * torch.rsqrt(var + eps), 0)


def broadcast_sequence_advantages(adv_B: Tensor, mask: Tensor) -> Tensor:
    """Copy one advantage per sequence onto each of its action tokens (0 elsewhere).

    Args:
        adv_B: [B], e.g. from ``group_advantages`` or ``running_mean_advantages``.
        mask: [B, T] bool or 0/1.
    Returns:
        [B, T] with the dtype of ``adv_B``.
    """
    if adv_B.shape != mask.shape[:1]:
        raise ValueError(f"adv_B has shape {tuple(adv_B.shape)}, expected ({mask.shape[0]},)")
    return torch.where(mask.bool(), adv_B[:, None], 0).to(adv_B.dtype)


def gae(
    rewards: Tensor, values: Tensor, mask: Tensor, *, gamma: float, lam: float | Tensor
) -> tuple[Tensor, Tensor]:
    """Token-level generalised advantage estimation over action tokens (skip-observation).

    GAE (Schulman et al. 2016, eq. 16): A_t = sum_l (gamma*lam)^l delta_{t+l}, with
    delta_t = r_t + gamma*V(t+1) - V(t), computed backwards as A_t = delta_t + gamma*lam*A_{t+1}.
    As in SAO (arXiv 2607.07508), the recursion steps over action tokens only: the "next" of an
    action token is the next action token of the same row, so in a multi-turn episode the value
    after a turn's last action token is the value of the next turn's first action token, and the
    value after the row's last action token is 0. Rewards and values are read at action
    positions only. Computed in float32 or wider, without gradient.

    Args:
        rewards: [B, T], outcome reward on the last action token of each row.
        values: [B, T], V(state just before token t); ignored at non-action positions.
        mask: [B, T] bool or 0/1, action tokens.
        gamma: discount per action token, in [0, 1].
        lam: float in [0, 1], or a [B] tensor of per-row lambdas (e.g. ``adaptive_lambda``).
    Returns:
        (advantages, returns), both [B, T], detached, 0 at non-action positions;
        returns = advantages + values on action tokens.
    """
    _check_shapes(mask, rewards=rewards, values=values)
    if rewards.dim() != 2:
        raise ValueError(f"rewards, values and mask must be [B, T], got {tuple(mask.shape)}")
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    B, T = mask.shape
    dtype = torch.promote_types(torch.promote_types(rewards.dtype, values.dtype), torch.float32)
    with torch.no_grad():
        m = mask.bool()
        r, v = rewards.to(dtype), values.to(dtype)
        lam_B = torch.as_tensor(lam, dtype=dtype, device=r.device)
        if lam_B.dim() > 1 or (lam_B.dim() == 1 and lam_B.shape[0] != B):
            raise ValueError(f"lam must be a float or a [B]={B} tensor, got shape {tuple(lam_B.shape)}")
        if ((lam_B < 0) | (lam_B > 1)).any():
            raise ValueError("lam must be in [0, 1]")
        lam_B = lam_B.expand(B)
        adv = torch.zeros(B, T, dtype=dtype, device=r.device)  # (B, T)
        next_value = torch.zeros(B, dtype=dtype, device=r.device)  # (B,) V after the current action token
        next_adv = torch.zeros(B, dtype=dtype, device=r.device)  # (B,) A of the next action token
        for t in reversed(m.any(0).nonzero().squeeze(1).tolist()):  # a column without actions changes nothing
            act = m[:, t]  # (B,)
            delta = r[:, t] + gamma * next_value - v[:, t]
            a_t = delta + gamma * lam_B * next_adv
            adv[:, t] = torch.where(act, a_t, 0)
            next_value = torch.where(act, v[:, t], next_value)
            next_adv = torch.where(act, a_t, next_adv)
        returns = torch.where(m, adv + v, 0)
    return adv, returns


def adaptive_lambda(num_action_tokens: int | Sequence[int] | Tensor, alpha: float = 1.5) -> Tensor:
    """SAO's length-adaptive GAE lambda: lambda = 1 - 1/(alpha * l) (SAO, arXiv 2607.07508).

    l is the number of action tokens of the episode, so long episodes get lambda close to 1
    (low bias) and short ones a smaller lambda (low variance). Edge cases, our choice: l = 0
    gives 0.0 (an episode without action tokens never uses its lambda) and the result is clamped
    to [0, 1], since alpha*l < 1 would otherwise give a negative lambda (l = 1 with alpha = 1.5
    gives 1/3, unclamped).

    Args:
        num_action_tokens: an int, a list of ints, or a tensor of counts (>= 0).
        alpha: > 0.
    Returns:
        A float tensor of the input's shape ([B] for a list or a [B] tensor, 0-dim for an int).
    """
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    l = torch.as_tensor(num_action_tokens)
    l = l.to(torch.promote_types(l.dtype, torch.float32))
    if (l < 0).any():
        raise ValueError("num_action_tokens must be >= 0")
    lam = torch.where(l > 0, 1.0 - 1.0 / (alpha * l), 0.0)
    return lam.clamp(0.0, 1.0)


def group_advantages(
    rewards: Tensor, group_ids: Tensor, *, normalize_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """GRPO outcome advantages: (r - mean of its group) / (std of its group + eps).

    GRPO (Shao et al. 2024); the std is the unbiased one (Bessel, as ``torch.std``, TRL and
    verl). ``normalize_std=False`` keeps only the centering, as Dr. GRPO (Liu et al. 2025).
    A group of size 1 has no baseline to compare against: its advantage is 0.

    Args:
        rewards: [B] float, one outcome reward per sequence.
        group_ids: [B] int, any integers (groups need not be contiguous or sorted).
    Returns:
        [B] advantages, in the dtype of ``rewards`` (at least float32).
    """
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        shapes = f"{tuple(rewards.shape)} and {tuple(group_ids.shape)}"
        raise ValueError(f"rewards and group_ids must both be [B], got {shapes}")
    r = rewards.to(torch.promote_types(rewards.dtype, torch.float32))
    _, g = torch.unique(group_ids, return_inverse=True)  # (B,) group index in [0, G)
    G = int(g.max()) + 1 if g.numel() else 0
    count = torch.zeros(G, dtype=r.dtype, device=r.device).index_add_(0, g, torch.ones_like(r))  # (G,)
    mean = torch.zeros_like(count).index_add_(0, g, r) / count  # (G,)
    centered = r - mean[g]  # (B,)
    if not normalize_std:
        return centered
    var = torch.zeros_like(count).index_add_(0, g, centered**2) / (count - 1).clamp(min=1)  # (G,)
    return torch.where(count[g] > 1, centered / (var.sqrt()[g] + eps), 0.0)


def running_mean_advantages(
    rewards: Tensor, history: Sequence[float], window: int = 128
) -> tuple[Tensor, list[float]]:
    """Online baseline of SAO's running-mean comparison: A_i = r_i - mean(last ``window`` rewards).

    SAO (arXiv 2607.07508) compares against a baseline equal to the mean of the last 128
    rewards. "Last" means seen before r_i: the ``history`` (oldest first) followed by the
    earlier rewards of this batch, in order. With nothing seen yet the baseline is 0.0, so the
    first advantage is the raw reward. Pure: ``history`` is not modified.

    Args:
        rewards: [B] float, in arrival order.
        history: rewards seen before this batch, oldest first.
        window: how many past rewards the baseline averages (>= 1).
    Returns:
        (advantages [B], new_history) where new_history is the last ``window`` rewards seen,
        this batch included, as a new list of floats.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    seen = [float(x) for x in list(history)[-window:]]
    adv = []
    for r in rewards.tolist():
        recent = seen[-window:]
        adv.append(r - (sum(recent) / len(recent) if recent else 0.0))
        seen.append(r)
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    return torch.tensor(adv, dtype=dtype, device=rewards.device), seen[-window:]


def keyed_baseline_advantages(
    rewards: Tensor,
    keys: Sequence[Hashable | None],
    history: Mapping[Hashable, Sequence[float]],
    global_history: Sequence[float],
    *,
    window: int,
    discount: float = 1.0,
    global_window: int = 128,
) -> tuple[Tensor, dict[Hashable, list[float]], list[float], Tensor]:
    """A baseline per key (a prompt's id, a difficulty class): A_i = r_i - b(k_i), falling back to the
    global running mean where the key has no reward yet or is None.

    b(k) is the discounted mean of the last ``window`` rewards seen for key k, the most recent weighted 1,
    the one before ``discount``, then ``discount``^2 ...: sum_j d^j r_(j) / sum_j d^j. With ``discount`` 1 it
    is the plain mean of the last ``window`` (a running mean per class); with d < 1 it is the per-prompt
    value tracker of SPO (Xu et al. 2025, "Single-stream Policy Optimization", sec. 3.1: a discounted
    success count over a discounted count per prompt, alpha <- d*alpha + r, beta <- d*beta + (1 - r),
    v = alpha / (alpha + beta), without its prior and adaptive discount). The fallback is
    ``running_mean_advantages``' baseline: the mean of the last ``global_window`` rewards of any key
    (0.0 when nothing was seen). As there, "seen" means before r_i: the histories followed by the earlier
    rewards of this batch, in order. Non-finite rewards enter no history. Pure: the inputs are not modified.

    Args:
        rewards: [B] float, in arrival order.
        keys: B keys (hashable; None: no key, the global baseline).
        history: per key, its rewards seen before this batch, oldest first.
        global_history: every reward seen before this batch, oldest first.
        window, global_window: rewards kept per key and globally (>= 1).
        discount: in (0, 1].
    Returns:
        (advantages [B], new_history, new_global_history, fallback [B] bool: which episodes used the global mean).
    """
    if window < 1 or global_window < 1:
        raise ValueError(f"window and global_window must be >= 1, got {window} and {global_window}")
    if not 0.0 < discount <= 1.0:
        raise ValueError(f"discount must be in (0, 1], got {discount}")
    if len(keys) != rewards.shape[0]:
        raise ValueError(f"{len(keys)} keys for {rewards.shape[0]} rewards")
    seen = {k: [float(x) for x in list(v)[-window:]] for k, v in history.items()}
    seen_all = [float(x) for x in list(global_history)[-global_window:]]
    adv, fallback = [], []
    for r, k in zip(rewards.tolist(), keys):
        recent = seen.get(k, []) if k is not None else []
        if recent:
            weights = [discount**j for j in range(len(recent))]  # the most recent first
            b = math.fsum(w * x for w, x in zip(weights, reversed(recent))) / math.fsum(weights)
        else:
            b = math.fsum(seen_all) / len(seen_all) if seen_all else 0.0
        adv.append(r - b)
        fallback.append(not recent)
        if math.isfinite(r):
            if k is not None:
                seen[k] = (seen.get(k, []) + [r])[-window:]
            seen_all = (seen_all + [r])[-global_window:]
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    return (torch.tensor(adv, dtype=dtype, device=rewards.device), seen, seen_all,
            torch.tensor(fallback, dtype=torch.bool, device=rewards.device))


def grpo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Registry entry "grpo": ``group_advantages`` with std normalisation. [B], [B] -> [B]."""
    return group_advantages(rewards, group_ids, normalize_std=True)


def dr_grpo_advantages(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Registry entry "dr_grpo": mean-only centering, Dr. GRPO (Liu et al. 2025). [B], [B] -> [B]."""
    return group_advantages(rewards, group_ids, normalize_std=False)


# Outcome-reward estimators, all (rewards [B], group_ids [B]) -> advantages [B]. GAE and the
# running-mean baseline have other inputs (values; a history) and are called by their agents.
ADVANTAGE_ESTIMATORS = {
    "grpo": grpo_advantages,
    "dr_grpo": dr_grpo_advantages,
}
