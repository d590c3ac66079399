"""One forward pass over K tiny policies of the same architecture: generation and learner log-probabilities.

Independent runs (seeds, recipes of one model shape; issue 24) never share weights, but at the
tiny model's sizes a decode step costs its ~60 operator calls, not its arithmetic
(bench/bench_stacked.py). ``StackedDecoder`` runs K models' ``LeanDecoder`` computation as one:
their parameters stacked along a leading K axis, every projection one batched matrix product
(``torch.baddbmm`` over the K slices, which calls the same BLAS product per slice as ``F.linear``),
the row-wise operations (RMSNorm, rotary, SiLU, log-softmax) over all K models' rows at once, and
attention over all rows that share a key layout.

It is built to give each model bit for bit what that model gives alone through
``sao_env.policy.generate.sample`` / ``sequence_logprobs`` (tests/test_stacked_forward.py, under
pinned numerics). Two kernels are not row-independent, measured under
``ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2,STRICT``, one thread:

- a matrix product with fewer than ``SMALL_M`` = 4 rows takes another BLAS path than one with 4
  or more (M = 1, 2, 3 and M >= 4 give four different roundings; all M >= 4 agree row for row),
  so a model whose own call has M < 4 rows (a decode step with 1-3 rows still running) gets an
  extra product of exactly its M rows;
- attention (``scaled_dot_product_attention``) is batch-independent but not invariant to where a
  row's keys start: shifting a row by left padding that is not a multiple of 8 changes the last
  bits (about 6e-8), and so does padding a causal pass on the right; so attention runs per group
  of models whose own key layout (prompt length, learner sequence length) is the same, each on
  exactly its own window of the shared cache.

Shapes: K models, B rows per model, T query positions, S key positions, H hidden, N heads,
G key/value heads, D head dim, O output features.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from sao_env.policy.generate import Sample, _draw, row_uniforms, sequence_logprobs
from sao_env.policy.lean import KVCache, LeanDecoder, lean_decoder

SMALL_M = 4
"""Matrix products with fewer rows than this round differently from larger ones (measured, module docstring)."""

_SHAPE_FIELDS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "vocab_size", "rms_norm_eps", "tie_word_embeddings")


@dataclass
class _Layer:
    """One block's stacked parameters: weights (K, O, H) seen transposed as (K, H, O); biases (K, 1, O) or None."""

    norm1: torch.Tensor
    norm2: torch.Tensor
    proj: list[tuple[torch.Tensor, torch.Tensor | None]]  # fused: [qkv, o, gate|up, down]; else [q, k, v, o, gate, up, down]


@dataclass
class _Weights:
    embed: torch.Tensor  # (K, V, H)
    layers: list[_Layer]
    norm: torch.Tensor  # (K, H)
    head: tuple[torch.Tensor, torch.Tensor | None]


