"""The SQLite connection under a store: opening and configuring it, the statements' results,
explicit transactions, Ctrl-C and time limits on long statements, and SQLite errors turned into
one-line ``StoreError``s.
"""

from __future__ import annotations

import datetime as _dt
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..errors import StoreError
from ..interrupts import CtrlC
from .damage import damaged_tables

#: ``PRAGMA application_id`` of every bpe_store file ("BPE1"): tells our stores from other SQLite files.
APPLICATION_ID = 0x42504531
SQLITE_MAGIC = b"SQLite format 3\x00"

#: The page size of a new store (SQLite's default is 4096; a store keeps the size it was made with).
#: Why 16 KiB: the big writes (counting's flushes into `words`, a merge checkpoint's word tokens and
#: pair rows) go through fewer, larger pages. Whole 12 GB OWT-like run -> 32K, in-process,
#: alternated 4K / 16K / 4K / 16K: 101.5 / 88.5 / 94.4 / 84.8 s wall, 162.7 / 150.0 / 157.8 / 142.1
#: CPU s; its final checkpoint 5.8 -> 5.2 s (bench/RESULTS-scale.md).
PAGE_SIZE = 16384


#: Milliseconds a statement waits for another connection's lock before failing.
BUSY_TIMEOUT_MS = 10_000
#: The WAL is truncated to this size whenever it is reset (``PRAGMA journal_size_limit``); after
#: every write transaction a TRUNCATE checkpoint empties it unless a reader still needs it.
WAL_SIZE_LIMIT = 64 << 20
#: Milliseconds ``Store.wal_blocked_now`` lets a reader finish before it counts as pinning the WAL.
WAL_READER_WAIT_MS = 100


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def is_db_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a database error (the driver's, or SQLAlchemy's wrapping of one)."""
    if isinstance(exc, sqlite3.Error):
        return True
    import sys

    sa_exc = sys.modules.get("sqlalchemy.exc")  # only if SQLAlchemy was imported at all
    return sa_exc is not None and isinstance(exc, sa_exc.DBAPIError)


class DiskFull(StoreError):
    """SQLite found the disk full. ``detail``: SQLite's words (``Store.create`` says what that
    means for a store being created: none was)."""

    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


def sqlite_error(path: Path, exc: BaseException) -> BaseException:
    """The exception to raise for a SQLite error on ``path``: a one-line StoreError, or
    KeyboardInterrupt when the statement was interrupted by Ctrl-C (see ``Guard``)."""
    orig = getattr(exc, "orig", exc)
    if getattr(orig, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT:
        if getattr(orig, "bpe_store_timeout", None) and not CtrlC.pending:
            return StoreError(f"{path}: a query took longer than {orig.bpe_store_timeout:g} s and was stopped")
        CtrlC.pending = False  # this KeyboardInterrupt is the Ctrl-C
        return KeyboardInterrupt()
    msg = str(orig)
    if "malformed" in msg:  # SQLITE_CORRUPT: a page of the store is damaged
        tables = damaged_tables(sqlite_uri(path, mode="ro"))
        where = f"table {tables[0]}" if tables and not tables[0].startswith("the ") else (tables or ["a page"])[0]
        return StoreError(f"{path}: the store is damaged: SQLite finds {where} damaged ({msg}); restore it from a "
                          "copy, or start over with --restart")
    if "not a database" in msg:
        return StoreError(f"{path}: the database file is corrupt or not a SQLite database ({msg})")
    if "readonly" in msg or "read-only" in msg or "unable to open" in msg:
        return StoreError(f"{path}: cannot write the database here ({msg})")
    if "disk is full" in msg or "database or disk is full" in msg:
        return DiskFull(f"{path}: the disk is full ({msg}); the store is still at its last checkpoint", msg)
    if "too big" in msg:
        return StoreError(f"{path}: a value is larger than this connection allows ({msg})")
    return StoreError(f"{path}: SQLite error: {msg}")


def sqlite_uri(path: Path, **params: str | int) -> str:
    """A ``file:`` URI for ``path``: every character a file name may hold (``#``, ``?``, ``%``,
    spaces, non-ASCII) is percent-encoded, so the URI names exactly that file."""
    uri = "file:" + quote(os.fsencode(path.absolute()), safe="/")
    if params:
        uri += "?" + "&".join(f"{k}={v}" for k, v in params.items())
    return uri


class Guard:
    """The connection's progress handler: makes Ctrl-C stop a long statement (``interrupts.CtrlC``;
    the statement then fails with SQLITE_INTERRUPT, which ``sqlite_error`` turns back into
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


def connect(path: Path, readonly: bool, durable: bool = True) -> tuple[sqlite3.Connection, bool]:
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

