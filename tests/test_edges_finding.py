"""Edge values of the finding first (``sao_env.leaderboard.finding``), on small places built by hand.

Covers the boundaries the committed tables never reach: standings of one, two, five and six rows and the
smallest supported group; the words that join one, two and three names; the common prefix of map scenarios
and the short titles of maps; the lines of a board class with one, two or three boards (first by the means
on all of them, a lead whose test was not made or runs the other way, three and four supported orders); the
maps line with a cell or two left without a lead; the matrix in Markdown and HTML cell by cell; and the
places read from a map folder (defaults of missing ranks, turns from the axis or the cut, tables skipped);
and a README's block (links relative or absolute, either mark missing).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from sao_env.errors import UserError
from sao_env.leaderboard import finding
from sao_env.leaderboard.finding import BEHIND, LEAD, SHARED, TIE, Place, Standing, finding_lines, standings
from sao_env.leaderboard.stats import Comparison
from sao_env.leaderboard.board import ScenarioBoard
from sao_env.leaderboard.columns import section_id


def arm(standing: str, mean: float | None = 0.5, low: int = 1, high: int = 1, of: int = 2,
        ci95: float | None = 0.01, n: int = 3) -> Standing:
    return Standing(mean, ci95, n, low, high, of, standing)


def versus(a: str, b: str, mean: float, p_holm: float, winner: str | None = None, p: float = 0.001) -> Comparison:
    return Comparison(a, b, 5, mean, 0.01, p, p_holm, "sign-flip", winner, 0.05)


def board(env: str, labels: list[str], comparisons: list[Comparison], records: pd.DataFrame | None = None,
          frame: pd.DataFrame | None = None) -> ScenarioBoard:
    """A board whose paired tests are the given ones (no per-seed values needed)."""
    b = ScenarioBoard(env, {}, pd.DataFrame({"label": labels}) if frame is None else frame, records=records)
    b._tests["online_reward"] = comparisons
    return b


def board_place(env: str, turns: int | None, arms: dict[str, Standing], comparisons=()) -> Place:
    return Place("boards", "Boards", env, env, f"{env}.md", env, turns, dict(arms),
                 board=board(env, list(arms), list(comparisons)))


def cell(name: str, turns: int | None, arms: dict[str, Standing], group: str = "grid", title: str = "Grid: what",
         short: str | None = None) -> Place:
    return Place(group, title, name, short or name, f"{group}/{name}.md", f"map-{group}", turns, dict(arms))


# ----------------------------------------------------------------------------- standings


def test_one_recipe_alone_is_tied_for_first_and_no_recipe_gives_nothing():
    """A single row is never a supported lead (no k up to half of one row); an empty table has no standings."""
    assert standings({"a": (1, 1)}) == {"a": TIE}
    assert standings({}) == {}


def test_two_recipes_with_one_supported_ahead_is_a_lead():
    """With two rows a group of one is at most half the rows: the row ranked (1, 1) leads."""
    assert standings({"a": (1, 1), "b": (2, 2)}) == {"a": LEAD, "b": BEHIND}
    assert standings({"a": (1, 2), "b": (1, 2)}) == {"a": TIE, "b": TIE}


def test_the_smallest_supported_group_is_the_lead():
    """``a`` alone ahead of all, then ``b`` ahead of the rest: the lead is ``a`` alone, not ``a`` and ``b``."""
    ranks = {"a": (1, 1), "b": (2, 2), "c": (3, 4), "d": (3, 4)}
    assert standings(ranks) == {"a": LEAD, "b": BEHIND, "c": BEHIND, "d": BEHIND}


def test_a_shared_lead_of_three_needs_six_rows():
    """Three rows supported ahead of the rest share the lead among six (exactly half), not among five."""
    six = {"a": (1, 3), "b": (1, 3), "c": (1, 3), "d": (4, 6), "e": (4, 6), "f": (4, 6)}
    assert standings(six) == {"a": SHARED, "b": SHARED, "c": SHARED, "d": BEHIND, "e": BEHIND, "f": BEHIND}
    five = {"a": (1, 3), "b": (1, 3), "c": (1, 3), "d": (4, 5), "e": (4, 5)}
    assert standings(five) == {"a": TIE, "b": TIE, "c": TIE, "d": BEHIND, "e": BEHIND}


def test_a_group_with_a_member_that_may_fall_below_it_is_no_lead():
    """Two rows at best 1 or 2, one of which may be third: no group of two, and both are tied for first."""
    ranks = {"a": (1, 2), "b": (1, 3), "c": (3, 4), "d": (3, 4)}
    assert standings(ranks) == {"a": TIE, "b": TIE, "c": BEHIND, "d": BEHIND}


# ----------------------------------------------------------------------------- helpers


def test_one_two_and_three_names_are_joined_with_a_final_and():
    """One name as is, two with ``and``, three with commas and a final ``and`` (no comma before it)."""
    assert finding._and(["a"]) == "a"
    assert finding._and(["a", "b"]) == "a and b"
    assert finding._and(["a", "b", "c"]) == "a, b and c"


def test_the_common_prefix_ends_at_the_last_shared_dash():
    """Cut back to the last ``-`` of the shared part (which may run into a name); empty without a shared dash."""
    assert finding._common_prefix(["critic-horizon-k1", "critic-horizon-k3"]) == "critic-horizon-"
    assert finding._common_prefix(["critic-horizon-k3", "critic-horizon-k3-pool64"]) == "critic-horizon-"
    assert finding._common_prefix(["style-drift", "stylus"]) == ""
    assert finding._common_prefix(["a-x", "b-x"]) == ""


def test_a_short_title_names_its_folder_only_when_another_title_shares_it():
    """Up to the first colon; the folder is added only where two of ``titles`` share that part (none by default)."""
    assert finding._short_title("Critic map: when: a value pays") == "Critic map"
    assert finding._short_title("Regime map of asynchrony") == "Regime map of asynchrony"
    assert finding._short_title("Critic map: a", "critic", ["Critic map: a", "Regime map"]) == "Critic map"
    shared = ["Critic map: a", "Critic map : b"]
    assert finding._short_title("Critic map : b", "spread", shared) == "Critic map (spread/)"
    assert finding._short_title("Critic map : b", "spread", shared, compact=True) == "spread/"


def test_breaks_escape_and_break_after_dots_and_dashes():
    """`` · `` becomes a line break, each ``-`` gets a break opportunity after it, markup is escaped."""
    assert finding._breaks("k-1 · pool-64") == "k-<wbr>1<br>pool-<wbr>64"
    assert finding._breaks("<b>&") == "&lt;b&gt;&amp;"


def test_axes_words_come_from_the_first_named_cell():
    """No cell named ``... at ...`` gives nothing; otherwise the first such cell's scenario and axis names."""
    assert finding._axes_words([]) == ""
    assert finding._axes_words([cell("style-drift", 1, {})]) == ""
    mine = [cell("solo", 1, {}), cell("critic-k1 at max_turns 2, sigma 0.5", 2, {}),
            cell("critic-k3 at rate 1", 2, {})]
    assert finding._axes_words(mine) == "critic-k1: max_turns · sigma"


