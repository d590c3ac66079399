"""The character set of the text spaces: printable ASCII and the newline (the tiny tokenizer's alphabet)."""

CHARSET = frozenset("\n" + "".join(chr(c) for c in range(32, 127)))
