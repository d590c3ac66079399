"""Pinned dataset revisions: every suite names one, the loaders pass it to the hub or the URL, and a
run's provenance records it."""

from __future__ import annotations

import sys
import types

import pytest

from sao_env.benchmarks import loaders
from sao_env.benchmarks.loaders import BeyondAIME, IMOAnswerBench
from sao_env.benchmarks.suites import load_suite
from sao_env.specs import available

from conftest import SHARED_DATA, needs_shared_data


def test_every_suite_names_a_revision_and_urls_name_a_commit():
    for name in available("evals"):
        suite = load_suite(name)
        assert suite.revision, name
        if suite.dataset.startswith("https://"):
            assert "{revision}" in suite.dataset and "/main/" not in suite.dataset, name
            assert suite.revision != "main" and all(c in "0123456789abcdef" for c in suite.revision), name


def test_the_hub_is_asked_for_the_suites_revision(monkeypatch):
    calls = []

    def load_dataset(name, *, split, revision):
        calls.append((name, split, revision))
        return [{"problem": "1+1?", "answer": "2"}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    BeyondAIME().load()
    BeyondAIME(revision="0123abc").load()
    assert calls == [("ByteDance-Seed/BeyondAIME", "test", "main"), ("ByteDance-Seed/BeyondAIME", "test", "0123abc")]


@needs_shared_data
def test_imo_answerbench_reads_the_csv_of_the_pinned_commit(monkeypatch):
    urls = []

    def fetch(url, *, what):
        urls.append(url)
        return (SHARED_DATA / "imo_answerbench" / "answerbench_v2.csv").read_text(encoding="utf-8")

    monkeypatch.setattr(loaders, "fetch_url_text", fetch)
    loader = IMOAnswerBench()
    tasks = loader.load()
    assert urls == ["https://raw.githubusercontent.com/google-deepmind/superhuman/a02069e/imobench/answerbench_v2.csv"]
    assert len(tasks) == 400 and tasks[0].metadata["source"] == urls[0]


def test_an_unreachable_revision_names_it(monkeypatch):
    def load_dataset(name, *, split, revision):
        raise FileNotFoundError(f"Revision '{revision}' does not exist")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(loaders.DataUnreachable, match=r"ByteDance-Seed/BeyondAIME \(revision deadbee; "):
        BeyondAIME(revision="deadbee").load()