def test_ids_and_axis_words():
    """An id keeps letters, digits, ``-`` and ``_``; an axis is named by its last dotted part."""
    assert section_id("a.b c_d-e") == "a-b-c_d-e"
    assert finding._axis_word("env.max_turns") == "max_turns"
    assert finding._axis_word("rate") == "rate"


def test_turn_words_name_a_class_only_when_every_cell_is_in_it():
    """Single-turn only for all ones, multi-turn only for all above one; mixed or unknown turns name nothing."""
    assert finding._turn_words([cell("a", 1, {}), cell("b", 1, {})]) == "single-turn "
    assert finding._turn_words([cell("a", 2, {}), cell("b", 4, {})]) == "multi-turn "
    assert finding._turn_words([cell("a", 1, {}), cell("b", 2, {})]) == ""
    assert finding._turn_words([cell("a", 2, {}), cell("b", None, {})]) == ""
    assert finding._turn_words([]) == ""


def test_the_order_by_mean_keeps_ties_in_table_order_and_leaves_out_unknown_means():
    """Highest mean first, equal means in the order met, a recipe without a mean left out; none: no first."""
    p = cell("x", 1, {"a": arm(TIE, 0.4), "b": arm(TIE, None), "c": arm(TIE, 0.6), "d": arm(TIE, 0.4)})
    assert finding._by_mean(p) == ["c", "a", "d"]
    assert finding._first_by_mean(p) == "c"
    assert finding._first_by_mean(cell("y", 1, {"a": arm(TIE, None)})) == ""


def test_the_rows_of_the_matrix_are_every_recipe_in_the_order_first_met():
    """Recipes of later places that earlier ones lack come after, each once."""
    found = [cell("p", 1, {"b": arm(TIE), "a": arm(TIE)}), cell("q", 1, {"c": arm(TIE), "a": arm(TIE), "d": arm(TIE)})]
    assert finding.arms(found) == ["b", "a", "c", "d"]
    assert finding.arms([]) == []


def test_the_leaders_are_the_lead_or_the_shared_lead_in_table_order():
    """A place's leaders: every recipe marked lead or shared, nothing for a tie."""
    p = cell("p", 1, {"a": arm(BEHIND), "b": arm(SHARED), "c": arm(TIE), "d": arm(SHARED)})
    assert p.leaders == ["b", "d"]
    assert cell("q", 1, {"a": arm(TIE), "b": arm(TIE)}).leaders == []


def test_a_pair_is_read_from_the_side_asked_and_only_where_it_was_made():
    """The paired difference is ``a - b`` as asked (negated when the board stored ``b - a``); a pair not made
    (p NaN), a missing pair and no board give nothing."""
    b = board("x", ["a", "b", "c"], [versus("a", "b", 0.25, 0.03), versus("c", "a", 0.125, 0.04),
                                     versus("b", "c", 0.5, math.nan, p=math.nan)])
    assert finding._comparison(b, "a", "b") == (0.25, 0.03)
    assert finding._comparison(b, "b", "a") == (-0.25, 0.03)
    assert finding._comparison(b, "a", "c") == (-0.125, 0.04)
    assert finding._comparison(b, "b", "c") is None
    assert finding._comparison(b, "a", "z") is None
    assert finding._comparison(None, "a", "b") is None


