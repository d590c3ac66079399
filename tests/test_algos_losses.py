"""sao_env.algos.losses, tested three ways: hand-computed cases (arithmetic in comments),
pure-Python loop references over a grid of shapes (losses, gradients and metrics), and
invariances."""

import inspect
import math

import pytest
import torch

from sao_env.algos import (
    AGG_MODES,
    DIAGNOSTICS,
    POLICY_LOSSES,
    agg_loss,
    dis_policy_loss,
    gspo_policy_loss,
    mis_seq_policy_loss,
    mis_token_policy_loss,
    policy_gradient_loss,
    ppo_clip_loss,
    tis_policy_loss,
    value_loss,
)

F64 = torch.float64
SHAPES = [(B, T) for B in (1, 3, 5) for T in (1, 4, 9, 17)]
BANDS = [(0.3, 5.0), (0.8, 3.0), (0.2, 0.28)]  # SAO reasoning, SAO coding, DAPO-like


def turn_mask(B, T, seed):
    """Random [B, T] action masks: multi-turn rows (action spans separated by observation spans)
    and rows without any action token."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for b in range(B):
        if torch.randint(0, 4, (1,), generator=g).item() == 0 and B > 1:
            rows.append([False] * T)
            continue
        row, act = [], bool(torch.randint(0, 2, (1,), generator=g).item())
        while len(row) < T:
            row += [act] * int(torch.randint(1, 5, (1,), generator=g).item())
            act = not act
        rows.append(row[:T])
    return torch.tensor(rows, dtype=torch.bool)


def randn(B, T, seed, scale=1.0):
    return scale * torch.randn(B, T, generator=torch.Generator().manual_seed(seed), dtype=F64)


def close(a, b, tol=1e-10):
    return torch.allclose(torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), atol=tol, rtol=tol)


def row(*xs):
    return torch.tensor([xs], dtype=F64)


# ---------------------------------------------------------------- loop references


def agg_reference(per_token, mask, mode, horizon=None):
    B, T = len(mask), len(mask[0])
    rows = [[per_token[b][t] for t in range(T) if mask[b][t]] for b in range(B)]
    total, n = sum(sum(r) for r in rows), sum(len(r) for r in rows)
    nonempty = [r for r in rows if r]
    if mode == "token_mean":
        return total / n if n else 0.0
    if mode == "seq_mean_token_sum_norm":
        return total / (B * (horizon or T))
    if not nonempty:
        return 0.0
    if mode == "seq_mean_token_mean":
        return sum(sum(r) / len(r) for r in nonempty) / len(nonempty)
    return sum(sum(r) for r in nonempty) / len(nonempty)


def agg_weight_reference(mask, mode):
    """d(aggregate)/d(per_token[b][t]) for each token."""
    B, T = len(mask), len(mask[0])
    n_row = [sum(r) for r in mask]
    n, rows = sum(n_row), sum(1 for k in n_row if k)
    w = [[0.0] * T for _ in range(B)]
    for b in range(B):
        for t in range(T):
            if mask[b][t]:
                w[b][t] = {
                    "token_mean": 1 / n,
                    "seq_mean_token_mean": 1 / (n_row[b] * rows),
                    "seq_mean_token_sum": 1 / rows,
                    "seq_mean_token_sum_norm": 1 / (B * T),
                }[mode]
    return w


def dis_reference(logp, rollout_logp, adv, mask, eps_low, eps_high):
    """Per-token loss and d(loss_t)/d(logp_t), plus metrics, token by token."""
    B, T = len(mask), len(mask[0])
    loss, grad = [[0.0] * T for _ in range(B)], [[0.0] * T for _ in range(B)]
    ratios, ws, kl, low, high = [], [], [], 0, 0
    for b in range(B):
        for t in range(T):
            if not mask[b][t]:
                continue
            r = math.exp(logp[b][t] - rollout_logp[b][t])
            w = r if 1 - eps_low < r < 1 + eps_high else 0.0
            loss[b][t], grad[b][t] = -w * adv[b][t] * logp[b][t], -w * adv[b][t]
            ratios.append(r), ws.append(w), kl.append(0.5 * (logp[b][t] - rollout_logp[b][t]) ** 2)
            low, high = low + (r <= 1 - eps_low), high + (r >= 1 + eps_high)
    N = len(ratios)
    sw2 = sum(w * w for w in ws)
    metrics = {
        "dis_masked_low": low / N if N else 0.0,
        "dis_masked_high": high / N if N else 0.0,
        "dis_masked": (low + high) / N if N else 0.0,
        "ratio_mean": sum(ratios) / N if N else 0.0,
        "ratio_max": max(ratios) if N else 0.0,
        "ess": sum(ws) ** 2 / (N * sw2) if sw2 > 0 else 0.0,
        "approx_kl": sum(kl) / N if N else 0.0,
    }
    return loss, grad, metrics


def ppo_reference(logp, old_logp, adv, mask, eps_low, eps_high, dual_clip):
    B, T = len(mask), len(mask[0])
    loss, grad = [[0.0] * T for _ in range(B)], [[0.0] * T for _ in range(B)]
    clipped_n, capped_n, ratios, kl = 0, 0, [], []
    for b in range(B):
        for t in range(T):
            if not mask[b][t]:
                continue
            A, r = adv[b][t], math.exp(logp[b][t] - old_logp[b][t])
            unclipped, clipped = -A * r, -A * min(max(r, 1 - eps_low), 1 + eps_high)
            if clipped > unclipped:
                value, g, clipped_n = clipped, 0.0, clipped_n + 1
            else:
                value, g = unclipped, -A * r
            if dual_clip is not None and A < 0 and value > -A * dual_clip:
                value, g, capped_n = -A * dual_clip, 0.0, capped_n + 1
            loss[b][t], grad[b][t] = value, g
            ratios.append(r), kl.append(0.5 * (logp[b][t] - old_logp[b][t]) ** 2)
    N = len(ratios)
    metrics = {
        "pg_clipfrac": clipped_n / N if N else 0.0,
        "pg_clipfrac_lower": capped_n / N if N else 0.0,
        "ratio_mean": sum(ratios) / N if N else 0.0,
        "approx_kl": sum(kl) / N if N else 0.0,
    }
    return loss, grad, metrics


def value_reference(values, returns, mask, old_values, clip):
    B, T = len(mask), len(mask[0])
    loss, grad = [[0.0] * T for _ in range(B)], [[0.0] * T for _ in range(B)]
    clipped_n, vs, rs = 0, [], []
    for b in range(B):
        for t in range(T):
            if not mask[b][t]:
                continue
            V, R = values[b][t], returns[b][t]
            loss[b][t], grad[b][t] = 0.5 * (V - R) ** 2, V - R
            if clip is not None:
                d = V - old_values[b][t]
                Vc = old_values[b][t] + min(max(d, -clip), clip)
                if 0.5 * (Vc - R) ** 2 > loss[b][t]:
                    inside = 1.0 if -clip <= d <= clip else 0.0
                    loss[b][t], grad[b][t] = 0.5 * (Vc - R) ** 2, (Vc - R) * inside
                    clipped_n += 1
            vs.append(V), rs.append(R)
    N = len(vs)

    def pvar(xs):
        mu = sum(xs) / len(xs)
        return sum((x - mu) ** 2 for x in xs) / len(xs)

    constant = N == 0 or max(rs) == min(rs)
    metrics = {
        "explained_variance": 0.0 if constant else 1 - pvar([r - v for r, v in zip(rs, vs)]) / pvar(rs),
        "value_mean": sum(vs) / N if N else 0.0,
        "return_mean": sum(rs) / N if N else 0.0,
    }
    if clip is not None:
        metrics["vf_clipfrac"] = clipped_n / N if N else 0.0
    return loss, grad, metrics


def check_against_reference(loss, metrics, x, ref_loss_T, ref_grad_T, ref_metrics, mask, agg, tol=1e-9):
    m = mask.tolist()
    assert close(loss, agg_reference(ref_loss_T, m, agg), tol)
    (grad,) = torch.autograd.grad(loss, x)
    coef = agg_weight_reference(m, agg) if mask.any() else [[0.0] * len(m[0]) for _ in m]
    ref_grad = [[g * c for g, c in zip(gr, cr)] for gr, cr in zip(ref_grad_T, coef)]
    assert close(grad, ref_grad, tol)
    for k, v in ref_metrics.items():
        assert isinstance(metrics[k], float), k
        assert math.isclose(metrics[k], v, rel_tol=1e-6, abs_tol=1e-9), (k, metrics[k], v)


# ---------------------------------------------------------------- agg_loss


def test_agg_loss_hand():
    x = torch.tensor([[1, 2, 3], [4, 5, 6.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert agg_loss(x, m, "token_mean").item() == pytest.approx(7 / 3)  # (1 + 2 + 4) / 3
    assert agg_loss(x, m, "seq_mean_token_mean").item() == pytest.approx(2.75)  # (1.5 + 4) / 2
    assert agg_loss(x, m, "seq_mean_token_sum").item() == pytest.approx(3.5)  # (3 + 4) / 2
    assert agg_loss(x, m, "seq_mean_token_sum_norm").item() == pytest.approx(7 / 6)  # 7 / (2 * 3)
    assert agg_loss(x, m, "seq_mean_token_sum_norm", horizon=7).item() == pytest.approx(0.5)  # 7 / (2 * 7)
    # Second row without action token: left out of the seq means, still counted by B in _norm.
    m = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert agg_loss(x, m, "token_mean").item() == pytest.approx(1.5)  # 3 / 2
    assert agg_loss(x, m, "seq_mean_token_mean").item() == pytest.approx(1.5)  # 1.5 / 1
    assert agg_loss(x, m, "seq_mean_token_sum").item() == pytest.approx(3.0)  # 3 / 1
    assert agg_loss(x, m, "seq_mean_token_sum_norm").item() == pytest.approx(0.5)  # 3 / (2 * 3)


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("B,T", SHAPES)
def test_agg_loss_matches_loop_reference(B, T, mode):
    mask, x = turn_mask(B, T, B * 31 + T), randn(B, T, B + T).requires_grad_()
    loss = agg_loss(x, mask, mode)
    ones = [[1.0] * T for _ in range(B)]
    check_against_reference(loss, {}, x, x.tolist(), ones, {}, mask, mode)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_agg_loss_invariances(mode):
    B, T = 5, 9
    mask, x = turn_mask(B, T, 3), randn(B, T, 4)
    loss = agg_loss(x, mask, mode)
    perm = torch.tensor([3, 0, 4, 1, 2])
    assert close(agg_loss(x[perm], mask[perm], mode), loss)  # row order
    y = torch.where(mask, x, float("nan")).requires_grad_()  # non-action positions ignored, even NaN
    out = agg_loss(y, mask, mode)
    out.backward()
    assert close(out, loss) and torch.isfinite(y.grad).all() and (y.grad[~mask] == 0).all()
    # No action token at all: 0, attached to the graph, zero gradient.
    z = randn(B, T, 5).requires_grad_()
    out = agg_loss(z, torch.zeros(B, T, dtype=torch.bool), mode)
    out.backward()
    assert out.item() == 0.0 and (z.grad == 0).all()


def test_agg_loss_equal_lengths_token_mean_equals_seq_mean():
    x, mask = randn(4, 6, 0), torch.tensor([[1, 1, 0, 1, 0, 0]] * 4)
    assert close(agg_loss(x, mask, "token_mean"), agg_loss(x, mask, "seq_mean_token_mean"))


def test_agg_loss_unknown_mode_names_valid_ones():
    with pytest.raises(ValueError, match="token_mean.*seq_mean_token_sum_norm"):
        agg_loss(torch.zeros(1, 2), torch.ones(1, 2), "mean")


# ---------------------------------------------------------------- DIS


def test_dis_hand():
    # rollout_logp = -2, logp = -2 + log r, r = [0.5, 0.9, 1.0, 1.5, 3.0], A = [1, -1, 2, -2, 1],
    # band (1 - 0.2, 1 + 1.0) = (0.8, 2.0): r=0.5 masked low, r=3.0 masked high, whatever A's sign.
    # w = [0, 0.9, 1, 1.5, 0]; per-token loss = -w A logp; token_mean over N = 5:
    # loss = (-0.9*(-1)*(-2+log .9) - 1*2*(-2) - 1.5*(-2)*(-2+log 1.5)) / 5
    # grad = -w A / 5 = [0, 0.18, -0.4, 0.6, 0]
    r, A = [0.5, 0.9, 1.0, 1.5, 3.0], row(1, -1, 2, -2, 1)
    logp = (-2 + torch.tensor([r], dtype=F64).log()).requires_grad_()
    rollout = torch.full((1, 5), -2.0, dtype=F64)
    loss, metrics = dis_policy_loss(logp, rollout, A, torch.ones(1, 5), eps_low=0.2, eps_high=1.0)
    expected = (0.9 * (-2 + math.log(0.9)) + 4 + 3 * (-2 + math.log(1.5))) / 5
    assert loss.item() == pytest.approx(expected)
    loss.backward()
    assert close(logp.grad, [[0, 0.18, -0.4, 0.6, 0]])
    # masked 1/5 low + 1/5 high; ratio_mean = 6.9/5; ess = 3.4^2 / (5 * (0.81 + 1 + 2.25)) = 11.56 / 20.3
    assert metrics["dis_masked_low"] == pytest.approx(0.2)
    assert metrics["dis_masked_high"] == pytest.approx(0.2)
    assert metrics["dis_masked"] == pytest.approx(0.4) and metrics["ratio_mean"] == pytest.approx(1.38)
    assert metrics["ratio_max"] == pytest.approx(3.0) and metrics["ess"] == pytest.approx(11.56 / 20.3)
    assert metrics["approx_kl"] == pytest.approx(sum(0.5 * math.log(x) ** 2 for x in r) / 5)


def test_dis_band_is_strict():
    # r exactly on either edge is masked: r = 0.75 with eps_low = 0.25, r = 1.5 with eps_high = 0.5
    # (1 - 0.25 and 1 + 0.5 are exact in binary, and so are their logs' exps here by construction).
    lo, hi = torch.tensor(0.75, dtype=F64), torch.tensor(1.5, dtype=F64)
    r = torch.stack([lo.log().exp(), hi.log().exp()])
    eps_low, eps_high = 1 - r[0].item(), r[1].item() - 1  # exact: Sterbenz
    logp = r.log()[None].clone().requires_grad_()
    rollout, A, mask = torch.zeros(1, 2, dtype=F64), row(1, 1), torch.ones(1, 2)
    loss, metrics = dis_policy_loss(logp, rollout, A, mask, eps_low=eps_low, eps_high=eps_high)
    loss.backward()
    assert metrics["dis_masked_low"] == 0.5 and metrics["dis_masked_high"] == 0.5 and (logp.grad == 0).all()


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("r", [0.1, 0.69, 0.71, 1.0, 2.5, 3.99, 4.01, 50.0])
def test_dis_gradient_exact(r, sign):
    # Band (0.7, 4.0). A single kept token among N = 4 gets -w A / N; masked ones exactly 0.
    eps_low, eps_high, N = 0.3, 3.0, 4
    logp = torch.tensor([[math.log(r) - 1.0, -1.0, -1.0, -3.0]], dtype=F64, requires_grad=True)
    # ratios r, 0.5, 5, 1
    rollout = torch.tensor([[-1.0, -1.0 - math.log(0.5), -1.0 - math.log(5.0), -3.0]], dtype=F64)
    A = row(sign * 2.0, sign, -sign, 0.0)
    loss, _ = dis_policy_loss(logp, rollout, A, torch.ones(1, 4), eps_low=eps_low, eps_high=eps_high)
    loss.backward()
    w = r if 0.7 < r < 4.0 else 0.0
    assert logp.grad[0, 0].item() == pytest.approx(-w * sign * 2.0 / N, rel=1e-12, abs=0)
    assert logp.grad[0, 1].item() == 0.0 and logp.grad[0, 2].item() == 0.0  # out of band, either sign
    if w == 0.0:
        assert logp.grad[0, 0].item() == 0.0


@pytest.mark.parametrize("band", BANDS)
@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("B,T", SHAPES)
def test_dis_matches_loop_reference(B, T, agg, band):
    seed = B * 100 + T
    mask, rollout = turn_mask(B, T, seed), randn(B, T, seed + 1) - 2
    logp = (rollout + randn(B, T, seed + 2, scale=1.5)).requires_grad_()  # ratios on both sides of the band
    adv = randn(B, T, seed + 3)
    loss, metrics = dis_policy_loss(logp, rollout, adv, mask, eps_low=band[0], eps_high=band[1], agg=agg)
    ref_T, grad_T, ref_m = dis_reference(logp.tolist(), rollout.tolist(), adv.tolist(), mask.tolist(), *band)
    check_against_reference(loss, metrics, logp, ref_T, grad_T, ref_m, mask, agg)


@pytest.mark.parametrize("agg", AGG_MODES)
def test_dis_at_ratio_one_is_policy_gradient(agg):
    mask, logp0, adv = turn_mask(5, 9, 0), randn(5, 9, 1) - 2, randn(5, 9, 2)
    lp1, lp2 = logp0.clone().requires_grad_(), logp0.clone().requires_grad_()
    dis, metrics = dis_policy_loss(lp1, logp0, adv, mask, eps_low=0.3, eps_high=5.0, agg=agg)
    pg, _ = policy_gradient_loss(lp2, adv, mask, agg=agg)
    dis.backward(), pg.backward()
    assert close(dis, pg) and close(lp1.grad, lp2.grad)
    assert metrics["dis_masked"] == 0.0 and metrics["approx_kl"] == 0.0
    assert metrics["ess"] == pytest.approx(1.0)


def test_dis_ignores_non_action_positions_and_handles_empty():
    mask, rollout, adv = turn_mask(5, 9, 3), randn(5, 9, 4) - 2, randn(5, 9, 5)
    logp = rollout + randn(5, 9, 6, scale=0.5)
    loss, metrics = dis_policy_loss(logp, rollout, adv, mask, eps_low=0.3, eps_high=5.0)
    nan = torch.full_like(logp, float("nan"))
    lp = torch.where(mask, logp, nan).requires_grad_()
    rollout2, adv2 = torch.where(mask, rollout, nan), torch.where(mask, adv, nan)
    loss2, metrics2 = dis_policy_loss(lp, rollout2, adv2, mask, eps_low=0.3, eps_high=5.0)
    loss2.backward()
    assert close(loss, loss2) and metrics == pytest.approx(metrics2) and torch.isfinite(lp.grad).all()
    empty = torch.zeros(5, 9, dtype=torch.bool)
    lp = logp.clone().requires_grad_()
    loss, metrics = dis_policy_loss(lp, rollout, adv, empty, eps_low=0.3, eps_high=5.0)
    loss.backward()
    assert loss.item() == 0.0 and (lp.grad == 0).all() and set(metrics.values()) == {0.0}


# ---------------------------------------------------------------- PPO clip


def ppo_hand_inputs():
    r = [0.5, 1.0, 1.5, 1.5, 0.5, 3.0]
    logp = (-1 + torch.tensor([r], dtype=F64).log()).requires_grad_()
    return logp, torch.full((1, 6), -1.0, dtype=F64), row(1, 1, 1, -1, -1, -1), torch.ones(1, 6)


def test_ppo_clip_hand():
    # eps_low = 0.2, eps_high = 0.28 (clip-higher), clip range [0.8, 1.28]; loss = max(-A r, -A clip(r)):
    # t0 r=0.5 A=+1: max(-0.5, -0.8)  = -0.5   unclipped, grad -A r = -0.5
    # t1 r=1.0 A=+1: max(-1.0, -1.0)  = -1.0   unclipped, grad -1.0
    # t2 r=1.5 A=+1: max(-1.5, -1.28) = -1.28  clipped,   grad 0
    # t3 r=1.5 A=-1: max( 1.5,  1.28) =  1.5   unclipped, grad 1.5
    # t4 r=0.5 A=-1: max( 0.5,  0.8)  =  0.8   clipped,   grad 0
    # t5 r=3.0 A=-1: max( 3.0,  1.28) =  3.0   unclipped, grad 3.0
    # token_mean: (-0.5 - 1 - 1.28 + 1.5 + 0.8 + 3) / 6 = 2.52 / 6 = 0.42
    logp, old, A, mask = ppo_hand_inputs()
    loss, metrics = ppo_clip_loss(logp, old, A, mask, eps_low=0.2, eps_high=0.28)
    loss.backward()
    assert loss.item() == pytest.approx(0.42)
    assert close(logp.grad, [[-0.5 / 6, -1 / 6, 0, 1.5 / 6, 0, 3 / 6]])
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 6) and metrics["pg_clipfrac_lower"] == 0.0
    assert metrics["ratio_mean"] == pytest.approx(8 / 6)
    # Dual clip c = 2 caps t5 (A < 0) at -A c = 2: loss (2.52 - 3 + 2) / 6 = 1.52 / 6, grad 0 there.
    logp, old, A, mask = ppo_hand_inputs()
    loss, metrics = ppo_clip_loss(logp, old, A, mask, eps_low=0.2, eps_high=0.28, dual_clip=2.0)
    loss.backward()
    assert loss.item() == pytest.approx(1.52 / 6)
    assert close(logp.grad, [[-0.5 / 6, -1 / 6, 0, 1.5 / 6, 0, 0]])
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 6)
    assert metrics["pg_clipfrac_lower"] == pytest.approx(1 / 6)


@pytest.mark.parametrize("dual_clip", [None, 3.0])
@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("B,T", SHAPES)
def test_ppo_clip_matches_loop_reference(B, T, agg, dual_clip):
    seed = B * 1000 + T
    mask, old = turn_mask(B, T, seed), randn(B, T, seed + 1) - 2
    logp = (old + randn(B, T, seed + 2, scale=0.8)).requires_grad_()
    adv = randn(B, T, seed + 3)
    kw = dict(eps_low=0.2, eps_high=0.28, dual_clip=dual_clip)
    loss, metrics = ppo_clip_loss(logp, old, adv, mask, **kw, agg=agg)
    lists = [x.tolist() for x in (logp, old, adv, mask)]
    ref_T, grad_T, ref_m = ppo_reference(*lists, *kw.values())
    check_against_reference(loss, metrics, logp, ref_T, grad_T, ref_m, mask, agg)


def test_ppo_clip_invariances():
    mask, old, adv = turn_mask(5, 9, 1), randn(5, 9, 2) - 2, randn(5, 9, 3)
    # At ratio 1 PPO has the policy gradient's gradient (its value is -mean A), nothing clipped.
    lp1, lp2 = old.clone().requires_grad_(), old.clone().requires_grad_()
    ppo, metrics = ppo_clip_loss(lp1, old, adv, mask, eps_low=0.2, eps_high=0.28, dual_clip=3.0)
    pg, _ = policy_gradient_loss(lp2, adv, mask)
    ppo.backward(), pg.backward()
    assert close(ppo, agg_loss(-adv, mask, "token_mean")) and close(lp1.grad, lp2.grad)
    assert metrics["pg_clipfrac"] == 0.0 and metrics["pg_clipfrac_lower"] == 0.0
    # With a band wider than every ratio it is the unclipped importance-weighted loss -A r.
    logp = old + randn(5, 9, 4, scale=0.5)
    loss, metrics = ppo_clip_loss(logp, old, adv, mask, eps_low=1.0, eps_high=1e6)
    assert close(loss, agg_loss(-adv * torch.exp(logp - old), mask, "token_mean"))
    assert metrics["pg_clipfrac"] == 0.0
    # Dual clip: every negative-advantage token's loss is at most -A c.
    logp = old + randn(5, 9, 5, scale=3.0)
    neg = mask & (adv < 0)
    for b, t in neg.nonzero().tolist():
        one = torch.zeros(5, 9, dtype=torch.bool)
        one[b, t] = True
        loss_t, _ = ppo_clip_loss(logp, old, adv, one, eps_low=0.2, eps_high=0.28, dual_clip=3.0)
        assert loss_t.item() <= -adv[b, t].item() * 3.0 + 1e-12
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_clip_loss(logp, old, adv, mask, eps_low=0.2, eps_high=0.28, dual_clip=1.0)


# ---------------------------------------------------------------- plain policy gradient


def test_policy_gradient_hand():
    # logp = [-1, -2, -3], A = [1, -2, 5], mask drops token 2:
    # per token -A logp = [1, -4, 15]; token_mean over the first two = (1 - 4) / 2 = -1.5; grad -A/2.
    logp = row(-1, -2, -3).requires_grad_()
    loss, metrics = policy_gradient_loss(logp, row(1, -2, 5), torch.tensor([[1, 1, 0]]))
    loss.backward()
    assert loss.item() == pytest.approx(-1.5) and metrics == {} and close(logp.grad, [[-0.5, 1.0, 0]])


@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("B,T", SHAPES)
def test_policy_gradient_matches_loop_reference(B, T, agg):
    mask, adv = turn_mask(B, T, B * 7 + T), randn(B, T, B + 3 * T)
    logp = (randn(B, T, B * T) - 2).requires_grad_()
    loss, _ = policy_gradient_loss(logp, adv, mask, agg=agg)
    a, lp = adv.tolist(), logp.tolist()
    ref_T = [[-a[b][t] * lp[b][t] for t in range(T)] for b in range(B)]
    grad_T = [[-a[b][t] for t in range(T)] for b in range(B)]
    check_against_reference(loss, {}, logp, ref_T, grad_T, {}, mask, agg)


def test_policy_gradient_linear_in_advantage_and_ignores_observations():
    mask, adv, logp = turn_mask(5, 9, 9), randn(5, 9, 10), randn(5, 9, 11) - 2
    loss = policy_gradient_loss(logp, adv, mask)[0]
    assert close(policy_gradient_loss(logp, 3 * adv, mask)[0], 3 * loss)
    nan = torch.full_like(adv, float("nan"))
    garbage_loss, _ = policy_gradient_loss(torch.where(mask, logp, nan), torch.where(mask, adv, nan), mask)
    assert close(garbage_loss, loss)


# ---------------------------------------------------------------- value loss


def test_value_loss_hand():
    # V = [1.4, 2.0, 0.0], R = [1.5, 0, 0], V_old = [0.5, 1.0, 0.5], clip 0.5:
    # t0: unclipped 0.5*0.1^2 = 0.005; Vc = 0.5 + 0.5 = 1.0 -> 0.5*0.5^2 = 0.125 (clipped active, grad 0)
    # t1: unclipped 0.5*2^2   = 2.0;   Vc = 1.0 + 0.5 = 1.5 -> 0.5*1.5^2 = 1.125 (unclipped, grad V-R = 2)
    # t2: unclipped 0;                 Vc = 0.5 - 0.5 = 0.0 -> 0                 (tie, grad 0)
    # loss = (0.125 + 2 + 0) / 3; vf_clipfrac = 1/3; grad = [0, 2/3, 0]
    V, R, old = row(1.4, 2.0, 0.0).requires_grad_(), row(1.5, 0.0, 0.0), row(0.5, 1.0, 0.5)
    loss, metrics = value_loss(V, R, torch.ones(1, 3), old_values=old, clip=0.5)
    loss.backward()
    assert loss.item() == pytest.approx(2.125 / 3) and metrics["value_loss"] == pytest.approx(2.125 / 3)
    assert metrics["vf_clipfrac"] == pytest.approx(1 / 3) and close(V.grad, [[0, 2 / 3, 0]])
    # Without clipping: (0.005 + 2 + 0) / 3.
    loss, metrics = value_loss(V, R, torch.ones(1, 3))
    assert loss.item() == pytest.approx(2.005 / 3) and "vf_clipfrac" not in metrics
    # value_mean = 3.4/3, return_mean = 0.5; R - V = [0.1, -2, 0], mean -0.6333
    # Var[R-V] = (0.7333^2 + 1.3667^2 + 0.6333^2)/3 = 2.8067/3, Var[R] = (1 + 0.25 + 0.25)/3 = 0.5
    assert metrics["value_mean"] == pytest.approx(3.4 / 3) and metrics["return_mean"] == pytest.approx(0.5)
    assert metrics["explained_variance"] == pytest.approx(1 - (2.8067 / 3) / 0.5, abs=1e-4)


def test_explained_variance_hand():
    R, m = row(0.0, 1.0, 2.0, 3.0), torch.ones(1, 4)
    assert value_loss(R.clone(), R, m)[1]["explained_variance"] == 1.0  # perfect critic
    at_mean = value_loss(torch.full_like(R, 1.5), R, m)[1]  # a constant critic at the mean of R
    assert at_mean["explained_variance"] == pytest.approx(0.0)
    # Constant returns (Var[R] = 0): 0.0 by convention, even with float round-off in the mean.
    const = value_loss(row(0.3, 0.1, 0.2), torch.full((1, 3), 0.1, dtype=F64), torch.ones(1, 3))[1]
    assert const["explained_variance"] == 0.0
    assert value_loss(R, R, torch.zeros(1, 4))[1]["explained_variance"] == 0.0  # no action token


@pytest.mark.parametrize("clip", [None, 0.2])
@pytest.mark.parametrize("agg", AGG_MODES)
@pytest.mark.parametrize("B,T", SHAPES)
def test_value_loss_matches_loop_reference(B, T, agg, clip):
    seed = B * 77 + T
    mask, R, old = turn_mask(B, T, seed), randn(B, T, seed + 1), randn(B, T, seed + 2)
    V = (old + randn(B, T, seed + 3, scale=0.4)).requires_grad_()
    loss, metrics = value_loss(V, R, mask, old_values=old, clip=clip, agg=agg)
    ref_T, grad_T, ref_m = value_reference(V.tolist(), R.tolist(), mask.tolist(), old.tolist(), clip)
    check_against_reference(loss, metrics, V, ref_T, grad_T, ref_m, mask, agg)
    assert metrics["value_loss"] == pytest.approx(loss.item())


def test_value_loss_clipping_invariances():
    mask, R, old = turn_mask(5, 9, 1), randn(5, 9, 2), randn(5, 9, 3)
    V = old + randn(5, 9, 4, scale=0.4)
    plain = value_loss(V, R, mask)[0]
    assert close(value_loss(V, R, mask, old_values=old, clip=1e6)[0], plain)  # huge clip: no effect
    loss, metrics = value_loss(old, R, mask, old_values=old, clip=0.2)  # V == V_old: nothing to clip
    assert close(loss, value_loss(old, R, mask)[0]) and metrics["vf_clipfrac"] == 0.0
    nan = torch.full_like(V, float("nan"))
    assert close(value_loss(torch.where(mask, V, nan), torch.where(mask, R, nan), mask)[0], plain)
    with pytest.raises(ValueError, match="old_values"):
        value_loss(V, R, mask, clip=0.2)


# ---------------------------------------------------------------- all losses


LOSSES = {
    "dis": lambda x, y, a, m: dis_policy_loss(x, y, a, m, eps_low=0.3, eps_high=5.0),
    "ppo_clip": lambda x, y, a, m: ppo_clip_loss(x, y, a, m, eps_low=0.2, eps_high=0.28, dual_clip=3.0),
    "pg": lambda x, y, a, m: policy_gradient_loss(x, a, m),
    "value": lambda x, y, a, m: value_loss(x, a, m, old_values=y, clip=0.2),
    "tis": lambda x, y, a, m: tis_policy_loss(x, y, a, m, eps_low=0.2, eps_high=0.5),
    "mis_token": lambda x, y, a, m: mis_token_policy_loss(x, y, a, m, eps_low=0.3, eps_high=0.5),
    "mis_seq": lambda x, y, a, m: mis_seq_policy_loss(x, y, a, m, eps_low=0.1, eps_high=0.1),
    "gspo": lambda x, y, a, m: gspo_policy_loss(x, y, a, m, eps_low=0.05, eps_high=0.05),
}


@pytest.mark.parametrize("name", LOSSES)
def test_non_action_garbage_never_reaches_loss_metrics_or_gradient(name):
    mask, y, a = turn_mask(5, 9, 21), randn(5, 9, 22) - 2, randn(5, 9, 23)
    x = y + randn(5, 9, 24, scale=0.5)
    x1 = x.clone().requires_grad_()
    loss, metrics = LOSSES[name](x1, y, a, mask)
    loss.backward()
    for garbage in (float("nan"), float("inf"), -1e30):
        fill = torch.full_like(x, garbage)
        x2 = torch.where(mask, x, fill).requires_grad_()
        loss2, metrics2 = LOSSES[name](x2, torch.where(mask, y, fill), torch.where(mask, a, fill), mask)
        loss2.backward()
        assert close(loss, loss2) and metrics == pytest.approx(metrics2) and torch.equal(x1.grad, x2.grad)
        assert (x2.grad[~mask] == 0).all()


# ---------------------------------------------------------------- registry


def test_policy_loss_registry_one_signature_and_one_call():
    sigs = {name: inspect.signature(fn) for name, fn in POLICY_LOSSES.items()}
    assert len(set(sigs.values())) == 1, sigs
    mask, ref, adv = turn_mask(3, 9, 0), randn(3, 9, 1) - 2, randn(3, 9, 2)
    logp = ref + randn(3, 9, 3, scale=0.5)
    direct = {
        "dis": dis_policy_loss(logp, ref, adv, mask, eps_low=0.3, eps_high=5.0, agg="seq_mean_token_mean"),
        "ppo_clip": ppo_clip_loss(logp, ref, adv, mask, eps_low=0.3, eps_high=5.0, agg="seq_mean_token_mean"),
        "pg": policy_gradient_loss(logp, adv, mask, agg="seq_mean_token_mean"),
        "tis": tis_policy_loss(logp, ref, adv, mask, eps_low=0.3, eps_high=5.0, agg="seq_mean_token_mean"),
        "mis_token": mis_token_policy_loss(logp, ref, adv, mask, eps_low=0.3, eps_high=5.0, agg="seq_mean_token_mean"),
        "mis_seq": mis_seq_policy_loss(logp, ref, adv, mask, eps_low=0.3, eps_high=5.0, agg="seq_mean_token_mean"),
        "gspo": gspo_policy_loss(logp, ref, adv, mask, eps_low=0.3, eps_high=5.0, agg="seq_mean_token_mean"),
    }
    assert set(direct) == set(POLICY_LOSSES)
    for name, fn in POLICY_LOSSES.items():
        loss, metrics = fn(logp, ref, adv, mask, eps_low=0.3, eps_high=5.0, agg="seq_mean_token_mean")
        assert close(loss, direct[name][0]) and all(isinstance(v, float) for v in metrics.values())
        assert {"ratio_mean", "approx_kl", *DIAGNOSTICS} <= set(metrics)  # common diagnostics
        # ...with the same values whichever loss computed them (masked_fraction aside: it is the loss's own).
        shared = {k: metrics[k] for k in DIAGNOSTICS if k != "masked_fraction"}
        assert shared == pytest.approx({k: v for k, v in POLICY_LOSSES["pg"](
            logp, ref, adv, mask, eps_low=0.3, eps_high=5.0)[1].items() if k in shared}, rel=1e-12)
    for name in ("dis", "pg", "tis", "mis_token", "mis_seq", "gspo"):
        with pytest.raises(ValueError, match="dual_clip"):
            POLICY_LOSSES[name](logp, ref, adv, mask, eps_low=0.3, eps_high=5.0, dual_clip=3.0)
    with pytest.raises(ValueError, match="eps_low"):
        POLICY_LOSSES["dis"](logp, ref, adv, mask, eps_low=0.0, eps_high=5.0)


def test_each_loss_reports_its_own_masked_share_as_masked_fraction():
    """``masked_fraction`` is the share of action tokens the loss in use took out (sao_env.algos.diagnostics), for
    DIS its out-of-band tokens: ratios 0.5, 1, 2 and 7 with the band (0.7, 6) drop 0.5 and 7 of the row's first
    three action tokens and the fourth, a non-action, counts nowhere: 2 of 3. Beside it, each loss's own share."""
    ratios = torch.tensor([[0.5, 1.0, 7.0, 2.0]], dtype=torch.float64)
    ref = torch.full_like(ratios, -1.0)
    mask = torch.tensor([[True, True, True, False]])
    _, metrics = dis_policy_loss(ref + ratios.log(), ref, torch.ones_like(ref), mask, eps_low=0.3, eps_high=5.0)
    assert metrics["masked_fraction"] == metrics["dis_masked"] == pytest.approx(2 / 3)
    mask, ref, adv = randn(6, 20, 1) > -0.5, randn(6, 20, 2) - 2, randn(6, 20, 3)
    logp = ref + randn(6, 20, 4, scale=0.5)
    own = {"dis": "dis_masked", "tis": "tis_truncated"}
    for name, key in own.items():
        metrics = POLICY_LOSSES[name](logp, ref, adv, mask, eps_low=0.3, eps_high=0.2)[1]
        assert 0 < metrics[key] < 1 and metrics[key] != 0.5, (name, metrics[key])  # kept and dropped shares differ
        assert metrics["masked_fraction"] == pytest.approx(metrics[key]), name
