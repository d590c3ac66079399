"""Off-policy diagnostics that every policy loss of the registry reports under the same names.

Shape contract as in ``losses.py``: tensors are ``[B, T]``, ``mask`` marks action tokens and only
those count. ``log_ratio[b, t] = logp_theta - logp_rollout`` is detached; r_t = exp(log_ratio) is
the token importance ratio between the policy being trained and the one that sampled (staleness
and rollout/trainer mismatch together). Values are 0-dim tensors; with no action token each is 0.

Names (unprefixed; agents log them as ``actor/<name>``, docs/metrics.md):
    masked_fraction   share of action tokens the loss in use clipped, truncated or masked
    ess_token         Kish's effective sample size of the token ratios, (sum r)^2 / sum r^2
    ess_token_frac    ess_token / N (N action tokens): 1 for uniform ratios
    ess_seq           the same over sequences, with GSPO's sequence ratio s_i (``sequence_log_ratio``)
    ess_seq_frac      ess_seq / (sequences with an action token)
    kl_k3             k3 estimate of KL(pi_rollout || pi_theta): mean of (r - 1) - log r
    logp_gap          mean |logp_rollout - logp_theta|
    out_band_low      share of tokens with r < 1 - eps_low (strictly outside the closed band)
    out_band_high     share of tokens with r > 1 + eps_high
The ESS values are those of the raw ratios, before any clip or mask: they say how far the batch
is from the learner whatever the loss then does with it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch

from sao_env.algos.advantages import masked_mean

Tensor = torch.Tensor

DIAGNOSTICS = ("masked_fraction", "ess_token", "ess_token_frac", "ess_seq", "ess_seq_frac", "kl_k3", "logp_gap",
               "out_band_low", "out_band_high")


def effective_sample_size(w: Tensor, valid: Tensor) -> Tensor:
    """Kish's effective sample size (Kish 1965, "Survey Sampling"): (sum w)^2 / sum w^2 over ``valid``.

    n equal positive weights give n; one non-zero weight among many gives 1. 0 when there is no
    valid entry or every weight there is 0.

    Args:
        w: any shape, non-negative weights.
        valid: bool, same shape: the entries that count.
    """
    w = torch.where(valid, w, 0)
    sum_w, sum_w2 = w.sum(), (w**2).sum()
    return torch.where(sum_w2 > 0, sum_w**2 / torch.where(sum_w2 > 0, sum_w2, 1), 0)


def sequence_log_ratio(log_ratio: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per row, the mean over its action tokens of log r_t: log of GSPO's sequence ratio.

    GSPO (Zheng et al. 2025, arXiv 2507.18071, eq. 7): s_i = (pi_theta(y_i|x) / pi_old(y_i|x))^(1/|y_i|)
    = exp(1/|y_i| sum_t log r_{i,t}), the geometric mean of the token ratios: length-normalised, so a
    long answer's ratio does not explode or vanish the way the product of its token ratios does.

    Args:
        log_ratio: [B, T], zero (or anything) outside the action tokens.
        mask: [B, T] bool, action tokens.
    Returns:
        (log_s_B, has_action_B): [B] mean log-ratio (0 for a row without an action token) and [B] bool.
    """
    n_B = mask.sum(-1)  # (B,)
    log_s_B = torch.where(mask, log_ratio, 0).sum(-1) / n_B.clamp(min=1)
    return log_s_B, n_B > 0


