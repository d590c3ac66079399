"""Edge values of three small modules, each checked against numbers and lines worked out by hand:

* ``sao_env.agents.configs``: every hyper-parameter bound at its limit and one step past it, the defaults
  the dump leaves out, the first error reported, and the recipes the early check leaves alone;
* ``sao_env.leaderboard.predictions``: contrasts and predictions files that are refused, per-seed values that
  are dropped, sign-flip p and Holm against a brute-force enumeration, the level's boundary, the "<" sign,
  and the verdict page's provisional note and counts;
* ``sao_env.benchmarks._http``: which statuses are tried again, back-off and ``Retry-After`` arithmetic, the
  retry budget and reply cap from the environment, one-line reasons, stopping, and what a real server is sent.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx
import pandas as pd
import pytest
from local_http import LocalServer

from sao_env.agents.configs import (
    MAX_LR,
    AgentConfig,
    GRPOConfig,
    KeyedBaselineConfig,
    ReinforceConfig,
    RunningMeanConfig,
    SAOConfig,
    VAPOConfig,
    build_hparams,
    check_hparams,
)
from sao_env.benchmarks import _http
from sao_env.errors import UserError
from sao_env.leaderboard.predictions import (
    Contrast,
    Prediction,
    Predictions,
    Verdict,
    _number,
    _seed,
    count_verdicts,
    load_predictions,
    read_per_seed,
    seed_differences,
    verdict_counts,
    verdict_display,
    verdict_markdown,
    verdict_table,
    verdicts,
)


def _error(cls, **hparams) -> str:
    """The one-line error ``build_hparams`` gives for ``hparams``."""
    with pytest.raises(UserError) as caught:
        build_hparams(cls, hparams)
    return str(caught.value)


# ----------------------------------------------------------------------------- agents.configs


def test_learning_rates_accept_exactly_max_lr_and_refuse_past_it_or_zero():
    """``lr`` and ``critic_lr`` lie in (0, 1e6]: 1e6 itself is a learning rate, the next float above it is not."""
    assert MAX_LR == 1e6
    assert AgentConfig(lr=1e6).lr == 1e6 and SAOConfig(critic_lr=1e6).critic_lr == 1e6
    above = math.nextafter(1e6, math.inf)
    assert _error(AgentConfig, lr=above) == ("invalid configuration at agent.hparams.lr: "
                                             "Input should be less than or equal to 1000000")
    assert _error(SAOConfig, critic_lr=above) == ("invalid configuration at agent.hparams.critic_lr: "
                                                  "Input should be less than or equal to 1000000")
    assert _error(AgentConfig, lr=0) == "invalid configuration at agent.hparams.lr: Input should be greater than 0"
    assert _error(SAOConfig, critic_lr=0.0) == ("invalid configuration at agent.hparams.critic_lr: "
                                                "Input should be greater than 0")


@pytest.mark.parametrize(("cls", "field", "limits", "past", "message"), [
    (AgentConfig, "adam_eps", [1e-300], 0.0, "greater than 0"),
    (AgentConfig, "grad_clip", [1e-9, None], 0.0, "greater than 0"),
    (AgentConfig, "micro_batch_tokens", [1], 0, "greater than or equal to 1"),
    (SAOConfig, "critic_updates", [1], 0, "greater than or equal to 1"),
    (SAOConfig, "critic_warmup_updates", [0], -1, "greater than or equal to 0"),
    (SAOConfig, "alpha", [1e-9], 0.0, "greater than 0"),
    (SAOConfig, "lam", [0.0, 1.0], 1.01, "less than or equal to 1"),
    (SAOConfig, "lam", [0.0], -0.01, "greater than or equal to 0"),
    (SAOConfig, "gamma", [0.0, 1.0], 1.01, "less than or equal to 1"),
    (SAOConfig, "gamma", [1.0], -0.01, "greater than or equal to 0"),
    (SAOConfig, "episodes_per_update", [1], 0, "greater than or equal to 1"),
    (SAOConfig, "eps_low", [1.0], 1.01, "less than or equal to 1"),
    (SAOConfig, "eps_low", [1e-9], 0.0, "greater than 0"),
    (SAOConfig, "eps_high", [1e-9, 50.0], 0.0, "greater than 0"),
    (SAOConfig, "dual_clip", [1.01], 1.0, "greater than 1"),
    (SAOConfig, "value_pretrain_episodes", [0], -1, "greater than or equal to 0"),
    (SAOConfig, "value_pretrain_steps", [1], 0, "greater than or equal to 1"),
    (VAPOConfig, "eps_low", [1.0], 1.01, "less than or equal to 1"),
    (VAPOConfig, "eps_high", [1e-9], 0.0, "greater than 0"),
    (GRPOConfig, "group_size", [2], 1, "greater than or equal to 2"),
    (GRPOConfig, "groups_per_update", [1], 0, "greater than or equal to 1"),
    (GRPOConfig, "epochs", [1], 0, "greater than or equal to 1"),
    (GRPOConfig, "minibatches", [1], 0, "greater than or equal to 1"),
    (GRPOConfig, "eps_low", [1.0], 1.01, "less than or equal to 1"),
    (GRPOConfig, "dual_clip", [1.01], 1.0, "greater than 1"),
    (RunningMeanConfig, "window", [1], 0, "greater than or equal to 1"),
    (RunningMeanConfig, "episodes_per_update", [1], 0, "greater than or equal to 1"),
    (RunningMeanConfig, "dis_eps_low", [1.0], 1.01, "less than or equal to 1"),
    (RunningMeanConfig, "dis_eps_high", [1e-9], 0.0, "greater than 0"),
    (ReinforceConfig, "episodes_per_update", [1], 0, "greater than or equal to 1"),
    (KeyedBaselineConfig, "window", [1], 0, "greater than or equal to 1"),
    (KeyedBaselineConfig, "global_window", [1], 0, "greater than or equal to 1"),
    (KeyedBaselineConfig, "episodes_per_update", [1], 0, "greater than or equal to 1"),
    (KeyedBaselineConfig, "discount", [1.0, 1e-9], 1.01, "less than or equal to 1"),
    (KeyedBaselineConfig, "discount", [1.0], 0.0, "greater than 0"),
    (KeyedBaselineConfig, "dis_eps_low", [1.0], 1.01, "less than or equal to 1"),
])
def test_each_bounded_hyperparameter_takes_its_limit_and_refuses_one_step_past(cls, field, limits, past, message):
    """Each bound of each algorithm's fields: the values at the limit are kept as given, one step past is one
    line naming the field and the bound."""
    for value in limits:
        assert getattr(cls(**{field: value}), field) == value
    assert _error(cls, **{field: past}) == f"invalid configuration at agent.hparams.{field}: Input should be {message}"


def test_keys_left_out_of_the_dump_have_their_documented_defaults_and_appear_once_changed():
    """The dump omits micro_batch_tokens (None), gradient_checkpointing and fused_adam (False) and SAO's value_at
    ("token") only at those defaults: set to another value each is dumped, set to its default it is not."""
    base = AgentConfig()
    assert (base.micro_batch_tokens, base.gradient_checkpointing, base.fused_adam) == (None, False, False)
    assert SAOConfig().value_at == "token" and SAOConfig().advantage_values == "before_fit"
    assert AgentConfig().model_dump() == {"lr": 1e-4, "adam_betas": (0.9, 0.999), "adam_eps": 1e-5, "grad_clip": 1.0,
                                          "agg": "token_mean", "reward_norm": False}
    changed = AgentConfig(micro_batch_tokens=4096, gradient_checkpointing=True, fused_adam=True).model_dump()
    assert {k: changed[k] for k in ("micro_batch_tokens", "gradient_checkpointing", "fused_adam")} == {
        "micro_batch_tokens": 4096, "gradient_checkpointing": True, "fused_adam": True}
    assert "fused_adam" not in AgentConfig(fused_adam=False).model_dump()
    sao = SAOConfig(value_at="prompt").model_dump()
    assert sao["value_at"] == "prompt" and "value_at" not in SAOConfig(value_at="token").model_dump()
    assert "value_at" not in VAPOConfig().model_dump()


def test_vapo_and_grpo_default_to_the_ppo_clip_band_and_sao_to_the_scenarios():
    """VAPO and GRPO clip at 1 - 0.2 and 1 + 0.28 with ppo_clip; SAO uses dis with the scenario's band (None)."""
    assert (VAPOConfig().loss, VAPOConfig().eps_low, VAPOConfig().eps_high) == ("ppo_clip", 0.2, 0.28)
    assert (GRPOConfig().loss, GRPOConfig().eps_low, GRPOConfig().eps_high) == ("ppo_clip", 0.2, 0.28)
    assert (SAOConfig().loss, SAOConfig().eps_low, SAOConfig().eps_high) == ("dis", None, None)
    grpo = GRPOConfig()
    assert (grpo.group_size, grpo.groups_per_update, grpo.normalize_std, grpo.epochs, grpo.minibatches) == (
        4, 2, True, 1, 1)
    keyed = KeyedBaselineConfig()
    assert (keyed.window, keyed.discount, keyed.global_window, keyed.episodes_per_update) == (128, 1.0, 128, 8)