def test_a_cell_that_repeats_a_board_says_how_many_recipes_it_adds():
    """No repeat: the name; a repeat: the board's runs, then one recipe, or several, more where it adds any."""
    p = cell("k1", 2, {})
    assert finding._cell_words(p) == "k1"
    p.repeats = "tool-drift"
    assert finding._cell_words(p) == "k1 (the tool-drift board's runs)"
    p.added = 1
    assert finding._cell_words(p) == "k1 (the tool-drift board's runs, and 1 more recipe)"
    p.added = 2
    assert finding._cell_words(p) == "k1 (the tool-drift board's runs, and 2 more recipes)"


def test_a_cells_hover_text_without_a_mean_or_an_interval():
    """No interval: nothing after the mean; no mean: ``n/a``; the rank range and the standing's words follow."""
    p = cell("x at k 1", 1, {})
    assert finding._cell_title("a", p, arm(BEHIND, 0.25, 2, 3, 4, None, 5)) == (
        "a on x at k 1: 0.250 (95% t-interval, n=5); rank 2–3 of 4; behind: another recipe is supported ahead of it")
    assert finding._cell_title("b", p, arm(TIE, None, 1, 4, 4, 0.0123, 0)) == (
        "b on x at k 1: n/a ± 0.012 (95% t-interval, n=0); rank 1–4 of 4; tied for first: no order resolved "
        "between it and the first")


# ----------------------------------------------------------------------------- the lines


def test_no_place_gives_no_line():
    """Nothing found: no lines, no matrix."""
    assert finding_lines([]) == []
    assert finding.matrix_markdown([]) == []
    assert finding.matrix_html([]) == ""


def test_one_board_alone_names_its_leader_and_the_next_by_the_means():
    """One board: no ``first by the means on`` clause; the next best is the next by the means (not the table's
    order), and the difference is the leader's side of a pair stored the other way round."""
    p = board_place("topic-drift", 1, {"a": arm(LEAD, 0.5), "b": arm(BEHIND, 0.4, 2, 3, 3),
                                        "c": arm(BEHIND, 0.45, 2, 3, 3)},
                    [versus("b", "a", -0.1, 0.02, "a"), versus("c", "a", -0.05, 0.0123, "a")])
    assert finding_lines([p]) == ["**Single-turn scenarios** (topic-drift): a leads with support on topic-drift "
                                  "(+0.050 over c, the next best; Holm p 0.012)."]


def test_three_boards_first_by_the_means_on_all_and_up_to_three_orders_shown():
    """Three boards with the same first: ``on all 3``; a lead whose pair was not made has no numbers; three
    supported orders are shown in full, a fourth is counted (``and 1 more``); the means' first is not repeated."""
    x = board_place("x", 2, {"a": arm(LEAD, 0.9), "b": arm(BEHIND, 0.1, 2, 2)},
                    [versus("a", "b", 0.8, math.nan, p=math.nan)])
    four = [versus("a", "b", 0.1, 0.01, "a"), versus("a", "c", 0.1, 0.02, "a"), versus("b", "c", 0.1, 0.03, "b"),
            versus("a", "d", 0.1, 0.04, "a"), versus("c", "d", 0.0, 0.5)]
    y = board_place("y", 3, {"a": arm(TIE, 0.5, 1, 2, 4), "b": arm(TIE, 0.4, 1, 3, 4), "c": arm(BEHIND, 0.3, 3, 4, 4),
                             "d": arm(BEHIND, 0.2, 2, 4, 4)}, four)
    z = board_place("z", 4, {"a": arm(TIE, 0.5, 1, 2, 4), "b": arm(TIE, 0.4, 1, 3, 4), "c": arm(BEHIND, 0.3, 3, 4, 4),
                             "d": arm(TIE, 0.2, 1, 4, 4)}, four[:3])
    assert finding_lines([x, y, z]) == [
        "**Multi-turn scenarios** (x, y and z): a is first by the means on all 3; it leads with support on x; "
        "on y no lead is supported (supported: a > b at Holm p 0.01, a > c at Holm p 0.02, b > c at Holm p 0.03 "
        "and 1 more); on z no lead is supported (supported: a > b at Holm p 0.01, a > c at Holm p 0.02, "
        "b > c at Holm p 0.03)."]


def test_a_shared_lead_and_a_single_recipe_and_a_tie_by_class_of_scenario():
    """The classes in order (single-turn, multi-turn, no scenario file), whatever the order of the places; a
    shared lead counts the recipes behind it; a board of one recipe says so; a tie names its first by the means
    when the class has no common first."""
    shared = board_place("s", 1, {"a": arm(SHARED, 0.6, 1, 2, 4), "b": arm(SHARED, 0.7, 1, 2, 4),
                                  "c": arm(BEHIND, 0.1, 3, 4, 4), "d": arm(BEHIND, 0.2, 3, 4, 4)})
    alone = board_place("m", 5, {"a": arm(TIE, 0.3, 1, 1, 1)})
    tie = board_place("n", None, {"a": arm(TIE, 0.2, 1, 2), "b": arm(TIE, 0.25, 1, 2)})
    other = board_place("o", None, {"a": arm(TIE, 0.2, 1, 2), "c": arm(TIE, 0.1, 1, 2)})
    assert finding_lines([tie, alone, shared, other]) == [
        "**Single-turn scenarios** (s): a and b share a supported lead on s, ahead of the other 2 recipes.",
        "**Multi-turn scenarios** (m): on m one recipe alone.",
        "**Scenarios without a scenario file** (n and o): on n every pair is a tie (b first by the means); "
        "on o every pair is a tie (a first by the means)."]


