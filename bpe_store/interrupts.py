"""Ctrl-C (SIGINT) in a process that queries stores: never lost, never turned into another error.

``ctrl_c_stops_statements`` installs the handler (the command line does, first thing);
``sqlite_call`` marks a call into SQLite; a store's progress handler (``connection.Guard``) stops a
statement while ``CtrlC.pending``. Only the standard library is imported here, so the entry point
can install the handler before the command line's own imports.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class CtrlC:
    """Ctrl-C (SIGINT) while SQLite runs a statement, once ``ctrl_c_stops_statements`` is on.

    Python's own handler raises KeyboardInterrupt wherever the signal is noticed, and two kinds of
    places swallow it. SQLite calls back into Python while it prepares a statement (``sql``'s
    authorizer) and every 100 K steps (``Guard``), and the sqlite3 module clears any exception
    raised in a callback: in the progress handler that still stops the statement (as
    SQLITE_INTERRUPT), but in the authorizer a KeyboardInterrupt became SQLITE_DENY, so ``sql``
    failed as a refused write (exit 2). And Python ignores exceptions in weakref callbacks and
    ``__del__`` (an import lock's weakref callback, noticed under load while ``sql`` imported its
    modules: "Exception ignored in ... KeyboardInterrupt"): the Ctrl-C was lost and the query ran
    on; the CI flake of ``test_ctrl_c_stops_a_long_query``.

    So the handler marks every Ctrl-C ``pending`` first, and the progress handler stops any
    statement while one is (a Ctrl-C is never lost: a swallowed KeyboardInterrupt still stops the
    next long statement). Outside a call into SQLite it then raises at once, as Python's does;
    inside one that ``sqlite_call`` marks it does not raise (the callback running now could
    swallow it): the call's end raises it.
    """

    #: marked calls into SQLite the main thread is inside now (``sqlite_call``)
    depth = 0
    #: a Ctrl-C came and no statement has stopped for it yet
    pending = False

    @classmethod
    def handle(cls, _signum: int, _frame: Any) -> None:
        cls.pending = True
        if not cls.depth:
            raise KeyboardInterrupt


@contextmanager
def sqlite_call() -> Iterator[None]:
    """Marks a call into SQLite (preparing or stepping a statement) during which Ctrl-C must not
    raise inside a callback (``CtrlC``); raises KeyboardInterrupt at its end if one came."""
    CtrlC.depth += 1
    try:
        yield
    finally:
        CtrlC.depth -= 1
        if CtrlC.pending and not CtrlC.depth:
            CtrlC.pending = False
            raise KeyboardInterrupt  # Ctrl-C wins over the statement's own outcome


@contextmanager
def ctrl_c_stops_statements() -> Iterator[None]:
    """While the block runs, SIGINT raises KeyboardInterrupt as Python's own handler does, and a
    statement of any store stops cleanly (``CtrlC``); the previous handler comes back after.
    Main thread only (elsewhere a no-op: Python runs signal handlers in the main thread).

    Installed whatever SIGINT's disposition was: a process started in the background by a
    script inherits SIGINT ignored, and Python then installs no handler of its own, so a long
    ``sql`` query could not be stopped by Ctrl-C or by a supervisor's SIGINT (as ``train`` and
    ``encode``, which install theirs, always could)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, CtrlC.handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        CtrlC.pending = False
