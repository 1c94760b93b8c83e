"""OpenAI's ``.tiktoken`` ranks files (``base64(token) rank`` per line), read with every problem
named by file and line, and tiktoken's BPE rule put into the form bpe_store's encoder runs.

tiktoken has no merge list: a token's rank is its id, and two adjacent parts of a piece merge when
their *concatenation* has a rank, the lowest first (leftmost on ties), one merge at a time, and a
piece that is itself a token is that token. ``tiktoken_merges`` lists, for each token, every way of
writing it as two tokens; ``Tokenizer.from_tiktoken`` ranks each such pair by the id of the token
it makes, which is exactly tiktoken's lookup.

Below the tokenizer (``Tokenizer.from_tiktoken`` reads them): a file format, nothing else. The
files themselves are read by ``bpe_store.formats.openai_ranks`` (natively), below training too.

>>> tiktoken_merges({b"a": 0, b"b": 1, b"ab": 2, b"aba": 3, b"ba": 4})
[(b'a', b'b'), (b'a', b'ba'), (b'ab', b'a'), (b'b', b'a')]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from ..errors import InputError
from .gpt2_files import MAX_TOKEN_ID
from .openai_ranks import TiktokenFileError, read_ranks

__all__ = ["TiktokenFileError", "read_tiktoken_ranks", "tiktoken_merges", "tiktoken_specials"]


def read_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """``{token bytes: rank}`` of a ``.tiktoken`` file (plain or gzipped), read natively and checked
    as ``openai_ranks.strict_ranks`` checks it: each line ``base64 rank``, tokens and ranks
    distinct, all 256 single bytes ranked. Every problem is a ``TiktokenFileError`` naming the line.
    """
    return read_ranks(path).mergeable()


def tiktoken_merges(ranks: Mapping[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every split ``t = a + b`` of a token into two tokens: ``[(a, b)]``, by the rank of ``t``,
    then by the length of ``a``. These are all the merges tiktoken's rule can ever make (its parts
    are always tokens): cl100k_base has 233,378 of them, o200k_base 446,189.

    >>> tiktoken_merges({b"x": 0, b"y": 1, b"xyx": 2, b"xy": 3, b"yx": 4})
    [(b'x', b'yx'), (b'xy', b'x'), (b'x', b'y'), (b'y', b'x')]
    """
    out: list[tuple[bytes, bytes]] = []
    for token, _ in sorted(ranks.items(), key=lambda kv: kv[1]):
        for k in range(1, len(token)):
            a, b = token[:k], token[k:]
            if a in ranks and b in ranks:
                out.append((a, b))
    return out


def tiktoken_specials(is_token: Callable[[bytes], int | None], token_at: Callable[[int], bytes | None],
                      special_tokens: Mapping[str, int] | Sequence[str] | None) -> dict[str, int | None]:
    """``{special token: id}`` checked against the ranks (``is_token(bytes)``: its rank or None;
    ``token_at(id)``: the token of a rank or None): a mapping keeps its ids (what tiktoken's
    ``special_tokens`` is; OpenAI's ids need it), a sequence gets ``None`` (the tokenizer gives
    them the next free ids, in order). A special token must be a non-empty string that is not
    also a token of the ranks, with an id no token has. Specials may share an id, as tiktoken's
    ``o200k_harmony`` does (``<|endofprompt|>`` and ``<|reserved_200018|>``).
    """
    if special_tokens is None:
        return {}
    if isinstance(special_tokens, str):
        raise InputError("special_tokens must be a {text: id} mapping or a list of strings, not one string")
    given: dict[str, int | None] = (dict(special_tokens) if isinstance(special_tokens, Mapping)
                                    else dict.fromkeys(special_tokens))
    for text, sid in given.items():
        if not isinstance(text, str) or not text:
            raise InputError(f"special token {text!r} must be a non-empty string")
        rank = is_token(text.encode("utf-8"))
        if rank is not None:
            raise InputError(f"special token {text!r} is also a token of the ranks (rank {rank}); "
                             "tiktoken would give the same text two ids")
        if sid is None:
            continue
        if type(sid) is not int or not 0 <= sid <= MAX_TOKEN_ID:
            raise InputError(f"the id of special token {text!r} is {sid!r}, not an integer from 0 to {MAX_TOKEN_ID}")
        other = token_at(sid)
        if other is not None:
            raise InputError(f"special token {text!r} has id {sid}, the rank of {other!r}")
    return given