def test_two_boards_led_by_the_same_first_call_it_it_on_both():
    """Two boards, one first by the means on both and supported ahead on both: ``both``, then ``it`` twice."""
    p = board_place("p", 1, {"a": arm(LEAD, 0.5), "b": arm(BEHIND, 0.25, 2, 2)}, [versus("a", "b", 0.25, 0.5, "a")])
    q = board_place("q", 1, {"b": arm(BEHIND, 0.5, 2, 2), "a": arm(LEAD, 0.75)}, [versus("b", "a", -0.25, 0.0004, "a")])
    assert finding_lines([p, q]) == [
        "**Single-turn scenarios** (p and q): a is first by the means on both; it leads with support on p (+0.250 "
        "over b, the next best; Holm p 0.5); it leads with support on q (+0.250 over b, the next best; Holm p 0.0004)."]


def test_no_map_cell_with_a_lead():
    """Every cell of the maps tied for first: one clause counting them; a single cell is ``1 cell``."""
    assert finding_lines([cell("k1", 1, {"a": arm(TIE), "b": arm(TIE)})]) == [
        "**Maps of recipes** (Grid, 1 cell): no cell has a supported lead: first place is a tie in all 1."]


def test_a_lead_on_cells_of_mixed_turns_and_one_tied_cell_left():
    """Cells led by the same recipe are named together; their turns differ (no class word) and so do their
    recipe counts (no ``ahead of the other n``); one cell left over is ``the other 1 cell`` with its class."""
    found = [cell("k1", 1, {"a": arm(LEAD), "b": arm(BEHIND)}),
             cell("k2", 2, {"a": arm(LEAD), "b": arm(BEHIND), "c": arm(BEHIND)}),
             cell("k3", 1, {"a": arm(TIE), "b": arm(TIE)})]
    assert finding_lines(found) == [
        "**Maps of recipes** (Grid, 3 cells): a leads with support on the cells k1 and k2; in the other 1 cell, "
        "single-turn, no lead is supported (first place is a tie)."]


def test_leads_grouped_by_winners_across_maps_of_the_same_short_title():
    """Two maps with one short title are told apart by folder; one led cell counts the recipes behind; two
    cells left over of one class are ``all`` of it, of mixed classes no class is named."""
    lead = {"a": arm(LEAD), "b": arm(BEHIND), "c": arm(BEHIND)}
    pair = {"a": arm(SHARED), "b": arm(SHARED), "c": arm(BEHIND), "d": arm(BEHIND), "e": arm(BEHIND)}
    tie = {"a": arm(TIE), "b": arm(TIE)}
    found = [cell("k1", 2, pair, "critic", "Critic map: one"), cell("k2", 3, lead, "critic", "Critic map: one"),
             cell("s1", 2, pair, "spread", "Critic map: two"), cell("s2", 4, tie, "spread", "Critic map: two"),
             cell("s3", 2, tie, "spread", "Critic map: two")]
    assert finding_lines(found) == [
        "**Maps of recipes** (Critic map (critic/), 2 cells; Critic map (spread/), 3 cells): a and b share a "
        "supported lead on the multi-turn cells k1 and s1, ahead of the other 3 recipes; a leads with support on "
        "the multi-turn cell k2, ahead of the other 2 recipes; in the other 2 cells, all multi-turn, no lead is "
        "supported (first place is a tie)."]
    found[3].turns = 1
    assert finding_lines(found)[0].endswith("ahead of the other 2 recipes; in the other 2 cells no lead is supported "
                                            "(first place is a tie).")


# ----------------------------------------------------------------------------- the matrix


def matrix_places() -> list[Place]:
    b = board_place("topic-drift", 1, {"a": arm(LEAD, 0.5), "b|c": arm(BEHIND, 0.4, 2, 2, ci95=None)})
    k1 = cell("s at k 1", 2, {"a": arm(SHARED, None, 1, 2, 4), "d": arm(SHARED, 0.625, 1, 2, 4)}, short="s-x · 1")
    k1.repeats, k1.added = "topic-drift", 2
    k2 = cell("s at k 2", None, {"b|c": arm(TIE, 0.25, 1, 3, 3)}, short="2")
    return [b, k1, k2]