def test_adam_betas_refuse_any_negative_beta_and_name_both():
    """Each beta must be in [0, 1): (0, 0) is kept; a negative first or second beta is refused, and the message
    lists both betas as given. A beta that is no number is reported at its index."""
    assert AgentConfig(adam_betas=(0.0, 0.0)).adam_betas == (0.0, 0.0)
    assert _error(AgentConfig, adam_betas=(-0.1, 0.5)) == (
        "invalid configuration at agent.hparams.adam_betas: Value error, Adam's betas must lie in [0, 1), "
        "got [-0.1, 0.5]")
    assert _error(AgentConfig, adam_betas=(0.5, -1e-9)).endswith("got [0.5, -1e-09]")
    assert _error(AgentConfig, adam_betas=[0.9, "x"]) == (
        "invalid configuration at agent.hparams.adam_betas.1: Input should be a valid number, "
        "unable to parse string as a number")


def test_sao_takes_every_policy_and_segment_loss_and_grpo_only_the_policy_losses():
    """SAO's loss may be any policy loss or a segment-level DIS; GRPO's only a policy loss (first and last named)."""
    for name in ("dis", "gspo", "dis_sequence", "dis_step"):
        assert SAOConfig(loss=name).loss == name
    for name in ("dis", "gspo"):
        assert GRPOConfig(loss=name).loss == name
    assert _error(GRPOConfig, loss="dis_sequence") == (
        "invalid configuration at agent.hparams.loss: Value error, unknown policy loss 'dis_sequence'; "
        "known: dis, ppo_clip, pg, tis, mis_token, mis_seq, gspo")


def test_literal_choices_name_their_two_values_and_the_band_aliases_fill_saos_fields():
    """value_at and advantage_values take exactly their two words; dis_eps_high fills SAO's eps_high."""
    assert SAOConfig(value_at="prompt").value_at == "prompt"
    assert SAOConfig(advantage_values="after_fit").advantage_values == "after_fit"
    assert _error(SAOConfig, value_at="episode") == (
        "invalid configuration at agent.hparams.value_at: Input should be 'token' or 'prompt'")
    assert _error(SAOConfig, advantage_values="during") == (
        "invalid configuration at agent.hparams.advantage_values: Input should be 'before_fit' or 'after_fit'")
    assert SAOConfig(dis_eps_high=4.0).eps_high == 4.0 and SAOConfig(dis_eps_high=4.0).eps_low is None


def test_the_first_bad_field_in_declaration_order_is_the_one_reported():
    """Two bad values, given in the other order: the line names lr (declared first), not adam_eps."""
    assert _error(AgentConfig, adam_eps=0, lr=0) == (
        "invalid configuration at agent.hparams.lr: Input should be greater than 0")
    assert _error(GRPOConfig, minibatches=0, group_size=1) == (
        "invalid configuration at agent.hparams.group_size: Input should be greater than or equal to 2")


def test_an_unknown_key_gets_a_hint_only_when_one_is_close():
    """An unknown key close to a field names it; one close to none is the bare pydantic line."""
    assert _error(GRPOConfig, group_sise=4) == ("invalid configuration at agent.hparams.group_sise: Extra inputs are "
                                                "not permitted; did you mean 'group_size'?")
    assert _error(GRPOConfig, zzqq=1) == "invalid configuration at agent.hparams.zzqq: Extra inputs are not permitted"


