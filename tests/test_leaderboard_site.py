"""The leaderboard as people read it: per-seed tables, the Markdown view and the static site.

Run directories are written here by hand (config.yaml, summary.json, evals.jsonl with known
numbers), so every cell can be checked against a value computed in a comment. The site is
checked twice: as HTML text (self-contained, every fact and row present), and in Debian's
headless Chromium driven over the DevTools pipe (standard library only): every scenario and
every CSV row is in the rendered DOM, a click on a header reorders the rows, no request leaves
``file:``/``data:``, and the screenshot is not blank. Without Chromium that test skips.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml

from sao_env.cli import main
from sao_env.leaderboard import rebuild, write_scenario_outputs, write_table_outputs
from sao_env.leaderboard.benchmarks import record_benchmark
from sao_env.leaderboard.site import write_site
from sao_env.leaderboard.tables import board_from_csv
from sao_env.specs import find_spec, load_yaml

REPO = Path(__file__).resolve().parents[1]
CODE = {"git_commit": "a" * 40, "dirty": False, "diff_sha256": None, "sao_env": "0.1.0"}
STYLE_DRIFT = load_yaml(find_spec("envs", "style-drift"))  # the scenario's full budget: 0.1 + 0.3 + 0.25 h, 16 slots
TIMES_H = [round(0.02 * i, 2) for i in range(33)]  # style-drift: evaluations every 0.02 h over 0.65 h
LEGACY_CSV = """agent,algorithm,seeds,online_reward,online_reward_ci95,auc,auc_ci95,recovery_h/3_tag,recovery_h/3_tag_ci95,recovery_h/3_tag_missed,episodes_per_hour,episodes_per_hour_ci95
grpo,grpo,1,0.445259,,0.448437,,0.07,,0,3160,
sao,sao,1,0.27326,,0.292448,,0.17,,0,2255,
"""
"""An aggregated table in the format written before per-seed tables (no seeds, labels, hashes or versions)."""


def _rows(path: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def fake_run(root: Path, recipe: str, seed: int, reward: float, level: float, *,
             overrides: tuple[str, ...] = (), code: dict = CODE) -> Path:
    """A finished style-drift run: current-phase accuracy ``level`` everywhere except the first
    evaluation after each drift (0.1), so recovery takes one interval (0.02 h) when ``level``
    reaches the threshold (0.6), and never otherwise."""
    label = recipe + ("+" + hashlib.sha256(repr(overrides).encode()).hexdigest()[:8] if overrides else "")
    out = root / "style-drift" / label / f"seed{seed}"
    out.mkdir(parents=True)
    hparams = {"lr": 1e-4 if not overrides else 3e-5}
    config = {"env": STYLE_DRIFT, "agent": {"name": recipe, "algorithm": recipe, "hparams": hparams}, "seed": seed,
              "provenance": {"label": label, "overrides": list(overrides), "code": code}}
    (out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    evals = []
    for t in TIMES_H:
        just_drifted = t in (0.1, 0.4)  # the first evaluations at or after the drifts (0.1 h, 0.4 h)
        acc = 0.1 if just_drifted else level
        evals.append({"sim_time_s": t * 3600, **{f"eval/{p}/accuracy": acc for p in ("boxed", "sentence", "tag")}})
    (out / "evals.jsonl").write_text("".join(json.dumps(e) + "\n" for e in evals))
    recovered = level >= 0.6
    summary = {"env": "style-drift", "agent": label, "recipe": recipe, "algorithm": recipe, "seed": seed,
               "online_reward": reward, "auc": level - 0.01, "final_accuracy/1_boxed": level,
               "time_to_threshold_h/1_boxed": 0.0 if recovered else math.nan, "final_accuracy/2_sentence": level,
               "recovery_h/2_sentence": 0.03 if recovered else math.nan, "final_accuracy/3_tag": level,
               "recovery_h/3_tag": 0.03 if recovered else math.nan, "episodes_per_hour": 3000.0 + seed,
               "updates_per_hour": 400.0, "staleness_mean": 1.5, "staleness_p95": 4.0, "masked_fraction": 0.0,
               "provenance": {"overrides": list(overrides), "code": code}}
    (out / "summary.json").write_text(json.dumps(summary))
    return out


@pytest.fixture
def runs(tmp_path) -> list[Path]:
    """sao: seeds 0, 1, 2 (rewards .5, .6, .7); grpo: seeds 0, 1 (.2, .4); sao with an override: seed 0 (.9)."""
    root = tmp_path / "runs"
    dirs = [fake_run(root, "sao", s, r, 0.7) for s, r in ((0, 0.5), (1, 0.6), (2, 0.7))]
    dirs += [fake_run(root, "grpo", s, r, 0.4) for s, r in ((0, 0.2), (1, 0.4))]
    dirs.append(fake_run(root, "sao", 0, 0.9, 0.8, overrides=("agent.hparams.lr=3e-5",)))
    return dirs


@pytest.fixture
def site(tmp_path, runs) -> Path:
    """A leaderboard folder: style-drift from the runs above, the committed (older, aggregated)
    style-drift table under another scenario name, and two benchmark evaluations of one model."""
    board = tmp_path / "board"
    write_scenario_outputs(runs, board, "style-drift")
    (board / "committed-drift.csv").write_text(LEGACY_CSV)
    shutil.copyfile(REPO / "leaderboards" / "style-drift.png", board / "committed-drift.png")
    for k, accuracy in ((2, 0.25), (2, 0.5)):  # the same (model, suite, k) twice: the second replaces the first
        record_benchmark(board, {"model": "m", "suite": "beyond_aime", "k": k, "accuracy": accuracy,
                                 "ci95_half_width": 0.1, "ci95_low": 0.4, "ci95_high": 0.6, "problems": 5,
                                 "suite_problems": 100, "n": 10, "pass_at_k": {"1": accuracy, "2": 0.6},
                                 "grader": "math-verify", "answer_fallback": "none", "date": "2026-01-02T03:04:05"})
    write_site(board, generator="`sao-env leaderboard`")
    return board


# ----------------------------------------------------------------------------- tables


def test_per_seed_table_has_one_row_per_run_with_identity_and_budget(tmp_path, runs):
    paths = write_scenario_outputs(runs, tmp_path / "b", "style-drift")
    rows = _rows(paths["runs"])
    assert len(rows) == 6
    assert {(r["label"], r["seed"]) for r in rows} == {("sao", "0"), ("sao", "1"), ("sao", "2"), ("grpo", "0"),
                                                       ("grpo", "1"), ("sao (agent.hparams.lr=3e-5)", "0")}
    for r in rows:
        assert r["code_version"] == "a" * 12 and len(r["config_hash"]) == 12
        assert (r["duration_h"], r["rollout_slots"], r["eval_interval_h"], r["recovery_threshold"]) == \
            ("0.65", "16", "0.02", "0.6")
        assert (r["phases"], r["drift_times_h"]) == ("boxed;sentence;tag", "0.1;0.4")
    sao = [r for r in rows if r["label"] == "sao"]
    assert len({r["config_hash"] for r in sao}) == 1  # seeds of one recipe share the hash (seed left out)
    override = next(r for r in rows if r["overrides"])
    assert override["config_hash"] != sao[0]["config_hash"] and override["agent"].startswith("sao+")
    curves = _rows(paths["curves"])
    assert len(curves) == 6 * len(TIMES_H)


def test_aggregated_table_means_intervals_and_ranks(tmp_path, runs):
    paths = write_scenario_outputs(runs, tmp_path / "b", "style-drift")
    rows = {r["label"]: r for r in _rows(paths["csv"])}
    # ranked by online reward: override .9, sao mean(.5, .6, .7) = .6, grpo mean(.2, .4) = .3
    assert [r["label"] for r in _rows(paths["csv"])] == ["sao (agent.hparams.lr=3e-5)", "sao", "grpo"]
    assert [rows[x]["rank"] for x in ("sao (agent.hparams.lr=3e-5)", "sao", "grpo")] == ["1", "2", "3"]
    sao = rows["sao"]
    assert (sao["seeds"], sao["seed_list"]) == ("3", "0, 1, 2")
    # [.5, .6, .7]: sd .1, half = t(.975, 2) * .1 / sqrt(3) = 4.302653 * .057735 = .248414
    assert float(sao["online_reward"]) == pytest.approx(0.6)
    assert float(sao["online_reward_ci95"]) == pytest.approx(0.248414, abs=1e-5)
    # grpo never reaches 0.6: recovery is missing for both seeds
    assert rows["grpo"]["recovery_h/2_sentence"] == "" and rows["grpo"]["recovery_h/2_sentence_missed"] == "2"
    assert rows["sao (agent.hparams.lr=3e-5)"]["overrides"] == "agent.hparams.lr=3e-5"


def test_markdown_states_the_facts_and_formats_cells_alike(tmp_path, runs):
    paths = write_scenario_outputs(runs, tmp_path / "b", "style-drift", generator="`sao-env leaderboard`")
    md = paths["md"].read_text()
    for fact in ("0.65 simulated hours, 16 rollout slots, evaluation every 0.02 h", "drifts at 0.1, 0.4 h",
                 "**recovery threshold**: 0.6", "sao (agent.hparams.lr=3e-5): 0; sao: 0, 1, 2; grpo: 0, 1",
                 "online reward (`online_reward`), highest first", "95% Student-t interval over seeds",
                 "docs/leaderboard.md", "**code version**: " + "a" * 12, "**generated by**: `sao-env leaderboard`"):
        assert fact in md, fact
    assert "sao-env compare" not in md
    table = [line for line in md.splitlines() if line.startswith("| ")]
    assert table[0] == ("| rank | recipe | seeds | online reward | AUC | recovery to sentence (h) | "
                        "recovery to tag (h) |")
    # Ranked second by the mean, but no pair has the seeds to support an order (sao − grpo: 2 seeds, smallest
    # p 2/2^2 = 0.5; the override has one seed): every rank is the tie 1–3, and no cell is bold.
    assert table[2] == "| 1–3 | sao | 3 (0, 1, 2) | 0.600 ± 0.248 | 0.690 ± 0.000 | 0.030 ± 0.000 | 0.030 ± 0.000 |"
    assert "**" not in "\n".join(table)
    assert table[3].endswith("| never | never |")
    differences = md.split("### Paired differences", 1)[1].split("### Paired tests", 1)[0]
    differences = [line for line in differences.splitlines() if line.startswith("| ")]
    cells = re.findall(r"\d+\.\d+", "\n".join(table[1:5] + differences))
    assert cells and all(len(c.split(".")[1]) == 3 for c in cells)  # one format: three decimals
    assert "e+" not in md


def test_paired_differences_to_grpo_in_markdown_csv_rebuild_and_site(tmp_path, runs):
    paths = write_scenario_outputs(runs, tmp_path / "b", "style-drift")
    md = paths["md"].read_text()
    section = md.split("### Paired differences to grpo", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0] == "| recipe − grpo | online reward | AUC | recovery to sentence (h) | recovery to tag (h) |"
    # sao - grpo, seeds 0 and 1 (grpo has no seed 2): online reward .5-.2 = .3, .6-.4 = .2 -> mean .25,
    # sd .070711, half 12.706205 * .070711 / sqrt(2) = .635310; AUC .69-.39 twice -> .300 ± .000;
    # grpo never recovers, so no seed has both recovery times (n=0).
    assert rows[2] == "| sao − grpo | +0.250 ± 0.635 (n=2) | +0.300 ± 0.000 (n=2) | n/a (n=0) | n/a (n=0) |"
    # The recipe with an override has seed 0 alone: .9 - .2 = .7, no interval.
    assert rows[1].startswith("| sao (agent.hparams.lr=3e-5) − grpo | +0.700 (n=1, no CI) | +0.400 (n=1, no CI) |")
    # The same section from the committed per-seed table, and in the site.
    assert main(["leaderboard", str(paths["runs"]), "--out", str(tmp_path / "c")]) == 0
    rebuilt = (tmp_path / "c" / "style-drift.md").read_text()
    assert rebuilt.split("### Paired", 1)[1] == md.split("### Paired", 1)[1]
    page, _ = _parse(tmp_path / "c")
    paired = page.tables["paired-style-drift"]
    assert paired[0][0] == "recipe − grpo" and paired[2][:3] == ["sao − grpo", "+0.250 ± 0.635 (n=2)", "+0.300 ± 0.000 (n=2)"]


def test_no_paired_section_without_the_reference_recipe(tmp_path, runs):
    sao_only = [d for d in runs if "grpo" not in str(d)]
    md = write_scenario_outputs(sao_only, tmp_path / "b", "style-drift")["md"].read_text()
    assert "Paired differences" not in md
    page, _ = _parse(tmp_path / "b")
    assert "paired-style-drift" not in page.tables


def test_cross_scenario_summary_from_per_seed_tables(tmp_path, runs, capsys):
    board = tmp_path / "b"
    paths = write_scenario_outputs(runs, board, "style-drift")
    # A second scenario, from the same per-seed rows renamed: grpo and sao only.
    rows = _rows(paths["runs"])
    other = [dict(r, env="other-drift") for r in rows if r["label"] in ("sao", "grpo")]
    with (board / "other-drift-runs.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(other)
    tuning = board / "tuning"
    tuning.mkdir()
    (tuning / "style-drift-sao.csv").write_text(
        "trial,agent.hparams.lr,overrides,cut,seed,config_hash,code_version,run_dir,objective,auc\n"
        "1,1e-4,agent.hparams.lr=1e-4,env.phases.0.duration_h=0.1,0,h1,c,r,auc,0.3\n"
        "1,1e-4,agent.hparams.lr=1e-4,env.phases.0.duration_h=0.1,1,h1,c,r,auc,0.5\n"
        "2,2e-4,agent.hparams.lr=2e-4,env.phases.0.duration_h=0.1,0,h2,c,r,auc,0.6\n"
        "2,2e-4,agent.hparams.lr=2e-4,env.phases.0.duration_h=0.1,1,h2,c,r,auc,0.6\n")
    (board / "README.md").unlink()
    assert main(["leaderboard", "--summary", str(board)]) == 0
    capsys.readouterr()
    text = (board / "README.md").read_text()
    lines = text.splitlines()
    online = lines[lines.index("## online reward"):lines.index("## AUC")]
    # The flagship scenario first, then by name.
    assert "| recipe | algorithm | [style-drift](style-drift.md) | [other-drift](other-drift.md) |" in online
    # other-drift has sao and grpo alone; with two paired seeds (smallest sign-flip p 2/2^2 = 0.5) no order is
    # supported, so sao is tied over 1–2 there and over 1–3 on style-drift, second by its mean in both.
    assert "| sao | sao | 0.600 ± 0.248 (n=3) #1–3 of 3 | 0.600 ± 0.248 (n=3) #1–2 of 2 |" in online
    assert "| sao (agent.hparams.lr=3e-5) | sao | 0.900 (n=1) #1–3 of 3 | — |" in online
    # Power: one pair compared on each (sao − grpo, differences .3 and .2: sd .070711), at n=2:
    # (t(.975, 1) + t(.8, 1)) * .070711 / sqrt(2) = (12.706205 + 1.376382) * .05 = .704129
    assert "| *minimum detectable difference* | | 0.704 (n=2) | 0.704 (n=2) |" in online
    assert "no recipe's lead in online reward is supported by the seeds" in text
    assert "At 2 seeds none could be: the test's smallest p is 0.5" in text
    paired = lines[lines.index("## Paired differences to grpo"):lines.index("## Scenarios")]
    assert "| sao − grpo | online reward | +0.250 ± 0.635 (n=2) | +0.250 ± 0.635 (n=2) |" in paired
    assert "| sao (agent.hparams.lr=3e-5) − grpo | AUC | +0.400 (n=1, no CI) | — |" in paired
    assert "[per-seed table](style-drift-runs.csv)" in text and "recovery threshold 0.6" in text
    # Tuning: trial 2 wins (0.6 against 0.4), two trials x two seeds on the stated cut.
    assert ("| [style-drift-sao](tuning/style-drift-sao.md) | 2 x 2 | `env.phases.0.duration_h=0.1` | auc | "
            "`agent.hparams.lr=2e-4` | 0.600 ± 0.000 |") in text
    # Written again with the scenario's tables.
    write_scenario_outputs(runs, board, "style-drift")
    assert (board / "README.md").read_text() == text
    assert main(["leaderboard", "--summary", str(tmp_path / "nowhere")]) == 2
    assert main(["leaderboard"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"sao-env: error: --summary {tmp_path / 'nowhere'}: no such folder",
                                "sao-env: error: give run directories or tables to rebuild, or --summary DIR"]


def test_leaderboard_rebuilds_the_same_tables_from_the_per_seed_csv(tmp_path, runs):
    from_runs = write_scenario_outputs(runs, tmp_path / "a", "style-drift")
    assert main(["leaderboard", str(from_runs["runs"]), "--out", str(tmp_path / "b")]) == 0
    for name in ("style-drift.csv", "style-drift-runs.csv", "style-drift-curves.csv"):
        assert (tmp_path / "b" / name).read_bytes() == (tmp_path / "a" / name).read_bytes(), name
    assert (tmp_path / "b" / "style-drift.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "b" / "index.html").is_file()
    # a leaderboard folder alone (no runs in it) rebuilds from its own tables
    assert rebuild([tmp_path / "b"], tmp_path / "c") == [tmp_path / "c" / "style-drift.md"]


def test_the_older_aggregated_csv_is_read_with_unknowns_stated(tmp_path):
    (tmp_path / "style-drift.csv").write_text(LEGACY_CSV)
    board = board_from_csv(tmp_path / "style-drift.csv")
    assert board.env == "style-drift" and board.records is None
    assert list(board.frame["label"]) == ["grpo", "sao"] and list(board.frame["rank"]) == [1, 2]
    assert board.facts["duration_h"] == 0.65 and board.facts["recovery_threshold"] == 0.6  # from envs/style-drift.yaml
    assert any("envs/style-drift.yaml" in n for n in board.notes)
    assert set(board.frame["seed_list"]) == {"?"} and set(board.frame["overrides"]) == {"?"}
    md = write_table_outputs(tmp_path / "style-drift.csv", tmp_path / "out")["md"]
    text = md.read_text()
    # No per-seed rows: nothing to test an order on, so both ranks are the tie 1–2.
    assert "| 1–2 | grpo | 1 | 0.445 | 0.448 | 0.070 |" in text and "not recorded by the input table (1 per row)" in text
    assert "every rank a tie: the input table has no per-seed rows" in text
    assert "**power**: not stated: the input table has no per-seed rows" in text
    # the committed table, whichever format it has now, is read too
    assert {"sao", "grpo"} <= set(board_from_csv(REPO / "leaderboards" / "style-drift.csv").frame["recipe"])


def test_bad_tables_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    assert main(["leaderboard", str(tmp_path / "x.csv"), "--out", str(tmp_path / "o")]) == 2
    assert "no 'agent' column" in capsys.readouterr().err
    assert main(["eval", "m", "--suite", "beyond_aime", "--leaderboard", str(tmp_path / "benchmarks.md")]) == 2
    assert "--leaderboard takes a folder" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the page as text


class _Page(HTMLParser):
    """Collects tables (id -> rows of cell texts), section ids, and every src/href."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.sections: list[str] = []
        self.links: list[str] = []
        self._table = self._cell = None
        self._row: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.links += [attrs[k] for k in ("src", "href") if k in attrs]
        if tag == "section":
            self.sections.append(attrs.get("id", ""))
        elif tag == "table":
            self._table = attrs.get("id")
            self.tables[self._table] = []
        elif tag == "tr" and self._table:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(" ".join(self._cell.split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def _parse(site: Path) -> tuple[_Page, str]:
    text = (site / "index.html").read_text()
    page = _Page()
    page.feed(text)
    return page, text


def test_the_page_is_self_contained_and_states_everything(site):
    page, text = _parse(site)
    assert all(link.startswith(("#", "data:")) for link in page.links), page.links
    assert not re.search(r"(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text.replace("docs/leaderboard.md", ""))
    assert page.sections[:1] == ["summary"] and {"style-drift", "committed-drift", "benchmarks", "rule"} <= set(page.sections)
    assert text.count('src="data:image/png;base64,') == 2  # one plot per scenario, inline
    for fact in ("0.65 simulated hours, 16 rollout slots, evaluation every 0.02 h", "0.6 held-out accuracy",
                 "sao (agent.hparams.lr=3e-5): 0; sao: 0, 1, 2; grpo: 0, 1", "online reward (<code>online_reward</code>)",
                 "band: 95% t-interval over seeds (not min-max)", "docs/leaderboard.md", "a" * 12,
                 "not recorded by the input table"):
        assert fact in text, fact
    drift = page.tables["table-style-drift"]
    assert [row[1] for row in drift[1:]] == ["sao (agent.hparams.lr=3e-5)", "sao", "grpo"]
    assert drift[2][3] == "0.600 ± 0.248" and drift[2][2] == "3 (0, 1, 2)"
    assert [row[1] for row in page.tables["table-committed-drift"][1:]] == ["grpo", "sao"]
    summary = page.tables["summary-table"]
    assert summary[0][2:] == ["style-drift", "committed-drift"]  # the flagship first
    assert any(row[0] == "sao" and row[2] == "0.600 ± 0.248 #1–3 of 3" for row in summary)
    assert summary[-1][0] == "minimum detectable difference" and summary[-1][2:] == ["0.704 (n=2)", "n/a"]
    assert 'class="num best"' not in text and "best" not in re.findall(r'<td class="([^"]*)"', text)
    lead = text.split('<p class="lead" id="reading">', 1)[1].split("</p>", 1)[0]
    assert lead.startswith("On the 2 scenarios at full budget (1–3 seeds per recipe), no recipe&#x27;s lead")
    bench = page.tables["benchmarks-table"]
    assert len(bench) == 2  # header + one row: (m, beyond_aime, 2) recorded twice, the second kept
    assert bench[1][:7] == ["m", "beyond_aime", "50.0 ± 10.0", "60.0", "2", "5 of 100", "10"]
    assert bench[1][9:] == ["2026-01-02", bench[1][10]] and bench[1][10]


def test_benchmark_rows_are_deduplicated_per_model_suite_and_k(site):
    rows = _rows(site / "benchmarks.csv")
    assert [(r["model"], r["suite"], r["k"], r["avg_at_k"]) for r in rows] == [("m", "beyond_aime", "2", "0.5")]
    record_benchmark(site, {"model": "m", "suite": "beyond_aime", "k": 4, "accuracy": 0.3, "problems": 5,
                            "suite_problems": 100, "n": 20, "pass_at_k": {"4": 0.7}, "grader": "math-verify"})
    assert [(r["k"], r["pass_at_k"]) for r in _rows(site / "benchmarks.csv")] == [("2", "0.6"), ("4", "0.7")]
    md = (site / "benchmarks.md").read_text()
    assert md.count("| m | beyond_aime |") == 2 and "| 50.0 ± 10.0 | 60.0 | 2 | 5 of 100 | 10 |" in md


# ----------------------------------------------------------------------------- the page in a browser


def chromium() -> str | None:
    """The headless Chromium of this machine (Debian's chromium-headless-shell or chromium), or None."""
    for name in ("chromium-headless-shell", "chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    return None


class DevTools:
    """Headless Chromium driven over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out, NUL-framed JSON)."""

    def __init__(self, binary: str, profile: str):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire():  # move the pipe ends past 4 first, so that dup2 onto 3 and 4 cannot clobber them
            import fcntl

            low, high = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(low, 3)
            os.dup2(high, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "--window-size=1280,900", "about:blank"],
            preexec_fn=wire, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer, self._next, self.events = b"", 0, []

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._from_child, 1 << 16)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)


ROWS_JS = """JSON.stringify(Array.from(document.querySelectorAll('table')).map(t => [t.id,
  Array.from(t.tBodies[0].rows).map(r => Array.from(r.cells).map(c => c.textContent.trim()))]))"""


@pytest.mark.skipif(chromium() is None, reason="no headless Chromium here (make test installs Debian's "
                                               "chromium-headless-shell when it runs as root)")
def test_the_page_in_headless_chromium(site, tmp_path):
    from PIL import Image

    profile = tempfile.mkdtemp(dir=tmp_path)  # an empty profile
    browser = DevTools(chromium(), profile)
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Network", "Runtime"):
            browser.call(f"{domain}.enable", session=session)
        browser.call("Page.navigate", {"url": (site / "index.html").as_uri()}, session)

        def evaluate(expression: str):
            return browser.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                     "awaitPromise": True}, session)["result"].get("value")

        assert evaluate("new Promise(r => document.readyState === 'complete' ? r(1) : "
                        "addEventListener('load', () => r(1)))") == 1
        rendered = dict(json.loads(evaluate(ROWS_JS)))
        scenarios = evaluate("Array.from(document.querySelectorAll('section.scenario')).map(s => s.dataset.scenario)")
        assert scenarios == ["style-drift", "committed-drift"]
        # every row of every CSV is a row of the rendered page
        for name, table_id in (("style-drift.csv", "table-style-drift"), ("committed-drift.csv", "table-committed-drift")):
            labels = [row[1] for row in rendered[table_id]]
            assert sorted(labels) == sorted(r.get("label") or r["agent"] for r in _rows(site / name))
        assert evaluate("Array.from(document.querySelectorAll('section.scenario img'))"
                        ".every(i => i.complete && i.naturalWidth > 300)") is True
        # a click on "AUC" sorts ascending: grpo (.39), sao (.69), the override (.79); again: descending
        click = "document.querySelector('#table-style-drift th[data-key=\"auc\"]').click()"
        order = "Array.from(document.querySelectorAll('#table-style-drift tbody tr')).map(r => r.dataset.label)"
        evaluate(click)
        assert evaluate(order) == ["grpo", "sao", "sao (agent.hparams.lr=3e-5)"]
        evaluate(click)
        assert evaluate(order) == ["sao (agent.hparams.lr=3e-5)", "sao", "grpo"]
        # "more columns" shows the hidden ones
        hidden = "getComputedStyle(document.querySelector('#table-style-drift td.extra')).display"
        assert evaluate(hidden) == "none"
        evaluate("document.querySelector('button.toggle[data-table=\"table-style-drift\"]').click()")
        assert evaluate(hidden) == "table-cell"
        shot = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session)["data"])
        requested = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
    finally:
        browser.close()
    assert requested and all(url.startswith(("file:", "data:")) for url in requested), requested
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    assert image.size == (1280, 900)
    colors = image.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50  # text, table shading and the plot: far from a blank page
    dominant = max(count for count, _ in colors)
    assert dominant < 0.95 * image.size[0] * image.size[1]