def test_the_matrix_in_markdown_cell_by_cell():
    """Bold for a lead alone or shared, ``#low–high`` for a range, ``n/a`` without a mean, ``—`` not run; the
    columns counted per group (``1 boards``, ``2 cells``), the repeat named with its added recipes, links under
    ``prefix``, the heading as given, ``|`` escaped in a name."""
    assert finding.matrix_markdown(matrix_places(), "../", "###") == [
        "### Who wins where",
        "",
        "Online reward, mean over seeds, and `#rank of m` as each table's own correction supports it (Holm over its "
        "pairs: `#1–4` is a tie over ranks 1 to 4); **bold**: a supported lead, alone or shared with the other bold "
        "cells of its column; `—`: not run. Columns: 1 board at full budget; 2 cells of the Grid "
        "([grid/](../grid/README.md)) (s: k). s-x · 1 (grid/) holds the topic-drift board's runs, and 2 more recipes. "
        "Intervals: the tables linked in the header, and the site's cells on hover.",
        "",
        "| recipe | [topic-drift](../topic-drift.md) | [s-x · 1](../grid/s at k 1.md) | [2](../grid/s at k 2.md) |",
        "|---|---:|---:|---:|",
        "| a | **0.500** #1 of 2 | **n/a** #1–2 of 4 | — |",
        "| b\\|c | 0.400 #2 of 2 | — | 0.250 #1–3 of 3 |",
        "| d | — | **0.625** #1–2 of 4 | — |",
        "",
    ]


def test_the_markdown_defaults_and_a_single_cell_of_a_map():
    """Default heading ``##`` and no prefix; one cell of a map is ``1 cell``; a repeat adding one recipe is singular."""
    p = cell("k1", 1, {"a": arm(TIE, 0.5, 1, 2)}, title="Solo")
    p.repeats, p.added = "tool-drift", 1
    lines = finding.matrix_markdown([p])
    assert lines[0] == "## Who wins where"
    assert lines[2].endswith("Columns: 1 cell of the Solo ([grid/](grid/README.md)). k1 (grid/) holds the tool-drift "
                             "board's runs, and 1 more recipe. Intervals: the tables linked in the header, and the "
                             "site's cells on hover.")
    assert lines[4:] == ["| recipe | [k1](grid/k1.md) |", "|---|---:|", "| a | 0.500 #1–2 of 2 |", ""]
    assert 'title="k1; single-turn; the tool-drift board&#x27;s runs, and 1 more recipe"' in finding.matrix_html([p])


def test_the_matrix_in_html_head_and_body():
    """The group headers span their places (boards link to the summary, a map to its section, with its axes); a
    new group's first column starts a group; a column's title has its turns and the board it repeats; each cell
    has its standing's class, its rank and its hover text, or a ``·`` where the recipe did not run."""
    page = finding.matrix_html(matrix_places())
    head = page[page.index("<thead>"):page.index("</thead>") + len("</thead>")]
    assert head == (
        '<thead><tr><th class="corner" rowspan="2">recipe</th>'
        '<th class="group" colspan="1" scope="colgroup"><a href="#summary">Boards</a></th>'
        '<th class="group" colspan="2" scope="colgroup"><a href="#map-grid">Grid</a>'
        '<span class=muted> s: k</span></th></tr>'
        '<tr><th class="place" scope="col" title="topic-drift; single-turn"><a href="#topic-drift">topic-<wbr>drift'
        '</a></th>'
        '<th class="place gstart" scope="col" title="s at k 1; 2 turns; the topic-drift board&#x27;s runs, and 2 more '
        'recipes"><a href="#map-grid">s-<wbr>x<br>1</a></th>'
        '<th class="place" scope="col" title="s at k 2"><a href="#map-grid">2</a></th></tr></thead>')
    body = page[page.index("<tbody>"):page.index("</tbody>") + len("</tbody>")]
    assert body == (
        '<tbody><tr data-arm="a"><th class="arm" scope="row">a</th>'
        '<td class="mx s-lead" data-rank="1" title="a on topic-drift: 0.500 ± 0.010 (95% t-interval, n=3); rank 1 '
        'of 2; a supported lead: ahead of every other recipe after the table&#x27;s correction">0.500</td>'
        '<td class="mx s-shared gstart" data-rank="1–2" title="a on s at k 1: n/a ± 0.010 (95% t-interval, n=3); '
        'rank 1–2 of 4; a supported lead shared with the other recipes marked so in its column, not resolved '
        'between them">n/a</td>'
        '<td class="mx s-none" title="a: not run on s at k 2">·</td></tr>'
        '<tr data-arm="b|c"><th class="arm" scope="row">b|c</th>'
        '<td class="mx s-behind" data-rank="2" title="b|c on topic-drift: 0.400 (95% t-interval, n=3); rank 2 of 2; '
        'behind: another recipe is supported ahead of it">0.400</td>'
        '<td class="mx s-none gstart" title="b|c: not run on s at k 1">·</td>'
        '<td class="mx s-tie" data-rank="1–3" title="b|c on s at k 2: 0.250 ± 0.010 (95% t-interval, n=3); rank 1–3 '
        'of 3; tied for first: no order resolved between it and the first">0.250</td></tr>'
        '<tr data-arm="d"><th class="arm" scope="row">d</th>'
        '<td class="mx s-none" title="d: not run on topic-drift">·</td>'
        '<td class="mx s-shared gstart" data-rank="1–2" title="d on s at k 1: 0.625 ± 0.010 (95% t-interval, n=3); '
        'rank 1–2 of 4; a supported lead shared with the other recipes marked so in its column, not resolved '
        'between them">0.625</td>'
        '<td class="mx s-none" title="d: not run on s at k 2">·</td></tr></tbody>')
    assert page.startswith('<div id="matrix" class="matrix"><h2 class="matrix-title">Who wins where</h2>'
                           '<p class="legend"><span class="key"><span class="sw s-lead"></span>a supported lead</span>')
    assert '<span class="key"><span class="sw s-none">·</span>not run</span> <span class="muted">· online reward, ' \
           'mean over seeds' in page


