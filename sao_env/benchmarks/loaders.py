"""Benchmark loaders: rows from the Hugging Face hub by default, or from a local file/folder.

Each loader is a TaskSource: ``load() -> list[Task]``. Rows may carry extra columns (they are
ignored); a row lacking a column the loader needs is a UserError naming the column.

Local data (``data=PATH``): a ``.jsonl``, ``.json``, ``.csv`` or ``.parquet`` file, or a folder.
In a folder the loader looks in the suite's ``data_dirs`` sub-folders first, then in the folder
itself, for ``<split>.<ext>``, then a file whose name starts with the split, then the only data
file there.
"""

from __future__ import annotations

import csv
import io
import json
import os
import warnings
from pathlib import Path
from typing import Any, ClassVar

from sao_env.benchmarks.suites import SuiteSpec, load_suite
from sao_env.errors import UserError
from sao_env.types import Task

DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


# ----------------------------------------------------------------------------- reading files


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a local data file (JSON lines, JSON list, CSV with header, or Parquet)."""
    suffix = path.suffix.lower()
    try:
        if suffix == ".jsonl":
            with path.open(encoding="utf-8") as handle:
                return [json.loads(line) for line in handle if line.strip()]
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict):  # {"rows": [...]} or {"data": [...]}
                data = next((v for v in data.values() if isinstance(v, list)), None)
            if not isinstance(data, list):
                raise UserError(f"{path}: expected a JSON list of rows")
            return data
        if suffix == ".csv":
            rows, _ = read_csv_rows(path.read_text(encoding="utf-8"), source=str(path))
            return rows
        if suffix == ".parquet":
            import pandas as pd

            return pd.read_parquet(path).to_dict(orient="records")
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: invalid JSON ({err.msg} at line {err.lineno})") from err
    raise UserError(f"{path}: unsupported data file; use one of {', '.join(DATA_SUFFIXES)}")


def read_csv_rows(text: str, *, source: str = "CSV") -> tuple[list[dict[str, str]], list[str]]:
    """Rows of a CSV with a header, repairing records split wrongly by a stray quote.

    The known fault (IMO-AnswerBench v2, row imo-bench-algebra-036; reported upstream): the
    quote closing a multi-line Problem is missing, so the Problem swallows ``,"<answer>"`` and the
    record comes out one field short (the answer lost, Category read as the answer). Such a record
    is repaired by splitting the long field at its last comma that follows a newline (else its last
    comma) and dropping the stray trailing quote. Returns ``(rows, ids_of_repaired_rows)``.
    """
    records = list(csv.reader(io.StringIO(text, newline="")))
    if not records:
        return [], []
    header, rows, repaired = records[0], [], []
    for number, record in enumerate(records[1:], start=2):
        if not any(cell.strip() for cell in record):
            continue
        if len(record) == len(header) - 1:
            record = _repair_short_record(record)
            if record is not None:
                repaired.append(record[0])
        if record is None or len(record) != len(header):
            raise UserError(f"{source}: record {number} has {len(record or [])} fields, expected {len(header)}")
        rows.append(dict(zip(header, record)))
    if repaired:
        warnings.warn(f"{source}: repaired a stray quote in row(s) {', '.join(repaired)}", UserWarning, stacklevel=2)
    return rows, repaired


def _repair_short_record(record: list[str]) -> list[str] | None:
    longest = max(range(len(record)), key=lambda i: len(record[i]))
    merged = record[longest]
    cut = merged.rfind("\n,")
    cut = cut + 1 if cut >= 0 else merged.rfind(",")
    if cut <= 0:
        return None
    head, tail = merged[:cut], merged[cut + 1 :]
    if tail.endswith('"'):
        tail = tail[:-1]
    if tail.startswith('"'):
        tail = tail[1:]
    return record[:longest] + [head, tail] + record[longest + 1 :]


def find_local_file(data: Path, suite: SuiteSpec) -> Path:
    """Resolve ``--data`` for one suite: the file itself, or the suite's file inside a folder."""
    if data.is_file():
        return data
    if not data.is_dir():
        raise UserError(f"--data {data}: no such file or folder")
    for folder in [data / d for d in suite.data_dirs] + [data]:
        if not folder.is_dir():
            continue
        files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in DATA_SUFFIXES)
        exact = [p for p in files if p.stem == suite.split]
        prefixed = [p for p in files if p.stem.startswith(suite.split)]
        for group in (exact, prefixed, files if len(files) == 1 else []):
            if group:
                return group[0]
        if files:
            names = ", ".join(p.name for p in files)
            raise UserError(f"--data {folder}: several data files ({names}); pass the one for {suite.name}")
    looked = ", ".join(str(data / d) for d in suite.data_dirs) or str(data)
    raise UserError(f"--data {data}: no data file for suite {suite.name} (looked in {looked} and {data})")


