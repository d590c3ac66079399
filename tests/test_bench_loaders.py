"""Suite specs and benchmark loaders, on the real rows in ../shared/data."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from sao_env.benchmarks.loaders import (
    BeyondAIME,
    IMOAnswerBench,
    MathArena,
    SWEBenchVerified,
    make_loader,
    read_csv_rows,
)
from sao_env.benchmarks.suites import SuiteSpec, find_spec, list_specs, load_suite
from sao_env.errors import UserError

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"benchmark rows not found at {DATA} (../shared/data)")

SUITES = ["beyond_aime", "hmmt_feb_2025", "hmmt_feb_2024", "hmmt_nov_2025", "imo_answerbench", "swebench_verified"]


# ----------------------------------------------------------------------------- suites


def test_every_suite_file_validates():
    assert set(SUITES) <= set(list_specs("evals"))
    for name in SUITES:
        spec = load_suite(name)
        assert spec.name == name
        assert find_spec("evals", name).name == f"{name}.yaml"
    assert load_suite("beyond_aime").k == 4
    assert {load_suite(n).k for n in ("hmmt_feb_2025", "hmmt_feb_2024", "hmmt_nov_2025", "imo_answerbench")} == {16}
    assert all(load_suite(n).temperature == 1.0 and load_suite(n).top_p == 1.0 for n in SUITES)


def test_template_keeps_other_braces():
    spec = load_suite("hmmt_feb_2025")
    assert spec.render({"problem": "What is 1+1?"}) == (
        "What is 1+1?\n\nPlease reason step by step, and put your final answer within \\boxed{}."
    )


def _spec_dict(**changes):
    raw = yaml.safe_load(find_spec("evals", "beyond_aime").read_text())
    raw.update(changes)
    return raw


def test_suite_spec_rejects_unknown_keys_and_leaky_templates(tmp_path):
    with pytest.raises(ValueError, match="Extra inputs"):
        SuiteSpec.model_validate(_spec_dict(samples=4))
    with pytest.raises(ValueError, match="answer"):
        SuiteSpec.model_validate(_spec_dict(prompt_template="{problem} (hint: {answer})"))
    with pytest.raises(ValueError, match="grader"):
        SuiteSpec.model_validate(_spec_dict(grader="swebench"))
    bad = tmp_path / "broken.yaml"
    bad.write_text(yaml.safe_dump(_spec_dict(name="broken", k=0)))
    with pytest.raises(UserError, match="k"):
        load_suite(str(bad))


def test_unknown_suite_lists_the_known_ones():
    with pytest.raises(UserError, match="known: .*beyond_aime"):
        load_suite("no_such_suite")


# ----------------------------------------------------------------------------- loaders


@needs_data
def test_beyond_aime_from_a_file_and_from_a_folder():
    tasks = BeyondAIME(DATA / "beyondaime" / "test.jsonl").load()
    assert len(tasks) == 100
    assert [t.id for t in tasks[:3]] == ["0", "1", "2"]
    assert tasks[0].grader == "math" and tasks[0].reference["answer"] == "3"
    assert tasks[0].prompt.endswith("put your final answer within \\boxed{}.")
    assert [t.id for t in make_loader("beyond_aime", DATA).load()] == [t.id for t in tasks]


@needs_data
@pytest.mark.parametrize("suite", ["hmmt_feb_2025", "hmmt_feb_2024", "hmmt_nov_2025"])
def test_hmmt_ids_are_problem_idx_and_extra_columns_are_ignored(suite):
    tasks = make_loader(suite, DATA).load()
    assert len(tasks) == 30
    assert [t.id for t in tasks] == [str(i) for i in range(1, 31)]
    assert all(t.grader == "math" and t.reference["answer"] for t in tasks)
    assert make_loader(suite, DATA / "hmmt").load()[0].id == "1"  # the competition folder's parent works too


@needs_data
def test_hmmt_list_answers_and_problem_types(tmp_path):
    tasks = {t.id: t for t in MathArena(DATA / "hmmt" / "hmmt_feb_2025").load()}
    assert tasks["1"].reference["answer"] == "103"
    assert any(", " in t.reference["answer"] for t in tasks.values())  # a list answer "a, b"
    rows = [{"problem_idx": 7, "problem": "p", "answer": "1, 2", "problem_type": ["Algebra", "Number Theory"],
             "points": 5}]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    [task] = MathArena(path, suite="hmmt_feb_2024").load()
    assert task.id == "7" and task.metadata["category"] == "Algebra, Number Theory"


@needs_data
def test_imo_answerbench_has_400_rows_in_four_categories():
    tasks = IMOAnswerBench(DATA / "imo_answerbench" / "answerbench_v2.csv").load()
    assert len(tasks) == 400
    assert Counter(t.metadata["category"] for t in tasks) == {
        "Algebra": 100, "Combinatorics": 100, "Geometry": 100, "Number theory": 100,
    }
    by_id = {t.id: t for t in tasks}
    assert by_id["imo-bench-algebra-036"].reference["answer"] == r"$Y(x)=A+\frac{B}{x}-x$"
    assert by_id["imo-bench-algebra-001"].metadata["subcategory"]


@needs_data
def test_imo_answerbench_stray_quote_is_repaired(tmp_path):
    text = (DATA / "imo_answerbench" / "answerbench_v2.csv").read_text(encoding="utf-8")
    fixed_at = text.index('\\]\n","$Y(x)=A+')
    broken = text[: fixed_at + 3] + text[fixed_at + 4 :]  # the upstream file: no quote closing the Problem
    path = tmp_path / "answerbench_v2.csv"
    path.write_text(broken, encoding="utf-8")
    with pytest.warns(UserWarning, match="imo-bench-algebra-036"):
        tasks = IMOAnswerBench(path).load()
    assert len(tasks) == 400
    repaired = {t.id: t for t in tasks}["imo-bench-algebra-036"]
    assert repaired.reference["answer"] == r"$Y(x)=A+\frac{B}{x}-x$"
    assert repaired.metadata["category"] == "Algebra"
    assert repaired.prompt.startswith("Find all functions $Y")
    assert "\\]" in repaired.prompt and "$Y(x)=A" not in repaired.prompt
    assert Counter(t.metadata["category"] for t in tasks)["Algebra"] == 100


def test_csv_reader_refuses_records_it_cannot_repair():
    with pytest.raises(UserError, match="record 2 has 1 fields"):
        read_csv_rows("a,b,c\nonly\n")
    rows, repaired = read_csv_rows('a,b\n1,"x, y"\n')
    assert rows == [{"a": "1", "b": "x, y"}] and repaired == []


@needs_data
def test_swebench_partial_file_loads_for_prompting_and_reports_missing_columns():
    loader = SWEBenchVerified(DATA / "swebench_verified" / "test_5cols.jsonl")
    with pytest.warns(UserWarning, match="FAIL_TO_PASS") as caught:
        tasks = loader.load()
    assert len(tasks) == 500
    assert set(loader.missing_columns) == {
        "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS", "version", "environment_setup_commit",
        "hints_text", "created_at", "difficulty",
    }
    assert all(column in str(caught[0].message) for column in loader.missing_columns)
    task = tasks[0]
    assert task.id == "astropy__astropy-12907" and task.grader == "swebench"
    assert "astropy/astropy" in task.prompt and "separability_matrix" in task.prompt
    assert task.reference["instance"]["base_commit"] == "d16bfe05a744909de4b27f5875fe0d4ed41ce607"


def test_missing_required_column_is_named(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    with pytest.raises(UserError, match="problem"):
        BeyondAIME(path).load()


def test_unreachable_hub_is_a_user_error(monkeypatch):
    import datasets

    monkeypatch.delenv("SAO_ENV_DATA", raising=False)

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'ByteDance-Seed/BeyondAIME' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(UserError, match=r"cannot reach the Hugging Face hub for ByteDance-Seed/BeyondAIME .*pass --data PATH"):
        BeyondAIME().load()
    with pytest.raises(UserError, match="MathArena/hmmt_feb_2024"):
        make_loader("hmmt_feb_2024").load()


@needs_data
def test_sao_env_data_is_the_default_local_mirror(monkeypatch, tmp_path):
    monkeypatch.setenv("SAO_ENV_DATA", str(DATA))
    assert [t.id for t in make_loader("beyond_aime").load()] == [t.id for t in make_loader("beyond_aime", DATA).load()]
    monkeypatch.setenv("SAO_ENV_DATA", str(tmp_path))
    with pytest.raises(UserError, match="no data file for suite beyond_aime"):
        make_loader("beyond_aime").load()


def test_unreachable_url_is_a_user_error(monkeypatch):
    import urllib.request

    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(UserError, match=r"cannot reach https://.*answerbench_v2.csv .*pass --data PATH"):
        IMOAnswerBench().load()


def test_data_folder_without_the_suite_file(tmp_path):
    with pytest.raises(UserError, match="no data file for suite beyond_aime"):
        make_loader("beyond_aime", tmp_path).load()
    with pytest.raises(UserError, match="no such file or folder"):
        make_loader("beyond_aime", tmp_path / "missing").load()