def test_two_maps_of_one_short_title_head_their_columns_by_folder():
    """In the site's header a map whose short title another map shares is named by its folder alone; the second
    column of the first group does not start a group, the first column of the next does."""
    found = [cell("k1", 1, {"a": arm(TIE)}, "critic", "Critic map: one"),
             cell("k2", 1, {"a": arm(TIE)}, "critic", "Critic map: one"),
             cell("s1", 1, {"a": arm(TIE)}, "spread", "Critic map: two"),
             cell("r1", 1, {"a": arm(TIE)}, "regimes", "Regime map: three")]
    page = finding.matrix_html(found)
    assert ('<th class="group" colspan="2" scope="colgroup"><a href="#map-critic">critic/</a></th>'
            '<th class="group" colspan="1" scope="colgroup"><a href="#map-spread">spread/</a></th>'
            '<th class="group" colspan="1" scope="colgroup"><a href="#map-regimes">Regime map</a></th>') in page
    heads = page[page.index("</tr><tr>") + len("</tr><tr>"):page.index("</tr></thead>")]
    assert heads == ('<th class="place" scope="col" title="k1; single-turn"><a href="#map-critic">k1</a></th>'
                     '<th class="place" scope="col" title="k2; single-turn"><a href="#map-critic">k2</a></th>'
                     '<th class="place gstart" scope="col" title="s1; single-turn"><a href="#map-spread">s1</a></th>'
                     '<th class="place gstart" scope="col" title="r1; single-turn"><a href="#map-regimes">r1</a></th>')


# ----------------------------------------------------------------------------- places from tables


def write_map(where: Path, manifest: dict, tables: dict[str, str]) -> Path:
    where.mkdir(parents=True)
    (where / "grid.json").write_text(json.dumps(manifest))
    for name, text in tables.items():
        (where / name).write_text(text)
    return where


AGG = "row,n,rank_low,rank_high,online_reward,online_reward_ci95,env.max_turns\n"


def test_only_a_map_of_recipes_as_written_on_the_boards_metric_is_read(tmp_path):
    """A map is read only with the boards' metric, at least one row, and no row with overrides; no or broken
    manifest: not a map of recipes."""
    rows = [{"label": "a"}, {"label": "b", "overrides": []}]
    good = {"metric": "online_reward", "rows": rows}
    assert finding.recipe_map(write_map(tmp_path / "good", good, {})) == good
    assert finding.recipe_map(write_map(tmp_path / "auc", {"metric": "auc", "rows": rows}, {})) is None
    assert finding.recipe_map(write_map(tmp_path / "empty", {"metric": "online_reward", "rows": []}, {})) is None
    assert finding.recipe_map(write_map(tmp_path / "norows", {"metric": "online_reward"}, {})) is None
    changed = {"metric": "online_reward", "rows": [{"label": "a"}, {"label": "b", "overrides": ["x=1"]}]}
    assert finding.recipe_map(write_map(tmp_path / "changed", changed, {})) is None
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "grid.json").write_text("{")
    assert finding.recipe_map(tmp_path / "broken") is None
    assert finding.recipe_map(tmp_path / "nothing") is None


def test_the_cells_of_a_map_with_an_axis_and_missing_ranks(tmp_path):
    """One place per axis point in table order; the scenarios' common prefix cut from the headers; the turns from
    the axis; missing ranks read as the widest range (1 to the cell's rows); a scenario without a table, or a
    table without a rank column, is left out (but still counts for the prefix)."""
    manifest = {"metric": "online_reward", "rows": [{"label": "a"}], "axes": ["env.max_turns"], "title": "Turns: t",
                "scenarios": ["critic-k1", "critic-k3", "missing"]}
    where = write_map(tmp_path / "turns", manifest, {
        "critic-k1.csv": AGG + "a,3,1,1,0.5,0.01,2\nb,3,2,2,0.4,0.02,2\na,4,,,0.3,,4\nb,,,,0.35,0.02,4\n",
        "critic-k3.csv": "row,n,rank_low,online_reward,env.max_turns\na,3,1,0.5,2\n"})
    found = finding.map_places(where, manifest)
    assert [(p.group, p.group_title, p.name, p.short, p.link, p.anchor, p.turns, p.runs) for p in found] == [
        ("turns", "Turns: t", "critic-k1 at max_turns 2", "k1 2", "turns/critic-k1.md", "map-turns", 2, None),
        ("turns", "Turns: t", "critic-k1 at max_turns 4", "k1 4", "turns/critic-k1.md", "map-turns", 4, None)]
    assert found[0].arms == {"a": Standing(0.5, 0.01, 3, 1, 1, 2, LEAD), "b": Standing(0.4, 0.02, 3, 2, 2, 2, BEHIND)}
    assert found[1].arms == {"a": Standing(0.3, None, 4, 1, 2, 2, TIE), "b": Standing(0.35, 0.02, 0, 1, 2, 2, TIE)}


