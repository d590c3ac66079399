"""Provenance: the code version, package versions and datasets a run records in config.yaml and summary.json."""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess

import pytest
import torch
import transformers
import yaml

from conftest import SHARED_DATA, needs_shared_data
from sao_env import provenance
from sao_env.experiment import expand_config, load_run_config, resolve_config
from sao_env.provenance import code_key, config_hash, datasets_read, package_versions
from sao_env.scenario import Scenario


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(provenance.SOURCE_ROOT), *args], capture_output=True, text=True,
                          check=True).stdout


def test_code_version_is_the_checkout_commit_and_its_dirty_state():
    if not (provenance.SOURCE_ROOT / ".git").exists():
        pytest.skip("not running from a git checkout")
    provenance.code_version.cache_clear()
    head = _git("rev-parse", "HEAD").strip()
    diff = _git("diff", "HEAD", "--binary")
    code = provenance.code_version()
    head_after = _git("rev-parse", "HEAD").strip()
    if head_after != head or _git("diff", "HEAD", "--binary") != diff:
        pytest.skip("the checkout changed while the test read it")
    assert code["git_commit"] == head and code["sao_env"] == "0.1.0"
    assert code["dirty"] is bool(diff)
    assert code["diff_sha256"] == (hashlib.sha256(diff.encode()).hexdigest() if diff else None)


def test_code_key_names_commit_dirty_diff_or_package_version():
    clean = {"git_commit": "0123456789abcdef" * 2 + "01234567", "dirty": False, "diff_sha256": None, "sao_env": "0.1.0"}
    assert code_key(clean) == "0123456789ab"
    dirty = {**clean, "dirty": True, "diff_sha256": "feedbeef" + "0" * 56}
    assert code_key(dirty) == "0123456789ab+dirty.feedbeef"
    assert code_key({**dirty, "diff_sha256": "deadbeef" + "0" * 56}) != code_key(dirty)  # another edit, another key
    assert code_key({"git_commit": None, "dirty": None, "diff_sha256": None, "sao_env": "0.1.0"}) == "sao-env==0.1.0"
    assert code_key(None) == "unknown"
    # The source hash, where recorded, is the key: the commit and its diff are then for people only.
    sourced = {**dirty, "source_sha256": "c0ffee00" * 8}
    assert code_key(sourced) == "src.c0ffee00c0ff"
    assert code_key({**sourced, "git_commit": "f" * 40, "dirty": False}) == "src.c0ffee00c0ff"


def test_source_digest_is_the_hash_of_paths_bytes_and_runtime_versions(tmp_path):
    """The digest by hand: each file as ``path NUL length NUL bytes`` in path order, then the versions."""
    import platform
    from importlib import metadata

    (tmp_path / "sao_env" / "__pycache__").mkdir(parents=True)
    (tmp_path / "sao_env" / "a.py").write_bytes(b"x = 1\n")
    (tmp_path / "sao_env" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"compiled")
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "s.yaml").write_bytes(b"name: s\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_bytes(b"not code of a run")
    versions = {"python": platform.python_version(), **{n: metadata.version(n) for n in ("torch", "transformers", "numpy")}}
    expected = hashlib.sha256(b"sao_env/a.py\x006\x00x = 1\n" + b"envs/s.yaml\x008\x00name: s\n"
                              + provenance.canonical_json(versions).encode()).hexdigest()
    assert provenance.source_digest(tmp_path) == expected
    (tmp_path / "tests" / "t.py").write_bytes(b"edited")  # tests, docs and caches are not part of it
    (tmp_path / "sao_env" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"recompiled")
    assert provenance.source_digest(tmp_path) == expected
    (tmp_path / "envs" / "s.yaml").write_bytes(b"name: t\n")  # a spec is
    assert provenance.source_digest(tmp_path) != expected


def test_package_versions(monkeypatch):
    versions = package_versions()
    assert versions["python"] == platform.python_version()
    assert versions["torch"] == torch.__version__ and versions["transformers"] == transformers.__version__
    assert versions["sao-env"] == "0.1.0" and versions["math-verify"]
    monkeypatch.setattr(provenance, "PACKAGES", ("no-such-distribution-sao",))
    assert package_versions()["no-such-distribution-sao"] is None


def test_config_yaml_and_summary_record_provenance(shrunk_run, shrunk_config):
    run_dir, summary = shrunk_run("sao")
    config = shrunk_config("sao")
    recorded = yaml.safe_load((run_dir / "config.yaml").read_text())
    prov = recorded.pop("provenance")
    # config.yaml is the expanded configuration, and reads back as the same configuration.
    assert recorded == expand_config(config)
    assert expand_config(load_run_config(run_dir)) == recorded
    assert prov["config_hash"] == config_hash(recorded)
    assert prov == summary["provenance"] == json.loads((run_dir / "summary.json").read_text())["provenance"]
    assert prov["code"] == provenance.code_version() and prov["versions"] == package_versions()
    assert prov["datasets"] == []  # style-drift's tasks are generated
    assert summary["agent"] == prov["label"] == "sao" and summary["recipe"] == "sao"


@needs_shared_data
def test_benchmark_stream_records_the_rows_it_read():
    config = resolve_config("benchmark-stream", "sao", 0)
    read = datasets_read(Scenario(config.env))
    suites = {entry["suite"] for entry in read}
    assert {"beyond_aime", "hmmt_feb_2025", "imo_answerbench"} <= suites
    for entry in read:
        assert entry["read_from"].startswith(str(SHARED_DATA)), entry
        digest = hashlib.sha256(open(entry["read_from"], "rb").read()).hexdigest()
        assert entry["file_sha256"] == digest and entry["rows"] > 0 and entry["dataset"]
    imo = next(e for e in read if e["suite"] == "imo_answerbench")
    assert imo["rows"] == 400  # IMO-AnswerBench: 400 problems, every category read
