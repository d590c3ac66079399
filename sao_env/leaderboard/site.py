"""The leaderboard as one self-contained static page: ``<leaderboard dir>/index.html``.

The page is a pure function of the folder's tables: every scenario's per-seed table
(``<env>-runs.csv``, else its aggregated ``<env>.csv``), its plot (``<env>.png``, inlined as a
data URI) and the benchmark table (``benchmarks.csv``). Styles, the sorting script and the plots
are inline: it opens from disk without network. Sections: a cross-scenario summary (recipes x
scenarios, online reward ± CI and rank), one section per scenario (header facts, plot, headline
columns, the other columns on demand), the benchmark evaluations, and the rule.

Sorting: a click on a column header sorts that table (again: the other direction); the address
``index.html#sort=<table id>:<column key>:<asc|desc>`` opens the page sorted that way.
"""

from __future__ import annotations

import base64
import html
from datetime import date
from pathlib import Path
from typing import Any

import pandas as pd

from sao_env.leaderboard import tables
from sao_env.provenance import code_key, code_version
from sao_env.leaderboard.tables import SORT_KEY, UNKNOWN, ScenarioBoard, column_format, finite_float, format_cell

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
margin:0 auto;max-width:1180px;padding:24px 28px 60px}
h1{font-size:28px;margin:0 0 4px}h2{font-size:21px;margin:36px 0 6px;border-bottom:2px solid var(--line);
padding-bottom:4px}h3{font-size:16px;margin:18px 0 6px}
p{margin:6px 0}.muted{color:var(--muted)}.lead{font-size:16px;max-width:900px}
nav{margin:12px 0 4px;display:flex;flex-wrap:wrap;gap:6px 14px}nav a{color:var(--accent);text-decoration:none}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:10px 0;font-size:14px}
dl.facts dt{color:var(--muted)}dl.facts dd{margin:0}
.note{background:#fff7e0;border-left:3px solid #e0b000;padding:4px 10px;margin:6px 0;font-size:14px}
figure{margin:12px 0}figure img{max-width:100%;border:1px solid var(--line)}
figcaption{font-size:13px;color:var(--muted)}
.wrap{overflow-x:auto}
table{border-collapse:collapse;font-size:14px;margin:8px 0;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid var(--line);padding:5px 10px;text-align:left;white-space:nowrap}
th{background:var(--head);cursor:pointer;user-select:none;position:sticky;top:0}
th:after{content:" \\2195";color:#aab}th[aria-sort=ascending]:after{content:" \\2191";color:var(--fg)}
th[aria-sort=descending]:after{content:" \\2193";color:var(--fg)}
td.num,th.num{text-align:right}td.best{background:var(--best);font-weight:600}
td.label{white-space:normal;min-width:140px}
table.board .extra{display:none}table.board.all .extra{display:table-cell}
button.toggle{font:inherit;font-size:13px;padding:3px 10px;border:1px solid var(--line);background:#fff;
border-radius:4px;cursor:pointer}
code{font-size:13px;background:#f1f3f7;padding:0 3px;border-radius:3px}
footer{margin-top:40px;font-size:13px;color:var(--muted)}
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
    """Every scenario board in a leaderboard folder: ``<env>-runs.csv`` where there is one, else ``<env>.csv``."""
    folder = Path(folder)
    boards = {}
    for path in sorted(folder.glob("*-runs.csv")):
        boards[path.stem.removesuffix("-runs")] = tables.board_from_csv(path)
    for path in sorted(folder.glob("*.csv")):
        env = path.stem
        if env.endswith(("-runs", "-curves")) or env == "benchmarks" or env in boards:
            continue
        boards[env] = tables.board_from_csv(path)
    return [boards[env] for env in sorted(boards)]


def write_site(folder: Path, *, generator: str) -> Path:
    """Write ``<folder>/index.html`` from the folder's tables and plots; returns its path."""
    from sao_env.leaderboard.benchmarks import read_benchmarks

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    boards = read_boards(folder)
    bench = read_benchmarks(folder / "benchmarks.csv")
    path = folder / "index.html"
    path.write_text(render(boards, bench, folder=folder, generator=generator), encoding="utf-8")
    return path


# ----------------------------------------------------------------------------- rendering


def render(boards: list[ScenarioBoard], bench: pd.DataFrame | None, *, folder: Path, generator: str) -> str:
    """The whole page as a string."""
    e = html.escape
    nav = ['<a href="#summary">summary</a>'] + [f'<a href="#{_sid(b.env)}">{e(b.env)}</a>' for b in boards]
    nav += ['<a href="#benchmarks">benchmarks</a>', '<a href="#rule">rule</a>']
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>sao-env leaderboard</title>", f"<style>{STYLE}</style></head><body>",
        "<header><h1>sao-env leaderboard</h1>",
        '<p class="lead">Asynchronous RL recipes (SAO, GRPO and its variants, ...) on drifting scenarios, each under '
        "the same simulated-time budget and rollout slots. Headline: online reward, the mean reward an online "
        "learner earns, with its 95% interval over seeds; then how fast each recipe recovers after every drift.</p>",
        f'<p class="muted">Generated on {date.today().isoformat()} by {_inline_code(generator)} · code version '
        f"<code>{e(code_key(code_version()))}</code> · {len(boards)} scenario{'s' if len(boards) != 1 else ''}, "
        f"{0 if bench is None else len(bench)} benchmark evaluation{'s' if bench is None or len(bench) != 1 else ''}</p>",
        f"<nav>{' '.join(nav)}</nav></header>",
        _summary(boards),
        *[_scenario(b, folder) for b in boards],
        _benchmarks(bench),
        '<section id="rule"><h2>The rule</h2><ul>' + "".join(f"<li>{r}</li>" for r in RULE) + "</ul></section>",
        '<footer>Columns are defined in docs/metrics.md. Every table sorts by a click on its header; '
        "<code>#sort=TABLE:COLUMN:asc|desc</code> in the address opens it sorted.</footer>",
        f"<script>{SCRIPT}</script></body></html>",
    ]
    return "\n".join(parts) + "\n"


def _summary(boards: list[ScenarioBoard]) -> str:
    e = html.escape
    if not boards:
        return ('<section id="summary"><h2>Summary</h2><p class="muted">No scenario table in this folder yet: '
                "<code>sao-env compare</code> or <code>sao-env leaderboard RUN_DIRS</code> writes one.</p></section>")
    labels: list[str] = []
    for b in boards:
        labels += [str(x) for x in b.frame["label"] if str(x) not in labels]
    head = ['<th data-key="recipe">recipe</th>', '<th data-key="algorithm">algorithm</th>']
    head += [f'<th class="num" data-key="{_sid(b.env)}">{e(b.env)}</th>' for b in boards]
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
            best = int(row["rank"]) == 1
            text = format_cell(row[SORT_KEY], row[f"{SORT_KEY}_ci95"], 0, row["seeds"], SORT_KEY)
            cells.append(f'<td class="num{" best" if best else ""}" data-sort="{_sort_value(row[SORT_KEY])}">'
                         f'{e(text)} <span class="muted">#{int(row["rank"])} of {len(b.frame)}</span></td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return ('<section id="summary"><h2>Summary: online reward by scenario</h2>'
            '<p class="muted">Mean ± half-width of the 95% t-interval over seeds, and the rank within the scenario '
            "(ranked by the mean). Best per scenario shaded. Rows are recipes; a recipe with overrides is its own row.</p>"
            '<div class="wrap"><table class="sortable" id="summary-table"><thead><tr>' + "".join(head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table></div></section>")


def _scenario(board: ScenarioBoard, folder: Path) -> str:
    e = html.escape
    sid = _sid(board.env)
    facts = tables.header_facts(board, "")[:-1] + [("source", board.source)]
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
    parts.append("</section>")
    return "\n".join(parts)


def _board_table(board: ScenarioBoard, sid: str) -> str:
    e = html.escape
    metrics = board.metrics
    headline = tables.headline_columns(metrics)
    extra_metrics = [m for m in metrics if m not in headline]
    table_id = f"table-{sid}"
    columns: list[tuple[str, str, bool, bool]] = [("rank", "rank", True, False), ("recipe", "recipe", False, False),
                                                  ("seeds", "seeds", True, False)]
    columns += [(m, column_format(m).title, True, False) for m in headline]
    columns += [(m, column_format(m).title, True, True) for m in extra_metrics]
    columns += [("algorithm", "algorithm", False, True), ("overrides", "overrides", False, True),
                ("config_hash", "config hash", False, True), ("code_version", "code version", False, True)]
    best = {m: _best_index(board.frame, m) for m in headline}
    head = "".join(f'<th data-key="{e(key)}" class="{"num " if num else ""}{"extra" if extra else ""}">{e(title)}</th>'
                   for key, title, num, extra in columns)
    body = []
    for i, row in board.frame.iterrows():
        cells = [f'<td class="num" data-sort="{int(row["rank"])}">{int(row["rank"])}</td>',
                 f'<td class="label" data-sort="{e(str(row["label"]))}">{e(str(row["label"]))}</td>',
                 f'<td class="num" data-sort="{int(row["seeds"])}" title="seeds {e(str(row["seed_list"]))}">'
                 f'{e(tables._seeds_cell(row))}</td>']
        for m in headline + extra_metrics:
            missed = row.get(f"{m}_missed", 0) or 0
            text = format_cell(row[m], row[f"{m}_ci95"], missed, row["seeds"], m)
            sort = _sort_value(row[m], never=bool(missed))
            classes = "num" + (" extra" if m in extra_metrics else "") + (" best" if best.get(m) == i else "")
            cells.append(f'<td class="{classes}" data-sort="{sort}">{e(text)}</td>')
        for key in ("algorithm", "overrides", "config_hash", "code_version"):
            value = str(row.get(key, "") if row.get(key) is not None else "")
            cells.append(f'<td class="extra" data-sort="{e(value)}">{e(value or "none")}</td>')
        body.append(f'<tr data-label="{e(str(row["label"]))}">' + "".join(cells) + "</tr>")
    more = f"Show all {len(columns)} columns"
    return (f'<p><button class="toggle" data-table="{table_id}" data-more="{e(more)}" data-less="Headline columns only">'
            f'{e(more)}</button> <span class="muted">Best value of each headline column shaded; '
            "<code>never</code>: no seed reached the threshold.</span></p>"
            f'<div class="wrap"><table class="sortable board" id="{table_id}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>")


def _paired_table(board: ScenarioBoard, sid: str) -> str:
    """Each recipe minus the reference recipe per headline metric, paired by seed (empty without a reference row)."""
    e = html.escape
    frame = tables.paired_frame(board)
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
            text = tables.format_difference(r["mean"], r["ci95"], int(r["n"]), c)
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
             "samples per problem graded correct, averaged over problems, in %, ± the half-width of the 95% t-interval "
             "over problems; pass@k unbiased (Chen et al. 2021). One row per (model, suite, k): the latest evaluation. "
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
        acc, half = finite_float(r.get("avg_at_k")), finite_float(r.get("ci95_half_width"))
        score = "n/a" if acc is None else f"{100 * acc:.1f}" + (f" ± {100 * half:.1f}" if half is not None else "")
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


def _sid(env: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in env)


def _sort_value(value: Any, *, never: bool = False) -> str:
    x = finite_float(value)
    if x is None:
        return "Infinity" if never else ""
    return repr(x)


def _best_index(frame: pd.DataFrame, metric: str) -> Any:
    better = column_format(metric).higher_is_better
    values = pd.to_numeric(frame[metric], errors="coerce")
    if better is None or values.notna().sum() < 2:
        return None
    return values.idxmax() if better else values.idxmin()


def _band_words(board: ScenarioBoard) -> str:
    seeds = pd.to_numeric(board.frame["seeds"], errors="coerce")
    if (seeds <= 1).all():
        return "none (one seed per recipe; with several, the 95% t-interval over seeds)"
    return "95% t-interval over seeds (not min-max)"


def _inline_code(text: Any) -> str:
    parts = str(text).split("`")
    return "".join(html.escape(p) if i % 2 == 0 else f"<code>{html.escape(p)}</code>" for i, p in enumerate(parts))
