"""The statistics every board states, against hand computations: the minimum detectable paired
difference, the paired sign-flip permutation test, Holm's correction, the ranks they support, and
the collapse rule (sao_env/leaderboard/stats.py, sao_env/evaluation/collapse.py)."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest
from scipy import stats as sps

from sao_env.evaluation.collapse import collapse_record, phase_collapse, rolling_mean, run_collapse
from sao_env.leaderboard.stats import (format_mde, format_rank, holm, min_detectable_difference, min_seeds, pairwise,
                                       pooled_sd, rank_ranges, paired_pvalue, paired_t_pvalue, seeds_for_difference,
                                       sign_flip_pvalue, smallest_p, supported_leader)
from sao_env.leaderboard.summary import metric_table, reading
from sao_env.leaderboard.board import board_power
from sao_env.leaderboard.tables import power_fact
from sao_env.leaderboard.columns import NO_COLLAPSE
from sao_env.leaderboard.board import board_from_records, leaderboard_frame
from sao_env.leaderboard.tables import markdown

NAN = float("nan")


# -- power ----------------------------------------------------------------------------------------


def test_min_detectable_difference_by_hand():
    # n=4, sd of the paired differences 0.1: t(0.975, 3) = 3.182446, t(0.8, 3) = 0.978472,
    # (3.182446 + 0.978472) * 0.1 / sqrt(4) = 4.160918 * 0.05 = 0.208046
    assert min_detectable_difference(0.1, 4, test="t") == pytest.approx(0.208046, abs=1e-6)
    # n=3, sd 0.056 (sao - grpo on style-drift, issue 20): t(.975, 2) = 4.302653, t(.8, 2) = 1.060660,
    # 5.363313 * 0.056 / sqrt(3) = 0.300346 / 1.732051 = 0.173405
    assert min_detectable_difference(0.056, 3, test="t") == pytest.approx(0.173405, abs=1e-6)


def test_min_detectable_difference_boundaries_and_invariance():
    assert math.isnan(min_detectable_difference(0.1, 1)) and math.isnan(min_detectable_difference(NAN, 5))
    assert min_detectable_difference(0.0, 6) == 0.0
    # linear in the spread
    assert min_detectable_difference(0.3, 7) == pytest.approx(3 * min_detectable_difference(0.1, 7))
    # at large n it is the normal formula (1.959964 + 0.841621) * sd / sqrt(n)
    assert min_detectable_difference(1.0, 10_000) == pytest.approx(2.801585 / 100, rel=1e-3)


@pytest.mark.parametrize("n", [3, 4, 10, 30])
def test_power_at_the_detectable_difference_against_the_noncentral_t(n):
    # Reference: the exact power of the two-sided paired t-test at the stated difference,
    # P(|T| > t_crit) with T non-central t (df n-1, non-centrality delta * sqrt(n) / sd).
    # The t-quantile formula is an approximation that undershoots 80% slightly at few seeds.
    delta = min_detectable_difference(1.0, n, test="t")
    crit = sps.t.ppf(0.975, n - 1)
    nc = delta * math.sqrt(n)
    power = 1 - sps.nct.cdf(crit, n - 1, nc) + sps.nct.cdf(-crit, n - 1, nc)
    assert 0.76 < power <= 0.801
    if n >= 10:
        assert power == pytest.approx(0.8, abs=0.002)


def test_seeds_for_a_difference():
    # sd 0.056: MDE at n=11 is 0.052464 > 0.05, at n=12 0.049734 <= 0.05 -> 12 seeds
    assert min_detectable_difference(0.056, 11) > 0.05 >= min_detectable_difference(0.056, 12)
    assert seeds_for_difference(0.056, 0.05) == 12
    # boundary: a difference exactly the MDE at n is detectable at n
    assert seeds_for_difference(0.1, min_detectable_difference(0.1, 9)) == 9
    assert seeds_for_difference(NAN, 0.05) is None and seeds_for_difference(0.0, 0.05, test="t") == 2
    assert seeds_for_difference(0.0, 0.05) == 6  # one comparison: the sign-flip test needs 2/2^n <= 0.05


def test_the_detectable_difference_is_stated_at_holms_first_step_by_hand():
    # n=10, m=6, sd 0.1: alpha/m = 0.05/6, so the two-sided quantile is t(1 - 0.05/12, 9) = 3.364203;
    # t(0.8, 9) = 0.883404; (3.364203 + 0.883404) * 0.1 / sqrt(10) = 4.247607 * 0.031623 = 0.134321.
    # Uncorrected: (t(0.975, 9) = 2.262157 + 0.883404) * 0.031623 = 0.099471; ratio 4.247607 / 3.145561 = 1.350350.
    holm6 = min_detectable_difference(0.1, 10, m=6)
    one = min_detectable_difference(0.1, 10)
    assert holm6 == pytest.approx(0.134321, abs=1e-6) and one == pytest.approx(0.099471, abs=1e-6)
    assert holm6 / one == pytest.approx(1.350350, abs=1e-5)
    # m=14 (the ablation board): t(1 - 0.05/28, 9) = 3.908770; (3.908770 + 0.883404) / 3.145561 = 1.523472
    assert min_detectable_difference(0.1, 10, m=14) / one == pytest.approx(1.523472, abs=1e-5)
    # The same quantiles from scipy, computed here on their own: the formula at alpha / m.
    for n, m in ((10, 6), (12, 14), (5, 7)):
        expected = (sps.t.ppf(1 - 0.05 / m / 2, n - 1) + sps.t.ppf(0.8, n - 1)) * 0.1 / math.sqrt(n)
        assert min_detectable_difference(0.1, n, m=m, test="t") == pytest.approx(expected, rel=1e-12)
    # A larger family never makes a difference easier to detect.
    assert all(min_detectable_difference(0.1, 12, m=m) < min_detectable_difference(0.1, 12, m=m + 1)
               for m in range(1, 20))


def test_the_sign_flip_test_has_no_detectable_difference_below_its_floor():
    # The exact test's smallest p is 2/2^n. Over m=6 comparisons Holm's first step is 0.05/6 = 0.008333:
    # 2/2^7 = 0.015625 > 0.008333 >= 2/2^8 = 0.0078125, so 8 seeds are the fewest.
    assert min_seeds(6) == 8 and min_seeds(1) == 6 and min_seeds(14) == 10 and min_seeds(7, test="t") == 2
    assert smallest_p(7) > 0.05 / 6 >= smallest_p(8)
    assert min_detectable_difference(0.1, 7, m=6) == math.inf and format_mde(math.inf) == "none"
    at8 = min_detectable_difference(0.1, 8, m=6)
    assert math.isfinite(at8) and at8 == pytest.approx(min_detectable_difference(0.1, 8, m=6, test="t"))
    assert math.isfinite(min_detectable_difference(0.1, 7, m=6, test="t"))  # the t-test has no floor
    assert format_mde(NAN) == "n/a" and format_mde(0.12345) == "0.123"


def test_seeds_for_a_difference_under_holm_and_the_floor():
    # sd 0.056, m=6: at n=18 (t(1 - 0.05/12, 17) = 2.984042 + t(0.8, 17) = 0.863279) * 0.056 / sqrt(18) = 0.050782 > 0.05;
    # at n=19 (2.962735 + 0.862049) * 0.056 / sqrt(19) = 0.049138 <= 0.05: 19 seeds (12 for one comparison).
    assert seeds_for_difference(0.056, 0.05, m=6) == 19
    # sd 0.01, m=6: the t-test's formula needs 4 seeds ((6.231543 + 0.978472) * 0.01 / 2 = 0.036050 <= 0.05,
    # at n=3 (10.885867 + 1.060660) * 0.01 / sqrt(3) = 0.068973 > 0.05), but the sign-flip test cannot
    # reach 0.05/6 below 8 seeds: 8.
    assert seeds_for_difference(0.01, 0.05, m=6, test="t") == 4
    assert seeds_for_difference(0.01, 0.05, m=6) == 8


def test_pooled_sd_by_hand():
    # sd .1 over 3 seeds and .2 over 5: sqrt((2 * .01 + 4 * .04) / 6) = sqrt(.03) = .173205; n=1 adds nothing
    assert pooled_sd([(0.1, 3), (0.2, 5), (0.5, 1)]) == (pytest.approx(math.sqrt(0.03)), 6)
    sd, df = pooled_sd([])
    assert math.isnan(sd) and df == 0


# -- the sign-flip test ---------------------------------------------------------------------------


def test_sign_flip_exact_n4_by_hand():
    # d = [.3, .1, .2, -.1], sum .5. Flipping a subset with absolute sum S gives |.7 - 2S| (.7 = sum |d|);
    # it reaches .5 when S <= .1 or S >= .6. The 16 subsets of {.3, .1, .2, .1'} by S:
    #   {} 0, {.1} .1, {.1'} .1                               -> S <= .1: 3
    #   {.3,.1,.2} .6, {.3,.2,.1'} .6, {.3,.1,.2,.1'} .7      -> S >= .6: 3
    #   the other 10 (.2, .3, .4, .5 ...) fall short
    # p = 6 / 16 = 0.375 (the boundary S = .1 and S = .6 count: |sum| equal to the observed)
    assert sign_flip_pvalue([0.3, 0.1, 0.2, -0.1]) == (0.375, "exact")
    # all of one sign: only the identity and the all-flip reach the observed |sum|: 2 / 16
    assert sign_flip_pvalue([0.1, 0.2, 0.3, 0.4])[0] == 0.125


def test_sign_flip_exact_n5_by_hand():
    # d = [.4, .3, .2, .1, -.1], sum .9, sum |d| 1.1: |1.1 - 2S| >= .9 when S <= .1 or S >= 1.0.
    #   S <= .1: {}, {.1}, {.1'}; S >= 1.0: their complements (1.1, 1.0, 1.0)     -> 6 of 32 = 0.1875
    assert sign_flip_pvalue([0.4, 0.3, 0.2, 0.1, -0.1])[0] == 0.1875
    assert smallest_p(5) == 0.0625 and smallest_p(3) == 0.25  # never below 0.05 with 5 seeds


def _loop_pvalue(d):
    """Reference: every sign pattern by itertools, exact fractions of the patterns."""
    observed = abs(sum(d))
    hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= observed - 1e-12
               for signs in itertools.product((1, -1), repeat=len(d)))
    return hits / 2 ** len(d)


def test_sign_flip_against_a_loop_and_invariances():
    rng = random.Random(7)
    for n in (1, 2, 6, 9):
        d = [round(rng.uniform(-1, 1), 3) for _ in range(n)]
        p, _ = sign_flip_pvalue(d)
        assert p == pytest.approx(_loop_pvalue(d))
        assert sign_flip_pvalue([-x for x in d])[0] == p  # the other direction
        assert sign_flip_pvalue([3 * x for x in d])[0] == p  # the scale
        assert sign_flip_pvalue(list(reversed(d)))[0] == p  # the order of the seeds
    assert sign_flip_pvalue([0.0, 0.0, 0.0])[0] == 1.0
    assert math.isnan(sign_flip_pvalue([])[0])


def test_paired_t_by_hand_and_against_scipy():
    # d = 0.1, 0.2, 0.3, 0.4, -0.1: mean 0.18; squared deviations 0.0064 + 0.0004 + 0.0144 + 0.0484
    # + 0.0784 = 0.148, sd = sqrt(0.148 / 4) = 0.192354; t = 0.18 / (0.192354 / sqrt 5) = 2.092457 on 4 df
    d = [0.1, 0.2, 0.3, 0.4, -0.1]
    p, method = paired_t_pvalue(d)
    assert method == "paired t"
    assert p == pytest.approx(2 * sps.t.sf(2.092457, 4), rel=1e-5)
    assert p == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue, rel=1e-12)
    assert paired_t_pvalue([-x for x in d])[0] == pytest.approx(p)
    # five seeds that all agree: the sign-flip test cannot go below 2/32, the t-test can
    agree = [0.11, 0.12, 0.10, 0.13, 0.12]
    assert paired_pvalue(agree, "sign-flip")[0] == 2 / 32
    assert paired_pvalue(agree, "t")[0] == pytest.approx(sps.ttest_1samp(agree, 0.0).pvalue) and paired_pvalue(agree, "t")[0] < 1e-4
    assert paired_t_pvalue([0.1, 0.1])[0] == 0.0 and paired_t_pvalue([0.0, 0.0])[0] == 1.0
    assert math.isnan(paired_t_pvalue([0.3])[0])
    with pytest.raises(ValueError, match="unknown paired test 'wilcoxon'"):
        paired_pvalue(d, "wilcoxon")


def test_sign_flip_monte_carlo_beyond_the_exact_limit():
    d = [0.05 * ((i % 5) - 1.3) for i in range(18)]
    exact, method = sign_flip_pvalue(d, exact_max_n=18)
    assert method == "exact"
    mc, method = sign_flip_pvalue(d)
    assert method == "monte carlo"
    assert mc == sign_flip_pvalue(d)[0]  # a fixed seed: the same table gives the same p
    assert mc == pytest.approx(exact, abs=4 * math.sqrt(exact * (1 - exact) / 20_000))
    # all 20 positive: no random pattern of 20,000 is all-plus or all-minus (chance 2 / 2^20 each),
    # so p = (1 + 0) / (1 + 20,000)
    assert sign_flip_pvalue([0.1] * 20)[0] == pytest.approx(1 / 20_001)


# -- Holm -----------------------------------------------------------------------------------------


def test_holm_by_hand():
    # p = [.01, .04, .03, .2], m = 4. Sorted: .01 x 4 = .04; .03 x 3 = .09; .04 x 2 = .08 -> max(.09, .08) = .09;
    # .2 x 1 = .2. In the input order: [.04, .09, .09, .2]
    assert holm([0.01, 0.04, 0.03, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.2])
    # NaN stays NaN and is not counted (m = 2 here): .02 x 2 = .04, then .6 x 1 = .6
    out = holm([0.6, NAN, 0.02])
    assert out[0] == pytest.approx(0.6) and math.isnan(out[1]) and out[2] == pytest.approx(0.04)
    # capped at 1: .55 x 2 = 1.1 -> 1, then max(1, .6) = 1
    assert holm([0.6, 0.55]) == [1.0, 1.0]


def _holm_rejects(p, alpha):
    """Reference: Holm's step-down procedure as stated: reject the k-th smallest while p_(k) <= alpha / (m - k + 1)."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    rejected = set()
    for k, i in enumerate(order):
        if p[i] > alpha / (len(p) - k):
            break
        rejected.add(i)
    return rejected