class StackedDecoder:
    """``LeanDecoder``'s forward for K models of one architecture at once, each model's rows its own.

    Parameters are read from the models at every call without gradient (stacked copies, refreshed
    when a parameter changed) and stacked afresh, differentiably, under gradient, so a backward pass
    fills each model's own ``.grad``.
    """

    def __init__(self, models: Sequence[PreTrainedModel]):
        if not models:
            raise ValueError("StackedDecoder needs at least one model")
        self.models = list(models)
        for m in self.models:
            if not LeanDecoder.supports(m):
                raise ValueError(f"{type(m).__name__} is not a configuration the lean forward reproduces")
        first = self.models[0].config
        for m in self.models[1:]:
            for name in _SHAPE_FIELDS:
                if getattr(m.config, name, None) != getattr(first, name, None):
                    raise ValueError(f"models differ in {name}: {getattr(m.config, name, None)} != {getattr(first, name, None)}")
            if m.config.rope_parameters["rope_theta"] != first.rope_parameters["rope_theta"]:
                raise ValueError("models differ in rope_theta")
        if any(p.dtype != torch.float32 for m in self.models for p in m.parameters()):
            raise ValueError("StackedDecoder runs float32 models only (the lean forward's other norm differs)")
        for m in self.models[1:]:
            if [(p.shape, p.dtype) for p in m.parameters()] != [(p.shape, p.dtype) for p in self.models[0].parameters()]:
                raise ValueError("models differ in their parameters' shapes or dtypes")
        self.leans = [lean_decoder(m) or LeanDecoder(m) for m in self.models]  # the instance sample() uses
        lean = self.leans[0]
        self.num_layers = len(lean.backbone.layers)
        self.num_heads, self.num_kv_heads, self.head_dim = lean.num_heads, lean.num_kv_heads, lean.head_dim
        self.eps = lean.eps
        self.scaling = lean.backbone.layers[0].self_attn.scaling
        self._frozen: _Weights | None = None
        self._frozen_key: tuple = ()

    @property
    def k(self) -> int:
        return len(self.models)

    # -- parameters --------------------------------------------------------------------------
    def _sources(self, lean: LeanDecoder) -> list[torch.Tensor]:
        return list(lean.model.parameters())

    def weights(self, order: Sequence[int], *, fused: bool) -> _Weights:
        """The models' parameters in ``order`` stacked along K; fused (q|k|v, gate|up as ``LeanDecoder``
        without gradient) copies are cached until a parameter changes, unfused ones are differentiable."""
        if fused:
            key = (tuple(order), tuple(p._version for i in order for p in self._sources(self.leans[i])),
                   tuple(id(p) for i in order for p in self._sources(self.leans[i])))
            if key != self._frozen_key:
                with torch.no_grad():
                    self._frozen = self._stack(order, fused=True)
                self._frozen_key = key
            return self._frozen
        return self._stack(order, fused=False)

    def _stack(self, order: Sequence[int], *, fused: bool) -> _Weights:
        leans = [self.leans[i] for i in order]

        def st(get):
            return torch.stack([get(lean) for lean in leans])

        def proj(get_modules):
            modules = [get_modules(lean) for lean in leans]  # per model: the modules whose outputs are concatenated
            w = torch.stack([torch.cat([m.weight for m in ms]) if len(ms) > 1 else ms[0].weight for ms in modules])
            if modules[0][0].bias is None:
                return w, None
            b = torch.stack([torch.cat([m.bias for m in ms]) if len(ms) > 1 else ms[0].bias for ms in modules])
            return w, b[:, None]

        layers = []
        for i in range(len(leans[0].backbone.layers)):
            def layer(lean, i=i):
                return lean.backbone.layers[i]
            a = lambda lean: layer(lean).self_attn  # noqa: E731
            m = lambda lean: layer(lean).mlp  # noqa: E731
            if fused:
                projs = [proj(lambda l: [a(l).q_proj, a(l).k_proj, a(l).v_proj]), proj(lambda l: [a(l).o_proj]),
                         proj(lambda l: [m(l).gate_proj, m(l).up_proj]), proj(lambda l: [m(l).down_proj])]
            else:
                projs = [proj(lambda l, n=n: [getattr(a(l), n)]) for n in ("q_proj", "k_proj", "v_proj", "o_proj")]
                projs += [proj(lambda l, n=n: [getattr(m(l), n)]) for n in ("gate_proj", "up_proj", "down_proj")]
            layers.append(_Layer(st(lambda l: layer(l).input_layernorm.weight),
                                 st(lambda l: layer(l).post_attention_layernorm.weight), projs))
        head = proj(lambda l: [l.model.lm_head])
        return _Weights(st(lambda l: l.backbone.embed_tokens.weight), layers, st(lambda l: l.backbone.norm.weight), head)

    # -- pieces ------------------------------------------------------------------------------
    @staticmethod
    def linear(x_KBTH: torch.Tensor, weight: tuple[torch.Tensor, torch.Tensor | None], live_K: Sequence[int]) -> torch.Tensor:
        """Each model's ``F.linear`` of its rows, bit for bit: one batched product over the K slices
        (M = B*T rows each), plus one over the first ``m`` rows for each row count m whose own call
        would have had M < SMALL_M rows (another BLAS path), taken for the models with that count."""
        K, B, T, H = x_KBTH.shape
        w_KOH, b_K1O = weight
        x = x_KBTH.reshape(K, B * T, H)
        out = _baddbmm(x, w_KOH, b_K1O)
        small = sorted({m for m in live_K if 0 < m != B and (m * T < SMALL_M or B * T < SMALL_M)})
        for m in small:
            pick = torch.tensor([live == m for live in live_K])[:, None, None]
            part = _baddbmm(x[:, : m * T], w_KOH, b_K1O)
            out = torch.cat([torch.where(pick, part, out[:, : m * T]), out[:, m * T :]], dim=1)
        return out.view(K, B, T, -1)

    def _norm(self, x_KBTH: torch.Tensor, weight_KH: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x_KBTH, (x_KBTH.shape[-1],), None, self.eps) * weight_KH[:, None, None]

    # -- forward -------------------------------------------------------------------------------
    def hidden(
        self,
        w: _Weights,
        input_ids_KBT: torch.Tensor,
        position_ids_KBT: torch.Tensor,
        live_K: Sequence[int],
        attention: "Sequence[_AttentionGroup]",
        cache: "_Cache | None" = None,
        fused: bool = True,
    ) -> torch.Tensor:
        """Final normed hidden states (K, B, T, H) of K models (``w`` in that order) on their own rows.

        ``attention`` lists groups of consecutive models with one key layout; each names its window
        of the cache (or of the T positions when there is none) and the valid keys of its rows.
        ``live_K[k]`` rows of model k are real (the first ones); the others are computed and ignored.
        """
        K, B, T = input_ids_KBT.shape
        V = w.embed.shape[1]
        offsets = torch.arange(K, device=input_ids_KBT.device)[:, None, None] * V
        x = F.embedding(input_ids_KBT + offsets, w.embed.reshape(K * V, -1))  # (K, B, T, H)
        lean = self.leans[0]
        cos, sin = lean._rotary(position_ids_KBT.reshape(K * B, T), x.dtype)  # (KB, 1, T, D)
        N, G, D = self.num_heads, self.num_kv_heads, self.head_dim
        cos_BT1D, sin_BT1D = cos.transpose(1, 2), sin.transpose(1, 2)
        for i, layer in enumerate(w.layers):
            h = self._norm(x, layer.norm1)
            if fused:
                qkv = self.linear(h, layer.proj[0], live_K).view(K * B, T, N + 2 * G, D)
                qk = LeanDecoder._rotate(qkv[:, :, : N + G], cos_BT1D, sin_BT1D)
                q, k, v = qk[:, :, :N].transpose(1, 2), qk[:, :, N:].transpose(1, 2), qkv[:, :, N + G :].transpose(1, 2)
                o_proj, mlp = layer.proj[1], layer.proj[2:]
            else:
                q = self.linear(h, layer.proj[0], live_K).view(K * B, T, N, D).transpose(1, 2)
                k = self.linear(h, layer.proj[1], live_K).view(K * B, T, G, D).transpose(1, 2)
                v = self.linear(h, layer.proj[2], live_K).view(K * B, T, G, D).transpose(1, 2)
                q, k = LeanDecoder._rotate(q, cos, sin), LeanDecoder._rotate(k, cos, sin)
                o_proj, mlp = layer.proj[3], layer.proj[4:]
            out = self._attend(i, q, k, v, attention, cache, B)
            x = x + self.linear(out.transpose(1, 2).reshape(K, B, T, N * D), o_proj, live_K)
            h = self._norm(x, layer.norm2)
            if fused:
                g, u = self.linear(h, mlp[0], live_K).chunk(2, dim=-1)
                down = mlp[1]
            else:
                g, u, down = self.linear(h, mlp[0], live_K), self.linear(h, mlp[1], live_K), mlp[2]
            x = x + self.linear(F.silu(g) * u, down, live_K)
        if cache is not None:
            cache.length += T
        return self._norm(x, w.norm)

    def _attend(self, layer: int, q, k, v, groups, cache, B: int) -> torch.Tensor:
        """Attention per group of models, each on its own key window (``LeanDecoder.hidden``'s masks)."""
        T = q.shape[2]
        if cache is not None:
            col = cache.length
            cache.keys[layer][:, :, col : col + T] = k
            cache.values[layer][:, :, col : col + T] = v
        outs = []
        for group in groups:
            rows = slice(group.first * B, group.end * B)
            if cache is not None:
                end = cache.length + T
                keys, values = cache.keys[layer][rows, :, group.start : end], cache.values[layer][rows, :, group.start : end]
                past = cache.length - group.start
            else:
                keys, values = k[rows, :, : group.width], v[rows, :, : group.width]
                past = 0
            query = q[rows] if cache is not None else q[rows, :, : group.width]
            mask = _mask(group.key_valid, past, query.shape[2], q.dtype)
            out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask,
                                                 is_causal=mask is None and query.shape[2] > 1, scale=self.scaling,
                                                 enable_gqa=self.num_heads != self.num_kv_heads)
            if cache is None and group.width < T:
                out = F.pad(out, (0, 0, 0, T - group.width))
            outs.append(out)
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def logits(self, w: _Weights, hidden_KBH: torch.Tensor, live_K: Sequence[int]) -> torch.Tensor:
        """(K, B, V) or (K, B, T, V) logits of each model's head on its rows."""
        squeeze = hidden_KBH.dim() == 3
        x = hidden_KBH[:, :, None] if squeeze else hidden_KBH
        out = self.linear(x, w.head, live_K)
        return out[:, :, 0] if squeeze else out


