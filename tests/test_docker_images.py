"""The Docker sandbox's parts that need no engine: the image recipe and its tag, the apt mirror it
builds from, the reaper's rule, the scenario key and the configuration hash, one-line errors."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from sao_env.sandbox import images
from sao_env.sandbox.docker_exec import owner_labels, OWNER
from sao_env.sandbox.owner import orphaned, start_time


def test_apt_mirror_reads_deb822_and_one_line_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("# deb http://old.example/debian bookworm main\n")
    (tmp_path / "sources.list.d" / "other.list").write_text(
        "deb [arch=amd64] https://packages.example.com/apt stable main\n")
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\n\nTypes: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n")
    assert images.apt_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    assert images.apt_mirror("trixie", tmp_path) == images.DEFAULT_MIRROR
    (tmp_path / "sources.list").write_text("deb [signed-by=/k.gpg] http://list.example/debian trixie main\n")
    assert images.apt_mirror("trixie", tmp_path) == "http://list.example/debian"


def test_suite_is_the_hosts_debian_codename(tmp_path):
    release = tmp_path / "os-release"
    release.write_text('ID=debian\nVERSION_CODENAME=trixie\n')
    assert images.host_suite(release) == "trixie"
    release.write_text('ID=ubuntu\nVERSION_CODENAME=noble\n')
    assert images.host_suite(release) == images.DEFAULT_SUITE


def test_the_tag_is_the_recipe_hash_and_ignores_the_mirror():
    spec = images.recipe()
    assert spec.tag == f"{images.REPOSITORY}:{spec.digest[:12]}" and "pytest" in dict(spec.python)
    moved = images.Recipe(spec.suite, spec.packages, spec.python, "http://elsewhere.example/debian")
    assert moved.tag == spec.tag
    newer = images.Recipe(spec.suite, spec.packages, (("pytest", "99.0"),) + spec.python[1:], spec.mirror)
    assert newer.tag != spec.tag
    files = dict((rel, path) for path, rel in images._python_files(("pluggy",)))
    assert "pluggy/__init__.py" in files and not any("__pycache__" in rel for rel in files)


def test_the_reaper_takes_only_containers_of_gone_processes_of_this_host():
    assert not orphaned(owner_labels()[OWNER])  # this process runs
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    started = start_time(gone.pid)
    gone.wait()
    assert orphaned(f"{socket.gethostname()}:{gone.pid}:{started}")
    assert not orphaned(f"another-host:{gone.pid}:{started}")  # another machine's process: not ours to judge
    assert not orphaned("") and not orphaned("garbage")


def test_the_sandbox_key_keeps_the_configuration_hash_at_its_default():
    from pydantic import ValidationError

    from sao_env.experiment.config import RunConfig, expand_config, resolve_config
    from sao_env.provenance import config_hash

    docker_config = resolve_config("codebase-drift", "grpo", 0, ["env.sandbox=docker"])
    docker = expand_config(docker_config)
    plain = {**docker, "env": {k: v for k, v in docker["env"].items() if k != "sandbox"}}
    explicit = RunConfig(**{**docker, "env": {**docker["env"], "sandbox": "bubblewrap"}})
    assert docker["env"]["sandbox"] == "docker" and config_hash(docker) != config_hash(plain)
    assert explicit.model_dump(mode="json") == plain  # the default is left out of the dump, so of the hash
    assert RunConfig(**plain).env.sandbox == "bubblewrap"
    with pytest.raises(ValidationError, match="sandbox"):
        RunConfig(**{**docker, "env": {**docker["env"], "sandbox": "podman"}})


def test_without_an_engine_the_images_commands_say_so_in_one_line(tmp_path, monkeypatch, capsys):
    pytest.importorskip("docker", reason="docker SDK not installed (pip install 'sao-env[swe]')")
    from sao_env.cli.app import main
    from sao_env.errors import UserError
    from sao_env.sandbox import Limits, _docker_sandbox

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    assert main(["images", "build"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("sao-env: error: no Docker engine reachable (")
    assert main(["images", "status"]) == 0
    assert capsys.readouterr().out.startswith("engine: none reachable (")
    with pytest.raises(UserError, match="^no Docker engine reachable .*: the Docker sandbox needs one$"):
        _docker_sandbox.__wrapped__(Limits())  # what a run with env.sandbox=docker meets first
