"""What training writes while a reader pins the store's WAL: only what a resume needs, never a wait
within the budgets.

A reader holding a snapshot (``sqlite3`` with ``BEGIN; SELECT ...`` left open, a notebook's
connection) keeps SQLite from copying the WAL back into the store, so every write makes the WAL
longer: one such reader made it grow to 6.5 GB in ~45 s. So before each write the trainer may
defer, it asks (``WalWatch.blocked``: measured by a checkpoint attempt, see
``Store.wal_blocked_now``), and while a reader pins the WAL:

* counting keeps its counts in memory instead of flushing them, up to ``reader_memory_words``
  distinct words (``TrainOptions``); past that, and at the end of counting, the flush goes into
  the WAL as long as the WAL is below ``reader_wal_bytes`` (``WalWatch.write_or_wait``), so a
  reader present from the first second no longer stops the run. Only a WAL past its budget makes
  counting wait for the reader to leave. A kill loses what was counted since the last write;
* the start of merging writes the move to merging without the pair counts (recounted from the
  words by a resume, written by the first full checkpoint);
* merging goes on logging its merges (a few KB each, ``merge_step.MERGE_LOG_SECONDS``), and writes a
  log of the batch's merges in place of each full checkpoint; a kill loses what it loses
  otherwise (the merges since the last log), a resume replays more logged merges;
* the last checkpoint of a finished run logs the last merges and the run's end only: the result
  is complete, and the working state (pair counts, words' tokens) a finished run drops is
  dropped by the next ``train`` of the same command.

The first write after the reader leaves empties the WAL (``Store._truncate_wal``). Each
deferral is reported as a ``deferred`` progress event (``what``, ``wal_bytes``, ``waiting``,
``into_wal``, and the budgets ``memory_words`` and ``wal_budget``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import Interrupted
from ..store.store import Store

#: Seconds between checks while waiting for a reader to leave.
WAIT_POLL_SECONDS = 0.5
#: Seconds between repeated ``deferred`` events about the same write.
REPORT_SECONDS = 5.0
#: While a reader pins the WAL, seconds between checks whether it left (each may wait
#: ``connection.WAL_READER_WAIT_MS``): merging asks at every batch, which may be many a second.
RECHECK_SECONDS = 1.0


class WalWatch:
    """Asks whether a reader pins the WAL before the writes training may defer, and reports it."""

    def __init__(self, store: Store, emit: Callable[..., None], stopping: Callable[[], bool],
                 memory_words: int, wal_budget: int):
        self.store, self.emit, self.stopping = store, emit, stopping
        #: the budgets: words counting holds in memory, bytes the WAL may grow to (``TrainOptions``)
        self.memory_words, self.wal_budget = memory_words, wal_budget
        self._reported: dict[str, float] = {}  # what -> when last reported
        self._pinned_at: float | None = None  # when a check last found the WAL pinned

    def blocked(self, what: str, phase: str) -> bool:
        """Whether ``what`` (a write) must be deferred now; reported when it is."""
        if self._pinned_at is None or time.monotonic() - self._pinned_at >= RECHECK_SECONDS:
            self._pinned_at = time.monotonic() if self.store.wal_blocked_now() else None
        if self._pinned_at is None:
            self._reported.pop(what, None)
            return False
        self._report(what, phase, waiting=False)
        return True

    def room(self) -> bool:
        """Whether the WAL, as the last check measured it, is below its budget: a write that
        cannot be put off goes into it then."""
        return self.store.wal["wal_bytes"] < self.wal_budget

    def write_or_wait(self, what: str, phase: str, lost: str) -> None:
        """Before a write that cannot be put off (``what``): return when no reader pins the WAL, or
        when one does and the WAL is below ``wal_budget`` (the write goes into the WAL, reported
        with ``into_wal``); past the budget, wait for the reader to leave (``wait``)."""
        if not self.store.wal_blocked_now():
            self._reported.pop(what, None)
            self._pinned_at = None
            return
        if self.room():
            self._report(what, phase, waiting=False, into_wal=True)
            return
        self.wait(what, phase, lost)

    def wait(self, what: str, phase: str, lost: str) -> None:
        """Wait until no reader pins the WAL (checked every ``WAIT_POLL_SECONDS``), reporting it.
        A stop request raises Interrupted, saying what is ``lost``."""
        while self.store.wal_blocked_now():
            self._report(what, phase, waiting=True)
            if self.stopping():
                raise Interrupted(f"stopped while a reader held an old snapshot of {self.store.path}; {lost}")
            time.sleep(WAIT_POLL_SECONDS)
        self._reported.pop(what, None)
        self._pinned_at = None

    def _report(self, what: str, phase: str, waiting: bool, into_wal: bool = False) -> None:
        """A ``deferred`` event, at most one every ``REPORT_SECONDS`` about the same write (each
        write into the WAL is reported)."""
        clock = time.monotonic()
        if not into_wal and clock - self._reported.get(what, -REPORT_SECONDS) < REPORT_SECONDS:
            return
        self._reported[what] = clock
        self.emit(stage="deferred", phase=phase, what=what, waiting=waiting, into_wal=into_wal,
                  memory_words=self.memory_words, wal_budget=self.wal_budget, **self.store.wal)
