"""Training: the resumable recipe that turns corpus files into merges inside a store.

1. check   — parameters and inputs; on any problem, raise before anything is written
2. plan    — fingerprint the inputs, cut them into chunks, create the store (one transaction)
3. count   — pre-tokenize and count words per chunk, in parallel; each flush is one transaction
             that adds the counts and marks its chunks counted, so no chunk is counted twice
4. pairs   — count adjacent pairs once; the run moves to the merging phase
5. merge   — batches of merges; each batch is ONE transaction (merges, vocab, changed words,
             changed pair counts, progress): the checkpoint
6. done    — the vocabulary size is reached, or no pair is left

Running the same command again resumes from the last transaction. The stage names are the
``stage`` of progress events, and the store's ``run.phase`` is counting / merging / done.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import regex
from sqlalchemy.exc import DBAPIError

from . import __version__, sessions
from .count import (DEFAULT_CHUNK_SIZE, add_counts, count_chunk_task, count_chunks_threaded, native_counts,
                    plan_chunks, scan_source)
from .errors import BpeStoreError, InputError, ResumeMismatch, StoreError
from .merge import MergeEngine, pair_counts_of
from .pretokenize import GPT2_PATTERN
from .store import RunParams, Source, Store, _sqlite_error, pack_tokens, unpack_tokens

#: A checkpoint is written after this many merges or this many seconds of merging, whichever
#: comes first. Small enough that a kill loses little; large enough that writing stays cheap.
DEFAULT_CHECKPOINT_MERGES = 2000
DEFAULT_CHECKPOINT_SECONDS = 30.0
#: Counting flushes its counts to the store at most this often (and at the end).
DEFAULT_COUNT_FLUSH_SECONDS = 10.0
#: Below this many input bytes, counting runs in this process (starting workers costs more).
_IN_PROCESS_BYTES = 4 << 20
#: Merges per engine call inside a batch (see ``_merge``).
_SUB_STEP = 64

Progress = Callable[[dict], None]


class Interrupted(BpeStoreError):
    """Training stopped on request after writing a checkpoint."""

    exit_code = 130


@dataclass
class TrainResult:
    """What a finished (or stopped) run holds: CS336 ``vocab`` and ``merges``, plus the counts."""

    vocab: dict[int, bytes]
    merges: list[tuple[bytes, bytes]]
    merge_counts: list[int]
    phase: str
    stop_reason: str | None


def check_params(vocab_size: int, special_tokens: Sequence[str], pattern: str, invalid_utf8: str) -> RunParams:
    """Validate the parameters that define a run; raise InputError naming the bad one."""
    specials = list(special_tokens)
    for s in specials:
        if not isinstance(s, str) or s == "":
            raise InputError("special tokens must be non-empty strings")
    dup = [s for s, n in Counter(specials).items() if n > 1]
    if dup:
        raise InputError(f"special token {dup[0]!r} is given more than once")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise InputError(f"vocab size must be an integer, not {vocab_size!r}")
    least = 256 + len(specials)
    if vocab_size < least:
        raise InputError(f"vocab size {vocab_size} is too small: it must be at least 256 bytes + "
                         f"{len(specials)} special tokens = {least}")
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise InputError(f"the pre-tokenization pattern does not compile: {exc}") from None
    if invalid_utf8 not in ("strict", "replace"):
        raise InputError(f"invalid_utf8 must be 'strict' or 'replace', not {invalid_utf8!r}")
    return RunParams(pattern, tuple(specials), vocab_size, invalid_utf8)


def _emit(progress: Progress | None, **event) -> None:
    if progress is not None:
        progress(event)


def _same_inputs(store: Store, paths: Sequence[Path], params: RunParams) -> None:
    """Refuse a resume whose parameters or inputs differ from the store's, saying what differs."""
    old = store.params()
    diffs = []
    if old.pattern != params.pattern:
        diffs.append(f"pattern {old.pattern!r} -> {params.pattern!r}")
    if old.special_tokens != params.special_tokens:
        diffs.append(f"special tokens {list(old.special_tokens)} -> {list(params.special_tokens)}")
    if old.invalid_utf8 != params.invalid_utf8:
        diffs.append(f"invalid UTF-8 policy {old.invalid_utf8} -> {params.invalid_utf8}")
    sources = store.sources()
    given = [str(p.resolve()) for p in paths]
    if [s.path for s in sources] != given:
        diffs.append(f"inputs {[s.path for s in sources]} -> {given}")
    else:
        for s in sources:
            p = Path(s.path)
            if not p.is_file():
                diffs.append(f"{s.path} is gone")
                continue
            st = p.stat()
            if st.st_size != s.size:
                diffs.append(f"{s.path} changed size ({s.size} -> {st.st_size} bytes)")
            elif st.st_mtime_ns != s.mtime_ns and scan_source(p, "replace").sha256 != s.sha256:
                diffs.append(f"{s.path} changed content (sha256 {s.sha256[:12]}...)")
    if diffs:
        raise ResumeMismatch(f"{store.path} was started with other parameters or inputs: "
                             + "; ".join(diffs) + ". Use the same command, or --restart to start over")
    merges_done = store.sql("SELECT count(*) FROM merges").scalar()
    if params.vocab_size < old.vocab_size:
        raise ResumeMismatch(
            f"{store.path} trains to vocab size {old.vocab_size}; a smaller one ({params.vocab_size}) "
            f"is a prefix of it: use `bpe-store export --vocab-size {params.vocab_size}` "
            "(or --restart to start over)")
    if params.vocab_size > old.vocab_size:
        store.set_vocab_size(params.vocab_size)  # continue to a larger vocabulary
    del merges_done