def test_holm_against_the_step_down_procedure():
    rng = random.Random(3)
    for _ in range(200):
        p = [rng.choice([rng.random() * 0.1, rng.random()]) for _ in range(rng.randint(1, 8))]
        adjusted = holm(p)
        assert {i for i, a in enumerate(adjusted) if a <= 0.05} == _holm_rejects(p, 0.05)
    # boundary: p exactly alpha / m is rejected (adjusted exactly alpha)
    assert holm([0.0125, 0.5, 0.5, 0.5])[0] == 0.05


# -- ranks on a hand-built table ------------------------------------------------------------------


def _records(table: dict[str, list[float]]) -> list[dict]:
    return [{"agent": label, "label": label, "seed": s, "online_reward": v} for label, values in table.items()
            for s, v in enumerate(values)]


def test_ranks_with_four_seeds_are_ties():
    # A > B > C by .1 on every one of 4 seeds: each pair's differences share a sign, p = 2/16 = .125;
    # Holm over 3: .375 for all -> no order is supported: every rank is 1–3.
    table = {"A": [0.5, 0.6, 0.7, 0.8], "B": [0.4, 0.5, 0.6, 0.7], "C": [0.3, 0.4, 0.5, 0.6]}
    comparisons = pairwise({k: dict(enumerate(v)) for k, v in table.items()})
    assert [(c.a, c.b, c.p, c.p_holm) for c in comparisons] == [
        ("A", "B", 0.125, pytest.approx(0.375)), ("A", "C", 0.125, pytest.approx(0.375)),
        ("B", "C", 0.125, pytest.approx(0.375))]
    assert rank_ranges(list(table), comparisons) == {"A": (1, 3), "B": (1, 3), "C": (1, 3)}
    assert supported_leader(list(table), comparisons) is None
    frame = leaderboard_frame(_records(table))
    assert list(zip(frame["label"], frame["rank"], frame["rank_low"], frame["rank_high"])) == [
        ("A", 1, 1, 3), ("B", 2, 1, 3), ("C", 3, 1, 3)]