@dataclass
class _AttentionGroup:
    """Models ``first``..``end``-1 share a key layout: keys from cache column ``start`` (generation) or
    the first ``width`` positions (learner pass); ``key_valid`` (rows, S) marks the attendable keys, or None."""

    first: int
    end: int
    start: int = 0
    width: int = 0
    key_valid: torch.Tensor | None = None


@dataclass
class _Cache:
    keys: list[torch.Tensor]  # each (K*B, G, capacity, D)
    values: list[torch.Tensor]
    length: int = 0


def _mask(key_valid_BS: torch.Tensor | None, past: int, T: int, dtype: torch.dtype) -> torch.Tensor | None:
    """``LeanDecoder.hidden``'s additive mask for ``T`` queries after ``past`` cached keys (None: none needed)."""
    if key_valid_BS is not None and bool(key_valid_BS.all()):
        key_valid_BS = None
    S = past + T
    if key_valid_BS is not None and past and T == 1:
        allowed = key_valid_BS.clone()
        allowed[:, -1] = True
        B = allowed.shape[0]
        return torch.zeros((B, 1, 1, S), dtype=dtype).masked_fill_(~allowed[:, None, None], float("-inf"))
    if key_valid_BS is not None or (past and T > 1):
        q_pos, k_pos = torch.arange(past, S), torch.arange(S)
        allowed = k_pos[None, :] <= q_pos[:, None]
        if key_valid_BS is not None:
            allowed = allowed & (key_valid_BS[:, None, :] | (k_pos[None, None, :] == q_pos[None, :, None]))
            allowed = allowed[:, None]
        return torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, float("-inf"))
    return None


