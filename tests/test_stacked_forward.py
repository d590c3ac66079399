"""K models in one stacked forward (sao_env.policy.stacked) against each model alone through the lean path.

The reference is the existing single-model code: ``generate.sample`` and ``generate.sequence_logprobs``.
Equality is exact (``torch.equal``, float ``==``) under the pinned numerics of issue 24; the
comparisons run in a subprocess with the pinned variables when this process is not pinned (they
must be set before torch is imported). Small hand-computed cases of the pieces run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sao_env.policy.stacked import SMALL_M, StackedDecoder, _mask, _spans, sample_many, sequence_logprobs_many

PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2,STRICT", "MKL_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
          "ONEDNN_MAX_CPU_ISA": "AVX2"}


def _models(name: str, k: int, seed: int = 0):
    """k policies of the project's tiny shape with different random weights (moved off the initialisation)."""
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer

    spec = ModelSpec(name=name)
    tok = build_tokenizer(spec)
    out = []
    for i in range(k):
        model = build_policy(spec, tok, seed=seed + i).eval()
        g = torch.Generator().manual_seed(100 + seed + i)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
        out.append(model)
    return out, tok


def _prompts(sizes_lengths, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [[torch.randint(4, 99, (int(n),), generator=g).tolist() for n in lengths] for lengths in sizes_lengths]


def _frequent_token(model, prompt) -> int:
    """A token the model samples often, used as EOS so that rows finish at many different steps."""
    from sao_env.policy.generate import row_key, sample

    (s,) = sample(model, [prompt], row_keys=[row_key(0)], max_new_tokens=40, eos_token_id=-1, pad_token_id=0)
    return max(set(s.token_ids), key=s.token_ids.count)


def comparisons() -> dict:
    """Every comparison of stacked against alone, as plain values (run under the pin)."""
    from sao_env.policy.generate import row_key, sample, sequence_logprobs

    torch.set_num_threads(1)
    out: dict = {"capability": torch.backends.cpu.get_cpu_capability(), "sample": [], "logprobs": [], "grads": []}
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(512, 96, generator=g), torch.randn(64, 96, generator=g)
    ref = torch.nn.functional.linear(x, w)  # the first rows of a 64-row product against products of m rows
    out["small_m"] = {str(m): torch.equal(torch.nn.functional.linear(x[:m], w), ref[:m]) for m in (1, 2, 3, 4, 5, 8, 32)}
    cases = [  # (architecture, per-model prompt lengths, temperature, top_p)
        ("tiny-qwen2", [[38, 39, 39], [39, 38, 39, 39, 38], [39] * 8], 1.0, 1.0),  # style-drift: one prompt length
        ("tiny-qwen2", [[10], [5, 30], [20, 40, 33, 21, 40, 7]], 1.0, 1.0),  # three lengths: three prefill groups
        ("tiny-qwen2", [[12, 12], [25, 9, 16, 16], [12, 3, 12]], 0.7, 0.9),  # tempered nucleus sampling
        ("tiny-qwen2", [[15, 15, 15], [15], [15, 15, 15, 15, 15]], 0.0, 1.0),  # greedy
        ("tiny-llama", [[14, 18, 18, 18, 5], [18, 18, 18]], 1.0, 1.0),  # no projection biases
    ]
    for c, (name, lengths, temperature, top_p) in enumerate(cases):
        models, tok = _models(name, len(lengths), seed=10 * c)
        prompts = _prompts(lengths, seed=c)
        eos = _frequent_token(models[0], prompts[0][0])
        keys = [[row_key(c, k, i) for i in range(len(p))] for k, p in enumerate(prompts)]
        kw = dict(max_new_tokens=24, eos_token_id=eos, pad_token_id=tok.pad_token_id, temperature=temperature, top_p=top_p)
        together = sample_many(models, prompts, row_keys=keys, **kw)
        for k, model in enumerate(models):
            alone = sample(model, prompts[k], row_keys=keys[k], **kw)
            out["sample"].append({
                "case": c, "model": k,
                "tokens": all(a.token_ids == b.token_ids for a, b in zip(alone, together[k])),
                "logps": all(a.logps == b.logps for a, b in zip(alone, together[k])),
                "finished": [a.finished for a in alone] == [b.finished for b in together[k]],
                "lengths": [len(a.token_ids) for a in alone],
            })
    shapes = [[(8, 50), (3, 44), (6, 63)], [(2, 2), (5, 30), (5, 30)], [(6, 40), (6, 40), (6, 40)]]
    for c, batch_shapes in enumerate(shapes):  # (2, 2): a pass of 2 rows, under SMALL_M: computed alone
        models, tok = _models("tiny-qwen2", len(batch_shapes), seed=50 + c)
        batches = []
        for k, (b, t) in enumerate(batch_shapes):
            g = torch.Generator().manual_seed(1000 * c + k)
            tokens = torch.randint(4, 99, (b, t), generator=g)
            attention = torch.ones(b, t, dtype=torch.long)
            for i in range(1, b, 2):  # right padding as collate() builds it
                cut = int(torch.randint(max(2, t // 2), t + 1, (1,), generator=g))
                attention[i, cut:], tokens[i, cut:] = 0, tok.pad_token_id
            batches.append((tokens, attention))
        with torch.no_grad():
            many = sequence_logprobs_many(models, batches)
            for k, model in enumerate(models):
                logp, entropy = sequence_logprobs(model, *batches[k])
                out["logprobs"].append({"case": c, "model": k, "logp": torch.equal(logp, many[k][0]),
                                        "entropy": torch.equal(entropy, many[k][1])})
        for m in models:
            m.zero_grad()
        many = sequence_logprobs_many(models, batches)
        sum((logp * att).sum() for (logp, _), (_, att) in zip(many, batches)).backward()
        stacked_grads = [[p.grad.clone() for p in m.parameters()] for m in models]
        for k, model in enumerate(models):
            model.zero_grad()
            logp, _ = sequence_logprobs(model, *batches[k])
            (logp * batches[k][1]).sum().backward()
            pairs = list(zip(stacked_grads[k], [p.grad for p in model.parameters()]))
            out["grads"].append({
                "case": c, "model": k, "logp": torch.equal(logp, many[k][0].detach()),
                "equal": sum(torch.equal(a, b) for a, b in pairs), "count": len(pairs),
                "relative": max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in pairs),
            })
    return out


@pytest.fixture(scope="module")
def results() -> dict:
    if all(os.environ.get(k) == v for k, v in PINNED.items()):
        return comparisons()
    env = {**os.environ, **PINNED, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[1]),
                                                                     os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_comparisons_ran_under_the_pin(results):
    assert results["capability"] == "AVX2"


def test_each_model_samples_alone_what_it_samples_stacked(results):
    rows = results["sample"]
    assert len(rows) == 3 + 3 + 3 + 3 + 2
    for row in rows:
        assert row["tokens"] and row["logps"] and row["finished"], row
    lengths = [n for row in rows for n in row["lengths"]]
    assert min(lengths) < 8 and len(set(lengths)) >= 8  # rows finished at many different steps (EOS is frequent)
    # models dropped below SMALL_M running rows while others kept more (the extra small products)
    assert any(sum(n < 24 for n in row["lengths"]) >= 1 and len(row["lengths"]) >= SMALL_M for row in rows)


def test_stacked_log_probabilities_equal_each_models_own(results):
    assert len(results["logprobs"]) == 9
    for row in results["logprobs"]:
        assert row["logp"] and row["entropy"], row


def test_stacked_gradients_are_exact_for_equal_shapes_and_close_when_padded(results):
    """Same (B, T) for every model: no padding, the same products, the same bits. Padded batches
    reduce the weight gradients over more (zero) rows, which changes the BLAS blocking: measured
    relative differences ~1e-7 to 5e-7."""
    for row in results["grads"]:
        assert row["logp"], row
        if row["case"] == 2:
            assert row["equal"] == row["count"], row
        else:
            assert row["relative"] < 1e-5, row
    padded = [row for row in results["grads"] if row["case"] == 0]
    assert any(row["equal"] < row["count"] for row in padded)  # the limit is real, not hypothetical


def test_linear_gives_each_model_its_own_product():
    """Two models, one row of two features: x = [1, 2].
    model 0: W = [[1, 0], [0, 1]], b = [10, 20]  ->  [1 + 10, 2 + 20] = [11, 22]
    model 1: W = [[2, 1], [0, 3]], b = [0, -1]   ->  [2*1 + 1*2, 3*2 - 1] = [4, 5]"""
    x = torch.tensor([[1.0, 2.0]]).expand(2, 1, 1, 2)
    w = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[2.0, 1.0], [0.0, 3.0]]])
    b = torch.tensor([[10.0, 20.0], [0.0, -1.0]])[:, None]
    out = StackedDecoder.linear(x, (w, b), [1, 1])
    assert out.tolist() == [[[[11.0, 22.0]]], [[[4.0, 5.0]]]]
    # a model with 1 running row among 5-row blocks gets its own 1-row product: same values here
    x5 = torch.arange(20.0).view(2, 5, 1, 2)
    out5 = StackedDecoder.linear(x5, (w, None), [5, 1])
    assert out5[1, 0, 0].tolist() == [2 * 10.0 + 11.0, 3 * 11.0]  # row [10, 11] of model 1


