"""The store's native bulk path: a second connection to the store, driven from C++.

``native/store_db.cpp`` (``_core.StoreDb``) writes a merge checkpoint's rows straight from the
merge engine's arrays to ``sqlite3_bind_*`` with the GIL released, and a counting flush's new
words from packed counts, without a Python tuple per row. Why: the ``sqlite3`` driver's
``executemany`` was ~1.9 of ~4.7 CPU s of enwiki-100M -> 32K, binding one tuple per row.
Large writes run as ONE bulk statement each (``StoreDb.bulk``: ``INSERT ... SELECT p1, p2, p3
FROM bpe_store_rows``), which reads its rows from native memory through a virtual table that
exists only on this connection, instead of stepping a statement once per row: SQLite's per-row
statement overhead was as large as the row's own b-tree work (``bulk.BulkWriter.executemany``).

It talks to the very SQLite library Python's ``sqlite3`` module uses (resolved at run time from
``_sqlite3``'s own file; two copies of SQLite in one process must never open one file: each keeps
its own POSIX locks, and one closing the file drops the other's). ``connect`` opens it only when
that library is found, its version equals ``sqlite3.sqlite_version_info`` and is 3.33 or later; otherwise, or with
``BPE_STORE_NATIVE_DB=0`` in the environment, the store keeps writing with ``executemany`` (the
fallback: static or Windows builds, an installation without the native core).

Errors come back as the exceptions ``sqlite3`` raises for the same SQLite result (``to_sqlite_error``),
with ``sqlite_errorcode`` and the message ``sqlite3_errmsg`` gives, so ``connection.sqlite_error`` maps
them to the same one-line errors (disk full, locked, corrupt, ...) on either path.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from .. import native

#: Set to ``0`` to force the ``executemany`` fallback (tests compare the two paths).
ENV = "BPE_STORE_NATIVE_DB"

_loaded: bool | None = None  # whether _core.StoreDb can be used in this process (decided once)


def available() -> bool:
    """Whether the native path can be used here (and is not turned off by ``BPE_STORE_NATIVE_DB=0``)."""
    global _loaded
    if os.environ.get(ENV, "1") == "0":
        return False
    if _loaded is None:
        _loaded = _load()
    return _loaded


def _load() -> bool:
    try:
        import _sqlite3
    except ImportError:
        return False
    if native.core is None or not getattr(_sqlite3, "__file__", None):
        return False
    try:
        version = native.core.store_db_load(_sqlite3.__file__)
    except RuntimeError:  # not loaded from a file, symbols hidden (static build), no dlopen
        return False
    return usable_version(version, sqlite3.sqlite_version_info)


#: The oldest SQLite the native path's statements run on: ``UPDATE ... FROM`` (a checkpoint's bulk
#: word and pair updates and a flush's count deltas: ``merging_rows._MERGE_CHECKPOINT``, ``_WORD_TOKENS``,
#: ``_COUNT_DELTAS``) came in SQLite 3.33.0.
MIN_VERSION = 3_033_000


def usable_version(native: int, driver: tuple[int, int, int]) -> bool:
    """Whether the library the native core found (``sqlite3_libversion_number()``) is the very one
    the ``sqlite3`` driver reports, and new enough for the bulk statements (older: the fallback)."""
    a, b, c = driver
    return native == a * 1_000_000 + b * 1_000 + c and native >= MIN_VERSION


def connect(path: Path, *, busy_timeout_ms: int, synchronous: str, cache_kib: int,
              journal_size_limit: int) -> Any | None:
    """A ``_core.StoreDb`` on the store at ``path`` (which must exist), or None when the native
    path is not available (``cache_kib`` 0: SQLite's default page cache). Raises the ``sqlite3``
    error the driver would when opening fails."""
    if not available():
        return None
    core = native.core
    try:
        return core.StoreDb(os.fsdecode(path.absolute()), busy_timeout_ms, synchronous, cache_kib,
                             journal_size_limit)
    except core.SqliteError as exc:
        raise to_sqlite_error(exc) from None


def can_write_query() -> bool:
    """Whether ``write_query`` can run here (the native path, built with it)."""
    return available()


def write_query(path: Path, sql: str, fd: int, fmt: str, limit: int | None, max_value_bytes: int,
                quote_cr: bool, quote_lone_empty: bool) -> int:
    """``_core.write_query``: the rows of ``sql`` (checked read-only by the caller) on the store at
    ``path``, opened read-only, written to ``fd`` as csv, json or jsonl; the number of rows. A
    failure is the ``sqlite3`` error the driver would raise (``to_sqlite_error``)."""
    core = native.core
    try:
        return core.write_query(os.fsdecode(path.absolute()), sql, fd, fmt, -1 if limit is None else limit,
                                 max_value_bytes, quote_cr, quote_lone_empty)
    except core.SqliteError as exc:
        raise to_sqlite_error(exc) from None


def is_native_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``_core.SqliteError`` (a failed call of the native connection)."""
    return native.core is not None and isinstance(exc, native.core.SqliteError)


#: Primary result code -> the exception class ``sqlite3`` raises for it (CPython's
#: ``_pysqlite_seterror``); any other code is a DatabaseError.
_ERROR_CLASSES: dict[int, type[sqlite3.Error]] = {
    # ERROR, PERM, ABORT, BUSY, LOCKED, READONLY, INTERRUPT, IOERR, FULL, CANTOPEN, PROTOCOL, EMPTY, SCHEMA
    **dict.fromkeys((1, 3, 4, 5, 6, 8, 9, 10, 13, 14, 15, 16, 17), sqlite3.OperationalError),
    2: sqlite3.InternalError, 12: sqlite3.InternalError,  # INTERNAL, NOTFOUND
    11: sqlite3.DatabaseError,  # CORRUPT
    18: sqlite3.DataError,  # TOOBIG
    19: sqlite3.IntegrityError, 20: sqlite3.IntegrityError,  # CONSTRAINT, MISMATCH
    21: sqlite3.InterfaceError, 25: sqlite3.InterfaceError,  # MISUSE, RANGE
}


def to_sqlite_error(exc: BaseException) -> sqlite3.Error:
    """The ``sqlite3`` exception the driver raises for the same failure: class by result code,
    ``sqlite3_errmsg``'s message, ``sqlite_errorcode`` the extended code."""
    code, msg = exc.args
    err = _ERROR_CLASSES.get(code & 0xFF, sqlite3.DatabaseError)(msg)
    err.sqlite_errorcode = code  # type: ignore[attr-defined]
    return err
