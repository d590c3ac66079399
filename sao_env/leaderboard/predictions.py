"""Verdicts of pre-registered predictions, read from a grid's per-seed table: held, failed or not resolved.

A prediction is a signed paired difference written down before the runs (e.g.
``leaderboards/critic/predictions.yaml``, which restates the predictions of ``grid.yaml``'s header):

* ``a - b`` at one cell (a scenario of the grid): each seed's difference is row ``a``'s metric minus row
  ``b``'s at that seed and cell;
* with ``minus:``, the difference of two such contrasts, each at its own cell (an interaction: "the
  critic's lead over the per-prompt tracker grows with the horizon"), formed seed by seed from the same
  seeds' runs.

The predictions of one file are one family. Each p is the exact two-sided sign-flip p of its per-seed
differences (``stats.sign_flip_pvalue``), Holm-corrected over the family (``stats.holm``); at level
``alpha`` a prediction **held** when its corrected p is at most alpha and the mean difference has the
predicted sign, **failed** when the corrected p is at most alpha with the other sign, and is **not
resolved** otherwise. Each is stated with its detectable difference: the paired difference found with 80 %
power at ``alpha / m``, Holm's most stringent step (``stats.min_detectable_difference``), what the design
can resolve and not a bound on an unresolved difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from sao_env.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

VERDICT_MD, VERDICT_CSV = "verdict.md", "verdict.csv"
"""What ``sao-env verdict`` writes (into runs/verdicts/NAME, or --out: a map's folder, where the site shows the table)."""
SIDEDNESS = ("Each p is the two-sided sign-flip p of the per-seed differences: its statistic is |mean|, so a "
             "difference of either sign counts against no difference, and the predicted sign decides only between "
             "held and failed; a one-sided test in the predicted direction would give half of each p whose mean has "
             "the predicted sign (exactly half up to 16 seeds, where every sign pattern is counted).")
"""verdict.md's sentence on the test's sidedness (``stats.sign_flip_pvalue`` is two-sided; a test checks both)."""
ALPHA = 0.05
"""The default level: ``stats.ALPHA``, named here so that reading a predictions file imports neither
pandas nor scipy (a bad file is one line within about a second)."""


class Contrast(BaseModel):
    """``a - b`` at one cell of the grid."""

    model_config = ConfigDict(extra="forbid")
    cell: str
    contrast: str

    @field_validator("contrast")
    @classmethod
    def _two_rows(cls, text: str) -> str:
        parts = [x.strip() for x in text.split(" - ")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"contrast {text!r} is not 'a - b' (two row labels around ' - ')")
        return text

    @property
    def rows(self) -> tuple[str, str]:
        a, b = (x.strip() for x in self.contrast.split(" - "))
        return a, b

    def text(self) -> str:
        return f"{self.contrast} at {self.cell}"


class Prediction(Contrast):
    """A contrast (or, with ``minus``, the difference of two) and the sign predicted for it."""

    id: str
    sign: Literal[">", "<"]
    minus: Optional[Contrast] = None
    why: str = ""

    def text(self) -> str:
        inner = f"({super().text()}) - ({self.minus.text()})" if self.minus else super().text()
        return f"{inner} {self.sign} 0"


class Predictions(BaseModel):
    """A file of predictions: the metric they are about, the level, and the family."""

    model_config = ConfigDict(extra="forbid")
    title: str = "Predictions"
    metric: str = "online_reward"
    alpha: float = ALPHA
    predictions: list[Prediction]

    @field_validator("alpha")
    @classmethod
    def _level(cls, alpha: float) -> float:
        if not (math.isfinite(alpha) and 0 < alpha < 1):
            raise ValueError(f"{alpha!r} is not a level: alpha must be finite, 0 < alpha < 1")
        return alpha

    @field_validator("predictions")
    @classmethod
    def _unique(cls, items: list[Prediction]) -> list[Prediction]:
        ids = [p.id for p in items]
        if not items:
            raise ValueError("no predictions")
        if len(set(ids)) != len(ids):
            raise ValueError(f"prediction ids repeat: {', '.join(sorted({i for i in ids if ids.count(i) > 1}))}")
        return items


def load_predictions(path: Path) -> Predictions:
    """The predictions file at ``path``; a bad file is one ``UserError`` line."""
    import yaml

    from sao_env.specs import parse_yaml, read_spec_text

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such predictions file")
    text = read_spec_text(path, "predictions")
    try:
        data = parse_yaml(text)
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not YAML ({' '.join(str(err).split())})") from None
    try:
        return Predictions.model_validate(data if isinstance(data, dict) else {})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise UserError(f"{path}: {where}: {first['msg'].removeprefix('Value error, ')}") from None


def read_per_seed(path: Path, metric: str) -> pd.DataFrame:
    """A grid's per-seed table (``per-seed.csv``, or the ledger ``finished.jsonl`` of a map still
    running), its seeds whole numbers and its ``metric`` numbers (empty where a run has none); anything
    else is one ``UserError`` line naming the file, the place and the value."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no per-seed table (a grid writes per-seed.csv into its --out folder; name another with --per-seed)")
    try:
        if path.suffix == ".jsonl":
            from sao_env.grid import Ledger

            table = pd.DataFrame(Ledger(path).rows())
        else:
            table = pd.read_csv(path)
    except (OSError, ValueError) as err:
        raise UserError(f"{path}: not a readable table ({' '.join(str(err).split())})") from None
    missing = {"scenario", "row", "seed"} - set(table.columns)
    if missing:
        raise UserError(f"{path}: not a grid's per-seed table (no {', '.join(sorted(missing))} column)")
    table["seed"] = [_seed(value, path, i) for i, value in enumerate(table["seed"])]
    if metric in table.columns:
        table[metric] = [_number(value, path, i, metric) for i, value in enumerate(table[metric])]
    return table


def _place(path: Path, index: int) -> str:
    """Where the table's row ``index`` is: a CSV's line (after its header), a ledger's record."""
    return f"record {index + 1}" if path.suffix == ".jsonl" else f"line {index + 2}"


def _seed(value, path: Path, index: int) -> int:
    """A seed as an int; a seed that is empty or not a whole number is a ``UserError``."""
    try:
        number = float(value)
        if isinstance(value, bool) or not number.is_integer():
            raise ValueError
    except (TypeError, ValueError):
        shown = "empty" if value is None or (isinstance(value, float) and math.isnan(value)) else repr(value)
        raise UserError(f"{path}: {_place(path, index)}: the seed is {shown}, not a whole number") from None
    return int(number)


def _number(value, path: Path, index: int, metric: str) -> float:
    """A metric's value as a float (NaN where the run has none); text that is not a number is a ``UserError``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return math.nan
    try:
        if isinstance(value, bool):
            raise ValueError
        return float(value)
    except (TypeError, ValueError):
        raise UserError(f"{path}: {_place(path, index)}: {metric} is {value!r}, not a number") from None


@dataclass(frozen=True)
class Verdict:
    """One prediction read from the data."""

    prediction: Prediction
    seeds: tuple[int, ...]
    """Seeds where every run the prediction needs has the metric."""
    diffs: tuple[float, ...]
    """Per-seed differences, in ``seeds``' order."""
    p: float
    p_holm: float
    mde: float
    verdict: str
    """``held``, ``failed`` or ``not resolved`` (``no data`` without a seed)."""

    @property
    def n(self) -> int:
        return len(self.diffs)

    @property
    def mean(self) -> float:
        import numpy as np

        return float(np.mean(self.diffs)) if self.diffs else math.nan

    @property
    def half_width(self) -> float:
        """Half-width of the 95 % Student-t interval of the mean difference (NaN below 2 seeds)."""
        if self.n < 2:
            return math.nan
        import numpy as np
        from scipy import stats as sps

        return float(sps.t.ppf(0.975, self.n - 1) * np.std(self.diffs, ddof=1) / math.sqrt(self.n))

    @property
    def agreeing(self) -> int:
        """Seeds whose difference has the predicted sign."""
        return sum(1 for d in self.diffs if (d > 0 if self.prediction.sign == ">" else d < 0))


def _values(per_seed: pd.DataFrame, cell: str, row: str, metric: str) -> dict[int, float]:
    mine = per_seed[(per_seed["scenario"].astype(str) == cell) & (per_seed["row"].astype(str) == row)]
    if mine["seed"].duplicated().any():
        raise UserError(f"cell {cell}, row {row}: a seed appears more than once in the per-seed table "
                        "(a grid with axes: predictions name cells without axis points, so they need a grid without axes)")
    return {int(s): float(v) for s, v in zip(mine["seed"], mine[metric]) if v is not None and math.isfinite(float(v))}


def _check_names(per_seed: pd.DataFrame, spec: Predictions, partial: bool, source: str) -> None:
    if spec.metric not in per_seed.columns:
        raise UserError(f"the per-seed table has no column {spec.metric!r}")
    if partial:
        return
    cells, rows = set(per_seed["scenario"].astype(str)), set(per_seed["row"].astype(str))
    pairs = set(zip(per_seed["scenario"].astype(str), per_seed["row"].astype(str)))
    for p in spec.predictions:
        for c in (p, p.minus) if p.minus else (p,):
            if c.cell not in cells:
                raise UserError(f"prediction {p.id}: no cell {c.cell!r} in the per-seed table (cells: {', '.join(sorted(cells))})")
            for row in c.rows:
                if row not in rows:
                    raise UserError(f"prediction {p.id}: no row {row!r} in the per-seed table (rows: {', '.join(sorted(rows))})")
                if (c.cell, row) not in pairs:
                    there = sorted(r for cell, r in pairs if cell == c.cell)
                    raise UserError(f"prediction {p.id}: no run of row {row!r} at cell {c.cell!r} in {source} "
                                    f"(rows there: {', '.join(there)}); with --partial it has no data")


def seed_differences(per_seed: pd.DataFrame, prediction: Prediction, metric: str) -> dict[int, float]:
    """The prediction's difference at each seed where every run it needs has the metric."""
    terms: list[tuple[Contrast, float]] = [(prediction, 1.0)] + ([(prediction.minus, -1.0)] if prediction.minus else [])
    parts: list[dict[int, float]] = []
    for contrast, weight in terms:
        a, b = contrast.rows
        va, vb = _values(per_seed, contrast.cell, a, metric), _values(per_seed, contrast.cell, b, metric)
        parts.append({s: weight * (va[s] - vb[s]) for s in va.keys() & vb.keys()})
    seeds = set.intersection(*(set(p) for p in parts))
    return {s: sum(p[s] for p in parts) for s in sorted(seeds)}


def verdicts(per_seed: pd.DataFrame, spec: Predictions, *, partial: bool = False,
             source: str = "the per-seed table") -> list[Verdict]:
    """Every prediction of ``spec`` read from ``per_seed`` (a grid's per-seed table: scenario, row, seed
    and the metric's column), Holm over the family of all of them. A cell or row the table lacks is an
    error, unless ``partial`` (a map still running): then that prediction has no data and counts in
    the family with p = 1, so that a provisional reading is never corrected over fewer predictions than
    the final one. ``source`` names the table in errors."""
    import numpy as np

    from sao_env.leaderboard.stats import holm, min_detectable_difference, sign_flip_pvalue

    _check_names(per_seed, spec, partial, source)
    diffs = [seed_differences(per_seed, p, spec.metric) for p in spec.predictions]
    ps = [sign_flip_pvalue(list(d.values()))[0] if d else math.nan for d in diffs]
    adjusted = holm([p if math.isfinite(p) else 1.0 for p in ps])
    m = len(spec.predictions)
    out = []
    for prediction, d, p, p_holm in zip(spec.predictions, diffs, ps, adjusted):
        values = tuple(d.values())
        sd = float(np.std(values, ddof=1)) if len(values) >= 2 else math.nan
        mean = float(np.mean(values)) if values else math.nan
        if not values:
            verdict, p_holm = "no data", math.nan
        elif p_holm <= spec.alpha and mean != 0:
            verdict = "held" if (mean > 0) == (prediction.sign == ">") else "failed"
        else:
            verdict = "not resolved"
        out.append(Verdict(prediction, tuple(d), values, p, p_holm,
                           min_detectable_difference(sd, len(values), alpha=spec.alpha, m=m), verdict))
    return out


def verdict_table(found: list[Verdict]) -> pd.DataFrame:
    """One row per prediction: what it says, n, the mean difference and its interval, p, Holm's p, the
    detectable difference and the verdict."""
    import pandas as pd

    return pd.DataFrame([{
        "id": v.prediction.id, "prediction": v.prediction.text(), "n": v.n, "seeds": " ".join(map(str, v.seeds)),
        "mean": v.mean, "ci95_half_width": v.half_width, "seeds_agreeing": v.agreeing, "p": v.p, "p_holm": v.p_holm,
        "detectable": v.mde, "verdict": v.verdict} for v in found])


def verdict_display(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """``verdict.csv`` (``verdict_table``) as the site's table: header and rows of text."""
    from sao_env.leaderboard.stats import format_mde

    header = ["id", "prediction", "n", "mean ± 95% CI", "seeds agreeing", "p", "p (Holm)", "detectable", "verdict"]
    body = []
    for r in frame.itertuples(index=False):
        n = int(r.n)
        half = float(r.ci95_half_width)
        interval = f"{r.mean:+.3f} ± {half:.3f}" if math.isfinite(half) else (f"{r.mean:+.3f}" if n else "—")
        body.append([str(r.id), str(r.prediction), str(n), interval, f"{int(r.seeds_agreeing)} of {n}", _p(r.p),
                     _p(r.p_holm), format_mde(float(r.detectable)), str(r.verdict)])
    return header, body


def verdict_markdown(found: list[Verdict], spec: Predictions, *, source: str, per_seed: str, command: str = "") -> str:
    """The verdicts as a page: the rule, then one row per prediction."""
    from sao_env.leaderboard.stats import min_seeds

    m = len(found)
    ns = sorted({v.n for v in found if v.n})
    lines = [f"# {spec.title}: verdicts", "",
             f"Read from `{per_seed}` by `{command or 'sao-env verdict ' + source}`; the predictions were written before the runs "
             f"(`{source}`, dated by git). Metric: `{spec.metric}`. {SIDEDNESS} `p (Holm)` corrects p over the "
             f"family of {m} predictions at α {spec.alpha:g}: **held** is a corrected "
             f"p ≤ α with the predicted sign, **failed** the same with the other sign, **not resolved** neither. The "
             f"sign-flip test's smallest p is 2/2^n, so with Holm over {m} it can reach α from "
             f"{min_seeds(m, alpha=spec.alpha)} seeds. `detectable`: the paired difference found with 80 % power at "
             f"α/{m} (Holm's most stringent step) at the prediction's n and spread, what the design can resolve, not a "
             f"bound on a difference left unresolved. Interval: mean ± half-width of the 95 % Student-t interval over "
             f"the seeds' differences.", ""]
    if ns and (len(ns) > 1 or any(v.n == 0 for v in found)):
        lines += [f"**Provisional**: seeds per prediction differ ({', '.join(map(str, sorted({v.n for v in found})))}): "
                  "the map is not complete. A prediction without data counts in Holm's family with p = 1, so no "
                  "verdict here is corrected over fewer predictions than the final one.", ""]
    header, body = verdict_display(verdict_table(found))
    lines += ["| " + " | ".join(header) + " |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for row in body:
        row[-1] = f"**{row[-1]}**" if row[-1] in ("held", "failed") else row[-1]
        lines.append("| " + " | ".join(row) + " |")
    whys = [v for v in found if v.prediction.why]
    if whys:
        lines += ["", "Why each was predicted (as written before the runs):", ""]
        lines += [f"- {v.prediction.id}: {v.prediction.why}" for v in whys]
    lines += ["", f"Of {m} predictions: {count_verdicts(v.verdict for v in found)}."]
    return "\n".join(lines) + "\n"


def count_verdicts(verdicts) -> str:
    """``"2 held, 8 not resolved"``: verdicts counted, in the order held, failed, not resolved, no data."""
    found = list(verdicts)
    counts = {k: found.count(k) for k in ("held", "failed", "not resolved", "no data")}
    return ", ".join(f"{n} {k}" for k, n in counts.items() if n)


def verdict_counts(path: Path) -> str:
    """A written ``verdict.csv``'s verdicts counted (``count_verdicts``; the summary's grid table)."""
    import pandas as pd

    return count_verdicts(pd.read_csv(path)["verdict"])


def _p(p: float) -> str:
    if p is None or not math.isfinite(p):
        return "—"
    return f"{p:.3g}"
