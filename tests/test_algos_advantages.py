"""sao_env.algos.advantages, tested three ways: hand-computed cases (arithmetic in comments),
pure-Python loop references over a grid of shapes, and invariances."""

import inspect
import math
import statistics

import pytest
import torch

from sao_env.algos import (
    ADVANTAGE_ESTIMATORS,
    adaptive_lambda,
    broadcast_sequence_advantages,
    gae,
    group_advantages,
    masked_mean,
    masked_whiten,
    running_mean_advantages,
)

F64 = torch.float64
SHAPES = [(B, T) for B in (1, 3, 5) for T in (1, 4, 9, 17)]


def turn_mask(B, T, seed):
    """Random [B, T] action masks: multi-turn rows (action spans separated by observation spans),
    rows without any action token, rows that start with an observation (a prompt)."""
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


def randn(B, T, seed):
    return torch.randn(B, T, generator=torch.Generator().manual_seed(seed), dtype=F64)


def close(a, b, tol=1e-10):
    return torch.allclose(torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), atol=tol, rtol=tol)


# ---------------------------------------------------------------- GAE: loop reference


def gae_reference(rewards, values, mask, gamma, lams):
    """GAE eq. 16 written out: A_k = sum_{j>=k} (gamma*lam)^(j-k) delta_j over the action tokens
    of each row (observation tokens skipped), delta_j = r_j + gamma*V(next action token) - V_j."""
    B, T = len(mask), len(mask[0])
    adv = [[0.0] * T for _ in range(B)]
    ret = [[0.0] * T for _ in range(B)]
    for b in range(B):
        idx = [t for t in range(T) if mask[b][t]]
        deltas = []
        for k, t in enumerate(idx):
            next_v = values[b][idx[k + 1]] if k + 1 < len(idx) else 0.0
            deltas.append(rewards[b][t] + gamma * next_v - values[b][t])
        for k, t in enumerate(idx):
            adv[b][t] = sum((gamma * lams[b]) ** (j - k) * deltas[j] for j in range(k, len(idx)))
            ret[b][t] = adv[b][t] + values[b][t]
    return adv, ret


def lam_for(lam, B, seed):
    if lam == "row":
        lam_B = torch.rand(B, generator=torch.Generator().manual_seed(seed), dtype=F64)
        lam_B[0] = 1.0
        if B > 2:
            lam_B[1] = 0.0
        return lam_B, lam_B.tolist()
    return lam, [lam] * B


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95, 1.0, "row"])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
@pytest.mark.parametrize("B,T", SHAPES)
def test_gae_matches_loop_reference(B, T, gamma, lam):
    seed = 1000 * B + 10 * T + int(gamma * 10)
    mask, rewards, values = turn_mask(B, T, seed), randn(B, T, seed + 1), randn(B, T, seed + 2)
    lam_arg, lams = lam_for(lam, B, seed)
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam_arg)
    ref_adv, ref_ret = gae_reference(rewards.tolist(), values.tolist(), mask.tolist(), gamma, lams)
    assert close(adv, ref_adv) and close(ret, ref_ret)
    assert (adv[~mask] == 0).all() and (ret[~mask] == 0).all()


# ---------------------------------------------------------------- GAE: by hand


def test_gae_hand_three_tokens():
    # gamma=1, lam=0.5, V=[0.5, 0.6, 0.8], reward 1 on the last token:
    # delta2 = 1 + 0   - 0.8 = 0.2   A2 = 0.2
    # delta1 = 0 + 0.8 - 0.6 = 0.2   A1 = 0.2 + 0.5*0.2  = 0.3
    # delta0 = 0 + 0.6 - 0.5 = 0.1   A0 = 0.1 + 0.5*0.3  = 0.25
    # returns = A + V = [0.75, 0.9, 1.0]
    adv, ret = gae(
        torch.tensor([[0, 0, 1.0]], dtype=F64),
        torch.tensor([[0.5, 0.6, 0.8]], dtype=F64),
        torch.ones(1, 3, dtype=torch.bool),
        gamma=1.0,
        lam=0.5,
    )
    assert close(adv, [[0.25, 0.3, 0.2]]) and close(ret, [[0.75, 0.9, 1.0]])