def off_policy_diagnostics(
    log_ratio: Tensor, mask: Tensor, masked: Tensor, *, eps_low: float, eps_high: float
) -> dict[str, Tensor]:
    """The diagnostics above for one batch (names in the module docstring and ``DIAGNOSTICS``).

    kl_k3 is Schulman's k3 estimator ("Approximating KL divergence", 2020): with tokens drawn from
    q = pi_rollout and r = p/q for p = pi_theta, (r - 1) - log r is non-negative and unbiased for
    KL(q || p), since E_q[r - 1] = 0 and E_q[-log r] = KL(q || p).

    Args:
        log_ratio: [B, T] detached log r_t (logp_theta - logp_rollout).
        mask: [B, T] bool, action tokens.
        masked: [B, T] bool, tokens the loss clipped, truncated or masked (its own definition).
        eps_low, eps_high: the band (1 - eps_low, 1 + eps_high) the loss was given; the out-of-band
            shares count tokens strictly outside its closed form [1 - eps_low, 1 + eps_high].
    """
    with torch.no_grad():
        log_ratio = torch.where(mask, log_ratio, 0)
        ratio = torch.exp(log_ratio)
        log_s_B, has_B = sequence_log_ratio(log_ratio, mask)
        n_tok, n_seq = mask.sum().clamp(min=1), has_B.sum().clamp(min=1)
        ess_token = effective_sample_size(ratio, mask)
        ess_seq = effective_sample_size(torch.exp(log_s_B), has_B)
        one = lambda x: masked_mean(x.to(ratio.dtype), mask)  # noqa: E731
        return {
            "masked_fraction": one(masked & mask),
            "ess_token": ess_token,
            "ess_token_frac": ess_token / n_tok,
            "ess_seq": ess_seq,
            "ess_seq_frac": ess_seq / n_seq,
            "kl_k3": one(ratio - 1 - log_ratio),
            "logp_gap": one(log_ratio.abs()),
            "out_band_low": one(ratio < 1 - eps_low),
            "out_band_high": one(ratio > 1 + eps_high),
        }


def explained_variance(values: Tensor, returns: Tensor, valid: Tensor) -> float | None:
    """1 - Var(returns - values) / Var(returns) over the ``valid`` entries (population variances).

    The share of the returns' variance the values account for (as in stable-baselines3's
    ``explained_variance`` and PPO implementations' logs): 1 for perfect values, 0 for values as good as
    the returns' mean, negative for worse. None where fewer than two entries are valid or the returns
    do not vary there (nothing to explain).
    """
    with torch.no_grad():
        v = values[valid].double()
        r = returns[valid].double()
        if r.numel() < 2:
            return None
        var_r = torch.var(r, unbiased=False).item()
        if not math.isfinite(var_r) or var_r <= 1e-12:
            return None
        return 1.0 - torch.var(r - v, unbiased=False).item() / var_r


def value_diagnostics(values: Tensor, returns: Tensor, mask: Tensor,
                      classes: Sequence[Hashable | None] | None = None) -> dict[str, float]:
    """How well a critic's values predict the realised returns, on one batch (unprefixed names; the
    critic agents log them as ``critic/<name>``, docs/metrics.md):

        explained_variance              ``explained_variance`` over every action token of the batch
                                        (V(s_t) against the return R_t from token t on)
        explained_variance_first_token  the same with one entry per episode: V(s_0) at its first action
                                        token against its return R_0
        value_error_first_token         mean over episodes of |V(s_0) - R_0|
        explained_variance/<class>      ``explained_variance`` over the action tokens of the episodes of
                                        that class (``classes[b]``, None: no class)

    Episodes whose return is not finite (a NaN reward) are left out. A share whose returns do not vary
    (every episode of a class solved, say) is left out of the dict rather than logged as a number.

    Args:
        values: [B, T], V(state just before token t), as the actor's advantages used them.
        returns: [B, T], the critic's targets (with gamma = lambda = 1, the outcome reward on every action
            token).
        mask: [B, T] bool, action tokens.
        classes: B labels, or None.
    """
    with torch.no_grad():
        m = mask.bool()
        finite_B = torch.where(m, returns, 0).isfinite().all(-1) & torch.where(m, values, 0).isfinite().all(-1)
        valid = m & finite_B[:, None]
        has_B = valid.any(-1)
        first_T = torch.argmax(valid.int(), dim=-1)  # (B,) first action token of each row
        rows = torch.arange(m.shape[0])
        v0, r0 = values[rows, first_T][has_B], returns[rows, first_T][has_B]
        out: dict[str, float] = {}
        for name, share in (("explained_variance", explained_variance(values, returns, valid)),
                            ("explained_variance_first_token", explained_variance(v0, r0, torch.ones_like(v0, dtype=torch.bool)))):
            if share is not None:
                out[name] = share
        if v0.numel():
            out["value_error_first_token"] = (v0.double() - r0.double()).abs().mean().item()
        if classes is not None:
            if len(classes) != m.shape[0]:
                raise ValueError(f"{len(classes)} classes for {m.shape[0]} rows")
            for label in sorted({c for c in classes if c is not None}, key=str):
                in_class = torch.tensor([c == label for c in classes], device=m.device)
                share = explained_variance(values, returns, valid & in_class[:, None])
                if share is not None:
                    out[f"explained_variance/{label}"] = share
        return out
