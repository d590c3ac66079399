"""Maps: the aggregate of a grid of experiments (``sao_env.grid``), its tables, its figure and its place on the site.

A grid's *cell* is one row (a recipe plus overrides) at one *axis point* (one value of every axis)
on one scenario; its seeds are runs. Everything here is a pure function of the grid's per-seed
table (``per-seed.csv``: one row per run, the columns ``scenario``, ``row``, one column per axis,
``seed`` and the run's metrics) and of its manifest (``grid.json``), with the statistics of the
boards (``sao_env.leaderboard.stats``, ``sao_env.evaluation.stats``):

- per cell and metric, the mean ± half-width of the 95 % Student-t interval over seeds
  (``mean_ci95``);
- per cell and metric, the difference to the *baseline* row at the same axis point, paired by
  seed (``paired_difference``: the Student-t interval of the per-seed differences);
- on the grid's metric, per cell, the minimum detectable paired difference to the baseline at the
  cell's n under the table's rule (``min_detectable_difference``: 80 % power at α/m, Holm's most
  stringent step over the m comparisons with the baseline at the axis point; ``inf``, shown as
  ``none``, where the test cannot reach that level at that n), the paired test's p of that
  difference (the exact sign-flip test, or the paired t-test where the grid says ``test: t``)
  before and after Holm's correction over the pairs of rows compared at the axis point,
  and the rank range that those tests support among the rows at the axis point (``rank_ranges``:
  ``2–3`` is a tie);
- per cell, the runs that collapsed (``collapsed`` of the per-seed rows, the rule of
  ``sao_env.evaluation.collapse``);
- the grid's named pairs of rows (``contrasts``): the planned ones, Holm over the planned contrasts
  at the axis point, and the post-hoc ones (chosen after the results were read), Holm over every
  pair of rows at the axis point, the family the ranks use, so that picking a pair after seeing
  the data is paid for in full (Holm 1979), and labelled ``post hoc`` wherever they are shown.
"""

from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from sao_env.evaluation.stats import mean_ci95, paired_difference
from sao_env.leaderboard.stats import format_mde, format_rank, holm, min_detectable_difference, pairwise, rank_ranges
from sao_env.leaderboard.predictions import VERDICT_CSV, VERDICT_MD, verdict_display
from sao_env.leaderboard.columns import (column_format, finite_float, format_cell, format_difference, format_p,
                                         is_eval_metric)

PLANNED = "planned"
POST_HOC = "post hoc"
"""The two families of named contrasts (``contrasts``' ``family`` column)."""
MANIFEST = "grid.json"
"""The file that marks a folder as a grid's outputs and says what they are (read by the site)."""
PER_SEED = "per-seed.csv"
FIGURE = "map.png"
LOG = "grid.log"
ID_COLUMNS = ("scenario", "row", "agent", "overrides", "seed", "config_hash", "code_version", "run_dir",
              "collapsed", "collapsed_phases")
"""Per-seed columns that are not metrics (besides the axis columns)."""


def metric_names(per_seed: pd.DataFrame, axes: list[str]) -> list[str]:
    """The numeric metric columns of a per-seed table that hold a number in at least one row, in its
    order (a grid over several scenarios leaves one scenario's phase columns empty in another's rows)."""
    skip = set(ID_COLUMNS) | set(axes)
    return [c for c in per_seed.columns if c not in skip and pd.api.types.is_numeric_dtype(per_seed[c])
            and per_seed[c].notna().any()]


def _values(runs: pd.DataFrame, metric: str) -> dict[int, float | None]:
    return {int(s): finite_float(v) for s, v in zip(runs["seed"], runs[metric])}


def _key(value: Any) -> str:
    """Axis values compared as text (``0.5`` read back from a CSV equals the ``0.5`` planned)."""
    x = finite_float(value) if not isinstance(value, str) else None
    return f"{x:g}" if x is not None else str(value)