def test_ranks_with_seven_seeds_by_hand():
    # 7 seeds. A beats B and C on every seed: only the identity and the all-flip reach the observed |sum|,
    # p = 2/128 = .015625 each. B - C = [.1, -.1, .1, -.1, .1, -.1, 0]: mean 0, so every pattern reaches it, p = 1.
    # Holm over 3: .015625 x 3 = .046875 <= .05 (reject); .015625 x 2 = .03125 -> max(.046875, .03125) = .046875
    # (reject); 1 x 1 = 1 (tie). So A is 1; B and C are each beaten by A and beat nobody: 2–3.
    a = [0.9, 0.8, 0.85, 0.95, 0.7, 0.75, 0.8]
    b = [0.5, 0.6, 0.5, 0.6, 0.5, 0.6, 0.55]
    c = [0.4, 0.7, 0.4, 0.7, 0.4, 0.7, 0.55]
    table = {"A": a, "B": b, "C": c}
    comparisons = pairwise({k: dict(enumerate(v)) for k, v in table.items()})
    by_pair = {(x.a, x.b): x for x in comparisons}
    assert by_pair["A", "B"].p == 2 / 128 and by_pair["A", "C"].p == 2 / 128
    assert by_pair["B", "C"].p == pytest.approx(1.0)
    assert by_pair["A", "B"].p_holm == pytest.approx(0.046875) and by_pair["A", "C"].p_holm == pytest.approx(0.046875)
    assert by_pair["A", "B"].winner == "A" and by_pair["A", "C"].winner == "A" and by_pair["B", "C"].winner is None
    assert rank_ranges(["A", "B", "C"], comparisons) == {"A": (1, 1), "B": (2, 3), "C": (2, 3)}
    assert supported_leader(["A", "B", "C"], comparisons) == "A"
    assert [format_rank(*r) for r in rank_ranges(["A", "B", "C"], comparisons).values()] == ["1", "2–3", "2–3"]
    # lower is better flips the winner, not the p
    flipped = pairwise({k: dict(enumerate(v)) for k, v in table.items()}, higher_is_better=False)
    assert [x.winner for x in flipped] == ["B", "C", None]
    # The board: rank cells, bold only for the supported leader, and the power it states.
    board = board_from_records("hand", _records(table), [], source="test")
    md = markdown(board, generator="test")
    rows = [line for line in md.splitlines() if line.startswith("| ") and line.split(" | ")[1] in "ABC"]
    assert [r.split(" | ")[0] for r in rows[:3]] == ["| 1", "| 2–3", "| 2–3"]
    assert rows[0].split(" | ")[3].startswith("**0.821") and "**" not in rows[1] + rows[2]
    assert "Holm-corrected over the 3 comparisons made" in md and "| A − B | 7 |" in md