def test_check_hparams_checks_a_readable_recipe_and_leaves_the_rest_alone():
    """A recipe the check cannot read (not a mapping, algorithm not a string, hparams not a mapping, any key
    not a string) passes untouched; a readable one is checked by its algorithm's class, no hparams by defaults."""
    for agent in (["sao"], {"algorithm": 1, "hparams": {"lr": -1}}, {"algorithm": "sao", "hparams": "lr=-1"},
                  {"algorithm": "sao", "hparams": {"lr": -1, 2: 3}}, {"algorithm": "sao"}):
        assert check_hparams(agent) is None
    with pytest.raises(UserError, match=r"^invalid configuration at agent\.hparams\.group_size: Input should be "
                                        r"greater than or equal to 2$"):
        check_hparams({"algorithm": "grpo", "hparams": {"group_size": 1}})
    with pytest.raises(UserError, match=r"^invalid configuration at agent\.hparams\.discount: Input should be "
                                        r"greater than 0$"):
        check_hparams({"algorithm": "oracle_class", "hparams": {"discount": 0}})


# ----------------------------------------------------------------------------- leaderboard.predictions


def _per_seed(values: dict[tuple[str, str], dict[int, float]]) -> pd.DataFrame:
    """A per-seed table: one line per (cell, row, seed)."""
    return pd.DataFrame([{"scenario": cell, "row": row, "seed": s, "online_reward": v}
                         for (cell, row), by_seed in values.items() for s, v in by_seed.items()])


def _spec(*items: dict, **fields) -> Predictions:
    return Predictions.model_validate({"predictions": list(items), **fields})


def _exact_p(eighths: list[int]) -> Fraction:
    """Two-sided sign-flip p by enumeration of all 2^n sign patterns, in exact integer arithmetic."""
    observed = abs(sum(eighths))
    hits = sum(1 for signs in itertools.product((1, -1), repeat=len(eighths))
               if abs(sum(s * d for s, d in zip(signs, eighths))) >= observed)
    return Fraction(hits, 2 ** len(eighths))


@pytest.mark.parametrize("text", ["a-b", "a - b - c", "a - ", " - b"])
def test_a_contrast_is_two_non_empty_labels_around_a_spaced_minus(text):
    """One label, three labels, or an empty side is refused with the contrast quoted."""
    with pytest.raises(ValueError, match="is not 'a - b'") as caught:
        Contrast(cell="x", contrast=text)
    assert caught.value.errors()[0]["msg"] == (
        f"Value error, contrast {text!r} is not 'a - b' (two row labels around ' - ')")


def test_contrast_labels_are_stripped_and_a_prediction_with_minus_reads_as_a_difference():
    """Extra spaces around the labels are dropped; with ``minus`` the text is ``(a - b at x) - (c - d at y) < 0``."""
    assert Contrast(cell="x", contrast="  critic -  mean ").rows == ("critic", "mean")
    plain = Prediction(id="A", cell="x", contrast="a - b", sign="<")
    assert plain.text() == "a - b at x < 0"
    nested = Prediction(id="B", cell="k3", contrast="sao - pp", sign=">", minus={"cell": "k1", "contrast": "sao - pp"})
    assert nested.text() == "(sao - pp at k3) - (sao - pp at k1) > 0"


def test_a_predictions_file_defaults_and_its_level_stops_short_of_one(tmp_path):
    """Without title, metric and alpha a file is "Predictions" on online_reward at 0.05; alpha 0.999 and 1e-12
    are levels, alpha 1 is refused in one line."""
    one = {"id": "A", "cell": "x", "contrast": "a - b", "sign": ">"}
    spec = _spec(one)
    assert (spec.title, spec.metric, spec.alpha) == ("Predictions", "online_reward", 0.05)
    assert _spec(one, alpha=0.999).alpha == 0.999 and _spec(one, alpha=1e-12).alpha == 1e-12
    path = tmp_path / "p.yaml"
    path.write_text("alpha: 1\npredictions: [{id: A, cell: x, contrast: a - b, sign: '>'}]\n")
    with pytest.raises(UserError) as caught:
        load_predictions(path)
    assert str(caught.value) == f"{path}: alpha: 1.0 is not a level: alpha must be finite, 0 < alpha < 1"


@pytest.mark.parametrize(("text", "message"), [
    ("- 1\n- 2\n", "predictions: Field required"),
    ("predictions: []\n", "predictions: no predictions"),
    ("predictions:\n" + "".join(f"- {{id: {i}, cell: x, contrast: a - b, sign: '>'}}\n" for i in "BABAC"),
     "predictions: prediction ids repeat: A, B"),
    ("predictions: [{id: A, cell: x, contrast: a - b, sign: '>', minus: {cell: y, contrast: c-d}}]\n",
     "predictions.0.minus.contrast: contrast 'c-d' is not 'a - b' (two row labels around ' - ')"),
    ("predictions: [{id: A, cell: x, contrast: a - b, sign: '>='}]\n", "predictions.0.sign: Input should be '>' or '<'"),
    ("predictions: [{id: A, cell: x, contrast: a - b, sign: '>'}]\nmetrics: auc\n",
     "metrics: Extra inputs are not permitted"),
])
def test_a_bad_predictions_file_is_one_line_naming_the_place(tmp_path, text, message):
    """A list at the top, no predictions, repeated ids (each named once, sorted), a nested bad contrast, a sign
    that is not > or <, an unknown key: ``PATH: PLACE: MESSAGE`` without pydantic's "Value error, " prefix."""
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        load_predictions(path)
    assert str(caught.value) == f"{path}: {message}"


def test_a_missing_predictions_file_or_per_seed_table_is_named(tmp_path):
    """Neither a missing predictions file nor a missing table is read: each is one line naming the path."""
    with pytest.raises(UserError) as caught:
        load_predictions(tmp_path / "none.yaml")
    assert str(caught.value) == f"{tmp_path / 'none.yaml'}: no such predictions file"
    with pytest.raises(UserError) as caught:
        read_per_seed(tmp_path / "none.csv", "online_reward")
    assert str(caught.value) == (f"{tmp_path / 'none.csv'}: no per-seed table (a grid writes per-seed.csv into its "
                                 "--out folder; name another with --per-seed)")


