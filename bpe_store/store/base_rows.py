"""The store's rows of the base a run extends (``train --extend``): the ``base`` row, the base's own
id of each of its tokens (``base_ids``), and its merges as the store's first merges (count 0).

A based store keeps bpe_store's order of ids inside (special tokens, the 256 bytes, one per merge:
what the merge engine, the checks and a resume rely on) and maps them to the model's ids at the
edge: the base's tokens by ``base_ids``, the run's own by ``id + shift`` (``model_ids``), so the new
ids follow the base's largest. ``read_result`` (the trainer's result, the tokenizer, the exports)
gives model ids. A store without a base has no such rows; its model ids are its ids.
"""

from __future__ import annotations

import itertools
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from . import digest
from .bulk import BulkWriter
from .connection import now


class Triples(Sequence):
    """``[(left, right, token)]`` merges in the store's ids, kept as ``packed``, little-endian uint32
    triples, as their maker read them (a ranks base, natively); the tuples are made only when
    asked for. Why: the merge digest, the engine's replay log and the merges' rows
    (``bulk_columns``) are those bytes; a run never asks for the tuples, whose 200 K (o200k_base)
    cost ~0.035 CPU s to make and ~0.15 each to make the bytes again from."""

    def __init__(self, packed: bytes):
        self.packed = bytes(packed)
        self._rows: list[tuple[int, int, int]] | None = None

    @classmethod
    def of(cls, packed: bytes) -> Triples:
        """The triples of ``packed`` (little-endian uint32s, three a merge)."""
        return cls(packed)

    def rows(self) -> list[tuple[int, int, int]]:
        if self._rows is None:
            a = array("I", self.packed)
            if sys.byteorder != "little":  # pragma: no cover
                a.byteswap()
            it = iter(a)
            self._rows = list(zip(it, it, it))
        return self._rows

    def __len__(self) -> int:
        return len(self.packed) // 12

    def __getitem__(self, k):
        return self.rows()[k]

    def __iter__(self):
        return iter(self.rows())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == len(self) and list(self) == list(other)

    __hash__ = None  # list-like: unhashable, as the list it stands for


@dataclass(frozen=True)
class BaseRows:
    """What a new store records of its base: ``kind``, ``source`` and ``sha256`` (see the ``base``
    table), ``merges`` ``[(left id, right id, token id)]`` in the store's ids, ``merge_bytes`` the
    bytes of each merge's token, ``model_ids`` the base's id of each store id 0 .. n - 1, and
    ``next_id``, the model id of the run's first new token."""

    kind: str
    source: str
    sha256: str
    merges: list[tuple[int, int, int]]
    merge_bytes: list[bytes]
    model_ids: list[int]
    next_id: int


def write_base(store, rows: BaseRows) -> tuple[int, Any]:
    """In the store's creation (``Store.create``'s ``init``, after ``init_run``, no transaction open):
    the base row, its ids, its merges and their vocabulary rows, and a checkpoint recording them (its
    merge digest) in phase counting, as one bulk transaction. Returns the merge log's running digest
    ``(merges, hash)``, which the opened store takes (``Store.seed_merge_digest``) instead of reading
    the rows back.

    Why the bulk path: o200k_base is 600 K rows (ids, merges, vocabulary), ~1.7 CPU s through the
    driver's executemany (the vocabulary's blobs ~1.1 of it), ~0.55 s bound natively."""
    first = len(rows.model_ids) - len(rows.merges)
    shift = rows.next_id - len(rows.model_ids)
    with store.bulk_transaction() as w:
        w.execute("INSERT INTO base (id, kind, source, sha256, merges, tokens, next_id, shift)"
                  " VALUES (1, ?, ?, ?, ?, ?, ?, ?)",
                  (rows.kind, rows.source, rows.sha256, len(rows.merges), len(rows.model_ids), rows.next_id, shift))
        _write_ids(w, rows.model_ids)
        hashed = _write_merges(w, rows.merges, first)
        # Why without the CHECK: vocab.kind's ``IN ('special', 'byte', 'merge')`` cost SQLite ~0.7 us
        # a row (~0.14 CPU s of o200k_base's 200 K rows, more than the rows' own b-tree work), and
        # every row here is the constant 'merge'. A flag pragma expires the prepared statements, so
        # the INSERT is compiled without the check, and with it again after.
        w.execute("PRAGMA ignore_check_constraints = ON")
        try:
            tokens = rows.merge_bytes
            w.columns("INSERT INTO vocab (id, bytes, kind) VALUES (?, ?, 'merge')", len(tokens),
                      [first, (b"".join(tokens), _offsets(tokens))], lambda: enumerate(tokens, first),
                      "INSERT INTO vocab (id, bytes, kind) SELECT p1, p2, 'merge' FROM bpe_store_rows")
        finally:
            w.execute("PRAGMA ignore_check_constraints = OFF")
        w.execute("INSERT INTO checkpoints (at, phase, chunks_counted, merges_done, elapsed_s, write_s, merge_digest)"
                  " VALUES (?, 'counting', 0, ?, 0, NULL, ?)", (now(), len(rows.merges), hashed.hexdigest()))
    return len(rows.merges), hashed


def _write_ids(w: BulkWriter, model_ids: list[int]) -> None:
    """``base_ids``: the model id of each store id 0, 1, ... (a uint32 column natively)."""
    statement = "INSERT INTO base_ids (id, model_id) VALUES (?, ?)"
    try:
        packed = _le(array("I", model_ids)).tobytes()
    except OverflowError:  # an id of 2^32 or more (no tokenizer has one): as tuples
        w.executemany(statement, list(enumerate(model_ids)), "INSERT INTO base_ids (id, model_id) SELECT p1, p2 "
                      "FROM bpe_store_rows")
        return
    w.columns(statement, len(model_ids), [0, (packed, 1, 0)], lambda: enumerate(model_ids),
              "INSERT INTO base_ids (id, model_id) SELECT p1, p2 FROM bpe_store_rows")


