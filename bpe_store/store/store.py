"""The store: one SQLite file that holds a training run's whole state.

A ``Store`` wraps one ``sqlite3`` connection to the file. It checks on open that the file is a
bpe_store store whose schema is exactly its revision's (``bpe_store.store.schemas``), takes an
exclusive lock for writers (released by the OS if the process dies), and offers the few bulk
reads and writes training needs. Every write that moves the run forward is one explicit
transaction (``transaction()``; the driver opens none by itself: ``isolation_level=None``), so
after a crash the file is at its last checkpoint; reads outside one take no lock beyond the
statement's.

Bulk writes (a merge checkpoint's words, pair counts, merges and vocabulary; a counting flush's
words) go through ``bulk_transaction``: on a second, native connection (``bpe_store.store.store_db``,
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
errors become the same StoreError as the driver's (``store_db.to_sqlite_error``, ``_sqlite_error``).

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
``tests/test_store_create.py`` checks that training imports neither.

Token ids in ``words.tokens``, ``pair_counts`` and ``merges`` are vocabulary ids: the special
tokens first, then the 256 bytes, then one per merge. Tokens are identified by their bytes: if a
merge spells bytes that already have an id, words and pairs keep using that first id.

A store may come from someone else, so opening one never runs its code: ``trusted_schema`` is
off, the schema must equal the migrations' own (no extra trigger, view or index), and the
``run`` row is validated (``check_run``) before anything uses it.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import gc
import json
import os
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from ..counting.count import PackedCounts
from ..counting.fingerprint import HASHES
from ..counting.sources import Source
from ..errors import StoreError
from ..interrupts import CtrlC, sqlite_call
from ..temporaries import pause_for_tests as _test_pause
from ..temporaries import remove_stale, temp_name
from . import digest, migrate, store_db

if TYPE_CHECKING:  # pragma: no cover
    from sqlalchemy.engine import Connection

    from .._core import WordIds, WordRows
    from ..counting.count import WordCounter

#: ``PRAGMA application_id`` of every bpe_store file ("BPE1"): tells our stores from other SQLite files.
APPLICATION_ID = 0x42504531
SQLITE_MAGIC = b"SQLite format 3\x00"

#: The page size of a new store (SQLite's default is 4096; a store keeps the size it was made with).
#: Why 16 KiB: the big writes (counting's flushes into `words`, a merge checkpoint's word tokens and
#: pair rows) go through fewer, larger pages. Whole 12 GB OWT-like run -> 32K, in-process,
#: alternated 4K / 16K / 4K / 16K: 101.5 / 88.5 / 94.4 / 84.8 s wall, 162.7 / 150.0 / 157.8 / 142.1
#: CPU s; its final checkpoint 5.8 -> 5.2 s (bench/RESULTS-scale.md).
PAGE_SIZE = 16384

#: SQLite page cache (KiB) while writing merge checkpoints; see ``write_merge_rows``. Why 16 MiB,
#: not more: a checkpoint's rows come sorted by key, so `words` and the `pair_counts` table are
#: walked in order and only the count index is touched at random (5.6 MB for enwiki-100M -> 32K);
#: a 256 MiB cache cost the final checkpoint ~25 MB more resident memory for the same CPU time.
CHECKPOINT_CACHE_KIB = 16 << 10
#: Milliseconds a statement waits for another connection's lock before failing.
BUSY_TIMEOUT_MS = 10_000
#: The WAL is truncated to this size whenever it is reset (``PRAGMA journal_size_limit``); after
#: every write transaction a TRUNCATE checkpoint empties it unless a reader still needs it.
WAL_SIZE_LIMIT = 64 << 20
#: Milliseconds ``Store.wal_blocked_now`` lets a reader finish before it counts as pinning the WAL.
WAL_READER_WAIT_MS = 100
#: The training lock: an open-file-description (OFD) write lock on this one byte of the store
#: file. Why a byte lock and not flock: ``status`` can *ask* who holds it (F_OFD_GETLK) without
#: taking any lock, so a probe can never make a trainer starting at that instant fail. The byte
#: is far beyond any offset SQLite locks (its lock bytes sit at 1 GiB) or any file size.
LOCK_OFFSET = 1 << 62
#: Most special tokens a run may have (a store with more is refused as damaged or hostile: each
#: becomes an alternative of the special-token regex, and 200 K of them took minutes to compile).
MAX_SPECIAL_TOKENS = 10_000
#: Longest pre-tokenization pattern a store may hold (characters).
MAX_PATTERN_CHARS = 10_000
#: A store's pattern must scan these probes within ``PATTERN_PROBE_SECONDS``: a pattern with
#: catastrophic backtracking, such as ``(a|aa)+$``, is refused instead of hanging every encode.
PATTERN_PROBES = ("a" * 40 + "!", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n!", " " * 40 + "!", "1" * 40 + "!",
                  "ab " * 20 + "\u00e9\u4e2d!")
PATTERN_PROBE_SECONDS = 1.0

#: The index that answers ``top_words`` (and ``show words``) without sorting every word. Built by
#: ``start_merging``, when counting is over and counts never change again (every counting flush
#: would otherwise move ~1 M entries), on a store of ``WORDS_BY_COUNT_MIN`` words or more; below
#: that, sorting every word takes < 0.1 s and the index would cost a run more than it saves. A
#: store's schema may have it or not, from revision ``WORDS_BY_COUNT_SINCE`` on (``check_schema``).
WORDS_BY_COUNT = "CREATE INDEX words_by_count ON words(count DESC)"
WORDS_BY_COUNT_MIN = 1_000_000
WORDS_BY_COUNT_SINCE = "v0_3_0_words_by_count"

#: ``{(left, right): count}``
PairCounts = dict[tuple[int, int], int]


@dataclass(frozen=True)
class RunParams:
    """What defines a run's result. A resume must give the same (vocab_size may grow)."""

    pattern: str
    special_tokens: tuple[str, ...]
    vocab_size: int
    invalid_utf8: str = "strict"
    #: words counted fewer times take part in no pair (1: every word, CS336's semantics)
    min_frequency: int = 1
    #: no merge makes a token longer than this many bytes (None: no limit)
    max_token_length: int | None = None
    #: pre-tokens longer than this count as pieces (pretokenize.split_long_pretoken); None: no
    #: limit (stores from before the limit existed)
    max_pretoken_bytes: int | None = None

    @property
    def num_merges(self) -> int:
        return self.vocab_size - 256 - len(self.special_tokens)


