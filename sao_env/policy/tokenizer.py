"""A character-level tokenizer that is a real ``transformers.PreTrainedTokenizerFast``.

Every printable ASCII character and the newline is one token, so a tiny model sees digits one by
one (which is what makes arithmetic learnable at CPU scale). The object round-trips through
``save_pretrained`` / ``from_pretrained`` like any Hugging Face tokenizer (load a checkpoint's copy
with ``sao_env.policy.model.load_tokenizer``: see there why plain AutoTokenizer is not enough).
"""

from __future__ import annotations

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
CHARACTERS = "\n" + "".join(chr(c) for c in range(32, 127))


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """Build the character tokenizer: ids 0-3 are ``<pad> <bos> <eos> <unk>``, then one id per character."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in CHARACTERS:
        vocab[ch] = len(vocab)
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        clean_up_tokenization_spaces=False,
        padding_side="left",
    )
    return tokenizer
