"""The warm start's batch prefetching changes nothing but when batches are made."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from sao_env.policy.warmstart import _prefetched


def test_prefetched_items_are_made_in_order_from_one_stateful_stream():
    rng = np.random.default_rng(7)
    made_on: set[str] = set()

    def make(step: int):
        made_on.add(threading.current_thread().name)
        return step, rng.integers(1 << 30)

    expected_rng = np.random.default_rng(7)
    assert list(_prefetched(make, 50)) == [(i, expected_rng.integers(1 << 30)) for i in range(50)]
    assert made_on == {"warm-start-batches"}


def test_an_error_while_making_a_batch_is_raised_at_that_batch():
    def make(step: int):
        if step == 3:
            raise ValueError("bad demonstration")
        return step

    seen = []
    with pytest.raises(ValueError, match="bad demonstration"):
        for item in _prefetched(make, 10):
            seen.append(item)
    assert seen == [0, 1, 2]


def test_a_consumer_that_stops_early_leaves_no_thread_behind():
    before = threading.active_count()
    batches = _prefetched(lambda step: step, 1000, depth=2)
    assert [next(batches) for _ in range(3)] == [0, 1, 2]
    batches.close()
    assert threading.active_count() == before


def test_warm_start_weights_are_those_of_drawing_batches_inline(monkeypatch):
    import torch

    from sao_env.envs.text_env import load_scenario
    from sao_env.policy import warmstart
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer
    from sao_env.scenario import WarmStartSpec

    scenario, spec = load_scenario("style-drift"), WarmStartSpec(steps=6, batch_size=8)

    def trained() -> dict[str, torch.Tensor]:
        tokenizer = build_tokenizer(ModelSpec())
        model = build_policy(ModelSpec(), tokenizer, seed=0)
        warmstart.supervised_warm_start(model, tokenizer, scenario, spec, show_progress=False)
        return model.state_dict()

    prefetched = trained()
    monkeypatch.setattr(warmstart, "_prefetched", lambda make, steps: (make(step) for step in range(steps)))
    inline = trained()
    assert all(torch.equal(prefetched[k], inline[k]) for k in inline)
