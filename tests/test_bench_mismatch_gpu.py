"""bench/bench_mismatch_gpu.py: its scoring pass is the harness's own (sequence_logprobs) on a real tiny
policy, and its report is the gap, k3 and band shares of a hand-built case."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from conftest import load_bench
from sao_env.policy.generate import sequence_logprobs
from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_mismatch_gpu")


def test_the_scoring_pass_is_the_trainers_log_probs(bench):
    spec = ModelSpec(name="tiny-qwen2")
    model = build_policy(spec, build_tokenizer(spec), seed=3).eval()
    tokens = torch.tensor([[5, 9, 12, 7, 3], [8, 4, 6, 0, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    mine = bench._logprobs(model, tokens, attention)
    with torch.no_grad():
        theirs, _ = sequence_logprobs(model, tokens, attention)
    real = attention.bool().numpy()
    assert mine[:, 0].tolist() == [0.0, 0.0]
    np.testing.assert_allclose(mine[real], theirs.double().numpy()[real], atol=1e-5)


def test_report_by_hand(bench, tmp_path):
    """Two episodes, three action tokens; the engine's log-probs are the trainer's minus 0.1, 0 and
    +ln 8 (ratio 8: above the band [0.7, 6]); a fourth token is not an action and must not count."""
    trainer = np.array([[0.0, -1.0, -2.0, -0.5], [0.0, -0.3, -0.7, 0.0]])
    engine = trainer + np.array([[0.0, 0.1, 0.0, 5.0], [0.0, -math.log(8.0), 0.0, 0.0]])
    actions = np.array([[False, True, True, False], [False, True, False, False]])
    np.savez(tmp_path / "episodes.npz", tokens=np.zeros((2, 4), dtype=np.int64), attention=np.ones((2, 4)),
             actions=actions, sampled=trainer, trainer=trainer, rewards=np.zeros(2))
    np.savez(tmp_path / "engines.npz", cuda_bf16=engine)
    (tmp_path / "prepared.json").write_text(json.dumps({"dis_band": [0.3, 5.0], "episodes": 2, "parameters": 10}))
    (tmp_path / "measured.json").write_text(json.dumps({"device": "hand", "torch": "x"}))
    text = bench.report(tmp_path)
    row = next(line for line in text.splitlines() if line.startswith("| engine: cuda_bf16"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    gaps = np.array([0.1, 0.0, math.log(8.0)])  # |log r| per action token, r = trainer / engine
    log_r = np.array([-0.1, 0.0, math.log(8.0)])
    k3 = np.mean(np.exp(log_r) - 1 - log_r)
    assert cells[1] == f"{gaps.mean():.2e}" and cells[2] == f"{gaps.max():.2e}" and cells[3] == f"{k3:.2e}"
    ess = np.exp(log_r).sum() ** 2 / (np.exp(log_r) ** 2).sum() / 3
    assert cells[4] == f"{ess:.6f}" and cells[5] == "0.0000" and cells[6] == f"{1 / 3:.4f}"
    own = next(line for line in text.splitlines() if line.startswith("| sampler's own record"))
    assert own.split("|")[2].strip() == "0.00e+00" and (tmp_path / "report.md").read_text() == text
