"""The leaderboard as one self-contained static page: ``<leaderboard dir>/index.html``.

The page is a pure function of the folder's tables: every scenario's per-seed table
(``<env>-runs.csv``, else its aggregated ``<env>.csv``), its plot (``<env>.png``, inlined as a
data URI) and the benchmark table (``benchmarks.csv``). Styles, the sorting script and the plots
are inline: it opens from disk without network. It leads with the finding (``finding``): a few
plain lines of what the boards and maps found, generated from their tables, and the "who wins where" matrix
(recipes by boards and map cells, shaded by the lead the tables support; the interval and rank on hover),
with the code keys of the runs and of the page said in words; then a summary (recipes x full-budget scenarios,
online reward ± CI and the rank the seeds support, each board's minimum detectable difference;
boards at another budget named apart) and, one click away (``<details>``), the statistics behind the
lines (``summary.reading``: every supported order with its Holm p) and the maps' verdicts; one section per
scenario, the flagship first (header facts with power, ranks and collapses; plot; headline columns, the other
columns on demand; paired differences and paired tests; rows at another budget in their own tables), the benchmark
evaluations when there are any, the maps of the grids whose outputs sit in the folder's
subfolders (``maps.maps_section``: title, figure, aggregate tables), and the rule. Shading marks
only a lead the seeds support.

Sorting: a click on a column header sorts that table (again: the other direction); the address
``index.html#sort=<table id>:<column key>:<asc|desc>`` opens the page sorted that way.
"""

from __future__ import annotations

import base64
import html
import math
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd

from sao_env.experiment.files import replacing
from sao_env.leaderboard.columns import (SORT_KEY, UNKNOWN, column_format, finite_float, format_cell, format_difference,
                                         format_p, section_id)
from sao_env.leaderboard.board import (ScenarioBoard, board_from_csv, board_power, budget_words, code_versions,
                                       paired_frame)
from sao_env.leaderboard.tables import collapse_cell, display_columns, header_facts, rank_cell, seeds_cell
from sao_env.leaderboard.benchmarks import interval_text
from sao_env.leaderboard.stats import format_mde
from sao_env.provenance import code_key, code_version

RULE = [
    "<b>Same budget.</b> Every recipe runs the same scenario file for the same simulated duration on the same "
    "number of rollout slots. Simulated time counts; wall time is kept in each run's <code>timings.json</code> "
    "and never ranked.",
    "<b>Same evaluation.</b> Held-out sets and evaluation sampling come from the scenario's <code>eval.seed</code>: "
    "every recipe and seed is evaluated on the same prompts with the same random numbers.",
    "<b>Several seeds.</b> Cells are mean ± half-width of the 95% Student-t interval over seeds; one seed has no "
    "interval. Recovery times that never happened are left out of the mean and counted.",
    "<b>One recipe, one row.</b> Runs whose resolved configuration (seed aside) is the same are seeds of one row; "
    "a recipe run with overrides is its own row, labelled with them.",
    f"<b>Ranked by online reward</b> (<code>{SORT_KEY}</code>: mean reward of every completed training episode, "
    "what an online learner is deployed to earn), highest first; AUC of the current-phase held-out accuracy "
    "is next to it. The full rule is docs/leaderboard.md.",
]

