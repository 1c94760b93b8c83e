"""Training: the resumable recipe that turns corpus files into merges inside a store.

``train`` runs these steps; the functions below follow them in this order.

1. check  (``_check``) — parameters and inputs; on any problem, raise before anything is written
2. plan   (``_plan``) — fingerprint the inputs, cut them into chunks, create the store (one
          transaction); or, to resume, check the store, the parameters and the inputs, writing nothing
3. count  (``_count``) — pre-tokenize and count words per chunk, in parallel; each flush is one
          transaction that adds the counts and marks its chunks counted, so no chunk is counted twice
4. pairs  (``_pairs``) — count adjacent pairs once; the run moves to the merging phase
5. merge  (``_merge``) — batches of merges; each batch is ONE transaction (merges, vocab, changed
          words, changed pair counts, progress): the checkpoint; between them, about every second,
          a smaller one logs the merges alone (``_log_merges``); the last one keeps the result and
          drops the merging's working state (``_checkpoint``)
6. done   (``read_result``) — the vocabulary size is reached, or no pair is left

Steps 3-6 run inside a session (``_session``), logged in the store's history. Running the same
command again resumes from the last transaction. The stage names are the ``stage`` of progress
events, and the store's ``run.phase`` is counting / merging / done. The checks of step 1 live in
``bpe_store.training.options``; ``train_bpe`` and ``train_from_iterator`` (at the end) are ``train`` for
the CS336 API and for Python iterables.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import ParamSpec, TypeVar

from .._version import __version__
from ..counting.count import (
    DEFAULT_CHUNK_SIZE,
    FlushBuffer,
    WordCounter,
    add_counts,
    count_blocks_ordered,
    count_chunk_native_task,
    count_chunk_task,
    count_chunks_threaded,
    count_unit_task,
    count_units_threaded,
    native_counts,
    new_word_counts,
    release_chunk_memory,
    scan_source,
    ticking,
)
from ..counting.inputs import (
    DEFAULT_TEXT_FIELD,
    STDIN,
    FileInput,
    Stream,
    file_input,
    plan_units,
    same_kind_diffs,
    scan_input,
    unit_of,
)
from ..counting.pretokenize import GPT2_PATTERN, describe_pattern, resolve_pattern
from ..counting.sources import Source
from ..errors import ArgumentTypeError, InputError, Interrupted, ResumeMismatch, StoreError, path_argument
from ..store import sessions
from ..store.connection import _sqlite_error, is_db_error
from ..store.counting_rows import StreamMark
from ..store.files import _remove_files
from ..store.params import RunParams
from ..store.result import TrainResult, read_result, result_check
from ..store.store import Store
from ..temporaries import new_dir, remove_stale
from .merge import Engine, new_engine, release_free_memory, uses_native
from .options import (
    DEFAULT_MAX_PRETOKEN_BYTES,
    check_engines,
    check_params,
    check_run_options,
    check_trainer_options,
)

#: A checkpoint is written after this many seconds of merging (and when merging ends): the most
#: a kill can lose. ``checkpoint_merges`` also caps a batch when given; by default it is None,
#: because merges per second vary 100x between engines and corpora, while the cost of a
#: checkpoint grows with the words a batch touches: with the native engine on enwiki-100M a
#: checkpoint every 2000 merges spent 7 s writing for 1 s of merging (bench/RESULTS-merge.md).
DEFAULT_CHECKPOINT_MERGES: int | None = None
DEFAULT_CHECKPOINT_SECONDS = 30.0
#: Counting flushes its counts to the store at most this often (and at the end).
DEFAULT_COUNT_FLUSH_SECONDS = 10.0
#: ... and sooner once it has counted this share of the bytes still to count since the last
#: flush, and at least ``COUNT_FLUSH_MIN_BYTES`` (see ``_CountWriter.due``): what a kill loses.
COUNT_FLUSH_LOSS = 0.05
COUNT_FLUSH_MIN_BYTES = 256 << 20
#: Merging logs its new merges (merges, vocabulary, progress: no word or pair rows, ~15 ms on a
#: 12 GB store) after this many seconds since the last write, between full checkpoints: what a
#: kill during merging loses. A resume applies the logged merges to the words it reads
#: (``_load_engine``; words are independent, so two threads share it, and no pair count is kept
#: up to date through it): 13,632 merges on 7.0 M words 1.4 s, where merging the first 12,736 took
#: 4.5 s; counting the pairs after it costs more than at rank 0 (~2.2 s: merged tokens make
#: millions of distinct pairs).
MERGE_LOG_SECONDS = 1.0
#: A finished run keeps the tokens of at most this many of its most frequent words (those more
#: frequent than the next one, so that ties never depend on word ids; ``top_words`` shows them,
#: the others' are NULL): the words people look at, where writing every word's (7.0 M at 12 GB)
#: took 2.2 s. A word's tokens are its split under the merges (``merge.word_splitter``). A run
#: continued to a larger vocabulary reads the words as bytes and replays every merge.
KEEP_WORD_TOKENS = 100_000
#: A finished run keeps the counts of its live pairs at least as frequent as the 100,000th most
#: frequent one (ties never depend on ids): ``top_pairs`` then says what the next merges would be,
#: its first row the merge that continuing by one token makes. A run continued to a larger
#: vocabulary recounts every pair from its words and replaces them.
KEEP_PAIR_COUNTS = 100_000
#: While counting, a progress event at least this often (seconds), even when a unit takes longer
#: (``_heartbeat``).
HEARTBEAT_S = 1.0
#: Merges per engine call inside a batch (see ``_merge_batch``).
_SUB_STEP = 64

Progress = Callable[[dict], None]


@dataclasses.dataclass
class _Job:
    """One call of ``train``, checked (step 1): what every later step reads, and from step 2 on
    the store it trains."""

    paths: list[FileInput | Stream]
    db: Path
    params: RunParams
    workers: int
    chunk_size: int
    checkpoint_merges: int | None
    checkpoint_seconds: float
    count_flush_seconds: float
    restart: bool
    durable: bool
    engine: str
    count_engine: str
    ray_address: str | None
    progress: Progress | None
    stop: threading.Event | None
    #: time.monotonic() once the checks passed: this session's training time counts from here
    started: float = dataclasses.field(default_factory=time.monotonic)
    #: the training time the store had when this session began (``_session``)
    elapsed0: float = 0.0
    store: Store = dataclasses.field(init=False)
    #: store writes the main thread goes on without waiting for (counting flushes, the start of
    #: merging), in order, on a thread of their own
    writes: _Writes = dataclasses.field(init=False, default_factory=lambda: _Writes())
    #: the last counting flush's native counter when that flush makes the store's words exactly its
    #: rows (ids 1, 2, ... in its order): ``_pairs`` builds the engine from it while it is written
    fresh_words: WordCounter | None = None
    #: one event at a time reaches ``progress`` (``_heartbeat`` calls it from its own thread)
    _emit_lock: threading.Lock = dataclasses.field(init=False, default_factory=threading.Lock)
    #: ``(time.monotonic(), event)`` of the last event reported
    _last_event: tuple[float, dict] = dataclasses.field(init=False, default=(0.0, {}))
    #: what the progress callable raised on the heartbeat's thread, raised again on the main one
    _emit_error: BaseException | None = dataclasses.field(init=False, default=None)

    def emit(self, **event) -> None:
        """Report a progress event, if anyone listens."""
        if self.progress is not None:
            with self._emit_lock:
                err, self._emit_error = self._emit_error, None
                if err is not None:
                    raise err
                self.progress(event)
                self._last_event = (time.monotonic(), event)

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


def _without_gc_store_errors(fn: Callable[P, R]) -> Callable[P, R]:
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
            raise _sqlite_error(Path(db), exc) from exc  # type: ignore[arg-type]
        finally:
            if gc_on:
                gc.enable()

    return wrapper


@_without_gc_store_errors
def train(
    inputs: Sequence[str | os.PathLike] | str | os.PathLike | Stream,
    db: str | os.PathLike,
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    *,
    pattern: str = GPT2_PATTERN,
    workers: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    checkpoint_merges: int | None = DEFAULT_CHECKPOINT_MERGES,
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
    count_flush_seconds: float = DEFAULT_COUNT_FLUSH_SECONDS,
    invalid_utf8: str = "strict",
    restart: bool = False,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
    engine: str = "auto",
    durable: bool = True,
    format: str | None = None,
    text_field: str = DEFAULT_TEXT_FIELD,
    min_frequency: int = 1,
    max_token_length: int | None = None,
    count_engine: str = "local",
    ray_address: str | None = None,
    max_pretoken_bytes: int | None = None,
) -> TrainResult:
    """Train (or resume training) a byte-level BPE into the store ``db``; see the module doc.

    Running it again with the same arguments resumes from the store's last checkpoint and gives
    the result of an uninterrupted run; a larger ``vocab_size`` continues a finished store.

    Args:
        inputs: corpus file(s) (text, jsonl or parquet, maybe .gz/.zst/.bz2/.xz; see
            ``bpe_store.counting.inputs``) or one ``inputs.Stream``; the store records their sizes and SHA-256.
        db: the store (a SQLite file): created if absent, resumed if present.
        vocab_size: target vocabulary size: special tokens + 256 bytes + merges.
        special_tokens: special tokens; they split the text, are never merged and get the first ids.
        pattern: the pre-tokenization regex, or a name in ``pretokenize.PATTERNS`` ("gpt2", the
            default; "gpt4" = "cl100k"; "o200k"; "llama3"; "qwen2": each has a native scanner). The
            store keeps the regex, so a name and its regex are the same run.
        workers: counting threads/processes (default: all cores); never changes the result.
        chunk_size: bytes per counting unit; never changes the result.
        checkpoint_merges: also end a merge batch (a checkpoint) after this many merges.
        checkpoint_seconds: seconds of merging per checkpoint: the most a kill can lose.
        count_flush_seconds: counting writes its counts to the store at most this often.
        invalid_utf8: "strict" (refuse, naming the byte offset) or "replace" (U+FFFD).
        restart: discard the store's progress and start over.
        progress: called with events such as ``{"stage": "merging", "done": 1200, "total": 31744}``
            (stages: plan, counting, pairs, merging, checkpoint; see ``bpe_store.inspection.progress``).
        stop: when set, training finishes its current batch, writes a checkpoint and raises
            ``Interrupted``.
        engine: the merge engine: "native" (C++), "python" (the portable fallback) or "auto"
            (native when built). Both give the same result, so a run may resume with the other.
        durable: False skips every fsync: only for a store no one will resume (``train_bpe``'s
            temporary one), where they cost more than the training on a busy disk.
        format: how to read the input files: "text", "jsonl" or "parquet" (default: by extension).
        text_field: the jsonl field / parquet column holding each document's text.
        min_frequency: words counted fewer times take part in no pair (they stay in the store's
            ``words`` with their counts); 1, the default, is CS336's semantics.
        max_token_length: no merge makes a token longer than this many bytes (None: no limit);
            a pair too long is never counted, so it is never chosen.
        count_engine: where counting runs: "local" (this machine's threads) or "ray" (Ray tasks,
            ``bpe_store.counting.ray_count``); never changes the result, so a run may resume with the other.
        ray_address: with ``count_engine="ray"``, the cluster to count on (``host:port``,
            ``ray://host:port`` or ``auto``); None starts a local cluster of ``workers`` CPUs for
            the counting (or uses this process's connection if ``ray.init`` was called).
        max_pretoken_bytes: a pre-token longer than this counts as pieces of at most this many
            bytes, cut at UTF-8 character starts (``pretokenize.split_long_pretoken``); 4 to 64 MiB,
            stored with the run. None: the store's value on a resume, else 1 MiB.

    Returns:
        A ``TrainResult``: ``vocab`` (id -> bytes), ``merges`` (pairs of bytes in merge order),
        ``merge_counts``, ``phase`` and ``stop_reason``.

    Raises:
        InputError: bad parameters or inputs (exit code 2 on the command line).
        ResumeMismatch: the store was started with other parameters or inputs (3).
        StoreError: not a store, corrupt, damaged or tampered, held by another run, disk full, ... (4).
        Interrupted: ``stop`` was set; the store holds everything up to its last checkpoint.
    """
    job = _check(inputs, db, vocab_size, special_tokens, pattern=pattern, workers=workers, chunk_size=chunk_size,
                 checkpoint_merges=checkpoint_merges, checkpoint_seconds=checkpoint_seconds,
                 count_flush_seconds=count_flush_seconds, invalid_utf8=invalid_utf8, restart=restart,
                 progress=progress, stop=stop, engine=engine, durable=durable, format=format,
                 text_field=text_field, min_frequency=min_frequency, max_token_length=max_token_length,
                 count_engine=count_engine, ray_address=ray_address, max_pretoken_bytes=max_pretoken_bytes)
    release_free_memory()  # from here on, large blocks one phase frees are not kept resident by the next
    merger = _plan(job)                                    # 2. plan (or check a resume)
    with _session(job):
        if job.store.run_row()["phase"] == "counting":
            _count(job)                                    # 3. count
            merger = _pairs(job)                           # 4. pairs
        _merge(job, merger or job.engine)                  # 5. merge
        return read_result(job.store)                      # 6. done


def _check(inputs: Sequence[str | os.PathLike] | str | os.PathLike | Stream, db: str | os.PathLike,
           vocab_size: int, special_tokens: Sequence[str], *, pattern: str, workers: int | None, chunk_size: int,
           checkpoint_merges: int | None, checkpoint_seconds: float, count_flush_seconds: float,
           invalid_utf8: str, restart: bool, progress: Progress | None, stop: threading.Event | None,
           engine: str, durable: bool, format: str | None, text_field: str, min_frequency: int,
           max_token_length: int | None, count_engine: str, ray_address: str | None,
           max_pretoken_bytes: int | None) -> _Job:
    """1. check: ``train``'s arguments (see there), all of them before anything is written."""
    if isinstance(inputs, (str, os.PathLike, Stream)):
        inputs = [inputs]
    db = path_argument(db, "db")
    if not isinstance(inputs, Iterable):
        raise ArgumentTypeError(f"inputs must be a path, a list of paths or a Stream, not {type(inputs).__name__}")
    inputs = [p if isinstance(p, Stream) else path_argument(p, "each input") for p in inputs]
    if not isinstance(text_field, str):
        raise ArgumentTypeError(f"text_field must be a str, not {type(text_field).__name__}")
    paths = [p if isinstance(p, Stream) else file_input(p, format, text_field) for p in inputs]
    if not paths:
        raise InputError("no input files given")
    if isinstance(pattern, str):  # check_params refuses anything else
        pattern = resolve_pattern(pattern)
    if len(paths) > 1 and any(isinstance(p, Stream) for p in paths):
        raise InputError("a stream (standard input '-' or an iterable) must be the only input")
    params = check_params(vocab_size, special_tokens, pattern, invalid_utf8, max_pretoken_bytes)
    params = dataclasses.replace(params, **check_trainer_options(min_frequency, max_token_length))
    workers = check_run_options(workers, chunk_size, checkpoint_merges, checkpoint_seconds, count_flush_seconds)
    check_engines(engine, count_engine, ray_address)
    return _Job(paths, Path(db), params, workers, chunk_size, checkpoint_merges, checkpoint_seconds,
                count_flush_seconds, restart, durable, engine, count_engine, ray_address, progress, stop)


def _plan(job: _Job) -> Engine | None:
    """2. plan: create the store (``_create``); or open the existing one and check a resume
    (parameters, inputs, the store's consistency) before the first write, so a refused resume
    leaves the store exactly as it was. Sets ``job.store``; returns the merge engine when the
    checks built it (a store past counting)."""
    store = _open_for_training(job.db, job.paths, job.params.invalid_utf8, job.restart, job.durable)
    if store is None:
        job.store = _create(job)
        return None
    try:
        store.check_plan()
        grow = _same_inputs(store, job.paths, job.params)
        merger = _preflight(job, store, grow)
        if grow:
            store.set_vocab_size(job.params.vocab_size)  # continue to a larger vocabulary
    except BaseException:
        store.close()
        raise
    job.store = store
    return merger


def _create(job: _Job) -> Store:
    """A new store: fingerprint the inputs, cut them into work units, and create the store holding
    its schema, run, plan and vocabulary; everything is checked before the file is created."""
    sources: list[Source] = []
    for p in job.paths:
        job.emit(stage="plan", file=str(p.name if isinstance(p, Stream) else p.path))
        sources.append(p.source() if isinstance(p, Stream) else scan_input(p, job.params.invalid_utf8))
    params = job.params
    if params.max_pretoken_bytes is None:
        params = dataclasses.replace(params, max_pretoken_bytes=DEFAULT_MAX_PRETOKEN_BYTES)
    chunks: list[tuple[int, int, int, str, int | None]] = []
    for i, s in enumerate(sources):
        if isinstance(job.paths[i], Stream):
            chunks.append((i, 0, 0, "stream", None))
            continue
        for start, end, kind, part in plan_units(s, params.special_tokens, params.pattern, job.chunk_size,
                                                 params.max_pretoken_bytes):
            chunks.append((i, start, end, kind, part))
    # the store appears complete (schema, run, plan, vocabulary) or not at all
    return Store.create(job.db, init=lambda new: new.init_run(params, sources, chunks, job.chunk_size, __version__),
                        durable=job.durable)


def _open_for_training(db: Path, paths: Sequence[FileInput | Stream], invalid_utf8: str, restart: bool,
                       durable: bool = True) -> Store | None:
    """The existing store at ``db`` to resume, locked; None when a new one is to be created.

    A store of ours with no run and no rows (an older bpe_store's creation killed midway: this one
    creates stores atomically, with their run) is deleted and created again, as is any store with
    ``restart`` (once the inputs are checked). A store with rows but no run or no schema version
    (damaged or edited) is refused: nothing is deleted without ``restart``."""
    if not db.exists() or db.is_dir() or db.stat().st_size == 0:
        if db.is_dir():
            Store.open(db)  # raises the "is a directory" error
        return None
    store = Store.open(db, allow_unfinished=True, durable=durable)
    try:
        if not restart and store.revision is not None and store.has_run():
            return store
        if not restart and (held := store.tables_with_rows()):
            why = "no schema version" if store.revision is None else "no run"
            raise StoreError(f"{db}: the store has {why} but holds data ({', '.join(held[:4])}): damaged or "
                             "edited, so it is not resumed and nothing was deleted; --restart deletes it "
                             "and starts over")
        if restart:
            for p in paths:
                if not isinstance(p, Stream):
                    scan_input(p, invalid_utf8)
        _remove_files(db)  # still holding the lock, so no other trainer is using it
    except BaseException:
        store.close()
        raise
    store.close()
    return None


def _same_inputs(store: Store, paths: Sequence[FileInput | Stream], params: RunParams) -> bool:
    """Refuse a resume whose parameters or inputs differ from the store's, saying what differs.

    Writes nothing; returns whether ``params`` asks for a larger vocabulary than the store's."""
    old = store.params()
    diffs = _param_diffs(old, params) + _input_diffs(store, paths)
    if diffs:
        raise ResumeMismatch(f"{store.path} was started with other parameters or inputs: "
                             + "; ".join(diffs) + ". Use the same command, or --restart to start over")
    if params.vocab_size < old.vocab_size:
        raise ResumeMismatch(
            f"{store.path} trains to vocab size {old.vocab_size}; a smaller one ({params.vocab_size}) "
            f"is a prefix of it: use `bpe-store export --vocab-size {params.vocab_size}` "
            "(or --restart to start over)")
    return params.vocab_size > old.vocab_size


def _param_diffs(old: RunParams, params: RunParams) -> list[str]:
    """How ``params`` differ from the store's ``old`` ones (the vocabulary size aside)."""
    diffs = []
    if old.pattern != params.pattern:
        diffs.append(f"pattern {old.pattern!r} -> {params.pattern!r}")
    if old.special_tokens != params.special_tokens:
        diffs.append(f"special tokens {list(old.special_tokens)} -> {list(params.special_tokens)}")
    if old.invalid_utf8 != params.invalid_utf8:
        diffs.append(f"invalid UTF-8 policy {old.invalid_utf8} -> {params.invalid_utf8}")
    for option in ("min_frequency", "max_token_length"):
        if getattr(old, option) != getattr(params, option):
            diffs.append(f"{option} {getattr(old, option)} -> {getattr(params, option)}")
    if params.max_pretoken_bytes is not None and old.max_pretoken_bytes != params.max_pretoken_bytes:
        diffs.append(f"max pre-token bytes {old.max_pretoken_bytes or 'no limit'} -> {params.max_pretoken_bytes}")
    return diffs


def _input_diffs(store: Store, paths: Sequence[FileInput | Stream]) -> list[str]:
    """How the inputs ``paths`` differ from those the store was started with."""
    sources = store.sources()
    given = [p.name if isinstance(p, Stream) else str(p.path.resolve()) for p in paths]
    if [s.path for s in sources] != given:
        return [f"inputs {[s.path for s in sources]} -> {given}"]
    diffs = same_kind_diffs(sources, paths)
    for s in sources:
        if s.format == "iterable" or s.path == STDIN:
            continue  # a stream: checked as it is read again (see inputs.Stream)
        p = Path(s.path)
        if not p.is_file():
            diffs.append(f"{s.path} is gone")
            continue
        st = p.stat()
        if st.st_size != s.size:
            diffs.append(f"{s.path} changed size ({s.size} -> {st.st_size} bytes)")
        elif st.st_mtime_ns != s.mtime_ns and scan_source(p, "replace").sha256 != s.sha256:
            diffs.append(f"{s.path} changed content (sha256 {s.sha256[:12]}...)")
    return diffs


def _preflight(job: _Job, store: Store, grow: bool) -> Engine | None:
    """Check a store about to be resumed, writing nothing; the merge engine when merging will
    need it (built now, since building it is what checks words and pair counts)."""
    params = job.params
    run = store.run_row()
    result_check(store, params.special_tokens)
    if run["phase"] == "counting":
        if store.sql("SELECT count(*) FROM merges").scalar():
            raise StoreError(f"{store.path}: the store is inconsistent (counting, but it holds merges); "
                             "start over with --restart")
        return None
    if run["phase"] == "merging" or grow:
        # a resume reads the words back and checks them: say so, it can take seconds
        job.emit(stage="loading", phase="merging", total=params.num_merges,
                 done=store.sql("SELECT count(*) FROM merges").scalar(),
                 words=store.sql("SELECT count(*) FROM words").scalar())
        return _load_engine(store, params, job.engine)
    return None


def _load_engine(store: Store, params: RunParams, engine: str = "auto") -> Engine:
    """Rebuild the merge engine from the store and check the store is consistent."""
    n_special = len(params.special_tokens)
    vocab = store.load_vocab()
    merges = store.load_merges()
    first = n_special + 256
    result_check(store, params.special_tokens, vocab, merges)
    token_bytes = [b if kind != "special" else None for _, b, kind in vocab]
    # the merges logged after the last full checkpoint: the words' tokens and pair counts are older
    # None: a finished run's store, whose words are read as their bytes (see KEEP_WORD_TOKENS)
    state = store.state_merges()
    if (state is None and store.pairs_merges() is None
            and store.sql("SELECT EXISTS (SELECT 1 FROM pair_counts)").scalar()):
        raise StoreError(f"{store.path}: the store is inconsistent (pair counts in a finished run's store "
                         "that kept none); start over with --restart")
    if state is not None and not 0 <= state <= len(merges):
        raise StoreError(f"{store.path}: the store is inconsistent (its words reflect {state} merges of "
                         f"{len(merges)}); start over with --restart")
    replay = [(left, right, token) for _rank, left, right, token, _count in merges[state or 0:]]
    # packed: no Python tuple per word
    rows = store.load_word_rows(packed=uses_native(engine), tokens=state is not None)
    try:
        merger = new_engine(rows, token_bytes, n_special, first, len(merges), engine,
                            min_frequency=params.min_frequency, max_token_length=params.max_token_length,
                            replay=replay)
    except (TypeError, ValueError, OverflowError) as exc:  # a count or blob of the wrong type or sign
        raise StoreError(f"{store.path}: the store's words are damaged ({exc}); start over with --restart") from None
    if merger.bad_word >= 0:
        word = store.sql("SELECT id FROM words ORDER BY id LIMIT 1 OFFSET ?", (merger.bad_word,)).scalar()
        raise StoreError(f"{store.path}: the store is inconsistent (word {word} does not "
                         "spell its bytes); start over with --restart")
    del rows
    if state is None and not merger.rewrite_pairs:  # a finished run kept at most its top pairs (no merge to replay)
        merger.forget_stored_pairs()
    # Why a digest: SQLite fingerprints pair_counts in one scan, instead of ~1M rows into Python.
    # After a replay the store's pair counts are the words' before it, which the engine no longer
    # holds: they are not checked, and the next checkpoint replaces them all (rewrite_pairs).
    if not merger.rewrite_pairs and merger.pair_digest() != store.pair_counts_digest():
        raise StoreError(f"{store.path}: the store is inconsistent (pair counts do not match the words); "
                         "start over with --restart")
    return merger


def check_words(store: Store) -> str:
    """``bpe-store db check --deep``'s words check: the words rebuilt into a merge engine as a resume
    does (every word's tokens spell its bytes under the merges; the pair counts are the words');
    StoreError saying what is wrong. Reads every word: seconds on a big store."""
    run = store.run_row()
    if run["phase"] == "counting":
        return "counting: words are checked against pairs once merging starts"
    _load_engine(store, store.params())
    n = store.sql("SELECT coalesce(max(id), 0) FROM words").scalar()
    return f"{n} words spell their bytes under the merges; the pair counts are theirs"


@contextlib.contextmanager
def _session(job: _Job) -> Iterator[None]:
    """Steps 3-6 as one session in the store's history (who trained, when, how it ended); the
    store is closed at the end, whatever happens."""
    store, session = job.store, None
    try:
        session = sessions.begin(store)
        job.elapsed0 = store.elapsed()
        # the store's own value (a resume that did not give one; NULL = no limit in older stores)
        job.params = dataclasses.replace(job.params, max_pretoken_bytes=store.params().max_pretoken_bytes)
        yield
        job.writes.wait()
        sessions.end(store, session)
    except BaseException as exc:
        job.writes.close()  # a write still in flight commits or fails before the session is closed
        sessions.end(store, session, exc)
        raise
    finally:
        job.writes.close()
        store.close()


def _count(job: _Job) -> None:
    """3. count: every work unit not yet counted; flush counts + unit marks in one transaction.
    A stream (stdin, an iterable) is counted last, committing its position with each flush.
    Ends by checking something was counted at all."""
    sources = job.store.sources()
    chunks = job.store.chunks()
    total = sum(c.end - c.start for c in chunks)
    done = sum(c.end - c.start for c in chunks if c.counted)
    todo = [c for c in chunks if not c.counted and c.kind != "stream"]
    streams = [c for c in chunks if not c.counted and c.kind == "stream"]
    job.emit(stage="counting", done=done, total=total)
    if todo:
        with _heartbeat(job):
            results, buffer, status = _count_map(job, sources, todo)
            _count_reduce(job, results, buffer, status, {c.id: c.end - c.start for c in todo}, done, total)
        release_chunk_memory()  # the chunk buffers kept for reuse: merging does not need them
    for chunk in streams:
        if job.stream is None:  # pragma: no cover - _same_inputs refuses a store whose stream is not given
            raise InputError(f"{job.store.path} was counting a stream; give it again to resume")
        job.writes.wait()
        _count_stream(job, job.stream, chunk)
    if not job.fresh_words:  # else the flush being written holds words
        job.writes.wait()
        _check_something_counted(job.store, job.params)


@contextlib.contextmanager
def _heartbeat(job: _Job, every_s: float = HEARTBEAT_S) -> Iterator[None]:
    """While the block runs, the last counting event again whenever none came for ``every_s``.

    Why: counting reports a unit once it is counted, and a unit takes as long as its size (a 1 GiB
    ``--chunk-size`` is seconds per unit, with no event in between); the repeated event says the
    run is alive and keeps its elapsed time and ETA moving. From a thread of its own, under the
    job's emit lock, so the progress callable still sees one event at a time."""
    if job.progress is None:
        yield
        return
    quit_ = threading.Event()

    def beat() -> None:
        while not quit_.wait(every_s / 4):
            with job._emit_lock:
                at, event = job._last_event
                if quit_.is_set() or event.get("stage") != "counting" or time.monotonic() - at < every_s:
                    continue
                try:
                    job.progress(dict(event))
                except BaseException as exc:  # raised by the next emit, on the main thread
                    job._emit_error = exc
                    return
                job._last_event = (time.monotonic(), event)

    thread = threading.Thread(target=beat, name="bpe_store-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        quit_.set()
        thread.join()


def _count_map(job: _Job, sources: Sequence[Source], todo: Sequence) -> tuple[Iterable, FlushBuffer,
                                                                              Callable[[], dict]]:
    """The map step over the work units ``todo`` of input files: ``(unit id, counts, pre-tokens)``
    as units are counted (counts None: the counting thread added them to the buffer itself), the
    buffer the reduce step adds them to, and the extra fields of counting events.
    ``count_engine="ray"`` counts them as Ray tasks."""
    params, workers = job.params, job.workers
    # plain text cut into byte ranges: the map step reads its range itself (count_chunk*_task);
    # other kinds go through bpe_store.counting.inputs' readers (count_units_threaded, count_unit_task)
    plain = all(c.kind == "range" and sources[c.source_id].format == "text" for c in todo)
    if plain:
        tasks = [(c.id, sources[c.source_id].path, c.start, c.end, params.special_tokens, params.pattern,
                  params.invalid_utf8, params.max_pretoken_bytes) for c in todo]
    else:
        units = [(c.id, unit_of(sources[c.source_id], c.kind, c.start, c.end, c.part)) for c in todo]
        tasks = [(cid, u, params.special_tokens, params.pattern, params.invalid_utf8, job.chunk_size,
                  params.max_pretoken_bytes) for cid, u in units]
    # native: chunk counts stay in C++ (ChunkCounts summed into a WordCounter), so Python objects
    # are made only at a flush and the GIL is free while threads count
    native = native_counts(params.pattern)
    task = (count_chunk_native_task if native else count_chunk_task) if plain else count_unit_task
    if job.count_engine == "ray":
        from ..counting.ray_count import RayCounter

        # a counting tree (ray_count): node counters count and sum the units, the buffer's take
        # brings their sums in; its events add the units in flight, the workers and the nodes
        results = RayCounter(tasks, job.ray_address, workers)
        return results, results.buffer, results.status
    buffer = FlushBuffer(native)
    if native and not plain:
        return count_units_threaded(units, workers, params.special_tokens, params.pattern, params.invalid_utf8,
                                    job.chunk_size, params.max_pretoken_bytes), buffer, dict
    if workers > 1 and len(tasks) > 1:
        # Both map steps release the GIL while they scan: the native counter, and `regex` with
        # concurrent=True (pretokenize.count_words). So threads give the parallelism of processes
        # without pickling counts back or spawning interpreters, which hung when run from
        # `python -` (spawned workers re-ran __main__, crashed, were respawned) and cost
        # ~1 s of imports each (bench/RESULTS-count.md). Ctrl-C reaches only this thread, which
        # decides how to stop.
        return count_chunks_threaded(tasks, min(workers, len(tasks)), task, into=buffer), buffer, dict
    return map(task, tasks), buffer, dict


def _count_reduce(job: _Job, results: Iterable, buffer: FlushBuffer, status: Callable[[], dict],
                  size_of: dict[int, int], done: int, total: int) -> None:
    """The reduce step: the map step's ``results`` go into ``buffer`` (if their counting thread did
    not add them itself), flushed with the marks of the units it holds every
    ``count_flush_seconds``, on a stop request and at the end; the last flush is left in flight."""
    # count_flush_seconds=0 flushes every unit before the next, in line (tests kill between
    # units), except with Ray, whose driver must never stop feeding the cluster
    ray = job.count_engine == "ray"
    writer = _CountWriter(job, total, done, background=job.count_flush_seconds > 0 or ray, by_bytes=not ray)
    try:
        last_flush = time.monotonic()
        for cid, counts, n in results:
            if counts is not None:
                buffer.add(cid, counts, n)
            done += size_of[cid] if n >= 0 else -size_of[cid]  # -1: a Ray unit lost, counted again
            job.emit(stage="counting", done=done, total=total, **status())
            writer.poll()
            stopping = job.stopping()
            if buffer and writer.due(last_flush, done) or stopping:
                writer.flush(*buffer.take(), done, final=False, wait=stopping)
                last_flush = time.monotonic()
                if stopping:
                    raise Interrupted(f"stopped while counting; {job.store.path} keeps the counted chunks")
        if buffer:
            writer.flush(*buffer.take(), done, final=True, wait=False)
    finally:
        close = getattr(results, "close", None)
        if close is not None:  # threads: cancel queued chunks, wait for the running ones
            close()


class _CountWriter:
    """Writes counting flushes, each one transaction, and reports them.

    A flush is written on the store's writer thread (``_Writes``) while the reduce step keeps
    adding results into a fresh buffer: a synchronous flush (seconds for ~1 M words, much of it
    waiting on the disk: the WAL, fsync, copying it back) left every counting thread, or with Ray
    every worker of the cluster, idle once its units in flight were done (bench/RESULTS-ray.md,
    bench/RESULTS-scale.md). At most one flush is in flight (two counters in memory); each is
    still one transaction, and its checkpoint event comes once it has committed. A stop request
    waits; the last flush is left in flight for ``_pairs`` and ``_merge`` (see ``_Writes``).
    """

    def __init__(self, job: _Job, total: int, done: int = 0, background: bool = True, by_bytes: bool = True):
        self.job, self.total, self.background, self.by_bytes = job, total, background, by_bytes
        self.write_s = 0.0  # how long the last flush took
        self.flushed_at = done  # bytes counted when the last flush began (or this session began)

    def due(self, last_flush: float, done: int) -> bool:
        """Whether to flush now (never while one is in flight): ``count_flush_seconds`` after the
        last one and no sooner than twice that flush's own time, or once the bytes counted since
        it reach ``COUNT_FLUSH_LOSS`` of the bytes still to count (at least ``COUNT_FLUSH_MIN_BYTES``).

        Why the flush's own time: a flush costs about the words it touches, a growing share of a
        growing table (OpenWebText: ~1.5 M of 7 M); waiting twice its time keeps the writer busy
        at most half the time, so it never falls behind and counting never waits for it.

        Why the bytes: a kill loses what no committed flush holds (the flush being written and
        what was counted since), and its resume counts that again. By time alone that was ~10-30 s
        of both cores whenever the kill came, against less and less work left: at half of a 12 GB
        corpus, 0.5-1.3 GB recounted of 6 GB left. Bounded by the work left, a kill costs at most
        about two flushes' bytes, ~10 % of the counting left (the cap binds late in counting, where
        it matters; a corpus under ``COUNT_FLUSH_MIN_BYTES`` never reaches it)."""
        if self.job.count_flush_seconds == 0:
            return True
        if self.job.writes.busy():
            return False
        # Why no bytes rule on Ray (by_bytes False): the driver's cost is per distinct word of a flush window, so
        # windows of fixed bytes would make a faster cluster flush more often, until the driver
        # is its cap again; by time, a kill loses about two windows of the cluster's time
        if (self.by_bytes
                and done - self.flushed_at >= max(COUNT_FLUSH_MIN_BYTES, COUNT_FLUSH_LOSS * (self.total - done))):
            return True
        wait = max(self.job.count_flush_seconds, 2 * self.write_s)
        return time.monotonic() - last_flush >= wait

    def write(self, delta: Counter[bytes] | WordCounter, marks: list[tuple[int, int]]) -> None:
        t0 = time.monotonic()
        self.job.store.add_word_counts(delta, marks, self.job.elapsed())
        self.write_s = time.monotonic() - t0

    def poll(self) -> None:
        """Report the flush in flight if it has committed meanwhile."""
        self.job.writes.poll()

    def flush(self, delta: Counter[bytes] | WordCounter, marks: list[tuple[int, int]], done: int, final: bool,
              wait: bool) -> None:
        """Write ``delta`` and ``marks``: in the background unless ``wait`` (or there is no background)."""
        job = self.job
        job.writes.wait()
        self.flushed_at = done
        job.emit(stage="writing", phase="counting", done=done, total=self.total, words=len(delta), final=final)
        if final and hasattr(delta, "row_stream") and job.store.words_are_next_flush():
            job.fresh_words = delta  # the store's words once this commits: the engine starts from it

        def report() -> None:
            job.emit(stage="checkpoint", phase="counting", done=done, total=self.total, **job.store.wal)

        job.writes.submit(self.write, delta, marks, then=report)
        if wait or not self.background:
            job.writes.wait()


def _check_something_counted(store: Store, params: RunParams) -> None:
    """Refuse to go on when counting found no pre-token at all (the pattern matches none of the
    text, or there is no text outside the special tokens): training would end with 0 merges.

    The store stays as counting left it (phase counting, every chunk counted, no words), so the
    same command fails the same way at once, without counting again; another pattern needs
    ``--restart``.
    """
    if store.sql("SELECT EXISTS (SELECT 1 FROM words)").scalar():
        return
    raise InputError(
        f"nothing to train on: the pattern {describe_pattern(params.pattern)} matches none of the "
        "inputs' text outside special tokens (0 pre-tokens counted); give another --pattern "
        "with --restart")


def _count_stream(job: _Job, stream: Stream, chunk) -> None:
    """Count a stream from where the store says it stands (``inputs.Stream.blocks`` checks and
    skips what was counted); each flush commits the counts with the stream's new position, and
    the last one marks the stream counted."""
    store, params, flush_seconds = job.store, job.params, job.count_flush_seconds
    source = store.sources()[chunk.source_id]
    native = native_counts(params.pattern)
    blocks = stream.blocks(source, params.special_tokens, params.pattern, params.invalid_utf8, job.chunk_size,
                           params.max_pretoken_bytes)
    # read in a thread, with ticks while the stream pauses: the counts so far are still committed
    # every `flush_seconds`, and a stop request is heard while a pipe is silent
    results = count_blocks_ordered(ticking(blocks, min(flush_seconds, 1.0) or 0.05), job.workers,
                                   params.special_tokens, params.pattern, documents=stream.format != "text",
                                   max_pretoken_bytes=params.max_pretoken_bytes)
    at = (source.size, source.documents or 0, source.sha256)
    delta = new_word_counts(native)
    pretokens = 0

    def flush(finished: bool) -> None:
        store.add_word_counts(delta, [], job.elapsed(), StreamMark(chunk.source_id, chunk.id, at[0], at[1], at[2],
                                                                   pretokens, finished))
        job.emit(stage="checkpoint", phase="counting", done=at[0], total=None, documents=at[1])

    try:
        last_flush = time.monotonic()
        flushed = at
        for pos, counts, n in results:
            if pos is not None:
                add_counts(delta, counts)
                pretokens += n
                at = (pos.bytes, pos.documents, pos.sha256)
                job.emit(stage="counting", done=pos.bytes, total=None, documents=pos.documents)
            stopping = job.stopping()
            if (time.monotonic() - last_flush >= flush_seconds and at != flushed) or stopping:
                flush(False)
                delta, pretokens, last_flush, flushed = new_word_counts(native), 0, time.monotonic(), at
                if job.stopping():
                    raise Interrupted(
                        f"stopped while counting {stream.name}; {store.path} holds its first {at[1]} documents "
                        f"({at[0]} bytes): give the same stream again to resume from there")
        flush(True)
    finally:
        results.close()


def _byte_vocab(n_specials: int) -> list[bytes | None]:
    """``token_bytes`` before any merge: None for each special token, then the 256 bytes."""
    return [None] * n_specials + [bytes([b]) for b in range(256)]


def _pairs(job: _Job) -> Engine:
    """4. pairs: count adjacent pairs of the counted words and move the run to merging.

    Returns the engine it built, so merging starts without reading the words a second time.
    """
    store, params = job.store, job.params
    job.emit(stage="pairs")
    n = len(params.special_tokens)
    # Why the words in memory: when the last flush writes every word (the first flush into an
    # empty store), its counter is what the store will hold, so the engine is built from it while
    # the flush is still being written (enwiki-100M: the flush's ~0.5 s leaves the critical path);
    # after several flushes the store's word map (``take_fresh_word_rows``) once they committed,
    # without reading ~1M rows back; otherwise (a resume) the store is read.
    rows, job.fresh_words = job.fresh_words, None
    if rows is None:
        job.writes.wait()
        rows = store.take_fresh_word_rows()
    if rows is None:
        rows = store.load_word_rows(packed=uses_native(job.engine))
    try:
        merger = new_engine(rows, _byte_vocab(n), n, n + 256, 0, job.engine, min_frequency=params.min_frequency,
                            max_token_length=params.max_token_length)
    except (TypeError, ValueError, OverflowError) as exc:  # a count or blob of the wrong type or sign
        raise StoreError(f"{store.path}: the store's words are damaged ({exc}); start over with --restart") from None
    del rows  # the engine holds its own copy; free ~1M tuples before the pair rows are made
    release_free_memory()  # what counting freed would otherwise stay resident through merging
    # written after the last flush, before the first merge checkpoint; the counts are taken now,
    # before merging changes them
    job.writes.submit(store.start_merging, merger.pair_counts(), job.elapsed())
    return merger


def _merge(job: _Job, engine: Engine | str) -> None:
    """5. merge: learn merges in batches; each batch ends in one checkpoint transaction.

    ``engine``: the engine ``_pairs`` or the resume checks built, or which kind to rebuild from
    the store. A batch ends after ``checkpoint_seconds`` of merging, after ``checkpoint_merges``
    merges if that is not None, or on a stop request.
    """
    store, target = job.store, job.params.num_merges
    if job.writes.idle():  # else counting just ended: merging starts while its writes finish
        run = store.run_row()
        done_now = store.sql("SELECT count(*) FROM merges").scalar()
        if run["phase"] == "done" and (run["stop_reason"] == "no_pairs" or done_now >= target):
            return  # a finished store: nothing to do (a larger vocab size set phase back to merging)
    merger = _load_engine(store, job.params, engine) if isinstance(engine, str) else engine
    while True:
        merges, stopping = _merge_batch(job, merger)
        if _checkpoint(job, merger, merges) is not None:
            return
        if stopping:
            raise Interrupted(f"stopped after {merger.next_rank} merges; {store.path} holds them")


def _merge_batch(job: _Job, merger: Engine) -> tuple[list, bool]:
    """One batch: sub-steps of at most _SUB_STEP merges until the batch size, the batch time or a
    stop request; sub-steps keep progress lively and let Ctrl-C end a batch early. Every
    ``MERGE_LOG_SECONDS`` the merges so far are logged (``_log_merges``). Returns the batch's
    merges not logged yet and whether a stop was requested."""
    batch = sys.maxsize if job.checkpoint_merges is None else job.checkpoint_merges
    target, tb = job.params.num_merges, merger.token_bytes
    batch_end = time.monotonic() + job.checkpoint_seconds
    log_at = time.monotonic() + MERGE_LOG_SECONDS
    merges: list = []
    logged = 0  # merges[:logged] are in the store
    stopping = False
    while True:
        remaining = min(target - merger.next_rank, batch - len(merges))
        if remaining <= 0 or merger.exhausted:
            break
        sub = merger.step(min(remaining, _SUB_STEP))
        merges.extend(sub)
        if sub:
            last = sub[-1]
            job.emit(stage="merging", done=merger.next_rank, total=target,
                     merge=[tb[last.left].decode("utf-8", "replace"),
                            tb[last.right].decode("utf-8", "replace"), last.count])
        stopping = job.stopping()
        clock = time.monotonic()
        if stopping or clock >= batch_end:
            break
        if clock >= log_at and len(merges) > logged and target - merger.next_rank > 0 and not merger.exhausted:
            _log_merges(job, merger, merges[logged:])
            logged = len(merges)
            log_at = time.monotonic() + MERGE_LOG_SECONDS
    return merges[logged:], stopping


def _merge_rows(merger: Engine, merges: list) -> tuple[list[tuple[int, int, int, int, int]], list[tuple[int, bytes]]]:
    """The ``merges`` and ``vocab`` rows of ``merges``."""
    first, tb = merger.first_merge_id, merger.token_bytes
    return ([(m.rank, m.left, m.right, m.token, m.count) for m in merges],
            [(first + m.rank, tb[m.left] + tb[m.right]) for m in merges])


def _log_merges(job: _Job, merger: Engine, merges: list) -> None:
    """Log ``merges`` in the store: ONE small transaction with their rows and the progress, no word
    or pair rows (``Store.write_merge_rows(log_only=True)``)."""
    job.writes.wait()  # the last counting flush and the start of merging commit before any merge
    merge_rows, vocab_rows = _merge_rows(merger, merges)
    write_s = job.store.write_merge_rows(merge_rows, vocab_rows, (), (), merges_done=merger.next_rank,
                                         elapsed_s=job.elapsed(), done_reason=None, log_only=True)
    job.emit(stage="merge_log", phase="merging", done=merger.next_rank, total=job.params.num_merges,
             write_s=write_s)


def _checkpoint(job: _Job, merger: Engine, merges: list) -> str | None:
    """Write a batch's checkpoint: ONE transaction holding its merges, their vocabulary entries,
    the progress and, while merging goes on, the changed words and pair counts; the last one
    drops the merging's working state instead (``Store.write_merge_rows(drop_state=True)``).
    Returns why merging is over (the run's stop reason), or None when it goes on."""
    target = job.params.num_merges
    job.writes.wait()  # the last counting flush and the start of merging commit before any merge
    if merger.next_rank >= target:
        reason = "vocab_size"
    elif merger.exhausted:
        reason = "no_pairs"
    else:
        reason = None
    final = reason is not None
    merge_rows, vocab_rows = _merge_rows(merger, merges)
    if final:
        # Why no pair rows and few word rows: a finished run keeps its result (merges, vocab)
        # and its inputs (words, counts), not the merging's working state, whose writing was 5 s
        # of a 12 GB run's ~80 s (7.0 M words' tokens, 3.8 M pair counts); see KEEP_WORD_TOKENS
        # and KEEP_PAIR_COUNTS for the few it keeps.
        merger.finish()  # free what only merging needs before SQLite's cache and the result's rows
        clear_pairs, deletes, updates = False, (), ()
        word_rows = merger.top_word_rows(KEEP_WORD_TOKENS)
        inserts = merger.top_pair_rows(KEEP_PAIR_COUNTS)
    else:
        clear_pairs = merger.rewrite_pairs  # read before the take, which resets it
        word_rows, deletes, inserts, updates = merger.take_checkpoint_rows()
    job.emit(stage="writing", phase="merging", done=merger.next_rank, total=target,
             words=len(word_rows), final=final)
    write_s = job.store.write_merge_rows(
        merge_rows, vocab_rows, word_rows, deletes, inserts, updates,
        merges_done=merger.next_rank, elapsed_s=job.elapsed(), done_reason=reason, clear_pairs=clear_pairs,
        drop_state=final,
    )
    job.emit(stage="checkpoint", phase="merging", done=merger.next_rank, total=target,
             words=len(word_rows), pairs=len(deletes) + len(inserts) + len(updates), write_s=write_s,
             **job.store.wal)  # wal_bytes, wal_blocked: a reader keeping the WAL from being emptied
    return reason


def train_bpe(
    input_path: str | os.PathLike,
    vocab_size: int,
    special_tokens: list[str],
    **kwargs,
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """The CS336 API: ``(vocab {id: bytes}, merges [(left, right)])``.

    ``db=path`` keeps the store (and resumes from it); without it a temporary store is used.
    Other keyword arguments are those of ``train``.
    """
    path_argument(input_path, "input_path")
    db = kwargs.pop("db", None)
    if db is not None:
        r = train([input_path], db, vocab_size, special_tokens, **kwargs)
        return r.vocab, r.merges
    where = Path(tempfile.gettempdir())
    remove_stale(where, "bpe_store-train-")  # those of killed train_bpe calls
    lock_fd, tmp = new_dir(where, "bpe_store-train-")
    try:
        kwargs.setdefault("durable", False)  # deleted below: nothing to keep through a power loss
        r = train([input_path], tmp / "train.db", vocab_size, special_tokens, **kwargs)
        return r.vocab, r.merges
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(lock_fd)


def train_from_iterator(
    iterable: Iterable,
    db: str | os.PathLike,
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    *,
    text_column: str = DEFAULT_TEXT_FIELD,
    **kwargs,
) -> TrainResult:
    """``train`` on documents from a Python iterable: strings (or UTF-8 bytes), mappings holding
    ``text_column`` (rows), or an HF ``datasets.Dataset`` / ``IterableDataset`` and its column.

    Each document is a hard boundary, as in a jsonl file. The counts are committed as the
    iterable is read; a run killed while counting resumes when given the same documents again:
    the ones counted are read, checked against the store's SHA-256 of them and skipped (other
    documents are refused with ``ResumeMismatch``). Once counting is over, the iterable is not
    read at all. Other keyword arguments are those of ``train``.
    """
    if isinstance(iterable, (str, bytes)) or not any(hasattr(iterable, a) for a in ("__iter__", "__getitem__", "iter")):
        raise ArgumentTypeError(f"train_from_iterator takes an iterable of documents, not {type(iterable).__name__}")
    return train(Stream.of_iterable(iterable, text_column), db, vocab_size, special_tokens, **kwargs)
