"""The store: one SQLite file that holds a training run's whole state.

A ``Store`` wraps one SQLAlchemy connection to the file. It checks on open that the file is a
bpe_store store at this version's schema, takes an exclusive lock for writers (released by the
OS if the process dies), and offers the few bulk reads and writes training needs. Every write
that moves the run forward is one transaction, so after a crash the file is at its last
checkpoint. Bulk writes are ``executemany`` on plain tuples.

Token ids in ``words.tokens``, ``pair_counts`` and ``merges`` are vocabulary ids: the special
tokens first, then the 256 bytes, then one per merge. Tokens are identified by their bytes: if a
merge spells bytes that already have an id, words and pairs keep using that first id.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import gc
import json
import os
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from . import migrate
from .errors import StoreError

#: ``PRAGMA application_id`` of every bpe_store file ("BPE1"): tells our stores from other SQLite files.
APPLICATION_ID = 0x42504531
SQLITE_MAGIC = b"SQLite format 3\x00"

#: SQLite page cache (KiB) while writing merge checkpoints; see ``write_merge_rows``.
CHECKPOINT_CACHE_KIB = 256 << 10

#: ``{(left, right): count}``
PairCounts = dict[tuple[int, int], int]


@dataclass(frozen=True)
class RunParams:
    """What defines a run's result. A resume must give the same (vocab_size may grow)."""

    pattern: str
    special_tokens: tuple[str, ...]
    vocab_size: int
    invalid_utf8: str = "strict"

    @property
    def num_merges(self) -> int:
        return self.vocab_size - 256 - len(self.special_tokens)


@dataclass(frozen=True)
class Source:
    """One input file as it was when the run started."""

    path: str
    size: int
    mtime_ns: int
    sha256: str


@dataclass(frozen=True)
class Chunk:
    """A byte range of one source, counted as a unit."""

    id: int
    source_id: int
    start: int
    end: int
    counted: bool


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def unpack_tokens(blob: bytes) -> list[int]:
    """The token ids of a ``words.tokens`` blob (little-endian uint32)."""
    import array

    a = array.array("I")
    a.frombytes(blob)
    return a.tolist()


def _sqlite_error(path: Path, exc: BaseException) -> StoreError:
    msg = str(getattr(exc, "orig", exc))
    if "not a database" in msg or "malformed" in msg:
        return StoreError(f"{path}: the database file is corrupt or not a SQLite database ({msg})")
    if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
        return StoreError(f"{path}: cannot write the database here ({msg})")
    if "disk is full" in msg or "database or disk is full" in msg:
        return StoreError(f"{path}: the disk is full ({msg}); the store is still at its last checkpoint")
    return StoreError(f"{path}: SQLite error: {msg}")


def _engine(path: Path, readonly: bool) -> Engine:
    if readonly:
        url = f"sqlite:///file:{path}?mode=ro&uri=true"
    else:
        url = f"sqlite:///{path}"
    engine = create_engine(url, poolclass=NullPool)

    # pysqlite's own transaction handling does not cover DDL; let SQLAlchemy's begin() be a real
    # BEGIN so that a checkpoint (and a migration) is exactly one transaction.
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: sqlite3.Connection, _record: object) -> None:
        dbapi_conn.isolation_level = None
        dbapi_conn.execute("PRAGMA busy_timeout = 10000")
        # FULL: a committed checkpoint survives power loss, not only a process crash
        dbapi_conn.execute("PRAGMA synchronous = FULL")

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    return engine


def _raw(conn: Connection) -> sqlite3.Connection:
    """The driver connection, for PRAGMAs that may not run inside SQLAlchemy's transaction."""
    return conn.connection.driver_connection  # type: ignore[return-value]


