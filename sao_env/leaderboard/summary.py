"""The cross-scenario summary ``<leaderboard dir>/README.md``: algorithms x scenarios on one page.

Made from the committed per-seed tables (``<scenario>-runs.csv``) and the maps' tables, so it can be
checked against them. It opens with the finding (``finding.top_markdown``: a few plain lines, the "who
wins where" matrix of recipes by boards and map cells, the summary table of online reward), then, one
click away (``<details>``), the one-paragraph reading of the statistics (``reading``: every supported
order with its Holm p, what the boards can detect, the collapses) and how the page was made; then, over the
boards at their scenario file's full budget (the flagship ``style-drift`` first): for each other headline
metric (the online reward without collapsed runs when recorded, then AUC) a table of
recipes x scenarios whose cells are mean ± half-width of the 95% Student-t interval over seeds,
the number of seeds and the rank the seeds support within the scenario (``stats.rank_ranges``:
``#1–3`` is a tie), with a row of each board's minimum detectable paired difference under its own
rule (``board.board_power``: Holm over the board's comparisons, stated at α/m); each recipe
minus the reference recipe (``grpo``), paired by seed (``board.paired_frame``); the collapses.
Boards at another budget (cuts, and rows of another budget inside a board) are listed apart,
ranked only among themselves. Then links to each scenario's page and per-seed table, the tuning
tables under ``tuning/`` (``sao_env.sweep``) with their sweep size, cut and winning trial, the grids
(``*/grid.json``, ``tuning/*/grid.json``: ``sao_env.grid``) with their size, test and tables, and the
stability pages (``stability*.md``).

It is written by ``sao-env leaderboard --summary DIR`` and again whenever a scenario's tables
are written into a folder (``sao_env.leaderboard.write_board``).
"""

from __future__ import annotations

import math
from datetime import date
from pathlib import Path

import pandas as pd

from sao_env.errors import UserError
from sao_env.experiment.files import replacing
from sao_env.leaderboard.columns import (FACT_COLUMNS, NO_COLLAPSE, SORT_KEY, UNKNOWN, column_format, eval_versions,
                                         finite_float, format_cell, format_difference, md_escape, num_text)
from sao_env.leaderboard.board import (REFERENCE, board_from_csv, board_power, budget_words, code_versions,
                                       paired_frame, ScenarioBoard, spec_budget)
from sao_env.leaderboard.tables import collapse_cell, header_facts
from sao_env.leaderboard.stats import ALPHA, POWER, format_mde, format_rank, min_seeds, rank_ranges, smallest_p

METRICS = ("online_reward", "auc")
"""The metrics summarised across scenarios, in this order (docs/metrics.md)."""
FLAGSHIP = "style-drift"
"""The scenario shown first (the paper's online experiment); the others follow by name."""


def order_boards(boards: list[ScenarioBoard]) -> list[ScenarioBoard]:
    """``FLAGSHIP`` first, then the others by scenario name."""
    return sorted(boards, key=lambda b: (b.env != FLAGSHIP, b.env))


def per_seed_boards(folder: Path) -> list[ScenarioBoard]:
    """The board of every ``<scenario>-runs.csv`` in ``folder``, the flagship first (``order_boards``)."""
    return order_boards([board_from_csv(p) for p in sorted(Path(folder).glob("*-runs.csv"))])


def split_budgets(boards: list[ScenarioBoard]) -> tuple[list[ScenarioBoard], list[ScenarioBoard]]:
    """(boards ranked across scenarios, boards listed apart): a board whose budget is not its
    scenario file's (a cut, ``full_budget`` False) and the rows of another budget inside a board
    (``board.apart``) are never ranked beside full-budget rows."""
    ranked = [b for b in boards if b.full_budget is not False]
    apart = [b for b in boards if b.full_budget is False] + [a for b in boards for a in b.apart]
    return ranked, apart