def _baddbmm(x_KMH: torch.Tensor, w_KOH: torch.Tensor, b_K1O: torch.Tensor | None) -> torch.Tensor:
    """x @ w^T (+ b) per slice, with w passed as its transposed view (the BLAS call ``F.linear`` makes)."""
    if b_K1O is None:
        return torch.bmm(x_KMH, w_KOH.transpose(1, 2))
    return torch.baddbmm(b_K1O, x_KMH, w_KOH.transpose(1, 2))


# -- generation ------------------------------------------------------------------------------------
@torch.inference_mode()
def sample_many(
    models: Sequence[PreTrainedModel] | StackedDecoder,
    prompts: Sequence[Sequence[Sequence[int]]],
    *,
    row_keys: Sequence[Sequence[int]],
    max_new_tokens: int,
    eos_token_id: int,
    pad_token_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
) -> list[list[Sample]]:
    """``generate.sample(models[k], prompts[k], row_keys=row_keys[k], ...)`` for every k, in one pass.

    Each model's rows are laid out, attended and sampled as ``sample`` lays them out alone (left
    padding to its own longest prompt, rows dropped as they finish, the counter-based draw
    ``uniform(row_key, position)``), so what each model gets is what it would get alone. Models whose
    longest prompts differ are prefilled in one pass per prompt length and then decode together.
    Only counter-based streams: a shared ``torch.Generator`` would tie the models' draws together.
    """
    stacked = models if isinstance(models, StackedDecoder) else StackedDecoder(models)
    K = stacked.k
    if len(prompts) != K or len(row_keys) != K:
        raise ValueError(f"{K} models, {len(prompts)} prompt lists, {len(row_keys)} row-key lists")
    for k in range(K):
        if len(row_keys[k]) != len(prompts[k]):
            raise ValueError(f"model {k}: {len(row_keys[k])} row_keys for {len(prompts[k])} prompts")
        if any(len(p) == 0 for p in prompts[k]):
            raise ValueError(f"model {k}: an empty prompt")
    for m in stacked.models:
        if m.training:
            m.eval()
    if max_new_tokens <= 0:
        return [[Sample((), (), False) for _ in prompts[k]] for k in range(K)]
    results: list[list[Sample]] = [[] for _ in range(K)]
    busy = [k for k in range(K) if prompts[k]]
    if not busy:
        return results
    longest = {k: max(len(p) for p in prompts[k]) for k in busy}
    order = sorted(busy, key=lambda k: longest[k])  # models of one prompt length are neighbours
    tokens, logps, finished = _decode(stacked, order, [prompts[k] for k in order], [row_keys[k] for k in order],
                                      max_new_tokens=max_new_tokens, eos_token_id=eos_token_id,
                                      pad_token_id=pad_token_id, temperature=temperature, top_p=top_p)
    for j, k in enumerate(order):
        results[k] = [Sample(tuple(t), tuple(lp), f) for t, lp, f in zip(tokens[j], logps[j], finished[j])]
    return results