def test_read_per_seed_names_missing_columns_and_reads_whole_float_seeds_and_blank_values(tmp_path):
    """Columns row and seed missing: both named, sorted. Seed "4.0" is seed 4; a blank metric cell is NaN;
    a column other than the metric is left as read."""
    bad = tmp_path / "bad.csv"
    bad.write_text("scenario,online_reward\nx,0.5\n")
    with pytest.raises(UserError) as caught:
        read_per_seed(bad, "online_reward")
    assert str(caught.value) == f"{bad}: not a grid's per-seed table (no row, seed column)"
    good = tmp_path / "per-seed.csv"
    good.write_text("scenario,row,seed,online_reward,note\nx,a,4.0,0.25,n\nx,a,5,,m\n")
    table = read_per_seed(good, "online_reward")
    assert table["seed"].tolist() == [4, 5] and isinstance(table["seed"].tolist()[0], int)
    assert table["online_reward"].tolist()[0] == 0.25 and math.isnan(table["online_reward"].tolist()[1])
    assert table["note"].tolist() == ["n", "m"]


def test_metric_values_blank_or_none_are_missing_and_a_boolean_is_not_a_number():
    """``_number``: None and whitespace are NaN, "1e-3" is 0.001, True is refused at the ledger's record."""
    assert math.isnan(_number(None, Path("f.jsonl"), 0, "auc")) and math.isnan(_number("  ", Path("f.csv"), 0, "auc"))
    assert _number("1e-3", Path("f.csv"), 0, "auc") == 0.001 and _number(0, Path("f.csv"), 0, "auc") == 0.0
    with pytest.raises(UserError, match=r"^f\.jsonl: record 3: auc is True, not a number$"):
        _number(True, Path("f.jsonl"), 2, "auc")
    with pytest.raises(UserError, match=r"^f\.csv: line 4: auc is 'n/a', not a number$"):
        _number("n/a", Path("f.csv"), 2, "auc")


def test_a_seed_that_is_nan_or_none_is_shown_as_empty():
    """``_seed``: a NaN read from a blank cell and a None from a ledger are both "empty"; "4.0" is 4."""
    assert _seed("4.0", Path("f.csv"), 0) == 4
    with pytest.raises(UserError, match=r"^f\.csv: line 2: the seed is empty, not a whole number$"):
        _seed(math.nan, Path("f.csv"), 0)
    with pytest.raises(UserError, match=r"^f\.jsonl: record 1: the seed is empty, not a whole number$"):
        _seed(None, Path("f.jsonl"), 0)


def test_seed_differences_drop_non_finite_values_and_refuse_a_seed_twice():
    """a - b over the seeds both rows have a finite value for: seed 1's inf and seed 3 (only in b) are dropped.
    A row holding one seed twice is refused: a grid with axes is not read."""
    data = _per_seed({("x", "a"): {0: 0.75, 1: math.inf, 2: 0.5}, ("x", "b"): {0: 0.25, 1: 0.5, 2: 0.625, 3: 0.0}})
    prediction = Prediction(id="A", cell="x", contrast="a - b", sign=">")
    assert seed_differences(data, prediction, "online_reward") == {0: 0.5, 2: -0.125}
    twice = pd.concat([data, _per_seed({("x", "a"): {0: 0.5}})])
    with pytest.raises(UserError) as caught:
        seed_differences(twice, prediction, "online_reward")
    assert str(caught.value) == ("cell x, row a: a seed appears more than once in the per-seed table (a grid with "
                                 "axes: predictions name cells without axis points, so they need a grid without axes)")


def test_names_are_checked_for_the_minus_contrast_too_and_partial_skips_them():
    """The metric column, a row and the minus contrast's cell are each checked; with partial a prediction whose
    minus cell has no runs has no data instead."""
    data = _per_seed({("k1", "a"): {0: 0.5}, ("k1", "b"): {0: 0.25}, ("k3", "a"): {0: 0.5}, ("k3", "b"): {0: 0.0}})
    nested = {"id": "N", "cell": "k3", "contrast": "a - b", "sign": ">", "minus": {"cell": "k9", "contrast": "a - b"}}
    for spec, line in [
        (_spec({"id": "A", "cell": "k1", "contrast": "a - b", "sign": ">"}, metric="auc"),
         "the per-seed table has no column 'auc'"),
        (_spec({"id": "R", "cell": "k1", "contrast": "a - ghost", "sign": ">"}),
         "prediction R: no row 'ghost' in the per-seed table (rows: a, b)"),
        (_spec(nested), "prediction N: no cell 'k9' in the per-seed table (cells: k1, k3)"),
    ]:
        with pytest.raises(UserError) as caught:
            verdicts(data, spec)
        assert str(caught.value) == line
    (found,) = verdicts(data, _spec(nested), partial=True)
    assert (found.verdict, found.n, found.seeds, found.agreeing) == ("no data", 0, (), 0)
    assert math.isnan(found.p) and math.isnan(found.p_holm) and math.isnan(found.mean)


def test_sign_flip_and_holm_agree_with_an_enumeration_and_the_less_than_sign_is_judged():
    """Eight seeds, differences in eighths. up - base all +, down - base all -: p = 2/256 each (enumerated);
    mixed - base (4, 2, -1, 3, -2, 1, 5, -4)/8: 114 of 256 patterns reach |sum| 8, p = 57/128. Holm over 4:
    the three 1/128 become 4/128, 3/128 -> 4/128, 2/128 -> 4/128 (non-decreasing), then 57/128. Predicted "<"
    on down - base held, on up - base failed; ">" on up - base held; mixed not resolved (5 of 8 agree)."""
    up, down, mixed = [1, 2, 3, 4, 5, 6, 7, 8], [-3, -1, -2, -5, -4, -1, -6, -2], [4, 2, -1, 3, -2, 1, 5, -4]
    assert [_exact_p(d) for d in (up, down, mixed)] == [Fraction(1, 128), Fraction(1, 128), Fraction(57, 128)]
    base = {s: 0.5 for s in range(8)}
    data = _per_seed({("x", "base"): base, **{("x", name): {s: 0.5 + d / 8 for s, d in enumerate(diffs)}
                                              for name, diffs in (("up", up), ("down", down), ("mixed", mixed))}})
    found = verdicts(data, _spec({"id": "A", "cell": "x", "contrast": "up - base", "sign": ">"},
                                 {"id": "B", "cell": "x", "contrast": "down - base", "sign": "<"},
                                 {"id": "D", "cell": "x", "contrast": "up - base", "sign": "<"},
                                 {"id": "C", "cell": "x", "contrast": "mixed - base", "sign": ">"}))
    assert [v.p for v in found] == [1 / 128, 1 / 128, 1 / 128, 57 / 128]
    assert [v.p_holm for v in found] == [4 / 128, 4 / 128, 4 / 128, 57 / 128]
    assert [v.verdict for v in found] == ["held", "held", "failed", "not resolved"]
    assert [v.agreeing for v in found] == [8, 8, 0, 5]
    assert found[1].diffs == tuple(d / 8 for d in down) and found[1].seeds == tuple(range(8))
    assert [v.mean for v in found] == [4.5 / 8, -3 / 8, 4.5 / 8, 1 / 8]