def test_pairs_with_one_shared_seed_are_not_tested():
    comparisons = pairwise({"A": {0: 0.9, 1: 0.8}, "B": {0: 0.1}, "C": {1: 0.2, 2: 0.3}})
    assert [(c.a, c.b, c.n, c.made) for c in comparisons] == [("A", "B", 1, False), ("A", "C", 1, False),
                                                             ("B", "C", 0, False)]
    assert all(math.isnan(c.p_holm) for c in comparisons)


# -- collapse -------------------------------------------------------------------------------------


def test_rolling_mean_against_a_loop():
    x = [random.Random(1).random() for _ in range(100)]
    r = rolling_mean(x, 7)
    assert len(r) == 94
    assert r == pytest.approx([sum(x[i:i + 7]) / 7 for i in range(94)])
    assert len(rolling_mean(x[:5], 7)) == 0


def test_collapse_fires_on_a_drop_that_stays():
    # 128 episodes at .8, then 200 at .1 (window 64, fraction .5, hold 64). The window ending at episode e
    # (>= 127) holds 191 - e episodes at .8; its mean (.8k + .1(64 - k)) / 64 is under .4 when .7k < 19.2,
    # k <= 27, so from e = 164 on. From 164 to the last episode 327: 164 windows below, >= 64 -> collapsed.
    verdict = phase_collapse([0.8] * 128 + [0.1] * 200, phase="p")
    assert verdict.judged and verdict.collapsed
    assert verdict.peak == pytest.approx(0.8) and verdict.below_from == 164 and verdict.episodes == 328