STYLE = """
:root{--fg:#1d2330;--muted:#5b6474;--line:#dde2ea;--head:#f3f5f9;--best:#e6f4ea;--accent:#2456a6}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Liberation Sans",sans-serif;color:var(--fg);
margin:0 auto;max-width:1560px;padding:24px 28px 60px}
h1{font-size:28px;margin:0 0 4px}h2{font-size:21px;margin:36px 0 6px;border-bottom:2px solid var(--line);
padding-bottom:4px}h3{font-size:16px;margin:18px 0 6px}
p,ul,dl.facts,figure{max-width:1180px}p{margin:6px 0}.muted{color:var(--muted)}.lead{font-size:16px;max-width:900px}
nav{margin:12px 0 4px;display:flex;flex-wrap:wrap;gap:6px 14px}nav a{color:var(--accent);text-decoration:none}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:10px 0;font-size:14px}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}
.note{background:#fff7e0;border-left:3px solid #e0b000;padding:4px 10px;margin:6px 0;font-size:14px}
figure{margin:12px 0}figure img{max-width:100%;border:1px solid var(--line)}
figcaption{font-size:13px;color:var(--muted)}
.wrap{overflow-x:auto}
table{border-collapse:collapse;font-size:14px;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid var(--line);padding:5px 10px;text-align:left;white-space:nowrap}
th{background:var(--head);cursor:pointer;user-select:none;position:sticky;top:0;white-space:normal;
vertical-align:bottom;min-width:4em;max-width:12em}
th:after{content:" \\2195";color:#aab}th[aria-sort=ascending]:after{content:" \\2191";color:var(--fg)}
th[aria-sort=descending]:after{content:" \\2193";color:var(--fg)}
td.num,th.num{text-align:right}td.best{background:var(--best);font-weight:600}
td.label{white-space:normal;min-width:140px}
table.board .extra{display:none}table.board.all .extra{display:table-cell}
button.toggle{font:inherit;font-size:13px;padding:3px 10px;border:1px solid var(--line);background:#fff;
border-radius:4px;cursor:pointer}
code{font-size:13px;background:#f1f3f7;padding:0 3px;border-radius:3px}
footer{margin-top:40px;font-size:13px;color:var(--muted)}
p,li,dd,figcaption,summary{overflow-wrap:anywhere}
ul.findings{font-size:16px;max-width:1180px;margin:8px 0 4px;padding-left:1.1em}ul.findings li{margin:2px 0}
.matrix h2.matrix-title{font-size:18px;margin:10px 0 2px;border:0;padding:0}
p.legend{font-size:13px;margin:2px 0;max-width:none}.key{white-space:nowrap;margin-right:8px}
.sw{display:inline-block;width:1.2em;height:1em;vertical-align:-2px;border:1px solid var(--line);margin-right:3px;
font-size:11px;line-height:1em;text-align:center}
#matrix-table{font-size:12px;margin:4px 0}#matrix-table th,#matrix-table td{padding:1px 4px;line-height:1.25}
#matrix-table th{cursor:default;position:static;min-width:0;max-width:none;text-align:center;font-weight:600}
#matrix-table th:after{content:none}#matrix-table th a{color:inherit;text-decoration:none}
#matrix-table th.group{border-bottom:0}#matrix-table th.place{font-weight:400;font-size:11px}
#matrix-table th.arm,#matrix-table th.corner{position:sticky;left:0;z-index:1;background:#fff;text-align:left}
#matrix-table th.corner{background:var(--head)}
td.mx{text-align:right}.gstart{border-left:2px solid #c8cfda}
.s-lead{background:#1e7b3c;color:#fff;font-weight:700}.s-shared{background:#93d3a2;font-weight:600}
.s-tie{background:#fbf1c2}td.s-behind{color:var(--muted)}.sw.s-behind{background:#fff}
.s-none{color:#b8bfca;background:#f7f8fa}td.s-none{text-align:center}
p.keys{font-size:13px;max-width:1180px;margin:6px 0}nav{margin:6px 0 0}
#summary h2{margin-top:18px}
details{margin:8px 0;max-width:1180px}details>summary{cursor:pointer;color:var(--accent)}
details.statistics{margin-top:20px;border-top:1px solid var(--line);padding-top:8px}
@media (max-width:640px){body{padding:12px 12px 40px}h1{font-size:22px}ul.findings{font-size:15px}
h2{font-size:19px;margin-top:26px}th,td{padding:4px 7px}}
"""

SCRIPT = """
(function(){
function key(td){var v=td.getAttribute('data-sort');if(v===null||v===''){return null}
var x=parseFloat(v);return isNaN(x)?v.toLowerCase():x}
function sortTable(table,col,dir){
 var ths=table.tHead.rows[0].cells,idx=-1;
 for(var i=0;i<ths.length;i++){if(ths[i].getAttribute('data-key')===col){idx=i}else{ths[i].removeAttribute('aria-sort')}}
 if(idx<0){return false}
 var body=table.tBodies[0],rows=Array.prototype.slice.call(body.rows);
 rows.sort(function(a,b){var x=key(a.cells[idx]),y=key(b.cells[idx]);
  if(x===null&&y===null){return 0}if(x===null){return 1}if(y===null){return -1}
  var c=(typeof x===typeof y)?(x<y?-1:x>y?1:0):(typeof x==='number'?-1:1);return dir==='desc'?-c:c});
 rows.forEach(function(r){body.appendChild(r)});
 ths[idx].setAttribute('aria-sort',dir==='desc'?'descending':'ascending');return true}
document.querySelectorAll('table.sortable').forEach(function(table){
 Array.prototype.forEach.call(table.tHead.rows[0].cells,function(th){th.addEventListener('click',function(){
  var dir=th.getAttribute('aria-sort')==='ascending'?'desc':'asc';sortTable(table,th.getAttribute('data-key'),dir)})})});
document.querySelectorAll('button.toggle').forEach(function(b){b.addEventListener('click',function(){
 var t=document.getElementById(b.getAttribute('data-table'));var all=t.classList.toggle('all');
 b.textContent=all?b.getAttribute('data-less'):b.getAttribute('data-more')})});
function fromHash(){var m=/sort=([^:&]+):([^:&]+):(asc|desc)/.exec(decodeURIComponent(location.hash));
 if(m){var t=document.getElementById(m[1]);if(t){sortTable(t,m[2],m[3])}}}
window.sortTable=sortTable;window.addEventListener('hashchange',fromHash);fromHash();
})();
"""