def metric_ranks(board: ScenarioBoard, metric: str) -> dict[str, tuple[int, int]]:
    """``{label: (best, worst rank)}`` on ``metric`` as the seeds support it (``stats.rank_ranges``)."""
    labels = [str(x) for x in board.frame["label"]]
    return rank_ranges(labels, board.comparisons(metric))


def summary_metrics(boards: list[ScenarioBoard]) -> tuple[str, ...]:
    """``METRICS``, with the online reward over the runs that did not collapse after it when any
    board recorded collapses."""
    if any(NO_COLLAPSE in b.frame.columns for b in boards):
        return (METRICS[0], NO_COLLAPSE, *METRICS[1:])
    return METRICS


def metric_caption(metric: str) -> str:
    """How to read ``metric_table`` in full: the interval, the ranks and the last row's power."""
    title = column_format(metric).title
    return (f"Mean ± half-width of the 95% t-interval over seeds, n seeds, and `#rank` within the scenario by {title}: "
            "a single number where paired sign-flip tests (Holm-corrected over the scenario's pairs) support the "
            "order, `#1–3` for a tie over ranks 1 to 3. `—`: not run on that scenario. The last row is the minimum "
            f"detectable paired difference at the scenario's n under its rule: {POWER:.0%} power at α/m, Holm's most "
            f"stringent step over the scenario's m comparisons (two-sided α {ALPHA:g}; `none`: the sign-flip test "
            "cannot reach α after Holm at that n; docs/leaderboard.md). It is what a board can resolve, not a bound "
            "on the differences it leaves ties.")


SHORT_CAPTION = ("Mean ± half-width of the 95% t-interval over seeds (n seeds) and `#rank` as the seeds support it "
                 "(`#1–3`: a tie over ranks 1 to 3); **bold**: a supported lead. Last row: the smallest paired "
                 "difference each board detects (80% power, Holm over its pairs).")
"""The summary table's caption where it follows the finding (the full one, ``metric_caption``, is below it)."""


def summary_table(boards: list[ScenarioBoard], prefix: str = "", level: str = "##") -> list[str]:
    """The summary table of the finding (``metric_table`` on ``SORT_KEY``, a short caption), links under
    ``prefix``, its heading at ``level``."""
    return metric_table(boards, SORT_KEY, prefix=prefix, caption=SHORT_CAPTION,
                        heading=f"{level} Summary: {column_format(SORT_KEY).title} by scenario")


def metric_table(boards: list[ScenarioBoard], metric: str, *, prefix: str = "", caption: str | None = None,
                 heading: str | None = None) -> list[str]:
    """Markdown lines: recipes x scenarios, ``mean ± CI (n=k) #rank of m`` per cell (the rank the
    seeds support, ``#1–3`` a tie), ``—`` where a recipe did not run; a last row states each
    board's minimum detectable paired difference. Links to the boards' pages under ``prefix``."""
    title = column_format(metric).title
    labels: list[str] = []
    for b in boards:
        labels += [str(x) for x in b.frame["label"] if str(x) not in labels]
    header = ["recipe", "algorithm"] + [f"[{b.env}]({prefix}{b.env}.md)" for b in boards]
    lines = [heading or f"## {title}", "", caption or metric_caption(metric), "",
             "| " + " | ".join(header) + " |", "|---|---|" + "|".join("---:" for _ in boards) + "|"]
    ranks = {b.env: metric_ranks(b, metric) for b in boards}
    for label in labels:
        algorithm = next((str(b.frame.loc[b.frame["label"].astype(str) == label, "algorithm"].iloc[0])
                          for b in boards if (b.frame["label"].astype(str) == label).any()), UNKNOWN)
        cells = [md_escape(label), algorithm]
        for b in boards:
            mine = b.frame["label"].astype(str) == label
            if metric not in b.frame.columns or not mine.any():
                cells.append("—")
                continue
            row = b.frame[mine].iloc[0]
            text = format_cell(row[metric], row[f"{metric}_ci95"], 0, row["seeds"], metric)
            known = finite_float(row[metric]) is not None
            rank = f" #{format_rank(*ranks[b.env][label])} of {len(b.frame)}" if known else ""
            if b.supported_best(metric) == label:
                text = f"**{text}**"
            cells.append(f"{text} (n={int(row['seeds'])})" + rank)
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("| *minimum detectable difference* | | " + " | ".join(_power_cell(b, metric) for b in boards) + " |")
    return lines + [""]


