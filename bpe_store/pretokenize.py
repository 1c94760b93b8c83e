"""Pre-tokenization: split text at special tokens, then into GPT-2 pre-tokens.

This is the Python (``regex``) path and the specification the native scanner must match.
Special tokens split the text first; no pre-token ever crosses one and they are never counted.

>>> list(pretokenize("Hi there<|endoftext|>it's", ["<|endoftext|>"]))
['Hi', ' there', 'it', "'s"]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence

import regex

#: The GPT-2 pre-tokenization pattern, exactly as CS336 and tiktoken's r50k use it.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def special_splitter(special_tokens: Sequence[str]) -> regex.Pattern | None:
    """A pattern matching any special token, longest first (so a token that is a prefix of
    another never wins over it). None when there are no special tokens."""
    if not special_tokens:
        return None
    ordered = sorted(set(special_tokens), key=lambda s: (-len(s), s))
    return regex.compile("|".join(regex.escape(s) for s in ordered))


def split_at_specials(text: str, special_tokens: Sequence[str]) -> list[str]:
    """The pieces of ``text`` between special tokens (the specials themselves dropped)."""
    splitter = special_splitter(special_tokens)
    return [text] if splitter is None else splitter.split(text)


def pretokenize(
    text: str, special_tokens: Sequence[str] = (), pattern: str = GPT2_PATTERN
) -> Iterator[str]:
    """Yield the pre-tokens of ``text``: the pattern's matches inside each special-free piece."""
    compiled = regex.compile(pattern)
    for piece in split_at_specials(text, special_tokens):
        for m in compiled.finditer(piece):
            yield m.group()


def count_words(
    text: str, special_tokens: Sequence[str] = (), pattern: str = GPT2_PATTERN
) -> Counter[bytes]:
    """Word counts of ``text``: ``{pre-token as UTF-8 bytes: occurrences}``."""
    compiled = regex.compile(pattern)
    counts: Counter[str] = Counter()
    for piece in split_at_specials(text, special_tokens):
        # findall + Counter.update run in C; this is the fast pure-Python path.
        counts.update(compiled.findall(piece))
    return Counter({w.encode("utf-8"): c for w, c in counts.items()})
