"""Issue #50, fifth wave, against a real Docker engine: a command that exits 128 is reported as 128, not as 0
(the planted ``returncode > 128`` -> ``>= 128`` in ``DockerExecutor.run`` / ``exec_in``, which turns the
shell convention's 128 + N into -N, made ``exit 128`` a success). ``test_planted_bugs_wave5.py`` checks the
same with a fake engine client, so the values are pinned where no engine runs too.

`make test` provides the engine (.ci/with-docker) and sets SAO_ENV_DOCKER=1, under which a missing engine
fails these tests; elsewhere they skip with one line saying why.
"""

from __future__ import annotations

import pytest

from docker_support import built_image, require_engine  # noqa: E402

require_engine()

from sao_env.sandbox import Limits  # noqa: E402
from sao_env.sandbox.docker_exec import DockerExecutor, owner_labels  # noqa: E402
from sao_env.sandbox.images import client  # noqa: E402


@pytest.fixture(scope="module")
def image() -> str:
    return built_image()


@pytest.mark.parametrize("status, expected", [(128, 128), (0, 0), (3, 3)])
def test_a_fresh_container_exiting_128_is_reported_as_128(image, tmp_path, status, expected):
    """``exit 128`` is an exit status of 128 (no signal: the signal convention starts at 129)."""
    executor = DockerExecutor(image, limits=Limits(), client=client())
    result = executor.run(["sh", "-c", f"echo ran; exit {status}"], workdir=tmp_path, timeout_s=30)
    assert (result.returncode, result.timed_out, result.stdout) == (expected, False, "ran\n")


def test_a_signal_and_exit_128_inside_a_running_container(image, tmp_path):
    """In an existing container: ``exit 128`` -> 128; a shell killing itself with SIGKILL (9) exits 137
    -> -9; a plain failure -> 1."""
    engine = client()
    container = engine.containers.run(image, ["sleep", "120"], detach=True, labels=owner_labels(),
                                      network_mode="none")
    try:
        executor = DockerExecutor(image, limits=Limits(), client=engine)
        got = [executor.exec_in(container, ["sh", "-c", script], timeout_s=20).returncode
               for script in ("exit 128", "kill -9 $$", "exit 1")]
        assert got == [128, -9, 1]
    finally:
        container.remove(force=True)
