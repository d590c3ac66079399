"""A lean forward pass for the decoder-only architectures the tiny policies use (Qwen2, Llama).

transformers' forward builds masks, cache objects and rotary tables on every call; for a
0.3M-parameter model that machinery, not the matrix products, is most of the time of a decode
step or a learner pass. ``LeanDecoder`` runs the same computation on the model's own parameters
(no copy: weight updates are seen at once, gradients reach the model's parameters) with a
preallocated key/value cache and one boolean mask per call. It is used for every model whose
configuration it fully supports (``LeanDecoder.supports``) and matches transformers' logits to
float precision (tests/test_lean_forward.py); any other model runs through transformers.

Shapes: B batch, T query positions, S key positions, H hidden, N heads, K key/value heads, D head dim.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from transformers import PreTrainedModel

SUPPORTED_TYPES = ("qwen2", "llama")


@dataclass
class KVCache:
    """Keys and values of every layer, preallocated to ``capacity`` positions; ``length`` are filled."""

    keys: list[torch.Tensor]  # each (B, K, capacity, D)
    values: list[torch.Tensor]
    length: int = 0


class LeanDecoder:
    """The forward of a Qwen2 / Llama causal LM (or of its backbone alone) written over its parameters."""

    def __init__(self, model: PreTrainedModel):
        config = model.config
        self.model = model
        self.backbone = model if hasattr(model, "layers") else getattr(model, model.base_model_prefix)
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.eps = config.rms_norm_eps
        theta = config.rope_parameters["rope_theta"]
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.float) / self.head_dim))
        self._fused: list[tuple] = []
        self._fused_versions: tuple = ()
        self._fuse_sources = [p for layer in self.backbone.layers for m in (
            layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.mlp.gate_proj,
            layer.mlp.up_proj) for p in (m.weight, m.bias) if p is not None]
        self._rope_table: tuple[torch.Tensor, torch.Tensor] | None = None
        self.checkpoint_layers = False
        """Recompute each layer's activations in the backward pass (``enable_checkpointing``)."""

    @staticmethod
    def supports(model: torch.nn.Module) -> bool:
        """True for the configurations whose computation this class reproduces exactly."""
        config = getattr(model, "config", None)
        if config is None or getattr(config, "model_type", None) not in SUPPORTED_TYPES:
            return False
        rope = getattr(config, "rope_parameters", None) or {}
        return (
            rope.get("rope_type", "default") == "default"
            and "rope_theta" in rope
            and getattr(config, "hidden_act", None) == "silu"
            and not getattr(config, "use_sliding_window", False)
            and all(t == "full_attention" for t in getattr(config, "layer_types", None) or ["full_attention"])
            and getattr(config, "pretraining_tp", 1) == 1
            and float(getattr(config, "attention_dropout", 0.0) or 0.0) == 0.0
            and (hasattr(model, "layers") or hasattr(getattr(model, "model", None), "layers"))
        )

    # -- pieces ------------------------------------------------------------------------------
    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, weight.shape, weight, self.eps)
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return weight * x.to(dtype)

    def _rotary(self, position_ids_BT: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (B, 1, T, D) of each position, read from a table computed once per device and dtype."""
        table = self._rope_table
        longest = int(position_ids_BT.max()) + 1
        if (table is None or table[0].device != position_ids_BT.device or table[0].dtype != dtype
                or table[0].shape[0] < longest):
            size = max(longest, self.model.config.max_position_embeddings)
            positions = torch.arange(size, device=position_ids_BT.device)
            freqs = positions[:, None].float() * self.inv_freq.to(position_ids_BT.device)
            emb = torch.cat((freqs, freqs), dim=-1)  # (P, D)
            table = self._rope_table = (emb.cos().to(dtype), emb.sin().to(dtype))
        return table[0][position_ids_BT][:, None], table[1][position_ids_BT][:, None]

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def _fused_weights(self) -> list[tuple]:
        """Per layer (qkv weight, qkv bias, gate|up weight, gate|up bias), rebuilt when a parameter changed.

        Only for passes without gradient: one matrix product instead of three (or two) per block.
        """
        versions = tuple(p._version for p in self._fuse_sources)
        if versions != self._fused_versions:
            self._fused = []
            for layer in self.backbone.layers:
                a, m = layer.self_attn, layer.mlp
                qkv_b = None if a.q_proj.bias is None else torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias])
                gu_b = None if m.gate_proj.bias is None else torch.cat([m.gate_proj.bias, m.up_proj.bias])
                self._fused.append((torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), qkv_b,
                                    torch.cat([m.gate_proj.weight, m.up_proj.weight]), gu_b))
            self._fused_versions = versions
        return self._fused

    def new_cache(self, batch: int, capacity: int, dtype: torch.dtype | None = None) -> KVCache:
        """An empty cache in the parameters' dtype, or ``dtype`` (bfloat16 under autocast)."""
        p = self.backbone.embed_tokens.weight
        shape = (batch, self.num_kv_heads, capacity, self.head_dim)
        layers = len(self.backbone.layers)
        zeros = (lambda: p.new_zeros(shape)) if dtype is None else (lambda: p.new_zeros(shape, dtype=dtype))
        return KVCache([zeros() for _ in range(layers)], [zeros() for _ in range(layers)])

    # -- forward -------------------------------------------------------------------------------
    def hidden(
        self,
        input_ids_BT: torch.Tensor,
        *,
        position_ids_BT: torch.Tensor | None = None,
        key_valid_BS: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """Final normed hidden states (B, T, H).

        Without a cache the call is causal over its own T positions; ``key_valid_BS`` (bool) marks the
        keys that may be attended (left padding), where S = cache.length + T. With a cache, the new keys
        and values are written at ``cache.length`` and the queries attend to all valid earlier keys.
        """
        B, T = input_ids_BT.shape
        past = cache.length if cache is not None else 0
        S = past + T
        if position_ids_BT is None:
            position_ids_BT = torch.arange(past, S, device=input_ids_BT.device).expand(B, T)
        mask = None
        if key_valid_BS is not None and bool(key_valid_BS.all()):
            key_valid_BS = None
        if key_valid_BS is not None and past and T == 1:  # a decode step: the valid keys and the query itself
            allowed = key_valid_BS.clone()
            allowed[:, -1] = True
            mask = torch.zeros((B, 1, 1, S), dtype=self.backbone.embed_tokens.weight.dtype,
                               device=input_ids_BT.device).masked_fill_(~allowed[:, None, None], float("-inf"))
        elif key_valid_BS is not None or (past and T > 1):
            q_pos = torch.arange(past, S, device=input_ids_BT.device)
            k_pos = torch.arange(S, device=input_ids_BT.device)
            allowed = k_pos[None, :] <= q_pos[:, None]  # (T, S) causal
            if key_valid_BS is not None:
                allowed = allowed & (key_valid_BS[:, None, :] | (k_pos[None, None, :] == q_pos[None, :, None]))
                allowed = allowed[:, None]  # (B, 1, T, S); a padded query sees itself, never an empty row
            mask = torch.zeros(allowed.shape, dtype=self.backbone.embed_tokens.weight.dtype,
                               device=input_ids_BT.device).masked_fill_(~allowed, float("-inf"))
        x = self.backbone.embed_tokens(input_ids_BT)
        cos, sin = self._rotary(position_ids_BT, x.dtype)
        fused = None if torch.is_grad_enabled() else self._fused_weights()
        checkpointed = self.checkpoint_layers and torch.is_grad_enabled() and cache is None
        for i, layer in enumerate(self.backbone.layers):
            if checkpointed:  # activations recomputed in the backward pass (``enable_checkpointing``)
                x = torch.utils.checkpoint.checkpoint(self._block, i, layer, x, cos, sin, mask, None, None,
                                                      use_reentrant=False)
            else:
                x = self._block(i, layer, x, cos, sin, mask, fused, cache)
        if cache is not None:
            cache.length = S
        return self._norm(x, self.backbone.norm.weight)

    def _block(self, i: int, layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
               fused: list[tuple] | None, cache: KVCache | None) -> torch.Tensor:
        """One decoder layer: attention (writing the cache when there is one) and the MLP, each with its residual."""
        B, T = x.shape[:2]
        past = cache.length if cache is not None else 0
        S = past + T
        groups = self.num_heads // self.num_kv_heads
        N, K = self.num_heads, self.num_kv_heads
        cos_BT1D, sin_BT1D = cos.transpose(1, 2), sin.transpose(1, 2)
        attn, mlp = layer.self_attn, layer.mlp
        h = self._norm(x, layer.input_layernorm.weight)
        if fused is not None:  # q and k rotated in one pass over the fused projection (B, T, N+2K, D)
            qkv = F.linear(h, fused[i][0], fused[i][1]).view(B, T, N + 2 * K, self.head_dim)
            qk = self._rotate(qkv[:, :, : N + K], cos_BT1D, sin_BT1D)
            q, k, v = qk[:, :, :N].transpose(1, 2), qk[:, :, N:].transpose(1, 2), qkv[:, :, N + K :].transpose(1, 2)
        else:
            q = F.linear(h, attn.q_proj.weight, attn.q_proj.bias).view(B, T, N, self.head_dim).transpose(1, 2)
            k = F.linear(h, attn.k_proj.weight, attn.k_proj.bias).view(B, T, K, self.head_dim).transpose(1, 2)
            v = F.linear(h, attn.v_proj.weight, attn.v_proj.bias).view(B, T, K, self.head_dim).transpose(1, 2)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
        if cache is not None:
            cache.keys[i][:, :, past:S] = k
            cache.values[i][:, :, past:S] = v
            k, v = cache.keys[i][:, :, :S], cache.values[i][:, :, :S]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and T > 1,
                                             scale=attn.scaling, enable_gqa=groups > 1)
        out = F.linear(out.transpose(1, 2).reshape(B, T, -1), attn.o_proj.weight, attn.o_proj.bias)
        x = x + out
        h = self._norm(x, layer.post_attention_layernorm.weight)
        gate, up, down = mlp.gate_proj, mlp.up_proj, mlp.down_proj
        if fused is not None:
            g, u = F.linear(h, fused[i][2], fused[i][3]).chunk(2, dim=-1)
        else:
            g, u = F.linear(h, gate.weight, gate.bias), F.linear(h, up.weight, up.bias)
        x = x + F.linear(F.silu(g) * u, down.weight, down.bias)
        return x

    def logits(self, hidden_BTH: torch.Tensor) -> torch.Tensor:
        head = self.model.lm_head
        return F.linear(hidden_BTH, head.weight, head.bias)


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Gradient checkpointing for ``model``'s passes with gradient: per layer in the lean forward, else through
    transformers' own switch (which acts in training mode only)."""
    lean = lean_decoder(model)
    if lean is not None:
        lean.checkpoint_layers = True
    elif hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


_DECODERS: "weakref.WeakKeyDictionary[torch.nn.Module, LeanDecoder | None]" = weakref.WeakKeyDictionary()


def lean_decoder(model: torch.nn.Module) -> LeanDecoder | None:
    """The model's LeanDecoder, or None where it is unsupported or ``SAO_ENV_LEAN=0`` turns it off."""
    if os.environ.get("SAO_ENV_LEAN", "1") == "0":
        return None
    if model not in _DECODERS:
        _DECODERS[model] = LeanDecoder(model) if LeanDecoder.supports(model) else None
    return _DECODERS[model]