def _le(a: array) -> array:
    """``a`` little-endian (the byte order of ``bulk_columns``' buffers)."""
    if sys.byteorder != "little":  # pragma: no cover
        a.byteswap()
    return a


def _offsets(blobs: list[bytes]) -> bytes:
    """The n + 1 int64 offsets of ``blobs`` joined (``bulk_columns``' blob column)."""
    return _le(array("q", itertools.accumulate(map(len, blobs), initial=0))).tobytes()


def _write_merges(w: BulkWriter, merges: list[tuple[int, int, int]], first: int) -> Any:
    """The base's ``merges`` as rows ``(k, left, right, token, 0)`` (merge k makes token ``first +
    k``); their running digest. Why two ways: on the native connection, merges that carry their
    packed bytes (``Triples``) are inserted from their triples, each rank read from its token, and
    digested from the bytes (``_packed_digest``): the rows as 200 K five-tuples and the digest of
    those were ~0.15 CPU s of loading o200k_base."""
    statement = 'INSERT INTO merges (rank, "left", "right", token, count) VALUES (?, ?, ?, ?, ?)'
    packed = getattr(merges, "packed", None)
    n = len(merges)
    if packed is not None and w.native and array("I", packed)[2::3] == array("I", range(first, first + n)):
        w.columns(statement, n, [(packed, 3, 0), (packed, 3, 1), (packed, 3, 2)], lambda: (),
                  f'INSERT INTO merges (rank, "left", "right", token, count) '
                  f"SELECT p3 - {int(first)}, p1, p2, p3, 0 FROM bpe_store_rows")
        return _packed_digest(packed, n)
    merge_rows = [(k, a, b, t, 0) for k, (a, b, t) in enumerate(merges)]
    w.executemany(statement, merge_rows, 'INSERT INTO merges (rank, "left", "right", token, count) '
                  "SELECT p1, p2, p3, p4, p5 FROM bpe_store_rows")
    return digest.update(digest.new_hash(), merge_rows)


def _packed_digest(packed: bytes, n: int) -> Any:
    """The running digest (``digest``) of the merge rows ``(k, left, right, token, 0)`` of the
    ``n`` merges ``packed`` (``Triples.packed``), merge k making token ``first + k`` (the rows
    ``write_base`` writes): their int64s laid out a byte lane at a time by slice assignment (C
    loops; no tuple a row, and numpy, which training does not load, would cost more to import)."""
    ranks = array("I", range(n))
    if sys.byteorder != "little":  # pragma: no cover
        ranks.byteswap()
    rank_bytes = ranks.tobytes()
    rows = bytearray(40 * n)  # (rank, left, right, token, count 0): little-endian int64s
    for j in range(4):  # the uint32s' bytes; the upper four of each int64 stay 0
        rows[j::40] = rank_bytes[j::4]
        for c in range(3):
            rows[8 * (c + 1) + j::40] = packed[4 * c + j::12]
    h = digest.new_hash()
    if n:
        h.update(rows)
    return h


def _has_base_tables(store) -> bool:
    """Whether the store's schema has the base tables (a store of an older revision, opened to be
    read, has none and no base)."""
    return bool(store.sql("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'base'").first())


def base_row(store) -> dict | None:
    """The ``base`` row as a dict, or None for a store that extends no base."""
    if not _has_base_tables(store):
        return None
    row = store.sql("SELECT kind, source, sha256, merges, tokens, next_id, shift FROM base WHERE id = 1").first()
    if row is None:
        return None
    return dict(zip(("kind", "source", "sha256", "merges", "tokens", "next_id", "shift"), row))


def model_ids(store, n: int) -> list[int] | None:
    """The model id of each store id 0 .. n - 1, or None when they are the same (no base); StoreError
    for base rows that bpe_store could not have written."""
    base = base_row(store)
    if base is None:
        return None
    mapped = store.sql("SELECT id, model_id FROM base_ids ORDER BY id").fetchall()
    if [i for i, _ in mapped] != list(range(base["tokens"])) or base["tokens"] + base["shift"] != base["next_id"]:
        raise StoreError(f"{store.path}: the store is inconsistent (its base's ids); start over with --restart")
    ids = [m for _, m in mapped][:n] + [i + base["shift"] for i in range(len(mapped), n)]
    if len(set(ids)) != len(ids) or any(type(i) is not int or i < 0 for i in ids):
        raise StoreError(f"{store.path}: the store is inconsistent (two tokens with one model id); "
                         "start over with --restart")
    return ids


def base_diff(store, sha256: str | None, source: str | None) -> list[str]:
    """How a resume's base (its SHA-256 and source, None for none) differs from the store's."""
    base = base_row(store)
    had = None if base is None else base["sha256"]
    if had == sha256:
        return []
    old = "no base" if base is None else f"base {base['source']} (SHA-256 {base['sha256'][:12]}...)"
    new = "no base" if sha256 is None else f"base {source} (SHA-256 {sha256[:12]}...)"
    return [f"{old} -> {new}"]


def renumber(vocab: dict[int, bytes], ids: Sequence[int] | None) -> dict[int, bytes]:
    """``vocab`` keyed by the model ids ``ids`` (``model_ids``), or as it is without a base."""
    if ids is None:
        return vocab
    return {ids[i]: b for i, b in vocab.items()}
