"""OpenAI's ``.tiktoken`` ranks files (``base64(token) rank`` per line), read with every problem
named by file and line, and tiktoken's BPE rule put into the form bpe_store's encoder runs.

tiktoken has no merge list: a token's rank is its id, and two adjacent parts of a piece merge when
their *concatenation* has a rank, the lowest first (leftmost on ties), one merge at a time, and a
piece that is itself a token is that token. ``tiktoken_merges`` lists, for each token, every way of
writing it as two tokens; ``Tokenizer.from_tiktoken`` ranks each such pair by the id of the token
it makes, which is exactly tiktoken's lookup.

Below the tokenizer (``Tokenizer.from_tiktoken`` reads them): a file format, nothing else.

>>> tiktoken_merges({b"a": 0, b"b": 1, b"ab": 2, b"aba": 3, b"ba": 4})
[(b'a', b'b'), (b'a', b'ba'), (b'ab', b'a'), (b'b', b'a')]
"""

from __future__ import annotations

import binascii
import gzip
import os
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import InputError
from .gpt2_files import MAX_TOKEN_ID

_GZIP_MAGIC = b"\x1f\x8b"


class TiktokenFileError(InputError):
    """A ``.tiktoken`` ranks file that cannot be read as one: the message names the file and line
    (exit 2 from the CLI)."""


def _read_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped if it is gzip (``bpe-openai`` ships ``*.tiktoken.gz``)."""
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a .tiktoken ranks file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if data[:2] == _GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise TiktokenFileError(f"{path}: a damaged gzip file ({exc})") from None
    return data


def read_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """``{token bytes: rank}`` of a ``.tiktoken`` file (plain or gzipped), as tiktoken's
    ``load_tiktoken_bpe`` reads it (blank lines skipped) but strict: each line must be
    ``base64 rank`` with valid base64 of a non-empty token and a decimal rank from 0 to
    ``MAX_TOKEN_ID``; tokens and ranks must be distinct, and all 256 single bytes must have a rank
    (byte-level BPE starts from them). Every problem is a ``TiktokenFileError`` naming the line.
    """
    p = Path(path)
    data = _read_bytes(p)
    ranks: dict[bytes, int] = {}
    line_of: dict[bytes, int] = {}  # {token: line}, for the messages
    token_of: dict[int, bytes] = {}  # {rank: token}
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        at = f"{p}: line {n}"
        fields = line.split()
        if len(fields) != 2:
            shown = line[:60].decode("utf-8", "replace")
            raise TiktokenFileError(f"{at} is not 'base64-token rank': {shown!r}")
        b64, rank_text = fields
        try:
            token = binascii.a2b_base64(b64, strict_mode=True)
        except (binascii.Error, ValueError):
            raise TiktokenFileError(f"{at}: {b64[:60].decode('utf-8', 'replace')!r} is not base64") from None
        if not token:
            raise TiktokenFileError(f"{at}: the token is empty")
        if not rank_text.isdigit() or not rank_text.isascii() or int(rank_text) > MAX_TOKEN_ID:
            raise TiktokenFileError(f"{at}: the rank {rank_text[:40].decode('utf-8', 'replace')!r} is not an "
                                    f"integer from 0 to {MAX_TOKEN_ID}")
        rank = int(rank_text)
        if token in ranks:
            raise TiktokenFileError(f"{at}: token {token!r} is listed twice (first on line {line_of[token]})")
        if rank in token_of:
            other = token_of[rank]
            raise TiktokenFileError(f"{at}: rank {rank} is given to {token!r} and to {other!r} "
                                    f"(line {line_of[other]}); ranks must be distinct")
        ranks[token] = rank
        line_of[token] = n
        token_of[rank] = token
    if not ranks:
        raise TiktokenFileError(f"{p}: holds no ranks (an empty file?)")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise TiktokenFileError(f"{p}: {len(missing)} single byte(s) have no rank (first: {missing[0]:#04x}); "
                                "byte-level BPE needs all 256")
    return ranks


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


def tiktoken_specials(ranks: Mapping[bytes, int], special_tokens: Mapping[str, int] | Sequence[str] | None
                      ) -> dict[str, int | None]:
    """``{special token: id}`` checked against the ranks: a mapping keeps its ids (what tiktoken's
    ``special_tokens`` is; OpenAI's ids need it), a sequence gets ``None`` (the tokenizer gives
    them the next free ids, in order). A special token must be a non-empty string that is not
    also a token of the ranks, with an id that no token or other special has.
    """
    if special_tokens is None:
        return {}
    if isinstance(special_tokens, str):
        raise InputError("special_tokens must be a {text: id} mapping or a list of strings, not one string")
    given: dict[str, int | None] = (dict(special_tokens) if isinstance(special_tokens, Mapping)
                                    else dict.fromkeys(special_tokens))
    rank_of_id = {r: t for t, r in ranks.items()}  # {rank: token}
    owner: dict[int, str] = {}  # {id: special token}
    for text, sid in given.items():
        if not isinstance(text, str) or not text:
            raise InputError(f"special token {text!r} must be a non-empty string")
        b = text.encode("utf-8")
        if b in ranks:
            raise InputError(f"special token {text!r} is also a token of the ranks (rank {ranks[b]}); "
                             "tiktoken would give the same text two ids")
        if sid is None:
            continue
        if type(sid) is not int or not 0 <= sid <= MAX_TOKEN_ID:
            raise InputError(f"the id of special token {text!r} is {sid!r}, not an integer from 0 to {MAX_TOKEN_ID}")
        if sid in rank_of_id:
            raise InputError(f"special token {text!r} has id {sid}, the rank of {rank_of_id[sid]!r}")
        if sid in owner:
            raise InputError(f"special tokens {owner[sid]!r} and {text!r} both have id {sid}")
        owner[sid] = text
    return given