def read_boards(folder: Path) -> list[ScenarioBoard]:
    """Every scenario board in a leaderboard folder: ``<env>-runs.csv`` where there is one, else ``<env>.csv``;
    the flagship scenario first, then by name (``summary.order_boards``)."""
    folder = Path(folder)
    boards = {}
    for path in sorted(folder.glob("*-runs.csv")):
        boards[path.stem.removesuffix("-runs")] = board_from_csv(path)
    for path in sorted(folder.glob("*.csv")):
        env = path.stem
        if env.endswith(("-runs", "-curves")) or env == "benchmarks" or env in boards or is_stability(path):
            continue
        boards[env] = board_from_csv(path)
    from sao_env.leaderboard.summary import order_boards

    return order_boards(list(boards.values()))


STABILITY = "stability"
"""Files named ``stability*`` are the long-run bench's (bench/stability.py): a page (``stability.md``), its
per-run table (``stability-<env>.csv``: one row per run, not a board), its table of means
(``stability-<env>-table.md``) and its figure (``stability-<env>.png``: training signals against learner
updates). The site shows them in a section of their own, never as a scenario board."""


def is_stability(path: Path) -> bool:
    """A file of the long-run bench (``STABILITY``)."""
    return Path(path).name.startswith(STABILITY)


def write_site(folder: Path, *, generator: str) -> Path:
    """Write ``<folder>/index.html`` from the folder's tables and plots; returns its path."""
    from sao_env.leaderboard.benchmarks import read_benchmarks

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    boards = read_boards(folder)
    bench = read_benchmarks(folder / "benchmarks.csv")
    path = folder / "index.html"
    with replacing(path) as tmp:
        tmp.write_text(render(boards, bench, folder=folder, generator=generator), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- rendering


def render(boards: list[ScenarioBoard], bench: pd.DataFrame | None, *, folder: Path, generator: str) -> str:
    """The whole page as a string."""
    from sao_env.leaderboard.summary import reading, split_budgets

    e = html.escape
    ranked, apart = split_budgets(boards)
    has_bench = bench is not None and not bench.empty
    nav = ['<a href="#summary">summary</a>'] + [f'<a href="#{section_id(b.env)}">{e(b.env)}</a>' for b in boards]
    from sao_env.leaderboard.maps import maps_section

    map_html = maps_section(folder)
    stability_html = _stability(folder)
    findings = map_findings(folder)
    nav += (['<a href="#benchmarks">benchmarks</a>'] if has_bench else []) + (['<a href="#maps">maps</a>'] if map_html else [])
    nav += ['<a href="#stability">stability</a>'] if stability_html else []
    nav += ['<a href="#rule">rule</a>']
    bench_words = (f", {len(bench)} benchmark evaluation{'s' if len(bench) != 1 else ''}" if has_bench else "")
    from sao_env.leaderboard.finding import finding_lines, matrix_html, places

    found = places(folder, boards)
    lines = finding_lines(found)
    runs_keys = ", ".join(f"<code>{e(v)}</code>" for v in code_versions(boards)) or "?"
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>sao-env leaderboard</title>", f"<style>{STYLE}</style></head><body>",
        "<header><h1>sao-env leaderboard</h1>",
        ('<ul class="findings" id="findings">' + "".join(f"<li>{markdown_inline(line)}</li>" for line in lines)
         + "</ul>") if lines else "",
        matrix_html(found),
        f'<p class="keys muted">Code keys: runs made by code {runs_keys}; page written by code '
        f"<code>{e(code_key(code_version()))}</code> on {date.today().isoformat()} by {_inline_code(generator)} "
        f"({len(boards)} scenario{'s' if len(boards) != 1 else ''}{bench_words}). {KEYS_WORDS}</p>",
        f"<nav>{' '.join(nav)}</nav></header>",
        _summary(ranked, apart),
        '<details id="statistics" class="statistics"><summary>The statistics behind these lines: every order the '
        "seeds support with its Holm p, what each board can detect, the collapses, the maps' verdicts</summary>",
        f'<p class="lead" id="reading">{e(reading(ranked, len(apart)))}</p>',
        *[f'<p class="lead finding" id="finding-{e(name)}"><b><a href="#map-{e(name)}">{e(title)}</a>.</b> '
          f"{markdown_inline(text)}</p>" for name, title, text in findings],
        '<p class="muted">Asynchronous RL recipes (SAO, GRPO and its variants, ...) on drifting scenarios, each under '
        "the same simulated-time budget and rollout slots. Headline: online reward, the mean reward an online "
        "learner earns, with its 95% interval over seeds; then how fast each recipe recovers after every drift. "
        "Ranks are ties unless a paired test over seeds supports the order. The lines at the top are written from "
        "the same tables as everything below (<code>sao_env.leaderboard.finding</code>).</p></details>",
        *[_scenario(b, folder) for b in boards],
        _benchmarks(bench) if has_bench else "",
        map_html,
        stability_html,
        '<section id="rule"><h2>The rule</h2><ul>' + "".join(f"<li>{r}</li>" for r in RULE) + "</ul></section>",
        '<footer>Columns are defined in docs/metrics.md. Every table sorts by a click on its header; '
        "<code>#sort=TABLE:COLUMN:asc|desc</code> in the address opens it sorted.</footer>",
        f"<script>{SCRIPT}</script></body></html>",
    ]
    return "\n".join(p for p in parts if p) + "\n"


