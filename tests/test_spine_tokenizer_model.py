"""The policy seam: the character tokenizer is a real HF tokenizer, the tiny models are real HF
architectures, and ``sample`` records exactly the log-probabilities the learner recomputes."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from sao_env.envs.text_env import load_scenario
from sao_env.policy.generate import sample, sequence_logprobs
from sao_env.policy.model import ModelSpec, build_policy, build_tokenizer, num_parameters
from sao_env.policy.tokenizer import build_char_tokenizer
from sao_env.policy.warmstart import supervised_warm_start
from sao_env.scenario import WarmStartSpec
from sao_env.tasks.tokens import CHARSET

PRINTABLE = "".join(chr(c) for c in range(32, 127)) + "\n"
"""Every printable ASCII character and the newline, written out independently of the package."""


# -- tokenizer ------------------------------------------------------------------------------------


def test_char_tokenizer_is_one_token_per_character():
    tok = build_char_tokenizer()
    assert isinstance(tok, PreTrainedTokenizerFast)
    assert set(PRINTABLE) == set(CHARSET)
    ids = tok(PRINTABLE, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(PRINTABLE)
    assert len(set(ids)) == len(PRINTABLE)  # no two characters share an id
    assert tok.unk_token_id not in ids
    specials = {tok.pad_token_id, tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}
    assert len(specials) == 4 and not specials & set(ids)
    assert tok.decode(ids) == PRINTABLE
    # Spaces and newlines are tokens of their own, never merged or stripped.
    assert tok("  a\n\nb ", add_special_tokens=False)["input_ids"] == [tok.convert_tokens_to_ids(c) for c in "  a\n\nb "]


def test_char_tokenizer_round_trips_through_save_pretrained(tmp_path):
    tok = build_char_tokenizer()
    text = PRINTABLE + "1+2=? styles:boxed,tag\n\\boxed{3}" + PRINTABLE[::-1]
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert loaded(text, add_special_tokens=False)["input_ids"] == ids
    assert len(ids) == len(text)
    assert loaded.decode(ids) == text
    assert len(loaded) == len(tok)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "unk_token_id"):
        assert getattr(loaded, name) == getattr(tok, name), name
    assert loaded.decode(ids + [loaded.eos_token_id], skip_special_tokens=True) == text


def test_char_tokenizer_keeps_left_padding_after_reload(tmp_path):
    # build_char_tokenizer pads on the left (decoder-only generation); checkpoints/final and the
    # warm-start cache are read back with AutoTokenizer, so the setting must survive the round trip.
    tok = build_char_tokenizer()
    assert tok.padding_side == "left"
    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.padding_side == "left"
    batch = loaded(["1+2=?", "10+20=?"], add_special_tokens=False, padding=True)["input_ids"]
    assert batch[0][0] == loaded.pad_token_id


# -- models ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-llama"])
def test_tiny_policy_is_small_and_seeded(name):
    spec = ModelSpec(name=name)
    tok = build_tokenizer(spec)
    a, b, c = build_policy(spec, tok, seed=0), build_policy(spec, tok, seed=0), build_policy(spec, tok, seed=1)
    assert type(a).__name__.lower().startswith(name.split("-")[1])  # Qwen2ForCausalLM / LlamaForCausalLM
    assert 0 < num_parameters(a) < 5_000_000
    assert a.config.vocab_size == len(tok)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)
    # Building a model does not touch the global RNG stream (fork_rng).
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_policy(spec, tok, seed=5)
    assert torch.equal(torch.rand(3), expected)


# -- sampling -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    spec = ModelSpec(name="tiny-qwen2")
    tok = build_tokenizer(spec)
    model = build_policy(spec, tok, seed=0)
    # A random init is almost uniform and repeats one token; a few supervised steps on the
    # scenario's demonstrations give peaked, varied distributions and real end-of-sequence tokens.
    torch.set_num_threads(1)
    supervised_warm_start(model, tok, load_scenario("style-drift"), WarmStartSpec(steps=40, batch_size=16),
                          show_progress=False)
    model.eval()
    return model, tok


PROMPTS = ["1+2=?\n", "37+45=? styles:boxed,sentence\n", "9-9=? styles:tag\n<answer>"]


def _prompt_ids(tok):
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    assert len({len(i) for i in ids}) == len(ids)  # different lengths: the batch is left-padded
    return ids


def _generate(model, tok, prompts, seed=0, **kwargs):
    kwargs.setdefault("max_new_tokens", 10)
    kwargs.setdefault("eos_token_id", tok.eos_token_id)
    return sample(model, prompts, pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(seed), **kwargs)


def test_recorded_logps_equal_sequence_logprobs(tiny):
    model, tok = tiny
    prompts = _prompt_ids(tok)
    samples = _generate(model, tok, prompts, max_new_tokens=12)
    assert all(len(s.token_ids) == len(s.logps) > 0 for s in samples)
    # Right-padded batch for the learner's recomputation.
    rows = [p + list(s.token_ids) for p, s in zip(prompts, samples)]
    width = max(len(r) for r in rows)
    tokens = torch.full((len(rows), width), tok.pad_token_id)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        tokens[i, : len(r)], attention[i, : len(r)] = torch.tensor(r), 1
    with torch.no_grad():
        logp, entropy = sequence_logprobs(model, tokens, attention)
    for i, (p, s) in enumerate(zip(prompts, samples)):
        recomputed = logp[i, len(p) : len(p) + len(s.token_ids)]
        torch.testing.assert_close(recomputed, torch.tensor(s.logps), rtol=0, atol=1e-5)
        # And one row at a time (no padding at all).
        with torch.no_grad():
            single, _ = sequence_logprobs(model, torch.tensor([rows[i]]), torch.ones(1, len(rows[i]), dtype=torch.long))
        torch.testing.assert_close(single[0, len(p):], torch.tensor(s.logps), rtol=0, atol=1e-5)
    assert torch.all(entropy[attention.bool()] >= 0)
    assert torch.all(logp[:, 0] == 0)


def test_recorded_logps_follow_temperature_and_top_p(tiny):
    model, tok = tiny
    prompt = _prompt_ids(tok)[1]
    for temperature, top_p in [(0.5, 1.0), (1.0, 0.5), (2.0, 0.9)]:
        (s,) = _generate(model, tok, [prompt], temperature=temperature, top_p=top_p, max_new_tokens=6)
        row = torch.tensor([prompt + list(s.token_ids)])
        with torch.no_grad():
            logits = model(input_ids=row).logits[0, len(prompt) - 1 : -1].float() / temperature  # (N, V)
        logp = torch.log_softmax(logits, -1)
        for n, token in enumerate(s.token_ids):
            if top_p < 1.0:  # the nucleus: smallest set of most likely tokens with mass >= top_p
                probs, order = logp[n].exp().sort(descending=True)
                keep = order[: int((probs.cumsum(0) < top_p).sum()) + 1]
                assert token in keep.tolist()
                expected = logp[n, token] - torch.logsumexp(logp[n, keep], 0)
            else:
                expected = logp[n, token]
            assert abs(s.logps[n] - expected.item()) < 1e-4, (temperature, top_p, n)


def test_greedy_is_deterministic_and_argmax(tiny):
    model, tok = tiny
    prompts = _prompt_ids(tok)
    a = _generate(model, tok, prompts, seed=0, temperature=0)
    b = _generate(model, tok, prompts, seed=99, temperature=0)
    assert a == b
    for p, s in zip(prompts, a):
        row = torch.tensor([p + list(s.token_ids)])
        with torch.no_grad():
            logits = model(input_ids=row).logits[0, len(p) - 1 : -1]
        assert logits.argmax(-1).tolist()[: len(s.token_ids)] == list(s.token_ids)
        # temperature 0 records the temperature-1 log-probabilities of the argmax tokens
        expected = torch.log_softmax(logits.float(), -1).max(-1).values
        torch.testing.assert_close(torch.tensor(s.logps), expected[: len(s.token_ids)], rtol=0, atol=1e-5)


def test_sampling_is_deterministic_for_a_generator_seed(tiny):
    model, tok = tiny
    prompts = _prompt_ids(tok)
    a = _generate(model, tok, prompts, seed=7, max_new_tokens=16)
    b = _generate(model, tok, prompts, seed=7, max_new_tokens=16)
    c = _generate(model, tok, prompts, seed=8, max_new_tokens=16)
    assert a == b
    assert [s.token_ids for s in a] != [s.token_ids for s in c]


def test_eos_ends_rows(tiny):
    model, tok = tiny
    prompts = _prompt_ids(tok)
    samples = _generate(model, tok, prompts * 4, seed=1, max_new_tokens=24)
    finished = [s for s in samples if s.finished]
    assert finished, "the warm-started model should end some answers"
    for s in samples:
        eos_at = [i for i, t in enumerate(s.token_ids) if t == tok.eos_token_id]
        if s.finished:
            assert eos_at == [len(s.token_ids) - 1]  # exactly one EOS, the last token
        else:
            assert eos_at == [] and len(s.token_ids) == 24
        assert tok.pad_token_id not in s.token_ids


def test_eos_stops_only_its_row(tiny):
    model, tok = tiny
    prompts = _prompt_ids(tok)
    unused = tok.bos_token_id  # never sampled by this model in greedy mode below (checked)
    base = _generate(model, tok, prompts, temperature=0, eos_token_id=unused, max_new_tokens=10)
    assert all(unused not in s.token_ids for s in base)
    assert all(len(s.token_ids) == 10 and not s.finished for s in base)
    # Make row 0's 4th greedy token the end-of-sequence token (when it did not occur before).
    row0 = base[0].token_ids
    k = next(k for k in range(1, 10) if row0[k] not in row0[:k])
    stop = row0[k]
    out = _generate(model, tok, prompts, temperature=0, eos_token_id=stop, max_new_tokens=10)
    assert out[0].token_ids == row0[: k + 1] and out[0].finished
    assert out[0].logps == base[0].logps[: k + 1]
    for s_base, s in zip(base[1:], out[1:]):
        if stop in s_base.token_ids:
            j = s_base.token_ids.index(stop)
            assert s.token_ids == s_base.token_ids[: j + 1] and s.finished
        else:
            assert s.token_ids == s_base.token_ids and not s.finished
        assert s.logps == pytest.approx(s_base.logps[: len(s.token_ids)], abs=1e-5)