def test_a_corrected_p_exactly_at_alpha_is_resolved():
    """Five seeds all +: p = 2/32 = 0.0625 exactly. At alpha 0.0625 it held (p <= alpha); at 0.0624 it is not
    resolved."""
    data = _per_seed({("x", "b"): {s: 0.0 for s in range(5)}, ("x", "a"): {s: 0.25 * (s + 1) for s in range(5)}})
    one = {"id": "A", "cell": "x", "contrast": "a - b", "sign": ">"}
    (held,) = verdicts(data, _spec(one, alpha=0.0625))
    assert (held.p, held.p_holm, held.verdict) == (0.0625, 0.0625, "held")
    (short,) = verdicts(data, _spec(one, alpha=0.0624))
    assert short.verdict == "not resolved"


def test_a_prediction_without_data_counts_in_holms_family_with_p_one():
    """Partial: six seeds all + (p = 2/64) and a prediction on a cell not yet run. Holm over 2 with the missing
    one at 1: 2 x 1/32 = 0.0625 > 0.05, not resolved (over 1 alone it would be 1/32 and held). Its detectable
    difference is stated at alpha/2: 6 seeds cannot reach 0.025 (2/64 > 0.025), so none."""
    data = _per_seed({("x", "b"): {s: 0.0 for s in range(6)}, ("x", "a"): {s: 0.125 * (s + 1) for s in range(6)}})
    found = verdicts(data, _spec({"id": "A", "cell": "x", "contrast": "a - b", "sign": ">"},
                                 {"id": "L", "cell": "later", "contrast": "a - b", "sign": ">"}), partial=True)
    assert found[0].p == 1 / 32 and found[0].p_holm == 0.0625
    assert [v.verdict for v in found] == ["not resolved", "no data"]
    assert found[0].mde == math.inf
    (alone,) = verdicts(data, _spec({"id": "A", "cell": "x", "contrast": "a - b", "sign": ">"}))
    assert (alone.p_holm, alone.verdict) == (1 / 32, "held")


def test_one_and_two_seed_verdicts_are_shown_without_an_interval_or_a_detectable_difference():
    """Two seeds (0.25, 0.75): mean +0.5, sd sqrt(1/8), half-width t(0.975, 1) x sd / sqrt(2) =
    tan(0.475 pi) / 4 = 3.177; 6 seeds are needed at alpha 0.05, so detectable "none". One seed (+0.25): no
    interval, detectable "n/a". No seeds: "—" for the mean and both p."""
    data = _per_seed({("x", "b"): {0: 0.0, 1: 0.0}, ("x", "a"): {0: 0.25, 1: 0.75},
                      ("y", "b"): {0: 0.0}, ("y", "a"): {0: 0.25}})
    found = verdicts(data, _spec({"id": "T", "cell": "x", "contrast": "a - b", "sign": ">"},
                                 {"id": "O", "cell": "y", "contrast": "a - b", "sign": ">"},
                                 {"id": "N", "cell": "z", "contrast": "a - b", "sign": "<"}), partial=True)
    assert found[0].half_width == pytest.approx(math.tan(0.475 * math.pi) / 4, rel=1e-12)
    assert math.isnan(found[1].half_width) and math.isnan(found[1].mde)
    assert found[0].mde == math.inf and [v.p for v in found[:2]] == [0.5, 1.0]
    header, body = verdict_display(verdict_table(found))
    assert header == ["id", "prediction", "n", "mean ± 95% CI", "seeds agreeing", "p", "p (Holm)", "detectable",
                      "verdict"]
    assert body == [
        ["T", "a - b at x > 0", "2", "+0.500 ± 3.177", "2 of 2", "0.5", "1", "none", "not resolved"],
        ["O", "a - b at y > 0", "1", "+0.250", "1 of 1", "1", "1", "n/a", "not resolved"],
        ["N", "a - b at z < 0", "0", "—", "0 of 0", "—", "—", "n/a", "no data"],
    ]


def _verdict(pid: str, diffs: tuple[float, ...], verdict: str, why: str = "") -> Verdict:
    prediction = Prediction(id=pid, cell="x", contrast="a - b", sign=">", why=why)
    return Verdict(prediction, tuple(range(len(diffs))), diffs, 0.5, 0.5, math.inf, verdict)


def test_the_verdict_page_is_provisional_only_when_seed_counts_differ_or_one_has_none():
    """Provisional: n of 2 and 3, or 2 and 0. Not: all 2, or all without data. held and failed are bold,
    not resolved is not; only predictions with a reason are listed; the rule names 7 seeds for 3 at 0.05."""
    spec = _spec({"id": "A", "cell": "x", "contrast": "a - b", "sign": ">"}, title="Hand")

    def page(found):
        return verdict_markdown(found, spec, source="p.yaml", per_seed="per-seed.csv")

    same = page([_verdict("A", (0.25, 0.75), "held", why="it learns"), _verdict("B", (0.5, 0.5), "failed"),
                 _verdict("C", (0.5, -0.5), "not resolved")])
    assert "Provisional" not in same
    assert same.startswith("# Hand: verdicts\n\nRead from `per-seed.csv` by `sao-env verdict p.yaml`;")
    assert "family of 3 predictions at α 0.05" in same and "it can reach α from 7 seeds" in same
    assert "| A | a - b at x > 0 | 2 | +0.500 ± 3.177 | 2 of 2 | 0.5 | 0.5 | none | **held** |" in same
    assert same.count("| **failed** |") == 1 and "| **not resolved** |" not in same and "| not resolved |" in same
    assert "\n- A: it learns\n" in same and "- B:" not in same
    assert same.endswith("\nOf 3 predictions: 1 held, 1 failed, 1 not resolved.\n")
    differ = page([_verdict("A", (0.25, 0.75), "held"), _verdict("B", (0.5, 0.5, 0.5), "held")])
    assert "**Provisional**: seeds per prediction differ (2, 3): the map is not complete." in differ
    missing = page([_verdict("A", (0.25, 0.75), "held"), _verdict("B", (), "no data")])
    assert "**Provisional**: seeds per prediction differ (0, 2):" in missing
    assert "Provisional" not in page([_verdict("A", (), "no data"), _verdict("B", (), "no data")])
    assert "Why each was predicted" not in differ