def test_no_collapse_on_a_drop_that_recovers():
    verdict = phase_collapse([0.8] * 128 + [0.1] * 200 + [0.8] * 128)
    assert verdict.judged and not verdict.collapsed and verdict.below_from is None


def test_collapse_hold_boundary():
    # High 128 then L low: the windows ending 164 .. 127 + L are below, L - 36 of them.
    assert phase_collapse([0.8] * 128 + [0.1] * 100).collapsed  # 64 windows: exactly the hold
    assert not phase_collapse([0.8] * 128 + [0.1] * 99).collapsed  # 63: too short to tell


def test_collapse_floor_and_short_phases():
    # peak exactly at the floor is judged (0.5 and 0.0 are exact in binary); just above it is not
    rewards = [0.5] * 100 + [0.0] * 200
    assert phase_collapse(rewards, floor=0.5).collapsed
    low = phase_collapse(rewards, floor=0.5000001)
    assert not low.judged and not low.collapsed and low.peak == 0.5
    short = phase_collapse([0.8] * 100)  # 37 full windows < hold 64
    assert not short.judged and short.peak == pytest.approx(0.8)
    assert not phase_collapse([0.8] * 10).judged and math.isnan(phase_collapse([0.8] * 10).peak)


def test_run_collapse_per_phase_and_the_run_record(tmp_path):
    episodes = ([{"phase": "a", "reward": 0.8}] * 128 + [{"phase": "b", "reward": 0.9}] * 200
                + [{"phase": "a", "reward": 0.1}] * 200)  # a's late episodes complete after the drift
    verdicts = run_collapse(episodes)
    assert [(v.phase, v.episodes, v.collapsed) for v in verdicts] == [("a", 328, True), ("b", 200, False)]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(e | {"task": "t"}) + "\n" for e in episodes))
    assert collapse_record(tmp_path) == {"collapsed": 1.0, "collapsed_phases": "a"}
    assert collapse_record(tmp_path / "nowhere") == {}