def _power_cell(board: ScenarioBoard, metric: str) -> str:
    power = board_power(board, metric)
    return "n/a" if power is None else f"{format_mde(power['mde'])} (n={power['n']}, m={power['m']})"


def floor_words(boards: list[ScenarioBoard]) -> str:
    """``8 seeds for a board's 6 comparisons``: the fewest seeds at which the sign-flip test can reach
    α/m (Holm's first step), for each family size m among the boards."""
    ms = sorted({sum(c.made for c in b.comparisons(SORT_KEY)) for b in boards} - {0}) or [1]
    return ", ".join(f"{min_seeds(m)} seeds for a board's {m} comparison{'s' if m != 1 else ''}" for m in ms)


def paired_table(boards: list[ScenarioBoard], metrics: tuple[str, ...] = METRICS) -> list[str]:
    """Markdown lines: each recipe minus the reference per scenario and metric, paired by seed."""
    frames = {b.env: paired_frame(b, list(metrics)) for b in boards}
    frames = {env: f for env, f in frames.items() if f is not None and not f.empty}
    if not frames:
        return [f"## Paired differences to {REFERENCE}", "",
                f"No scenario has per-seed rows of {REFERENCE} and another recipe.", ""]
    envs = [b.env for b in boards if b.env in frames]
    lines = [f"## Paired differences to {REFERENCE}", "",
             f"Each recipe minus {REFERENCE}, paired by seed: mean ± half-width of the 95% t-interval over the seeds' "
             "differences, n paired seeds (no interval with n=1). An interval that excludes 0 is a difference under "
             "the t-interval's assumption of normal differences, before any correction for the board's other "
             "comparisons; the ranks use the paired sign-flip test with Holm's correction over each board's pairs, which "
             f"assumes nothing about their distribution but cannot reach α/m (Holm's first step) with fewer than "
             f"{floor_words(boards)}.", "",
             "| recipe − " + REFERENCE + " | metric | " + " | ".join(f"[{env}]({env}.md)" for env in envs) + " |",
             "|---|---|" + "|".join("---:" for _ in envs) + "|"]
    labels = list(dict.fromkeys(label for f in frames.values() for label in f["label"]))
    for label in labels:
        for metric in metrics:
            cells = []
            for env in envs:
                match = frames[env][(frames[env]["label"] == label) & (frames[env]["metric"] == metric)]
                if match.empty:
                    cells.append("—")
                else:
                    r = match.iloc[0]
                    cells.append(format_difference(r["mean"], r["ci95"], int(r["n"]), metric))
            lines.append(f"| {md_escape(label)} − {REFERENCE} | {column_format(metric).title} | " + " | ".join(cells) + " |")
    return lines + [""]


def collapse_table(boards: list[ScenarioBoard]) -> list[str]:
    """Markdown lines: collapsed runs per recipe and scenario (``k of n``), or one line saying that
    the tables did not record them."""
    lines = ["## Collapses", ""]
    if not any("collapses" in b.frame.columns for b in boards):
        return lines + ["Not recorded in these per-seed tables (they predate the collapse statistic; rows made from "
                        "run directories with `episodes.jsonl` carry it: docs/metrics.md, Collapse).", ""]
    labels = list(dict.fromkeys(str(x) for b in boards for x in b.frame["label"]))
    lines += ["Runs whose rolling training reward (64 episodes) stayed under half its phase peak until the phase "
              "ended (docs/metrics.md, Collapse), of the runs with a verdict; `?`: not recorded.", "",
              "| recipe | " + " | ".join(f"[{b.env}]({b.env}.md)" for b in boards) + " |",
              "|---|" + "|".join("---:" for _ in boards) + "|"]
    for label in labels:
        cells = []
        for b in boards:
            mine = b.frame[b.frame["label"].astype(str) == label]
            cells.append("—" if mine.empty else collapse_cell(mine.iloc[0]))
        lines.append(f"| {md_escape(label)} | " + " | ".join(cells) + " |")
    return lines + [""]


