"""Pre-registered predictions read from a grid's per-seed table (``sao_env.leaderboard.predictions``,
``sao-env verdict``): per-seed differences and differences of differences formed by hand, exact
sign-flip p and Holm over the family computed by hand, held / failed / not resolved, and the critic
map's predictions file against the header of its pre-registered grid.yaml."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from scipy import stats as sps

from sao_env.cli import main
from sao_env.leaderboard import maps
from sao_env.leaderboard.predictions import Predictions, load_predictions, seed_differences, verdicts

REPO = Path(__file__).resolve().parents[1]
SEEDS = list(range(10))


def table(values: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    """A per-seed table as a grid writes it: one line per (cell, row, seed)."""
    return pd.DataFrame([{"scenario": cell, "row": row, "seed": s, "online_reward": v}
                         for (cell, row), vs in values.items() for s, v in zip(SEEDS, vs)])


BASE = [0.50, 0.52, 0.48, 0.51, 0.49, 0.53, 0.47, 0.50, 0.52, 0.48]
UP = [0.01 * (i + 1) for i in range(10)]  # every seed +, distinct sizes


def spec(*items: dict) -> Predictions:
    return Predictions.model_validate({"title": "t", "predictions": list(items)})


def test_held_failed_and_not_resolved_with_holm_over_the_family_by_hand():
    data = table({
        ("x", "mean"): BASE,
        ("x", "critic"): [b + u for b, u in zip(BASE, UP)],            # critic - mean = +UP on every seed
        ("x", "group"): [b + (0.02 if i % 2 else -0.02) for i, b in enumerate(BASE)],  # +-0.02: mean 0
    })
    found = verdicts(data, spec(
        {"id": "A", "cell": "x", "contrast": "critic - mean", "sign": ">"},
        {"id": "B", "cell": "x", "contrast": "mean - critic", "sign": ">"},
        {"id": "C", "cell": "x", "contrast": "group - mean", "sign": ">"},
    ))
    # 10 seeds of one sign: only the all-+ and all-- patterns reach |sum|, p = 2/1024; C's sum is 0: p = 1.
    assert [v.p for v in found] == pytest.approx([2 / 1024, 2 / 1024, 1.0])
    # Holm over 3: the two smallest times 3 (made non-decreasing), the last times 1.
    assert [v.p_holm for v in found] == pytest.approx([6 / 1024, 6 / 1024, 1.0])
    assert [v.verdict for v in found] == ["held", "failed", "not resolved"]
    assert found[0].mean == pytest.approx(0.055) and found[0].agreeing == 10 and found[1].agreeing == 0
    sd = pd.Series(UP).std(ddof=1)
    by_hand = (sps.t.ppf(1 - 0.05 / 3 / 2, 9) + sps.t.ppf(0.8, 9)) * sd / math.sqrt(10)
    assert found[0].mde == pytest.approx(by_hand)
    assert found[0].half_width == pytest.approx(sps.t.ppf(0.975, 9) * sd / math.sqrt(10))


def test_a_difference_of_differences_is_formed_seed_by_seed_and_a_missing_run_drops_its_seed():
    k1_sao = [0.3] * 10
    k1_pp = [0.3 + 0.01 * i for i in range(10)]
    k3_sao = [0.4] * 10
    k3_pp = [0.2] * 10
    k3_pp[4] = math.nan  # seed 4's per_prompt run at k3 has no value
    data = table({("k1", "sao"): k1_sao, ("k1", "per_prompt"): k1_pp, ("k3", "sao"): k3_sao, ("k3", "per_prompt"): k3_pp})
    prediction = spec({"id": "P", "cell": "k3", "contrast": "sao - per_prompt", "sign": ">",
                       "minus": {"cell": "k1", "contrast": "sao - per_prompt"}}).predictions[0]
    got = seed_differences(data, prediction, "online_reward")
    expected = {s: (0.4 - 0.2) - (0.3 - (0.3 + 0.01 * s)) for s in SEEDS if s != 4}
    assert got.keys() == expected.keys()
    assert [got[s] for s in got] == pytest.approx([expected[s] for s in expected])
    (v,) = verdicts(data, spec({"id": "P", "cell": "k3", "contrast": "sao - per_prompt", "sign": ">",
                                "minus": {"cell": "k1", "contrast": "sao - per_prompt"}}))
    assert v.n == 9 and v.seeds == tuple(s for s in SEEDS if s != 4) and v.verdict == "held"
    assert v.p == pytest.approx(2 / 512)


def test_the_critic_maps_predictions_are_its_grid_headers_word_for_word():
    """predictions.yaml restates grid.yaml's pre-registered P1-P10: the same cells, contrasts and signs."""
    header = (REPO / "leaderboards" / "critic" / "grid.yaml").read_text()
    written = {m.group(1): (m.group(2), m.group(3).strip(), m.group(4), m.group(5).strip())
               for m in re.finditer(r"^#[ \t]+(P\d)[ \t]+(\S+)[ \t]+(\S+ - \S+)[ \t]+([<>])[ \t]+0\b[ \t]*(.*)$", header, re.M)}
    assert sorted(written) == [f"P{i}" for i in range(1, 10)]
    spec_ = load_predictions(REPO / "leaderboards" / "critic" / "predictions.yaml")
    assert [p.id for p in spec_.predictions] == [f"P{i}" for i in range(1, 11)] and spec_.metric == "online_reward"
    for p in spec_.predictions[:9]:
        cell, contrast, sign, why = written[p.id]
        assert (p.cell, p.contrast, p.sign) == (cell, contrast, sign), p.id
        assert why in p.why, p.id  # the header's reason, word for word (P3's is P2's, left blank there)
    p10 = spec_.predictions[9]
    assert "P10 horizon: (sao - per_prompt at k3) - (sao - per_prompt at k1) > 0" in header
    assert (p10.cell, p10.contrast, p10.sign, p10.minus.cell, p10.minus.contrast) == \
        ("critic-horizon-k3", "sao - per_prompt", ">", "critic-horizon-k1", "sao - per_prompt")
    grid = yaml.safe_load(header)
    rows = {r["label"] for r in grid["rows"]}
    assert all({*p.rows} <= rows and p.cell in grid["scenarios"] for p in spec_.predictions)


