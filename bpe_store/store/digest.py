"""The running digest over a store's merge log: BLAKE2b over every merge row, in rank order.

Every ``checkpoints`` row records ``merge_digest``, the digest of the merges the store holds when
it commits (``merges_done`` of them: ``merges`` rows of ranks 0 .. merges_done - 1, each
``(rank, left, right, token, count)``). A reader recomputes it from the log and compares with the
newest checkpoint's (``bpe_store.store.result.result_check``): a merge changed by hand (a pair
swapped, a count edited, a row deleted or added) no longer matches. The vocabulary is not in the
digest: every vocabulary row is fixed by the special tokens, the 256 bytes and the merges, and is
checked against them instead.

What it is not: a signature. Someone who edits the log and recomputes this digest (this module
is public) is not caught; it catches careless edits, damage, and tools that rewrite rows.

Why BLAKE2b: in the standard library, stable across versions and platforms, and fast (the rows
of 32 K merges are 1.3 MB: about 2 ms). The rows are hashed as little-endian int64s in one
``update`` per batch, so computing it costs about as much as reading the log.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import Any

#: BLAKE2b's personalisation (16 bytes): a digest of something else never equals one of these.
PERSON = b"bpe_store.merges"
DIGEST_BYTES = 16

#: The first schema revision whose checkpoints record the digest (older stores are read unchecked).
#: Here, not in result.py, so that a reader of the log (``merge_log``: ``Tokenizer.from_store``)
#: does not import the result module for one name.
DIGEST_SINCE = "v0_3_0_merge_digest"

#: ``(rank, left, right, token, count)`` as SQLite and the trainer hold them
MergeRow = tuple[int, int, int, int, int]


def new_hash() -> Any:
    """A fresh hash, before any merge."""
    return hashlib.blake2b(digest_size=DIGEST_BYTES, person=PERSON)


def update(h: Any, rows: Sequence[MergeRow]) -> Any:
    """Add ``rows`` (in rank order, after those ``h`` holds) to ``h``; returns ``h``.

    Raises TypeError or OverflowError for a value that is not a 64-bit integer (a caller checks
    the rows first and says which is damaged)."""
    if len(rows):
        a = array("q", chain.from_iterable(rows))
        if sys.byteorder != "little":  # pragma: no cover - every platform we build for is little-endian
            a.byteswap()
        h.update(a)
    return h


def merge_digest(rows: Sequence[MergeRow], packed: bytes | None = None) -> str:
    """The hex digest of a whole merge log ``rows`` (rank order); ``packed``: the same rows as
    native int64s when the caller has them (hashed as they are on a little-endian machine)."""
    if packed is not None and sys.byteorder == "little":
        h = new_hash()
        h.update(packed)
        return h.hexdigest()
    return update(new_hash(), rows).hexdigest()


#: The digest of an empty merge log (every checkpoint before the first merge).
EMPTY = merge_digest(())


# ---- the words' digest -------------------------------------------------------------------------
#
# The words (``id, bytes, count``) stop changing when counting ends; every later checkpoint
# records their digest (``checkpoints.words_digest``), and a resume, a grow and ``db check --deep``
# recompute it from the table. Why not BLAKE2b as for the merge log: the words are millions of
# rows (7 M for a 12 GB corpus) read by native code without a Python object each, so the digest is
# computed natively as well (native/words_digest.cpp), and this is its plain-Python twin. Why a
# sum of per-word terms: the rows may be digested in parts (id ranges) and added up. Each term is
# the product of a word's fingerprint (its bytes and id) and its count, so moving a count from one
# word to another changes the sum, as do an edited count, an edited word, a row deleted or added.
# Two primes give ~125 bits; what the merge log's digest says it is not (a signature), this is not.

#: The two moduli: the Mersenne prime 2^61 - 1 and the prime 2^64 - 59.
WORDS_P1 = (1 << 61) - 1
WORDS_P2 = (1 << 64) - 59
#: Odd constants (hexadecimal digits of pi) that keep an id or a count from cancelling another term.
_K_ID1, _K_ID2 = 0x243F6A8885A308D3, 0x13198A2E03707344
_K_COUNT1, _K_COUNT2 = 0xA4093822299F31D0, 0x082EFA98EC4E6C89

#: ``(id, bytes, count)`` of a word, as the ``words`` table holds it
WordRow = tuple[int, bytes, int]


def word_terms(word_id: int, word: bytes, count: int) -> tuple[int, int]:
    """A word's two terms: its fingerprint ``(bytes + 0x01 as a little-endian number + id * K)``
    times ``(count + K')``, modulo each prime. The 0x01 keeps trailing zero bytes significant."""
    v = int.from_bytes(word + b"\x01", "little")
    t1 = (v + word_id * _K_ID1) % WORDS_P1 * ((count + _K_COUNT1) % WORDS_P1) % WORDS_P1
    t2 = (v + word_id * _K_ID2) % WORDS_P2 * ((count + _K_COUNT2) % WORDS_P2) % WORDS_P2
    return t1, t2


def add_words(total: tuple[int, int, int], rows: Iterable[WordRow]) -> tuple[int, int, int]:
    """``total`` ``(rows, sum 1, sum 2)`` with ``rows`` added (the native ``words_digest`` gives the
    same for a ``WordRows``)."""
    n, s1, s2 = total
    for word_id, word, count in rows:
        t1, t2 = word_terms(word_id, bytes(word), count)
        n, s1, s2 = n + 1, (s1 + t1) % WORDS_P1, (s2 + t2) % WORDS_P2
    return n, s1, s2


def words_digest_text(total: tuple[int, int, int]) -> str:
    """The digest as ``checkpoints.words_digest`` holds it: ``"<rows>:<sum 1>:<sum 2>"`` (hex)."""
    n, s1, s2 = total
    return f"{n}:{s1:016x}:{s2:016x}"


def words_digest(rows: Iterable[WordRow]) -> str:
    """The digest of every word ``rows`` ``(id, bytes, count)``, in any order."""
    return words_digest_text(add_words((0, 0, 0), rows))