@dataclass(frozen=True)
class Chunk:
    """A work unit of one source, counted as a whole: ``kind`` is ``range`` (bytes
    ``[start, end)``), ``row_group`` (parquet row group ``part``; start/end its byte extent),
    ``file`` (a compressed file read whole) or ``stream`` (end: bytes counted so far)."""

    id: int
    source_id: int
    start: int
    end: int
    counted: bool
    kind: str = "range"
    part: int | None = None


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


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def unpack_tokens(blob: bytes) -> list[int]:
    """The token ids of a ``words.tokens`` blob (little-endian uint32)."""
    import array

    a = array.array("I")
    a.frombytes(blob)
    return a.tolist()


def is_db_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a database error (the driver's, or SQLAlchemy's wrapping of one)."""
    if isinstance(exc, sqlite3.Error):
        return True
    import sys

    sa_exc = sys.modules.get("sqlalchemy.exc")  # only if SQLAlchemy was imported at all
    return sa_exc is not None and isinstance(exc, sa_exc.DBAPIError)


def _sqlite_error(path: Path, exc: BaseException) -> BaseException:
    """The exception to raise for a SQLite error on ``path``: a one-line StoreError, or
    KeyboardInterrupt when the statement was interrupted by Ctrl-C (see ``_Guard``)."""
    orig = getattr(exc, "orig", exc)
    if getattr(orig, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT:
        if getattr(orig, "bpe_store_timeout", None) and not CtrlC.pending:
            return StoreError(f"{path}: a query took longer than {orig.bpe_store_timeout:g} s and was stopped")
        CtrlC.pending = False  # this KeyboardInterrupt is the Ctrl-C
        return KeyboardInterrupt()
    msg = str(orig)
    if "not a database" in msg or "malformed" in msg:
        return StoreError(f"{path}: the database file is corrupt or not a SQLite database ({msg})")
    if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
        return StoreError(f"{path}: cannot write the database here ({msg})")
    if "disk is full" in msg or "database or disk is full" in msg:
        return DiskFull(f"{path}: the disk is full ({msg}); the store is still at its last checkpoint", msg)
    if "too big" in msg:
        return StoreError(f"{path}: a value is larger than this connection allows ({msg})")
    return StoreError(f"{path}: SQLite error: {msg}")


class DiskFull(StoreError):
    """SQLite found the disk full. ``detail``: SQLite's words (``Store.create`` says what that
    means for a store being created: none was)."""

    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


def sqlite_uri(path: Path, **params: str | int) -> str:
    """A ``file:`` URI for ``path``: every character a file name may hold (``#``, ``?``, ``%``,
    spaces, non-ASCII) is percent-encoded, so the URI names exactly that file."""
    uri = "file:" + quote(os.fsencode(path.absolute()), safe="/")
    if params:
        uri += "?" + "&".join(f"{k}={v}" for k, v in params.items())
    return uri


class _Guard:
    """The connection's progress handler: makes Ctrl-C stop a long statement (``interrupts.CtrlC``;
    the statement then fails with SQLITE_INTERRUPT, which ``_sqlite_error`` turns back into
    KeyboardInterrupt) and, with ``deadline`` set, stops a statement that runs past it (a
    StoreError saying so)."""

    #: SQLite virtual-machine steps between calls (a call costs ~1 us; 100 K steps ~1 ms).
    STEPS = 100_000

    def __init__(self) -> None:
        self.deadline: float | None = None
        self.seconds: float | None = None

    def __call__(self) -> int:
        if CtrlC.pending:
            return 1
        return 1 if self.deadline is not None and time.monotonic() > self.deadline else 0

    def timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline


def _connect(path: Path, readonly: bool, durable: bool = True) -> tuple[sqlite3.Connection, bool]:
    """A configured connection to ``path`` and whether it had to open the file as immutable.

    Read-only: ``mode=ro`` through a URI (``sqlite_uri``). A WAL store needs its ``-shm`` file;
    where it cannot be created (a read-only directory or mount, a user who may only read) and
    no WAL content exists, the file is opened ``immutable=1``: nothing can be writing it then.
    """
    immutable = False
    if readonly:
        db = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True, isolation_level=None,
                             check_same_thread=False)
        try:
            _configure(db, readonly=True)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the WAL index too
        except sqlite3.OperationalError as exc:
            db.close()
            wal = Path(f"{path}-wal")
            wal_empty = not wal.exists() or wal.stat().st_size == 0
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if code not in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY) or not wal_empty:
                raise
            db = sqlite3.connect(sqlite_uri(path, mode="ro", immutable=1), uri=True, isolation_level=None,
                                 check_same_thread=False)
            _configure(db, readonly=True)
            immutable = True
    else:
        # a plain path (no URI), made absolute so that a name like ":memory:" is a file too
        db = sqlite3.connect(os.fsdecode(path.absolute()), isolation_level=None, check_same_thread=False)
        _configure(db, readonly=False, durable=durable)
    return db, immutable


def _configure(db: sqlite3.Connection, readonly: bool, durable: bool = True) -> None:
    # isolation_level=None: the driver never opens a transaction by itself; transactions are
    # explicit (Store.transaction / Store.snapshot), so a read never holds a lock past its statement
    db.execute("PRAGMA trusted_schema = OFF")  # no schema-defined code with side effects, ever
    db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if not readonly:
        # FULL: a committed checkpoint survives power loss, not only a process crash. OFF only
        # for a throwaway store (train_bpe's temporary one), which no one resumes.
        db.execute(f"PRAGMA synchronous = {'FULL' if durable else 'OFF'}")
        db.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")


class Result:
    """The rows of one statement, with the few accessors callers use (``scalar``, ``one``,
    ``first``, ``mappings``, ``keys``, ``fetchall``, iteration)."""

    def __init__(self, cursor: sqlite3.Cursor):
        self._cur = cursor

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._cur)

    @property
    def lastrowid(self) -> int | None:
        return self._cur.lastrowid

    def keys(self) -> list[str]:
        return [d[0] for d in self._cur.description or ()]

    def fetchall(self) -> list[tuple]:
        return self._cur.fetchall()

    def first(self) -> tuple | None:
        return self._cur.fetchone()

    def one(self) -> tuple:
        row = self._cur.fetchone()
        if row is None:
            raise StoreError("the store is missing a row it must hold")
        return row

    def scalar(self) -> Any:
        row = self._cur.fetchone()
        return None if row is None else row[0]

    def mappings(self) -> _Mappings:
        return _Mappings(self.keys(), self._cur)


class _Mappings:
    def __init__(self, keys: list[str], cursor: sqlite3.Cursor):
        self._keys, self._cur = keys, cursor

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (dict(zip(self._keys, r)) for r in self._cur)

    def first(self) -> dict[str, Any] | None:
        row = self._cur.fetchone()
        return None if row is None else dict(zip(self._keys, row))


class Store:
    """An open store. Use ``Store.open`` (existing) or ``Store.create`` (new)."""

    def __init__(self, path: Path, db: sqlite3.Connection, lock_fd: int | None, *, readonly: bool = False,
                 immutable: bool = False):
        self.path = path
        self.db = db
        self.readonly = readonly
        #: opened ``immutable=1`` (read-only location, no WAL content): see ``_connect``
        self.immutable = immutable
        self._lock_fd = lock_fd
        self._sa_engine: Any = None
        self._sa_conn: Connection | None = None
        self._run_checked = False
        self._guard = _Guard()
        db.set_progress_handler(self._guard, _Guard.STEPS)
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
            db, immutable = _connect(p, readonly, durable)
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
                raise _sqlite_error(p, exc) from exc
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
        tests/test_store_create.py) takes a millisecond; importing Alembic and migrating took ~0.5 s.
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
                _publish(tmp, p, durable)
                _test_pause("published")  # tests: kill once the store has its name, before it is opened
            except sqlite3.Error as exc:
                err = _sqlite_error(p, exc)
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
            _remove_files(tmp)
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
            if init is not None:
                init(store)
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
            _set_lock(fd)
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
            return _lock_held(fd)
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
        """The native connection for bulk writes (``bpe_store.store.store_db``), opened on first use and
        kept for the store's lifetime, with ``_configure``'s pragmas (``write_merge_rows`` sets
        the checkpoint cache, as on ``db``: from the first counting flush on it would stay resident);
        None when the native path is not available here (or the store is read-only): bulk writes
        then go through ``executemany`` on ``db``."""
        if self._ndb is None and not self._ndb_tried and not self.readonly and self.db is not None:
            self._ndb_tried = True
            try:
                self._ndb = store_db.native_db(self.path, busy_timeout_ms=BUSY_TIMEOUT_MS,
                                               synchronous="FULL" if self.durable else "OFF",
                                               cache_kib=0, journal_size_limit=WAL_SIZE_LIMIT)
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
        return self._ndb

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
            if not store_db.is_native_error(exc):
                raise
            err = store_db.to_sqlite_error(exc)
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
        return _sqlite_error(self.path, exc)

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

    def init_run(self, params: RunParams, sources: Sequence[Source],
                 chunks: Sequence[tuple[int, int, int] | tuple[int, int, int, str, int | None]],
                 chunk_size: int, version: str) -> None:
        """Write a new run: parameters, inputs, the counting plan and the initial vocabulary."""
        t = now()
        with self.transaction():
            self.sql("INSERT INTO run (id, pattern, special_tokens, vocab_size, invalid_utf8, phase,"
                     " chunk_size, created_at, updated_at, bpe_store_version, min_frequency, max_token_length,"
                     " max_pretoken_bytes)"
                     " VALUES (1, ?, ?, ?, ?, 'counting', ?, ?, ?, ?, ?, ?, ?)",
                     (params.pattern, json.dumps(list(params.special_tokens)), params.vocab_size,
                      params.invalid_utf8, chunk_size, t, t, version, params.min_frequency,
                      params.max_token_length, params.max_pretoken_bytes))
            self.executemany("INSERT INTO sources (id, path, size, mtime_ns, digest, format, compression,"
                             " text_field, documents, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             [(i, s.path, s.size, s.mtime_ns, s.digest, s.format, s.compression, s.text_field,
                               s.documents, s.hash) for i, s in enumerate(sources)])
            # (source, start, end) or (source, start, end, kind, part)
            self.executemany('INSERT INTO chunks (source_id, start, "end", kind, part) VALUES (?, ?, ?, ?, ?)',
                             [c if len(c) == 5 else (*c, "range", None) for c in chunks])
            vocab = [(i, s.encode("utf-8"), "special") for i, s in enumerate(params.special_tokens)]
            n = len(vocab)
            vocab += [(n + b, bytes([b]), "byte") for b in range(256)]
            self.executemany("INSERT INTO vocab (id, bytes, kind) VALUES (?, ?, ?)", vocab)

    def run_row(self) -> dict:
        row = self.sql("SELECT * FROM run WHERE id = 1").mappings().first()
        if row is None:
            held = self.tables_with_rows()
            if held:
                raise StoreError(f"{self.path}: the store has no run but holds data ({', '.join(held[:4])}): "
                                 "damaged or edited; `train --restart` deletes it and starts over")
            raise StoreError(f"{self.path}: the store has no run (it was never started)")
        if not self._run_checked:
            check_run(self.path, row)
            self._run_checked = True
        return row

    def has_run(self) -> bool:
        return self.sql("SELECT 1 FROM run").first() is not None

    def tables_with_rows(self) -> list[str]:
        """The names of the tables that hold a row (the schema version's aside): what deleting this
        store would lose. Reads any store of ours, however unfinished or damaged its schema."""
        names = [r[0] for r in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        return [n for n in names if n != "alembic_version"
                and self.db.execute(f'SELECT 1 FROM "{n.replace(chr(34), chr(34) * 2)}" LIMIT 1').fetchone()]

    def params(self) -> RunParams:
        r = self.run_row()
        return RunParams(r["pattern"], tuple(json.loads(r["special_tokens"])), r["vocab_size"],
                         r["invalid_utf8"], r["min_frequency"], r["max_token_length"],
                         max_pretoken_bytes=r.get("max_pretoken_bytes"))

    def sources(self) -> list[Source]:
        return [Source(*r) for r in self.sql("SELECT path, size, mtime_ns, digest, format, compression,"
                                             " text_field, documents, hash FROM sources ORDER BY id")]

    def unit_sources(self) -> dict[int, int]:
        """``{chunk id: source id}`` of every work unit."""
        return dict(self.sql("SELECT id, source_id FROM chunks").fetchall())

    def chunks(self) -> list[Chunk]:
        return [Chunk(r[0], r[1], r[2], r[3], bool(r[4]), r[5], r[6]) for r in
                self.sql('SELECT id, source_id, start, "end", counted, kind, part FROM chunks ORDER BY id')]

    def check_plan(self) -> None:
        """Refuse (StoreError) inputs and chunks that bpe_store could not have written (text where
        numbers belong, negative sizes, a chunk outside its input)."""
        bad_sources, bad_chunks = self.sql(
            "SELECT (SELECT count(*) FROM sources WHERE typeof(path) != 'text' OR typeof(size) != 'integer'"
            " OR size < 0 OR typeof(mtime_ns) != 'integer' OR typeof(digest) != 'text'"
            f" OR hash NOT IN ({', '.join(repr(h) for h in HASHES)})"
            " OR format NOT IN ('text', 'jsonl', 'parquet', 'iterable')"
            " OR compression NOT IN ('none', 'gz', 'zst', 'bz2', 'xz')),"
            ' (SELECT count(*) FROM chunks c WHERE typeof(start) != \'integer\' OR typeof("end") != \'integer\''
            " OR kind NOT IN ('range', 'row_group', 'file', 'stream')"
            ' OR start < 0 OR "end" < start OR counted NOT IN (0, 1) OR typeof(counted) != \'integer\''
            ' OR "end" > coalesce((SELECT size FROM sources s WHERE s.id = c.source_id), -1))').one()
        if bad_sources or bad_chunks:
            raise StoreError(f"{self.path}: the store's inputs or chunks are damaged ({bad_sources} input rows, "
                             f"{bad_chunks} chunk rows); start over with --restart")

    def set_vocab_size(self, vocab_size: int) -> None:
        with self.transaction():
            self.sql("UPDATE run SET vocab_size = ?, phase = CASE WHEN phase = 'done' THEN 'merging'"
                     " ELSE phase END, stop_reason = NULL, updated_at = ? WHERE id = 1", (vocab_size, now()))

    def elapsed(self) -> float:
        v = self.sql("SELECT elapsed_s FROM checkpoints ORDER BY id DESC LIMIT 1").scalar()
        return float(v or 0.0)

    def add_checkpoint_row(self, phase: str, merges_done: int, elapsed_s: float, write_s: float | None,
                           writer: BulkWriter | None = None, merge_digest: str = digest.EMPTY) -> None:
        """The ``checkpoints`` row of a write (inside its transaction; ``writer``: its bulk writer),
        with the digest of the ``merges_done`` merges the store holds once it commits."""
        (writer or BulkWriter(self, None)).execute(
            "INSERT INTO checkpoints (at, phase, chunks_counted, merges_done, elapsed_s, write_s, merge_digest)"
            " VALUES (?, ?, (SELECT count(*) FROM chunks WHERE counted = 1), ?, ?, ?, ?)",
            (now(), phase, merges_done, elapsed_s, write_s, merge_digest))

    def _digest_after(self, merges: Sequence[tuple[int, int, int, int, int]]) -> tuple[int, Any]:
        """``(merges hashed, hash)`` of the merge log once ``merges`` (the next ranks) are added.
        The running hash is kept between writes; read from the store when this connection has none
        yet (or it lags: a write failed), ~20 ms for 32 K merges. Not kept until the write commits."""
        first = merges[0][0] if len(merges) else None
        have = self._merge_hash
        if have is None or (first is not None and have[0] != first):
            rows = self.sql('SELECT rank, "left", "right", token, count FROM merges WHERE rank < ? ORDER BY rank',
                            (first if first is not None else 1 << 62,)).fetchall()
            have = (len(rows), digest.update(digest.new_hash(), rows))
        h = have[1].copy()
        return have[0] + len(merges), digest.update(h, merges)

    # -- counting ------------------------------------------------------------------------------

    def add_word_counts(self, counts: Iterable[tuple[bytes, int]], chunk_done: Sequence[tuple[int, int]],
                        elapsed_s: float, stream_at: StreamMark | None = None) -> None:
        """One transaction: add ``(word, count)`` deltas and mark ``(chunk id, pre-tokens)`` counted.

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
                new, old = _PackedWords(packed, first_id), _PackedDeltas(deltas)
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
            self._write_word_counts(_PackedWords(packed, first_id), _PackedDeltas(deltas), chunk_done, elapsed_s,
                                    stream_at)
        except BaseException:
            self._words = None  # the store is the truth: reloaded from it if counting goes on
            raise
        self._words = words

    def words_are_next_flush(self) -> bool:
        """Whether the next ``add_word_counts`` makes the store's words exactly its counts' rows,
        ids 1, 2, ... in their order (the first flush into an empty ``words``): a caller may then
        build on those counts before that flush commits (``train._pairs``)."""
        return self._words is None and self._fresh_rows is None and self._words_empty()

    def _words_empty(self) -> bool:
        return self.sql("SELECT NOT EXISTS (SELECT 1 FROM words)").scalar() == 1

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
                    rows = self._read_native_words(ndb, "SELECT id, bytes, count, NULL FROM words "
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
                w.executemany(_COUNT_DELTAS[0], old, self._words_bulk(w, len(old), _COUNT_DELTAS))
            w.executemany("UPDATE chunks SET counted = 1, pretokens = ? WHERE id = ?",
                          [(n, cid) for cid, n in chunk_done])
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
            return self._read_native_words(ndb, sql.format(""))
        mid = top // 2
        try:
            other = store_db.native_db(self.path, busy_timeout_ms=BUSY_TIMEOUT_MS, synchronous="OFF", cache_kib=0,
                                       journal_size_limit=WAL_SIZE_LIMIT)
        except sqlite3.Error as exc:
            raise self._error(exc) from exc
        upper: list = []  # the other thread's rows, or the exception it raised

        def read_upper() -> None:
            try:
                upper.append(self._read_native_words(other, sql.format(f"WHERE id > {mid}")))
            except BaseException as exc:  # re-raised below, in the caller's thread
                upper.append(exc)

        reader = threading.Thread(target=read_upper, name="bpe_store-read-words")
        try:
            reader.start()
            rows = self._read_native_words(ndb, sql.format(f"WHERE id <= {mid}"))
        finally:
            reader.join()
            other.close()
        if isinstance(upper[0], BaseException):
            raise upper[0]
        rows.extend(upper[0])
        return rows

    def _read_native_words(self, ndb: Any, sql: str) -> WordRows:
        """``sql``'s rows ``(id, bytes, count, tokens)`` read by the native connection; a row of the
        wrong types is a damaged store, as the engine says of Python rows."""
        try:
            return ndb.read_word_rows(sql)
        except ValueError as exc:
            msg = f"{self.path}: the store's words are damaged ({exc}); start over with --restart"
            raise StoreError(msg) from None
        except Exception as exc:
            if not store_db.is_native_error(exc):
                raise
            err = store_db.to_sqlite_error(exc)
            raise self._error(err) from err

    def start_merging(self, pairs: PairCounts | None, elapsed_s: float) -> None:
        """One transaction: counting is over; write the initial pair counts and move to merging.

        ``pairs`` None (a reader pins the WAL): no pair rows (and no ``words_by_count`` index) are
        written, only the move to merging; ``pair_counts`` stays empty (``pairs_merges`` NULL while
        merging), which a resume recounts from the words (``train._load_engine``) and the first
        full checkpoint fills (the engine's ``forget_stored_pairs``)."""
        with self.transaction():
            self.sql("DELETE FROM pair_counts")
            if pairs is not None:
                self.executemany('INSERT INTO pair_counts ("left", "right", count) VALUES (?, ?, ?)',
                                 [(a, b, c) for (a, b), c in pairs.items()])
            self.sql("UPDATE run SET phase = 'merging', state_merges = 0, pairs_merges = ?, updated_at = ?"
                     " WHERE id = 1", (None if pairs is None else 0, now()))
            if pairs is not None:
                self._index_words_by_count()
            self.add_checkpoint_row("merging", 0, elapsed_s, None)
        self._words = None  # counting is over; free the map
        self._fresh_rows = None

    def _index_words_by_count(self, w: BulkWriter | None = None) -> None:
        """Build ``words_by_count`` if the store is big enough and lacks it (see WORDS_BY_COUNT)."""
        w = w or BulkWriter(self, None)
        if w.execute("SELECT coalesce(max(id), 0) FROM words")[0][0] >= WORDS_BY_COUNT_MIN:
            w.execute(WORDS_BY_COUNT.replace("INDEX", "INDEX IF NOT EXISTS", 1))

    # -- merging -------------------------------------------------------------------------------

    def load_merges(self) -> list[tuple[int, int, int, int, int]]:
        """``[(rank, left, right, token, count)]`` in rank order."""
        return self.sql('SELECT rank, "left", "right", token, count FROM merges ORDER BY rank').fetchall()

    def state_merges(self) -> int | None:
        """How many merges ``words.tokens`` and ``pair_counts`` reflect: the first ones of
        ``merges``, which may hold more (logged after the last full checkpoint); None once they
        are not kept (a finished run: ``pair_counts`` empty, tokens only for the most frequent
        words, see ``write_merge_rows``)."""
        return self.sql("SELECT state_merges FROM run WHERE id = 1").scalar()

    def pairs_merges(self) -> int | None:
        """How many merges the rows of ``pair_counts`` follow: every live pair while merging (then
        ``state_merges``), the most frequent ones once done (``train.KEEP_PAIR_COUNTS``); None when
        the store holds none (counting is not over, or an older bpe_store finished it)."""
        return self.sql("SELECT pairs_merges FROM run WHERE id = 1").scalar()

    def load_vocab(self) -> list[tuple[int, bytes, str]]:
        return self.sql("SELECT id, bytes, kind FROM vocab ORDER BY id").fetchall()

    def load_pair_counts(self) -> PairCounts:
        return {(a, b): c for a, b, c in self.sql('SELECT "left", "right", count FROM pair_counts')}

    def pair_counts_digest(self) -> tuple[int, int, int]:
        """``(rows, digest 1, digest 2)`` of ``pair_counts``, computed inside SQLite in one scan; equal
        to ``bpe_store.training.merge.pair_digest_of`` of the engine's live pairs when the store is
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
        log_only: bool = False,
        clear_pairs: bool = False,
        drop_state: bool = False,
    ) -> float:
        """The merge checkpoint, ONE transaction: merges, vocab, changed words' tokens, changed
        pair counts, progress. Returns the seconds the write took.

        ``log_only``: the merges, their vocabulary and the progress only (no word or pair rows):
        ``run.state_merges`` stays, and a resume replays the merges after it on the words.
        Otherwise ``state_merges`` becomes ``merges_done``; ``clear_pairs`` (the engine's
        ``rewrite_pairs``) empties ``pair_counts`` first, its rows then being every live pair.
        ``drop_state`` (the last write of a finished run): the merging's working state is not
        kept: ``pair_counts`` emptied but for ``pair_inserts`` (the most frequent pairs',
        ``train.KEEP_PAIR_COUNTS``), ``words.tokens`` NULL but those of ``word_rows`` (the most
        frequent words', ``train.KEEP_WORD_TOKENS``), ``state_merges`` NULL. Every write but a
        ``log_only`` one sets ``pairs_merges`` to ``merges_done``.

        Rows come in the order of each statement's parameters (``bpe_store.training.merge.CheckpointRows``):
        ``word_rows`` ``(packed tokens, word id)``; ``pair_deletes`` ``(left, right)``;
        ``pair_inserts`` ``(left, right, count)`` for pairs the store lacks; ``pair_updates``
        ``(count, left, right)`` for pairs it holds. Why plain INSERT/UPDATE rather than INSERT OR REPLACE: a replace
        deletes and re-inserts the row and both its index entries; an update touches the row in
        place, and a wrong belief about what the store holds fails loudly instead of silently.
        """
        t0 = time.perf_counter()
        hashed = self._digest_after(merges)
        if hashed[0] != merges_done:
            raise RuntimeError(f"bpe_store bug: a checkpoint of {merges_done} merges holds {hashed[0]}")
        with self.bulk_transaction() as w:
            # Why: a checkpoint rewrites rows all over `words` and `pair_counts`; with
            # SQLite's default 2 MB page cache the same pages are evicted and re-read many
            # times (enwiki-100M: 8.3 -> 6.3 s of writes). The cache only grows as used;
            # CHECKPOINT_CACHE_KIB says why it is bounded. Set here, not when the connection
            # opens: counting's flushes would fill it, and it would stay resident while merging.
            w.execute(f"PRAGMA cache_size = -{CHECKPOINT_CACHE_KIB}")
            pair_rows = len(pair_deletes) + len(pair_inserts) + len(pair_updates)
            if log_only and (len(word_rows) or pair_rows):
                raise ValueError("a merge log checkpoint holds no word or pair rows")
            if drop_state and (log_only or len(pair_deletes) or len(pair_updates)):
                raise ValueError("a finished run's last write holds no pair rows but its kept pairs")
            if clear_pairs or drop_state:
                w.execute("DELETE FROM pair_counts")
            # Why look first: when no checkpoint wrote tokens (state 0: a run whose merging was
            # shorter than checkpoint_seconds) the UPDATE would scan every word for nothing.
            if drop_state and w.execute("SELECT coalesce(state_merges, 1) FROM run WHERE id = 1")[0][0] != 0:
                w.execute("UPDATE words SET tokens = NULL WHERE tokens IS NOT NULL")
            if drop_state:
                self._index_words_by_count(w)  # when the start of merging could not (start_merging)
            for (statement, bulk), rows in zip(_MERGE_CHECKPOINT, (
                    merges, new_vocab, word_rows, pair_deletes, pair_updates, pair_inserts)):
                if not len(rows):
                    continue
                if rows is word_rows:  # the lookup scan or UPDATE ... FROM, by how many changed
                    bulk = self._words_bulk(w, len(rows), _WORD_TOKENS)
                w.executemany(statement, rows, bulk)
            phase = "done" if done_reason else "merging"
            if log_only:  # the words' tokens and pair counts stay as they were
                w.execute("UPDATE run SET phase = ?, stop_reason = ?, updated_at = ? WHERE id = 1",
                          (phase, done_reason, now()))
            else:
                w.execute("UPDATE run SET phase = ?, stop_reason = ?, state_merges = ?, pairs_merges = ?,"
                          " updated_at = ? WHERE id = 1",
                          (phase, done_reason, None if drop_state else merges_done, merges_done, now()))
            self.add_checkpoint_row(phase, merges_done, elapsed_s, time.perf_counter() - t0, w,
                                    hashed[1].hexdigest())
            if log_only:
                self._merge_logs += 1
                _test_pause(f"merge_log:{self._merge_logs}")  # tests: kill inside its transaction
            else:
                self._merge_checkpoints += 1
                _test_pause(f"checkpoint:{self._merge_checkpoints}")
        self._merge_hash = hashed  # committed
        return time.perf_counter() - t0

    @staticmethod
    def _words_bulk(w: BulkWriter, n_rows: int, statements: tuple[str, str, str]) -> str:
        """Which bulk form of a per-row ``words`` update runs for ``n_rows`` rows sorted by id (see
        ``_WORD_TOKENS``): the one-pass scan when they are 1 / _WORDS_SCAN_SHARE of the words or more."""
        if w.native and n_rows * _WORDS_SCAN_SHARE >= w.execute("SELECT coalesce(max(id), 0) FROM words")[0][0]:
            return statements[2]
        return statements[1]


#: A per-row update of ``words`` (parameters ``(value, id)``, rows sorted by id) and its two bulk
#: forms: ``UPDATE ... FROM bpe_store_rows``, and ONE pass over ``words`` in id order, each row's
#: value found among the rows (``bpe_store_lookup``, native/store_db.cpp) and the row updated where
#: the scan stands. Why the scan when many rows change (a final checkpoint: nearly every word):
#: ``UPDATE ... FROM`` first copies every row into an ephemeral table, then seeks each word
#: (the final checkpoint of a 12 GB OWT-like corpus, 7.0 M words: 8.2-9.0 -> 5.8-6.1 s, alternated).
#: Why not always: the scan reads every word (~0.1 us each), which pays only once enough changed.
_WORD_TOKENS = ("UPDATE words SET tokens = ? WHERE id = ?",
                "UPDATE words SET tokens = r.p1 FROM bpe_store_rows AS r WHERE words.id = r.p2",
                "UPDATE words SET tokens = bpe_store_lookup(id) WHERE bpe_store_lookup(id) IS NOT NULL")
#: A counting flush's count deltas ``(delta, id)``. Why bulk: per row, the statement ran with the
#: GIL held from the first row to the last (binding Python tuples), ~850 K rows a flush at 12 GB,
#: while the main thread waited to reduce the workers' counts; as one statement with the GIL
#: released the whole 12 GB run went 181-187 -> 151 s wall, 258-266 -> 239-244 CPU s (alternated,
#: bench/RESULTS-scale.md).
_COUNT_DELTAS = ("UPDATE words SET count = count + ? WHERE id = ?",
                 "UPDATE words SET count = count + r.p1 FROM bpe_store_rows AS r WHERE words.id = r.p2",
                 "UPDATE words SET count = count + bpe_store_lookup(id) WHERE bpe_store_lookup(id) IS NOT NULL")
_WORDS_SCAN_SHARE = 8
#: A store of at least this many words is read in two halves at once (``_read_native_words_halves``).
_PARALLEL_READ_MIN = 1 << 20
#: Words a resume's first counting flush reads from the store at a time (``Store._load_words``).
_WORD_LOAD_BATCH = 1 << 20


#: A merge checkpoint's statements, in the order ``write_merge_rows`` runs them: each per row
#: (the parameters of ``bpe_store.training.merge.CheckpointRows``) and as one bulk statement over
#: ``bpe_store_rows`` (see ``BulkWriter.executemany``), which must make the same change.
_MERGE_CHECKPOINT: tuple[tuple[str, str], ...] = (
    ('INSERT INTO merges (rank, "left", "right", token, count) VALUES (?, ?, ?, ?, ?)',
     'INSERT INTO merges (rank, "left", "right", token, count) SELECT p1, p2, p3, p4, p5 FROM bpe_store_rows'),
    ("INSERT INTO vocab (id, bytes, kind) VALUES (?, ?, 'merge')",
     "INSERT INTO vocab (id, bytes, kind) SELECT p1, p2, 'merge' FROM bpe_store_rows"),
    _WORD_TOKENS[:2],
    ('DELETE FROM pair_counts WHERE "left" = ? AND "right" = ?',
     'DELETE FROM pair_counts WHERE ("left", "right") IN (SELECT p1, p2 FROM bpe_store_rows)'),
    ('UPDATE pair_counts SET count = ? WHERE "left" = ? AND "right" = ?',
     'UPDATE pair_counts SET count = r.p1 FROM bpe_store_rows AS r'
     ' WHERE pair_counts."left" = r.p2 AND pair_counts."right" = r.p3'),
    ('INSERT INTO pair_counts ("left", "right", count) VALUES (?, ?, ?)',
     'INSERT INTO pair_counts ("left", "right", count) SELECT p1, p2, p3 FROM bpe_store_rows'),
)


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
    try:
        from .._core import WordIds
    except ImportError:  # no native core in this installation
        return PyWordIds()
    return WordIds()


@dataclass(frozen=True)
class _PackedWords:
    """A flush's new words from ``WordIds.add_native``: packed counts, ids ``first_id``, ``first_id + 1``, ..."""

    packed: bytes
    first_id: int


@dataclass(frozen=True)
class _PackedDeltas:
    """A flush's count deltas from ``WordIds.add_native``: n int64 ids ascending, then n int64 deltas."""

    buffer: bytes

    def __len__(self) -> int:
        return len(self.buffer) // 16


class BulkWriter:
    """The statements of one ``Store.bulk_transaction``: on the native connection ``ndb`` when
    there is one, else through the store's ``sqlite3`` connection (``executemany``, the fallback)."""

    def __init__(self, store: Store, ndb: Any | None):
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
        if isinstance(rows, _PackedDeltas):  # made only where there is a native connection
            self.ndb.bulk_deltas(bulk, rows.buffer)
        elif self.ndb is None:
            self.store.executemany(statement, rows)
        elif bulk is not None:
            self.ndb.bulk(bulk, rows)
        else:
            self.ndb.executemany(statement, rows)

    def insert_words(self, statement: str, bulk: str,
                     rows: list[tuple[int, bytes | bytearray, int]] | WordCounter) -> None:
        """``statement`` (parameters ``(id, bytes, count)``) for each row, or for each word of a
        native ``WordCounter`` with ids 1, 2, ... in its order; ``bulk`` as for ``executemany``.
        Why ``pack`` on the native path: one buffer for all words instead of a tuple and a
        bytearray per word (counting's first flush of enwiki-100M: 445 K words)."""
        if isinstance(rows, _PackedWords):  # made only where there is a native connection
            self.ndb.bulk_packed_words(bulk, rows.packed, rows.first_id)
        elif not hasattr(rows, "row_stream"):
            self.executemany(statement, rows, bulk)
        elif self.ndb is None:
            self.store.executemany(statement, rows.row_stream(1))
        else:
            self.ndb.bulk_packed_words(bulk, rows.pack(), 1)


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


def _flock_struct(kind: int) -> bytes:
    # struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
    return struct.pack("hhqqi4x", kind, os.SEEK_SET, LOCK_OFFSET, 1, 0)


def _set_lock(fd: int) -> None:
    """Take the training lock on ``fd`` (open for writing); OSError EAGAIN if someone holds it."""
    if hasattr(fcntl, "F_OFD_SETLK"):
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock_struct(fcntl.F_WRLCK))
    else:  # pragma: no cover - not Linux: flock (a status probe may then collide with a start)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _lock_held(fd: int) -> bool:
    if hasattr(fcntl, "F_OFD_GETLK"):
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _flock_struct(fcntl.F_WRLCK))
        return struct.unpack("hhqqi4x", got)[0] != fcntl.F_UNLCK
    try:  # pragma: no cover - not Linux
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True


def _remove_files(db: Path) -> None:
    """``db`` and the files SQLite keeps beside it."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{db}{suffix}")
        except FileNotFoundError:
            pass


def _publish(tmp: Path, p: Path, durable: bool = True) -> None:
    """Put the finished ``tmp`` in place as ``p`` (never over a non-empty file) and sync the
    directory, so the new name survives power loss."""
    try:
        os.link(tmp, p)  # atomic, and fails if p exists: two creators cannot overwrite each other
        os.unlink(tmp)  # at once: a second name of the live store must not outlive this call
    except FileExistsError:
        if p.stat().st_size > 0:
            raise StoreError(f"{p}: already exists (created by another process just now)") from None
        os.replace(tmp, p)  # an empty file holds nothing
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        os.replace(tmp, p)  # a filesystem without hard links
    if not durable:
        return
    fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def wal_state(path: Path) -> dict[str, Any]:
    """The store's WAL as a reader sees it, without opening SQLite: ``wal_bytes`` (the -wal
    file's size), ``wal_frames_pending`` (committed frames not yet copied into the store, from
    the -shm header: mxFrame - nBackfill) and ``wal_blocked`` (some are pending: after each
    write the trainer copies and truncates the WAL, unless a reader holds an old snapshot)."""
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    size = wal.stat().st_size if wal.exists() else 0
    pending = 0
    if size and shm.exists():
        try:
            with open(shm, "rb") as f:
                head = f.read(136)
            if len(head) >= 100:
                # WalIndexHdr (48 bytes, twice): mxFrame at offset 16; WalCkptInfo.nBackfill at 96
                mx_frame, = struct.unpack_from("=I", head, 16)
                backfill, = struct.unpack_from("=I", head, 96)
                pending = max(mx_frame - backfill, 0)
        except OSError:
            pass
    return {"wal_bytes": size, "wal_frames_pending": pending, "wal_blocked": pending > 0}


# -- checking a store that may come from someone else ------------------------------------------


def check_schema(p: Path, db: sqlite3.Connection, revision: str) -> None:
    """Refuse (StoreError) a schema that is not exactly ``revision``'s: a missing or altered
    table, or any extra table, index, view or trigger (statistics tables of ANALYZE excepted)."""
    from .schemas import REVISIONS, SCHEMAS

    want = {(t, n): (tbl, sql) for t, n, tbl, sql in SCHEMAS[revision]}
    have = {(t, n): (tbl, sql) for t, n, tbl, sql in db.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master")}
    if REVISIONS.index(revision) >= REVISIONS.index(WORDS_BY_COUNT_SINCE) and ("index", "words_by_count") in have:
        want[("index", "words_by_count")] = ("words", WORDS_BY_COUNT)  # optional: see WORDS_BY_COUNT
    problems = []
    for (t, n), v in have.items():
        if (t, n) not in want:
            if t == "table" and n.startswith("sqlite_stat"):
                continue
            problems.append(f"an extra {t} {n!r}")
        elif want[(t, n)] != v:
            problems.append(f"{t} {n!r} is not bpe_store's")
    problems += [f"no {t} {n!r}" for (t, n) in want if (t, n) not in have]
    if problems:
        more = f" and {len(problems) - 4} more" if len(problems) > 4 else ""
        raise StoreError(f"{p}: the store's schema is not bpe_store's {revision} ({', '.join(problems[:4])}{more}); "
                         "refusing to use it")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_pattern(pattern: str, where: str) -> None:
    """Refuse a pre-tokenization pattern that does not compile or backtracks catastrophically
    (StoreError naming ``where``)."""
    from ..counting.pretokenize import PATTERNS

    if pattern in PATTERNS.values():
        return  # ours; checked by the tests
    import regex

    if len(pattern) > MAX_PATTERN_CHARS:
        raise StoreError(f"{where}: its pattern is {len(pattern)} characters long (at most {MAX_PATTERN_CHARS})")
    try:
        compiled = regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError) as exc:
        raise StoreError(f"{where}: its pattern does not compile ({exc})") from None
    try:
        for probe in PATTERN_PROBES:
            for _ in compiled.finditer(probe, timeout=PATTERN_PROBE_SECONDS):
                pass
    except TimeoutError:
        raise StoreError(f"{where}: its pattern {pattern[:60]!r} takes more than {PATTERN_PROBE_SECONDS:g} s "
                         "on a 41-character probe (catastrophic backtracking); refusing it") from None


def check_run(p: Path, row: dict[str, Any]) -> None:
    """Refuse (StoreError) a ``run`` row that bpe_store could not have written."""
    where = f"{p}: the store's run row is damaged"
    try:
        specials = json.loads(row["special_tokens"]) if isinstance(row["special_tokens"], str) else None
    except (ValueError, RecursionError):
        specials = None
    if not isinstance(specials, list) or not all(isinstance(s, str) and s for s in specials):
        raise StoreError(f"{where} (special_tokens is not a JSON list of non-empty strings)")
    if len(specials) > MAX_SPECIAL_TOKENS:
        raise StoreError(f"{where} ({len(specials)} special tokens; at most {MAX_SPECIAL_TOKENS})")
    if len(set(specials)) != len(specials):
        raise StoreError(f"{where} (a special token is listed twice)")
    for col in ("vocab_size", "chunk_size"):
        if not _is_int(row[col]) or row[col] < 1:
            raise StoreError(f"{where} ({col} is {row[col]!r}, not a positive integer)")
    if not 256 + len(specials) <= row["vocab_size"] <= 0xFFFF_FFFF:  # token ids are uint32
        raise StoreError(f"{where} (vocab_size {row['vocab_size']} is out of range)")
    if row["phase"] not in ("counting", "merging", "done"):
        raise StoreError(f"{where} (phase {row['phase']!r})")
    if row["stop_reason"] not in (None, "vocab_size", "no_pairs"):
        raise StoreError(f"{where} (stop_reason {row['stop_reason']!r})")
    if row["invalid_utf8"] not in ("strict", "replace"):
        raise StoreError(f"{where} (invalid_utf8 {row['invalid_utf8']!r})")
    # the trainer options (absent before v0_3_0_trainer_options, which status still reads)
    if "min_frequency" in row and not (_is_int(row["min_frequency"]) and 1 <= row["min_frequency"] < 1 << 63):
        raise StoreError(f"{where} (min_frequency {row['min_frequency']!r})")
    if row.get("max_token_length") is not None and not (
            _is_int(row["max_token_length"]) and 2 <= row["max_token_length"] <= 1 << 32):
        raise StoreError(f"{where} (max_token_length {row['max_token_length']!r})")
    for col in ("state_merges", "pairs_merges"):  # NULL: not kept (absent in older revisions)
        if row.get(col) is not None and not (_is_int(row[col]) and 0 <= row[col] < 1 << 32):
            raise StoreError(f"{where} ({col} {row[col]!r})")
    limit = row.get("max_pretoken_bytes")  # NULL: no limit (stores from before v0_3_0)
    if limit is not None and (not _is_int(limit) or not 4 <= limit <= 1 << 26):
        raise StoreError(f"{where} (max_pretoken_bytes {limit!r} is not an integer in 4..{1 << 26})")
    if not isinstance(row["pattern"], str):
        raise StoreError(f"{where} (pattern is not text)")
    check_pattern(row["pattern"], str(p))