def test_the_cell_of_a_map_without_axes_takes_its_turns_from_the_cut(tmp_path):
    """No axes: one place per scenario, named and headed by the scenario (no prefix for a lone scenario); the
    turns from the map's cut; the folder's name where the manifest has no title."""
    manifest = {"metric": "online_reward", "rows": [{"label": "a"}], "scenarios": ["solo-drift"],
                "cut": ["env.max_turns=3", "nonsense"]}
    where = write_map(tmp_path / "cutmap", manifest, {"solo-drift.csv": AGG + "a,2,1,2,0.5,0.1,\nb,2,1,2,0.6,0.1,\n"})
    (p,) = finding.map_places(where, manifest)
    assert (p.group_title, p.name, p.short, p.turns, p.leaders) == ("cutmap", "solo-drift", "solo-drift", 3, [])


def test_a_map_cell_with_the_boards_runs_repeats_it(tmp_path):
    """``places`` reads the boards, then each map of recipes (a map of another metric is left out); a cell whose
    per-seed rows are a board's for its two common recipes repeats that board and counts the recipes it adds."""
    records = pd.DataFrame({"label": ["a", "a", "b", "b"], "seed": [1, 2, 1, 2], "online_reward": [0.5, 0.25, 0.0, 0.125]})
    frame = pd.DataFrame({"label": ["a", "b"], "online_reward": [0.375, 0.0625], "online_reward_ci95": [0.5, 0.25],
                          "seeds": [2, 2]})
    tool = board("tool-drift", ["a", "b"], [versus("a", "b", 0.3125, 0.04, "a")], records, frame)
    manifest = {"metric": "online_reward", "rows": [{"label": "a"}], "axes": ["k"], "scenarios": ["tool-drift"]}
    write_map(tmp_path / "grid", manifest, {
        "tool-drift.csv": "row,n,rank_low,rank_high,online_reward,k\na,2,1,3,0.375,1\nb,2,1,3,0.0625,1\nc,2,1,3,0.1,1\n"
                          "a,2,1,1,0.9,2\nb,2,2,2,0.1,2\n",
        "per-seed.csv": "scenario,row,seed,online_reward,k\n" + "".join(
            f"tool-drift,{r},{s},{v},1\n" for r, s, v in [("a", 1, 0.5), ("a", 2, 0.25), ("b", 1, 0.0), ("b", 2, 0.125),
                                                           ("c", 1, 0.1), ("c", 2, 0.1)])
        + "tool-drift,a,1,0.9,2\ntool-drift,a,2,0.9,2\ntool-drift,b,1,0.1,2\ntool-drift,b,2,0.1,2\n"})
    write_map(tmp_path / "other", {"metric": "auc", "rows": [{"label": "a"}], "scenarios": ["tool-drift"]},
              {"tool-drift.csv": "row,n,rank_low,rank_high,auc\na,2,1,1,0.5\n"})
    found = finding.places(tmp_path, [tool])
    assert [(p.name, p.turns, p.repeats, p.added) for p in found] == [
        ("tool-drift", 2, None, 0), ("tool-drift at k 1", 2, "tool-drift", 1), ("tool-drift at k 2", 2, None, 0)]
    assert found[0].arms == {"a": Standing(0.375, 0.5, 2, 1, 1, 2, LEAD), "b": Standing(0.0625, 0.25, 2, 2, 2, 2, BEHIND)}
    assert (found[0].link, found[0].anchor, found[0].short) == ("tool-drift.md", "tool-drift", "tool-drift")
    assert list(found[1].runs["row"]) == ["a", "a", "b", "b", "c", "c"]


def test_a_board_place_takes_its_ranks_from_the_boards_tests_and_its_turns_from_the_scenario_file():
    """A board's column: ranks as its tests support them (one order of three: ranges, no lead), its table's mean,
    interval (NaN: none) and seeds, ``of`` its rows; the turns are 1 where the scenario file leaves them out."""
    frame = pd.DataFrame({"label": ["a", "b", "c"], "online_reward": [0.5, 0.4, 0.1],
                          "online_reward_ci95": [0.05, math.nan, 0.02], "seeds": [3, 3, 2]})
    style = board("style-drift", ["a", "b", "c"], [versus("a", "c", 0.4, 0.03, "a"), versus("a", "b", 0.1, 0.2)],
                  frame=frame)
    p = finding.board_place(style)
    assert (p.group, p.group_title, p.name, p.short, p.link, p.anchor, p.turns, p.board is style, p.runs) == (
        "boards", "Boards", "style-drift", "style-drift", "style-drift.md", "style-drift", 1, True, None)
    assert p.arms == {"a": Standing(0.5, 0.05, 3, 1, 2, 3, TIE), "b": Standing(0.4, None, 3, 1, 3, 3, TIE),
                      "c": Standing(0.1, 0.02, 2, 2, 3, 3, BEHIND)}
    assert finding.scenario_turns("tool-drift") == 2
    assert finding.scenario_turns("no-such-scenario") is None