def _decode(stacked: StackedDecoder, order, prompts, row_keys, *, max_new_tokens, eos_token_id, pad_token_id,
            temperature, top_p):
    """``generate._sample_lean`` for the models ``order`` (sorted by longest prompt) at once.

    Each model's prefill is its own lean pass (prefill is arithmetic-bound: a shared pass would only
    add padded rows), written into its block of the shared cache; the decode steps are stacked.
    A finished row stays in its slot, computed and ignored, while its model keeps SMALL_M or more
    rows running (products are row-independent there); below that, the model's running rows are
    moved to the front of its block, in order, as ``_sample_lean`` keeps them.
    """
    K = len(order)
    B = max(len(p) for p in prompts)
    own = [max(len(p) for p in ps) for ps in prompts]
    L = max(own)
    width = L + max_new_tokens
    dtype = stacked.leans[0].backbone.embed_tokens.weight.dtype
    shape = (K * B, stacked.num_kv_heads, width, stacked.head_dim)
    layers = stacked.num_layers
    cache = _Cache([torch.zeros(shape, dtype=dtype) for _ in range(layers)],
                   [torch.zeros(shape, dtype=dtype) for _ in range(layers)], length=L)
    valid = torch.zeros((K * B, width), dtype=torch.bool)
    valid[:, :L] = _left_aligned_window(own, B, L)  # slots without a prompt: finite keys, never read
    step_pos = torch.zeros(K * B, dtype=torch.long)
    lengths = np.zeros((K, B), dtype=np.int64)
    keys = np.zeros((K, B), dtype=np.uint64)
    logits_per_model = []
    for j, (ps, model_index) in enumerate(zip(prompts, order)):
        lean = stacked.leans[model_index]
        n, longest = len(ps), own[j]
        input_ids = torch.full((n, longest), pad_token_id, dtype=torch.long)
        mine = torch.zeros((n, longest), dtype=torch.bool)
        for i, p in enumerate(ps):
            input_ids[i, longest - len(p):] = torch.tensor(p, dtype=torch.long)
            mine[i, longest - len(p):] = True
            lengths[j, i] = len(p)
        keys[j, :n] = np.array(row_keys[j], dtype=np.uint64)
        positions = (mine.long().cumsum(-1) - 1).clamp(min=0)
        rows = slice(j * B, j * B + n)
        view = KVCache([c[rows, :, L - longest:] for c in cache.keys], [c[rows, :, L - longest:] for c in cache.values])
        hidden = lean.hidden(input_ids, position_ids_BT=positions, key_valid_BS=mine, cache=view)
        logits_per_model.append(lean.logits(hidden[:, -1]).float())
        valid[rows, L - longest : L] = mine
        step_pos[rows] = positions[:, -1]
    w = stacked.weights(order, fused=True)
    spans = _spans(own)
    slots = [list(range(len(ps))) for ps in prompts]  # block slot of each running row, per model
    rows_of = [list(range(len(ps))) for ps in prompts]  # its prompt index
    tokens = [[[] for _ in ps] for ps in prompts]
    logps = [[[] for _ in ps] for ps in prompts]
    finished = [[False] * len(ps) for ps in prompts]
    logits = torch.cat(logits_per_model)  # step 0: the running rows in order
    for step in range(max_new_tokens):
        flat = [(j, r) for j in range(K) for r in range(len(slots[j]))]
        where = torch.tensor([j * B + slots[j][r] for j, r in flat], dtype=torch.long)
        if step:
            logits = logits.view(K * B, -1)[where]
        counters = np.array([lengths[j, rows_of[j][r]] + step for j, r in flat], dtype=np.int64)
        u = row_uniforms(np.array([keys[j, rows_of[j][r]] for j, r in flat], dtype=np.uint64), counters)
        next_ids, next_logp = _draw(logits, temperature, top_p, None, u)
        next_list, logp_list = next_ids.tolist(), next_logp.tolist()
        keep: list[list[int]] = [[] for _ in range(K)]
        for n, (j, r) in enumerate(flat):
            row = rows_of[j][r]
            tokens[j][row].append(next_list[n])
            logps[j][row].append(logp_list[n])
            if next_list[n] == eos_token_id:
                finished[j][row] = True
            else:
                keep[j].append(r)
        if step == max_new_tokens - 1 or not any(keep):
            break
        step_ids = torch.full((K * B,), pad_token_id, dtype=torch.long)
        step_ids[where] = next_ids
        col = cache.length
        valid[:, col] = True
        step_pos += 1
        for j in range(K):
            if len(keep[j]) == len(slots[j]):
                continue
            kept_slots = [slots[j][r] for r in keep[j]]
            rows_of[j] = [rows_of[j][r] for r in keep[j]]
            if len(kept_slots) < SMALL_M and kept_slots != list(range(len(kept_slots))):
                src = torch.tensor(kept_slots) + j * B
                dst = slice(j * B, j * B + len(kept_slots))
                for c in (*cache.keys, *cache.values):
                    c[dst, :, :col] = c[src, :, :col]
                valid[dst], step_ids[dst], step_pos[dst] = valid[src], step_ids[src], step_pos[src]
                kept_slots = list(range(len(kept_slots)))
            slots[j] = kept_slots
        live = [len(s) for s in slots]
        groups = [_AttentionGroup(first, end, start=L - own[first],
                                  key_valid=valid[first * B : end * B, L - own[first] : col + 1]) for first, end in spans]
        hidden = stacked.hidden(w, step_ids.view(K, B, 1), step_pos.view(K, B, 1), live, groups, cache=cache,
                                fused=True)[:, :, 0]
        logits = stacked.logits(w, hidden, live).float()
    return tokens, logps, finished