DATA_HINT = "pass --data PATH or set SAO_ENV_DATA=PATH (a local copy of the rows)"
"""How to read a local copy instead (a training run, which has no --data option, gives its own hint)."""


class DataUnreachable(UserError):
    """The hub or the URL of a suite's rows could not be read; ``reason`` says why."""

    def __init__(self, reason: str, hint: str = DATA_HINT):
        self.reason = reason
        super().__init__(f"{reason}; {hint}")


def load_hub_rows(dataset: str, split: str, revision: str = "main") -> list[dict[str, Any]]:
    """Rows of a hub dataset at ``revision`` (a commit sha pins them; a branch follows it); no network
    (or no such dataset or revision) is a one-line DataUnreachable error."""
    from sao_env.hub import reach_or_cache

    with reach_or_cache() as why_offline:  # an unreachable hub: the cache only, at once (no half minute of retries)
        try:
            import datasets

            table = datasets.load_dataset(dataset, split=split, revision=revision)
        except Exception as err:  # noqa: BLE001  (datasets raises many kinds when offline)
            reason = (str(err).strip().splitlines() or [""])[0][:160]
            where = f"{why_offline}; not in the local cache" if why_offline else f"{type(err).__name__}: {reason}"
            raise DataUnreachable(f"cannot reach the Hugging Face hub for {dataset} (revision {revision}; {where})") from err
    return [dict(row) for row in table]


def fetch_url_text(url: str, *, what: str, timeout_s: float = 30.0) -> str:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310  (documented source)
            return response.read().decode("utf-8")
    except Exception as err:  # noqa: BLE001
        raise DataUnreachable(f"cannot reach {url} for {what} ({type(err).__name__}: {err})") from err


# ----------------------------------------------------------------------------- loaders


class BenchmarkLoader:
    """Base: find the rows (hub or local), check columns, turn each row into a Task."""

    loader_name: ClassVar[str]
    default_suite: ClassVar[str]
    required_columns: ClassVar[tuple[str, ...]]

    def __init__(
        self,
        data: str | Path | None = None,
        *,
        suite: SuiteSpec | str | None = None,
        dataset: str | None = None,
        split: str | None = None,
        revision: str | None = None,
    ):
        self.suite = suite if isinstance(suite, SuiteSpec) else load_suite(suite or self.default_suite)
        if self.suite.loader != self.loader_name:
            raise UserError(f"suite {self.suite.name} uses loader {self.suite.loader}, not {self.loader_name}")
        if dataset is not None or split is not None or revision is not None:
            self.suite = self.suite.model_copy(update={"dataset": dataset or self.suite.dataset,
                                                        "split": split or self.suite.split,
                                                        "revision": revision or self.suite.revision})
        self.data = Path(data) if data is not None else None
        self.source = ""
        """Where the rows came from (hub id, URL or file), set by ``load()``."""

    def rows(self) -> list[dict[str, Any]]:
        if self.data is not None:
            path = find_local_file(self.data, self.suite)
            self.source = str(path)
            return read_rows(path)
        self.source = self.suite.dataset
        return load_hub_rows(self.suite.dataset, self.suite.split, self.suite.revision)

    def check_columns(self, rows: list[dict[str, Any]]) -> None:
        present = set(rows[0]) if rows else set()
        missing = [c for c in self.required_columns if c not in present]
        if missing:
            raise UserError(f"{self.source}: rows lack column(s) {', '.join(missing)} needed by {self.suite.name}")

    def load(self) -> list[Task]:
        rows = self.rows()
        if not rows:
            raise UserError(f"{self.source}: no rows")
        self.check_columns(rows)
        tasks = [self.to_task(i, row) for i, row in enumerate(rows)]
        ids = [t.id for t in tasks]
        if len(set(ids)) != len(ids):
            duplicates = sorted({i for i in ids if ids.count(i) > 1})
            raise UserError(f"{self.source}: duplicate task ids {', '.join(duplicates[:5])}")
        return tasks

    def to_task(self, index: int, row: dict[str, Any]) -> Task:
        raise NotImplementedError

    def _metadata(self, **extra: Any) -> dict[str, Any]:
        return {"suite": self.suite.name, "source": self.source, **extra}


class BeyondAIME(BenchmarkLoader):
    """ByteDance-Seed/BeyondAIME (problem, answer); task id = 0-based row index."""

    loader_name = "beyond_aime"
    default_suite = "beyond_aime"
    required_columns = ("problem", "answer")

    def to_task(self, index: int, row: dict[str, Any]) -> Task:
        return Task(
            id=str(index),
            prompt=self.suite.render({"problem": row["problem"]}),
            reference={"answer": str(row["answer"]).strip()},
            grader="math",
            metadata=self._metadata(row=index),
        )


