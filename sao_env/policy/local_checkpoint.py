"""A local "hub" checkpoint: a Qwen2-architecture model built from config with a BPE tokenizer trained here.

The one-GPU rung loads any causal LM by hub id or local folder (``agent.model.name``). Without hub access
this module makes such a folder, so the real path (``AutoModelForCausalLM.from_pretrained`` on a folder, a
tokenizer with merges, a vocabulary of thousands, a model of tens of millions of parameters) runs end to end:

    python -m sao_env.policy.local_checkpoint runs/checkpoints/qwen2-27m --data ../shared/data
    sao-env run --env benchmark-stream --agent sao agent.model.name=runs/checkpoints/qwen2-27m ...

The tokenizer is a byte-level BPE (Radford et al. 2019's byte alphabet, so any text encodes) trained by the
``tokenizers`` library on the text of the benchmark rows (every suite's problems and answers, as the benchmark
stream renders them), with ``<|endoftext|>`` as end-of-sequence and padding token. The weights are random
(seeded): the model knows nothing, so its rewards on the benchmark stream are near zero; what this exercises
is the machinery (placement, micro-batches, checkpoints, resume, ``eval``), not learning.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

EOS = "<|endoftext|>"
SUITES = ("beyond_aime", "hmmt_feb_2024", "hmmt_feb_2025", "hmmt_nov_2025", "imo_answerbench")
"""The math suites whose rows make the tokenizer's corpus (those the benchmark stream serves)."""
DEFAULT_SHAPE = {"hidden_size": 512, "num_hidden_layers": 8, "num_attention_heads": 8, "num_key_value_heads": 2,
                 "intermediate_size": 1408}
"""About 27M parameters with an 8,192-token vocabulary (the embedding tied to the output layer)."""


def corpus(data: str | None) -> list[str]:
    """The benchmark rows' text: each problem as the stream renders it, and its answer in ``\\boxed{}``."""
    from sao_env.benchmarks.loaders import make_loader
    from sao_env.envs.base import render_prompt

    texts = []
    for suite in SUITES:
        for task in make_loader(suite, data).load():
            texts.append(render_prompt(task))
            answer = task.reference.get("answer") if hasattr(task.reference, "get") else None
            if answer is not None:
                texts.append(f"The answer is \\boxed{{{answer}}}.")
    return texts


def train_tokenizer(texts: list[str], vocab_size: int = 8192) -> PreTrainedTokenizerFast:
    """A byte-level BPE trained on ``texts``; ``<|endoftext|>`` ends sequences and pads them (left padding)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, pad_token=EOS, bos_token=EOS)
    fast.padding_side = "left"
    return fast


def build_checkpoint(out: Path, *, data: str | None = None, texts: list[str] | None = None, vocab_size: int = 8192,
                     seed: int = 0, max_position_embeddings: int = 8192, **shape) -> Path:
    """Write a Qwen2 model (``DEFAULT_SHAPE`` updated with ``shape``) and its BPE tokenizer to ``out`` with
    ``save_pretrained``; returns ``out``. ``texts`` (default: the benchmark rows' ``corpus(data)``) train the
    tokenizer."""
    tokenizer = train_tokenizer(texts if texts is not None else corpus(data), vocab_size)
    eos = tokenizer.convert_tokens_to_ids(EOS)
    config = Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=max_position_embeddings,
                         tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
                         use_sliding_window=False, **{**DEFAULT_SHAPE, **shape})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "made_by.json").write_text(json.dumps({"maker": "sao_env.policy.local_checkpoint", "seed": seed,
                                                  "vocab_size": len(tokenizer), "parameters": model.num_parameters(),
                                                  **{**DEFAULT_SHAPE, **shape}}, indent=1) + "\n")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--data", default=None, help="benchmark rows (default: $SAO_ENV_DATA, else the hub)")
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--hidden-size", type=int, default=DEFAULT_SHAPE["hidden_size"])
    parser.add_argument("--layers", type=int, default=DEFAULT_SHAPE["num_hidden_layers"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = build_checkpoint(args.out, data=args.data, vocab_size=args.vocab_size, seed=args.seed,
                           hidden_size=args.hidden_size, num_hidden_layers=args.layers)
    made = json.loads((out / "made_by.json").read_text())
    print(f"{out}: Qwen2, {made['parameters'] / 1e6:.1f}M parameters, BPE vocabulary {made['vocab_size']}")


if __name__ == "__main__":
    main()
