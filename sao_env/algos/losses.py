"""Policy and value losses: pure tensor functions returning (loss, metrics).

Shape contract (shared with ``advantages.py``): tensors are ``[B, T]``; ``mask`` is a bool or
0/1 ``[B, T]`` tensor marking action tokens; ``logp[b, t]`` is the log-prob of token t given the
tokens before it. Only action tokens enter a loss or a metric; whatever the other positions
hold (even NaN) never reaches the loss or its gradient. Metrics are python floats computed
without gradient, with unprefixed names (agents add ``actor/`` or ``critic/``; see
docs/metrics.md).
"""

from __future__ import annotations

import functools

import torch

from sao_env.algos.advantages import _check_shapes, masked_mean
from sao_env.algos.diagnostics import off_policy_diagnostics, sequence_log_ratio

Tensor = torch.Tensor

AGG_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")


def agg_loss(per_token: Tensor, mask: Tensor, mode: str, *, horizon: int | None = None) -> Tensor:
    """Reduce a per-token loss to a scalar over action tokens.

    Modes:
        token_mean: sum over all action tokens of the batch / their count. Tokens whose loss is
            zero (e.g. masked by DIS) still count in the denominator.
        seq_mean_token_mean: mean over rows of each row's token mean.
        seq_mean_token_sum: mean over rows of each row's token sum.
        seq_mean_token_sum_norm: total sum / (B * horizon), a constant normaliser, as
            Dr. GRPO (Liu et al. 2025). ``horizon`` should be a true constant (agents pass the
            most action tokens an episode can have); it defaults to T, the batch's padded width,
            which varies with the batch (ignored by the other modes).
    Rows without an action token are left out of both ``seq_mean_*`` means. With no action
    token at all the loss is 0, still attached to the graph (zero gradient, no NaN).

    Args:
        per_token: [B, T] loss per token.
        mask: [B, T] bool or 0/1, action tokens.
        mode: one of ``AGG_MODES``.
        horizon: positive int, only for ``seq_mean_token_sum_norm``.
    Returns:
        A scalar tensor.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation {mode!r}; valid modes: {', '.join(AGG_MODES)}")
    _check_shapes(mask, per_token=per_token)
    m = mask.bool()
    x = torch.where(m, per_token, 0)  # (B, T)
    if mode == "token_mean":
        return x.sum() / m.sum().clamp(min=1)
    if mode == "seq_mean_token_sum_norm":
        horizon = m.shape[-1] if horizon is None else horizon
        if horizon <= 0:
            raise ValueError(f"horizon must be a positive number of tokens, got {horizon}")
        return x.sum() / max(m.shape[0] * horizon, 1)
    n_B = m.sum(-1)  # (B,)
    row_B = x.sum(-1)  # (B,)
    if mode == "seq_mean_token_mean":
        row_B = row_B / n_B.clamp(min=1)
    return row_B.sum() / (n_B > 0).sum().clamp(min=1)


def _floats(**metrics: Tensor) -> dict[str, float]:
    """0-dim tensors -> python floats with a single device sync."""
    values = [v.detach() for v in metrics.values()]
    dtype = functools.reduce(torch.promote_types, (v.dtype for v in values))
    return dict(zip(metrics, torch.stack([v.to(dtype) for v in values]).tolist()))


def _on_actions(m: Tensor, *xs: Tensor) -> list[Tensor]:
    """Zero the non-action positions first, so nothing there (not even NaN) reaches a value or a gradient."""
    return [torch.where(m, x, 0) for x in xs]


def _check_band(eps_low: float, eps_high: float) -> None:
    if not 0.0 < eps_low <= 1.0 or not eps_high > 0.0:
        raise ValueError(f"need 0 < eps_low <= 1 and eps_high > 0, got {eps_low=}, {eps_high=}")


def _log_ratio(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """log(pi_theta / pi_ref), detached, in float32 or wider so the band test is exact enough."""
    dtype = torch.promote_types(torch.promote_types(logp.dtype, ref_logp.dtype), torch.float32)
    return logp.detach().to(dtype) - ref_logp.to(dtype)


def dis_policy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    agg: str = "token_mean",
    horizon: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """DIS loss, SAO's strict double-sided token-level clipping (SAO, arXiv 2607.07508).

    r_t = exp(logp_t - rollout_logp_t) against the log-probs recorded at rollout time (no
    separate old policy); w_t = r_t if 1-eps_low < r_t < 1+eps_high (strict) else 0, detached;
    per-token loss = -w_t * A_t * logp_t, so the gradient is -w_t * A_t * grad(logp_t) for kept
    tokens and exactly 0 for out-of-band tokens, whatever the sign of A_t.

    Args:
        logp: [B, T] log-probs under the current policy (with gradient).
        rollout_logp: [B, T] log-probs recorded by the rollout engine.
        advantages: [B, T].
        mask: [B, T] bool or 0/1, action tokens.
        eps_low: lower band, 0 < eps_low <= 1 (paper: 0.3 reasoning, 0.8 coding).
        eps_high: upper band, > 0 (paper: 5.0 reasoning, 3.0 coding).
        agg: an ``agg_loss`` mode.
    Returns:
        (loss, metrics). Metrics over action tokens: ``dis_masked_low`` (fraction with
        r <= 1-eps_low), ``dis_masked_high`` (r >= 1+eps_high), ``dis_masked`` (their sum),
        ``ratio_mean``, ``ratio_max``, ``ess`` ((sum w)^2 / (N sum w^2), 0 if all w are 0) and
        ``approx_kl``, the k2 estimator mean(0.5 * (logp - rollout_logp)^2) of
        KL(pi_rollout || pi_theta) (Schulman, "Approximating KL divergence", 2020), and the
        shared ``sao_env.algos.diagnostics`` (``masked_fraction`` = ``dis_masked`` here).
    """
    m, logp, advantages, log_ratio = rollout_inputs(logp, rollout_logp, advantages, mask, eps_low=eps_low,
                                                    eps_high=eps_high)
    loss, keep, band = dis_band_loss(logp, advantages, m, torch.exp(log_ratio), log_ratio, eps_low=eps_low,
                                     eps_high=eps_high, agg=agg, horizon=horizon)
    with torch.no_grad():
        metrics = _floats(**band, **off_policy_diagnostics(log_ratio, m, ~keep, eps_low=eps_low, eps_high=eps_high))
    return loss, metrics


def rollout_inputs(
    logp: Tensor, rollout_logp: Tensor, advantages: Tensor, mask: Tensor, *, eps_low: float, eps_high: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The checked inputs of a loss against the rollout's log-probs, zeroed off the actions.

    Returns:
        (m, logp, advantages, log_ratio): the bool action mask, logp and advantages zeroed off the
        actions, and log(pi_theta / pi_rollout) per token, detached, float32 or wider.
    """
    _check_shapes(mask, logp=logp, rollout_logp=rollout_logp, advantages=advantages)
    _check_band(eps_low, eps_high)
    m = mask.bool()
    logp, rollout_logp, advantages = _on_actions(m, logp, rollout_logp, advantages)
    return m, logp, advantages, _log_ratio(logp, rollout_logp)