def train(*args, **kwargs) -> TrainResult:
    """Train (or resume training) a byte-level BPE into a store; see ``_train`` for the arguments.

    SQLite failures anywhere (corrupt file, full disk) surface as one-line ``StoreError``s.
    """
    try:
        return _train(*args, **kwargs)
    except DBAPIError as exc:
        db = kwargs.get("db", args[1] if len(args) > 1 else "store")
        raise _sqlite_error(Path(db), exc) from exc


def _train(
    inputs: Sequence[str | os.PathLike] | str | os.PathLike,
    db: str | os.PathLike,
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    *,
    pattern: str = GPT2_PATTERN,
    workers: int | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    checkpoint_merges: int = DEFAULT_CHECKPOINT_MERGES,
    checkpoint_seconds: float = DEFAULT_CHECKPOINT_SECONDS,
    count_flush_seconds: float = DEFAULT_COUNT_FLUSH_SECONDS,
    invalid_utf8: str = "strict",
    restart: bool = False,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> TrainResult:
    """Train (or resume training) a byte-level BPE into the store ``db``; see the module doc."""
    # 1. check
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = [Path(p) for p in inputs]
    if not paths:
        raise InputError("no input files given")
    params = check_params(vocab_size, special_tokens, pattern, invalid_utf8)
    workers = workers or os.cpu_count() or 1
    if workers < 1 or chunk_size < 1 or checkpoint_merges < 1 or checkpoint_seconds <= 0:
        raise InputError("workers, chunk size and checkpoint sizes must be positive")
    db = Path(db)
    session_start = time.monotonic()

    store: Store | None = None
    if db.exists() and db.stat().st_size > 0 and not db.is_dir():
        store = Store.open(db)
        try:
            if restart:
                for p in paths:
                    scan_source(p, invalid_utf8)
                store.close()
                store = None
                for suffix in ("", "-wal", "-shm"):
                    Path(str(db) + suffix).unlink(missing_ok=True)
            else:
                try:
                    store.run_row()
                except StoreError:
                    store.close()
                    raise
                _same_inputs(store, paths, params)
        except BaseException:
            if store is not None:
                store.close()
            raise
    if store is None:
        # 2. plan: everything is checked before the file is created
        sources: list[Source] = []
        for p in paths:
            _emit(progress, stage="plan", file=str(p))
            sources.append(scan_source(p, invalid_utf8))
        chunks = []
        for i, s in enumerate(sources):
            for start, end in plan_chunks(s.path, s.size, params.special_tokens, pattern, chunk_size):
                chunks.append((i, start, end))
        store = Store.create(db)
        try:
            store.init_run(params, sources, chunks, chunk_size, __version__)
        except BaseException:
            store.close()
            for suffix in ("", "-wal", "-shm"):
                Path(str(db) + suffix).unlink(missing_ok=True)
            raise

    session = None
    try:
        session = sessions.begin(store)  # the store's history: who trained, when, how it ended
        elapsed0 = store.elapsed()

        def elapsed() -> float:
            return elapsed0 + time.monotonic() - session_start

        phase = store.run_row()["phase"]
        if phase == "counting":
            _count(store, params, workers, count_flush_seconds, elapsed, progress, stop)
            _start_merging(store, params, elapsed, progress)
        _merge(store, params, checkpoint_merges, checkpoint_seconds, elapsed, progress, stop)
        result = read_result(store)
        sessions.end(store, session)
        return result
    except BaseException as exc:
        sessions.end(store, session, exc)
        raise
    finally:
        store.close()


def _count(store: Store, params: RunParams, workers: int, flush_seconds: float,
           elapsed: Callable[[], float], progress: Progress | None, stop: threading.Event | None) -> None:
    """3. count: every chunk not yet counted; flush counts + chunk marks in one transaction."""
    sources = store.sources()
    chunks = store.chunks()
    total = sum(c.end - c.start for c in chunks)
    done = sum(c.end - c.start for c in chunks if c.counted)
    todo = [c for c in chunks if not c.counted]
    tasks = [(c.id, sources[c.source_id].path, c.start, c.end, params.special_tokens, params.pattern,
              params.invalid_utf8) for c in todo]
    size_of = {c.id: c.end - c.start for c in todo}
    _emit(progress, stage="counting", done=done, total=total)
    if not tasks:
        return
    pool = None
    todo_bytes = sum(size_of.values())
    results: Iterable
    if workers > 1 and len(tasks) > 1 and native_counts(params.pattern):
        # native counting releases the GIL: threads scale like processes without pickling the
        # counts back, spawning interpreters or holding a copy of each chunk per process
        # (bench/RESULTS-count.md); Ctrl-C reaches only this thread, which decides how to stop
        results = count_chunks_threaded(tasks, min(workers, len(tasks)))
    elif workers > 1 and len(tasks) > 1 and todo_bytes >= _IN_PROCESS_BYTES:
        # the regex path holds the GIL, so it needs processes.
        # spawn, not fork: the parent holds a SQLite connection and maybe threads
        ctx = multiprocessing.get_context("spawn")
        # workers ignore Ctrl-C: the parent decides how to stop (finish a flush, or abort)
        pool = ctx.Pool(min(workers, len(tasks)), initializer=_ignore_sigint)
        results = pool.imap_unordered(count_chunk_task, tasks)
    else:
        results = map(count_chunk_task, tasks)
    try:
        delta: Counter[bytes] = Counter()
        marks: list[tuple[int, int]] = []
        last_flush = time.monotonic()
        for cid, counts, n in results:
            add_counts(delta, counts)
            marks.append((cid, n))
            done += size_of[cid]
            _emit(progress, stage="counting", done=done, total=total)
            if time.monotonic() - last_flush >= flush_seconds or (stop is not None and stop.is_set()):
                store.add_word_counts(delta.items(), marks, elapsed())
                delta, marks, last_flush = Counter(), [], time.monotonic()
                _emit(progress, stage="checkpoint", phase="counting", done=done, total=total)
                if stop is not None and stop.is_set():
                    raise Interrupted(f"stopped while counting; {store.path} keeps the counted chunks")
        if marks:
            store.add_word_counts(delta.items(), marks, elapsed())
            _emit(progress, stage="checkpoint", phase="counting", done=done, total=total)
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()
        close = getattr(results, "close", None)
        if close is not None:  # threads: cancel queued chunks, wait for the running ones
            close()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _initial_tokens(wbytes: bytes, n_specials: int) -> list[int]:
    return [n_specials + b for b in wbytes]


def _start_merging(store: Store, params: RunParams, elapsed: Callable[[], float], progress: Progress | None) -> None:
    """4. pairs: count adjacent pairs of the counted words and move the run to merging."""
    _emit(progress, stage="pairs")
    _, wbytes, counts, _ = store.load_words()
    n = len(params.special_tokens)
    pairs = pair_counts_of([_initial_tokens(w, n) for w in wbytes], counts)
    store.start_merging(pairs, elapsed())


def _load_engine(store: Store, params: RunParams) -> tuple[MergeEngine, list[int]]:
    """Rebuild the merge engine from the store and check the store is consistent."""
    n_special = len(params.special_tokens)
    ids, wbytes, counts, blobs = store.load_words()
    words = [unpack_tokens(t) if t is not None else _initial_tokens(w, n_special)
             for w, t in zip(wbytes, blobs)]
    vocab = store.load_vocab()
    merges = store.load_merges()
    first = n_special + 256
    if [r[0] for r in merges] != list(range(len(merges))) or len(vocab) != first + len(merges):
        raise StoreError(f"{store.path}: the store is inconsistent (merges and vocab disagree); "
                         "start over with --restart")
    token_bytes = {i: b for i, b, kind in vocab if kind != "special"}
    engine = MergeEngine(words, counts, token_bytes, first, next_rank=len(merges))
    for (i, w) in enumerate(words):
        if b"".join(token_bytes[t] for t in w) != wbytes[i]:
            raise StoreError(f"{store.path}: the store is inconsistent (word {ids[i]} does not spell its "
                             "bytes); start over with --restart")
    if engine.pairs != store.load_pair_counts():
        raise StoreError(f"{store.path}: the store is inconsistent (pair counts do not match the words); "
                         "start over with --restart")
    return engine, ids


def _merge(store: Store, params: RunParams, batch: int, seconds: float, elapsed: Callable[[], float],
           progress: Progress | None, stop: threading.Event | None) -> None:
    """5. merge: learn merges in batches; each batch ends in one checkpoint transaction."""
    run = store.run_row()
    target = params.num_merges
    done_now = store.sql("SELECT count(*) FROM merges").scalar()
    if run["phase"] == "done" and done_now >= min(target, done_now) and (
            run["stop_reason"] == "no_pairs" or done_now >= target):
        return
    engine, ids = _load_engine(store, params)
    tb = engine.token_bytes
    stopping = False
    while True:
        # one batch = sub-steps of at most _SUB_STEP merges until the batch size, the batch time
        # or a stop request; sub-steps keep progress lively and let Ctrl-C end a batch early.
        batch_end = time.monotonic() + seconds
        merges = []
        while True:
            remaining = min(target - engine.next_rank, batch - len(merges))
            if remaining <= 0 or engine.exhausted:
                break
            sub = engine.step(min(remaining, _SUB_STEP))
            merges.extend(sub)
            if sub:
                last = sub[-1]
                _emit(progress, stage="merging", done=engine.next_rank, total=target,
                      merge=[tb[last.left].decode("utf-8", "replace"),
                             tb[last.right].decode("utf-8", "replace"), last.count])
            stopping = stop is not None and stop.is_set()
            if stopping or time.monotonic() >= batch_end:
                break
        if engine.next_rank >= target:
            reason = "vocab_size"
        elif engine.exhausted:
            reason = "no_pairs"
        else:
            reason = None
        words, pairs = engine.take_changes()
        first = engine.first_merge_id
        write_s = store.write_merge_checkpoint(
            [(m.rank, m.left, m.right, m.token, m.count) for m in merges],
            [(first + m.rank, tb[m.left] + tb[m.right]) for m in merges],
            [(ids[w], pack_tokens(t)) for w, t in words.items()],
            [(a, b, c) for (a, b), c in pairs.items()],
            merges_done=engine.next_rank, elapsed_s=elapsed(), done_reason=reason,
        )
        _emit(progress, stage="checkpoint", phase="merging", done=engine.next_rank, total=target,
              words=len(words), pairs=len(pairs), write_s=write_s)
        if reason is not None:
            return
        if stopping:
            raise Interrupted(f"stopped after {engine.next_rank} merges; {store.path} holds them")


def read_result(store: Store, vocab_size: int | None = None) -> TrainResult:
    """The CS336 ``(vocab, merges)`` in a store, optionally for a smaller ``vocab_size`` (a prefix)."""
    run = store.run_row()
    n_special = len(json.loads(run["special_tokens"]))
    vocab_rows = store.load_vocab()
    merges = store.load_merges()
    if vocab_size is not None:
        keep = max(vocab_size - 256 - n_special, 0)
        merges = merges[:keep]
        vocab_rows = vocab_rows[: n_special + 256 + len(merges)]
    by_id = {i: b for i, b, _ in vocab_rows}
    return TrainResult(
        vocab=by_id,
        merges=[(by_id[l], by_id[r]) for _, l, r, _, _ in merges],
        merge_counts=[c for *_, c in merges],
        phase=run["phase"],
        stop_reason=run["stop_reason"],
    )


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
    db = kwargs.pop("db", None)
    if db is not None:
        r = train([input_path], db, vocab_size, special_tokens, **kwargs)
        return r.vocab, r.merges
    tmp = tempfile.mkdtemp(prefix="bpe_store-")
    try:
        r = train([input_path], Path(tmp) / "train.db", vocab_size, special_tokens, **kwargs)
        return r.vocab, r.merges
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
