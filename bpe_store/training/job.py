"""One call of ``train`` as the steps see it: the checked job (``Job``: inputs, parameters,
options, the store, progress), the store writes done on a thread of their own (``_Writes``), and
the wrapper that runs training without cyclic GC and with SQLite errors as ``StoreError``s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from ..native import WordCounter
from ..store.base_rows import BaseRows
from ..store.connection import is_db_error, sqlite_error
from ..store.params import RunParams
from ..store.result import TrainResult
from ..store.run_rows import StageOne
from ..store.store import Store
from ..text.inputs import FileInput
from ..text.streams import Stream
from .options import RunOptions
from .wal_watch import WalWatch

if TYPE_CHECKING:  # the bases' readers import regex: a run without a base does not load them
    from ..formats.bases import Base

Progress = Callable[[dict], None]


@dataclasses.dataclass
class Job:
    """One call of ``train``, checked (step 1): what every later step reads, and from step 2 on
    the store it trains."""

    paths: list[FileInput | Stream]
    db: Path
    #: what defines the result (stored with the run)
    params: RunParams
    #: the run's other settings, checked (``TrainOptions.checked``: workers a count); none is in ``params``
    options: RunOptions
    progress: Progress | None
    stop: threading.Event | None
    #: the tokenizer the run extends (``options.extend``), and its merges in the store's ids
    base: Base | None = None
    base_rows: BaseRows | None = None
    #: time.monotonic() once the checks passed: this session's training time counts from here
    started: float = dataclasses.field(default_factory=time.monotonic)
    #: the training time the store had when this session began (``_session``)
    elapsed0: float = 0.0
    store: Store = dataclasses.field(init=False)
    #: store writes the main thread goes on without waiting for (counting flushes, the start of
    #: merging), in order, on a thread of their own
    writes: _Writes = dataclasses.field(init=False, default_factory=lambda: _Writes())
    #: the last counting flush's native counter when that flush makes the store's words exactly its
    #: rows (ids 1, 2, ... in its order): ``run_pairs`` builds the engine from it while it is written
    fresh_words: WordCounter | None = None
    #: a new superword store's stage 1, copied from its base into the store it creates (``_create``)
    stage1: StageOne | None = None
    #: inputs a resume found touched but unchanged: ``{source id: modification time now}``
    touched: dict[int, int] = dataclasses.field(default_factory=dict)
    #: one event at a time reaches ``progress`` (``_heartbeat`` calls it from its own thread)
    _emit_lock: threading.Lock = dataclasses.field(init=False, default_factory=threading.Lock)
    #: ``(time.monotonic(), event)`` of the last event reported
    _last_event: tuple[float, dict] = dataclasses.field(init=False, default=(0.0, {}))
    #: what the progress callable raised on the heartbeat's thread, raised again on the main one
    _emit_error: BaseException | None = dataclasses.field(init=False, default=None)
    #: this call created the store and is still reading its inputs: input they refuse (invalid
    #: UTF-8 found while counting) removes the store, so a refused first run leaves none and the
    #: command its error suggests (``--invalid-utf8 replace``) starts afresh (``train_with``)
    remove_if_refused: bool = False
    #: merging began while a reader pinned the WAL: the store holds no pair counts yet (``run_pairs``)
    pairs_unwritten: bool = False
    #: merges learnt but not in the store yet, left by a deferred checkpoint to the next log
    unlogged: list = dataclasses.field(default_factory=list)
    #: time.monotonic() of the last merge write (a log or a checkpoint): the next log is due
    #: MERGE_LOG_SECONDS after it
    logged_at: float = 0.0
    _watch: WalWatch | None = dataclasses.field(init=False, default=None)
    #: ``train``'s ``on_checkpoint``: called on the training thread after each write of merges
    #: commits, with ``(store, merges in the store, whether training is over)``
    on_checkpoint: Callable[[Store, int, bool], None] | None = None

    @property
    def watch(self) -> WalWatch:
        """Whether a reader pins the store's WAL, asked before each write training may defer."""
        if self._watch is None:
            self._watch = WalWatch(self.store, self.emit, self.stopping, self.options.reader_memory_words,
                                   self.options.reader_wal_bytes)
        return self._watch

    def emit(self, **event) -> None:
        """Report a progress event, if anyone listens."""
        if self.progress is not None:
            with self._emit_lock:
                err, self._emit_error = self._emit_error, None
                if err is not None:
                    raise err
                self.progress(event)
                self._last_event = (time.monotonic(), event)

    def checkpointed(self, merges_done: int) -> None:
        """Merges up to ``merges_done`` are committed: tell ``on_checkpoint``, if anyone listens."""
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.store, merges_done, False)

    def done(self, result: TrainResult) -> TrainResult:
        """Training is over with ``result``: tell ``on_checkpoint``, if anyone listens; returns it."""
        if self.on_checkpoint is not None:
            self.on_checkpoint(self.store, len(result.merges), True)
        return result

    def elapsed(self) -> float:
        """The run's training time so far: earlier sessions' and this one's."""
        return self.elapsed0 + time.monotonic() - self.started

    def stopping(self) -> bool:
        """Whether a stop was requested (``train``'s ``stop``)."""
        return self.stop is not None and self.stop.is_set()

    @property
    def stream(self) -> Stream | None:
        """The input that is a stream (stdin, an iterable), if any: it is then the only input."""
        return next((p for p in self.paths if isinstance(p, Stream)), None)