def test_same_runs_needs_two_common_recipes_with_the_same_seeds_and_values():
    """Two common recipes with equal seeds and values (NaN matching NaN) are the board's runs; one common recipe,
    another seed, another value, no rows, no per-seed table or one without the metric are not."""
    records = pd.DataFrame({"label": ["a", "a", "b", "b"], "seed": [2, 1, 1, 2],
                            "online_reward": [0.25, 0.5, math.nan, 0.125]})
    b = board("x", ["a", "b"], [], records)
    runs = pd.DataFrame({"row": ["a", "a", "b", "b", "c"], "seed": [1, 2, 1, 2, 1],
                         "online_reward": [0.5, 0.25, math.nan, 0.125, 0.0]})
    assert finding._same_runs(runs, b)
    assert not finding._same_runs(runs[runs["row"] != "b"], b)
    assert not finding._same_runs(runs.assign(seed=[1, 3, 1, 2, 1]), b)
    assert not finding._same_runs(runs.assign(online_reward=[0.5, 0.25, 0.0, 0.125, 0.0]), b)
    assert not finding._same_runs(runs.iloc[:0], b)
    assert not finding._same_runs(runs, board("x", ["a", "b"], []))
    assert not finding._same_runs(runs, board("x", ["a", "b"], [], records.rename(columns={"online_reward": "auc"})))


# ----------------------------------------------------------------------------- a README's block


def test_an_empty_folder_writes_a_block_with_the_heading_only(tmp_path):
    """No boards and no maps: the block is the heading and two empty lines; written once, then found unchanged."""
    readme = tmp_path / "README.md"
    folder = tmp_path / "boards"
    folder.mkdir()
    readme.write_text(f"top\n{finding.BEGIN}\nold\n{finding.END}\nrest\n")
    assert finding.write_readme_block(readme, folder, check=True) is False
    assert readme.read_text() == f"top\n{finding.BEGIN}\nold\n{finding.END}\nrest\n"
    assert finding.write_readme_block(readme, folder) is False
    assert readme.read_text() == f"top\n{finding.BEGIN}\n## What the boards and maps found\n\n\n{finding.END}\nrest\n"
    assert finding.write_readme_block(readme, folder) is True


def test_the_block_links_under_the_folder_relative_to_the_readme_or_absolute(tmp_path):
    """Links are the folder's path relative to the README, ending in ``/``; a folder outside the README's own is
    linked by its absolute path. The block: heading, the maps line, the matrix a level below (no summary table
    without boards)."""
    folder = tmp_path / "boards"
    manifest = {"metric": "online_reward", "rows": [{"label": "a"}], "scenarios": ["solo"], "title": "Solo: one",
                "cut": ["env.max_turns=1"]}
    write_map(folder / "grid", manifest, {"solo.csv": AGG + "a,2,1,2,0.5,0.1,\nb,2,1,2,0.25,0.1,\n"})
    readme = tmp_path / "README.md"
    readme.write_text(f"{finding.BEGIN}\n{finding.END}\n")
    assert finding.write_readme_block(readme, folder) is False
    assert readme.read_text().splitlines() == [
        finding.BEGIN, "## What the boards and maps found", "",
        "- **Maps of recipes** (Solo, 1 cell): no cell has a supported lead: first place is a tie in all 1.", "",
        "### Who wins where", "",
        "Online reward, mean over seeds, and `#rank of m` as each table's own correction supports it (Holm over its "
        "pairs: `#1–4` is a tie over ranks 1 to 4); **bold**: a supported lead, alone or shared with the other bold "
        "cells of its column; `—`: not run. Columns: 1 cell of the Solo ([grid/](boards/grid/README.md)). Intervals: "
        "the tables linked in the header, and the site's cells on hover.", "",
        "| recipe | [solo](boards/grid/solo.md) |", "|---|---:|", "| a | 0.500 #1–2 of 2 |", "| b | 0.250 #1–2 of 2 |",
        "", finding.END]
    aside = tmp_path / "docs" / "README.md"
    aside.parent.mkdir()
    aside.write_text(f"{finding.BEGIN}\n{finding.END}\n")
    finding.write_readme_block(aside, folder)
    assert f"| recipe | [solo]({folder.resolve().as_posix()}/grid/solo.md) |" in aside.read_text().splitlines()


def test_a_readme_without_both_marks_is_refused(tmp_path):
    """A block needs its begin mark and its end mark."""
    readme = tmp_path / "README.md"
    readme.write_text(f"{finding.BEGIN}\nno end\n")
    with pytest.raises(UserError, match="no generated block"):
        finding.write_readme_block(readme, tmp_path)
    readme.write_text(f"no begin\n{finding.END}\n")
    with pytest.raises(UserError, match="no generated block"):
        finding.write_readme_block(readme, tmp_path)
    readme.write_text(f"{finding.END}\n{finding.BEGIN}\nno end after it\n")
    with pytest.raises(UserError, match=r"the generated block's end \(.*\) comes before its beginning$"):
        finding.write_readme_block(readme, tmp_path)
    assert readme.read_text() == f"{finding.END}\n{finding.BEGIN}\nno end after it\n"