def _cells(per_seed: pd.DataFrame, axes: list[str], points: list[tuple[str, ...]] | None):
    """``(scenario, axis point, its per-seed rows)`` in table order, the axis values as text keys;
    ``points`` orders the axis points (default: as first met in the table)."""
    table = per_seed.copy()
    for a in axes:
        table[a] = table[a].map(_key)
    if points is None:
        points = list(dict.fromkeys(tuple(r) for r in table[axes].itertuples(index=False, name=None))) if axes else [()]
    points = [tuple(_key(v) for v in p) for p in points]
    for scenario in dict.fromkeys(table["scenario"]):
        mine = table[table["scenario"] == scenario]
        for point in points:
            at = mine
            for a, v in zip(axes, point):
                at = at[at[a] == v]
            yield scenario, point, at


def aggregate(per_seed: pd.DataFrame, *, axes: list[str], rows: list[str], baseline: str, metric: str,
              points: list[tuple[str, ...]] | None = None, test: str = "sign-flip") -> pd.DataFrame:
    """One row per (scenario, axis point, row) in grid order: the module doc's statistics.

    ``rows`` orders the grid's rows; ``points`` the axis points (default: as first met in the table);
    ``test`` the paired test of the p-values and ranks (``sao_env.leaderboard.stats.TESTS``).
    Columns: ``scenario``, the axis columns, ``row``, ``agent``, ``overrides``, ``config_hash``,
    ``n`` (seeds), ``seeds``, ``collapses``, ``collapse_checked``; per metric ``m``: ``m``,
    ``m_ci95``, ``m_diff``, ``m_diff_ci95``, ``m_diff_n`` (difference to the baseline, NaN on the
    baseline row); on ``metric``: ``mde`` (at α/m, m the comparisons with the baseline at the axis
    point: the family of the p the tables show), ``p``, ``p_holm`` (Holm over every pair of rows at the
    axis point, as the ranks use), ``p_holm_baseline`` (Holm over the comparisons with the baseline
    only: the family an ablation asks about), ``rank``, ``rank_low``,
    ``rank_high`` and ``rank_text``.
    """
    metrics = metric_names(per_seed, axes)
    better = column_format(metric).higher_is_better
    out = []
    for scenario, point, at in _cells(per_seed, axes, points):
        labels = [r for r in rows if (at["row"] == r).any()]
        runs = {r: at[at["row"] == r].sort_values("seed") for r in labels}
        comparisons = pairwise({r: _values(runs[r], metric) for r in labels},
                               higher_is_better=better is not False, test=test) if metric in at else []
        ranges = rank_ranges(labels, comparisons) if better is not None else {r: (1, len(labels)) for r in labels}
        versus = [c for c in comparisons if baseline in (c.a, c.b)]
        p_versus = dict(zip((c.b if c.a == baseline else c.a for c in versus), holm([c.p for c in versus])))
        family = sum(c.made for c in versus)
        means = {r: mean_ci95([finite_float(v) if finite_float(v) is not None else math.nan
                               for v in runs[r][metric]])[0] if metric in at else math.nan for r in labels}
        order = sorted(labels, key=lambda r: (math.isnan(means[r]), -means[r] if better is not False else means[r]))
        for label in labels:
            mine_runs = runs[label]
            first = mine_runs.iloc[0]
            row: dict[str, Any] = {"scenario": scenario, **dict(zip(axes, point)), "row": label,
                                   "agent": first.get("agent"), "overrides": first.get("overrides"),
                                   "config_hash": ", ".join(sorted(set(mine_runs["config_hash"].astype(str)))),
                                   "n": len(mine_runs), "seeds": ", ".join(str(int(s)) for s in mine_runs["seed"])}
            verdicts = [finite_float(v) for v in mine_runs["collapsed"]] if "collapsed" in mine_runs else []
            row["collapses"] = sum(1 for v in verdicts if v)
            row["collapse_checked"] = sum(1 for v in verdicts if v is not None)
            base = runs.get(baseline)
            for m in metrics:
                values = [finite_float(v) for v in mine_runs[m]]
                row[m], row[f"{m}_ci95"] = mean_ci95([math.nan if v is None else v for v in values])
                if base is not None and label != baseline:
                    row[f"{m}_diff"], row[f"{m}_diff_ci95"], row[f"{m}_diff_n"] = paired_difference(
                        _values(mine_runs, m), _values(base, m))
                else:
                    row[f"{m}_diff"], row[f"{m}_diff_ci95"], row[f"{m}_diff_n"] = math.nan, math.nan, 0
            row["mde"], row["p"], row["p_holm"] = math.nan, math.nan, math.nan
            row["p_holm_baseline"] = p_versus.get(label, math.nan)
            for c in comparisons:
                if {c.a, c.b} == {label, baseline} and label != baseline:
                    row["mde"] = min_detectable_difference(c.sd, c.n, m=family, test=test)
                    row["p"], row["p_holm"] = c.p, c.p_holm
            row["rank"] = order.index(label) + 1
            row["rank_low"], row["rank_high"] = ranges[label]
            row["rank_text"] = format_rank(*ranges[label])
            out.append(row)
    return pd.DataFrame(out)