def dis_band_loss(
    logp: Tensor,
    advantages: Tensor,
    m: Tensor,
    ratio: Tensor,
    log_ratio: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    agg: str,
    horizon: int | None,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """DIS's strict band on a given per-token ratio (SAO, arXiv 2607.07508): the token's own ratio in
    ``dis_policy_loss``, a ratio shared by a segment's tokens in ``sao_env.agents.segment_dis``.

    w_t = ratio_t if 1-eps_low < ratio_t < 1+eps_high else 0 (detached); loss_t = -w_t * A_t * logp_t.

    Returns:
        (loss, keep, metrics): ``keep`` the [B, T] kept action tokens; the metrics (0-dim tensors, no
        gradient) ``dis_masked_low``, ``dis_masked_high``, ``dis_masked``, ``ratio_mean``,
        ``ratio_max`` (of ``ratio``), ``ess`` and ``approx_kl`` (k2 of the token ``log_ratio``), as
        ``dis_policy_loss`` documents them.
    """
    keep = m & (ratio > 1 - eps_low) & (ratio < 1 + eps_high)
    w = torch.where(keep, ratio, 0)  # (B, T) detached importance weight
    loss = agg_loss(-w * advantages * logp, m, agg, horizon=horizon)
    with torch.no_grad():
        low = masked_mean((ratio <= 1 - eps_low).to(ratio.dtype), m)
        high = masked_mean((ratio >= 1 + eps_high).to(ratio.dtype), m)
        sum_w, sum_w2 = w.sum(), (w**2).sum()
        ess = torch.where(sum_w2 > 0, sum_w**2 / (m.sum() * sum_w2), 0)
        metrics = {
            "dis_masked_low": low,
            "dis_masked_high": high,
            "dis_masked": low + high,
            "ratio_mean": masked_mean(ratio, m),
            "ratio_max": torch.where(m, ratio, 0).max() if m.any() else ratio.new_zeros(()),
            "ess": ess,
            "approx_kl": masked_mean(0.5 * log_ratio**2, m),
        }
    return loss, keep, metrics


def ppo_clip_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
    agg: str = "token_mean",
    horizon: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate with asymmetric bands and optional dual clip.

    PPO (Schulman et al. 2017, eq. 7): loss_t = max(-A_t r_t, -A_t clip(r_t, 1-eps_low, 1+eps_high)),
    r_t = exp(logp_t - old_logp_t). eps_high > eps_low is DAPO clip-higher (Yu et al. 2025).
    With ``dual_clip=c`` (c > 1), Dual-clip PPO (Ye et al. 2020): for A_t < 0 the loss is
    further capped at -A_t * c, so a huge ratio on a bad token cannot blow up the update.

    Args:
        logp: [B, T] log-probs under the current policy (with gradient).
        old_logp: [B, T] log-probs of the behaviour (old or rollout) policy.
        advantages: [B, T].
        mask: [B, T] bool or 0/1, action tokens.
        eps_low, eps_high: clip range, 0 < eps_low <= 1, eps_high > 0.
        dual_clip: None, or c > 1.
        agg: an ``agg_loss`` mode.
    Returns:
        (loss, metrics). Metrics over action tokens: ``pg_clipfrac`` (fraction where the clipped
        term is the active one, i.e. larger than the unclipped one), ``pg_clipfrac_lower``
        (fraction where the dual clip is active; 0 without it), ``ratio_mean``, ``ratio_max``, ``approx_kl``
        (k2 estimator, as in ``dis_policy_loss``), and the shared ``sao_env.algos.diagnostics``
        (``masked_fraction`` = ``pg_clipfrac + pg_clipfrac_lower``: the tokens whose gradient the
        clip or the dual clip zeroed).
    """
    _check_shapes(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    _check_band(eps_low, eps_high)
    if dual_clip is not None and not dual_clip > 1.0:
        raise ValueError(f"dual_clip must be > 1 (or None), got {dual_clip}")
    m = mask.bool()
    logp, old_logp, advantages = _on_actions(m, logp, old_logp, advantages)
    ratio = torch.exp(logp - old_logp)  # (B, T)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_low, 1 + eps_high)
    is_clipped = clipped > unclipped
    per_token = torch.where(is_clipped, clipped, unclipped)
    is_capped = torch.zeros_like(m)
    if dual_clip is not None:
        cap = -advantages * dual_clip
        is_capped = (advantages < 0) & (per_token > cap)
        per_token = torch.where(is_capped, cap, per_token)
    loss = agg_loss(per_token, m, agg, horizon=horizon)
    with torch.no_grad():
        metrics = _floats(
            pg_clipfrac=masked_mean(is_clipped.to(ratio.dtype), m),
            pg_clipfrac_lower=masked_mean(is_capped.to(ratio.dtype), m),
            ratio_mean=masked_mean(ratio, m),
            ratio_max=torch.where(m, ratio, 0).max() if m.any() else ratio.new_zeros(()),
            approx_kl=masked_mean(0.5 * _log_ratio(logp, old_logp) ** 2, m),
            **off_policy_diagnostics(_log_ratio(logp, old_logp), m, is_clipped | is_capped, eps_low=eps_low,
                                     eps_high=eps_high),
        )
    return loss, metrics


def policy_gradient_loss(
    logp: Tensor, advantages: Tensor, mask: Tensor, *, agg: str = "token_mean", horizon: int | None = None
) -> tuple[Tensor, dict[str, float]]:
    """Plain REINFORCE / policy-gradient loss, per token -A_t * logp_t (Williams 1992).

    Args:
        logp: [B, T] log-probs under the current policy (with gradient).
        advantages: [B, T].
        mask: [B, T] bool or 0/1, action tokens.
        agg: an ``agg_loss`` mode.
    Returns:
        (loss, {}): the loss has no diagnostics of its own.
    """
    _check_shapes(mask, logp=logp, advantages=advantages)
    m = mask.bool()
    logp, advantages = _on_actions(m, logp, advantages)
    return agg_loss(-advantages * logp, m, agg, horizon=horizon), {}


def _ratio_metrics(log_ratio: Tensor, m: Tensor) -> dict[str, Tensor]:
    """``ratio_mean``, ``ratio_max`` and the k2 ``approx_kl``, computed as ``dis_policy_loss`` does."""
    ratio = torch.exp(log_ratio)
    return {
        "ratio_mean": masked_mean(ratio, m),
        "ratio_max": torch.where(m, ratio, 0).max() if m.any() else ratio.new_zeros(()),
        "approx_kl": masked_mean(0.5 * log_ratio**2, m),
    }


def tis_policy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    agg: str = "token_mean",
    horizon: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Truncated importance sampling (TIS; Yao, Liu, Zhang, Dong, Shang, Gao 2025, "Your efficient
    RL framework secretly brings you off-policy RL training").

    The rollout engine samples from pi_rollout while the learner differentiates pi_theta; TIS
    corrects each token by its importance ratio truncated from above at C:
        r_t = exp(logp_t - rollout_logp_t),  w_t = min(r_t, C) (detached),  loss_t = -w_t A_t logp_t.
    Yao et al. multiply their PPO term by min(pi_trainer(theta_old) / pi_rollout(theta_old), C)
    (C = 2 in their runs); the registry has no separate old policy, so the ratio is taken against the
    current policy as in DIS, which is theirs at the first gradient step on a batch (where the PPO
    ratio is 1). There is no lower truncation: a token with r_t near 0 keeps its small weight.

    The registry's band carries C: C = 1 + eps_high (eps_high = 1 gives their C = 2). eps_low does
    not enter the loss; it only sets the ``out_band_low`` diagnostic.

    Args:
        logp: [B, T] log-probs under the current policy (with gradient).
        rollout_logp: [B, T] log-probs recorded by the rollout engine.
        advantages: [B, T].
        mask: [B, T] bool or 0/1, action tokens.
        eps_low: 0 < eps_low <= 1, diagnostics only.
        eps_high: > 0, the truncation C = 1 + eps_high.
        agg: an ``agg_loss`` mode.
    Returns:
        (loss, metrics): ``tis_truncated`` (share of action tokens with r_t > C, strict: at r_t = C
        the weight is C either way), ``ratio_mean``, ``ratio_max``, ``approx_kl`` (k2, as DIS), and
        the shared ``sao_env.algos.diagnostics`` (``masked_fraction`` = ``tis_truncated``).
    """
    m, logp, advantages, log_ratio = rollout_inputs(logp, rollout_logp, advantages, mask, eps_low=eps_low,
                                                    eps_high=eps_high)
    ratio = torch.exp(log_ratio)
    cap = 1 + eps_high
    truncated = m & (ratio > cap)
    w = torch.where(m, ratio.clamp(max=cap), 0)  # (B, T) detached
    loss = agg_loss(-w * advantages * logp, m, agg, horizon=horizon)
    with torch.no_grad():
        metrics = _floats(
            tis_truncated=masked_mean(truncated.to(ratio.dtype), m),
            **_ratio_metrics(log_ratio, m),
            **off_policy_diagnostics(log_ratio, m, truncated, eps_low=eps_low, eps_high=eps_high),
        )
    return loss, metrics


def mis_token_policy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    agg: str = "token_mean",
    horizon: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Masked importance sampling at token level, IcePop-style (Ling Team 2025, "Small leak can sink
    a great ship: boost RL training on MoE with IcePop"; used to train Ring-1T, arXiv 2510.18855).

    IcePop multiplies each token's term by M(k_t; alpha, beta) = k_t if alpha <= k_t <= beta else 0,
    where k_t = pi_train(y_t) / pi_infer(y_t): tokens whose training/inference discrepancy leaves
    the band are dropped from the gradient, the others are importance-weighted. Implemented:
        r_t = exp(logp_t - rollout_logp_t),  w_t = r_t if 1 - eps_low <= r_t <= 1 + eps_high else 0
        (detached, band inclusive as IcePop's M),  loss_t = -w_t A_t logp_t,
    i.e. alpha = 1 - eps_low, beta = 1 + eps_high, the ratio against the current policy (no separate
    old policy: IcePop's PPO ratio is 1 at the first step on a batch). This is DIS with a closed band
    instead of an open one: the two differ only for a ratio exactly on an edge, which MIS keeps.

    Args:
        logp, rollout_logp, advantages, mask: as ``dis_policy_loss``.
        eps_low, eps_high: the band [1 - eps_low, 1 + eps_high], 0 < eps_low <= 1, eps_high > 0.
        agg: an ``agg_loss`` mode.
    Returns:
        (loss, metrics): ``ratio_mean``, ``ratio_max``, ``approx_kl`` (k2), and the shared
        ``sao_env.algos.diagnostics``; ``masked_fraction`` = ``out_band_low + out_band_high``.
    """
    m, logp, advantages, log_ratio = rollout_inputs(logp, rollout_logp, advantages, mask, eps_low=eps_low,
                                                    eps_high=eps_high)
    ratio = torch.exp(log_ratio)
    keep = m & (ratio >= 1 - eps_low) & (ratio <= 1 + eps_high)
    w = torch.where(keep, ratio, 0)  # (B, T) detached
    loss = agg_loss(-w * advantages * logp, m, agg, horizon=horizon)
    with torch.no_grad():
        metrics = _floats(**_ratio_metrics(log_ratio, m),
                          **off_policy_diagnostics(log_ratio, m, ~keep, eps_low=eps_low, eps_high=eps_high))
    return loss, metrics


def mis_seq_policy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    agg: str = "token_mean",
    horizon: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Masked importance sampling at sequence level: a whole sequence is dropped when its ratio leaves the band.

    Sequence-level MIS (Liu, Li, Fu, Wang, Liu, Shen 2025, "When speed kills stability: demystifying
    RL collapse from the training-inference mismatch") rejects a response when its sequence ratio
    exceeds a threshold and weights the kept ones by it. Their ratio is the product of the token
    ratios, whose spread grows with the length; implemented here is the length-normalised
    (geometric-mean) ratio of GSPO (``sao_env.algos.diagnostics.sequence_log_ratio``) with the
    token-level MIS band on both sides:
        s_i = exp(mean_t log r_{i,t}),  w_i = s_i if 1 - eps_low <= s_i <= 1 + eps_high else 0
        (detached, inclusive),  loss_{i,t} = -w_i A_{i,t} logp_{i,t} for every action token of row i.

    Args:
        logp, rollout_logp, advantages, mask: as ``dis_policy_loss``; a row is a sequence (every action
            token of a multi-turn episode counts in its one ratio).
        eps_low, eps_high: the band [1 - eps_low, 1 + eps_high] on s_i.
        agg: an ``agg_loss`` mode.
    Returns:
        (loss, metrics): ``seq_masked`` (share of sequences with an action token that were masked),
        ``seq_ratio_mean`` (mean s_i over those sequences), ``ratio_mean``, ``ratio_max``,
        ``approx_kl`` (token level, k2), and the shared ``sao_env.algos.diagnostics``
        (``masked_fraction``: the share of action tokens that lie in masked sequences).
    """
    m, logp, advantages, log_ratio = rollout_inputs(logp, rollout_logp, advantages, mask, eps_low=eps_low,
                                                    eps_high=eps_high)
    log_s_B, has_B = sequence_log_ratio(log_ratio, m)
    s_B = torch.exp(log_s_B)  # (B,) detached
    keep_B = has_B & (s_B >= 1 - eps_low) & (s_B <= 1 + eps_high)
    w = torch.where(m & keep_B[:, None], s_B[:, None], 0)  # (B, T)
    loss = agg_loss(-w * advantages * logp, m, agg, horizon=horizon)
    with torch.no_grad():
        metrics = _floats(
            seq_masked=masked_mean((~keep_B).to(s_B.dtype), has_B),
            seq_ratio_mean=masked_mean(s_B, has_B),
            **_ratio_metrics(log_ratio, m),
            **off_policy_diagnostics(log_ratio, m, ~keep_B[:, None].expand_as(m), eps_low=eps_low, eps_high=eps_high),
        )
    return loss, metrics


def gspo_policy_loss(
    logp: Tensor,
    rollout_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    eps_low: float,
    eps_high: float,
    agg: str = "token_mean",
    horizon: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GSPO's sequence-level ratio with PPO clipping (Zheng et al. 2025, "Group Sequence Policy
    Optimization", arXiv 2507.18071), in its GSPO-token form so that advantages may vary per token.

    GSPO (eq. 5-7): s_i = (pi_theta(y_i|x) / pi_old(y_i|x))^(1/|y_i|) = exp(mean_t log r_{i,t}) and
    J = mean_i min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i); the paper clips tightly
    (3e-4 / 4e-4), since s_i is an average. GSPO-token (eq. 13-14):
        s_{i,t} = sg[s_i] * pi_theta(y_{i,t}) / sg[pi_theta(y_{i,t})]      (value s_i, gradient s_i grad logp_t)
        loss_{i,t} = max(-A_{i,t} s_{i,t}, -A_{i,t} clip(s_i, 1 - eps_low, 1 + eps_high)).
    With A constant over a sequence and ``agg="seq_mean_token_mean"`` its loss and gradient are
    GSPO's exactly (1/|y_i| sum_t s_i grad logp_t = grad s_i); other modes weight sequences by
    ``agg``. The old policy is the rollout policy (ref_logp), as for every registry member.

    Args:
        logp, rollout_logp, advantages, mask: as ``dis_policy_loss``; a row is a sequence.
        eps_low, eps_high: clip range of s_i, 0 < eps_low <= 1, eps_high > 0.
        agg: an ``agg_loss`` mode.
    Returns:
        (loss, metrics): ``pg_clipfrac`` (share of action tokens whose clipped term is active, zero
        gradient; = ``masked_fraction``), ``seq_ratio_mean``, ``ratio_mean``, ``ratio_max``,
        ``approx_kl`` (token level, k2), and the shared ``sao_env.algos.diagnostics``.
    """
    m, logp, advantages, log_ratio = rollout_inputs(logp, rollout_logp, advantages, mask, eps_low=eps_low,
                                                    eps_high=eps_high)
    log_s_B, has_B = sequence_log_ratio(log_ratio, m)
    s_BT = torch.exp(log_s_B)[:, None].expand_as(logp)  # (B, T) detached sequence ratio on every token
    s_tok = s_BT * torch.exp(logp - logp.detach())  # value s_i, gradient s_i * grad logp_t
    unclipped = -advantages * s_tok
    clipped = -advantages * s_BT.clamp(1 - eps_low, 1 + eps_high)
    is_clipped = m & (clipped > unclipped)
    loss = agg_loss(torch.where(is_clipped, clipped, unclipped), m, agg, horizon=horizon)
    with torch.no_grad():
        metrics = _floats(
            pg_clipfrac=masked_mean(is_clipped.to(log_ratio.dtype), m),
            seq_ratio_mean=masked_mean(torch.exp(log_s_B), has_B),
            **_ratio_metrics(log_ratio, m),
            **off_policy_diagnostics(log_ratio, m, is_clipped, eps_low=eps_low, eps_high=eps_high),
        )
    return loss, metrics


def value_loss(
    values: Tensor,
    returns: Tensor,
    mask: Tensor,
    *,
    old_values: Tensor | None = None,
    clip: float | None = None,
    agg: str = "token_mean",
    horizon: int | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Critic regression loss, per token 0.5 * (V_t - R_t)^2, with optional PPO value clipping.

    With ``clip`` set (needs ``old_values``), as in PPO2 / CleanRL ``clip_vloss``: per token
    max(0.5 (V - R)^2, 0.5 (V_old + clamp(V - V_old, -clip, clip) - R)^2).

    Args:
        values: [B, T] current value predictions (with gradient).
        returns: [B, T] targets (e.g. ``gae(...)[1]``).
        mask: [B, T] bool or 0/1, action tokens.
        old_values: [B, T] predictions at rollout time; needed when ``clip`` is set.
        clip: None or > 0.
        agg: an ``agg_loss`` mode.
    Returns:
        (loss, metrics). Metrics over action tokens: ``value_loss``, ``explained_variance``
        (1 - Var[R - V] / Var[R], population variances; 0.0 when the returns are constant up to
        a relative 1e-6 (float noise of a GAE with lambda=1 must not blow it up),
        Var[R] = 0, or there is no action token), ``value_mean``, ``return_mean``, and
        ``vf_clipfrac`` (fraction where the clipped term is active) when clipping.
    """
    _check_shapes(mask, values=values, returns=returns)
    m = mask.bool()
    values, returns = _on_actions(m, values, returns)
    per_token = 0.5 * (values - returns) ** 2  # (B, T)
    extra = {}
    if clip is not None:
        if old_values is None:
            raise ValueError("value clipping needs old_values")
        _check_shapes(mask, old_values=old_values)
        if not clip > 0:
            raise ValueError(f"clip must be > 0, got {clip}")
        (old_values,) = _on_actions(m, old_values)
        v_clipped = old_values + (values - old_values).clamp(-clip, clip)
        per_clipped = 0.5 * (v_clipped - returns) ** 2
        is_clipped = per_clipped > per_token
        per_token = torch.where(is_clipped, per_clipped, per_token)
        extra["vf_clipfrac"] = masked_mean(is_clipped.to(per_token.dtype), m)
    loss = agg_loss(per_token, m, agg, horizon=horizon)
    with torch.no_grad():
        v, r = values.detach(), returns.detach()
        var_r = masked_mean((r - masked_mean(r, m)) ** 2, m)
        err = r - v
        var_err = masked_mean((err - masked_mean(err, m)) ** 2, m)
        r_act = r[m]
        constant = r_act.numel() == 0 or bool(r_act.max() - r_act.min() <= 1e-6 * r_act.abs().max().clamp(min=1))
        metrics = _floats(
            value_loss=loss,
            explained_variance=torch.zeros_like(var_r) if constant else 1 - var_err / var_r,
            value_mean=masked_mean(v, m),
            return_mean=masked_mean(r, m),
            **extra,
        )
    return loss, metrics


# Registry: every member has the signature
#   (logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean", horizon=None)
# where ref_logp is the rollout (behaviour) log-prob, so an agent picks its loss by name from its
# recipe and calls it one way. Members that do not use an argument say so. Every member returns the
# shared diagnostics of ``sao_env.algos.diagnostics`` (``DIAGNOSTICS``) besides its own metrics.


def _no_dual_clip(dual_clip: float | None, name: str) -> None:
    if dual_clip is not None:
        raise ValueError(f"dual_clip applies to ppo_clip only, not to {name}")


def _dis(logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean", horizon=None):
    """"dis": ``dis_policy_loss``. DIS already masks out-of-band tokens, so ``dual_clip`` must be None."""
    if dual_clip is not None:
        raise ValueError("dual_clip applies to ppo_clip only; DIS masks out-of-band tokens already")
    return dis_policy_loss(logp, ref_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, agg=agg, horizon=horizon)


def _ppo_clip(logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean", horizon=None):
    """"ppo_clip": ``ppo_clip_loss`` with ref_logp as the old policy."""
    return ppo_clip_loss(
        logp, ref_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, dual_clip=dual_clip, agg=agg,
        horizon=horizon,
    )


def _pg(logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean", horizon=None):
    """"pg": ``policy_gradient_loss``, no correction; the band is not used by the loss, ref_logp only
    feeds the ``ratio_mean`` and ``approx_kl`` diagnostics and the shared ones (``masked_fraction``
    is 0; the band sets ``out_band_low``/``out_band_high``); ``dual_clip`` must be None."""
    if dual_clip is not None:
        raise ValueError("dual_clip applies to ppo_clip only")
    _check_band(eps_low, eps_high)
    loss, metrics = policy_gradient_loss(logp, advantages, mask, agg=agg, horizon=horizon)
    with torch.no_grad():
        m = mask.bool()
        log_ratio = _log_ratio(*_on_actions(m, logp, ref_logp))
        ratio_mean = masked_mean(torch.exp(log_ratio), m)
        metrics |= _floats(ratio_mean=ratio_mean, approx_kl=masked_mean(0.5 * log_ratio**2, m))
        metrics |= _floats(**off_policy_diagnostics(log_ratio, m, torch.zeros_like(m), eps_low=eps_low,
                                                    eps_high=eps_high))
    return loss, metrics


def _tis(logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean", horizon=None):
    """"tis": ``tis_policy_loss``, truncation C = 1 + eps_high; ``dual_clip`` must be None."""
    _no_dual_clip(dual_clip, "tis")
    return tis_policy_loss(logp, ref_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, agg=agg, horizon=horizon)


def _mis_token(logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean", horizon=None):
    """"mis_token": ``mis_token_policy_loss`` (IcePop-style), band [1 - eps_low, 1 + eps_high]; no ``dual_clip``."""
    _no_dual_clip(dual_clip, "mis_token")
    return mis_token_policy_loss(logp, ref_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, agg=agg,
                                 horizon=horizon)


def _mis_seq(logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean", horizon=None):
    """"mis_seq": ``mis_seq_policy_loss``, the band on the sequence ratio; no ``dual_clip``."""
    _no_dual_clip(dual_clip, "mis_seq")
    return mis_seq_policy_loss(logp, ref_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, agg=agg,
                               horizon=horizon)


def _gspo(logp, ref_logp, advantages, mask, *, eps_low, eps_high, dual_clip=None, agg="token_mean", horizon=None):
    """"gspo": ``gspo_policy_loss`` (GSPO-token), clip range of the sequence ratio; no ``dual_clip``."""
    _no_dual_clip(dual_clip, "gspo")
    return gspo_policy_loss(logp, ref_logp, advantages, mask, eps_low=eps_low, eps_high=eps_high, agg=agg,
                            horizon=horizon)


POLICY_LOSSES = {
    "dis": _dis,
    "ppo_clip": _ppo_clip,
    "pg": _pg,
    "tis": _tis,
    "mis_token": _mis_token,
    "mis_seq": _mis_seq,
    "gspo": _gspo,
}


def check_policy_loss(name: str) -> str:
    """``name`` if it is a ``POLICY_LOSSES`` member, else a ValueError naming the known ones (for config validators)."""
    if name not in POLICY_LOSSES:
        raise ValueError(f"unknown policy loss {name!r}; known: {', '.join(POLICY_LOSSES)}")
    return name