class _Writes:
    """Store writes done on a thread of their own, in the order given, while the main thread goes
    on: counting flushes while units are counted, and the last flush and the start of merging
    while the engine is built and merging begins (a merge checkpoint first waits for them: see
    ``_checkpoint``). Why: the last flush (enwiki-100M: 445 K new words, ~0.5 s) was on the
    critical path between counting and merging, though nothing before the first merge checkpoint
    reads the store. A write runs only if every earlier one committed; a failure is raised in the
    main thread by ``poll`` or ``wait``, and ``then`` callbacks (progress events) run there too."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._pending: list[tuple[Future, Callable[[], None] | None]] = []

    def submit(self, fn: Callable[..., object], *args: object, then: Callable[[], None] | None = None) -> None:
        """Run ``fn(*args)`` after the writes before it; ``then()`` once it is seen to have committed."""
        before = self._pending[-1][0] if self._pending else None

        def run() -> object:
            if before is not None:
                before.result()  # an earlier write failed: write nothing after it
            return fn(*args)

        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="bpe-flush")
        self._pending.append((self._pool.submit(run), then))

    def idle(self) -> bool:
        """Whether no write is pending or unreported."""
        return not self._pending

    def busy(self) -> bool:
        """Whether a write is still running or queued."""
        return any(not fut.done() for fut, _ in self._pending)

    def poll(self) -> None:
        """Report the writes that have committed, in order (raising the first failure)."""
        while self._pending and self._pending[0][0].done():
            self._report()

    def wait(self) -> None:
        """Wait for every write and report it (raising the first failure)."""
        while self._pending:
            self._report()

    def _report(self) -> None:
        fut, then = self._pending[0]
        try:
            fut.result()
        except BaseException:
            self._pending.clear()  # the writes after a failed one did nothing
            raise
        self._pending.pop(0)
        if then is not None:
            then()

    def close(self) -> None:
        """Let the writes in flight finish (their failures are not raised: the caller is already
        failing, and the store stays at its last committed write) and stop the thread."""
        for fut, _ in self._pending:
            with contextlib.suppress(Exception):
                fut.result()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


P = ParamSpec("P")
R = TypeVar("R")


def without_gc_store_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run with cyclic GC off, its SQLite failures turned into one-line ``StoreError``s.

    ``functools.wraps`` keeps ``fn``'s name, signature (``inspect.signature`` follows
    ``__wrapped__``) and docstring for ``help()``; ``ParamSpec`` keeps them for type checkers/IDEs.
    """
    # the position of ``db`` among the positional parameters, read from the code object: importing
    # the inspect module for inspect.signature cost ~20 ms of every cold start (0.17 s in all)
    code = fn.__code__
    db_param = code.co_varnames[:code.co_argcount].index("db")

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        # Why no cyclic GC while training: counting and the checkpoints make ~1M long-lived tuples
        # at once, and each generation-2 collection walks all of them; nothing training makes is
        # cyclic garbage worth collecting meanwhile (py-spy on enwiki-100M: ~0.5 s of 5.9 s was
        # gc_collect_main). Collection resumes, with whatever is left, when training returns.
        gc_on = gc.isenabled()
        gc.disable()
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not is_db_error(exc):
                raise
            db = kwargs.get("db", args[db_param] if len(args) > db_param else "store")
            raise sqlite_error(Path(db), exc) from exc  # type: ignore[arg-type]
        finally:
            if gc_on:
                gc.enable()

    return wrapper
