"""Encoding bytes that are not UTF-8, as tiktoken's ``_encode_bytes`` does.

Pre-tokenization splits text, so bytes that are not UTF-8 have no pieces of their own. tiktoken's
rule, followed exactly: encode the longest valid UTF-8 prefix as plain text (special tokens' text
included); take back the tokens of its last piece (and, when that piece begins with a token of only
spaces, tabs and newlines, the such tokens before it: a split there may move); join their bytes
with everything from the first invalid byte on, and encode that as one piece (the token it spells,
else BPE). So ``b" \\xec\\x8b\\xa4\\xed"`` is cl100k_base's token 62085, and any bytes decode back to
themselves.
"""

from __future__ import annotations

from typing import Protocol


class _Encodes(Protocol):  # what a Tokenizer offers this module
    vocab: dict[int, bytes]

    def encode_ordinary(self, text: str) -> list[int]: ...
    def last_piece(self, text: str) -> str: ...
    def encode_piece(self, piece: bytes) -> list[int]: ...
    def decode_bytes(self, ids: list[int]) -> bytes: ...


_SPACES = frozenset(b" \n\t")


def encode_bytes(tok: _Encodes, data: bytes) -> list[int]:
    """The ids of ``data`` (bytes, UTF-8 or not) by tiktoken's rule (see the module's docstring)."""
    data = bytes(data)
    try:
        return tok.encode_ordinary(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        valid = exc.start  # the longest valid prefix (Rust's valid_up_to)
    text = data[:valid].decode("utf-8")
    ids = tok.encode_ordinary(text)
    last = len(tok.encode_ordinary(tok.last_piece(text))) if text else 0

    def all_space(i: int) -> bool:
        b = tok.vocab.get(i)
        return b is not None and all(c in _SPACES for c in b)

    if last and all_space(ids[-last]):
        while last < len(ids) and all_space(ids[-last - 1]):
            last += 1
    if ids and last:
        unstable = tok.decode_bytes(ids[-last:]) + data[valid:]
        del ids[-last:]
    else:
        unstable = data[valid:]
    return ids + tok.encode_piece(unstable) if unstable else ids
