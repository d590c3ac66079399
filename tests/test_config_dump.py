"""``OmitDefaults``: keys named in ``omit_at_default`` leave the dump only while they hold their defaults, so a
key added later keeps the hashes of configurations written before it; the three configuration models that
need it (agent hyper-parameters, model spec, source parameters) share this one base."""

from __future__ import annotations

import hashlib
import json
from typing import ClassVar

from sao_env.agents.base import AgentConfig
from sao_env.config_dump import OmitDefaults
from sao_env.policy.model import ModelSpec
from sao_env.scenario import EvalSpec
from sao_env.tasks.variants import SourceParams


class Old(OmitDefaults):
    lr: float = 1e-4


class New(OmitDefaults):
    omit_at_default: ClassVar[tuple[str, ...]] = ("micro", "not_a_field")
    lr: float = 1e-4
    micro: int | None = None


def sha(model) -> str:
    return hashlib.sha256(json.dumps(model.model_dump(), sort_keys=True).encode()).hexdigest()


def test_a_key_at_its_default_leaves_the_dump_and_the_hash_stays():
    assert New().model_dump() == {"lr": 1e-4} and sha(New()) == sha(Old())
    assert New(micro=8).model_dump() == {"lr": 1e-4, "micro": 8} and sha(New(micro=8)) != sha(Old())
    assert json.loads(New(lr=2e-4).model_dump_json()) == {"lr": 2e-4}


def test_the_configuration_models_use_it():
    assert issubclass(AgentConfig, OmitDefaults) and issubclass(ModelSpec, OmitDefaults)
    assert issubclass(SourceParams, OmitDefaults)
    assert "micro_batch_tokens" not in AgentConfig().model_dump()
    assert AgentConfig(micro_batch_tokens=512).model_dump()["micro_batch_tokens"] == 512
    assert set(ModelSpec(name="tiny-qwen2").model_dump()).isdisjoint({"device", "precision"})
    assert ModelSpec(name="tiny-qwen2", device="auto").model_dump()["device"] == "auto"
    assert SourceParams().model_dump() == {} and SourceParams(pool=4).model_dump() == {"pool": 4}
    assert issubclass(EvalSpec, OmitDefaults) and "version" not in EvalSpec().model_dump()  # version 3 kept v2 hashes
    assert EvalSpec(version=2).model_dump()["version"] == 2 and EvalSpec(version=3).model_dump()["version"] == 3
