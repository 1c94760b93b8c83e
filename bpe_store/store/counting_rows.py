"""The store's ``words`` while counting: a flush's word counts written (new words appended, known
ones' counts added by id), the word map loaded from the store on a resume, and every word read
back for the merge engine. ``CountingRows`` is a part of ``Store``.
"""

from __future__ import annotations

import gc
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import native
from ..errors import StoreError
from ..pauses import pause_for_tests as _test_pause
from . import native_connection
from .bulk import PackedDeltas, PackedWords, words_bulk
from .connection import BUSY_TIMEOUT_MS, WAL_SIZE_LIMIT, now

if TYPE_CHECKING:  # pragma: no cover
    from .._core import WordIds, WordRows
    from ..counting.count import PackedCounts
    from ..native import WordCounter

# Why counting.count and text.fingerprint are imported where they are used: a reader of a store
# (Tokenizer.from_store) imports this module through Store and needs neither; they and what they
# import were ~0.05 of the ~0.11 CPU s a 32K store took to load.

#: A counting flush's count deltas ``(delta, id)``. Why bulk: per row, the statement ran with the
#: GIL held from the first row to the last (binding Python tuples), ~850 K rows a flush at 12 GB,
#: while the main thread waited to reduce the workers' counts; as one statement with the GIL
#: released the whole 12 GB run went 181-187 -> 151 s wall, 258-266 -> 239-244 CPU s (alternated,
#: bench/RESULTS-scale.md).
_COUNT_DELTAS = ("UPDATE words SET count = count + ? WHERE id = ?",
                 "UPDATE words SET count = count + r.p1 FROM bpe_store_rows AS r WHERE words.id = r.p2",
                 "UPDATE words SET count = count + bpe_store_lookup(id) WHERE bpe_store_lookup(id) IS NOT NULL")


#: A store of at least this many words is read in two halves at once (``_read_native_words_halves``).
_PARALLEL_READ_MIN = 1 << 20
#: Words a resume's first counting flush reads from the store at a time (``Store._load_words``).
_WORD_LOAD_BATCH = 1 << 20


def _add_unit_fingerprints(w: Any, chunk_done: Sequence[tuple]) -> None:
    """In a counting flush's transaction: add the fingerprints of the units it marks counted to
    their inputs' ``sources.digest`` (``fingerprint.UNITS_HASH``: a sum over the counted units),
    so a store's fingerprint of an input always covers exactly its counted units. A unit of such
    an input marked without one is a bug, refused before anything commits."""
    from ..text.fingerprint import UNITS_HASH, add_units, unit_term

    digests = {m[0]: m[2] for m in chunk_done if len(m) > 2 and m[2] is not None}
    ids = [m[0] for m in chunk_done]
    if not ids:
        return
    rows = []
    for i in range(0, len(ids), 500):  # SQLite's bound-parameter limit
        part = ids[i:i + 500]
        rows += w.execute('SELECT c.id, c.source_id, c.start, c."end", s.digest FROM chunks c'
                          " JOIN sources s ON s.id = c.source_id"
                          f" WHERE s.hash = ? AND c.id IN ({', '.join('?' * len(part))})", [UNITS_HASH, *part])
    sums: dict[int, int] = {}
    now_: dict[int, str] = {}
    for cid, sid, start, end, digest in rows:
        if cid not in digests:
            raise RuntimeError(f"unit {cid} of an input fingerprinted unit by unit was counted without its fingerprint")
        sums[sid] = sums.get(sid, 0) + unit_term(digests[cid], start, end)
        now_[sid] = digest
    w.executemany("UPDATE sources SET digest = ? WHERE id = ?",
                  [(add_units(now_[sid], total), sid) for sid, total in sorted(sums.items())])


def unpack_tokens(blob: bytes) -> list[int]:
    """The token ids of a ``words.tokens`` blob (little-endian uint32)."""
    import array

    a = array.array("I")
    a.frombytes(blob)
    return a.tolist()