def test_gae_hand_multi_turn_skips_observations():
    # Same actions as above, split in two turns by two observation tokens (values 9, reward 5
    # there are ignored): the next value of token 1 is V4 = 0.8, so A = [0.25, 0.3, 0, 0, 0.2].
    adv, ret = gae(
        torch.tensor([[0, 0, 5.0, 5.0, 1]], dtype=F64),
        torch.tensor([[0.5, 0.6, 9.0, 9.0, 0.8]], dtype=F64),
        torch.tensor([[1, 1, 0, 0, 1]]),
        gamma=1.0,
        lam=0.5,
    )
    assert close(adv, [[0.25, 0.3, 0, 0, 0.2]]) and close(ret, [[0.75, 0.9, 0, 0, 1.0]])


def test_gae_hand_discount_and_per_row_lambda():
    # V = 0, reward 1 on the last of 3 tokens, gamma=0.9: deltas = [0, 0, 1].
    # row 0, lam=1: A = [0.81, 0.9, 1]    row 1, lam=0: A = deltas = [0, 0, 1]
    adv, _ = gae(
        torch.tensor([[0, 0, 1.0], [0, 0, 1.0]], dtype=F64),
        torch.zeros(2, 3, dtype=F64),
        torch.ones(2, 3),
        gamma=0.9,
        lam=torch.tensor([1.0, 0.0]),
    )
    assert close(adv, [[0.81, 0.9, 1.0], [0, 0, 1.0]])


# ---------------------------------------------------------------- GAE: invariances


@pytest.mark.parametrize("B,T", [(3, 9), (5, 17)])
def test_gae_ignores_observation_positions(B, T):
    mask, rewards, values = turn_mask(B, T, 7), randn(B, T, 8), randn(B, T, 9)
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.95)
    for garbage in (100 * randn(B, T, 10), torch.full((B, T), float("nan"), dtype=F64)):
        adv2, ret2 = gae(
            torch.where(mask, rewards, garbage), torch.where(mask, values, garbage), mask, gamma=0.9, lam=0.95
        )
        assert close(adv, adv2) and close(ret, ret2)


def test_gae_batch_concatenation_and_padding():
    m1, m2 = turn_mask(3, 9, 1), turn_mask(2, 9, 2)
    r1, r2, v1, v2 = randn(3, 9, 3), randn(2, 9, 4), randn(3, 9, 5), randn(2, 9, 6)
    l1, l2 = torch.tensor([0.2, 0.9, 1.0]), torch.tensor([0.5, 0.0])
    a1, R1 = gae(r1, v1, m1, gamma=0.9, lam=l1)
    a2, R2 = gae(r2, v2, m2, gamma=0.9, lam=l2)
    cat = torch.cat
    a, R = gae(cat([r1, r2]), cat([v1, v2]), cat([m1, m2]), gamma=0.9, lam=cat([l1, l2]))
    assert close(a, torch.cat([a1, a2])) and close(R, torch.cat([R1, R2]))
    # Right-padding with observation tokens changes nothing either.
    pad = torch.zeros(3, 4, dtype=F64)
    ap, _ = gae(cat([r1, pad], 1), cat([v1, pad], 1), cat([m1, pad.bool()], 1), gamma=0.9, lam=l1)
    assert close(ap[:, :9], a1) and (ap[:, 9:] == 0).all()


@pytest.mark.parametrize("seed", range(5))
def test_gae_equals_gae_on_compacted_row(seed):
    T = 17
    mask, rewards, values = turn_mask(1, T, seed), randn(1, T, seed + 10), randn(1, T, seed + 20)
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.7)
    keep = mask[0]
    ca, cr = gae(rewards[:, keep], values[:, keep], torch.ones(1, int(keep.sum())), gamma=0.9, lam=0.7)
    assert close(adv[:, keep], ca) and close(ret[:, keep], cr)


