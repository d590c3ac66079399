"""DIS with the band applied per sequence or per step instead of per token (the SAO paper's
token- against step-level clipping comparison, arXiv 2607.07508).

Token-level DIS (``sao_env.algos.dis_policy_loss``) keeps token t when its own ratio
r_t = pi_theta/pi_rollout lies strictly inside (1-eps_low, 1+eps_high). Here a *segment* of
action tokens shares one ratio, the geometric mean of its tokens' ratios,

    s = exp( mean_{t in segment} (logp_t - rollout_logp_t) )          (GSPO, Zheng et al. 2025)

and every token of the segment gets w_t = s if 1-eps_low < s < 1+eps_high else 0 (detached); the
per-token loss is -w_t * A_t * logp_t as in DIS. The length-normalised ratio is used because the
plain product of 24-80 token ratios leaves any band after a few updates. Segments:

    dis_sequence  all action tokens of an episode (row) form one segment
    dis_step      each maximal run of consecutive action tokens (one turn of a multi-turn episode)
                  is a segment; for single-turn episodes it equals dis_sequence

Both have the signature of ``sao_env.algos.POLICY_LOSSES``'s members, so an agent picks them by
name. They live beside the agents, not in the registry, until the registry takes them.
"""

from __future__ import annotations

import torch

from sao_env.algos import POLICY_LOSSES
from sao_env.algos.losses import dis_band_loss, rollout_inputs

Tensor = torch.Tensor


def segment_ids(mask: Tensor, *, level: str) -> Tensor:
    """Segment index of each action token, -1 elsewhere; indices run 0..S-1 over the batch, row-major.

    Args:
        mask: [B, T] bool or 0/1, action tokens.
        level: ``sequence`` (one segment per row with an action) or ``step`` (one per run of
            consecutive action tokens).
    Returns:
        [B, T] long.
    """
    m = mask.bool()
    if level == "step":
        starts = m & ~torch.nn.functional.pad(m[:, :-1], (1, 0), value=False)  # (B, T) first token of a run
    elif level == "sequence":
        starts = m & (m.long().cumsum(-1) == 1)  # (B, T) first action token of a row
    else:
        raise ValueError(f"unknown segment level {level!r}; valid: sequence, step")
    ids = starts.flatten().long().cumsum(0).view_as(m) - 1
    return torch.where(m, ids, -1)


def segment_dis_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    level: str,
    agg: str = "token_mean",
    horizon: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """DIS with one ratio per segment (module docstring): per-token loss -w_t * A_t * logp_t.

    Args:
        logp: [B, T] log-probs under the current policy (with gradient).
        rollout_logp: [B, T] log-probs recorded by the rollout engine.
        advantages: [B, T].
        mask: [B, T] bool or 0/1, action tokens.
        eps_low: 0 < eps_low <= 1; eps_high > 0 (the strict band, as in DIS).
        level: ``sequence`` or ``step``.
        agg: an ``agg_loss`` mode.
    Returns:
        (loss, metrics): as ``dis_policy_loss`` (``dis_masked_low``/``_high``/``dis_masked`` are
        fractions of action tokens, ``ratio_mean``/``ratio_max`` of the segment ratio over action
        tokens, ``ess`` over tokens, ``approx_kl`` token-level k2), plus ``segments_masked``,
        the fraction of segments whose ratio left the band.
    """
    m, logp, advantages, log_ratio = rollout_inputs(logp, rollout_logp, advantages, mask, eps_low=eps_low,
                                                    eps_high=eps_high)  # (B, T) log_ratio, 0 off actions
    dtype = log_ratio.dtype
    seg = segment_ids(m, level=level)  # (B, T)
    S = int(seg.max().item()) + 1 if m.any() else 0
    idx = seg.clamp(min=0).flatten()  # non-actions add 0 to bucket 0
    seg_sum = log_ratio.new_zeros(max(S, 1)).index_add_(0, idx, log_ratio.flatten())  # (S,)
    seg_len = log_ratio.new_zeros(max(S, 1)).index_add_(0, idx, m.flatten().to(dtype))  # (S,)
    seg_ratio = torch.exp(seg_sum / seg_len.clamp(min=1))  # (S,)
    ratio = torch.where(m, seg_ratio[idx].view_as(m), 1)  # (B, T)
    loss, _, band = dis_band_loss(logp, advantages, m, ratio, log_ratio, eps_low=eps_low, eps_high=eps_high,
                                  agg=agg, horizon=horizon)
    with torch.no_grad():
        out_S = ((seg_ratio <= 1 - eps_low) | (seg_ratio >= 1 + eps_high))[:S]
        band["segments_masked"] = out_S.to(dtype).mean() if S else ratio.new_zeros(())
        metrics = dict(zip(band, torch.stack([v.to(dtype) for v in band.values()]).tolist()))
    return loss, metrics


def _dis_sequence(logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean",
                  horizon=None):
    """"dis_sequence": ``segment_dis_loss`` with one segment per episode; ``dual_clip`` must be None."""
    if dual_clip is not None:
        raise ValueError("dual_clip applies to ppo_clip only; DIS masks out-of-band segments already")
    return segment_dis_loss(logp, ref_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, level="sequence",
                            agg=agg, horizon=horizon)


def _dis_step(logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean", horizon=None):
    """"dis_step": ``segment_dis_loss`` with one segment per turn; ``dual_clip`` must be None."""
    if dual_clip is not None:
        raise ValueError("dual_clip applies to ppo_clip only; DIS masks out-of-band segments already")
    return segment_dis_loss(logp, ref_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, level="step",
                            agg=agg, horizon=horizon)


SEGMENT_LOSSES = {"dis_sequence": _dis_sequence, "dis_step": _dis_step}
"""Segment-level DIS losses, with the registry's signature."""


def policy_losses() -> dict:
    """Every loss a critic agent may name: the registry's, then these (a clash is an error)."""
    clash = sorted(set(POLICY_LOSSES) & set(SEGMENT_LOSSES))
    if clash:
        raise ValueError(f"sao_env.algos.POLICY_LOSSES now defines {', '.join(clash)}; drop them from segment_dis.py")
    return {**POLICY_LOSSES, **SEGMENT_LOSSES}