def test_verdicts_are_counted_in_a_fixed_order_leaving_out_none(tmp_path):
    """held, failed, not resolved, no data, whatever the input order; a count of 0 is not shown."""
    assert count_verdicts(["no data", "not resolved", "held", "failed", "held"]) == (
        "2 held, 1 failed, 1 not resolved, 1 no data")
    assert count_verdicts(iter(["not resolved", "no data"])) == "1 not resolved, 1 no data"
    assert count_verdicts([]) == ""
    pd.DataFrame({"verdict": ["failed", "held", "failed"]}).to_csv(tmp_path / "verdict.csv", index=False)
    assert verdict_counts(tmp_path / "verdict.csv") == "1 held, 2 failed"


# ----------------------------------------------------------------------------- benchmarks._http


@pytest.fixture
def clean_http(monkeypatch):
    """No retry or cap settings from the environment, requests allowed before and after."""
    for name in ("SAO_ENV_HTTP_RETRIES", "SAO_ENV_HTTP_MAX_WAIT_S", "SAO_ENV_HTTP_MAX_REPLY_BYTES"):
        monkeypatch.delenv(name, raising=False)
    _http.reset_stop()
    yield monkeypatch
    _http.reset_stop()


def _scripted(monkeypatch, replies):
    """Replace one try with ``replies`` in turn (a tuple is a reply, an exception is raised); returns the calls."""
    calls: list[tuple] = []
    queue = list(replies)

    def one_try(url, body, headers, deadline_s, max_bytes):
        calls.append((url, body, headers, deadline_s, max_bytes))
        reply = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(reply, BaseException):
            raise reply
        return reply

    monkeypatch.setattr(_http, "_one_try", one_try)
    return calls


URL = "http://127.0.0.1:9/v1/chat/completions"


def test_backoff_doubles_from_its_first_wait_and_stops_at_the_longest():
    """Waits 0.5, 1, 1.5 (capped), 1.5 without Retry-After; a Retry-After of 0 is honoured as 0, not backed off;
    a large one is capped, a negative one is 0. Defaults: 8 retries, 1 s, 120 s."""
    policy = _http.RetryPolicy(3, 0.5, 1.5)
    assert [policy.wait_s(k, None) for k in range(4)] == [0.5, 1.0, 1.5, 1.5]
    assert policy.wait_s(3, 0.0) == 0.0 and policy.wait_s(0, 1000.0) == 1.5 and policy.wait_s(0, -5.0) == 0.0
    assert policy.wait_s(1, 1.25) == 1.25
    assert _http.RetryPolicy() == _http.RetryPolicy(retries=8, backoff_s=1.0, max_wait_s=120.0)
    assert _http.RetryPolicy().wait_s(6, None) == 64.0 and _http.RetryPolicy().wait_s(7, None) == 120.0


def test_the_retry_budget_and_longest_wait_come_from_the_environment_within_bounds(clean_http):
    """An explicit count beats $SAO_ENV_HTTP_RETRIES; 0 retries and a longest wait of 0 are allowed, -1 of
    either is refused; a count that is not an integer is one line naming both variables."""
    assert _http.RetryPolicy.from_env() == _http.RetryPolicy(8, 1.0, 120.0)
    clean_http.setenv("SAO_ENV_HTTP_RETRIES", "5")
    assert _http.RetryPolicy.from_env().retries == 5 and _http.RetryPolicy.from_env(2).retries == 2
    assert _http.RetryPolicy.from_env(0).retries == 0
    clean_http.setenv("SAO_ENV_HTTP_MAX_WAIT_S", "0")
    assert _http.RetryPolicy.from_env().max_wait_s == 0.0
    bounds = "the HTTP retry budget and the longest wait must be >= 0"
    with pytest.raises(UserError, match=f"^{bounds}$"):
        _http.RetryPolicy.from_env(-1)
    clean_http.setenv("SAO_ENV_HTTP_MAX_WAIT_S", "-0.5")
    with pytest.raises(UserError, match=f"^{bounds}$"):
        _http.RetryPolicy.from_env()
    clean_http.setenv("SAO_ENV_HTTP_MAX_WAIT_S", "1")
    clean_http.setenv("SAO_ENV_HTTP_RETRIES", "-1")
    with pytest.raises(UserError, match=f"^{bounds}$"):
        _http.RetryPolicy.from_env()
    clean_http.setenv("SAO_ENV_HTTP_RETRIES", "1.5")
    with pytest.raises(UserError) as caught:
        _http.RetryPolicy.from_env()
    assert str(caught.value) == ("SAO_ENV_HTTP_RETRIES / SAO_ENV_HTTP_MAX_WAIT_S must be numbers (invalid literal "
                                 "for int() with base 10: '1.5')")


def test_retry_after_reads_padded_seconds_negative_as_zero_and_dates_against_now():
    """" 5 " is 5 s, "-3" is 0, an empty or absent header is None; an HTTP date 30 s after ``now`` is 30 s,
    one 10 s before it is 0."""
    when = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert _http.parse_retry_after(" 5 ") == 5.0 and _http.parse_retry_after("-3") == 0.0
    assert _http.parse_retry_after("") is None and _http.parse_retry_after(None) is None
    assert _http.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=when - 30) == 30.0
    assert _http.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=when + 10) == 0.0
    assert _http.parse_retry_after("Wed, 32 Foo 2015") is None