def test_gae_lambda_one_returns_are_reward_to_go_and_no_grad():
    # gamma = lam = 1 (SAO's critic targets): returns = sum of future rewards, whatever V is.
    mask, rewards = turn_mask(4, 12, 3), randn(4, 12, 4)
    values = randn(4, 12, 5).requires_grad_()
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    for b in range(4):
        for t in range(12):
            if mask[b, t]:
                assert close(ret[b, t], rewards[b, t:][mask[b, t:]].sum())
    assert not adv.requires_grad and not ret.requires_grad


def test_gae_rejects_bad_arguments():
    x, m = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="lam"):
        gae(x, x, m, gamma=1.0, lam=torch.ones(3))
    with pytest.raises(ValueError, match="lam"):
        gae(x, x, m, gamma=1.0, lam=1.5)
    with pytest.raises(ValueError, match="values"):
        gae(x, torch.zeros(2, 4), m, gamma=1.0, lam=1.0)


# ---------------------------------------------------------------- adaptive lambda


def test_adaptive_lambda_hand():
    # alpha = 1.5: l=1 -> 1 - 1/1.5 = 1/3; l=3 -> 1 - 1/4.5 = 7/9; l=0 -> 0 (never used).
    assert close(adaptive_lambda([0, 1, 3]), [0.0, 1 / 3, 7 / 9], tol=1e-6)
    # alpha = 0.5, l = 1: 1 - 1/0.5 = -1, clamped to 0; l = 4: 1 - 1/2 = 0.5.
    assert close(adaptive_lambda([1, 4], alpha=0.5), [0.0, 0.5], tol=1e-6)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 1.5, 3.0])
def test_adaptive_lambda_matches_loop_reference(alpha):
    ls = list(range(60)) + [1000, 123456]
    ref = [0.0 if l == 0 else min(1.0, max(0.0, 1 - 1 / (alpha * l))) for l in ls]
    assert close(adaptive_lambda(ls, alpha=alpha), ref, tol=1e-6)


def test_adaptive_lambda_invariances():
    ls = [5, 0, 1, 40]
    as_list, as_tensor = adaptive_lambda(ls), adaptive_lambda(torch.tensor(ls))
    assert as_list.shape == (4,) and torch.equal(as_list, as_tensor)
    assert float(adaptive_lambda(40)) == float(as_list[3])
    lam = adaptive_lambda(torch.arange(0, 10_000))
    assert (lam.diff() >= 0).all() and (lam >= 0).all() and (lam <= 1).all()  # monotone, in [0, 1]
    assert 1 - float(lam[-1]) < 1e-4  # long episodes -> lambda close to 1
    # Fed to gae as a per-row lambda straight from the mask.
    mask = turn_mask(3, 9, 0)
    gae(torch.zeros(3, 9), torch.zeros(3, 9), mask, gamma=1.0, lam=adaptive_lambda(mask.sum(-1)))
    with pytest.raises(ValueError):
        adaptive_lambda([-1])
    with pytest.raises(ValueError):
        adaptive_lambda([1], alpha=0.0)


# ---------------------------------------------------------------- group advantages


def test_group_advantages_hand():
    # group 0: [1, 0, 1, 0], mean 0.5, unbiased std = sqrt(4 * 0.25 / 3) = sqrt(1/3)
    #          -> +-0.5 / sqrt(1/3) = +-0.5*sqrt(3) = +-0.8660
    # group 7: [1, 2, 3], mean 2, std = sqrt((1 + 0 + 1) / 2) = 1 -> [-1, 0, 1]
    # group -2: [5] alone -> 0
    rewards = torch.tensor([1, 0, 1, 0, 1, 2, 3, 5.0], dtype=F64)
    ids = torch.tensor([0, 0, 0, 0, 7, 7, 7, -2])
    h = 0.5 * math.sqrt(3)
    assert close(group_advantages(rewards, ids, eps=0.0), [h, -h, h, -h, -1, 0, 1, 0])
    # Dr. GRPO: centering only.
    assert close(group_advantages(rewards, ids, normalize_std=False), [0.5, -0.5, 0.5, -0.5, -1, 0, 1, 0])