@dataclass(frozen=True)
class StreamMark:
    """Where counting a stream stands after a flush: ``bytes`` and ``documents`` read, the
    SHA-256 of that prefix (a resume checks the stream given again starts the same), the
    pre-tokens this flush adds, and whether the stream has ended."""

    source_id: int
    chunk_id: int
    bytes: int
    documents: int
    sha256: str
    pretokens: int
    finished: bool


class CountingRows:
    """Counting's words (a part of ``Store``: needs its connections, ``sql`` and transactions)."""

    def add_word_counts(self, counts: Iterable[tuple[bytes, int]], chunk_done: Sequence[tuple],
                        elapsed_s: float, stream_at: StreamMark | None = None) -> None:
        """One transaction: add ``(word, count)`` deltas and mark ``(chunk id, pre-tokens[,
        fingerprint])`` counted; a unit's fingerprint (XXH3-128 of its bytes as they were counted)
        is added to its input's ``UNITS_HASH`` fingerprint (``_add_unit_fingerprints``).

        ``counts``: a native ``WordCounter``, a ``{bytes: count}`` dict, or ``(word, count)`` pairs.
        ``stream_at``: where a stream's counting stands once these counts are in (written in the
        same transaction).

        Word ids come from ``self._words`` (a native ``WordIds``: every word of the store with
        its id and total, loaded from the store on first use), so a new word is a rowid append
        and a known one an update by rowid, the updates sorted by id so SQLite walks ``words``
        once, in order. Why: at OpenWebText scale (~7 M words, ~1-2 M per flush) the Python
        ``{bytes: id}`` map and an UPDATE per word in hash order cost 6-9 CPU-s and ~20 s of
        wall per flush (page cache misses, WAL spills) and ~0.85 GB (bench/RESULTS-scale.md).

        The first flush into an empty ``words`` table needs no map: every word is new, ids 1, 2,
        ... in order. A native counter streams its rows into the INSERT and is kept as it is for
        the merge engine (``take_fresh_word_rows``; a list of enwiki-100M's 445 K rows was ~90 MB,
        its peak) while no later flush changes the table; a later flush reads the map from the store.
        """
        from ..counting.count import PackedCounts

        if isinstance(counts, PackedCounts):
            if self._native() is not None:
                return self._add_packed_counts(counts, chunk_done, elapsed_s, stream_at)
            counts = counts.counter()  # no native connection: the WordCounter path
        native = hasattr(counts, "row_stream")
        if not native and not isinstance(counts, dict):
            counts = dict(counts)  # pairs (a word may repeat: summed, as the store would)
        if self.words_are_next_flush():
            rows = counts if native else [(i, w, c) for i, (w, c) in enumerate(counts.items(), 1)]
            self._write_word_counts(rows, [], chunk_done, elapsed_s, stream_at)
            self._fresh_rows = counts if native else rows  # only once committed: then it is what the store holds
            return
        fresh, self._fresh_rows = self._fresh_rows, None  # this flush changes counts: the kept rows go stale
        words = self._words if self._words is not None else self._load_words(fresh)
        try:
            if native and hasattr(words, "add_native") and self._native() is not None:
                # no Python object per word: new words and deltas go to SQLite from native buffers
                packed, first_id, deltas = words.add_native(counts)
                new, old = PackedWords(packed, first_id), PackedDeltas(deltas)
            else:
                new, old = words.add(counts)
            self._write_word_counts(new, old, chunk_done, elapsed_s, stream_at)
        except BaseException:
            self._words = None  # the store is the truth: reloaded from it if counting goes on
            raise
        self._words = words

    def _add_packed_counts(self, counts: PackedCounts, chunk_done: Sequence[tuple[int, int]], elapsed_s: float,
                           stream_at: StreamMark | None) -> None:
        """``add_word_counts`` for packed counts, on the native connection: ``WordIds.add_packed``
        gives the new words packed and the deltas as one buffer, bound by SQLite from there (no
        Python object per word, no ``WordCounter``). An empty store starts from an empty map."""
        fresh, self._fresh_rows = self._fresh_rows, None
        words = self._words
        if words is None:
            words = self._load_words(fresh) if fresh is not None or not self._words_empty() else _new_word_ids()
        try:
            packed, first_id, deltas = words.add_packed(counts.parts)
            self._write_word_counts(PackedWords(packed, first_id), PackedDeltas(deltas), chunk_done, elapsed_s,
                                    stream_at)
        except BaseException:
            self._words = None  # the store is the truth: reloaded from it if counting goes on
            raise
        self._words = words

    def words_are_next_flush(self) -> bool:
        """Whether the next ``add_word_counts`` makes the store's words exactly its counts' rows,
        ids 1, 2, ... in their order (the first flush into an empty ``words``): a caller may then
        build on those counts before that flush commits (``merge_step._pairs``)."""
        return self._words is None and self._fresh_rows is None and self._words_empty()

    def _words_empty(self) -> bool:
        return self.sql("SELECT NOT EXISTS (SELECT 1 FROM words)").scalar() == 1

    def has_words(self) -> bool:
        """Whether the store holds a word."""
        return not self._words_empty()

    def count_words(self) -> int:
        return self.sql("SELECT count(*) FROM words").scalar()

    def last_word_id(self) -> int:
        """The largest word id (0 without words): words have the ids 1, 2, ..., so also their number."""
        return self.sql("SELECT coalesce(max(id), 0) FROM words").scalar()

    def word_id_at(self, index: int) -> int | None:
        """The id of the ``index``-th word in id order (from 0), as the merge engine numbers them."""
        return self.sql("SELECT id FROM words ORDER BY id LIMIT 1 OFFSET ?", (index,)).scalar()

    def most_frequent_words(self, min_bytes: int, limit: int) -> Iterable[tuple[bytes, int]]:
        """``(word, count)`` of the ``limit`` most frequent words of at least ``min_bytes`` bytes,
        most frequent first (ties by their bytes), read as they are iterated."""
        return self.sql("SELECT bytes, count FROM words WHERE length(bytes) >= ?"
                        " ORDER BY count DESC, bytes LIMIT ?", (min_bytes, limit))

    def _load_words(self, fresh: Any = None) -> Any:
        """A ``WordIds`` holding the store's words, read in batches (what is read at once, native
        rows or Python tuples, is never more than a batch); from ``fresh``, the native
        ``WordCounter`` whose rows the store holds exactly (``_fresh_rows``), when there is one.
        Why: a second counting flush read back every word the first one wrote (a Ray driver's
        flush of ~1 M words: ~0.3 CPU s), while the same words, in the same order, are in memory;
        the counter is emptied (its words move), so nothing may use it after this."""
        words = _new_word_ids()
        if fresh is not None and hasattr(fresh, "row_stream") and hasattr(words, "add_native"):
            words.adopt(fresh)  # ids 1, 2, ... in the counter's order, as its flush wrote them
            return words
        ndb = self._native() if hasattr(words, "load_rows") else None
        try:
            if ndb is not None:
                # Why native: no Python tuple per word, the GIL released (see WordIds.load_rows);
                # why batches: all the rows at once were ~40 bytes a word more resident, at the
                # flush that is already the counting phase's peak
                batch = _WORD_LOAD_BATCH
                while True:
                    rows = self.read_native_words(ndb, "SELECT id, bytes, count, NULL FROM words "
                                                   f"WHERE id > {len(words)} ORDER BY id LIMIT {batch}")
                    words.load_rows(rows)
                    if len(rows) < batch:
                        return words
            cur = self.db.execute("SELECT id, bytes, count FROM words ORDER BY id")
            while batch := cur.fetchmany(100_000):
                words.load(batch)
        except (TypeError, ValueError) as exc:
            msg = f"{self.path}: the store's words are damaged ({exc}); start over with --restart"
            raise StoreError(msg) from None
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        return words

    def _write_word_counts(self, new: list[tuple[int, bytes | bytearray, int]] | WordCounter,
                           old: list[tuple[int, int]], chunk_done: Sequence[tuple[int, int]], elapsed_s: float,
                           stream_at: StreamMark | None = None) -> None:
        """The counting checkpoint, ONE transaction: new words (rows ``(id, bytes, count)``, or a
        first flush's native ``WordCounter``: ids 1, 2, ...), count deltas, chunk marks, progress."""
        with self.bulk_transaction() as w:
            # tokens stay NULL (single bytes); see WordCounter.rows for why no 4th column
            w.insert_words("INSERT INTO words (id, bytes, count) VALUES (?, ?, ?)",
                           "INSERT INTO words (id, bytes, count) SELECT p1, p2, p3 FROM bpe_store_rows", new)
            if len(old):
                w.executemany(_COUNT_DELTAS[0], old, words_bulk(w, len(old), _COUNT_DELTAS))
            w.executemany("UPDATE chunks SET counted = 1, pretokens = ? WHERE id = ?",
                          [(m[1], m[0]) for m in chunk_done])
            _add_unit_fingerprints(w, chunk_done)
            if stream_at is not None:
                m = stream_at
                w.execute("UPDATE sources SET size = ?, digest = ?, documents = ? WHERE id = ?",
                          (m.bytes, m.sha256, m.documents, m.source_id))
                w.execute('UPDATE chunks SET "end" = ?, counted = ?, pretokens = coalesce(pretokens, 0) + ?'
                          " WHERE id = ?", (m.bytes, int(m.finished), m.pretokens, m.chunk_id))
            w.execute("UPDATE run SET updated_at = ? WHERE id = 1", (now(),))
            self.add_checkpoint_row("counting", 0, elapsed_s, None, w)
            self._flushes += 1
            _test_pause(f"flush:{self._flushes}")  # tests: kill inside a flush's transaction

    def take_fresh_word_rows(self) -> list[tuple[int, bytes | bytearray, int]] | WordCounter | WordIds | None:
        """Every word from what this session's flushes left in memory (see ``add_word_counts``),
        for ``merge.new_engine``: the one flush's rows ``(id, word, count)`` (``load_word_rows``
        without the tokens column, NULL while counting) or its native ``WordCounter``, or after
        more flushes the native ``WordIds`` (both: words in id order 1, 2, ..., read by the
        native engine without a Python object per word); None when nothing was flushed here and
        the store must be read. Handed over once: the store forgets them (and the word map)."""
        rows, words = self._fresh_rows, self._words
        self._fresh_rows = self._words = None
        if rows is None and words is not None:
            rows = words if hasattr(words, "pack") else words.rows()
        return rows

    def load_word_rows(self, packed: bool = False,
                       tokens: bool = True) -> list[tuple[int, bytes, int, bytes | None]] | WordRows:
        """All words in id order as plain tuples ``(id, bytes, count, token blob or None)``
        (``tokens`` False: None for every word, as they are at rank 0).

        Plain driver tuples: the merge engines read them directly (no row objects for ~1M words).
        ``packed``: for the native merge engine, the same rows read by the native connection into
        one ``_core.WordRows`` buffer when there is one (no Python object per word: a resume of
        enwiki-100M -> 32K read 445 K tuples of 4 objects each, a 12 GB corpus's 7 M).
        """
        column = "tokens" if tokens else "NULL"
        ndb = self._native() if packed else None
        if ndb is not None:
            return self._read_native_words_halves(ndb, column)
        gc_on = gc.isenabled()
        gc.disable()  # ~1M new tuples would trigger many useless collections (nothing is cyclic)
        try:
            return self.db.execute(f"SELECT id, bytes, count, {column} FROM words ORDER BY id").fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        finally:
            if gc_on:
                gc.enable()

    def _read_native_words_halves(self, ndb: Any, column: str = "tokens") -> WordRows:
        """Every word row, read natively; from ``_PARALLEL_READ_MIN`` words on, the upper half of
        the ids on a second connection and thread at the same time. Why: the read is SQLite's work
        per row on one core while the other waits (a resume of a 12 GB OWT-like store: 7.0 M words,
        ~1.1 s), and words have the ids 1, 2, ... so an id splits them evenly."""
        sql = f"SELECT id, bytes, count, {column} FROM words {{}} ORDER BY id"
        top = self.sql("SELECT coalesce(max(id), 0) FROM words").scalar()
        if top < _PARALLEL_READ_MIN:
            return self.read_native_words(ndb, sql.format(""))
        mid = top // 2
        try:
            other = native_connection.connect(self.path, busy_timeout_ms=BUSY_TIMEOUT_MS, synchronous="OFF",
                                              cache_kib=0, journal_size_limit=WAL_SIZE_LIMIT)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        upper: list = []  # the other thread's rows, or the exception it raised

        def read_upper() -> None:
            try:
                upper.append(self.read_native_words(other, sql.format(f"WHERE id > {mid}")))
            except BaseException as exc:  # re-raised below, in the caller's thread
                upper.append(exc)

        reader = threading.Thread(target=read_upper, name="bpe_store-read-words")
        try:
            reader.start()
            rows = self.read_native_words(ndb, sql.format(f"WHERE id <= {mid}"))
        finally:
            reader.join()
            other.close()
        if isinstance(upper[0], BaseException):
            raise upper[0]
        rows.extend(upper[0])
        return rows

    def read_native_words(self, ndb: Any, sql: str) -> WordRows:
        """``sql``'s rows ``(id, bytes, count, tokens)`` read by the native connection; a row of the
        wrong types is a damaged store, as the engine says of Python rows."""
        try:
            return ndb.read_word_rows(sql)
        except ValueError as exc:
            msg = f"{self.path}: the store's words are damaged ({exc}); start over with --restart"
            raise StoreError(msg) from None
        except Exception as exc:
            if not native_connection.is_native_error(exc):
                raise
            err = native_connection.to_sqlite_error(exc)
            raise self._error(err) from err