def test_the_reply_cap_is_the_argument_else_the_environment_else_8_mib(clean_http):
    """8 MiB = 8,388,608 bytes by default (an empty variable too); the variable's value when set; an explicit cap
    beats it; 0, a negative number and text are one line each."""
    assert _http.DEFAULT_MAX_REPLY_BYTES == 8_388_608 and _http.max_reply_bytes() == 8_388_608
    clean_http.setenv("SAO_ENV_HTTP_MAX_REPLY_BYTES", "")
    assert _http.max_reply_bytes() == 8_388_608
    clean_http.setenv("SAO_ENV_HTTP_MAX_REPLY_BYTES", "1024")
    assert _http.max_reply_bytes() == 1024 and _http.max_reply_bytes(5) == 5
    for raw in ("0", "-5"):
        clean_http.setenv("SAO_ENV_HTTP_MAX_REPLY_BYTES", raw)
        with pytest.raises(UserError, match="^SAO_ENV_HTTP_MAX_REPLY_BYTES must be greater than 0$"):
            _http.max_reply_bytes()
    clean_http.setenv("SAO_ENV_HTTP_MAX_REPLY_BYTES", "1k")
    with pytest.raises(UserError, match="^SAO_ENV_HTTP_MAX_REPLY_BYTES must be a number, not '1k'$"):
        _http.max_reply_bytes()


def test_only_timeouts_conflicts_rate_limits_and_gateway_errors_are_tried_again(clean_http):
    """With one retry: 408, 409, 425, 429, 500, 502, 503, 504 are tried twice; 400, 401, 403, 404, 413, 501,
    505 once, each failing as ``HTTP STATUS: BODY``."""
    tries: dict[int, int] = {}
    for status in (400, 401, 403, 404, 408, 409, 413, 425, 429, 500, 501, 502, 503, 504, 505):
        calls = _scripted(clean_http, [(status, {}, b"no")])
        with pytest.raises(_http.RequestFailed) as caught:
            _http.post_json(URL, {}, policy=_http.RetryPolicy(1, 1.0, 120.0), sleep=lambda s: None)
        assert caught.value.reason == f"HTTP {status}: no"
        tries[status] = len(calls)
    assert tries == {400: 1, 401: 1, 403: 1, 404: 1, 408: 2, 409: 2, 413: 1, 425: 2, 429: 2, 500: 2, 501: 1,
                     502: 2, 503: 2, 504: 2, 505: 1}


def test_a_status_below_400_is_a_reply_and_400_is_an_error_even_with_json(clean_http):
    """399 with a JSON body returns it; 400 with the same body fails at once without waiting."""
    _scripted(clean_http, [(399, {}, b'{"a": 1}')])
    assert _http.post_json(URL, {}, retries=3, sleep=lambda s: None) == {"a": 1}
    waits: list[float] = []
    calls = _scripted(clean_http, [(400, {}, b'{"a": 1}')])
    with pytest.raises(_http.RequestFailed) as caught:
        _http.post_json(URL, {}, retries=3, sleep=waits.append)
    assert (caught.value.reason, len(calls), waits) == ('HTTP 400: {"a": 1}', 1, [])
    assert str(caught.value) == f'request to {URL} failed (HTTP 400: {{"a": 1}})'
    assert caught.value.capped_bytes is None


def test_an_error_reply_is_shown_by_its_first_200_bytes_on_one_line(clean_http):
    """A 404 body of an invalid byte, "bad", a newline, "line" and 300 y: the first 200 bytes decoded with the
    replacement character, the newline a space: 9 bytes of text then 191 y."""
    _scripted(clean_http, [(404, {}, b"\xffbad\nline" + b"y" * 300)])
    with pytest.raises(_http.RequestFailed) as caught:
        _http.post_json(URL, {}, retries=0)
    assert caught.value.reason == "HTTP 404: \ufffdbad line" + "y" * 191


def test_invalid_json_is_tried_again_with_backoff_then_reported(clean_http):
    """Three replies that are not JSON with two retries: waits 1 s and 2 s, then the decoder's reason. A valid
    reply after one invalid one is returned."""
    waits: list[float] = []
    calls = _scripted(clean_http, [(200, {}, b"not json")])
    with pytest.raises(_http.RequestFailed) as caught:
        _http.post_json(URL, {}, retries=2, sleep=waits.append)
    assert caught.value.reason == "invalid JSON in the reply (Expecting value: line 1 column 1 (char 0))"
    assert (len(calls), waits) == (3, [1.0, 2.0])
    _scripted(clean_http, [(200, {}, b"{"), (200, {}, b'{"ok": true}')])
    assert _http.post_json(URL, {}, retries=1, sleep=lambda s: None) == {"ok": True}


def test_a_retry_after_applies_only_to_the_reply_that_sent_it(clean_http):
    """A 503 asking for 9 s, then a connection error, then a 200: waits 9 s, then the back-off of the second
    try (2 s), not the earlier 9 s again."""
    waits: list[float] = []
    _scripted(clean_http, [(503, {"retry-after": "9"}, b""), httpx.ConnectError("refused"), (200, {}, b"[1]")])
    assert _http.post_json(URL, {}, retries=2, sleep=waits.append) == [1]
    assert waits == [9.0, 2.0]


def test_transport_failures_are_retried_and_reported_in_one_line(clean_http):
    """A connection error is retried and reported as its type and first line (200 characters at most); a read
    timeout and a passed deadline both read "no complete reply within the 2.5-s deadline"."""
    calls = _scripted(clean_http, [httpx.ConnectError("refused\nat socket")])
    with pytest.raises(_http.RequestFailed) as caught:
        _http.post_json(URL, {}, retries=2, sleep=lambda s: None)
    assert (caught.value.reason, len(calls)) == ("ConnectError: refused", 3)
    _scripted(clean_http, [httpx.ConnectError("z" * 300)])
    with pytest.raises(_http.RequestFailed) as caught:
        _http.post_json(URL, {}, retries=0)
    assert caught.value.reason == "ConnectError: " + "z" * 200
    for failure in (httpx.ReadTimeout("slow"), _http._DeadlinePassed()):
        calls = _scripted(clean_http, [failure])
        with pytest.raises(_http.RequestFailed) as caught:
            _http.post_json(URL, {}, deadline_s=2.5, retries=1, sleep=lambda s: None)
        assert (caught.value.reason, len(calls)) == ("no complete reply within the 2.5-s deadline", 2)