def test_verdict_writes_its_page_and_table_and_bad_input_is_one_line(tmp_path, capsys):
    data = table({("x", "mean"): BASE, ("x", "critic"): [b + u for b, u in zip(BASE, UP)]})
    data.to_csv(tmp_path / "per-seed.csv", index=False)
    path = tmp_path / "predictions.yaml"
    path.write_text(yaml.safe_dump({"title": "Hand map", "predictions": [
        {"id": "A", "cell": "x", "contrast": "critic - mean", "sign": ">", "why": "it learns"}]}))
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "grid.json").write_text(json.dumps({"title": "Hand map", "scenarios": [], "rows": [],
                                                          "baseline": "mean", "metric": "online_reward"}))
    assert main(["verdict", str(path), "--out", str(tmp_path / "v")]) == 0
    site = maps.maps_section(tmp_path)  # the map folder's verdicts on the site, beside its tables
    assert "<b>Pre-registered predictions</b>" in site
    row = site.split('id="map-0-verdict"')[1].split("</tr>")[1]
    assert ">critic - mean at x &gt; 0<" in row and ">10 of 10<" in row and ">0.00195<" in row and '>held<' in row
    page = (tmp_path / "v" / "verdict.md").read_text()
    assert "| A | critic - mean at x > 0 | 10 | +0.055 ± " in page and "| 10 of 10 | 0.00195 | 0.00195 |" in page
    assert "**held**" in page and "- A: it learns" in page
    csv = pd.read_csv(tmp_path / "v" / "verdict.csv")
    assert csv.loc[0, "verdict"] == "held" and csv.loc[0, "n"] == 10
    capsys.readouterr()
    path.write_text(yaml.safe_dump({"predictions": [{"id": "A", "cell": "nowhere", "contrast": "critic - mean", "sign": ">"}]}))
    assert main(["verdict", str(path)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "sao-env: error: prediction A: no cell 'nowhere' in the per-seed table (cells: x)"]
    path.write_text(yaml.safe_dump({"predictions": [{"id": "A", "cell": "x", "contrast": "critic minus mean", "sign": ">"}]}))
    assert main(["verdict", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "is not 'a - b'" in err[0]


def test_a_map_still_running_is_read_from_its_ledger_with_the_whole_family(tmp_path, capsys):
    """``--partial`` with the ledger: the cell not yet run has no data and counts in Holm with p = 1, so
    the one prediction with data is corrected over 2 (2 x 2/1024), not over 1; a cut-short last line is
    left out. Without ``--partial`` the missing cell is a one-line error."""
    ledger = tmp_path / "finished.jsonl"
    lines = [json.dumps({"config_hash": str(s) + row, "code": "c",
                         "row": {"scenario": "x", "row": row, "seed": s},
                         "numbers": {"online_reward": BASE[s] + (UP[s] if row == "critic" else 0.0)}})
             for row in ("mean", "critic") for s in SEEDS]
    ledger.write_text("\n".join(lines) + '\n{"config_hash": "cut sh')
    path = tmp_path / "predictions.yaml"
    path.write_text(yaml.safe_dump({"predictions": [
        {"id": "A", "cell": "x", "contrast": "critic - mean", "sign": ">"},
        {"id": "B", "cell": "later", "contrast": "critic - mean", "sign": ">"}]}))
    assert main(["verdict", str(path), "--per-seed", str(ledger)]) == 2
    assert "no cell 'later'" in capsys.readouterr().err
    assert main(["verdict", str(path), "--per-seed", str(ledger), "--partial", "--out", str(tmp_path)]) == 0
    table = pd.read_csv(tmp_path / "verdict.csv")
    assert table["verdict"].tolist() == ["held", "no data"] and table["n"].tolist() == [10, 0]
    assert table.loc[0, "p_holm"] == pytest.approx(2 * 2 / 1024)
    assert "**Provisional**" in (tmp_path / "verdict.md").read_text()


def test_the_real_model_boards_predictions_are_its_grid_headers_word_for_word():
    """leaderboards/real-model/predictions.yaml restates grid.yaml's pre-registered P1-P4 (cells, contrasts, signs
    and the character model's result each tests); the family of 4 can resolve at the grid's 8 seeds."""
    header = (REPO / "leaderboards" / "real-model" / "grid.yaml").read_text()
    written = {m.group(1): (m.group(2), m.group(3).strip(), m.group(4), m.group(5).strip())
               for m in re.finditer(r"^#[ \t]+(P\d)[ \t]+(\S+)[ \t]+(\S+ - \S+)[ \t]+([<>])[ \t]+0\b[ \t]*(.*)$", header, re.M)}
    spec_ = load_predictions(REPO / "leaderboards" / "real-model" / "predictions.yaml")
    assert sorted(written) == [p.id for p in spec_.predictions] == ["P1", "P2", "P3", "P4"]
    for p in spec_.predictions:
        cell, contrast, sign, why = written[p.id]
        assert (p.cell, p.contrast, p.sign, p.why) == (cell, contrast, sign, why), p.id
    grid = yaml.safe_load(header)
    rows = {r["label"] for r in grid["rows"]}
    assert all({*p.rows} <= rows and p.cell in grid["scenarios"] for p in spec_.predictions)
    assert rows == {"sao", "grpo", "grpo_dis", "running_mean"} and len(grid["seeds"]) == 8
    assert 2 / 2 ** len(grid["seeds"]) <= spec_.alpha / len(spec_.predictions)  # Holm's first step is reachable
    assert "agent.model.name=smollm2-135m-instruct" in grid["cut"]


def test_the_critic_follow_ups_predictions_are_its_grid_headers_word_for_word():
    """predictions.yaml restates the follow-up grid.yaml's pre-registered F1-F3: the same cell, contrasts, signs."""
    header = (REPO / "leaderboards" / "critic-followup" / "grid.yaml").read_text()
    written = {m.group(1): (m.group(2), m.group(3).strip(), m.group(4), m.group(5).strip())
               for m in re.finditer(r"^#[ \t]+(F\d)[ \t]+(\S+)[ \t]+(\S+ - \S+)[ \t]+([<>])[ \t]+0\b[ \t]*(.*)$", header, re.M)}
    spec_ = load_predictions(REPO / "leaderboards" / "critic-followup" / "predictions.yaml")
    assert [p.id for p in spec_.predictions] == sorted(written) == ["F1", "F2", "F3"]
    for p in spec_.predictions:
        assert (p.cell, p.contrast, p.sign, p.why) == written[p.id], p.id
    grid = yaml.safe_load(header)
    assert all({*p.rows} <= {r["label"] for r in grid["rows"]} and p.cell in grid["scenarios"]
               for p in spec_.predictions)


def test_the_spread_follow_ups_predictions_are_its_grid_headers_word_for_word():
    """predictions.yaml restates the spread follow-up grid.yaml's pre-registered G1-G4: cells, contrasts, signs."""
    header = (REPO / "leaderboards" / "critic-spread" / "grid.yaml").read_text()
    written = {m.group(1): (m.group(2), m.group(3).strip(), m.group(4), m.group(5).strip())
               for m in re.finditer(r"^#[ \t]+(G\d)[ \t]+(\S+)[ \t]+(\S+ - \S+)[ \t]+([<>])[ \t]+0\b[ \t]*(.*)$", header, re.M)}
    spec_ = load_predictions(REPO / "leaderboards" / "critic-spread" / "predictions.yaml")
    assert [p.id for p in spec_.predictions] == sorted(written) == ["G1", "G2", "G3", "G4"]
    for p in spec_.predictions:
        assert (p.cell, p.contrast, p.sign, p.why) == written[p.id], p.id
    grid = yaml.safe_load(header)
    assert all({*p.rows} <= {r["label"] for r in grid["rows"]} and p.cell in grid["scenarios"]
               for p in spec_.predictions)
    assert 2 / 2 ** len(grid["seeds"]) <= spec_.alpha / len(spec_.predictions)
