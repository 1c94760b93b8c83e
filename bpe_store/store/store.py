"""The store: one SQLite file that holds a training run's whole state.

A ``Store`` wraps one ``sqlite3`` connection to the file. It checks on open that the file is a
bpe_store store whose schema is exactly its revision's (``bpe_store.store.schemas``), takes an
exclusive lock for writers (released by the OS if the process dies), and offers the few bulk
reads and writes training needs. Every write that moves the run forward is one explicit
transaction (``transaction()``; the driver opens none by itself: ``isolation_level=None``), so
after a crash the file is at its last checkpoint; reads outside one take no lock beyond the
statement's.

Bulk writes (a merge checkpoint's words, pair counts, merges and vocabulary; a counting flush's
words) go through ``bulk_transaction``: on a second, native connection (``bpe_store.store.native_connection``,
native/store_db.cpp) when there is one, else with ``executemany`` on plain tuples. Why the native
path: binding one Python tuple per row in the driver was ~1.1-1.4 of ~4.7 CPU s of
enwiki-100M -> 32K (442 K word rows, 426 K pair rows in the final checkpoint); the native
connection binds them from the merge engine's arrays and from packed counts with the GIL released.
It is the same SQLite library Python's driver uses (never a second copy in one process: each would
keep its own POSIX locks on the file), with ``_configure``'s pragmas, open for the store's
lifetime; a transaction runs wholly on it (all statements of a checkpoint, the run and
checkpoints rows too), so a checkpoint is still one transaction. The fallback runs where that
library cannot be found or is another version (a static or Windows build, no native core), and
with ``BPE_STORE_NATIVE_DB=0`` (tests compare the stores both write, row for row). Its SQLite
errors become the same StoreError as the driver's (``native_connection.to_sqlite_error``, ``sqlite_error``).

Why the ``sqlite3`` driver for every statement, and SQLAlchemy only for migrations (the one
place that says it). The design card asks for SQLAlchemy where it helps (engine, schema check,
queries) and the raw driver only for bulk ``executemany``; the project also holds a cold start
to ``import bpe_store`` <= 0.1 s and a whole CS336 ``train_bpe`` process <= 0.3 s. The two pull
apart, and the cold start won: importing SQLAlchemy and making an engine costs ~0.2 s of CPU
(SQLAlchemy 2.1), more than a whole cold ``train_bpe`` takes without it (0.12-0.13 s CPU, from
0.40-0.48 s with SQLAlchemy, Alembic and migrations: bench/RESULTS.md "Cold start"). What it would
help with is small here: the store is SQLite only, its statements are fixed SQL, the schema
check compares ``sqlite_master`` with ``bpe_store.store.schemas``, and for the bulk reads and writes
it wrapped every row and hid when transactions began. So the driver runs everything (bulk
writes natively where they can, above), transactions are explicit. SQLAlchemy is imported
only on first use of what needs it: Alembic's migrations (``bpe-store db upgrade``,
``bpe_store.store.migrate``) and ``Store.conn``, a SQLAlchemy connection over the same file for anyone
who wants its API. New stores are created from the head schema without Alembic, and
``tests/store/test_store_create.py`` checks that training imports neither.

Token ids in ``words.tokens``, ``pair_counts`` and ``merges`` are vocabulary ids: the special
tokens first, then the 256 bytes, then one per merge. Tokens are identified by their bytes: if a
merge spells bytes that already have an id, words and pairs keep using that first id.

A store may come from someone else, so opening one never runs its code: ``trusted_schema`` is
off, the schema must equal the migrations' own (no extra trigger, view or index), and the
``run`` row is validated (``check_run``) before anything uses it.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import StoreError
from ..interrupts import sqlite_call
from ..pauses import pause_for_tests as _test_pause
from ..temporaries import remove_stale, temp_name
from . import migrate, native_connection
from .bulk import BulkWriter
from .connection import (
    APPLICATION_ID,
    BUSY_TIMEOUT_MS,
    PAGE_SIZE,
    SQLITE_MAGIC,
    WAL_READER_WAIT_MS,
    WAL_SIZE_LIMIT,
    DiskFull,
    Guard,
    Result,
    connect,
    is_db_error,
    now,
    sqlite_error,
)
from .counting_rows import CountingRows
from .files import lock_held, publish_file, remove_files, set_lock
from .merging_rows import MergingRows
from .run_rows import RunRows
from .schema_check import check_schema

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.engine import Connection

    from ..native import WordCounter


class Store(RunRows, CountingRows, MergingRows):
    """An open store. Use ``Store.open`` (existing) or ``Store.create`` (new).

    This class opens, locks, closes and runs transactions; its rows are read and written by its
    parts: ``RunRows`` (run_rows.py), ``CountingRows`` (counting_rows.py), ``MergingRows`` (merging_rows.py)."""

    def __init__(self, path: Path, db: sqlite3.Connection, lock_fd: int | None, *, readonly: bool = False,
                 immutable: bool = False):
        self.path = path
        self.db = db
        self.readonly = readonly
        #: opened ``immutable=1`` (read-only location, no WAL content): see ``connect``
        self.immutable = immutable
        self._lock_fd = lock_fd
        self._sa_engine: Any = None
        self._sa_conn: Connection | None = None
        self._run_checked = False
        self._guard = Guard()
        db.set_progress_handler(self._guard, Guard.STEPS)
        #: fsync on commit (False only for a throwaway store); the native connection does the same
        self.durable = True
        self._ndb: Any = None  # the native connection for bulk writes (``_native``), once opened
        self._ndb_tried = False
        self._words: Any = None  # a native WordIds while counting (see add_word_counts)
        self._flushes = 0  # counting flushes written by this connection
        self._merge_checkpoints = 0  # merge checkpoints written by this connection
        self._merge_logs = 0  # merge-log-only checkpoints written by this connection
        self._fresh_rows: list[tuple[int, bytes | bytearray, int]] | WordCounter | None = None
        #: ``(merges hashed, hash)``: the running digest of the merge log as committed (see ``_digest_after``)
        self._merge_hash: tuple[int, Any] | None = None
        #: ``(merges, digest)`` of a superword store's stage 1 (``stage1_log``), once read
        self._stage1_log: tuple[int, str] | None = None
        #: ``[(statement, parameters)]`` the next write transaction runs first (``defer_write``)
        self._deferred: list[tuple[str, tuple]] = []
        #: after each write: ``{"wal_bytes": int, "wal_blocked": bool}`` (see ``_truncate_wal``)
        self.wal: dict[str, Any] = {"wal_bytes": 0, "wal_blocked": False}

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike, *, readonly: bool = False, allow_old: bool = False,
             allow_unfinished: bool = False, durable: bool = True) -> Store:
        """Open an existing store, checking it is ours and exactly at its revision's schema.

        ``allow_unfinished``: also open a store of ours whose creation never finished (no schema
        revision yet, by an older bpe_store); ``revision`` is then None. ``durable=False``: no
        fsync on commit (for a throwaway store only).
        """
        p = Path(path)
        cls._check_file(p)
        if not p.exists():
            raise StoreError(f"{p}: no such store")
        lock_fd = None if readonly else cls._lock(p)
        db = None
        try:
            db, immutable = connect(p, readonly, durable)
            store = cls(p, db, lock_fd, readonly=readonly, immutable=immutable)
            store.durable = durable
            store.revision = cls._check_identity(p, db, allow_old=allow_old, allow_unfinished=allow_unfinished)
            if store.revision is not None and store.has_run():
                store.run_row()  # validates it (check_run) before anything uses the store
            if not readonly:
                db.execute("PRAGMA journal_mode = WAL")
        except BaseException as exc:
            if db is not None:
                db.close()
            cls._unlock(lock_fd)
            if isinstance(exc, sqlite3.Error):
                raise sqlite_error(p, exc) from exc
            raise
        return store

    @classmethod
    def create(cls, path: str | os.PathLike, init: Callable[[Store], None] | None = None, *,
               durable: bool = True) -> Store:
        """Create a new store at ``path`` at the newest schema, atomically, and open it.

        The store is built under a temporary name in the same directory (schema, then ``init``,
        e.g. ``init_run``), synced, and only then linked into place: a kill or a full disk at any
        moment leaves either this complete store or no file at all (``path`` may exist if empty).
        Why not Alembic: creating from ``bpe_store.store.schemas`` (proven equal to the migrations by
        tests/store/test_store_create.py) takes a millisecond; importing Alembic and migrating took ~0.5 s.
        """
        p = Path(path)
        cls._check_file(p)
        if p.exists() and p.stat().st_size > 0:
            raise StoreError(f"{p}: already exists")
        if not p.parent.is_dir():
            raise StoreError(f"{p}: the directory {p.parent} does not exist")
        if not os.access(p.parent, os.W_OK):
            raise StoreError(f"{p}: cannot write in {p.parent} (read-only location)")
        # a killed creation's files (the store and SQLite's beside it), if their writer is gone
        remove_stale(p.parent, f".{p.name}.creating-", tails=("", "-wal", "-shm", "-journal"))
        tmp = p.parent / temp_name(f".{p.name}.creating-")
        try:
            try:
                cls._build(tmp, init, durable)
                publish_file(tmp, p, durable)
                _test_pause("published")  # tests: kill once the store has its name, before it is opened
            except sqlite3.Error as exc:
                err = sqlite_error(p, exc)
                if isinstance(err, DiskFull):
                    raise StoreError(f"{p}: the disk is full ({err.detail}); no store was created") from exc
                raise err from exc
            except DiskFull as exc:  # from a statement of init (the run, the plan): no store either
                raise StoreError(f"{p}: the disk is full ({exc.detail}); no store was created") from exc
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise StoreError(f"{p}: the disk is full ({exc.strerror}); no store was created") from exc
                raise StoreError(f"{p}: cannot create the store ({exc.strerror})") from exc
        finally:
            remove_files(tmp)
        return cls.open(p, durable=durable)

    @classmethod
    def _build(cls, tmp: Path, init: Callable[[Store], None] | None, durable: bool = True) -> None:
        """The new store's whole content in ``tmp``, synced to disk."""
        from .schemas import HEAD, SCHEMAS

        db = sqlite3.connect(os.fsdecode(tmp.absolute()), isolation_level=None, check_same_thread=False)
        store = cls(tmp, db, None)
        try:
            # no journal and no syncs while building: a failed build is deleted, not rolled back;
            # the finished file is synced once below
            db.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # before the first write: fixed from then on
            db.execute("PRAGMA journal_mode = OFF")
            db.execute("PRAGMA synchronous = OFF")
            db.execute("PRAGMA trusted_schema = OFF")
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute("BEGIN IMMEDIATE")
            for _type, _name, _tbl, sql in SCHEMAS[HEAD]:
                if sql is not None:  # autoindexes come with their tables
                    db.execute(sql)
            db.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (HEAD,))
            db.execute("COMMIT")
            store.revision = HEAD
            store.durable = False  # the native connection too, if init opens it (a base's rows: write_base)
            if init is not None:
                init(store)
            if store._ndb is not None:  # closed before the switch to WAL below, which needs this one alone
                store._ndb.close()
                store._ndb = None
            _test_pause("create")  # tests: kill a creation half-way
            # Why here, on the temporary name: switching to WAL rewrites the file header in a
            # rollback-journal transaction; done on the final name, a kill during it left a hot
            # -journal, and plain read-only SQLite then failed ("attempt to write a readonly
            # database") until a writer rolled it back. Closing the only connection below copies
            # the WAL back and deletes it and the -shm, so the file appears complete and in WAL mode.
            if db.execute("PRAGMA journal_mode = WAL").fetchone()[0] != "wal":
                raise StoreError(f"{tmp}: SQLite could not switch the new store to WAL mode")
        finally:
            store.close()
        for suffix in ("-wal", "-shm"):
            if os.path.exists(f"{tmp}{suffix}"):  # not a clean close: never publish a store beside its WAL
                raise StoreError(f"{tmp}: SQLite left {tmp.name}{suffix} after building the store")
        if not durable:
            return
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

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
    def _check_identity(p: Path, db: sqlite3.Connection, *, allow_old: bool,
                        allow_unfinished: bool = False) -> str | None:
        """The store's schema revision, after checking the file is ours and its schema exactly
        that revision's; StoreError (exit 4) saying what is wrong otherwise."""
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        if app_id != APPLICATION_ID:
            tables = [r[0] for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 7")]
            what = ", ".join(tables[:6]) or "no tables"
            raise StoreError(f"{p}: a SQLite database, but not a bpe_store store ({what})")
        rev = migrate.current_revision(db, p)
        head = migrate.head_revision()
        if rev is None:
            if allow_unfinished:
                return None
            raise StoreError(f"{p}: the store is not initialised yet (its creation by an older bpe_store "
                             "was interrupted, or its schema version was removed): `train` starts it again "
                             "if it holds nothing, else --restart does")
        if rev not in migrate.known_revisions():
            raise StoreError(
                f"{p}: made by a newer bpe_store (schema revision {rev}); upgrade bpe_store to open it")
        check_schema(p, db, rev)
        if rev != head and not allow_old:
            raise StoreError(
                f"{p}: the store's schema is older ({rev}) than this bpe_store's ({head}); "
                f"upgrade it with: bpe-store db upgrade {p}")
        return rev

    @staticmethod
    def _lock(p: Path) -> int:
        try:
            fd = os.open(p, os.O_RDWR)
        except OSError as exc:
            if not isinstance(exc, PermissionError) and exc.errno != errno.EROFS:
                raise
            raise StoreError(f"{p}: cannot write the store (read-only file or location: {exc.strerror}); "
                             "reading commands (status, sql, show, export) still work") from None
        try:
            set_lock(fd)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise StoreError(f"{p}: another bpe-store process is training in this store") from None
            raise
        return fd

    @staticmethod
    def _unlock(fd: int | None) -> None:
        if fd is not None:
            os.close(fd)  # closing the descriptor releases its OFD lock

    @staticmethod
    def is_locked(path: str | os.PathLike) -> bool:
        """Whether a training process holds the store now (for ``status``).

        Only asks (F_OFD_GETLK): it takes no lock, so a trainer starting at the same instant is
        never refused because of it."""
        fd = os.open(path, os.O_RDONLY)
        try:
            return lock_held(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        if self._ndb is not None:
            self._ndb.close()
            self._ndb = None
        if self._sa_conn is not None:
            try:
                self._sa_conn.close()
            finally:
                self._sa_conn = None
        if self.db is not None:
            self.db.close()
            self.db = None  # type: ignore[assignment]
        # only after SQLite let go: closing any descriptor of the file drops its POSIX locks
        self._unlock(self._lock_fd)
        self._lock_fd = None

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def conn(self) -> Connection:
        """A SQLAlchemy connection over this store's own sqlite3 connection (SQLAlchemy is
        imported on first use): for Alembic's migrations and for SQLAlchemy users. Its
        ``begin()`` is a real ``BEGIN IMMEDIATE``, so a migration is exactly one transaction."""
        if self._sa_conn is None:
            from sqlalchemy import create_engine, event
            from sqlalchemy.pool import StaticPool

            db = self.db
            engine = create_engine("sqlite://", creator=lambda: db, poolclass=StaticPool)

            @event.listens_for(engine, "begin")
            def _begin(conn: Any) -> None:
                conn.exec_driver_sql("BEGIN" if self.readonly else "BEGIN IMMEDIATE")

            self._sa_engine = engine
            self._sa_conn = engine.connect()
        return self._sa_conn

    # -- transactions --------------------------------------------------------------------------

    def transaction(self) -> _Transaction:
        """``with store.transaction():`` — one atomic write (``BEGIN IMMEDIATE``: the write lock
        is taken up front, so it cannot fail half-way on a lock); SQLite errors become StoreError.
        After a commit the WAL is checkpointed and truncated when no reader needs it."""
        return _Transaction(self, write=True)

    def snapshot(self) -> _Transaction:
        """``with store.snapshot():`` — reads that all see one committed state (a deferred
        ``BEGIN``: it takes only a read lock, never the write lock)."""
        return _Transaction(self, write=False)

    def _native(self) -> Any | None:
        """The native connection for bulk writes (``bpe_store.store.native_connection``), opened on first use and
        kept for the store's lifetime, with ``_configure``'s pragmas (``write_merge_rows`` sets
        the checkpoint cache, as on ``db``: from the first counting flush on it would stay resident);
        None when the native path is not available here (or the store is read-only): bulk writes
        then go through ``executemany`` on ``db``."""
        if self._ndb is None and not self._ndb_tried and not self.readonly and self.db is not None:
            self._ndb_tried = True
            try:
                self._ndb = native_connection.connect(self.path, busy_timeout_ms=BUSY_TIMEOUT_MS,
                                               synchronous="FULL" if self.durable else "OFF",
                                               cache_kib=0, journal_size_limit=WAL_SIZE_LIMIT)
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
        return self._ndb

    def seed_merge_digest(self, hashed: tuple[int, Any]) -> None:
        """The merge log's running digest ``(merges, hash)`` as its newest checkpoint recorded it, known
        to the caller (``base_rows.write_base``): the first merge write continues it instead of reading
        every merge back (o200k_base's 200 K: ~0.35 CPU s)."""
        self._merge_hash = hashed

    def defer_write(self, statement: str, params: tuple) -> None:
        """Run ``statement`` first in the next write transaction, so that it commits with the next
        write or not at all (a session's row: a session that writes nothing leaves no trace, and a
        refused resume leaves the file byte-identical). Kept until a write transaction commits."""
        self._deferred.append((statement, params))

    def drop_deferred(self) -> bool:
        """Forget the deferred statements; whether there were any (then nothing was written since
        ``defer_write``)."""
        had = bool(self._deferred)
        self._deferred = []
        return had

    @contextmanager
    def bulk_transaction(self) -> Iterator[BulkWriter]:
        """``with store.bulk_transaction() as w:`` — one atomic write like ``transaction()``, all of
        whose statements go through ``w`` (``BulkWriter``): on the native connection when there is
        one (``_native``: rows bound from native buffers, no Python tuple per row), else on ``db``.

        Every statement of the transaction must go through ``w``: the native connection is a
        second SQLite connection, and while it holds the write lock ``db`` cannot write. SQLite
        errors become the same StoreError (or KeyboardInterrupt) on both paths."""
        ndb = self._native()
        if ndb is None:
            with self.transaction():
                yield BulkWriter(self, None)
            return
        if ndb.in_transaction or self.db.in_transaction:
            raise RuntimeError("bpe_store bug: a transaction is already open on this store")
        try:
            try:
                ndb.execute("BEGIN IMMEDIATE")
                for statement, params in self._deferred:
                    ndb.execute(statement, params)
                yield BulkWriter(self, ndb)
                ndb.execute("COMMIT")
                self._deferred = []
            except BaseException:
                if ndb.in_transaction:
                    try:
                        ndb.execute("ROLLBACK")
                    except Exception:  # noqa: S110 - the statement's failure already ended the transaction
                        pass
                raise
        except Exception as exc:
            if not native_connection.is_native_error(exc):
                raise
            err = native_connection.to_sqlite_error(exc)
            raise self._error(err) from err
        self._truncate_wal()

    @contextmanager
    def time_limit(self, seconds: float | None) -> Iterator[None]:
        """Statements in this block fail (StoreError) once ``seconds`` have passed."""
        old = self._guard.deadline, self._guard.seconds
        if seconds is not None:
            self._guard.deadline, self._guard.seconds = time.monotonic() + seconds, seconds
        try:
            yield
        finally:
            self._guard.deadline, self._guard.seconds = old

    def sql(self, statement: str, params: Sequence | None = None) -> Result:
        try:
            with sqlite_call():
                return Result(self.db.execute(statement, tuple(params) if params is not None else ()))
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def executemany(self, statement: str, rows: Iterable[tuple]) -> None:
        try:
            self.db.executemany(statement, rows)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc

    def _error(self, exc: sqlite3.Error) -> BaseException:
        if self._guard.timed_out():
            exc.bpe_store_timeout = self._guard.seconds  # type: ignore[attr-defined]
        return sqlite_error(self.path, exc)

    def _truncate_wal(self, wait_ms: int = 0) -> None:
        """After a write: copy the WAL into the store and truncate it, unless a reader still
        reads an older snapshot from it; ``self.wal`` says which (``wal_blocked``: frames the
        checkpoint could not copy, pinned by such a reader) and its size.

        Why busy_timeout 0 here (``wait_ms``): a TRUNCATE checkpoint otherwise waits (up to
        busy_timeout) for readers to move on; training must not wait for a reader, it tries again
        next time. (A reader of the newest snapshot only keeps the WAL from being reset: its frames
        are all copied, nothing is pinned.)"""
        if self.readonly:
            return
        try:
            self.db.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
            _busy, log, done = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error:
            log, done = 1, 0  # not even tried: count it as pinned
        finally:
            self.db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        wal = Path(f"{self.path}-wal")
        size = wal.stat().st_size if wal.exists() else 0
        self.wal = {"wal_bytes": size, "wal_blocked": done < log}

    def wal_blocked_now(self, probe: bool = True) -> bool:
        """Whether a reader pins the WAL now, measured, not guessed: after a TRUNCATE checkpoint
        attempt (which empties the WAL if no reader needs it) frames are left uncopied.

        Why ``probe``: a reader that began on an empty WAL, or on the newest snapshot, pins nothing
        until something is written; so unless frames are pinned already, one tiny write (the run's
        ``updated_at``, a page or two) is made and its own checkpoint attempt measured. Why wait
        ``WAL_READER_WAIT_MS``: short readers (``status``, one ``sql`` query, a script polling the
        store) come and go all the time; only one that stays may defer anything. The trainer asks
        before each write it can defer (a counting flush, a full checkpoint), at most about once a
        second while a reader stays (``wal_watch``)."""
        if self.readonly:
            return False
        self._truncate_wal(WAL_READER_WAIT_MS)
        if self.wal["wal_blocked"] or not probe:
            return self.wal["wal_blocked"]
        with self.transaction():  # a tiny write; its commit runs _truncate_wal, measured again below
            self.sql("UPDATE run SET updated_at = ? WHERE id = 1", (now(),))
        self._truncate_wal(WAL_READER_WAIT_MS)
        return self.wal["wal_blocked"]

    # -- run parameters and inputs -------------------------------------------------------------

    # -- counting ------------------------------------------------------------------------------

    # -- merging -------------------------------------------------------------------------------


class _Transaction:
    """One explicit transaction (see ``Store.transaction`` and ``Store.snapshot``). Nothing is
    ever committed implicitly: entering while another transaction is open is a bug, and says so."""

    def __init__(self, store: Store, write: bool):
        self.store = store
        self.write = write

    def __enter__(self) -> None:
        db = self.store.db
        if db.in_transaction:
            raise RuntimeError("bpe_store bug: a transaction is already open on this store")
        try:
            db.execute("BEGIN IMMEDIATE" if self.write else "BEGIN")
            if self.write:
                for statement, params in self.store._deferred:
                    db.execute(statement, params)
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise self.store._error(exc) from exc

    def __exit__(self, exc_type, exc, tb) -> None:
        db = self.store.db
        if exc_type is None:
            try:
                db.execute("COMMIT")
            except sqlite3.Error as e:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise self.store._error(e) from e
            if self.write:
                self.store._deferred = []
                self.store._truncate_wal()
        else:
            if db is not None and db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the statement's failure already ended the transaction
            if exc is not None and is_db_error(exc):
                raise self.store._error(getattr(exc, "orig", exc)) from exc
