"""The writer of one bulk transaction (``Store.bulk_transaction``): its statements on the native
connection (rows bound from native buffers) or, as the fallback, ``executemany`` on the store's
``sqlite3`` connection; and the bulk forms of a per-row update of ``words``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .connection import Result

if TYPE_CHECKING:  # pragma: no cover
    from ..native import WordCounter


class Statements(Protocol):
    """What a ``BulkWriter`` runs its fallback statements on: the ``Store``."""

    def sql(self, statement: str, params: Sequence | None = None) -> Result: ...

    def executemany(self, statement: str, rows: Iterable[tuple]) -> None: ...

_WORDS_SCAN_SHARE = 8


@dataclass(frozen=True)
class PackedWords:
    """A flush's new words from ``WordIds.add_native``: packed counts, ids ``first_id``, ``first_id + 1``, ..."""

    packed: bytes
    first_id: int


@dataclass(frozen=True)
class PackedDeltas:
    """A flush's count deltas from ``WordIds.add_native``: n int64 ids ascending, then n int64 deltas."""

    buffer: bytes

    def __len__(self) -> int:
        return len(self.buffer) // 16


class BulkWriter:
    """The statements of one ``Store.bulk_transaction``: on the native connection ``ndb`` when
    there is one, else through the store's ``sqlite3`` connection (``executemany``, the fallback)."""

    def __init__(self, store: Statements, ndb: Any | None):
        self.store = store
        self.ndb = ndb

    @property
    def native(self) -> bool:
        return self.ndb is not None

    def execute(self, statement: str, params: Sequence = ()) -> list[tuple]:
        """One statement; its rows."""
        if self.ndb is None:
            return self.store.sql(statement, params).fetchall()
        return self.ndb.execute(statement, tuple(params))

    def executemany(self, statement: str, rows: Iterable[tuple], bulk: str | None = None) -> None:
        """The statement for each row: tuples, or a merge engine's checkpoint ``RowStream``, which
        the native connection reads straight from its arrays (the GIL released).

        ``bulk``: the same change as ONE statement reading the rows from ``bpe_store_rows`` (columns
        ``p1, p2, ...`` = parameters 1, 2, ... of ``statement``), which the native connection runs
        instead (``_core.StoreDb.bulk``). Why: a statement stepped per row cost ~1-1.5 us of SQLite's
        own overhead per row on top of the row's b-tree work (enwiki-100M -> 32K's final checkpoint:
        870 K rows); the fallback, which has no such table, runs ``statement`` per row."""
        if isinstance(rows, PackedDeltas):  # made only where there is a native connection
            self.ndb.bulk_deltas(bulk, rows.buffer)
        elif self.ndb is None:
            self.store.executemany(statement, rows)
        elif bulk is not None:
            self.ndb.bulk(bulk, rows)
        else:
            self.ndb.executemany(statement, rows)

    def columns(self, statement: str, n: int, columns: list, rows: Callable[[], Iterable[tuple]], bulk: str) -> None:
        """``statement`` for each of ``n`` rows given as ``columns`` (``_core.StoreDb.bulk_columns``:
        an int, the row number from it; ``(uint32 bytes, stride, at)``; ``(blob bytes, n + 1 int64
        offsets)``), ``bulk`` reading them from ``bpe_store_rows``, on the native connection; the
        fallback runs ``statement`` over ``rows()``, the same rows as tuples. Why: no Python tuple a
        row (a base's 600 K rows)."""
        if self.ndb is None:
            self.store.executemany(statement, rows())
        else:
            self.ndb.bulk_columns(bulk, n, columns)

    def insert_words(self, statement: str, bulk: str,
                     rows: list[tuple[int, bytes | bytearray, int]] | WordCounter) -> None:
        """``statement`` (parameters ``(id, bytes, count)``) for each row, or for each word of a
        native ``WordCounter`` with ids 1, 2, ... in its order; ``bulk`` as for ``executemany``.
        Why ``pack`` on the native path: one buffer for all words instead of a tuple and a
        bytearray per word (counting's first flush of enwiki-100M: 445 K words)."""
        if isinstance(rows, PackedWords):  # made only where there is a native connection
            self.ndb.bulk_packed_words(bulk, rows.packed, rows.first_id)
        elif not hasattr(rows, "row_stream"):
            self.executemany(statement, rows, bulk)
        elif self.ndb is None:
            self.store.executemany(statement, rows.row_stream(1))
        else:
            self.ndb.bulk_packed_words(bulk, rows.pack(), 1)


def words_bulk(w: BulkWriter, n_rows: int, statements: tuple[str, str, str]) -> str:
    """Which bulk form of a per-row ``words`` update runs for ``n_rows`` rows sorted by id (see
    ``merge_rows._WORD_TOKENS``): the one-pass scan when they are 1 / _WORDS_SCAN_SHARE of the words or more."""
    if w.native and n_rows * _WORDS_SCAN_SHARE >= w.execute("SELECT coalesce(max(id), 0) FROM words")[0][0]:
        return statements[2]
    return statements[1]