def apart_lines(apart: list[ScenarioBoard]) -> list[str]:
    """Markdown lines: boards and rows at another budget, each ranked within itself only."""
    if not apart:
        return []
    lines = ["## Boards at another budget (not ranked with the tables above)", "",
             "A cut of a scenario, or rows of a board whose budget differs from the rest, are ranked only among "
             "themselves (docs/leaderboard.md).", ""]
    for b in apart:
        ranks = metric_ranks(b, SORT_KEY)
        rows = "; ".join(
            f"{md_escape(str(r['label']))} "
            f"{format_cell(r[SORT_KEY], r[f'{SORT_KEY}_ci95'], 0, r['seeds'], SORT_KEY)} (n={int(r['seeds'])}) "
            f"#{format_rank(*ranks[str(r['label'])])} of {len(b.frame)}"
            for _, r in b.frame.iterrows())
        spec = spec_budget(b.env)
        full = f"; envs/{b.env}.yaml: {budget_words(dict(zip(FACT_COLUMNS, spec)))}" if spec else ""
        lines.append(f"- [{b.env}]({b.env}.md) at {budget_words(b.facts)}{full}: {column_format(SORT_KEY).title} "
                     f"{rows}.")
    return lines + [""]


def reading(boards: list[ScenarioBoard], apart: int = 0) -> str:
    """One plain paragraph: what the full-budget boards say across scenarios, in words. Which leads
    the seeds support, how small a difference they could detect against the gaps between the
    leaders, who is first by the means alone, the collapses, and what is listed apart."""
    if not boards:
        return "No scenario has a board at its full budget yet." + (f" {apart} board(s) at another budget are listed "
                                                                    "apart." if apart else "")
    seeds = sorted({int(x) for b in boards for x in b.frame["seeds"]})
    seed_words = f"{seeds[0]} seed{'s' if seeds[0] != 1 else ''}" if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]} seeds"
    title = column_format(SORT_KEY).title
    supported = [(b, b.supported_best(SORT_KEY)) for b in boards if len(b.frame) > 1]
    supported = [(b, who) for b, who in supported if who]
    orders = [(b, supported_orders(b)) for b in boards]
    k = len(boards)
    text = f"On the {k} scenario{'s' if k != 1 else ''} at full budget ({seed_words} per recipe), "
    if supported:
        text += (f"the seeds support a leader in {title} on {len(supported)}: "
                 + "; ".join(f"{who} on {b.env} ({_leader_tests(b, who)})" for b, who in supported) + ".")
    if any(found for _, found in orders):
        text += (" Orders the seeds support (paired sign-flip tests, Holm over each board's pairs): "
                 + "; ".join(f"{b.env} " + ", ".join(f"{w} > {l} (Holm p {p:.2g})" for w, l, p in found)
                             for b, found in orders if found)
                 + "; every other pair is a tie")
        ties = [b.env for b, found in orders if not found and len(b.frame) > 1]
        text += (f", and on {_and(ties)} every pair is." if ties else ".")
    else:
        text += (f"no recipe's lead in {title} is supported by the seeds: every order is a tie under paired "
                 "sign-flip tests with Holm's correction.")
        made = [[c for c in b.comparisons(SORT_KEY) if c.made] for b in boards]
        if all(m and smallest_p(max(c.n for c in m)) * len(m) > ALPHA for m in made):
            n = max(c.n for m in made for c in m)
            text += (f" At {n} seeds none could be: the test's smallest p is {smallest_p(n):.3g}"
                     f" before the correction.")
    powers = [p for p in (board_power(b) for b in boards) if p is not None]
    gaps = [float(b.frame[SORT_KEY].iloc[0]) - float(b.frame[SORT_KEY].iloc[1]) for b in boards
            if len(b.frame) > 1 and SORT_KEY in b.frame and b.frame[SORT_KEY].iloc[:2].notna().all()]
    finite = [p for p in powers if math.isfinite(p["mde"])]
    if powers:
        ms = sorted({p["m"] for p in powers})
        rule = f"Holm over its {_and([str(m) for m in ms], 'or')} comparisons, stated at α/m"
        if finite:
            lo, hi = min(p["mde"] for p in finite), max(p["mde"] for p in finite)
            text += (f" The paired difference each board detects with {POWER:.0%} power under its own rule ({rule}) is "
                     f"{_span(lo, hi)}")
            if gaps:
                text += f", against leads of the first recipe over the second of {_span(min(gaps), max(gaps))}"
            text += "; it is what the boards can resolve, not a bound on the differences they leave ties."
        none = [b.env for b, p in zip(boards, (board_power(b) for b in boards)) if p and math.isinf(p["mde"])]
        if none:
            text += (f" On {_and(none)} no difference is detectable: at {'their' if len(none) > 1 else 'its'} n the "
                     "sign-flip test cannot reach α after Holm.")
    firsts: dict[str, list[str]] = {}
    for b in boards:
        if len(b.frame) > 1:
            firsts.setdefault(str(b.frame["label"].iloc[0]), []).append(b.env)
    if firsts:
        text += (" By the means alone, " + "; ".join(f"{label} is first on {', '.join(envs)}"
                                                    for label, envs in firsts.items())
                 + (" (orders the seeds do not support)." if not supported else "."))
    recorded = [b for b in boards if "collapses" in b.frame.columns]
    if recorded:
        total = sum(int(finite_float(x) or 0) for b in recorded for x in b.frame["collapses"])
        runs = sum(int(finite_float(x) or 0) for b in recorded for x in b.frame["collapse_checked"])
        who = [f"{r['label']} on {b.env} ({int(r['collapses'])})" for b in recorded for _, r in b.frame.iterrows()
               if finite_float(r["collapses"])]
        text += f" {total} of {runs} runs collapsed" + (f": {', '.join(who)}." if who else ".")
    else:
        text += " Collapses are not recorded in these tables."
    if apart:
        text += f" {apart} board{'s' if apart != 1 else ''} at another budget {'are' if apart != 1 else 'is'} listed apart."
    return text