class MathArena(BenchmarkLoader):
    """Any MathArena competition (problem_idx, problem, answer[, problem_type]); id = problem_idx.

    A list answer ``"a, b"`` is an unordered set of answers (the math grader compares sets).
    """

    loader_name = "matharena"
    default_suite = "hmmt_feb_2025"
    required_columns = ("problem_idx", "problem", "answer")

    def to_task(self, index: int, row: dict[str, Any]) -> Task:
        types = row.get("problem_type")
        if isinstance(types, str):
            types = [types]
        category = ", ".join(str(t) for t in types) if types is not None and len(types) else None
        return Task(
            id=str(row["problem_idx"]),
            prompt=self.suite.render({"problem": row["problem"]}),
            reference={"answer": str(row["answer"]).strip()},
            grader="math",
            metadata=self._metadata(row=index, category=category),
        )


class IMOAnswerBench(BenchmarkLoader):
    """IMO-AnswerBench (Problem ID, Problem, Short Answer, Category, Subcategory, Source).

    The default source is the official CSV at the URL in evals/imo_answerbench.yaml, at the pinned
    commit of its ``revision`` (substituted for ``{revision}`` in the URL), read with the csv module and repaired where a stray quote split a record (see :func:`read_csv_rows`).
    """

    loader_name = "imo_answerbench"
    default_suite = "imo_answerbench"
    required_columns = ("Problem ID", "Problem", "Short Answer", "Category")

    def rows(self) -> list[dict[str, Any]]:
        if self.data is None and self.suite.dataset.startswith(("http://", "https://")):
            self.source = self.suite.dataset.replace("{revision}", self.suite.revision)
            rows, _ = read_csv_rows(fetch_url_text(self.source, what=self.suite.name), source=self.source)
            return rows
        return super().rows()

    def to_task(self, index: int, row: dict[str, Any]) -> Task:
        category = str(row["Category"]).strip()
        return Task(
            id=str(row["Problem ID"]).strip(),
            prompt=self.suite.render({"problem": str(row["Problem"]).strip(), "category": category}),
            reference={"answer": str(row["Short Answer"]).strip()},
            grader="math",
            metadata=self._metadata(
                row=index,
                category=category,
                subcategory=row.get("Subcategory"),
                origin=row.get("Source"),
            ),
        )


SWEBENCH_COLUMNS = (
    "repo", "instance_id", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
    "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit", "difficulty",
)
"""Columns of princeton-nlp/SWE-bench_Verified."""


class SWEBenchVerified(BenchmarkLoader):
    """princeton-nlp/SWE-bench_Verified; id = instance_id.

    A local file with fewer columns (e.g. without the tests) still loads for prompting: the
    absent columns are listed in ``missing_columns`` and in a warning; grading then needs the
    full rows (the hub, or a complete file).
    """

    loader_name = "swebench_verified"
    default_suite = "swebench_verified"
    required_columns = ("instance_id", "repo", "base_commit", "problem_statement")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.missing_columns: list[str] = []
        """Columns of the full dataset that the loaded rows lack (set by ``load()``)."""

    def check_columns(self, rows: list[dict[str, Any]]) -> None:
        super().check_columns(rows)
        present = set(rows[0])
        self.missing_columns = [c for c in SWEBENCH_COLUMNS if c not in present]
        if self.missing_columns:
            warnings.warn(
                f"{self.source}: rows lack {', '.join(self.missing_columns)}; "
                "they load for prompting, but SWE-bench evaluation needs the full rows",
                UserWarning,
                stacklevel=3,
            )

    def to_task(self, index: int, row: dict[str, Any]) -> Task:
        fields = {k: row.get(k) or "" for k in ("problem_statement", "repo", "base_commit", "instance_id", "hints_text")}
        return Task(
            id=str(row["instance_id"]),
            prompt=self.suite.render(fields),
            reference={"instance": dict(row), "missing_columns": list(self.missing_columns)},
            grader="swebench",
            metadata=self._metadata(row=index, category=row["repo"], repo=row["repo"]),
        )


LOADERS: dict[str, type[BenchmarkLoader]] = {
    cls.loader_name: cls for cls in (BeyondAIME, MathArena, IMOAnswerBench, SWEBenchVerified)
}


DATA_ENV_VAR = "SAO_ENV_DATA"
"""A local folder of benchmark files used when no ``data`` is given (an offline mirror of the hub)."""


def make_loader(suite: SuiteSpec | str, data: str | Path | None = None) -> BenchmarkLoader:
    """The loader a suite names, reading ``data`` when given, else ``$SAO_ENV_DATA`` when set, else
    the hub/URL default."""
    spec = suite if isinstance(suite, SuiteSpec) else load_suite(suite)
    if data is None and os.environ.get(DATA_ENV_VAR):
        data = os.environ[DATA_ENV_VAR]
    return LOADERS[spec.loader](data, suite=spec)