def contrasts(per_seed: pd.DataFrame, *, axes: list[str], pairs: list[tuple[str, str]], metric: str,
              points: list[tuple[str, ...]] | None = None, test: str = "sign-flip",
              post_hoc: list[tuple[str, str]] = (), rows: list[str] | None = None) -> pd.DataFrame:
    """The grid's named contrasts: one row per (scenario, axis point, pair ``(a, b)``) with ``a``
    minus ``b`` paired by seed, for the questions a grid is built to answer beside "every row
    against the baseline" (the regime map's SAO against synchronous GRPO).

    ``pairs`` are the planned contrasts, Holm-corrected over the planned contrasts at the axis point;
    ``post_hoc`` those chosen after the results were read, Holm-corrected over every pair of rows at
    the axis point (``rows``, default the table's rows in order of appearance): the family the ranks
    use, the full price of choosing a pair after seeing the data (Holm 1979), whatever number of
    post-hoc pairs is named. The planned come first, then the post hoc.

    Columns: ``scenario``, the axis columns, ``contrast`` (``"a − b"``), ``a``, ``b``, ``family``
    (``planned`` or ``post hoc``), ``family_size`` (the comparisons Holm runs over); per metric ``m``:
    ``m_diff``, ``m_diff_ci95``, ``m_diff_n``; on ``metric``: ``mde`` (minimum detectable paired
    difference at that n, at α/family_size: ``min_detectable_difference``), ``p`` (``test``) and
    ``p_holm``. A pair whose rows share fewer than two seeds gets NaN tests.
    """
    metrics = metric_names(per_seed, axes)
    order = list(rows) if rows is not None else list(dict.fromkeys(per_seed["row"]))
    out = []
    for scenario, point, at in _cells(per_seed, axes, points):
        def paired(a_label: str, b_label: str, family: str) -> dict | None:
            ra, rb = at[at["row"] == a_label], at[at["row"] == b_label]
            if ra.empty or rb.empty:
                return None
            row: dict[str, Any] = {"scenario": scenario, **dict(zip(axes, point)),
                                   "contrast": f"{a_label} − {b_label}", "a": a_label, "b": b_label, "family": family}
            for m in metrics:
                row[f"{m}_diff"], row[f"{m}_diff_ci95"], row[f"{m}_diff_n"] = paired_difference(
                    _values(ra, m), _values(rb, m))
            return row

        block = []
        for a_label, b_label in pairs:
            row = paired(a_label, b_label, PLANNED)
            if row is None:
                continue
            (c,) = pairwise({a_label: _values(at[at["row"] == a_label], metric),
                             b_label: _values(at[at["row"] == b_label], metric)}, test=test)
            row["p"], row["_sd"], row["_n"] = c.p, c.sd, c.n
            block.append(row)
        size = sum(not math.isnan(r["p"]) for r in block)
        for row, ph in zip(block, holm([r["p"] for r in block])):
            row["p_holm"], row["family_size"] = ph, size
            row["mde"] = min_detectable_difference(row.pop("_sd"), row.pop("_n"), m=size, test=test)
        out.extend(block)
        if post_hoc:
            labels = [r for r in order if (at["row"] == r).any()]
            every = pairwise({r: _values(at[at["row"] == r], metric) for r in labels}, test=test)
            by_pair = {frozenset((c.a, c.b)): c for c in every}
            size = sum(c.made for c in every)
            for a_label, b_label in post_hoc:
                row = paired(a_label, b_label, POST_HOC)
                if row is None:
                    continue
                c = by_pair[frozenset((a_label, b_label))]
                row |= {"p": c.p, "p_holm": c.p_holm, "family_size": size, "mde": c.mde}
                out.append(row)
    return pd.DataFrame(out)