KEYS_WORDS = ("A key is a hash of the source and spec folders (sao_env/, envs/, agents/, evals/) and the Python, "
              "torch, transformers and numpy versions: equal keys, the same code.")
"""What the header's two code keys (the runs' and the page's) mean."""

VERDICT = "## Verdict"
"""A map's README.md heading whose first paragraph is the map's finding, shown under the site's reading."""


def map_findings(folder: Path) -> list[tuple[str, str, str]]:
    """``(folder name, title, finding)`` of every map under ``folder`` whose README.md has a ``VERDICT``
    section: its first paragraph, Markdown as written (``markdown_inline`` draws it)."""
    import json

    from sao_env.leaderboard.maps import MANIFEST, find_maps

    found = []
    for where in find_maps(folder):
        readme = where / "README.md"
        if not readme.is_file():
            continue
        lines = readme.read_text(encoding="utf-8").splitlines()
        start = next((i for i, line in enumerate(lines) if line.startswith(VERDICT)), None)
        if start is None:
            continue
        paragraph = _first_paragraph(lines[start + 1:])
        if not paragraph:
            continue
        try:
            title = json.loads((where / MANIFEST).read_text()).get("title") or where.name
        except (OSError, ValueError):
            title = where.name
        found.append((where.name, str(title), paragraph))
    return found


def _first_paragraph(lines: list[str]) -> str:
    """The first block of non-blank lines that is prose (not a heading, table, list, code or image), joined."""
    block: list[str] = []
    for line in [*lines, ""]:
        if line.strip():
            block.append(line.strip())
            continue
        if block and not block[0].startswith(("#", "|", "-", "*  ", "```", "![", "    ")):
            return " ".join(block)
        block = []
    return ""


def markdown_inline(text: str) -> str:
    """Markdown's inline forms as HTML: ``code``, **bold**, [text](link) (relative or http(s) links only);
    everything else escaped."""
    import re

    parts = str(text).split("`")
    codes = [f"<code>{html.escape(p)}</code>" for p in parts[1::2]]
    prose = html.escape("".join(p if i % 2 == 0 else f"\x00{i // 2}\x00" for i, p in enumerate(parts)), quote=False)
    prose = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", prose)
    prose = re.sub(r"\[([^\]]+)\]\(((?:https?://|[\w./#-])[^)\s\"]*)\)", r'<a href="\2">\1</a>', prose)
    return re.sub(r"\x00(\d+)\x00", lambda m: codes[int(m.group(1))], prose)


