"""The finding first: a few plain lines of what the boards and maps found, and a "who wins where" matrix.

Both are pure functions of a leaderboard folder's committed tables, so they cannot drift from them:

- the *places* are the scenario boards at full budget (``summary.split_budgets``) and the cells of the
  maps of recipes under the folder (``maps.find_maps``: a grid whose every row is a recipe as written, no
  overrides, ranked on the boards' metric; an ablation or a stress map varies a recipe's settings and
  stays in the site's Maps section). A board's ranks are its own (``summary.metric_ranks``: paired
  sign-flip tests, Holm over the board's pairs); a map cell's are the map's (its aggregate table's
  ``rank_low`` and ``rank_high``: the grid's test, Holm over the pairs at the cell);
- a recipe's *standing* in a place: ``lead`` (rank 1 alone: ahead of every other recipe after the
  correction), ``shared`` (in a group of k recipes that is supported ahead of all the others, ranks 1 to k,
  and not resolved inside), ``tie`` (tied for first: nothing resolved between it and the first) or
  ``behind`` (another recipe is supported ahead of it); a shared lead is at most half the recipes;
- the *lines* (``finding_lines``): one per class of scenario (single-turn, multi-turn: ``max_turns`` of
  ``envs/<scenario>.yaml``) saying who is first by the means and which leads the seeds support, with the
  difference to the next recipe and its Holm p; one for the maps, saying where a lead is supported;
- the *matrix*: recipes by places, as HTML (the site: shaded by standing, the interval and rank on
  hover) and as Markdown (the READMEs: bold for a supported lead, ``#rank`` as the boards write it).

``python -m sao_env.leaderboard.finding README.md leaderboards`` writes the block between ``BEGIN`` and
``END`` in a README (the lines, the matrix and the summary table, links under the folder); ``--check``
exits 1 where the block differs from what the tables give.
"""

from __future__ import annotations

import html
import json
import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pandas as pd

from sao_env.leaderboard.columns import SORT_KEY, column_format, finite_float, md_escape, section_id
from sao_env.leaderboard.board import ScenarioBoard
from sao_env.leaderboard.stats import format_rank

LEAD, SHARED, TIE, BEHIND = "lead", "shared", "tie", "behind"
STANDING_WORDS = {
    LEAD: "a supported lead: ahead of every other recipe after the table's correction",
    SHARED: "a supported lead shared with the other recipes marked so in its column, not resolved between them",
    TIE: "tied for first: no order resolved between it and the first",
    BEHIND: "behind: another recipe is supported ahead of it",
}
BEGIN = "<!-- the finding: generated from the tables by `python -m sao_env.leaderboard.finding README.md leaderboards`; edit the generator, not this block -->"
END = "<!-- end of the generated finding -->"


@dataclass
class Standing:
    """One recipe in one place."""

    mean: float | None
    ci95: float | None
    n: int
    low: int
    high: int
    of: int
    standing: str

    @property
    def rank(self) -> str:
        return format_rank(self.low, self.high)


@dataclass
class Place:
    """A column of the matrix: a scenario board or one cell of a map."""

    group: str
    """``boards`` or the map's folder name."""
    group_title: str
    name: str
    """What the lines call it: the scenario, or ``scenario at axis value, ...`` for a map cell."""
    short: str
    """The column's header."""
    link: str
    """Page of its table, relative to the leaderboard folder."""
    anchor: str
    """Its section on the site."""
    turns: int | None
    arms: dict[str, Standing] = field(default_factory=dict)
    board: ScenarioBoard | None = None
    repeats: str | None = None
    """For a map cell: the board whose per-seed results it repeats (every recipe both have, at least two, with
    the same seeds and the same values): the same evidence, not a second one."""
    added: int = 0
    """For a map cell that repeats a board: how many of its recipes the board does not have."""
    runs: pd.DataFrame | None = None
    """For a map cell: its per-seed rows (``row``, ``seed``, the metric), where the map has a per-seed table."""

    @property
    def leaders(self) -> list[str]:
        """The recipes of a supported lead (one, or a group that shares it); empty where first place is a tie."""
        return [label for label, s in self.arms.items() if s.standing in (LEAD, SHARED)]