def contrast_families(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """``{family: its rows}`` of a contrasts table, planned first (a table without a ``family``
    column, written before post-hoc contrasts existed, is all planned); empty families left out."""
    if frame is None or frame.empty:
        return {}
    family = frame["family"] if "family" in frame.columns else pd.Series(PLANNED, index=frame.index)
    return {f: frame[family == f] for f in (PLANNED, POST_HOC) if (family == f).any()}


def contrasts_display(frame: pd.DataFrame, *, axes: list[str], metric: str,
                      test: str = "sign-flip") -> tuple[list[str], list[list[str]]]:
    """Header and text cells of a scenario's contrasts of one family: axis values, the contrast
    (``a − b (post hoc)`` for a post-hoc one), its paired difference ± CI (n), the detectable
    difference at that n, the Holm-corrected p (over the planned contrasts, or over every pair of
    rows for the post hoc)."""
    title = column_format(metric).title
    decimals = column_format(metric).decimals
    post = "family" in frame.columns and (frame["family"] == POST_HOC).any()
    over = "Holm over every pair of rows: post hoc" if post else "Holm over the contrasts"
    header = [*axes, "contrast", f"{title}: a − b (paired, 95% CI)", "detectable at n", f"p ({test_name(test)}, {over})"]
    body = []
    for _, r in frame.iterrows():
        mde = finite_float(r.get("mde"))
        label = str(r["contrast"]) + (f" ({POST_HOC})" if r.get("family") == POST_HOC else "")
        body.append([*(str(r[a]) for a in axes), label,
                     format_difference(r.get(f"{metric}_diff"), r.get(f"{metric}_diff_ci95"),
                                       int(r.get(f"{metric}_diff_n") or 0), metric),
                     format_mde(mde, decimals), format_p(finite_float(r.get("p_holm")))])
    return header, body


# ----------------------------------------------------------------------------- the table people read


def test_name(test: str) -> str:
    """How a table names its paired test."""
    return {"sign-flip": "sign-flip", "t": "paired t"}.get(test, test)


def display_table(agg: pd.DataFrame, *, axes: list[str], baseline: str, metric: str,
                  test: str = "sign-flip") -> tuple[list[str], list[list[str]]]:
    """Header and text cells of a scenario's aggregate (Markdown and site alike): axis values, row,
    n, the metric's mean ± CI, its paired difference to the baseline ± CI (n), the minimum
    detectable difference at that n, the p of the paired test (``test``, named in the header)
    Holm-corrected over the rows' comparisons with the baseline, the supported rank (all pairs), collapses."""
    title = column_format(metric).title
    decimals = column_format(metric).decimals
    header = [*axes, "row", "seeds", f"{title} (mean ± 95% CI)", f"− {baseline} (paired, 95% CI)",
              "detectable at n", f"p vs {baseline} (Holm)" if test == "sign-flip" else f"p vs {baseline} ({test_name(test)}, Holm)",
              "rank", "collapsed"]
    body = []
    for _, r in agg.iterrows():
        is_base = r["row"] == baseline
        diff = "baseline" if is_base else format_difference(r.get(f"{metric}_diff"), r.get(f"{metric}_diff_ci95"),
                                                            int(r.get(f"{metric}_diff_n") or 0), metric)
        mde = finite_float(r.get("mde"))
        checked = int(r.get("collapse_checked") or 0)
        body.append([*(str(r[a]) for a in axes), str(r["row"]), str(int(r["n"])),
                     format_cell(r.get(metric), r.get(f"{metric}_ci95"), 0, r["n"], metric), diff,
                     "" if is_base else format_mde(mde, decimals),
                     "" if is_base else format_p(finite_float(r.get("p_holm_baseline"))), str(r["rank_text"]),
                     f"{int(r.get('collapses') or 0)} of {checked}" if checked else "?"])
    return header, body


def metrics_table(agg: pd.DataFrame, *, axes: list[str], baseline: str,
                  metrics: list[str], eval_tag: str | None = None) -> tuple[list[str], list[list[str]]]:
    """Header and text cells of more metrics of a scenario's aggregate: per cell (axis values, row)
    each metric's mean ± CI, and for a row other than the baseline its paired difference to the
    baseline ± CI after it (``0.552 ± 0.149; −0.043 ± 0.136``). ``eval_tag`` (``eval v1``) marks the
    titles of the metrics read from the held-out evaluations."""
    header = [*axes, "row", *(column_format(m).title + (f" ({eval_tag})" if eval_tag and is_eval_metric(m) else "")
                              for m in metrics)]
    body = []
    for _, r in agg.iterrows():
        cells = []
        for m in metrics:
            text = format_cell(r.get(m), r.get(f"{m}_ci95"), 0, r["n"], m)
            if r["row"] != baseline:
                n = finite_float(r.get(f"{m}_diff_n"))
                text += "; " + format_difference(r.get(f"{m}_diff"), r.get(f"{m}_diff_ci95"), int(n or 0), m)
            cells.append(text)
        body.append([*(str(r[a]) for a in axes), str(r["row"]), *cells])
    return header, body


def markdown_table(header: list[str], body: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    return (["| " + " | ".join(map(cell, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
            + ["| " + " | ".join(map(cell, r)) + " |" for r in body])


# ----------------------------------------------------------------------------- the figure


def _numeric(values: list[str]) -> list[float] | None:
    xs = [finite_float(v) for v in values]
    return None if any(x is None for x in xs) else [float(x) for x in xs]


def collapse_rate(agg: pd.DataFrame) -> pd.Series:
    """Per cell of an aggregate, the share of the runs the collapse rule could judge that collapsed
    (``collapses / collapse_checked``; NaN where none could be judged)."""
    checked = pd.to_numeric(agg["collapse_checked"], errors="coerce")
    return (pd.to_numeric(agg["collapses"], errors="coerce") / checked).where(checked > 0)


def plot_map(agg: pd.DataFrame, path: Path, *, axes: list[str], rows: list[str], baseline: str, metric: str,
             difference: bool = False, points: list[tuple[str, ...]] | None = None, collapse: bool = False,
             lines: bool = False) -> Path:
    """The grid's figure, one panel per scenario (and per value of any axis after the first two):

    - no axis: each row's mean with its 95 % interval as an error bar;
    - one axis (or three and more: against the first, a panel per value of the others): one line
      per row against the axis (its values' positions when they are not all numbers), 95 % bands;
    - two axes: a heatmap per scenario and row, the first axis across, the second down; with
      ``lines``, lines against the first axis as for three, a panel per value of the second.

    ``difference`` draws each row's paired difference to the baseline instead of its mean (the
    baseline row is left out; 0 marked); ``collapse`` draws each cell's collapse rate (collapsed
    runs over the runs the rule could judge; no band) on a 0-1 scale.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    value, half = (f"{metric}_diff", f"{metric}_diff_ci95") if difference else (metric, f"{metric}_ci95")
    title = column_format(metric).title + (f" − {baseline} (paired by seed)" if difference else "")
    if collapse:
        agg = agg.copy()
        agg["collapse_rate"] = collapse_rate(agg)
        agg["collapse_rate_ci95"] = math.nan
        value, half, title, difference = "collapse_rate", "collapse_rate_ci95", "collapse rate (share of seeds)", False
    shown = [r for r in rows if not (difference and r == baseline)]
    scenarios = list(dict.fromkeys(agg["scenario"]))
    if points is None:
        points = list(dict.fromkeys(tuple(r) for r in agg[axes].itertuples(index=False, name=None))) if axes else [()]
    points = [tuple(_key(v) for v in p) for p in points]

    def at(frame: pd.DataFrame, fixed: dict[str, str]) -> pd.DataFrame:
        for a, v in fixed.items():
            frame = frame[frame[a].map(_key) == v]
        return frame

    if len(axes) == 2 and not lines:
        xs = list(dict.fromkeys(p[0] for p in points))
        ys = list(dict.fromkeys(p[1] for p in points))
        panels = [(s, r) for s in scenarios for r in shown]
        ncols = min(4, len(shown)) or 1
        nrows = math.ceil(len(panels) / ncols)
        fig, grid = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 3.0 * nrows), squeeze=False)
        frames = {(s, r): at(agg[(agg["scenario"] == s) & (agg["row"] == r)], {}) for s, r in panels}
        finite = [v for f in frames.values() for v in pd.to_numeric(f[value], errors="coerce") if math.isfinite(v)]
        span = max((abs(v) for v in finite), default=1.0) or 1.0
        vmin, vmax = (-span, span) if difference else (min(finite, default=0.0), max(finite, default=1.0))
        if collapse:
            vmin, vmax = 0.0, 1.0
        for ax, (s, r) in zip(grid.flat, panels):
            z = np.full((len(ys), len(xs)), np.nan)
            for _, cell in frames[(s, r)].iterrows():
                z[ys.index(_key(cell[axes[1]])), xs.index(_key(cell[axes[0]]))] = finite_float(cell[value]) or np.nan
            image = ax.imshow(z, cmap="RdBu" if difference else "viridis", vmin=vmin, vmax=vmax, aspect="auto",
                              origin="lower")
            for (i, j), v in np.ndenumerate(z):
                if math.isfinite(v):
                    ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="k" if difference else "w")
            ax.set_xticks(range(len(xs)), xs, fontsize=7)
            ax.set_yticks(range(len(ys)), ys, fontsize=7)
            ax.set_xlabel(axes[0], fontsize=7)
            ax.set_ylabel(axes[1], fontsize=7)
            ax.set_title(f"{s}: {r}", fontsize=8)
        for ax in list(grid.flat)[len(panels):]:
            ax.axis("off")
        fig.colorbar(image, ax=grid, shrink=0.8, label=title)
        fig.suptitle(f"{title}: mean over seeds", y=1.02)
    else:
        rest = axes[1:]
        combos = list(dict.fromkeys(p[1:] for p in points)) if axes else [()]
        panels = [(s, c) for s in scenarios for c in combos]
        ncols = 2 if len(panels) == 4 else min(3, len(panels))
        nrows = math.ceil(len(panels) / ncols)
        fig, grid = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.6 * nrows), squeeze=False,
                                 sharey=len(scenarios) == 1)  # one scenario: the panels' values compare
        for ax, (s, combo) in zip(grid.flat, panels):
            frame = at(agg[agg["scenario"] == s], dict(zip(rest, combo)))
            if axes:
                labels = list(dict.fromkeys(p[0] for p in points if p[1:] == combo))
                numeric = _numeric(labels)
                x = numeric if numeric is not None else list(range(len(labels)))
                for i, r in enumerate(shown):
                    mine = frame[frame["row"] == r]
                    by_x = {_key(c[axes[0]]): c for _, c in mine.iterrows()}
                    m = np.array([finite_float(by_x[v][value]) if v in by_x else None for v in labels], dtype=float)
                    h = np.array([finite_float(by_x[v][half]) if v in by_x else None for v in labels], dtype=float)
                    color = f"C{i % 10}"
                    ax.plot(x, m, marker="osD^v<>ph*"[i % 10], color=color, lw=1.8, label=r, alpha=0.85)
                    if not np.all(np.isnan(h)):
                        ax.fill_between(x, m - h, m + h, color=color, alpha=0.15, lw=0)
                if numeric is None:
                    ax.set_xticks(x, labels)
                elif min(numeric) >= 0 and (positive := [v for v in numeric if v > 0]) and \
                        max(positive) >= 8 * min(positive):  # values over a decade or more, 0 included: symlog
                    ax.set_xscale("symlog", linthresh=min(positive))
                    ax.set_xticks(numeric, labels)
                ax.set_xlabel(axes[0])
            else:
                for i, r in enumerate(shown):
                    c = frame[frame["row"] == r]
                    if c.empty:
                        continue
                    m, h = finite_float(c.iloc[0][value]), finite_float(c.iloc[0][half])
                    ax.errorbar([i], [np.nan if m is None else m], yerr=[[np.nan if h is None else h]], fmt="o",
                                color=f"C{i % 10}", capsize=4, label=r)
                ax.set_xticks(range(len(shown)), shown, rotation=60, ha="right", fontsize=7)
            if difference:
                ax.axhline(0.0, color="0.4", lw=1, ls="--")
            ax.set_title("\n".join([s, *(f"{k}={v}" for k, v in zip(rest, combo))]), fontsize=9)
            ax.set_ylabel(title, fontsize=8)
            ax.grid(alpha=0.3)
            if collapse:
                ax.set_ylim(-0.05, 1.05)
        for ax in list(grid.flat)[len(panels):]:
            ax.axis("off")
        fig.subplots_adjust(hspace=0.45 + 0.12 * len(rest), wspace=0.3)  # room for one title line per other axis
        handles, names = grid.flat[0].get_legend_handles_labels()
        if axes and handles:
            fig.legend(handles, names, loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False,
                       title="line: share of seeds that collapsed" if collapse else
                       "line: mean over seeds\nband: 95% t-interval over seeds", title_fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from sao_env.leaderboard.plots import as_plain_text

    as_plain_text(fig)  # names as written, never mathtext
    fig.savefig(path, dpi=110, metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- the site


def find_maps(folder: Path) -> list[Path]:
    """The grid output folders directly under a leaderboard folder (those with a ``grid.json``), by name."""
    return sorted(p.parent for p in Path(folder).glob(f"*/{MANIFEST}"))


def provisional_text(left_out: dict[str, Any]) -> str:
    """The words for the rows a provisional grid table leaves out (``{label: (finished, planned)}``)."""
    rows = ", ".join(f"{label} ({done} of {total} runs)" for label, (done, total) in left_out.items())
    return f"the rows not yet finished are left out: {rows}"


def _html_table(header: list[str], body: list[list[str]], table_id: str, *, stack: bool = False) -> str:
    """A sortable table of the site (its script sorts on ``data-sort``); ``stack``: a cell's parts
    (``value; difference``) on lines of their own, so that a table of many metrics fits a window."""
    from sao_env.leaderboard.site import breakable

    e = html.escape
    head = "".join(f'<th data-key="c{j}">{breakable(h)}</th>' for j, h in enumerate(header))
    shown = (lambda c: e(c).replace(" ± ", "\u00a0±\u00a0").replace("; ", ";<br>").replace(" (n=", "<br>(n=")) if stack else e
    rows = "".join("<tr>" + "".join(f'<td data-sort="{e(c)}">{shown(c)}</td>' for c in r) + "</tr>" for r in body)
    return (f'<div class="wrap"><table class="sortable{" stack" if stack else ""}" id="{table_id}"><thead><tr>{head}</tr>'
            f"</thead><tbody>{rows}</tbody></table></div>")


def maps_section(folder: Path) -> str:
    """The site's "maps" section (empty when the folder has no grid outputs): per grid its title,
    facts, figure and each scenario's aggregate table."""
    found = find_maps(folder)
    if not found:
        return ""
    e = html.escape
    parts = ['<section id="maps"><h2>Maps</h2><p class="muted">Grids of whole experiments (<code>sao-env grid</code>): '
             "every cell is a row (a recipe with overrides) at one axis point, its seeds ordinary runs; each row is "
             "compared with the grid's baseline at the same axis point, paired by seed. Ranks are ties unless a "
             "paired test (the grid's own: sign-flip unless it says paired t; Holm-corrected at the axis point) "
             "supports the order.</p>"]
    for i, where in enumerate(found):
        try:
            manifest = json.loads((where / MANIFEST).read_text())
        except (OSError, ValueError):
            parts.append(f'<p class="note">{e(where.name)}: {MANIFEST} unreadable.</p>')
            continue
        missing = [k for k in ("baseline", "metric") if k not in manifest]
        if missing:
            parts.append(f'<p class="note">{e(where.name)}: {MANIFEST} lacks {e(", ".join(missing))}.</p>')
            continue
        axes, baseline, metric = manifest.get("axes", []), manifest["baseline"], manifest["metric"]
        parts.append(f'<h3 id="map-{e(where.name)}">{e(manifest.get("title") or where.name)}</h3>')
        facts = [("folder", f"{where.name}/"), ("rows", ", ".join(r["label"] for r in manifest.get("rows", []))),
                 ("axes", "; ".join(f"{k} in {{{', '.join(v)}}}" for k, v in manifest.get("axis_values", {}).items())
                  or "none"),
                 ("cut", " ".join(manifest.get("cut") or []) or "none (the full scenarios)"),
                 ("seeds", ", ".join(map(str, manifest.get("seeds", [])))), ("baseline", baseline),
                 ("metric", metric), ("paired test", test_name(manifest.get("test", "sign-flip"))),
                 ("command", manifest.get("command", ""))]
        parts.append('<dl class="facts">' + "".join(f"<dt>{e(k)}</dt><dd>{e(str(v))}</dd>" for k, v in facts) + "</dl>")
        if manifest.get("left_out"):
            parts.append(f'<p class="note">Provisional: {e(provisional_text(manifest["left_out"]))}.</p>')
        png = where / FIGURE
        if png.is_file():
            data = base64.b64encode(png.read_bytes()).decode("ascii")
            parts.append(f'<figure><img alt="map: {e(where.name)}" src="data:image/png;base64,{data}">'
                         f"<figcaption>{e(manifest.get('figure_caption', ''))}</figcaption></figure>")
        verdicts = where / VERDICT_CSV
        if verdicts.is_file():
            header, body = verdict_display(pd.read_csv(verdicts))
            parts.append("<p><b>Pre-registered predictions</b> (written before the runs; one family, exact sign-flip "
                         "test of the per-seed differences, Holm over the family: held, failed or not resolved; "
                         f"<code>{VERDICT_MD}</code>)</p>" + _html_table(header, body, f"map-{i}-verdict"))
        for scenario in manifest.get("scenarios", []):
            path = where / f"{scenario}.csv"
            if not path.is_file():
                continue
            agg = pd.read_csv(path, dtype={a: str for a in axes})
            header, body = display_table(agg, axes=axes, baseline=baseline, metric=metric,
                                         test=manifest.get("test", "sign-flip"))
            table_id = f"map-{i}-{''.join(ch if ch.isalnum() else '-' for ch in scenario)}"
            parts.append(f"<p><b>{e(scenario)}</b></p>" + _html_table(header, body, table_id))
            shown = [m for m in manifest.get("show", []) if m in agg.columns]
            if shown:
                header, body = metrics_table(agg, axes=axes, baseline=baseline, metrics=shown)
                parts.append(f"<p><b>{e(scenario)}: beside {e(column_format(metric).title)}</b> (mean ± 95% CI; "
                             f"below it, minus {e(baseline)}, paired by seed)</p>"
                             + _html_table(header, body, f"{table_id}-show", stack=True))
            named = where / f"{scenario}-contrasts.csv"
            if (manifest.get("contrasts") or manifest.get("post_hoc")) and named.is_file():
                frame = pd.read_csv(named, dtype={a: str for a in axes})
                for family, rows in contrast_families(frame).items():
                    header, body = contrasts_display(rows, axes=axes, metric=metric,
                                                     test=manifest.get("test", "sign-flip"))
                    if family == POST_HOC:
                        caption = (f"<p><b>{e(scenario)}: post-hoc contrasts</b> "
                                   f"({e(', '.join(manifest.get('post_hoc') or []))}; chosen after the results were "
                                   "read: post hoc, Holm over every pair of rows at the axis point)</p>")
                        suffix = "post-hoc"
                    else:
                        caption = (f"<p><b>{e(scenario)}: contrasts</b> "
                                   f"({e(', '.join(manifest.get('contrasts') or []))})</p>")
                        suffix = "contrasts"
                    parts.append(caption + _html_table(header, body, f"{table_id}-{suffix}"))
    parts.append("</section>")
    return "\n".join(parts)