def supported_orders(board: ScenarioBoard, metric: str = SORT_KEY) -> list[tuple[str, str, float]]:
    """``(winner, loser, Holm p)`` of every pair whose order the board's seeds support on ``metric``,
    in the board's order of pairs."""
    return [(c.winner, c.b if c.winner == c.a else c.a, c.p_holm) for c in board.comparisons(metric) if c.winner]


def _leader_tests(board: ScenarioBoard, leader: str, metric: str = SORT_KEY) -> str:
    """``ahead of sao, grpo_dis and grpo: Holm p 0.012, 0.012, 0.012``: the tests that make ``leader``
    the board's leader, one against every other row."""
    beaten = [(loser, p) for winner, loser, p in supported_orders(board, metric) if winner == leader]
    return f"ahead of {_and([x for x, _ in beaten])}: Holm p " + ", ".join(f"{p:.2g}" for _, p in beaten)


def _and(items: list[str], word: str = "and") -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} {word} {items[-1]}"


def _span(lo: float, hi: float) -> str:
    return f"{lo:.3f}" if f"{lo:.3f}" == f"{hi:.3f}" else f"{lo:.3f}–{hi:.3f}"


def scenario_lines(boards: list[ScenarioBoard]) -> list[str]:
    """Markdown lines: one bullet per scenario with its budget, seeds and links."""
    lines = ["## Scenarios", ""]
    for b in boards:
        facts = dict(header_facts(b, ""))
        lines.append(f"- [{b.env}]({b.env}.md) ([per-seed table]({b.env}-runs.csv)): {facts['budget']}; "
                     f"{facts['phases']}; recovery threshold {num_text(b.facts.get('recovery_threshold'))}; "
                     f"seeds {facts['seeds']}.")
    return lines + [""]