class PyWordIds:
    """``_core.WordIds`` in Python, for an installation without the native core: the same
    methods and rows (word -> dense id in first-seen order, and its total count)."""

    def __init__(self) -> None:
        self._index: dict[bytes, int] = {}  # word -> entry number (id - 1)
        self._words: list[bytes] = []
        self._counts: list[int] = []

    def __len__(self) -> int:
        return len(self._words)

    def load(self, rows: list[tuple[int, bytes, int]]) -> None:
        for i, word, count in rows:
            if i != len(self._words) + 1:
                raise ValueError("word ids are not 1, 2, 3, ... in order")
            if word in self._index:
                raise ValueError("a word is stored twice")
            if not isinstance(count, int) or count < 0:
                raise ValueError("a word count is negative or not 64-bit")
            self._index[word] = len(self._words)
            self._words.append(word)
            self._counts.append(count)

    def add(self, counts: Any) -> tuple[list[tuple[int, bytearray, int]], list[tuple[int, int]]]:
        first_new = len(self._words)
        known: list[tuple[int, int]] = []
        for word, count in counts.items():  # a dict: each word once
            k = self._index.get(word)
            if k is None:
                self._index[word] = len(self._words)
                self._words.append(bytes(word))
                self._counts.append(count)
            else:
                self._counts[k] += count
                known.append((k, count))
        known.sort()
        return self._rows(first_new), [(c, k + 1) for k, c in known]

    def rows(self, first_id: int = 1) -> list[tuple[int, bytearray, int]]:
        return self._rows(0, first_id - 1)

    def _rows(self, first: int, shift: int = 0) -> list[tuple[int, bytearray, int]]:
        return [(k + 1 + shift, bytearray(self._words[k]), self._counts[k]) for k in range(first, len(self._words))]


def _new_word_ids() -> Any:
    """An empty word map: the native ``WordIds``, or ``PyWordIds`` without the native core."""
    return PyWordIds() if native.core is None else native.core.WordIds()