def test_small_products_round_differently_which_is_why_small_m_exists(results):
    """Under the pinned BLAS a product of M < SMALL_M rows takes another path than M >= SMALL_M; all
    M >= SMALL_M agree row for row. If this fails, re-measure SMALL_M (bench/bench_stacked.py, section 1)."""
    same = results["small_m"]
    assert all(same[str(m)] for m in (SMALL_M, 5, 8, 32)), same
    assert not any(same[str(m)] for m in range(1, SMALL_M)), same


def test_mask_is_the_lean_decoders():
    """A decode step (past 2 keys, one query) where key 0 is padding: [-inf, 0, 0]; the query's own key
    (the last) is always allowed. No padding and no past: no mask at all (causal by flag)."""
    mask = _mask(torch.tensor([[False, True, False]]), past=2, T=1, dtype=torch.float32)
    assert mask.tolist() == [[[[float("-inf"), 0.0, 0.0]]]]
    assert _mask(torch.ones(2, 3, dtype=torch.bool), past=0, T=3, dtype=torch.float32) is None
    prefill = _mask(torch.tensor([[False, True, True]]), past=0, T=3, dtype=torch.float32)
    inf = float("-inf")  # a padded query sees itself only; real queries see real keys up to themselves
    assert prefill.tolist() == [[[[0.0, inf, inf], [inf, 0.0, inf], [inf, 0.0, 0.0]]]]


def test_spans_group_equal_neighbours():
    assert _spans([39, 39, 40, 41, 41]) == [(0, 2), (2, 3), (3, 5)]
    assert _spans([7]) == [(0, 1)]


def test_bad_inputs_are_refused():
    (a, b), _ = _models("tiny-qwen2", 2)
    from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer

    spec = ModelSpec(hidden_size=48)
    other = build_policy(spec, build_tokenizer(spec))
    with pytest.raises(ValueError, match="hidden_size"):
        StackedDecoder([a, other])
    with pytest.raises(ValueError, match="row_keys"):
        sample_many([a, b], [[[5, 6]], [[5, 6]]], row_keys=[[1], [1, 2]], max_new_tokens=2, eos_token_id=2, pad_token_id=0)
    with pytest.raises(ValueError, match="2 models, 1 batches"):
        sequence_logprobs_many([a, b], [(torch.ones(1, 3, dtype=torch.long),) * 2])


if __name__ == "__main__":
    print(json.dumps(comparisons()))