def group_reference(rewards, ids, normalize_std, eps):
    out = []
    for r, g in zip(rewards, ids):
        members = [x for x, h in zip(rewards, ids) if h == g]
        if len(members) == 1:
            out.append(0.0)
        elif normalize_std:
            out.append((r - statistics.mean(members)) / (statistics.stdev(members) + eps))
        else:
            out.append(r - statistics.mean(members))
    return out


@pytest.mark.parametrize("normalize_std", [True, False])
@pytest.mark.parametrize("B,groups", [(1, 1), (5, 2), (8, 3), (16, 16), (33, 4)])
def test_group_advantages_match_loop_reference(B, groups, normalize_std):
    g = torch.Generator().manual_seed(B * 100 + groups)
    rewards = torch.randint(0, 3, (B,), generator=g).to(F64) / 2  # ties and constant groups happen
    ids = torch.randint(0, groups, (B,), generator=g) * 13 - 5
    ref = group_reference(rewards.tolist(), ids.tolist(), normalize_std, 1e-6)
    assert close(group_advantages(rewards, ids, normalize_std=normalize_std), ref)


def test_group_advantages_invariances():
    g = torch.Generator().manual_seed(0)
    rewards, ids = torch.rand(12, generator=g, dtype=F64), torch.arange(12) % 4
    adv = group_advantages(rewards, ids)
    relabelled = torch.tensor([40, -1, 7, 1000])[ids]
    assert close(group_advantages(rewards, relabelled), adv)
    perm = torch.randperm(12, generator=g)
    assert close(group_advantages(rewards[perm], ids[perm]), adv[perm])
    assert close(group_advantages(rewards + 3.0, ids), adv)  # shift
    scaled = group_advantages(rewards * 10, ids, eps=0.0)
    assert close(scaled, group_advantages(rewards, ids, eps=0.0))  # scale
    assert (group_advantages(rewards, torch.arange(12)) == 0).all()  # all singletons
    assert (group_advantages(torch.ones(4), torch.zeros(4)) == 0).all()  # constant group


# ---------------------------------------------------------------- running-mean baseline


def test_running_mean_hand_window_2():
    # history [1, 0], window 2:
    # r=1: baseline mean(1, 0) = 0.5 -> A = 0.5
    # r=1: baseline mean(0, 1) = 0.5 -> A = 0.5
    # r=0: baseline mean(1, 1) = 1.0 -> A = -1
    # new history = last 2 of [1, 0, 1, 1, 0] = [1, 0]
    history = [1.0, 0.0]
    adv, new = running_mean_advantages(torch.tensor([1.0, 1.0, 0.0]), history, window=2)
    assert close(adv, [0.5, 0.5, -1.0]) and new == [1.0, 0.0]
    assert history == [1.0, 0.0]  # pure
    # Empty history: the first baseline is 0.0, then the mean of what was seen.
    adv, new = running_mean_advantages(torch.tensor([0.4, 0.8]), [], window=128)
    assert close(adv, [0.4, 0.4], tol=1e-6) and close(new, [0.4, 0.8], tol=1e-6)


@pytest.mark.parametrize("window", [1, 2, 5, 128])
@pytest.mark.parametrize("B,H", [(1, 0), (3, 2), (9, 7), (20, 200)])
def test_running_mean_matches_loop_reference(B, H, window):
    g = torch.Generator().manual_seed(B + H + window)
    rewards, history = torch.rand(B, generator=g, dtype=F64), torch.rand(H, generator=g).tolist()
    stream = history + rewards.tolist()
    ref = []
    for i in range(B):
        past = stream[: H + i][-window:]
        ref.append(stream[H + i] - (sum(past) / len(past) if past else 0.0))
    adv, new = running_mean_advantages(rewards, history, window=window)
    assert close(adv, ref) and close(new, stream[-window:])


def test_running_mean_streaming_split_invariance():
    rewards = torch.rand(10, generator=torch.Generator().manual_seed(1), dtype=F64)
    full, hist_full = running_mean_advantages(rewards, [0.5], window=4)
    a1, h1 = running_mean_advantages(rewards[:3], [0.5], window=4)
    a2, h2 = running_mean_advantages(rewards[3:], h1, window=4)
    assert close(torch.cat([a1, a2]), full) and h2 == hist_full and len(h2) == 4