def standings(ranks: dict[str, tuple[int, int]]) -> dict[str, str]:
    """``{label: standing}`` from rank ranges (module doc): the smallest k, at most half the rows, whose rows
    ranked at best k are exactly k and all ranked at worst k form the supported lead (seven of nine rows
    supported ahead of the other two are not a lead)."""
    m = len(ranks)
    group: set[str] = set()
    for k in range(1, m // 2 + 1):
        top = {x for x, (low, _) in ranks.items() if low <= k}
        if len(top) == k and all(ranks[x][1] <= k for x in top):
            group = top
            break
    out = {}
    for x, (low, _) in ranks.items():
        if x in group:
            out[x] = LEAD if len(group) == 1 else SHARED
        else:
            out[x] = TIE if low == 1 else BEHIND
    return out


@lru_cache(maxsize=None)
def scenario_turns(env: str) -> int | None:
    """``max_turns`` of ``envs/<env>.yaml`` (1 where the file leaves it out); None without a scenario file."""
    from sao_env.errors import UserError
    from sao_env.specs import find_spec, load_yaml

    try:
        spec = load_yaml(find_spec("envs", env))
    except (UserError, OSError, ValueError):
        return None
    value = finite_float(spec.get("max_turns", 1)) if isinstance(spec, dict) else None
    return int(value) if value is not None else None


def board_place(board: ScenarioBoard) -> Place:
    from sao_env.leaderboard.summary import metric_ranks

    ranks = metric_ranks(board, SORT_KEY)
    marks = standings(ranks)
    place = Place("boards", "Boards", board.env, board.env, f"{board.env}.md", section_id(board.env),
                  scenario_turns(board.env), board=board)
    for _, row in board.frame.iterrows():
        label = str(row["label"])
        place.arms[label] = Standing(finite_float(row.get(SORT_KEY)), finite_float(row.get(f"{SORT_KEY}_ci95")),
                                     int(row["seeds"]), *ranks[label], len(board.frame), marks[label])
    return place


def recipe_map(where: Path) -> dict | None:
    """The manifest of a map whose rows are recipes as written, ranked on ``SORT_KEY``; None otherwise."""
    from sao_env.leaderboard.maps import MANIFEST

    try:
        manifest = json.loads((Path(where) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    rows = manifest.get("rows") or []
    if manifest.get("metric") != SORT_KEY or not rows or any(r.get("overrides") for r in rows):
        return None
    return manifest


def map_places(where: Path, manifest: dict) -> list[Place]:
    """One place per (scenario, axis point) of a map's aggregate tables, in their order."""
    where = Path(where)
    axes = list(manifest.get("axes") or [])
    scenarios = [s for s in manifest.get("scenarios", []) if (where / f"{s}.csv").is_file()]
    title = str(manifest.get("title") or where.name)
    prefix = _common_prefix(scenarios) if len(scenarios) > 1 else ""
    cut = dict(o.split("=", 1) for o in manifest.get("cut") or [] if "=" in o)
    per_seed = None
    try:
        per_seed = pd.read_csv(where / str(manifest.get("per_seed") or "per-seed.csv"))
    except (OSError, ValueError, pd.errors.EmptyDataError):
        pass
    if per_seed is not None and not {"scenario", "row", "seed", SORT_KEY, *axes}.issubset(per_seed.columns):
        per_seed = None
    out = []
    for scenario in scenarios:
        try:
            agg = pd.read_csv(where / f"{scenario}.csv", dtype={a: str for a in axes})
        except (OSError, ValueError, pd.errors.EmptyDataError):
            continue
        if not {"row", "n", "rank_low", "rank_high", SORT_KEY, *axes}.issubset(agg.columns):
            continue
        points = list(dict.fromkeys(tuple(r) for r in agg[axes].itertuples(index=False, name=None))) if axes else [()]
        for point in points:
            at = agg
            for a, v in zip(axes, point):
                at = at[at[a] == v]
            setting = dict(zip(axes, point))
            turns = finite_float(setting.get("env.max_turns", cut.get("env.max_turns")))
            label = scenario[len(prefix):] if prefix else ""
            values = " · ".join(str(v) for v in point)
            short = " ".join(x for x in (label, values) if x) or scenario
            name = scenario + (" at " + ", ".join(f"{_axis_word(a)} {v}" for a, v in setting.items()) if axes else "")
            place = Place(where.name, title, name, short, f"{where.name}/{scenario}.md", f"map-{where.name}",
                          int(turns) if turns is not None else scenario_turns(scenario))
            if per_seed is not None:
                from sao_env.leaderboard.maps import _key

                runs = per_seed[per_seed["scenario"].astype(str) == scenario]
                for a, v in setting.items():
                    runs = runs[runs[a].map(_key) == _key(v)]
                place.runs = runs[["row", "seed", SORT_KEY]]
            ranks = {str(r["row"]): (int(finite_float(r["rank_low"]) or 1), int(finite_float(r["rank_high"]) or len(at)))
                     for _, r in at.iterrows()}
            marks = standings(ranks)
            for _, r in at.iterrows():
                label_ = str(r["row"])
                place.arms[label_] = Standing(finite_float(r[SORT_KEY]), finite_float(r.get(f"{SORT_KEY}_ci95")),
                                              int(finite_float(r["n"]) or 0),
                                              *ranks[label_], len(at), marks[label_])
            out.append(place)
    return out


def places(folder: Path, boards: list[ScenarioBoard] | None = None) -> list[Place]:
    """Every place of the matrix: the full-budget boards (``boards``, default the folder's per-seed tables), then
    the cells of each map of recipes under ``folder``."""
    from sao_env.leaderboard.maps import find_maps
    from sao_env.leaderboard.summary import per_seed_boards, split_budgets

    ranked, _ = split_budgets(per_seed_boards(folder) if boards is None else boards)
    out = [board_place(b) for b in ranked if len(b.frame)]
    for where in find_maps(folder):
        manifest = recipe_map(where)
        if manifest is not None:
            out += map_places(where, manifest)
    for place in out:
        if place.runs is not None:
            board = next((b for b in ranked if _same_runs(place.runs, b)), None)
            if board is not None:
                place.repeats = board.env
                place.added = len(set(place.arms) - {str(x) for x in board.frame["label"]})
    return out


def _same_runs(runs: pd.DataFrame, board: ScenarioBoard) -> bool:
    """Whether a map cell's per-seed results are the board's: every recipe both have (at least two) with the
    same seeds and the same values of the metric."""
    records = board.records
    if records is None or SORT_KEY not in records.columns or runs.empty:
        return False
    common = set(runs["row"].astype(str)) & set(records["label"].astype(str))
    if len(common) < 2:
        return False
    for label in common:
        mine = runs[runs["row"].astype(str) == label].sort_values("seed")
        theirs = records[records["label"].astype(str) == label].sort_values("seed")
        if list(mine["seed"].astype(int)) != list(theirs["seed"].astype(int)):
            return False
        a = pd.to_numeric(mine[SORT_KEY], errors="coerce").to_numpy()
        b = pd.to_numeric(theirs[SORT_KEY], errors="coerce").to_numpy()
        if not all((x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b)):
            return False
    return True


def arms(found: list[Place]) -> list[str]:
    """The matrix's rows: every recipe in the order first met (the boards' ranked order first)."""
    return list(dict.fromkeys(label for p in found for label in p.arms))


# ----------------------------------------------------------------------------- the lines


TURNS = (("Single-turn", lambda t: t == 1), ("Multi-turn", lambda t: t is not None and t > 1),
         ("Scenarios without a scenario file", lambda t: t is None))


def finding_lines(found: list[Place]) -> list[str]:
    """The plain lines (Markdown inline: bold and code only): one per class of board, then one for the maps."""
    boards = [p for p in found if p.board is not None]
    cells = [p for p in found if p.board is None]
    lines = []
    for words, belongs in TURNS:
        mine = [p for p in boards if belongs(p.turns)]
        if mine:
            label = f"**{words} scenarios**" if "without" not in words else f"**{words}**"
            lines.append(f"{label} ({_and([p.name for p in mine])}): {_boards_words(mine)}.")
    if cells:
        lines.append(_maps_line(cells))
    return lines


def _boards_words(mine: list[Place]) -> str:
    from sao_env.leaderboard.summary import supported_orders

    firsts = [_first_by_mean(p) for p in mine]
    common = firsts[0] if len(mine) > 1 and len(set(firsts)) == 1 and firsts[0] else None
    clauses = []
    if common:
        clauses.append(f"{common} is first by the means on {'both' if len(mine) == 2 else f'all {len(mine)}'}")
    led = [p for p in mine if p.leaders]
    for p in led:
        if len(p.leaders) > 1:
            n = len(p.arms) - len(p.leaders)
            clauses.append(f"{_and(p.leaders)} share a supported lead on {p.name}, ahead of the other {n} "
                           f"recipe{'s' if n != 1 else ''}")
            continue
        who = p.leaders[0]
        nxt = next((x for x in _by_mean(p) if x != who), None)
        test = _comparison(p.board, who, nxt) if nxt else None
        subject = "it" if who == common else who
        if test is None:
            clauses.append(f"{subject} leads with support on {p.name}")
            continue
        diff, p_holm = test
        clauses.append(f"{subject} leads with support on {p.name} ({diff:+.3f} over {nxt}, the next best; "
                       f"Holm p {p_holm:.2g})")
    for p in mine:
        if p in led:
            continue
        orders = supported_orders(p.board) if p.board is not None else []
        first = "" if common else f"{_first_by_mean(p)} first by the means"
        if len(p.arms) < 2:
            clauses.append(f"on {p.name} one recipe alone")
        elif not orders:
            clauses.append(f"on {p.name} every pair is a tie" + (f" ({first})" if first else ""))
        else:
            shown = ", ".join(f"{winner} > {loser} at Holm p {q:.2g}" for winner, loser, q in orders[:3])
            more = f" and {len(orders) - 3} more" if len(orders) > 3 else ""
            clauses.append(f"on {p.name} no lead is supported ({first + '; ' if first else ''}"
                           f"supported: {shown}{more})")
    return "; ".join(clauses)


def _maps_line(cells: list[Place]) -> str:
    groups = list(dict.fromkeys((p.group, p.group_title) for p in cells))
    titles = [title for _, title in groups]
    head = "; ".join(f"{_short_title(title, g, titles)}, {sum(p.group == g for p in cells)} cell"
                     f"{'s' if sum(p.group == g for p in cells) != 1 else ''}" for g, title in groups)
    led = [p for p in cells if p.leaders]
    rest = [p for p in cells if not p.leaders]
    clauses = []
    by_winners: dict[tuple[str, ...], list[Place]] = {}
    for p in led:
        by_winners.setdefault(tuple(p.leaders), []).append(p)
    for winners, where in by_winners.items():
        others = {len(p.arms) - len(winners) for p in where}
        turns = _turn_words(where)
        noun = f"the {turns}cell{'s' if len(where) != 1 else ''} {_and([_cell_words(p) for p in where])}"
        if len(winners) == 1:
            clause = f"{winners[0]} leads with support on {noun}"
        else:
            clause = f"{_and(list(winners))} share a supported lead on {noun}"
        if len(others) == 1 and (n := others.pop()) > 0:
            clause += f", ahead of the other {n} recipe{'s' if n != 1 else ''}"
        clauses.append(clause)
    if rest:
        turns = _turn_words(rest).strip()
        if led:
            clauses.append(f"in the other {len(rest)} cell{'s' if len(rest) != 1 else ''}"
                           + (f", all {turns}," if turns and len(rest) > 1 else f", {turns}," if turns else "")
                           + " no lead is supported (first place is a tie)")
        else:
            clauses.append(f"no cell has a supported lead: first place is a tie in all {len(rest)}")
    return f"**Maps of recipes** ({head}): " + "; ".join(clauses) + "."


def _cell_words(p: Place) -> str:
    if not p.repeats:
        return p.name
    return p.name + f" (the {p.repeats} board's runs" + (f", and {p.added} more recipe{'s' if p.added != 1 else ''})"
                                                          if p.added else ")")


def _turn_words(where: list[Place]) -> str:
    turns = {p.turns for p in where}
    if turns == {1}:
        return "single-turn "
    if turns and all(t is not None and t > 1 for t in turns):
        return "multi-turn "
    return ""


def _by_mean(p: Place) -> list[str]:
    known = [(label, s.mean) for label, s in p.arms.items() if s.mean is not None]
    return [label for label, _ in sorted(known, key=lambda x: -x[1])]


def _first_by_mean(p: Place) -> str:
    order = _by_mean(p)
    return order[0] if order else ""


def _comparison(board: ScenarioBoard | None, a: str, b: str) -> tuple[float, float] | None:
    """``(mean of a − b paired by seed, Holm p)`` of the board's test of the pair."""
    if board is None:
        return None
    for c in board.comparisons(SORT_KEY):
        if {c.a, c.b} == {a, b} and c.made:
            return (c.mean if c.a == a else -c.mean), c.p_holm
    return None


# ----------------------------------------------------------------------------- the matrix


def _cell_title(label: str, place: Place, s: Standing) -> str:
    interval = "" if s.ci95 is None else f" ± {s.ci95:.3f}"
    mean = "n/a" if s.mean is None else f"{s.mean:.3f}"
    return (f"{label} on {place.name}: {mean}{interval} (95% t-interval, n={s.n}); rank {s.rank} of {s.of}; "
            f"{STANDING_WORDS[s.standing]}")


def matrix_html(found: list[Place]) -> str:
    """The matrix for the site: a table of recipes by places, each cell shaded by its standing, the interval
    and the rank in its title (shown on hover); the columns grouped by board or map."""
    e = html.escape
    if not found:
        return ""
    labels = arms(found)
    groups = list(dict.fromkeys((p.group, p.group_title, p.anchor if p.board is None else "#summary") for p in found))
    top = ['<th class="corner" rowspan="2">recipe</th>']
    for g, title, anchor in groups:
        span = sum(p.group == g for p in found)
        words = title if g == "boards" else _short_title(title, g, [t for _, t, _ in groups], compact=True)
        mine = [p for p in found if p.group == g]
        axes = _axes_words(mine)
        href = anchor if anchor.startswith("#") else f"#{anchor}"
        top.append(f'<th class="group" colspan="{span}" scope="colgroup"><a href="{e(href)}">{e(words)}</a>'
                   f'{f"<span class=muted> {e(axes)}</span>" if axes else ""}</th>')
    heads = []
    for i, p in enumerate(found):
        first = i == 0 or found[i - 1].group != p.group
        cls = "place" + (" gstart" if first and i else "")
        turns = "" if p.turns is None else f"; {'single-turn' if p.turns == 1 else f'{p.turns} turns'}"
        turns += f"; the {p.repeats} board's runs" + (f", and {p.added} more recipe{'s' if p.added != 1 else ''}" if p.added else "") if p.repeats else ""
        heads.append(f'<th class="{cls}" scope="col" title="{e(p.name + turns)}">'
                     f'<a href="#{e(section_id(p.name) if p.board is not None else p.anchor)}">'
                     f'{_breaks(p.short)}</a></th>')
    rows = []
    for label in labels:
        cells = [f'<th class="arm" scope="row">{e(label)}</th>']
        for i, p in enumerate(found):
            first = i and found[i - 1].group != p.group
            s = p.arms.get(label)
            if s is None:
                cells.append(f'<td class="mx s-none{" gstart" if first else ""}" title="{e(label)}: not run on '
                             f'{e(p.name)}">·</td>')
                continue
            text = "n/a" if s.mean is None else f"{s.mean:.3f}"
            cells.append(f'<td class="mx s-{s.standing}{" gstart" if first else ""}" data-rank="{e(s.rank)}" '
                         f'title="{e(_cell_title(label, p, s))}">{text}</td>')
        rows.append(f'<tr data-arm="{e(label)}">' + "".join(cells) + "</tr>")
    keys = [(LEAD, "", "a supported lead"), (SHARED, "", "a supported lead, shared"), (TIE, "", "tied for first"),
            (BEHIND, "", "behind"), ("none", "·", "not run")]
    legend = ('<p class="legend">' + " ".join(f'<span class="key"><span class="sw s-{k}">{mark}</span>{words}</span>'
                                              for k, mark, words in keys)
              + f' <span class="muted">· {e(column_format(SORT_KEY).title)}, mean over seeds (hover: 95% interval, '
              "rank); supported: after Holm over each table's pairs.</span></p>")
    return (f'<div id="matrix" class="matrix"><h2 class="matrix-title">Who wins where</h2>{legend}'
            f'<div class="wrap"><table id="matrix-table"><thead><tr>{"".join(top)}</tr><tr>{"".join(heads)}</tr>'
            f"</thead><tbody>{''.join(rows)}</tbody></table></div></div>")


def matrix_markdown(found: list[Place], prefix: str = "", heading: str = "##") -> list[str]:
    """The matrix as Markdown lines under ``heading``: ``**0.410** #1 of 4`` for a supported lead (alone or
    shared), ``0.540 #1–4 of 4`` otherwise (the rank the table supports: ``#1–4`` a tie), ``—`` where the recipe
    did not run."""
    if not found:
        return []
    groups = list(dict.fromkeys((p.group, p.group_title) for p in found))
    columns = []
    for g, title in groups:
        mine = [p for p in found if p.group == g]
        axes = _axes_words(mine)
        where = "" if g == "boards" else f" ([{g}/]({prefix}{g}/README.md))"
        noun = "cell" if len(mine) == 1 else "cells"  # the link beside the title tells same-titled maps apart
        boards = "board at full budget" if len(mine) == 1 else "boards at full budget"
        columns.append(f"{len(mine)} {boards if g == 'boards' else noun + ' of the ' + _short_title(title)}"
                       f"{where}" + (f" ({axes})" if axes else ""))
    lines = [f"{heading} Who wins where", "",
             f"{column_format(SORT_KEY).title.capitalize()}, mean over seeds, and `#rank of m` as each table's own "
             "correction supports it (Holm over its pairs: `#1–4` is a tie over ranks 1 to 4); **bold**: a "
             "supported lead, alone or shared with the other bold cells of its column; `—`: not run. "
             f"Columns: {'; '.join(columns)}."
             + "".join(f" {p.short} ({p.group}/) holds the {p.repeats} board's runs"
                       + (f", and {p.added} more recipe{'s' if p.added != 1 else ''}." if p.added else ".")
                       for p in found if p.repeats)
             + " Intervals: the tables linked in the header, and the site's cells on hover.", "",
             "| recipe | " + " | ".join(f"[{p.short}]({prefix}{p.link})" for p in found) + " |",
             "|---|" + "|".join("---:" for _ in found) + "|"]
    for label in arms(found):
        cells = []
        for p in found:
            s = p.arms.get(label)
            if s is None:
                cells.append("—")
                continue
            mean = "n/a" if s.mean is None else f"{s.mean:.3f}"
            cells.append((f"**{mean}**" if s.standing in (LEAD, SHARED) else mean) + f" #{s.rank} of {s.of}")
        lines.append(f"| {md_escape(label)} | " + " | ".join(cells) + " |")
    return lines + [""]


# ----------------------------------------------------------------------------- a README's block


def top_markdown(folder: Path, prefix: str = "", *, boards: list[ScenarioBoard] | None = None,
                 heading: str = "##") -> list[str]:
    """The finding as Markdown lines, links under ``prefix``: the lines, the matrix, the summary table
    (``boards``: the folder's per-seed boards, read again where not given; ``heading``: the level of their
    headings)."""
    from sao_env.leaderboard.summary import per_seed_boards, split_budgets, summary_table

    boards = per_seed_boards(folder) if boards is None else boards
    ranked, _ = split_budgets(boards)
    found = places(folder, boards)
    lines = [f"- {line}" for line in finding_lines(found)] + [""]
    lines += matrix_markdown(found, prefix, heading)
    if ranked:
        lines += summary_table(ranked, prefix, heading)
    return lines


README_HEADING = "## What the boards and maps found"


def readme_block(folder: Path, prefix: str) -> str:
    """A README's generated block: ``README_HEADING``, then ``top_markdown`` a level below it."""
    return "\n".join([BEGIN, README_HEADING, "", *top_markdown(folder, prefix, heading="###"), END])


def write_readme_block(readme: Path, folder: Path, *, check: bool = False) -> bool:
    """Put ``readme_block`` between ``BEGIN`` and ``END`` of ``readme`` (links relative to it); returns
    whether the file already held it. With ``check`` nothing is written."""
    from sao_env.errors import UserError
    from sao_env.experiment.files import replacing

    readme, folder = Path(readme), Path(folder)
    text = readme.read_text(encoding="utf-8")
    begin = next((i for i, line in enumerate(text.splitlines()) if line.startswith(BEGIN[:30])), None)
    if begin is None or END not in text:
        raise UserError(f"{readme}: no generated block (a line starting {BEGIN[:30]!r} ... {END!r})")
    lines = text.splitlines(keepends=True)
    end = next((i for i, line in enumerate(lines) if line.startswith(END) and i > begin), None)
    if end is None:
        raise UserError(f"{readme}: the generated block's end ({END!r}) comes before its beginning")
    try:
        prefix = folder.resolve().relative_to(readme.resolve().parent).as_posix() + "/"
    except ValueError:
        prefix = folder.resolve().as_posix() + "/"
    block = readme_block(folder, prefix) + "\n"
    new = "".join(lines[:begin]) + block + "".join(lines[end + 1:])
    if new == text or check:
        return new == text
    with replacing(readme) as tmp:
        tmp.write_text(new, encoding="utf-8")
    return False


# ----------------------------------------------------------------------------- helpers


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _common_prefix(names: list[str]) -> str:
    """The longest common prefix of ``names`` that ends with ``-`` (empty where none)."""
    import os

    common = os.path.commonprefix(names)
    return common[:common.rindex("-") + 1] if "-" in common else ""


def _axis_word(axis: str) -> str:
    return axis.rsplit(".", 1)[-1]


def _axes_words(mine: list[Place]) -> str:
    """``style-drift: env_sigma · update_s_per_token``: what a map's column headers are."""
    names = [p.name for p in mine if " at " in p.name]
    if not names:
        return ""
    scenario, setting = names[0].split(" at ", 1)
    axes = [part.rsplit(" ", 1)[0] for part in setting.split(", ")]
    return f"{scenario}: {' · '.join(axes)}"


def _short_title(title: str, group: str = "", titles: list[str] | tuple[str, ...] = (), *, compact: bool = False) -> str:
    """A map's title up to its colon (``Critic map: when a learned value pays`` is ``Critic map``); where another
    of ``titles`` (none by default) shares that part, it is told apart by its folder: ``Critic map follow-up (critic-spread/)``, or
    only ``critic-spread/`` when ``compact`` (a narrow column's header)."""
    short = title.split(":", 1)[0].strip()
    if sum(t.split(":", 1)[0].strip() == short for t in titles) < 2:
        return short
    return f"{group}/" if compact else f"{short} ({group}/)"


def _breaks(text: str) -> str:
    """``text`` escaped, a line break after each `` · `` and a break opportunity after each ``-``."""
    return html.escape(text).replace(" · ", "<br>").replace("-", "-<wbr>")


def main(argv: list[str] | None = None) -> int:
    import argparse

    from sao_env.errors import UserError

    parser = argparse.ArgumentParser(prog="python -m sao_env.leaderboard.finding",
                                     description="Write the generated finding into a README's block.")
    parser.add_argument("readme", type=Path)
    parser.add_argument("folder", type=Path, help="the leaderboard folder (leaderboards)")
    parser.add_argument("--check", action="store_true", help="exit 1 where the block is not what the tables give")
    args = parser.parse_args(argv)
    try:
        same = write_readme_block(args.readme, args.folder, check=args.check)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.check and not same:
        print(f"{args.readme}: the generated finding differs from the tables of {args.folder}", file=sys.stderr)
        return 1
    print(f"{args.readme}: {'unchanged' if same else 'written'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