def test_boards_count_collapses_and_report_means_without_them():
    # sao: seeds 0, 1, 2 at .5, .6, .1, seed 2 collapsed; grpo none collapsed.
    records = [{"agent": "sao", "label": "sao", "seed": s, "online_reward": v, "collapsed": c}
               for s, v, c in ((0, 0.5, 0.0), (1, 0.6, 0.0), (2, 0.1, 1.0))]
    records += [{"agent": "grpo", "label": "grpo", "seed": s, "online_reward": v, "collapsed": 0.0} for s, v in ((0, 0.3), (1, 0.3))]
    frame = leaderboard_frame(records).set_index("label")
    assert (frame.loc["sao", "collapses"], frame.loc["sao", "collapse_checked"]) == (1, 3)
    assert frame.loc["sao", "online_reward"] == pytest.approx(0.4)  # (.5 + .6 + .1) / 3
    assert frame.loc["sao", NO_COLLAPSE] == pytest.approx(0.55)  # (.5 + .6) / 2
    # [.5, .6]: sd .070711, half 12.706205 * .070711 / sqrt(2) = .635310
    assert frame.loc["sao", f"{NO_COLLAPSE}_ci95"] == pytest.approx(0.635310, abs=1e-6)
    assert frame.loc["grpo", "collapses"] == 0
    md = markdown(board_from_records("hand", records, [], source="test"), generator="test")
    assert "| rank | recipe | seeds | online reward | online reward, collapsed runs left out | collapsed |" in md
    assert "- **collapses**: sao: 1 of 3; grpo: 0 of 2." in md
    assert "| 1–2 | sao | 3 (0, 1, 2) | 0.400 ± 0.657 | 0.550 ± 0.635 | 1 of 3 |" in md
    assert np.isnan(leaderboard_frame([{"agent": "x", "seed": 0, "online_reward": 0.1}]).get("collapses", NAN))


def _board(table: dict[str, list[float]], collapsed: dict[tuple[str, int], float] | None = None):
    collapsed = collapsed or {}
    records = [{"agent": label, "label": label, "seed": seed, "online_reward": v,
                "collapsed": collapsed.get((label, seed), 0.0)}
               for label, values in table.items() for seed, v in enumerate(values)]
    return board_from_records("hand", records, [], source="test")