class Store:
    """An open store. Use ``Store.open`` (existing) or ``Store.create`` (new)."""

    def __init__(self, path: Path, engine: Engine, conn: Connection, lock_fd: int | None):
        self.path = path
        self._engine = engine
        self.conn = conn
        self._lock_fd = lock_fd
        self._word_ids: dict[bytes, int] | None = None
        self._fresh_rows: list[tuple[int, bytes | bytearray, int]] | None = None

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike, *, readonly: bool = False, allow_old: bool = False) -> Store:
        """Open an existing store, checking it is ours and at this version's schema."""
        p = Path(path)
        cls._check_file(p)
        if not p.exists():
            raise StoreError(f"{p}: no such store")
        lock_fd = None if readonly else cls._lock(p)
        try:
            engine = _engine(p, readonly)
            conn = engine.connect()
            try:
                cls._check_identity(p, conn, allow_old=allow_old)
                conn.commit()
                if not readonly:
                    _raw(conn).execute("PRAGMA journal_mode = WAL")
            except BaseException:
                conn.close()
                raise
        except DBAPIError as exc:
            cls._unlock(lock_fd)
            raise _sqlite_error(p, exc) from exc
        except BaseException:
            cls._unlock(lock_fd)
            raise
        return cls(p, engine, conn, lock_fd)

    @classmethod
    def create(cls, path: str | os.PathLike) -> Store:
        """Create a new store at ``path`` (which must not exist, or be empty) at the newest schema."""
        p = Path(path)
        cls._check_file(p)
        if p.exists() and p.stat().st_size > 0:
            raise StoreError(f"{p}: already exists")
        if not p.parent.is_dir():
            raise StoreError(f"{p}: the directory {p.parent} does not exist")
        if not os.access(p.parent, os.W_OK):
            raise StoreError(f"{p}: cannot write in {p.parent} (read-only location)")
        try:
            engine = _engine(p, readonly=False)
            conn = engine.connect()
            raw = _raw(conn)
            raw.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            # WAL: readers (sqlite3, `bpe-store sql`) see the last checkpoint while training writes
            raw.execute("PRAGMA journal_mode = WAL")
            migrate.upgrade(conn)
            conn.commit()
        except DBAPIError as exc:
            raise _sqlite_error(p, exc) from exc
        return cls(p, engine, conn, cls._lock(p))

    @staticmethod
    def _check_file(p: Path) -> None:
        if p.is_dir():
            raise StoreError(f"{p}: is a directory, not a database file")
        if p.exists() and p.stat().st_size > 0:
            try:
                with open(p, "rb") as f:
                    head = f.read(16)
            except OSError as exc:
                raise StoreError(f"{p}: cannot read the database file ({exc.strerror})") from exc
            if head != SQLITE_MAGIC:
                raise StoreError(f"{p}: not a SQLite database (corrupt, or some other kind of file)")

    @staticmethod
    def _check_identity(p: Path, conn: Connection, *, allow_old: bool) -> None:
        app_id = conn.exec_driver_sql("PRAGMA application_id").scalar()
        tables = [r[0] for r in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        if app_id != APPLICATION_ID:
            what = ", ".join(tables[:6]) or "no tables"
            raise StoreError(f"{p}: a SQLite database, but not a bpe_store store ({what})")
        rev = migrate.current_revision(conn)
        head = migrate.head_revision()
        if rev == head:
            return
        if rev is None:
            raise StoreError(f"{p}: the store is not initialised yet (being created now, or its "
                             "creation was interrupted: delete it and train again)")
        if rev not in migrate.known_revisions():
            raise StoreError(
                f"{p}: made by a newer bpe_store (schema revision {rev}); upgrade bpe_store to open it")
        if not allow_old:
            raise StoreError(
                f"{p}: the store's schema is older ({rev}) than this bpe_store's ({head}); "
                f"upgrade it with: bpe-store db upgrade {p}")

    @staticmethod
    def _lock(p: Path) -> int:
        fd = os.open(p, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(f"{p}: another bpe-store process is training in this store") from None
        return fd

    @staticmethod
    def _unlock(fd: int | None) -> None:
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock

    @staticmethod
    def is_locked(path: str | os.PathLike) -> bool:
        """Whether a training process holds the store now (for ``status``)."""
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True
        finally:
            os.close(fd)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self._engine.dispose()
            self.conn = None  # type: ignore[assignment]
        # only after SQLite let go: closing any descriptor of the file drops its POSIX locks
        self._unlock(self._lock_fd)
        self._lock_fd = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transactions --------------------------------------------------------------------------

    def transaction(self):
        """``with store.transaction():`` — one atomic unit; SQLite errors become StoreError."""
        return _Transaction(self)

    def sql(self, statement: str, params: Sequence | None = None):
        return self.conn.exec_driver_sql(statement, tuple(params) if params is not None else ())

    def executemany(self, statement: str, rows: list[tuple]) -> None:
        if rows:
            self.conn.exec_driver_sql(statement, rows)

    # -- run parameters and inputs -------------------------------------------------------------

    def init_run(self, params: RunParams, sources: Sequence[Source],
                 chunks: Sequence[tuple[int, int, int]], chunk_size: int, version: str) -> None:
        """Write a new run: parameters, inputs, the counting plan and the initial vocabulary."""
        t = now()
        with self.transaction():
            self.sql("INSERT INTO run (id, pattern, special_tokens, vocab_size, invalid_utf8, phase,"
                     " chunk_size, created_at, updated_at, bpe_store_version)"
                     " VALUES (1, ?, ?, ?, ?, 'counting', ?, ?, ?, ?)",
                     (params.pattern, json.dumps(list(params.special_tokens)), params.vocab_size,
                      params.invalid_utf8, chunk_size, t, t, version))
            self.executemany("INSERT INTO sources (id, path, size, mtime_ns, sha256) VALUES (?, ?, ?, ?, ?)",
                             [(i, s.path, s.size, s.mtime_ns, s.sha256) for i, s in enumerate(sources)])
            self.executemany('INSERT INTO chunks (source_id, start, "end") VALUES (?, ?, ?)', list(chunks))
            vocab = [(i, s.encode("utf-8"), "special") for i, s in enumerate(params.special_tokens)]
            n = len(vocab)
            vocab += [(n + b, bytes([b]), "byte") for b in range(256)]
            self.executemany("INSERT INTO vocab (id, bytes, kind) VALUES (?, ?, ?)", vocab)

    def run_row(self) -> dict:
        row = self.sql("SELECT * FROM run WHERE id = 1").mappings().first()
        if row is None:
            raise StoreError(f"{self.path}: the store has no run (it was never started)")
        return dict(row)

    def params(self) -> RunParams:
        r = self.run_row()
        return RunParams(r["pattern"], tuple(json.loads(r["special_tokens"])), r["vocab_size"],
                         r["invalid_utf8"])

    def sources(self) -> list[Source]:
        return [Source(*r) for r in self.sql("SELECT path, size, mtime_ns, sha256 FROM sources ORDER BY id")]

    def chunks(self) -> list[Chunk]:
        return [Chunk(r[0], r[1], r[2], r[3], bool(r[4])) for r in
                self.sql('SELECT id, source_id, start, "end", counted FROM chunks ORDER BY id')]

    def set_vocab_size(self, vocab_size: int) -> None:
        with self.transaction():
            self.sql("UPDATE run SET vocab_size = ?, phase = CASE WHEN phase = 'done' THEN 'merging'"
                     " ELSE phase END, stop_reason = NULL, updated_at = ? WHERE id = 1", (vocab_size, now()))

    def elapsed(self) -> float:
        v = self.sql("SELECT elapsed_s FROM checkpoints ORDER BY id DESC LIMIT 1").scalar()
        return float(v or 0.0)

    def add_checkpoint_row(self, phase: str, merges_done: int, elapsed_s: float, write_s: float | None) -> None:
        chunks_counted = self.sql("SELECT count(*) FROM chunks WHERE counted = 1").scalar()
        self.sql("INSERT INTO checkpoints (at, phase, chunks_counted, merges_done, elapsed_s, write_s)"
                 " VALUES (?, ?, ?, ?, ?, ?)", (now(), phase, chunks_counted, merges_done, elapsed_s, write_s))

    # -- counting ------------------------------------------------------------------------------

    def add_word_counts(self, counts: Iterable[tuple[bytes, int]], chunk_done: Sequence[tuple[int, int]],
                        elapsed_s: float) -> None:
        """One transaction: add ``(word, count)`` deltas and mark ``(chunk id, pre-tokens)`` counted.

        Word ids are assigned here from an in-memory ``{bytes: id}`` map (loaded from the store on
        first use), so a new word is a rowid append and a known one an update by rowid.
        ``counts`` may also be a native ``WordCounter``.

        The first flush into an empty ``words`` table needs no map: every word is new, ids are
        1, 2, ... in order. Its rows are kept (``take_fresh_word_rows``) while no later flush
        changes the table, so the merge phase starts from them instead of reading ~1M rows back
        (enwiki-100M: load_word_rows cost 0.3 s, the map 0.25 s and ~100 MB).
        """
        native = hasattr(counts, "rows")
        if not native and hasattr(counts, "items"):
            counts = counts.items()  # a Counter / dict
        if self._word_ids is None and self._fresh_rows is None and self._words_empty():
            rows = counts.rows(1) if native else [(i, w, c) for i, (w, c) in enumerate(counts, 1)]
            self._write_word_counts(rows, [], chunk_done, elapsed_s)
            self._fresh_rows = rows  # only once committed: the rows are then what the store holds
            return
        if native:
            counts = counts.items()
        if self._word_ids is None:
            if self._fresh_rows is not None:
                self._word_ids = {bytes(r[1]): r[0] for r in self._fresh_rows}
            else:
                self._word_ids = {b: i for i, b in self.sql("SELECT id, bytes FROM words")}
        self._fresh_rows = None  # this flush changes counts: the kept rows would be stale
        ids = self._word_ids
        new: list[tuple[int, bytes, int]] = []
        old: list[tuple[int, int]] = []
        next_id = len(ids) + 1
        for word, count in counts:
            i = ids.get(word)
            if i is None:
                new.append((next_id, word, count))
                next_id += 1
            else:
                old.append((count, i))
        self._write_word_counts(new, old, chunk_done, elapsed_s)
        for i, word, _ in new:  # only once committed: a failed flush leaves the map as the store
            ids[word] = i

    def _words_empty(self) -> bool:
        return self.sql("SELECT NOT EXISTS (SELECT 1 FROM words)").scalar() == 1

    def _write_word_counts(self, new: list[tuple[int, bytes, int]], old: list[tuple[int, int]],
                           chunk_done: Sequence[tuple[int, int]], elapsed_s: float) -> None:
        """The counting checkpoint, ONE transaction: new words, count deltas, chunk marks, progress."""
        with self.transaction():
            raw = _raw(self.conn)  # executemany straight on the driver: rows are already tuples
            try:
                # tokens stay NULL (single bytes); see WordCounter.rows for why no 4th column
                raw.executemany("INSERT INTO words (id, bytes, count) VALUES (?, ?, ?)", new)
                raw.executemany("UPDATE words SET count = count + ? WHERE id = ?", old)
            except sqlite3.Error as exc:  # the driver's own errors, not wrapped by SQLAlchemy
                raise _sqlite_error(self.path, exc) from exc
            self.executemany("UPDATE chunks SET counted = 1, pretokens = ? WHERE id = ?",
                             [(n, cid) for cid, n in chunk_done])
            self.sql("UPDATE run SET updated_at = ? WHERE id = 1", (now(),))
            self.add_checkpoint_row("counting", 0, elapsed_s, None)

    def take_fresh_word_rows(self) -> list[tuple[int, bytes | bytearray, int]] | None:
        """The rows ``(id, word, count)`` of the one flush that wrote every word (see
        ``add_word_counts``): ``load_word_rows`` without the tokens column, which is NULL for all
        of them; None when the store must be read. Handed over once: the store forgets them."""
        rows, self._fresh_rows = self._fresh_rows, None
        return rows

    def load_word_rows(self) -> list[tuple[int, bytes, int, bytes | None]]:
        """All words in id order as plain tuples ``(id, bytes, count, token blob or None)``.

        Why the driver cursor: SQLAlchemy wraps each row in a Row object, which for ~1M words
        costs more than the query; the merge engines read these tuples directly.
        """
        gc_on = gc.isenabled()
        gc.disable()  # ~1M new tuples would trigger many useless collections (nothing is cyclic)
        try:
            return _raw(self.conn).execute("SELECT id, bytes, count, tokens FROM words ORDER BY id").fetchall()
        except sqlite3.Error as exc:
            raise _sqlite_error(self.path, exc) from exc
        finally:
            if gc_on:
                gc.enable()

    def start_merging(self, pairs: PairCounts, elapsed_s: float) -> None:
        """One transaction: counting is over; write the initial pair counts and move to merging."""
        with self.transaction():
            self.sql("DELETE FROM pair_counts")
            self.executemany('INSERT INTO pair_counts ("left", "right", count) VALUES (?, ?, ?)',
                             [(a, b, c) for (a, b), c in pairs.items()])
            self.sql("UPDATE run SET phase = 'merging', updated_at = ? WHERE id = 1", (now(),))
            self.add_checkpoint_row("merging", 0, elapsed_s, None)
        self._word_ids = None  # counting is over; free the map
        self._fresh_rows = None

    # -- merging -------------------------------------------------------------------------------

    def load_merges(self) -> list[tuple[int, int, int, int, int]]:
        """``[(rank, left, right, token, count)]`` in rank order."""
        return [tuple(r) for r in self.sql('SELECT rank, "left", "right", token, count FROM merges ORDER BY rank')]

    def load_vocab(self) -> list[tuple[int, bytes, str]]:
        return [tuple(r) for r in self.sql("SELECT id, bytes, kind FROM vocab ORDER BY id")]

    def load_pair_counts(self) -> PairCounts:
        return {(a, b): c for a, b, c in self.sql('SELECT "left", "right", count FROM pair_counts')}

    def pair_counts_digest(self) -> tuple[int, int, int]:
        """``(rows, digest 1, digest 2)`` of ``pair_counts``, computed inside SQLite in one scan; equal
        to ``bpe_store.merge.pair_digest_of`` of the engine's live pairs when the store is
        consistent (a stray row with count 0 changes the row count, so it is caught too).
        Every term is reduced below a prime, so the sums cannot overflow SQLite's 64-bit integers."""
        n, h1, h2 = self.sql(
            'SELECT count(*),'
            ' coalesce(sum((("left" * 65599 + "right") % 2147483647) * (count % 2147483647) % 2147483647), 0),'
            ' coalesce(sum((("left" * 1000003 + "right" * 7 + 11) % 1000000007) * (count % 1000000007)'
            ' % 1000000007), 0)'
            ' FROM pair_counts').one()
        return int(n), int(h1), int(h2)

    def write_merge_rows(
        self,
        merges: Sequence[tuple[int, int, int, int, int]],
        new_vocab: Sequence[tuple[int, bytes]],
        word_rows: Sequence[tuple[bytes, int]],
        pair_deletes: Sequence[tuple[int, int]],
        pair_inserts: Sequence[tuple[int, int, int]] = (),
        pair_updates: Sequence[tuple[int, int, int]] = (),
        *,
        merges_done: int,
        elapsed_s: float,
        done_reason: str | None,
    ) -> float:
        """The merge checkpoint, ONE transaction: merges, vocab, changed words' tokens, changed
        pair counts, progress. Returns the seconds the write took.

        Rows come in the order of each statement's parameters (``bpe_store.merge.CheckpointRows``):
        ``word_rows`` ``(packed tokens, word id)``; ``pair_deletes`` ``(left, right)``;
        ``pair_inserts`` ``(left, right, count)`` for pairs the store lacks; ``pair_updates``
        ``(count, left, right)`` for pairs it holds. Why plain INSERT/UPDATE rather than INSERT OR REPLACE: a replace
        deletes and re-inserts the row and both its index entries; an update touches the row in
        place, and a wrong belief about what the store holds fails loudly instead of silently.
        """
        import time

        t0 = time.perf_counter()
        with self.transaction():
            raw = _raw(self.conn)  # executemany straight on the driver: rows are already tuples
            try:
                # Why: a checkpoint rewrites rows all over `words` and `pair_counts`; with
                # SQLite's default 2 MB page cache the same pages are evicted and re-read many
                # times (enwiki-100M: 8.3 -> 6.3 s of writes). The cache only grows as used.
                raw.execute(f"PRAGMA cache_size = -{CHECKPOINT_CACHE_KIB}")
                self._write_merge_rows(raw, merges, new_vocab, word_rows, pair_deletes, pair_inserts,
                                       pair_updates)
            except sqlite3.Error as exc:  # the driver's own errors, not wrapped by SQLAlchemy
                raise _sqlite_error(self.path, exc) from exc
            phase = "done" if done_reason else "merging"
            self.sql("UPDATE run SET phase = ?, stop_reason = ?, updated_at = ? WHERE id = 1",
                     (phase, done_reason, now()))
            self.add_checkpoint_row(phase, merges_done, elapsed_s, time.perf_counter() - t0)
        return time.perf_counter() - t0

    @staticmethod
    def _write_merge_rows(raw: sqlite3.Connection, merges: Sequence[tuple], new_vocab: Sequence[tuple],
                          word_rows: Sequence[tuple], pair_deletes: Sequence[tuple],
                          pair_inserts: Sequence[tuple], pair_updates: Sequence[tuple]) -> None:
        """The statements of a merge checkpoint, in the transaction the caller holds."""
        if merges:
            raw.executemany('INSERT INTO merges (rank, "left", "right", token, count) VALUES (?, ?, ?, ?, ?)',
                            merges)
        if new_vocab:
            raw.executemany("INSERT INTO vocab (id, bytes, kind) VALUES (?, ?, 'merge')", new_vocab)
        if word_rows:
            raw.executemany("UPDATE words SET tokens = ? WHERE id = ?", word_rows)
        if pair_deletes:
            raw.executemany('DELETE FROM pair_counts WHERE "left" = ? AND "right" = ?', pair_deletes)
        if pair_updates:
            raw.executemany('UPDATE pair_counts SET count = ? WHERE "left" = ? AND "right" = ?', pair_updates)
        if pair_inserts:
            raw.executemany('INSERT INTO pair_counts ("left", "right", count) VALUES (?, ?, ?)', pair_inserts)


class _Transaction:
    def __init__(self, store: Store):
        self.store = store

    def __enter__(self) -> None:
        if self.store.conn.in_transaction():
            self.store.conn.commit()
        self.store.conn.begin()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            try:
                self.store.conn.commit()
            except DBAPIError as e:
                self.store.conn.rollback()
                raise _sqlite_error(self.store.path, e) from e
        else:
            self.store.conn.rollback()
            if isinstance(exc, DBAPIError):
                raise _sqlite_error(self.store.path, exc) from exc
