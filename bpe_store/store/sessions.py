"""Training sessions: who trained in a store, when, and how each session ended.

A session is one process that opened the store to train and changed it. ``begin`` prepares its
row, which is written with the session's first write (``Store.defer_write``: in the same
transaction); ``end`` closes it with an outcome (``done``, ``interrupted``, ``failed``). A session
that wrote nothing (a resume refused while counting, a bad record found again, a finished store
trained again with the same command) leaves no row: the file stays byte-identical. A row whose
``ended_at`` stays NULL belongs to the run holding the store now, or to one that was killed or
stopped at once (``bpe-store status`` tells them apart with the store's lock).
"""

from __future__ import annotations

import json
import os
import socket
import sys

from ..errors import Interrupted
from .connection import now
from .store import Store


def begin(store: Store, reader_budgets: tuple[int, int] | None = None) -> int | None:
    """Record that this process starts training in ``store``, with its first write; returns the
    session id. (The trainer holds the store's lock, so no other session takes the id meanwhile.)
    ``reader_budgets``: the run's ``(reader_memory_words, reader_wal_bytes)``, which ``status``
    shows."""
    from .._version import __version__

    merges = store.count_merges()
    session = store.sql("SELECT coalesce(max(id), 0) + 1 FROM sessions").scalar()
    words, wal = reader_budgets or (None, None)
    store.defer_write(
        "INSERT INTO sessions (id, pid, host, argv, bpe_store_version, started_at, merges_start,"
        " reader_memory_words, reader_wal_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (session, os.getpid(), socket.gethostname(), json.dumps(sys.argv), __version__, now(), merges, words, wal))
    return session


def outcome_of(exc: BaseException | None) -> str:
    """The outcome recorded for a session that ended with ``exc`` (None: it returned)."""
    if exc is None:
        return "done"
    if isinstance(exc, Interrupted):
        return "interrupted"
    return "failed"


def end(store: Store, session_id: int | None, exc: BaseException | None = None) -> None:
    """Close the session row; never raises (it must not hide why training stopped)."""
    if session_id is None or isinstance(exc, (KeyboardInterrupt, SystemExit)):
        # stopping at once (a second Ctrl-C, an exit): write nothing more. The interrupt may have
        # landed anywhere in a statement of this connection, and a write could wait busy_timeout
        # on a lock for nothing. The row stays open, which status reports as "ended without a trace".
        return
    if store.drop_deferred():
        return  # the session wrote nothing, so it leaves nothing (its row was never written)
    try:
        with store.transaction():
            store.sql("UPDATE sessions SET ended_at = ?, outcome = ?,"
                      " merges_end = (SELECT count(*) FROM merges) WHERE id = ?",
                      (now(), outcome_of(exc), session_id))
    except Exception:  # noqa: BLE001 - best effort, the original outcome matters more
        pass
