"""What the Docker test files share: the engine check at import and the sandbox image."""

from __future__ import annotations

import os

import pytest

from sao_env.errors import UserError
from sao_env.sandbox.docker_exec import engine_problem


def require_engine() -> None:
    """Skip the calling module where no engine answers, unless one was expected (SAO_ENV_DOCKER=1)."""
    problem = engine_problem()
    if problem is not None:
        if os.environ.get("SAO_ENV_DOCKER") == "1":
            pytest.fail(f"an engine was expected (SAO_ENV_DOCKER=1) but none answers: {problem}", pytrace=False)
        pytest.skip(f"no Docker engine reachable ({problem}); make test starts one as root on Debian",
                    allow_module_level=True)


def built_image() -> str:
    """The sandbox image's tag; where it cannot be built here (no mmdebstrap) the tests skip with the
    reason, unless an engine and the image were expected (SAO_ENV_DOCKER=1)."""
    from sao_env.sandbox.images import ensure_image

    try:
        return ensure_image()
    except UserError as err:
        if os.environ.get("SAO_ENV_DOCKER") == "1":
            raise
        pytest.skip(f"the sandbox image cannot be built here: {err}")