def test_a_capped_reply_fails_at_once_with_its_cap(clean_http):
    """A reply over the cap is not tried again: one try, no wait, the cap in the reason and on the error."""
    waits: list[float] = []
    calls = _scripted(clean_http, [_http._Capped(12345)])
    with pytest.raises(_http.RequestFailed) as caught:
        _http.post_json(URL, {}, retries=3, sleep=waits.append)
    assert (caught.value.reason, caught.value.capped_bytes, len(calls), waits) == (
        "reply capped at 12,345 bytes", 12345, 1, [])


def test_a_stop_before_a_try_or_during_one_ends_the_request_without_waiting(clean_http):
    """Stopped before the first try: no try at all. Stopped while a try ends in a 503: no wait follows."""
    calls = _scripted(clean_http, [(200, {}, b"{}")])
    _http.stop_all()
    with pytest.raises(_http.RequestFailed) as caught:
        _http.post_json(URL, {}, retries=3, sleep=lambda s: None)
    assert (caught.value.reason, calls) == ("stopped", [])
    _http.reset_stop()
    waits: list[float] = []

    def stopping_try(*args):
        _http.stop_all()
        return 503, {}, b"busy"

    clean_http.setattr(_http, "_one_try", stopping_try)
    with pytest.raises(_http.RequestFailed) as caught:
        _http.post_json(URL, {}, retries=3, sleep=waits.append)
    assert (caught.value.reason, waits) == ("stopped", [])


def test_each_try_is_sent_the_payload_headers_deadline_and_cap(clean_http):
    """The payload as JSON bytes, a JSON content type, a bearer token only with a key, the deadline, and the cap
    from the argument or else from $SAO_ENV_HTTP_MAX_REPLY_BYTES."""
    calls = _scripted(clean_http, [(200, {}, b"{}")])
    _http.post_json(URL, {"q": "é", "n": 1}, api_key="k-1", deadline_s=7.0, max_bytes=99, retries=0)
    clean_http.setenv("SAO_ENV_HTTP_MAX_REPLY_BYTES", "2048")
    _http.post_json(URL, {}, retries=0)
    assert calls == [
        (URL, b'{"q": "\\u00e9", "n": 1}', {"Content-Type": "application/json", "Authorization": "Bearer k-1"}, 7.0, 99),
        (URL, b"{}", {"Content-Type": "application/json"}, 600.0, 2048),
    ]


@pytest.fixture
def server():
    """A local server answering each POST with the next scripted (status, headers, body); it records what it got."""
    state = {"script": [], "seen": []}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            state["seen"].append((dict(self.headers), body))
            status, headers, reply = state["script"].pop(0)
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(reply))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    with LocalServer(Handler, "/v1/chat/completions") as local:
        state["url"] = local.url
        yield state


def test_a_real_server_gets_the_key_and_payload_and_a_425_with_retry_after_0_is_retried(server, clean_http):
    """A 425 asking for 0 s is retried after a wait of 0, then a 201's JSON is the result; the server saw the
    bearer token and the JSON body. A reply one byte over the cap fails after one request; at the cap it is read."""
    waits: list[float] = []
    server["script"] = [(425, {"Retry-After": "0"}, b"early"), (201, {"Content-Type": "application/json"}, b'{"n": 2}')]
    assert _http.post_json(server["url"], {"q": 1}, api_key="k-1", sleep=waits.append) == {"n": 2}
    assert waits == [0.0]
    assert [(h["Authorization"], h["Content-Type"], body) for h, body in server["seen"]] == [
        ("Bearer k-1", "application/json", b'{"q": 1}')] * 2
    server["script"] = [(200, {}, b'{"n": 10}')]
    with pytest.raises(_http.RequestFailed) as caught:
        _http.post_json(server["url"], {}, max_bytes=8, retries=2, sleep=waits.append)
    assert (caught.value.reason, caught.value.capped_bytes, len(server["seen"])) == ("reply capped at 8 bytes", 8, 3)
    server["script"] = [(200, {}, b'{"n": 10}')]
    assert _http.post_json(server["url"], {}, max_bytes=9, retries=0) == {"n": 10}
    assert "Authorization" not in server["seen"][-1][0]


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf"])
def test_a_number_from_the_environment_must_be_finite(clean_http, raw):
    """NaN passes a ``<= 0`` check and infinity overflows ``int``: both are one line naming the variable, for the
    reply cap, the request and grader deadlines, and the longest wait between tries."""
    for name in ("SAO_ENV_HTTP_MAX_REPLY_BYTES", "SAO_ENV_HTTP_DEADLINE_S", "SAO_ENV_GRADER_DEADLINE_S"):
        clean_http.setenv(name, raw)
        with pytest.raises(UserError, match=rf"^{name} must be a finite number, not '{raw}'$"):
            _http.env_number(name, 1.0)
        clean_http.delenv(name)
    clean_http.setenv("SAO_ENV_HTTP_MAX_REPLY_BYTES", raw)
    with pytest.raises(UserError, match=rf"^SAO_ENV_HTTP_MAX_REPLY_BYTES must be a finite number, not '{raw}'$"):
        _http.max_reply_bytes()
    clean_http.delenv("SAO_ENV_HTTP_MAX_REPLY_BYTES")
    clean_http.setenv("SAO_ENV_HTTP_MAX_WAIT_S", raw)
    with pytest.raises(UserError, match=rf"^SAO_ENV_HTTP_MAX_WAIT_S must be a finite number of seconds, not {raw}$"):
        _http.RetryPolicy.from_env()


def test_a_reply_cap_from_the_environment_is_a_whole_number_of_bytes(clean_http):
    """A cap of 0.5 would become 0 bytes (every reply refused): a fraction is one line; 1e3 is 1,000 bytes."""
    clean_http.setenv("SAO_ENV_HTTP_MAX_REPLY_BYTES", "0.5")
    with pytest.raises(UserError, match=r"^SAO_ENV_HTTP_MAX_REPLY_BYTES must be a whole number of bytes, not 0\.5$"):
        _http.max_reply_bytes()
    clean_http.setenv("SAO_ENV_HTTP_MAX_REPLY_BYTES", "1e3")
    assert _http.max_reply_bytes() == 1000
