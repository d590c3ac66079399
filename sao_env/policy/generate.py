"""Sampling with a KV cache that records, for every generated token, its sampling log-probability.

The recorded log-probabilities are the ``rollout_logp`` of the DIS loss (SAO, arXiv 2607.07508):
the learner compares them with its own, so they must come from the exact distribution sampled.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel


@dataclass(frozen=True)
class Sample:
    """One generated continuation: token ids (the end-of-sequence token included when emitted)."""

    token_ids: tuple[int, ...]
    logps: tuple[float, ...]
    finished: bool


@torch.no_grad()
def sample(
    model: PreTrainedModel,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    generator: torch.Generator,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> list[Sample]:
    """Sample one continuation per prompt (left-padded batch), stopping at EOS or ``max_new_tokens``.

    ``temperature == 0`` means greedy decoding (log-probabilities are then those of the
    temperature-1 distribution). The log-probability recorded is that of the distribution the
    token was drawn from, after temperature and top-p.
    """
    model.eval()
    device = next(model.parameters()).device
    batch, longest = len(prompts), max(len(p) for p in prompts)
    input_ids = torch.full((batch, longest), pad_token_id, dtype=torch.long)
    attention = torch.zeros((batch, longest), dtype=torch.long)
    for i, p in enumerate(prompts):
        input_ids[i, longest - len(p):] = torch.tensor(p, dtype=torch.long)
        attention[i, longest - len(p):] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)

    tokens_BN = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long)
    logps_BN = torch.zeros((batch, max_new_tokens))
    lengths = torch.full((batch,), max_new_tokens, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool)
    past, cache_arg = None, _cache_argument(model)
    step_ids, step_pos = input_ids, position_ids
    for step in range(max_new_tokens):
        out = model(input_ids=step_ids, attention_mask=attention, position_ids=step_pos,
                    use_cache=True, **{cache_arg: past})
        past = getattr(out, cache_arg)
        logits = out.logits[:, -1, :].float()  # (B, V)
        next_ids, next_logp = _draw(logits, temperature, top_p, generator)
        next_ids = torch.where(done, torch.full_like(next_ids, pad_token_id), next_ids)
        tokens_BN[:, step], logps_BN[:, step] = next_ids.cpu(), next_logp.cpu()
        newly_done = (~done) & (next_ids == eos_token_id)
        lengths[newly_done.cpu()] = step + 1
        done |= newly_done
        if bool(done.all()):
            break
        attention = torch.cat([attention, torch.ones_like(attention[:, :1])], dim=1)
        step_ids = next_ids.unsqueeze(1)
        step_pos = step_pos[:, -1:] + 1
    return [
        Sample(
            token_ids=tuple(tokens_BN[i, : lengths[i]].tolist()),
            logps=tuple(logps_BN[i, : lengths[i]].tolist()),
            finished=bool(done[i]),
        )
        for i in range(batch)
    ]


def _cache_argument(model: PreTrainedModel) -> str:
    """transformers 5 renamed ``past_key_values`` to ``cache``; accept either generation."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _draw(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator):
    if temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        ids = logp.argmax(dim=-1)
        return ids, logp.gather(1, ids[:, None]).squeeze(1)
    logp = torch.log_softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_logp, order = logp.sort(dim=-1, descending=True)
        cumulative = sorted_logp.exp().cumsum(-1)
        drop = cumulative - sorted_logp.exp() >= top_p
        sorted_logp = sorted_logp.masked_fill(drop, float("-inf"))
        logp = torch.full_like(logp, float("-inf")).scatter(1, order, sorted_logp)
        logp = torch.log_softmax(logp, dim=-1)
    ids = torch.multinomial(logp.exp().cpu(), 1, generator=generator).squeeze(1).to(logits.device)
    return ids, logp.gather(1, ids[:, None]).squeeze(1)


def sequence_logprobs(model: PreTrainedModel, tokens_BT: torch.Tensor, attention_BT: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-aligned log-probabilities and entropies: ``logp[b, t] = log p(token t | tokens < t)``.

    Position 0 has no prediction and gets 0. Rows are right-padded; ``attention_BT`` marks real tokens.
    """
    logits = model(input_ids=tokens_BT, attention_mask=attention_BT).logits[:, :-1].float()  # (B, T-1, V)
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, tokens_BT[:, 1:, None]).squeeze(-1)  # (B, T-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)  # (B, T-1)
    zero = torch.zeros_like(logp[:, :1])
    return torch.cat([zero, logp], dim=1), torch.cat([zero, entropy], dim=1)
