"""Policy and tokenizer factory: a tiny model of a real Hugging Face architecture, or any causal LM.

``model.name: tiny-qwen2`` (or ``tiny-llama``) builds a small randomly initialised model from a
config, paired with the character tokenizer; any other name is a Hugging Face hub id or a local
path, loaded with ``AutoModelForCausalLM`` / ``load_tokenizer`` (the one-GPU rung of the ladder).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import ClassVar, Literal

import torch
from pydantic import ConfigDict, Field, field_validator
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
)
from transformers.utils import logging as transformers_logging

from sao_env.config_dump import OmitDefaults
from sao_env.policy.tokenizer import build_char_tokenizer

transformers_logging.disable_progress_bar()  # the harness draws its own bars; per-file load/save bars only interleave

GENERIC_TOKENIZER_CLASSES = ("TokenizersBackend", "PreTrainedTokenizerFast")
TINY_ARCHITECTURES = {"tiny-qwen2": Qwen2Config, "tiny-llama": LlamaConfig}


class ModelSpec(OmitDefaults):
    """Which policy to train: a tiny model built from config, or a Hugging Face id/path."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    name: str = "tiny-qwen2"
    """`tiny-qwen2`, `tiny-llama`, a packaged pretrained model (`smollm2-135m-instruct`: `sao-env models`), or a
    Hugging Face model id / local path."""
    hidden_size: int = Field(96, gt=0)
    """Width of the tiny model (ignored for hub models)."""
    num_layers: int = Field(3, gt=0)
    """Transformer blocks of the tiny model."""
    num_heads: int = Field(4, gt=0)
    """Attention heads of the tiny model."""
    num_kv_heads: int = Field(2, gt=0)
    """Key/value heads (grouped-query attention) of the tiny model."""
    intermediate_size: int = Field(256, gt=0)
    """MLP width of the tiny model."""
    max_position_embeddings: int = Field(4096, gt=0)
    """Longest sequence the tiny model accepts (rotary positions: costs no parameters); long enough
    for character-level benchmark problems."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype."""
    device: str = "cpu"
    """Where the policy, its critic, the learner's batches and a colocated sampler live: ``cpu``, ``auto`` (the
    first CUDA GPU if there is one, else the CPU) or a torch device name (``cuda``, ``cuda:1``);
    ``sao_env.policy.placement``."""
    precision: Literal["float32", "bf16_autocast"] = "float32"
    """``float32``, or ``bf16_autocast``: float32 master weights and optimizer state, forward passes (learner,
    critic, sampler, evaluation) under bfloat16 autocast (``sao_env.policy.placement``)."""

    omit_at_default: ClassVar[tuple[str, ...]] = ("device", "precision")
    """Keys left out of the dump while they hold their defaults: configurations written before they existed
    keep their hashes (and warm starts their cache keys)."""
    placement_keys: ClassVar[tuple[str, ...]] = ("device", "precision")
    """Keys that say where and how the model computes, not which model it is (the warm start ignores them)."""

    @field_validator("device")
    @classmethod
    def _known_device(cls, name: str) -> str:
        from sao_env.policy.placement import DEVICE_PATTERN

        if not DEVICE_PATTERN.match(name):
            raise ValueError(f"unknown device {name!r}; use cpu, auto, cuda, cuda:N or mps")
        return name


    @property
    def is_tiny(self) -> bool:
        return self.name in TINY_ARCHITECTURES

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(), sort_keys=True).encode()).hexdigest()[:16]


def load_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained``, except for a folder holding a plain ``tokenizers`` tokenizer.

    transformers 5 picks the tokenizer class from the model's config when one lies beside it
    (Qwen2Tokenizer for a Qwen2 checkpoint), which would rewrite the character tokenizer's
    pre-tokenizer; a folder whose tokenizer_config.json declares the generic backend is loaded as such.
    """
    config = Path(name_or_path) / "tokenizer_config.json"
    if config.is_file() and json.loads(config.read_text()).get("tokenizer_class") in GENERIC_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(name_or_path)
    return AutoTokenizer.from_pretrained(name_or_path)


def _from_hub(load, name: str):
    """``load(name)`` with an unreachable hub read as offline (the cache only, at once) and a model that
    cannot be found as one line (UserError) instead of transformers' page of traceback."""
    from sao_env.errors import UserError
    from sao_env.hub import reach_or_cache

    with reach_or_cache() as why_offline:
        try:
            return load(name)
        except OSError as err:
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
            raise UserError(f"cannot load model {name!r}" + (f" ({why_offline})" if why_offline else "")
                            + f": {reason}") from None


def resolved_name(name: str) -> str:
    """The folder or hub id to load ``name`` from: a packaged model's materialized folder
    (``sao_env.policy.packaged``, converted on first use), else ``name`` itself."""
    from sao_env.policy import packaged

    return str(packaged.materialize(name)) if packaged.is_packaged(name) else name


def build_tokenizer(spec: ModelSpec) -> PreTrainedTokenizerBase:
    if spec.is_tiny:
        return build_char_tokenizer()
    tokenizer = _from_hub(load_tokenizer, resolved_name(spec.name))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def build_policy(spec: ModelSpec, tokenizer: PreTrainedTokenizerBase, *, seed: int = 0) -> PreTrainedModel:
    """Instantiate the policy; the tiny one is seeded so that the same spec gives the same weights."""
    dtype = getattr(torch, spec.dtype)
    if not spec.is_tiny:
        return _from_hub(lambda name: AutoModelForCausalLM.from_pretrained(name, dtype=dtype), resolved_name(spec.name))
    config_cls = TINY_ARCHITECTURES[spec.name]
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