# ---------------------------------------------------------------- helpers


def test_broadcast_hand_loop_and_linearity():
    # adv [2, -1], mask [[0,1,1],[1,0,1]] -> [[0,2,2],[-1,0,-1]]
    mask = torch.tensor([[0, 1, 1], [1, 0, 1]])
    assert close(broadcast_sequence_advantages(torch.tensor([2.0, -1.0]), mask), [[0, 2, 2], [-1, 0, -1]])
    for B, T in SHAPES:
        m, a = turn_mask(B, T, B * T), torch.randn(B, dtype=F64)
        ref = [[a[b].item() if m[b, t] else 0.0 for t in range(T)] for b in range(B)]
        assert close(broadcast_sequence_advantages(a, m), ref)
        c = torch.randn(B, dtype=F64)
        bc = broadcast_sequence_advantages
        assert close(bc(a + c, m), bc(a, m) + bc(c, m))


def test_masked_mean_hand_loop_and_invariance():
    # x = [[1, 2, 3], [4, 5, 6]] over mask [[1, 0, 1], [0, 1, 0]] -> (1 + 3 + 5) / 3 = 3
    x = torch.tensor([[1, 2, 3], [4, 5, 6.0]])
    assert masked_mean(x, torch.tensor([[1, 0, 1], [0, 1, 0]])).item() == 3.0
    for B, T in SHAPES:
        m, v = turn_mask(B, T, B + T), randn(B, T, B * T)
        sel = [v[b, t].item() for b in range(B) for t in range(T) if m[b, t]]
        assert close(masked_mean(v, m), sum(sel) / len(sel) if sel else 0.0)
        assert close(masked_mean(torch.where(m, v, float("nan")), m), masked_mean(v, m))
    # No action token: 0 with a (zero) gradient, not NaN.
    y = torch.randn(2, 3, requires_grad=True)
    out = masked_mean(y, torch.zeros(2, 3))
    out.backward()
    assert out.item() == 0.0 and (y.grad == 0).all()


def test_masked_whiten_hand_loop_and_invariance():
    # [1, 2, 3] over all tokens: mean 2, population var (1 + 0 + 1)/3 = 2/3 -> [-1, 0, 1] / sqrt(2/3)
    s = 1 / math.sqrt(2 / 3)
    x = torch.tensor([[1, 2, 3.0]], dtype=F64)
    assert close(masked_whiten(x, torch.ones(1, 3), eps=0.0), [[-s, 0, s]])
    for B, T in SHAPES:
        m, v = turn_mask(B, T, B - T), randn(B, T, B + 2 * T)
        sel = [v[b, t].item() for b in range(B) for t in range(T) if m[b, t]]
        mu = sum(sel) / len(sel) if sel else 0.0
        sd = math.sqrt(sum((x - mu) ** 2 for x in sel) / len(sel) + 1e-8) if sel else 1.0
        ref = [[(v[b, t].item() - mu) / sd if m[b, t] else 0.0 for t in range(T)] for b in range(B)]
        w = masked_whiten(v, m)
        assert close(w, ref, tol=1e-7)
        assert close(masked_whiten(torch.where(m, v, float("nan")), m), w)  # non-action values ignored
        if len(sel) > 1 and statistics.pvariance(sel) > 1e-3:
            affine = masked_whiten(3 * v - 7, m, eps=0.0)
            assert close(affine, masked_whiten(v, m, eps=0.0), tol=1e-9)


# ---------------------------------------------------------------- registry


def test_advantage_registry_one_signature():
    sigs = {name: inspect.signature(fn) for name, fn in ADVANTAGE_ESTIMATORS.items()}
    assert len(set(sigs.values())) == 1, sigs
    rewards, ids = torch.tensor([1.0, 0.0, 3.0, 1.0]), torch.tensor([0, 0, 1, 1])
    assert torch.equal(ADVANTAGE_ESTIMATORS["grpo"](rewards, ids), group_advantages(rewards, ids))
    dr = group_advantages(rewards, ids, normalize_std=False)
    assert torch.equal(ADVANTAGE_ESTIMATORS["dr_grpo"](rewards, ids), dr)
