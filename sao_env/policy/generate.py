"""Sampling with a KV cache that records, for every generated token, its sampling log-probability.

The recorded log-probabilities are the ``rollout_logp`` of the DIS loss (SAO, arXiv 2607.07508):
the learner compares them with its own, so they must come from the exact distribution sampled.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from transformers import PreTrainedModel

from sao_env.policy.lean import LeanDecoder, lean_decoder
from sao_env.policy.placement import autocast


@dataclass(frozen=True)
class Sample:
    """One generated continuation: token ids (the end-of-sequence token included when emitted)."""

    token_ids: tuple[int, ...]
    logps: tuple[float, ...]
    finished: bool


@torch.inference_mode()
def sample(
    model: PreTrainedModel,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    generator: torch.Generator | None = None,
    row_keys: Sequence[int] | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> list[Sample]:
    """Sample one continuation per prompt (left-padded batch), stopping at EOS or ``max_new_tokens``.

    Randomness comes either from one shared ``generator`` (``torch.multinomial``; a row's draws then
    depend on the other rows of the batch) or from ``row_keys``: each row draws its token at absolute
    position p from ``uniform(row_key, p)``, a counter-based stream (``row_uniforms``), so a row's
    tokens do not depend on which rows share its batch or on how the batch is split. Rows that have
    finished leave the batch (the lean path), so long and short answers don't cost alike.

    ``temperature == 0`` means greedy decoding (log-probabilities are then those of the
    temperature-1 distribution). The log-probability recorded is that of the distribution the
    token was drawn from, after temperature and top-p.

    The model samples where it lives (a colocated GPU sampler on the learner's device) and in its precision
    (``sao_env.policy.placement``: under bf16 autocast the key/value cache is bfloat16); the counter-based
    draws are the same numbers on any device, compared against the CDF on the model's device.
    """
    if (generator is None) == (row_keys is None):
        raise ValueError("sample() needs exactly one of generator= and row_keys=")
    if row_keys is not None and len(row_keys) != len(prompts):
        raise ValueError(f"{len(row_keys)} row_keys for {len(prompts)} prompts")
    if model.training:
        model.eval()
    lean = lean_decoder(model)
    run = _sample_lean if lean is not None else _sample_hf
    with autocast(model):
        tokens, logps, finished = run(lean or model, prompts, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                                      pad_token_id=pad_token_id, generator=generator, row_keys=row_keys,
                                      temperature=temperature, top_p=top_p)
    return [Sample(tuple(t), tuple(lp), f) for t, lp, f in zip(tokens, logps, finished)]


def row_uniforms(keys: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """Uniform draws in [0, 1), one per (key, counter) pair: SplitMix64 of the key, then of key + counter.

    A pure function of its inputs, so a row's stream is the same in any batch.
    """
    with np.errstate(over="ignore"):
        z = _splitmix64(_splitmix64(keys.astype(np.uint64)) + counters.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def row_key(*parts: int) -> int:
    """A 64-bit stream key from integers (seed, request id, member, ...)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1, np.uint64)[0])


def _splitmix64(z: np.ndarray) -> np.ndarray:
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _sample_lean(lean: LeanDecoder, prompts, *, max_new_tokens, eos_token_id, pad_token_id, generator, row_keys,
                 temperature, top_p):
    """Decode with the lean forward and a preallocated cache; finished rows are dropped from the batch."""
    device = lean.backbone.embed_tokens.weight.device
    batch, longest = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((batch, longest), pad_token_id, dtype=torch.long)
    valid = torch.zeros((batch, longest + max_new_tokens), dtype=torch.bool)
    for i, p in enumerate(prompts):
        input_ids[i, longest - len(p):] = torch.tensor(p, dtype=torch.long)
        valid[i, longest - len(p):longest] = True
    lengths = torch.tensor([len(p) for p in prompts])
    positions = (valid[:, :longest].long().cumsum(-1) - 1).clamp(min=0)
    keys = np.array(row_keys, dtype=np.uint64) if row_keys is not None else None
    cache = lean.new_cache(batch, longest + max_new_tokens,
                           torch.bfloat16 if torch.is_autocast_enabled(device.type) else None)
    rows = torch.arange(batch)  # original index of each row still in the batch
    tokens: list[list[int]] = [[] for _ in range(batch)]
    logps: list[list[float]] = [[] for _ in range(batch)]
    finished = [False] * batch
    step_ids, step_pos = input_ids.to(device), positions.to(device)
    for step in range(max_new_tokens):
        width = cache.length + step_ids.shape[1]
        hidden = lean.hidden(step_ids, position_ids_BT=step_pos, key_valid_BS=valid[:, :width].to(device), cache=cache)
        logits = lean.logits(hidden[:, -1]).float()
        uniforms = None if keys is None else row_uniforms(keys[rows.numpy()], (lengths[rows] + step).numpy())
        next_ids, next_logp = _draw(logits, temperature, top_p, generator, uniforms)
        next_list, logp_list = next_ids.tolist(), next_logp.tolist()
        keep = []
        for j, row in enumerate(rows.tolist()):
            tokens[row].append(next_list[j])
            logps[row].append(logp_list[j])
            if next_list[j] == eos_token_id:
                finished[row] = True
            else:
                keep.append(j)
        if not keep or step == max_new_tokens - 1:
            break
        valid[:, width] = True
        step_ids, step_pos = next_ids[:, None], step_pos[:, -1:] + 1
        if len(keep) < len(rows):
            index = torch.tensor(keep)
            rows, valid, step_ids, step_pos = rows[index], valid[index], step_ids[index], step_pos[index]
            dev_index = index.to(device)
            cache.keys = [_keep_rows(k, dev_index, cache.length) for k in cache.keys]
            cache.values = [_keep_rows(v, dev_index, cache.length) for v in cache.values]
    return tokens, logps, finished