def _left_aligned_window(own: Sequence[int], B: int, L: int) -> torch.Tensor:
    """(K*B, L): True on each model's own prompt window (its last ``own[j]`` columns)."""
    window = torch.zeros((len(own) * B, L), dtype=torch.bool)
    for j, longest in enumerate(own):
        window[j * B : (j + 1) * B, L - longest :] = True
    return window


def _spans(values: Sequence[int]) -> list[tuple[int, int]]:
    """Runs of equal consecutive values as (first, end) index pairs."""
    spans, first = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[first]:
            spans.append((first, i))
            first = i
    return spans


# -- learner ---------------------------------------------------------------------------------------
def sequence_logprobs_many(
    models: Sequence[PreTrainedModel] | StackedDecoder,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``generate.sequence_logprobs(models[k], *batches[k])`` for every k in one pass (values and, under
    gradient, a graph into each model's own parameters).

    Each model's right-padded (B_k, T_k) batch is padded to the largest B and T; the projections are
    row-independent there (M >= SMALL_M rows), attention runs per group of models with one T, causal
    over exactly that T, as the lean pass does alone.
    """
    stacked = models if isinstance(models, StackedDecoder) else StackedDecoder(models)
    K = stacked.k
    if len(batches) != K:
        raise ValueError(f"{K} models, {len(batches)} batches")
    for k, (tokens, attention) in enumerate(batches):
        if tokens.dim() != 2 or tokens.shape != attention.shape or tokens.shape[1] < 2:
            raise ValueError(f"batch {k}: tokens {tuple(tokens.shape)} and attention {tuple(attention.shape)} must be "
                             f"one (B, T) shape with T >= 2")
    out: list = [None] * K
    alone = [k for k in range(K) if batches[k][0].shape[0] * (batches[k][0].shape[1] - 1) < SMALL_M]
    for k in alone:  # its own pass has M < SMALL_M rows, which a padded product cannot reproduce
        out[k] = sequence_logprobs(stacked.models[k], *batches[k])
    order = sorted((k for k in range(K) if k not in alone), key=lambda k: batches[k][0].shape[1])
    if not order:
        return out
    K = len(order)
    fused = not torch.is_grad_enabled()
    w = stacked.weights(order, fused=fused)
    B = max(batches[k][0].shape[0] for k in order)
    T = max(batches[k][0].shape[1] for k in order) - 1
    ids = torch.zeros((K, B, T), dtype=torch.long)
    for j, k in enumerate(order):
        tok = batches[k][0]
        ids[j, : tok.shape[0], : tok.shape[1] - 1] = tok[:, :-1]
    live = [batches[k][0].shape[0] for k in order]
    widths = [batches[k][0].shape[1] - 1 for k in order]
    groups = [_AttentionGroup(first, end, width=widths[first]) for first, end in _spans(widths)]
    positions = torch.arange(T).expand(K, B, T)
    logits = stacked.logits(w, stacked.hidden(w, ids, positions, live, groups, fused=fused), live).float()
    for j, k in enumerate(order):
        tok = batches[k][0]
        b, t = tok.shape
        logp_all = torch.log_softmax(logits[j, :b, : t - 1], dim=-1)
        logp = logp_all.gather(-1, tok[:, 1:, None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        zero = torch.zeros_like(logp[:, :1])
        out[k] = (torch.cat([zero, logp], dim=1), torch.cat([zero, entropy], dim=1))
    return out
