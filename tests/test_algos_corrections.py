"""The off-policy corrections of the loss registry (TIS, token and sequence MIS, GSPO) and the shared
diagnostics: hand-computed cases (arithmetic in comments), every band edge, a reference
implementation (GSPO against its sequence-level formula, k3 against the exact KL) and invariances
(on-policy every correction is the policy gradient; masked tokens do not change the loss)."""

import math

import pytest
import torch

from sao_env.algos import (
    AGG_MODES,
    DIAGNOSTICS,
    POLICY_LOSSES,
    agg_loss,
    dis_policy_loss,
    effective_sample_size,
    gspo_policy_loss,
    mis_seq_policy_loss,
    mis_token_policy_loss,
    off_policy_diagnostics,
    policy_gradient_loss,
    ppo_clip_loss,
    sequence_log_ratio,
    tis_policy_loss,
)

F64 = torch.float64


def row(*xs):
    return torch.tensor([xs], dtype=F64)


def close(a, b, tol=1e-10):
    return torch.allclose(torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), atol=tol, rtol=tol)


def randn(B, T, seed, scale=1.0):
    return scale * torch.randn(B, T, generator=torch.Generator().manual_seed(seed), dtype=F64)


def turn_mask(B, T, seed):
    """[B, T] action masks with multi-turn rows and one row without action tokens."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(B, T, generator=g) < 0.7
    m[0] = False
    m[1, :2] = True
    return m


def ratios_row(r, base=-2.0):
    """(logp with grad, rollout_logp) for one row whose token ratios are ``r``."""
    logp = (base + torch.tensor([r], dtype=F64).log()).requires_grad_()
    return logp, torch.full((1, len(r)), base, dtype=F64)


def exact_edges(lo, hi):
    """Ratios lying exactly on the band edges: r = exp(log x) as the losses compute it, and the eps
    that put 1 - eps_low and 1 + eps_high exactly there (Sterbenz: the subtractions are exact)."""
    r = torch.tensor([lo, hi], dtype=F64).log().exp()
    return r, 1 - r[0].item(), r[1].item() - 1


# ---------------------------------------------------------------- TIS


def test_tis_hand():
    # r = [0.5, 1, 1.5, 3], A = [1, -1, 2, 1], eps_high = 1 -> C = 2: w = min(r, 2) = [0.5, 1, 1.5, 2].
    # loss = mean_t -w A logp with logp = -2 + log r; grad = -w A / 4 = [-0.125, 0.25, -0.75, -0.5].
    r, A = [0.5, 1.0, 1.5, 3.0], row(1, -1, 2, 1)
    logp, rollout = ratios_row(r)
    loss, m = tis_policy_loss(logp, rollout, A, torch.ones(1, 4), eps_low=0.2, eps_high=1.0)
    lp = [-2 + math.log(x) for x in r]
    assert loss.item() == pytest.approx((-0.5 * lp[0] + lp[1] - 3.0 * lp[2] - 2.0 * lp[3]) / 4)
    loss.backward()
    assert close(logp.grad, [[-0.125, 0.25, -0.75, -0.5]])
    # r = 3 > C truncated: 1/4; out of the band (0.8, 2): r = 0.5 below, r = 3 above.
    assert m["tis_truncated"] == m["masked_fraction"] == pytest.approx(0.25)
    assert m["out_band_low"] == pytest.approx(0.25) and m["out_band_high"] == pytest.approx(0.25)
    # ratio_mean 6/4; ESS of the raw ratios (sum r)^2 / sum r^2 = 36 / (0.25 + 1 + 2.25 + 9) = 2.88.
    assert m["ratio_mean"] == pytest.approx(1.5) and m["ratio_max"] == pytest.approx(3.0)
    assert m["ess_token"] == pytest.approx(2.88) and m["ess_token_frac"] == pytest.approx(0.72)
    assert m["ess_seq"] == pytest.approx(1.0) and m["ess_seq_frac"] == pytest.approx(1.0)  # one sequence
    # logp_gap = mean |log r|; k3 = mean (r - 1 - log r).
    assert m["logp_gap"] == pytest.approx((math.log(2) + math.log(1.5) + math.log(3)) / 4)
    assert m["kl_k3"] == pytest.approx(((-0.5 + math.log(2)) + (0.5 - math.log(1.5)) + (2 - math.log(3))) / 4)


def test_tis_at_the_truncation_edge():
    # r exactly C = 1 + eps_high: weight C = r (not counted as truncated, strict r > C); the next float
    # above C is truncated to C and counted. A = 1, N = 2: grad = -w / 2.
    r, _, eps_high = exact_edges(0.5, 1.5)
    above = torch.nextafter(r[1], torch.tensor(10.0, dtype=F64))
    logp = torch.stack([r[1], above]).log()[None].clone().requires_grad_()
    loss, m = tis_policy_loss(logp, torch.zeros(1, 2, dtype=F64), row(1, 1), torch.ones(1, 2), eps_low=0.5,
                              eps_high=eps_high)
    loss.backward()
    assert logp.grad[0, 0].item() == -1.5 / 2 and logp.grad[0, 1].item() == -1.5 / 2
    assert m["tis_truncated"] == 0.5 and m["masked_fraction"] == 0.5 and m["out_band_high"] == 0.5


def test_tis_with_a_cap_above_every_ratio_is_plain_importance_sampling():
    mask, rollout, adv = turn_mask(5, 9, 0), randn(5, 9, 1) - 2, randn(5, 9, 2)
    logp = (rollout + randn(5, 9, 3, scale=0.5)).requires_grad_()
    loss, m = tis_policy_loss(logp, rollout, adv, mask, eps_low=0.5, eps_high=1e6)
    ref = agg_loss(-torch.exp(logp - rollout).detach() * adv * logp, mask, "token_mean")
    assert close(loss, ref) and m["tis_truncated"] == 0.0


# ---------------------------------------------------------------- MIS, token level (IcePop)


def test_mis_token_hand():
    # Band [1 - 0.3, 1 + 1] = [0.7, 2]: r = [0.25, 0.9, 1.5, 4] keeps 0.9 and 1.5, whatever A's sign.
    # w = [0, 0.9, 1.5, 0], A = [1, 2, -1, 1]; grad = -w A / 4 = [0, -0.45, 0.375, 0].
    r, A = [0.25, 0.9, 1.5, 4.0], row(1, 2, -1, 1)
    logp, rollout = ratios_row(r)
    loss, m = mis_token_policy_loss(logp, rollout, A, torch.ones(1, 4), eps_low=0.3, eps_high=1.0)
    assert loss.item() == pytest.approx((-1.8 * (-2 + math.log(0.9)) + 1.5 * (-2 + math.log(1.5))) / 4)
    loss.backward()
    assert close(logp.grad, [[0, -0.45, 0.375, 0]])
    assert m["masked_fraction"] == pytest.approx(0.5)
    assert m["out_band_low"] == pytest.approx(0.25) and m["out_band_high"] == pytest.approx(0.25)
    assert m["ratio_mean"] == pytest.approx(6.65 / 4) and m["ratio_max"] == pytest.approx(4.0)


def test_mis_token_band_is_inclusive_where_dis_is_strict():
    # r exactly 0.75 = 1 - eps_low and 1.5 = 1 + eps_high: MIS keeps both (grad -r A / N, A = 1, N = 4),
    # DIS masks both; the next floats outside are masked by MIS too.
    r, eps_low, eps_high = exact_edges(0.75, 1.5)
    below = torch.nextafter(r[0], torch.tensor(0.0, dtype=F64))
    above = torch.nextafter(r[1], torch.tensor(10.0, dtype=F64))
    ratios = torch.stack([r[0], r[1], below, above])
    logp = ratios.log()[None].clone().requires_grad_()
    rollout, A, mask = torch.zeros(1, 4, dtype=F64), row(1, 1, 1, 1), torch.ones(1, 4)
    loss, m = mis_token_policy_loss(logp, rollout, A, mask, eps_low=eps_low, eps_high=eps_high)
    loss.backward()
    assert logp.grad[0].tolist() == [-0.75 / 4, -1.5 / 4, 0.0, 0.0]
    assert m["masked_fraction"] == 0.5 and m["out_band_low"] == 0.25 and m["out_band_high"] == 0.25
    _, dis = dis_policy_loss(logp, rollout, A, mask, eps_low=eps_low, eps_high=eps_high)
    assert dis["dis_masked"] == 1.0 and dis["masked_fraction"] == 1.0


# ---------------------------------------------------------------- MIS, sequence level


def seq_case():
    # Three sequences, rollout_logp = -1, N = 7 action tokens:
    #   row 0: r = [2, 0.5]       s = sqrt(1)     = 1    kept,   A = [1, -1]
    #   row 1: r = [2, 2, 2]      s = 2                  masked, A = [1, 1, 1]
    #   row 2: r = [1.21, 1]      s = sqrt(1.21)  = 1.1  kept,   A = [2, 2]   (band [0.5, 1.5])
    r = torch.tensor([[2.0, 0.5, 1.0], [2.0, 2.0, 2.0], [1.21, 1.0, 1.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    logp = (-1 + r.log()).requires_grad_()
    A = torch.tensor([[1.0, -1.0, 0.0], [1.0, 1.0, 1.0], [2.0, 2.0, 0.0]], dtype=F64)
    return logp, torch.full((3, 3), -1.0, dtype=F64), A, mask


def test_mis_seq_hand():
    # w = [1, 1 | 0, 0, 0 | 1.1, 1.1]; loss = sum -w A logp / 7; grad = -w A / 7.
    logp, rollout, A, mask = seq_case()
    loss, m = mis_seq_policy_loss(logp, rollout, A, mask, eps_low=0.5, eps_high=0.5)
    lp = lambda x: -1 + math.log(x)  # noqa: E731
    expected = (-lp(2.0) + lp(0.5) - 2.2 * lp(1.21) - 2.2 * lp(1.0)) / 7
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    assert close(logp.grad, [[-1 / 7, 1 / 7, 0], [0, 0, 0], [-2.2 / 7, -2.2 / 7, 0]])
    assert m["seq_masked"] == pytest.approx(1 / 3) and m["masked_fraction"] == pytest.approx(3 / 7)
    assert m["seq_ratio_mean"] == pytest.approx(4.1 / 3)
    # ESS over sequences: (1 + 2 + 1.1)^2 / (1 + 4 + 1.21) = 16.81 / 6.21; over tokens:
    # (2 + 0.5 + 6 + 1.21 + 1)^2 / (4 + 0.25 + 12 + 1.4641 + 1) = 10.71^2 / 18.7141.
    assert m["ess_seq"] == pytest.approx(16.81 / 6.21) and m["ess_seq_frac"] == pytest.approx(16.81 / 6.21 / 3)
    assert m["ess_token"] == pytest.approx(10.71**2 / 18.7141)


def test_mis_seq_band_edges_are_inclusive():
    # Rows of two equal log-ratios: their mean is exact, so s lands exactly on an edge.
    r, eps_low, eps_high = exact_edges(0.75, 1.5)
    below = torch.nextafter(r[0], torch.tensor(0.0, dtype=F64))
    s = torch.stack([r[0], r[1], below])
    logp = s.log()[:, None].expand(3, 2).clone().requires_grad_()
    loss, m = mis_seq_policy_loss(logp, torch.zeros(3, 2, dtype=F64), torch.ones(3, 2, dtype=F64),
                                  torch.ones(3, 2), eps_low=eps_low, eps_high=eps_high)
    loss.backward()
    assert logp.grad.tolist() == [[-0.75 / 6] * 2, [-1.5 / 6] * 2, [0.0, 0.0]]
    assert m["seq_masked"] == pytest.approx(1 / 3) and m["masked_fraction"] == pytest.approx(1 / 3)


# ---------------------------------------------------------------- GSPO


def test_gspo_hand():
    # Clip range [0.95, 1.05] on s_i, A constant per sequence, agg = seq_mean_token_mean:
    #   row 0: r = [1.21, 1]     s = 1.1,  A = +1: max(-1.1, -1.05) = -1.05  clipped, grad 0
    #   row 1: r = [0.81, 1]     s = 0.9,  A = +1: max(-0.9, -0.95) = -0.9   unclipped
    #   row 2: r = [1.02] * 3    s = 1.02, A = -2: max(2.04, 2.04)  = 2.04   unclipped (a tie is not a clip)
    # loss = (-1.05 - 0.9 + 2.04) / 3 = 0.03; grad_t = -A s / (n_row * 3): row 1 -0.9/6 = -0.15,
    # row 2 2.04/9.
    r = torch.tensor([[1.21, 1.0, 1.0], [0.81, 1.0, 1.0], [1.02, 1.02, 1.02]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    logp = (-1 + r.log()).requires_grad_()
    A = torch.tensor([[1.0] * 3, [1.0] * 3, [-2.0] * 3], dtype=F64)
    loss, m = gspo_policy_loss(logp, torch.full((3, 3), -1.0, dtype=F64), A, mask, eps_low=0.05, eps_high=0.05,
                               agg="seq_mean_token_mean")
    assert loss.item() == pytest.approx(0.03)
    loss.backward()
    assert close(logp.grad, [[0, 0, 0], [-0.15, -0.15, 0], [2.04 / 9] * 3])
    assert m["pg_clipfrac"] == m["masked_fraction"] == pytest.approx(2 / 7)
    assert m["seq_ratio_mean"] == pytest.approx(3.02 / 3)


def test_gspo_clip_edge_keeps_the_gradient():
    # s exactly 1 + eps_high with A > 0: -A s = -A clip(s), not clipped (gradient -A s / N); the next float
    # above is clipped (gradient 0). Single-token rows: s = r.
    r, eps_low, eps_high = exact_edges(0.75, 1.5)
    above = torch.nextafter(r[1], torch.tensor(10.0, dtype=F64))
    logp = torch.stack([r[1], above]).log()[:, None].clone().requires_grad_()
    loss, m = gspo_policy_loss(logp, torch.zeros(2, 1, dtype=F64), torch.ones(2, 1, dtype=F64), torch.ones(2, 1),
                               eps_low=eps_low, eps_high=eps_high)
    loss.backward()
    assert logp.grad.tolist() == [[-1.5 / 2], [0.0]] and m["masked_fraction"] == 0.5


@pytest.mark.parametrize("seed", range(4))
def test_gspo_token_is_gspo_with_sequence_advantages(seed):
    # Reference: GSPO's own objective, mean_i max(-A_i s_i, -A_i clip(s_i)), s_i = exp(mean_t (logp - ref))
    # differentiated through s_i, equals GSPO-token under seq_mean_token_mean with A constant per row.
    B, T = 6, 11
    mask, ref = turn_mask(B, T, seed), randn(B, T, seed + 1) - 2
    logp0 = ref + randn(B, T, seed + 2, scale=0.15)
    A_B = randn(B, 1, seed + 3)[:, 0]
    lp1, lp2 = logp0.clone().requires_grad_(), logp0.clone().requires_grad_()
    loss, _ = gspo_policy_loss(lp1, ref, A_B[:, None].expand(B, T), mask, eps_low=0.03, eps_high=0.04,
                               agg="seq_mean_token_mean")
    has = mask.any(-1)
    s = torch.exp(torch.where(mask, lp2 - ref, 0).sum(-1) / mask.sum(-1).clamp(min=1))
    seq = torch.maximum(-A_B * s, -A_B * s.clamp(0.97, 1.04))
    ref_loss = seq[has].mean()
    loss.backward(), ref_loss.backward()
    assert close(loss, ref_loss) and close(lp1.grad, lp2.grad)


# ---------------------------------------------------------------- every correction


CORRECTIONS = ("dis", "ppo_clip", "tis", "mis_token", "mis_seq", "gspo")


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("name", CORRECTIONS)
def test_on_policy_every_correction_is_the_policy_gradient(name, agg):
    # r = 1 everywhere: every weight is 1, nothing is clipped or masked, the gradient is pg's; the
    # weighting losses (-w A logp) have pg's value too, the surrogate ones (PPO, GSPO) -A.
    mask, logp0, adv = turn_mask(5, 9, 0), randn(5, 9, 1) - 2, randn(5, 9, 2)
    lp1, lp2 = logp0.clone().requires_grad_(), logp0.clone().requires_grad_()
    loss, m = POLICY_LOSSES[name](lp1, logp0, adv, mask, eps_low=0.2, eps_high=0.28, agg=agg, horizon=9)
    pg, _ = policy_gradient_loss(lp2, adv, mask, agg=agg, horizon=9)
    loss.backward(), pg.backward()
    assert close(lp1.grad, lp2.grad)
    surrogate = agg_loss(-adv, mask, agg, horizon=9)
    assert close(loss, surrogate if name in ("ppo_clip", "gspo") else pg)
    n_tok, n_seq = mask.sum().item(), mask.any(-1).sum().item()
    assert m["masked_fraction"] == 0.0 and m["kl_k3"] == 0.0 and m["logp_gap"] == 0.0
    assert m["ess_token"] == pytest.approx(n_tok) and m["ess_seq"] == pytest.approx(n_seq)
    assert m["ess_token_frac"] == pytest.approx(1.0) and m["ess_seq_frac"] == pytest.approx(1.0)


@pytest.mark.parametrize("name", ("dis", "mis_token", "tis"))
def test_masked_tokens_do_not_change_the_loss(name):
    # Tokens a loss masks (or, for TIS, truncates) may change ratio and advantage within their region
    # without changing the loss's value (TIS: its weight stays C, the gradient -C A scales with A) nor the
    # gradient on every other token.
    eps_low, eps_high = 0.3, 1.0
    mask, rollout, adv = turn_mask(5, 9, 4), randn(5, 9, 5) - 2, randn(5, 9, 6)
    logp = rollout + randn(5, 9, 7, scale=0.8)
    ratio = torch.exp(logp - rollout)
    out = mask & ((ratio > 1 + eps_high) | (ratio < 1 - eps_low if name != "tis" else False))
    assert out.any() and (mask & ~out).any()
    lp1 = logp.clone().requires_grad_()
    loss1, _ = POLICY_LOSSES[name](lp1, rollout, adv, mask, eps_low=eps_low, eps_high=eps_high)
    loss1.backward()
    # Move the out-of-band tokens further out (both logp and rollout_logp: their logp is unchanged).
    rollout2 = torch.where(out & (ratio > 1), rollout - 3.0, torch.where(out, rollout + 3.0, rollout))
    adv2 = adv if name == "tis" else torch.where(out, 100 * adv, adv)
    lp2 = logp.clone().requires_grad_()
    loss2, _ = POLICY_LOSSES[name](lp2, rollout2, adv2, mask, eps_low=eps_low, eps_high=eps_high)
    loss2.backward()
    assert close(loss1, loss2) and close(lp1.grad, lp2.grad)


def test_masked_sequence_does_not_change_the_loss():
    logp, rollout, A, mask = seq_case()
    loss1, _ = mis_seq_policy_loss(logp, rollout, A, mask, eps_low=0.5, eps_high=0.5)
    A2 = A.clone()
    A2[1] = -50.0  # row 1 (s = 2) is masked
    loss2, _ = mis_seq_policy_loss(logp, rollout - torch.tensor([[0.0], [1.0], [0.0]], dtype=F64), A2, mask,
                                   eps_low=0.5, eps_high=0.5)
    assert close(loss1, loss2)


def test_masked_fraction_is_each_loss_own_count():
    mask, rollout, adv = turn_mask(5, 9, 8), randn(5, 9, 9) - 2, randn(5, 9, 10)
    logp = rollout + randn(5, 9, 11, scale=0.8)
    _, dis = dis_policy_loss(logp, rollout, adv, mask, eps_low=0.3, eps_high=1.0)
    assert dis["masked_fraction"] == pytest.approx(dis["dis_masked"]) and dis["dis_masked"] > 0
    _, ppo = ppo_clip_loss(logp, rollout, adv, mask, eps_low=0.2, eps_high=0.28, dual_clip=2.0)
    assert ppo["masked_fraction"] == pytest.approx(ppo["pg_clipfrac"] + ppo["pg_clipfrac_lower"])
    assert ppo["pg_clipfrac_lower"] > 0
    assert POLICY_LOSSES["pg"](logp, rollout, adv, mask, eps_low=0.3, eps_high=1.0)[1]["masked_fraction"] == 0.0


# ---------------------------------------------------------------- diagnostics


def test_effective_sample_size():
    valid = torch.tensor([True, True, True, False])
    assert effective_sample_size(torch.tensor([1.0, 1.0, 1.0, 9.0]), valid).item() == 3.0  # uniform: n
    assert effective_sample_size(torch.tensor([0.2, 0.2, 0.2, 9.0]), valid).item() == pytest.approx(3.0)
    assert effective_sample_size(torch.tensor([0.0, 5.0, 0.0, 9.0]), valid).item() == 1.0  # one weight
    # (1 + 2 + 3)^2 / (1 + 4 + 9) = 36 / 14
    assert effective_sample_size(torch.tensor([1.0, 2.0, 3.0, 9.0]), valid).item() == pytest.approx(36 / 14)
    assert effective_sample_size(torch.tensor([0.0, 0.0, 0.0, 9.0]), valid).item() == 0.0
    assert effective_sample_size(torch.ones(4), torch.zeros(4, dtype=torch.bool)).item() == 0.0


def test_uniform_ratios_give_ess_of_tokens_and_sequences():
    # Every ratio 2 (not 1): ESS is scale-free, so uniform weights give N tokens and M sequences.
    mask = turn_mask(6, 8, 12)
    log_ratio = torch.full((6, 8), math.log(2.0), dtype=F64)
    d = off_policy_diagnostics(log_ratio, mask, torch.zeros_like(mask), eps_low=0.2, eps_high=0.28)
    assert d["ess_token"].item() == pytest.approx(mask.sum().item())
    assert d["ess_seq"].item() == pytest.approx(mask.any(-1).sum().item())
    assert d["out_band_high"].item() == 1.0 and d["logp_gap"].item() == pytest.approx(math.log(2))


def test_k3_and_logp_gap_hand_and_against_the_exact_kl():
    # r = [0.5, 2]: k3 = ((0.5 - 1 - log 0.5) + (2 - 1 - log 2)) / 2 = 0.25; gap = log 2.
    d = off_policy_diagnostics(torch.tensor([[math.log(0.5), math.log(2.0)]], dtype=F64), torch.ones(1, 2, dtype=torch.bool),
                               torch.zeros(1, 2, dtype=torch.bool), eps_low=0.5, eps_high=1.0)
    assert d["kl_k3"].item() == pytest.approx(0.25) and d["logp_gap"].item() == pytest.approx(math.log(2))
    # Edges are not outside: r = 0.5 = 1 - eps_low and r = 2 = 1 + eps_high.
    assert d["out_band_low"].item() == 0.0 and d["out_band_high"].item() == 0.0
    # Reference: tokens drawn from q in exact proportions (q = [1/2, 1/4, 1/4] as 2, 1, 1 tokens) give
    # mean k3 = sum_y q(y) ((p/q - 1) - log(p/q)) = KL(q || p) exactly.
    q, p = torch.tensor([0.5, 0.25, 0.25], dtype=F64), torch.tensor([0.2, 0.3, 0.5], dtype=F64)
    tokens = torch.tensor([0, 0, 1, 2])
    log_ratio = (p.log() - q.log())[tokens][None]
    d = off_policy_diagnostics(log_ratio, torch.ones(1, 4, dtype=torch.bool), torch.zeros(1, 4, dtype=torch.bool),
                               eps_low=0.5, eps_high=1.0)
    assert d["kl_k3"].item() == pytest.approx((q * (q / p).log()).sum().item(), rel=1e-12)


def test_sequence_log_ratio_is_the_mean_over_action_tokens():
    log_ratio = torch.tensor([[0.1, 9.0, 0.3], [5.0, 5.0, 5.0]], dtype=F64)
    mask = torch.tensor([[1, 0, 1], [0, 0, 0]], dtype=torch.bool)
    log_s, has = sequence_log_ratio(log_ratio, mask)
    assert close(log_s, [0.2, 0.0]) and has.tolist() == [True, False]  # (0.1 + 0.3) / 2; no action: 0


def test_every_member_reports_every_diagnostic_and_nothing_reaches_them_from_non_actions():
    mask, rollout, adv = turn_mask(5, 9, 13), randn(5, 9, 14) - 2, randn(5, 9, 15)
    logp = rollout + randn(5, 9, 16, scale=0.5)
    nan = torch.full_like(logp, float("nan"))
    for name, fn in POLICY_LOSSES.items():
        _, m = fn(logp, rollout, adv, mask, eps_low=0.2, eps_high=0.5)
        _, m2 = fn(torch.where(mask, logp, nan), torch.where(mask, rollout, nan), adv, mask, eps_low=0.2, eps_high=0.5)
        assert set(DIAGNOSTICS) <= set(m) and m == pytest.approx(m2), name
        empty = fn(logp, rollout, adv, torch.zeros_like(mask), eps_low=0.2, eps_high=0.5)[1]
        assert all(empty[k] == 0.0 for k in DIAGNOSTICS), name


def test_unknown_loss_and_dual_clip_are_refused():
    from pydantic import ValidationError

    from sao_env.agents.grpo import GRPOConfig

    with pytest.raises(ValidationError, match="unknown policy loss 'icepop'; known: dis, ppo_clip, pg, tis"):
        GRPOConfig(loss="icepop")
    assert GRPOConfig(loss="mis_seq").loss == "mis_seq"
    x = torch.zeros(1, 2, dtype=F64)
    for name in ("tis", "mis_token", "mis_seq", "gspo"):
        with pytest.raises(ValueError, match=f"dual_clip applies to ppo_clip only, not to {name}"):
            POLICY_LOSSES[name](x, x, x, torch.ones(1, 2), eps_low=0.2, eps_high=0.2, dual_clip=2.0)