def _keep_rows(cached_BKCD: torch.Tensor, rows: torch.Tensor, length: int) -> torch.Tensor:
    """The cache of the rows still decoding: only the ``length`` filled positions are copied."""
    kept = cached_BKCD.new_empty((len(rows), *cached_BKCD.shape[1:]))
    torch.index_select(cached_BKCD[:, :, :length], 0, rows, out=kept[:, :, :length])
    return kept


def _sample_hf(model: PreTrainedModel, prompts, *, max_new_tokens, eos_token_id, pad_token_id, generator, row_keys,
               temperature, top_p):
    """Decode through transformers' forward and cache (models the lean path does not cover)."""
    device = next(model.parameters()).device
    batch, longest = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((batch, longest), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, longest), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, longest - len(p):] = torch.tensor(p, dtype=torch.long)
        attention[i, longest - len(p):] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    lengths = np.array([len(p) for p in prompts])
    keys = np.array(row_keys, dtype=np.uint64) if row_keys is not None else None

    tokens_BN = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long)
    logps_BN = torch.zeros((batch, max_new_tokens))
    ends = torch.full((batch,), max_new_tokens, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    past, cache_arg = None, _cache_argument(model)
    step_ids, step_pos = input_ids, position_ids
    for step in range(max_new_tokens):
        out = model(input_ids=step_ids, attention_mask=attention, position_ids=step_pos,
                    use_cache=True, **{cache_arg: past})
        past = getattr(out, cache_arg)
        logits = out.logits[:, -1, :].float()  # (B, V)
        uniforms = None if keys is None else row_uniforms(keys, lengths + step)
        next_ids, next_logp = _draw(logits, temperature, top_p, generator, uniforms)
        next_ids = torch.where(done.to(device), torch.full_like(next_ids, pad_token_id), next_ids)
        tokens_BN[:, step], logps_BN[:, step] = next_ids.cpu(), next_logp.cpu()
        newly_done = (~done) & (next_ids.cpu() == eos_token_id)
        ends[newly_done] = step + 1
        done |= newly_done
        if bool(done.all()):
            break
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        step_ids = next_ids.unsqueeze(1)
        step_pos = step_pos[:, -1:] + 1
    return ([tokens_BN[i, : ends[i]].tolist() for i in range(batch)], [logps_BN[i, : ends[i]].tolist() for i in range(batch)],
            done.tolist())


def _cache_argument(model: PreTrainedModel) -> str:
    """transformers 5 renamed ``past_key_values`` to ``cache``; accept either generation."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _draw(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None,
          uniforms: np.ndarray | None):
    """Draw one token per row; returns (ids, log-probabilities under the distribution drawn from)."""
    if temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        ids = logp.argmax(dim=-1)
        return ids, logp.gather(1, ids[:, None]).squeeze(1)
    logp = torch.log_softmax(logits if temperature == 1.0 else logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        cumulative = sorted_logp.exp().cumsum(-1)
        drop = cumulative - sorted_logp.exp() >= top_p
        sorted_logp = sorted_logp.masked_fill(drop, float("-inf"))
        logp = torch.full_like(logp, float("-inf")).scatter(1, order, sorted_logp)
        logp = torch.log_softmax(logp, dim=-1)
    if uniforms is None:
        ids = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(1).to(logits.device)
    else:  # on the logits' device: a (B, V) CDF copied to the CPU every step would cost more than the step
        cdf = logp.double().exp().cumsum(-1)
        u = torch.from_numpy(uniforms).to(cdf.device)[:, None] * cdf[:, -1:]
        ids = torch.searchsorted(cdf, u, right=True).squeeze(1).clamp(max=logp.shape[-1] - 1)
    return ids, logp.gather(1, ids[:, None]).squeeze(1)


def sequence_logprobs(model: PreTrainedModel, tokens_BT: torch.Tensor, attention_BT: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-aligned log-probabilities and entropies: ``logp[b, t] = log p(token t | tokens < t)``.

    Position 0 has no prediction and gets 0. Rows are right-padded; ``attention_BT`` marks real tokens.
    The entropies carry no gradient (a metric). The caller enters the model's precision context
    (``sao_env.policy.placement.autocast``); the log-softmax is taken in float32 either way.
    """
    lean = lean_decoder(model)
    if lean is not None:  # right padding: a causal pass gives every real token the same logits
        logits = lean.logits(lean.hidden(tokens_BT[:, :-1])).float()  # (B, T-1, V)
    else:
        logits = model(input_ids=tokens_BT, attention_mask=attention_BT).logits[:, :-1].float()
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, tokens_BT[:, 1:, None]).squeeze(-1)  # (B, T-1)
    with torch.no_grad():  # a metric: no graph, so the backward does not keep two more (B, T-1, V) tensors
        entropy = -(logp_all.exp() * logp_all).sum(-1)  # (B, T-1)
    zero = torch.zeros_like(logp[:, :1])
    return torch.cat([zero, logp], dim=1), torch.cat([zero, entropy], dim=1)
