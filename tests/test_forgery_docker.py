"""The hostile-patch battery (``forgery_patches``) under the Docker sandbox: every attack grades 0 with
the same reason as under bubblewrap, and the gold patch still grades 1 (test_forgery.py has the
bubblewrap half and the report channel's own tests). Skips with one line where no engine runs."""

from __future__ import annotations

import pytest

from docker_support import built_image, require_engine
from forgery_patches import ATTACKS

require_engine()

from sao_env.sandbox import Limits, docker_sandbox  # noqa: E402
from sao_env.tasks import build_source  # noqa: E402
from sao_env.tasks.forge import grading  # noqa: E402
from test_forgery import TIMEOUT_S, _expect_zero, _gold_files  # noqa: E402


@pytest.fixture(scope="module")
def docker():
    built_image()
    return docker_sandbox(Limits())


@pytest.fixture(scope="module")
def reference():
    return build_source("forge_repo", dict(repo_seed=0, head=0, modules=2)).task(1, phase="p").reference


@pytest.mark.parametrize("name", list(ATTACKS))
def test_every_attack_grades_zero_under_docker(reference, docker, name):
    _expect_zero(reference, name, docker)


def test_the_gold_patch_still_resolves_under_docker(reference, docker):
    verdict = grading.grade_files(reference, _gold_files(reference), timeout_s=TIMEOUT_S, executor=docker)
    assert (verdict.reward, verdict.details["reason"]) == (1.0, "resolved")
    assert set(verdict.details["pass_to_pass"].values()) == {"PASSED"}
