"""The warm-start cache key follows the demonstrations: the sources a warm start draws from, no others."""

from __future__ import annotations

import numpy as np
import pytest

from sao_env.envs.text_env import load_scenario
from sao_env.policy.model import ModelSpec
from sao_env.policy.warmstart import warm_start_key


def key_of(scenario) -> str:
    return warm_start_key(ModelSpec(), scenario, scenario.spec.warm_start)


def with_phase_params(name: str, phase: int, warm_start: dict | None = None, **params):
    base = load_scenario(name)
    phases = [p.model_dump() for p in base.spec.phases]
    phases[phase]["sources"][0]["params"].update(params)
    overrides = {"phases": phases}
    if warm_start is not None:
        overrides["warm_start"] = warm_start
    return load_scenario(name, overrides)


def test_own_sources_only_no_phase_retrains():
    base = load_scenario("codebase-drift")
    assert base.spec.warm_start.sources is not None
    assert key_of(with_phase_params("codebase-drift", 0, head=5)) == key_of(base)
    assert key_of(with_phase_params("tool-drift", 1, digits=3)) == key_of(load_scenario("tool-drift"))
    assert key_of(with_phase_params("codebase-drift", 1, head=5)) == key_of(base)
    warm = base.spec.warm_start.model_dump()
    warm["sources"][0]["params"]["head"] = 1
    assert key_of(load_scenario("codebase-drift", {"warm_start": warm})) != key_of(base)


def test_listed_phases_only_and_the_same_demonstrations_as_own_sources():
    """``phases: [0]`` with head 0 as phase 0 draws the very demonstrations of ``sources: [head 0]``."""
    base = load_scenario("codebase-drift")
    warm = base.spec.warm_start.model_dump()
    head0 = warm.pop("sources")[0]
    listed = with_phase_params("codebase-drift", 0, warm_start={**warm, "sources": None, "phases": [0]},
                               **head0["params"])
    later = [p.model_dump() for p in listed.spec.phases]
    later[1]["sources"][0]["params"]["head"] = 7
    assert key_of(load_scenario("codebase-drift", {"phases": later, "warm_start": listed.spec.warm_start.model_dump()})) \
        == key_of(listed)
    a, b = np.random.default_rng(0), np.random.default_rng(0)
    for i in range(20):
        (task_a, demo_a), (task_b, demo_b) = listed.demonstration(a, i), base.demonstration(b, i)
        assert (task_a.prompt, task_a.id, demo_a) == (task_b.prompt, task_b.id, demo_b)


def test_every_phase_counts_when_none_is_listed():
    spec = load_scenario("style-drift").spec.warm_start
    assert spec.phases is None and spec.sources is None
    assert key_of(with_phase_params("style-drift", 2, digits=2)) != key_of(load_scenario("style-drift"))


def test_phases_and_sources_together_are_refused():
    warm = load_scenario("codebase-drift").spec.warm_start.model_dump()
    with pytest.raises(Exception, match="phases or sources, not both"):
        load_scenario("codebase-drift", {"warm_start": {**warm, "phases": [0]}})
