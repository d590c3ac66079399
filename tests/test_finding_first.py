"""The finding first: the plain lines of what the boards and maps found and the "who wins where" matrix are
written from the committed tables, by code, into the site, leaderboards/README.md and the README's block.

The lines for the committed tables are pinned here word for word: a change to the tables or to the sentence
that writes them fails this test until the lines (and the pages holding them) are written again. Then: the
pages hold exactly what the tables give (the README's block, leaderboards/README.md's top, the committed
site's lines and matrix); the README's block sits right after the two commands, the lines before the matrix
before the summary table, the statistics below behind a click; a lead is called supported only where the
table's own correction resolves it (rank ranges to standings, by hand); the lines follow the tables when a
table changes.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from sao_env.leaderboard import finding
from sao_env.leaderboard.finding import BEHIND, LEAD, SHARED, TIE, finding_lines, places, standings

REPO = Path(__file__).resolve().parents[1]
BOARDS = REPO / "leaderboards"

COMMITTED_LINES = [
    "**Single-turn scenarios** (style-drift and topic-drift): running_mean is first by the means on both; it leads "
    "with support on topic-drift (+0.026 over sao, the next best; Holm p 0.012); on style-drift every pair is a tie.",
    "**Multi-turn scenarios** (codebase-drift and tool-drift): sao leads with support on tool-drift (+0.070 over "
    "running_mean, the next best; Holm p 0.012); on codebase-drift no lead is supported (running_mean first by the "
    "means; supported: running_mean > grpo at Holm p 0.023).",
    "**Maps of recipes** (Critic map, 6 cells; Critic map follow-up (critic-followup/), 1 cell; Critic map follow-up "
    "(critic-spread/), 2 cells; Regime map of single-rollout asynchrony, 10 cells): sao and sao_lambda1 share a "
    "supported lead on the multi-turn cells critic-horizon-k1 (the tool-drift board's runs, and 3 more recipes), "
    "critic-horizon-k3 and critic-horizon-k3-pool64; class_mean leads with support on the single-turn cell "
    "critic-spread-rates, ahead of the other 2 recipes; in the other 15 cells, all single-turn, no lead is supported "
    "(first place is a tie).",
]
"""What the committed tables say, as the generator writes it."""


@pytest.fixture(scope="module")
def committed():
    return places(BOARDS)


def test_the_lines_of_the_committed_tables(committed):
    assert finding_lines(committed) == COMMITTED_LINES
    boards = [p for p in committed if p.board is not None]
    assert [(p.name, p.turns) for p in boards] == [("style-drift", 1), ("codebase-drift", 4), ("tool-drift", 2),
                                                   ("topic-drift", 1)]
    assert {p.name: p.leaders for p in boards} == {"style-drift": [], "codebase-drift": [], "tool-drift": ["sao"],
                                                   "topic-drift": ["running_mean"]}
    cells = [p for p in committed if p.board is None]
    assert len(cells) == 19 and {p.group for p in cells} == {"critic", "critic-followup", "critic-spread", "regimes"}
    # (ablations and stress vary settings; the real-model board is not complete)
    assert [p.name for p in cells if p.leaders] == ["critic-horizon-k1", "critic-horizon-k3", "critic-horizon-k3-pool64",
                                                    "critic-spread-rates"]
    columns = finding.matrix_markdown(committed)[2]
    assert "; 1 cell of the Critic map follow-up ([critic-followup/](" in columns
    assert "; 2 cells of the Critic map follow-up ([critic-spread/](" in columns and "; 6 cells of the Critic map (" in columns
    html = finding.matrix_html(committed)
    assert ">critic-followup/</a>" in html and ">critic-spread/</a>" in html and ">Critic map</a>" in html
    assert [(p.name, p.repeats) for p in cells if p.repeats] == [("critic-horizon-k1", "tool-drift")]


def test_the_pages_hold_what_the_tables_give(committed, tmp_path):
    from sao_env.leaderboard.site import markdown_inline
    from sao_env.leaderboard.summary import per_seed_boards, summary_top

    # README.md: the block right after the two commands' set-up, generated (--check: what the tables give)
    readme = (REPO / "README.md").read_text()
    assert finding.write_readme_block(REPO / "README.md", BOARDS, check=True), (
        "README.md's finding is not what the tables give: python -m sao_env.leaderboard.finding README.md leaderboards")
    sections = re.findall(r"^## (.+)$", readme, re.MULTILINE)
    assert sections[:3] == ["The two commands", "What the boards and maps found", "What a run is"]
    block = readme[readme.index(finding.BEGIN):readme.index(finding.END)]
    order = [block.index(f"- {COMMITTED_LINES[0]}"), block.index("### Who wins where"),
             block.index("### Summary: online reward by scenario")]
    assert order == sorted(order)
    after = readme[readme.index(finding.END) + len(finding.END):readme.index("## What a run is")]
    assert after.lstrip().startswith("<details><summary>") and "Holm p 0.012" in after  # the history, one click away
    # leaderboards/README.md: the same lines, matrix and table first; the statistics behind a click
    top = "\n".join(summary_top(BOARDS, per_seed_boards(BOARDS)))
    committed_md = (BOARDS / "README.md").read_text()
    assert committed_md.startswith(top + "\n<details>"), ("leaderboards/README.md's top is not what the tables "
                                                          "give: sao-env leaderboard --summary leaderboards")
    assert top.index(f"- {COMMITTED_LINES[2]}") < top.index("## Who wins where") < top.index("## Summary: online")
    statistics = committed_md[committed_md.index("<details>"):committed_md.index("</details>")]
    assert "On the 4 scenarios at full budget" in statistics and "Generated on" in statistics
    # the site: the lines and the matrix in the header, before the summary; the reading in the closed details
    page = committed_site(tmp_path).read_text()  # not committed (2 MB of inline plots): written from the tables
    header = page[page.index("<header>"):page.index("</header>")]
    assert all(f"<li>{markdown_inline(line)}</li>" in header for line in COMMITTED_LINES)
    assert finding.matrix_html(committed) in header
    assert page.index("</header>") < page.index('<section id="summary">') < page.index('<details id="statistics"')
    assert page.index('<details id="statistics"') < page.index('id="reading"') < page.index('<section id="style-drift"')


def committed_site(tmp_path: Path) -> Path:
    """The site as ``sao-env leaderboard --summary leaderboards`` writes it, from a copy of the committed folder."""
    from sao_env.leaderboard.site import write_site

    folder = tmp_path / "leaderboards"
    shutil.copytree(BOARDS, folder, ignore=shutil.ignore_patterns("index.html"))
    return write_site(folder, generator="sao-env leaderboard")


def test_a_lead_is_supported_only_where_the_ranks_resolve_it():
    # rank ranges as the boards' tests give them (best, worst)
    assert standings({"a": (1, 1), "b": (2, 3), "c": (2, 3)}) == {"a": LEAD, "b": BEHIND, "c": BEHIND}
    assert standings({"a": (1, 2), "b": (1, 2), "c": (3, 4), "d": (3, 4)}) == {"a": SHARED, "b": SHARED,
                                                                              "c": BEHIND, "d": BEHIND}
    assert standings({"a": (1, 3), "b": (1, 3), "c": (1, 3)}) == {"a": TIE, "b": TIE, "c": TIE}
    # a first row ahead of one other only: tied with the second for first, no lead
    assert standings({"a": (1, 2), "b": (1, 3), "c": (2, 3)}) == {"a": TIE, "b": TIE, "c": BEHIND}
    # seven of nine supported ahead of the last two share no lead: that is most of the table
    seven = {f"r{i}": (1, 7) for i in range(7)} | {"x": (8, 9), "y": (8, 9)}
    assert set(standings(seven)[f"r{i}"] for i in range(7)) == {TIE} and standings(seven)["x"] == BEHIND


def _tables(tmp_path: Path, change=None) -> Path:
    """The committed tool-drift and topic-drift per-seed tables in a folder of their own, ``change`` applied."""
    folder = tmp_path / "boards"
    folder.mkdir(parents=True)
    for env in ("tool-drift", "topic-drift"):
        runs = pd.read_csv(BOARDS / f"{env}-runs.csv")
        if change is not None:
            runs = change(env, runs)
        runs.to_csv(folder / f"{env}-runs.csv", index=False)
    return folder


def test_the_lines_follow_the_tables(tmp_path):
    assert finding_lines(places(_tables(tmp_path / "a"))) == [
        "**Single-turn scenarios** (topic-drift): running_mean leads with support on topic-drift (+0.026 over sao, "
        "the next best; Holm p 0.012).",
        "**Multi-turn scenarios** (tool-drift): sao leads with support on tool-drift (+0.070 over running_mean, the "
        "next best; Holm p 0.012)."]

    def sao_lower(env, runs):  # sao's tool-drift reward 0.1 lower on every seed: no longer ahead of anyone
        if env == "tool-drift":
            runs.loc[runs["label"] == "sao", "online_reward"] -= 0.1
        return runs

    lines = finding_lines(places(_tables(tmp_path / "b", sao_lower)))
    assert lines[1] == "**Multi-turn scenarios** (tool-drift): on tool-drift every pair is a tie (running_mean first " \
                       "by the means)."

    def renamed(env, runs):  # a scenario without a scenario file: its turns are not known, and not guessed
        return runs.assign(env="made-up-drift") if env == "topic-drift" else runs

    folder = _tables(tmp_path / "c", renamed)
    shutil.move(folder / "topic-drift-runs.csv", folder / "made-up-drift-runs.csv")
    assert finding_lines(places(folder))[-1].startswith("**Scenarios without a scenario file** (made-up-drift): "
                                                        "running_mean leads with support on made-up-drift")


def test_the_readme_block_is_written_and_checked(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## The two commands\n\n{finding.BEGIN}\nold words\n{finding.END}\n\n## Next\n")
    folder = _tables(tmp_path)
    assert finding.main([str(readme), str(folder), "--check"]) == 1
    assert finding.main([str(readme), str(folder)]) == 0
    assert finding.main([str(readme), str(folder), "--check"]) == 0
    text = readme.read_text()
    assert "old words" not in text and text.endswith(f"{finding.END}\n\n## Next\n")
    assert "[tool-drift](boards/tool-drift.md)" in text  # links relative to the README
    readme.write_text("# no block\n")
    assert finding.main([str(readme), str(folder)]) == 2
    assert "no generated block" in capsys.readouterr().err