def _stability(folder: Path) -> str:
    """The long-run bench's section (``STABILITY``): per page its title and first paragraph, its figures
    with the page's own captions (their alt text), the table of means and the runs the per-run table
    holds; empty without a page."""
    import re

    e = html.escape
    pages = [p for p in sorted(Path(folder).glob(f"{STABILITY}*.md")) if not p.stem.endswith("-table")]
    if not pages:
        return ""
    parts = ['<section id="stability"><h2>Stability</h2><p class="muted">Long runs (at least 1,000 learner updates) '
             "of the shipped recipes and the verdict on collapse, made by <code>bench/stability.py</code>: a bench, "
             "not a scenario board, so it is neither ranked nor counted in the summary above.</p>"]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        lines = text.splitlines()
        title = next((line[2:].strip() for line in lines if line.startswith("# ")), page.stem)
        body = lines[next((i + 1 for i, line in enumerate(lines) if line.startswith("# ")), 0):]
        parts.append(f'<h3 id="stability-{e(page.stem)}">{markdown_inline(title)}</h3>')
        intro = _first_paragraph(body)
        if intro and not intro.endswith((".", ")")) and ". " in intro:  # "... Made with" before a code block
            intro = intro[:intro.rindex(". ") + 1]
        if intro:
            parts.append(f"<p>{markdown_inline(intro)}</p>")
        facts = [("page", f"<a href=\"{e(page.name)}\">{e(page.name)}</a> (the whole reading)")]
        for csv in sorted(Path(folder).glob(f"{STABILITY}-*.csv")):
            try:
                runs = pd.read_csv(csv)
            except (OSError, ValueError):
                continue
            if {"agent", "seed"} <= set(runs.columns):
                who = "; ".join(f"{agent}: seed{'s' if len(g) > 1 else ''} {', '.join(str(int(x)) for x in g['seed'])}"
                                for agent, g in runs.groupby("agent", sort=False))
                facts.append(("runs", f"{len(runs)} ({e(who)}), <a href=\"{e(csv.name)}\">{e(csv.name)}</a>"))
            if "updates" in runs.columns and runs["updates"].notna().any():
                facts.append(("learner updates", f"{int(runs['updates'].min()):,}–{int(runs['updates'].max()):,} a run"))
        parts.append('<dl class="facts">' + "".join(f"<dt>{e(k)}</dt><dd>{v}</dd>" for k, v in facts) + "</dl>")
        for alt, src in re.findall(r"!\[([^\]]*)\]\(([^)\s]+)\)", text):
            png = Path(folder) / src
            if png.suffix.lower() != ".png" or not png.is_file():
                continue
            data = base64.b64encode(png.read_bytes()).decode("ascii")
            caption = alt[:1].upper() + alt[1:] + f" ({page.name})."
            parts.append(f'<figure><img alt="{e(alt)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{e(caption)}</figcaption></figure>")
        for name in dict.fromkeys(re.findall(r"\]\(([^)\s]+-table\.md)\)", text)):
            table = Path(folder) / name
            if table.is_file():
                parts.append(_markdown_table(table.read_text(encoding="utf-8"), f"stability-{Path(name).stem}"))
    parts.append("</section>")
    return "\n".join(parts)


def _markdown_table(text: str, table_id: str) -> str:
    """The first Markdown table of ``text`` as a site table (numbers right-aligned as its ``---:`` says)."""
    rows = [line.strip() for line in text.splitlines() if line.strip().startswith("|")]
    if len(rows) < 2:
        return ""
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    header, rule, body = cells[0], cells[1], cells[2:]
    right = [c.endswith(":") and not c.startswith(":") for c in rule]
    cls = lambda j: ' class="num"' if j < len(right) and right[j] else ""  # noqa: E731
    head = "".join(f'<th data-key="c{j}"{cls(j)}>{markdown_inline(h)}</th>' for j, h in enumerate(header))
    rows_html = "".join("<tr>" + "".join(f'<td{cls(j)} data-sort="{html.escape(c)}">{markdown_inline(c)}</td>'
                                         for j, c in enumerate(r)) + "</tr>" for r in body)
    return (f'<div class="wrap"><table class="sortable" id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows_html}</tbody></table></div>")


def _summary(boards: list[ScenarioBoard], apart: list[ScenarioBoard] = ()) -> str:
    """Recipes x full-budget scenarios: online reward ± CI and the rank the seeds support; a cell is
    shaded only for a leader every paired test supports. Boards at another budget are named below it."""
    e = html.escape
    if not boards and not apart:
        return ('<section id="summary"><h2>Summary</h2><p class="muted">No scenario table in this folder yet: '
                "<code>sao-env compare</code> or <code>sao-env leaderboard RUN_DIRS</code> writes one.</p></section>")
    labels: list[str] = []
    for b in boards:
        labels += [str(x) for x in b.frame["label"] if str(x) not in labels]
    head = ['<th data-key="recipe">recipe</th>', '<th data-key="algorithm">algorithm</th>']
    head += [f'<th class="num" data-key="{section_id(b.env)}">{e(b.env)}</th>' for b in boards]
    rows = []
    for label in labels:
        algorithm = next((str(b.frame.loc[b.frame["label"] == label, "algorithm"].iloc[0]) for b in boards
                          if (b.frame["label"] == label).any()), UNKNOWN)
        cells = [f'<td class="label" data-sort="{e(label)}">{e(label)}</td>',
                 f'<td data-sort="{e(algorithm)}">{e(algorithm)}</td>']
        for b in boards:
            match = b.frame[b.frame["label"] == label]
            if match.empty or SORT_KEY not in b.frame:
                cells.append('<td class="num" data-sort="">—</td>')
                continue
            row = match.iloc[0]
            best = b.supported_best(SORT_KEY) == label
            text = format_cell(row[SORT_KEY], row[f"{SORT_KEY}_ci95"], 0, row["seeds"], SORT_KEY)
            cells.append(f'<td class="num{" best" if best else ""}" data-sort="{_sort_value(row[SORT_KEY])}">'
                         f'{e(text)} <span class="muted">#{e(rank_cell(row))} of {len(b.frame)}</span></td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    power = []
    for b in boards:
        p = board_power(b)
        text = "n/a" if p is None else f"{format_mde(p['mde'])} (n={p['n']}, m={p['m']})"
        power.append(f'<td class="num" data-sort="{_sort_value(None if p is None else p["mde"])}">{e(text)}</td>')
    foot = ('<tfoot><tr><td class="label">minimum detectable difference</td><td></td>' + "".join(power)
            + "</tr></tfoot>") if boards else ""
    others = ""
    if apart:
        others = ('<p class="note">At another budget, ranked only among themselves (docs/leaderboard.md): '
                  + "; ".join(f'<a href="#{section_id(b.env)}">{e(b.env)}</a> at {e(budget_words(b.facts))}'
                              for b in apart) + ".</p>")
    return ('<section id="summary"><h2>Summary: online reward by scenario</h2>'
            '<p class="muted">Mean ± 95% interval over seeds and the rank the seeds support (<code>#1–3</code>: a tie); '
            "shaded: a supported lead.</p>"
            '<div class="wrap"><table class="sortable" id="summary-table"><thead><tr>' + "".join(head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody>" + foot + "</table></div>" + others
            + '<details class="how"><summary>How to read this table</summary><p class="muted">Scenarios at their full '
            "budget. Mean ± half-width of the 95% t-interval over seeds, and "
            "the rank within the scenario that paired sign-flip tests over seeds support (Holm-corrected; "
            "<code>#1–3</code> is a tie over ranks 1 to 3). A cell is shaded only for a leader the seeds support. "
            "Last row: the minimum detectable paired difference at the scenario's n under its rule (80% power at α/m, "
            "Holm's most stringent step over the scenario's m comparisons, two-sided α 0.05; <code>none</code>: the "
            "sign-flip test cannot reach α after Holm at that n): what a board can resolve, not a bound on the "
            "differences it leaves ties. "
            "Rows are recipes; a recipe with overrides is its own row.</p></details></section>")


def _scenario(board: ScenarioBoard, folder: Path) -> str:
    e = html.escape
    sid = section_id(board.env)
    facts = header_facts(board, "")[:-1] + [("source", board.source)]
    parts = [f'<section id="{sid}" class="scenario" data-scenario="{e(board.env)}"><h2>{e(board.env)}</h2>']
    if board.facts.get("description"):
        parts.append(f"<p>{e(str(board.facts['description']))}</p>")
    parts.append('<dl class="facts">' + "".join(f"<dt>{e(k)}</dt><dd>{_inline_code(v)}</dd>" for k, v in facts) + "</dl>")
    parts += [f'<p class="note">{e(n)}</p>' for n in board.notes]
    png = folder / f"{board.env}.png"
    if png.is_file():
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        caption = ("Held-out accuracy on the current phase against simulated hours. Line: mean over seeds; "
                   f"band: {_band_words(board)}; dashed lines: drifts; dotted line: the recovery threshold.")
        parts.append(f'<figure><img alt="adaptation curves: {e(board.env)}" src="data:image/png;base64,{data}">'
                     f"<figcaption>{e(caption)}</figcaption></figure>")
    else:
        parts.append('<p class="note">No plot: the input had no adaptation curves and no '
                     f"{e(board.env)}.png (run directories or {e(board.env)}-curves.csv make one).</p>")
    parts.append(_board_table(board, sid))
    parts.append(_paired_table(board, sid))
    parts.append(_tests_table(board, sid))
    for i, other in enumerate(board.apart, start=2):
        other_facts = [(k, v) for k, v in header_facts(other, "")
                       if k in ("budget", "phases", "seeds", "power", "ranks", "collapses")]
        parts.append(f"<h3>Rows at another budget: {e(budget_words(other.facts))}</h3>"
                     '<p class="muted">Not ranked with the rows above (a board ranks one budget).</p>'
                     '<dl class="facts">' + "".join(f"<dt>{e(k)}</dt><dd>{_inline_code(v)}</dd>" for k, v in other_facts)
                     + "</dl>")
        other_sid = f"{sid}-b{i}"
        parts += [_board_table(other, other_sid), _paired_table(other, other_sid), _tests_table(other, other_sid)]
    parts.append("</section>")
    return "\n".join(parts)


def _board_table(board: ScenarioBoard, sid: str) -> str:
    e = html.escape
    metrics = board.metrics
    headline = display_columns(board)
    extra_metrics = [m for m in metrics if m not in headline]
    collapses = "collapses" in board.frame.columns
    table_id = f"table-{sid}"
    columns: list[tuple[str, str, bool, bool]] = [("rank", "rank", True, False), ("recipe", "recipe", False, False),
                                                  ("seeds", "seeds", True, False)]
    columns += [(m, column_format(m).title, True, False) for m in headline]
    columns += [("collapses", "collapsed", True, False)] if collapses else []
    columns += [(m, column_format(m).title, True, True) for m in extra_metrics]
    columns += [("algorithm", "algorithm", False, True), ("overrides", "overrides", False, True),
                ("config_hash", "config hash", False, True), ("code_version", "code version", False, True)]
    best = {m: board.supported_best(m) for m in headline}
    head = "".join(f'<th data-key="{e(key)}" class="{"num " if num else ""}{"extra" if extra else ""}">{breakable(title)}</th>'
                   for key, title, num, extra in columns)
    body = []
    for _, row in board.frame.iterrows():
        label = str(row["label"])
        cells = [f'<td class="num" data-sort="{int(row["rank"])}">{e(rank_cell(row))}</td>',
                 f'<td class="label" data-sort="{e(label)}">{e(label)}</td>',
                 f'<td class="num" data-sort="{int(row["seeds"])}" title="seeds {e(str(row["seed_list"]))}">'
                 f'{e(seeds_cell(row))}</td>']
        for m in headline + (["collapses"] if collapses else []) + extra_metrics:
            if m == "collapses":
                cells.append(f'<td class="num" data-sort="{_sort_value(row.get("collapses"))}">'
                             f"{e(collapse_cell(row))}</td>")
                continue
            missed = row.get(f"{m}_missed", 0) or 0
            text = format_cell(row[m], row[f"{m}_ci95"], missed, row["seeds"], m)
            sort = _sort_value(row[m], never=bool(missed))
            classes = "num" + (" extra" if m in extra_metrics else "") + (" best" if best.get(m) == label else "")
            cells.append(f'<td class="{classes}" data-sort="{sort}">{e(text)}</td>')
        for key in ("algorithm", "overrides", "config_hash", "code_version"):
            value = str(row.get(key, "") if row.get(key) is not None else "")
            cells.append(f'<td class="extra" data-sort="{e(value)}">{e(value or "none")}</td>')
        body.append(f'<tr data-label="{e(label)}">' + "".join(cells) + "</tr>")
    more = f"Show all {len(columns)} columns"
    return (f'<p><button class="toggle" data-table="{table_id}" data-more="{e(more)}" data-less="Headline columns only">'
            f'{e(more)}</button> <span class="muted">A headline cell is shaded only for a lead that every paired '
            "test supports; rank <code>1–3</code>: a tie over ranks 1 to 3; <code>never</code>: no seed reached the "
            "threshold.</span></p>"
            f'<div class="wrap"><table class="sortable board" id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _tests_table(board: ScenarioBoard, sid: str) -> str:
    """Every pair of rows tested on the sort key (``tables.tests_markdown`` as HTML; empty without pairs)."""
    e = html.escape
    comparisons = board.comparisons(SORT_KEY)
    if not comparisons:
        return ""
    m = sum(c.made for c in comparisons)
    keys = [("pair", "pair", False), ("n", "n", True), ("difference", "difference", True), ("p", "p", True),
            ("p_holm", "p (Holm)", True), ("mde", "detectable at n", True), ("verdict", "verdict", False)]
    head = "".join(f'<th data-key="{k}"{" class=num" if num else ""}>{e(title)}</th>' for k, title, num in keys)
    body = []
    for c in comparisons:
        verdict = "not made (fewer than 2 shared seeds)" if not c.made else (f"{c.winner} better" if c.winner else "tie")
        values = {"pair": (f"{c.a} − {c.b}", f"{c.a} − {c.b}"), "n": (str(c.n), str(c.n)),
                  "difference": ("n/a" if math.isnan(c.mean) else f"{c.mean:+.3f}", _sort_value(c.mean)),
                  "p": (format_p(c.p), _sort_value(c.p)),
                  "p_holm": (format_p(c.p_holm), _sort_value(c.p_holm)),
                  "mde": (format_mde(c.mde), _sort_value(c.mde)), "verdict": (verdict, verdict)}
        body.append("<tr>" + "".join(f'<td{" class=num" if num else ""} data-sort="{e(values[k][1])}">{e(values[k][0])}</td>'
                                     for k, _, num in keys) + "</tr>")
    return (f"<h3>Paired tests: {e(column_format(SORT_KEY).title)}</h3><p class=\"muted\">Every pair of rows, paired by "
            f"seed: mean difference (first − second), the sign-flip permutation p, p after Holm over the {m} "
            f"comparison{'s' if m != 1 else ''} made, and the minimum detectable difference at that n under that rule "
            f"(80% power at α/{max(m, 1)}, Holm's most stringent step; none: the test cannot reach α after Holm at that "
            "n). The ranks follow from the verdicts.</p>"
            f'<div class="wrap"><table class="sortable tests" id="tests-{sid}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _paired_table(board: ScenarioBoard, sid: str) -> str:
    """Each recipe minus the reference recipe per headline metric, paired by seed (empty without a reference row)."""
    e = html.escape
    frame = paired_frame(board)
    if frame is None or frame.empty:
        return ""
    ref = board.reference
    columns = list(dict.fromkeys(frame["metric"]))
    head = f'<th data-key="recipe">recipe − {e(ref)}</th>' + "".join(
        f'<th class="num" data-key="{e(c)}">{e(column_format(c).title)}</th>' for c in columns)
    body = []
    for label, rows in frame.groupby("label", sort=False):
        cells = [f'<td class="label" data-sort="{e(str(label))}">{e(str(label))} − {e(ref)}</td>']
        by_metric = {r["metric"]: r for _, r in rows.iterrows()}
        for c in columns:
            r = by_metric[c]
            text = format_difference(r["mean"], r["ci95"], int(r["n"]), c)
            title = f"seeds paired: {r['seeds'] or 'none'}"
            cells.append(f'<td class="num" data-sort="{_sort_value(r["mean"])}" title="{e(title)}">{e(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<h3>Paired differences to {e(ref)}</h3><p class="muted">Each recipe minus {e(ref)}, paired by seed, '
            "then mean ± half-width of the 95% t-interval over the seeds' differences; n: seeds where both have "
            "the value (no interval with n=1).</p>"
            f'<div class="wrap"><table class="sortable paired" id="paired-{sid}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _benchmarks(bench: pd.DataFrame | None) -> str:
    e = html.escape
    intro = ('<section id="benchmarks"><h2>Benchmark evaluations</h2><p class="muted">avg@k: the fraction of k '
             "samples per problem graded correct, averaged over problems, in %, with its 95% Wilson score interval over "
             "problems in brackets; pass@k unbiased (Chen et al. 2021). One row per (model, suite, k): the latest evaluation. "
             "Answers are graded from the last <code>\\boxed{}</code> only unless the row names a fallback.</p>")
    if bench is None or bench.empty:
        return intro + ('<p class="muted">No benchmark evaluation recorded here: <code>sao-env eval MODEL --suite '
                        "SUITES --leaderboard DIR</code> adds rows to <code>DIR/benchmarks.csv</code>.</p></section>")
    columns = [("model", "model", False), ("suite", "suite", False), ("avg_at_k", "avg@k (%)", True),
               ("pass_at_k", "pass@k (%)", True), ("k", "k", True), ("problems", "problems", True),
               ("samples", "samples", True), ("grader", "grader", False), ("answer_fallback", "answer fallback", False),
               ("date", "date", False), ("code_version", "code version", False)]
    head = "".join(f'<th data-key="{k}"{" class=num" if num else ""}>{e(t)}</th>' for k, t, num in columns)
    rows = []
    for _, r in bench.iterrows():
        acc = finite_float(r.get("avg_at_k"))
        score = "n/a" if acc is None else f"{100 * acc:.1f}" + interval_text(r.get("ci95_low"), r.get("ci95_high"))
        passk = finite_float(r.get("pass_at_k"))
        problems = f"{int(r['problems'])}" + (f" of {int(r['suite_problems'])}" if finite_float(r.get("suite_problems")) and
                                               int(r["suite_problems"]) != int(r["problems"]) else "")
        values = {"model": str(r["model"]), "suite": str(r["suite"]), "avg_at_k": score,
                  "pass_at_k": "n/a" if passk is None else f"{100 * passk:.1f}", "k": str(int(r["k"])),
                  "problems": problems, "samples": str(int(r["samples"])), "grader": str(r.get("grader", "")),
                  "answer_fallback": str(r.get("answer_fallback") or "none"), "date": str(r.get("date", ""))[:10],
                  "code_version": str(r.get("code_version") or UNKNOWN)}
        sorts = {"avg_at_k": _sort_value(acc), "pass_at_k": _sort_value(passk), "problems": str(int(r["problems"]))}
        rows.append("<tr>" + "".join(
            f'<td{" class=num" if num else ""} data-sort="{e(sorts.get(k, values[k]))}">{e(values[k])}</td>'
            for k, _, num in columns) + "</tr>")
    return (intro + '<div class="wrap"><table class="sortable" id="benchmarks-table"><thead><tr>' + head
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div></section>")


# ----------------------------------------------------------------------------- helpers


def _sort_value(value: Any, *, never: bool = False) -> str:
    x = finite_float(value)
    if x is None:
        return "Infinity" if never else ""
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(x)


def _band_words(board: ScenarioBoard) -> str:
    seeds = pd.to_numeric(board.frame["seeds"], errors="coerce")
    if (seeds <= 1).all():
        return "none (one seed per recipe; with several, the 95% t-interval over seeds)"
    return "95% t-interval over seeds (not min-max)"


def breakable(text: Any) -> str:
    """``text`` escaped for HTML, with a line-break opportunity after each ``.``, ``_`` and ``/``: a column
    header such as ``env.latency.update_s_per_token`` wraps instead of widening its column."""
    escaped = html.escape(str(text))
    for mark in (".", "_", "/"):
        escaped = escaped.replace(mark, mark + "<wbr>")
    return escaped


def _inline_code(text: Any) -> str:
    parts = str(text).split("`")
    return "".join(html.escape(p) if i % 2 == 0 else f"<code>{html.escape(p)}</code>" for i, p in enumerate(parts))