# a beats b and c on all 8 seeds; b and c are a tie (signs mixed).
EIGHT = {"a": [0.9, 0.8, 0.85, 0.95, 0.7, 0.75, 0.88, 0.92],
         "b": [0.5, 0.6, 0.4, 0.55, 0.45, 0.52, 0.58, 0.47],
         "c": [0.52, 0.55, 0.45, 0.5, 0.5, 0.49, 0.6, 0.44]}


def test_without_collapses_the_collapsed_runs_table_ranks_as_the_main_table():
    board = _board(EIGHT)
    main = board.comparisons("online_reward")
    kept = board.comparisons(NO_COLLAPSE)
    assert [(c.a, c.b, c.n, c.p_holm, c.winner) for c in kept] == [(c.a, c.b, c.n, c.p_holm, c.winner) for c in main]
    assert [c.winner for c in main] == ["a", "a", None]  # 2/256 * 3 = 0.0234 for a's pairs
    assert board_power(board, NO_COLLAPSE) == board_power(board, "online_reward")
    assert board.supported_best(NO_COLLAPSE) == "a"
    table = "\n".join(metric_table([board], NO_COLLAPSE))
    assert "#1 of 3" in table and "#2–3 of 3" in table and "n/a" not in table


def test_the_collapsed_runs_table_is_tested_on_the_runs_that_did_not_collapse():
    board = _board(EIGHT, collapsed={("a", 0): 1.0})
    kept = {(c.a, c.b): c for c in board.comparisons(NO_COLLAPSE)}
    assert kept[("a", "b")].n == 7 and kept[("b", "c")].n == 8
    # a - b over seeds 1-7 only: .8-.6, .85-.4, .95-.55, .7-.45, .75-.52, .88-.58, .92-.47
    assert kept[("a", "b")].mean == pytest.approx(np.mean([0.2, 0.45, 0.4, 0.25, 0.23, 0.3, 0.45]))
    # 7 seeds: 2/128 * 3 = 0.047 for a's pairs, still below 0.05
    assert kept[("a", "b")].p_holm == pytest.approx(3 * 2 / 128)


def test_the_power_fact_states_the_holm_level_and_the_floor():
    board = _board(EIGHT)
    power = board_power(board)
    sd, n = power["sd"], power["n"]
    assert (n, power["m"], power["min_n"]) == (8, 3, 7)
    assert power["mde"] == pytest.approx((sps.t.ppf(1 - 0.05 / 6, 7) + sps.t.ppf(0.8, 7)) * sd / math.sqrt(8))
    text = power_fact(board)
    assert "Holm over its 3 comparisons" in text and "α/3 = 0.0167, Holm's most stringent step" in text
    assert "t(1 − α/6, 7)" in text and "from 7 seeds" in text and "not a bound" in text
    few = _board({k: v[:6] for k, v in EIGHT.items()})
    assert board_power(few)["mde"] == math.inf
    assert power_fact(few).startswith("none in online reward at n=6 seeds: the sign-flip test cannot reach α after Holm")


def test_the_summary_lists_every_supported_order_not_only_leaders():
    """A codebase-drift-like board: a and b each beat c on all 8 seeds (Holm p 3 x 2/256 = 0.0234, the
    smaller two of three), a - b a tie: no leader, two supported orders. The reading names them."""
    table = {"a": [0.30, 0.25, 0.28, 0.33, 0.27, 0.31, 0.26, 0.29],
             "b": [0.29, 0.27, 0.26, 0.34, 0.25, 0.32, 0.27, 0.28],
             "c": [0.20, 0.18, 0.21, 0.22, 0.19, 0.20, 0.21, 0.17]}
    board = _board(table)
    board.env = "codebase-drift"
    tie = _board({"a": [0.5] * 4, "b": [0.4, 0.6, 0.5, 0.45], "c": [0.5, 0.4, 0.6, 0.55]})
    tie.env = "style-drift"
    assert board.supported_best("online_reward") is None
    text = reading([tie, board])
    assert "codebase-drift a > c (Holm p 0.023), b > c (Holm p 0.023)" in text
    assert "every other pair is a tie, and on style-drift every pair is." in text
    assert "everywhere else the order is a tie" not in text