def tuning_lines(folder: Path) -> list[str]:
    """Markdown lines: every tuning table under ``folder/tuning`` with its size, cut and winner."""
    paths = sorted((Path(folder) / "tuning").glob("*.csv"))
    lines = ["## Tuning tables", ""]
    if not paths:
        return lines + ["No tuning table in `tuning/` yet (`sao-env sweep` writes them).", ""]
    from sao_env.sweep import rank_trials  # imports torch: only where there are tables to rank
    lines += ["Each recipe's hyper-parameters come from a sweep of the same size on the same cut and seeds "
              "(`tuning:` in its agents/*.yaml points here).", "",
              "| table | trials x seeds | cut | objective | winner | mean ± CI |", "|---|---|---|---|---|---:|"]
    for path in paths:
        try:
            table = pd.read_csv(path, dtype={"overrides": str, "cut": str})
            objective = str(table["objective"].iloc[0])
            ranked = rank_trials(table, objective)
        except (KeyError, IndexError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as err:
            raise UserError(f"{path}: not a tuning table written by sao-env sweep ({type(err).__name__})") from None
        best = ranked.iloc[0]
        cut = "" if pd.isna(table["cut"].iloc[0]) else str(table["cut"].iloc[0])
        half = "" if pd.isna(best["ci95"]) else f" ± {best['ci95']:.3f}"
        lines.append(f"| [{path.stem}](tuning/{path.stem}.md) | {table['trial'].nunique()} x {table['seed'].nunique()} | "
                     f"`{cut or 'none'}` | {objective} | `{best['overrides']}` | {best['mean']:.3f}{half} |")
    if (Path(folder) / "tuning" / "README.md").is_file():
        lines += ["", "Whether each winner is supported against its neighbours, with more seeds: "
                  "[tuning/README.md](tuning/README.md)."]
    return lines + [""]


def grid_lines(folder: Path) -> list[str]:
    """Markdown lines: every grid's outputs under ``folder`` (``*/grid.json``, and ``tuning/*/grid.json``
    for the tuning grids) with its title, size, test, links to its tables and its written reading, and the
    count of its pre-registered predictions' verdicts (``verdict.csv``, linking ``verdict.md``)."""
    import json

    from sao_env.leaderboard.predictions import VERDICT_CSV, VERDICT_MD, verdict_counts

    found = sorted(Path(folder).glob("*/grid.json")) + sorted(Path(folder).glob("tuning/*/grid.json"))
    if not found:
        return []
    lines = ["## Grids", "", "Grids of whole experiments (`sao-env grid`), each paired by seed with its baseline row; "
             "the site's \"Maps\" section shows those directly under this folder.", "",
             "| grid | rows x points x seeds | baseline | test | tables | pre-registered predictions |",
             "|---|---|---|---|---|---|"]
    for manifest_path in found:
        where = manifest_path.parent
        rel = where.relative_to(folder).as_posix()
        try:
            m = json.loads(manifest_path.read_text())
        except (OSError, ValueError):
            lines.append(f"| `{rel}/` | grid.json unreadable | | | | |")
            continue
        points = 1
        for values in (m.get("axis_values") or {}).values():
            points *= len(values)
        title = m.get("title") or rel
        if (where / "README.md").is_file():
            title = f"[{title}]({rel}/README.md)"
        tables = ", ".join(f"[{s}]({rel}/{s}.md)" for s in m.get("scenarios", []) if (where / f"{s}.md").is_file())
        if m.get("left_out") and tables:
            tables += " (provisional: " + ", ".join(f"{label} {done} of {total}" for label, (done, total)
                                                    in m["left_out"].items()) + " runs left out)"
        verdicts = where / VERDICT_CSV
        predictions = f"[{verdict_counts(verdicts)}]({rel}/{VERDICT_MD})" if verdicts.is_file() else "none"
        lines.append(f"| {title} | {len(m.get('rows', []))} x {points} x {len(m.get('seeds', []))} | {m.get('baseline')} | "
                     f"{m.get('test', 'sign-flip')} | {tables or 'not made yet'} | {predictions} |")
    return lines + [""]


def made_by_line(boards: list[ScenarioBoard]) -> str:
    """Where the boards were made by different code or evaluation versions, a sentence naming each
    board's (a recipe's row can then hold different recipe files across scenarios); empty otherwise."""
    made = {}
    for board in boards:
        runs = board.records
        codes = code_versions([board])
        evals = eval_versions(runs["eval_version"]) if runs is not None and "eval_version" in runs else [1]
        made[board.env] = (", ".join(codes) or UNKNOWN, "/".join(map(str, evals)))
    if len({code for code, _ in made.values()}) <= 1 and len({ev for _, ev in made.values()}) <= 1:
        return ""
    return ("**The boards were made by different code** (a recipe's row may be another version of its recipe file "
            "from one scenario to the next; each board names its own): "
            + "; ".join(f"{env} by {code}, evaluation version {ev}" for env, (code, ev) in made.items()) + ".")


def summary_top(folder: Path, boards: list[ScenarioBoard]) -> list[str]:
    """The first screen of ``summary_markdown``: its title and the finding (``finding.top_markdown``)."""
    from sao_env.leaderboard.finding import top_markdown

    return ["# Leaderboards: every scenario", "", *top_markdown(folder, boards=boards)]


def summary_markdown(folder: Path) -> str:
    """The whole README.md of a leaderboard folder (see the module doc)."""
    boards = per_seed_boards(folder)
    if not boards:
        raise UserError(f"{folder}: no per-seed table (<scenario>-runs.csv) to summarise")
    ranked, apart = split_budgets(boards)
    lines = [*summary_top(folder, boards),
             "<details><summary>The statistics behind these lines: every order the seeds support, with its Holm p; "
             "what each board can detect; the collapses; how and from what this page was made</summary>", "",
             reading(ranked, len(apart)), ""]
    if ranked:
        lines += [f"How to read the summary table: {metric_caption(SORT_KEY)}", ""]
    lines += [f"Generated on {date.today().isoformat()} by `sao-env leaderboard --summary` from the per-seed tables "
              f"({', '.join(f'`{b.env}-runs.csv`' for b in boards)}) and the maps' tables; any row can be re-run from "
              "its scenario, recipe, overrides and seed and compared. The rule (same scenario, simulated time and "
              "rollout slots for every recipe) is docs/leaderboard.md; the site `index.html` shows the same tables.", ""]
    made_by = made_by_line(boards)
    if made_by:
        lines += [made_by, ""]
    lines += ["</details>", ""]
    if ranked:
        for metric in summary_metrics(ranked):
            if metric != SORT_KEY:
                lines += metric_table(ranked, metric)
        lines += paired_table(ranked)
        lines += collapse_table(ranked)
    lines += apart_lines(apart)
    lines += scenario_lines(boards)
    lines += tuning_lines(folder)
    lines += grid_lines(folder)
    stability = sorted(p.name for p in Path(folder).glob("stability*.md") if not p.stem.endswith("-table"))
    if stability:
        lines += ["## Stability", ""] + [f"- [{name}]({name}): long runs (>= 1,000 learner updates) and the verdict "
                                         "on collapse (bench/stability.py)." for name in stability] + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


def write_summary(folder: Path) -> Path:
    """Write ``<folder>/README.md`` (``summary_markdown``); returns its path."""
    path = Path(folder) / "README.md"
    with replacing(path) as tmp:
        tmp.write_text(summary_markdown(folder))
    return path
