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

import dataclasses
import functools
import gc
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import ParamSpec, TypeVar

import regex

from . import sessions
from ._version import __version__
from .count import (
    DEFAULT_CHUNK_SIZE,
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
    scan_source,
    ticking,
)
from .errors import InputError, Interrupted, ResumeMismatch, StoreError
from .inputs import (
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
from .merge import ENGINES, Engine, native_available, new_engine
from .pretokenize import GPT2_PATTERN, describe_pattern, resolve_pattern
from .result import TrainResult, read_result, result_check
from .sources import Source
from .store import MAX_SPECIAL_TOKENS, RunParams, Store, StreamMark, _remove_files, _sqlite_error, is_db_error

#: A checkpoint is written after this many seconds of merging (and when merging ends): the most
#: a kill can lose. ``checkpoint_merges`` also caps a batch when given; by default it is None,
#: because merges per second vary 100x between engines and corpora, while the cost of a
#: checkpoint grows with the words a batch touches: with the native engine on enwiki-100M a
#: checkpoint every 2000 merges spent 7 s writing for 1 s of merging (bench/RESULTS-merge.md).
DEFAULT_CHECKPOINT_MERGES: int | None = None
DEFAULT_CHECKPOINT_SECONDS = 30.0
#: Counting flushes its counts to the store at most this often (and at the end).
DEFAULT_COUNT_FLUSH_SECONDS = 10.0
#: Merges per engine call inside a batch (see ``_merge``).
_SUB_STEP = 64

Progress = Callable[[dict], None]




#: Token ids are uint32 (the merge engine and ``words.tokens`` hold them so) and 0xFFFFFFFF marks
#: "no token" in the engine, so the largest vocabulary has ids 0 .. 2^32 - 2.
MAX_VOCAB_SIZE = (1 << 32) - 1
#: Counting threads: far more than any machine has cores; each may hold two chunks in memory.
MAX_WORKERS = 1024
#: A chunk is read into memory whole; 4 GiB is far above any useful size (the default is 8 MiB).
MAX_CHUNK_SIZE = 1 << 32
#: A pre-token longer than this (a line of letters without whitespace) counts as pieces of at
#: most this many bytes (pretokenize.split_long_pretoken). Why 1 MiB: no word of any natural
#: language comes near it, so on real text nothing changes (the CS336 reference semantics hold),
#: while one pathological line can no longer make a word of hundreds of MB (its tokens blob hit
#: SQLite's 1 GB limit, and the merge engine needs ~25 bytes of memory per byte of a word).
DEFAULT_MAX_PRETOKEN_BYTES = 1 << 20
#: One character (4 bytes) must fit a piece; above 64 MiB a word's token blob (4 bytes per
#: byte) nears SQLite's 1 GB default limit on a value.
MIN_MAX_PRETOKEN_BYTES, MAX_MAX_PRETOKEN_BYTES = 4, 1 << 26


def _positive_int(name: str, value: object, most: int | None = None) -> int:
    """``value`` if it is an int in ``1 .. most``; otherwise InputError naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{name} must be an integer, not {value!r}")
    if value < 1 or (most is not None and value > most):
        bound = f"between 1 and {most}" if most is not None else "at least 1"
        raise InputError(f"{name} must be {bound}, not {value}")
    return value


def _seconds(name: str, value: object, zero_ok: bool = False) -> float:
    """``value`` as float seconds if it is a finite number > 0 (>= 0 if ``zero_ok``); otherwise
    InputError. Why finite: NaN compares false with everything, so a NaN or infinite interval
    silently meant "never checkpoint"."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{name} must be a number of seconds, not {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        least = "0 or more" if zero_ok else "above 0"
        raise InputError(f"{name} must be a finite number of seconds, {least}, not {value}")
    return float(value)


def check_run_options(workers: int | None, chunk_size: int, checkpoint_merges: int | None,
                      checkpoint_seconds: float, count_flush_seconds: float) -> int:
    """Validate the options that never change a run's result; return the worker count to use."""
    if workers is not None:
        _positive_int("workers", workers, MAX_WORKERS)
    _positive_int("chunk size", chunk_size, MAX_CHUNK_SIZE)
    if checkpoint_merges is not None:
        _positive_int("checkpoint merges", checkpoint_merges)
    _seconds("checkpoint seconds", checkpoint_seconds)
    _seconds("count flush seconds", count_flush_seconds, zero_ok=True)
    return min(workers or os.cpu_count() or 1, MAX_WORKERS)


def check_params(vocab_size: int, special_tokens: Sequence[str], pattern: str, invalid_utf8: str,
                 max_pretoken_bytes: int | None = None) -> RunParams:
    """Validate the parameters that define a run; raise InputError naming the bad one.
    ``max_pretoken_bytes`` None means "not given" (the store's value, or the default)."""
    if isinstance(special_tokens, (str, bytes)) or not isinstance(special_tokens, Iterable):
        raise InputError(f"special tokens must be a list of strings, not {special_tokens!r}")
    specials = list(special_tokens)
    for s in specials:
        if not isinstance(s, str) or s == "":
            raise InputError("special tokens must be non-empty strings")
    if len(specials) > MAX_SPECIAL_TOKENS:  # a store with more is refused as damaged (store.check_run)
        raise InputError(f"{len(specials)} special tokens: at most {MAX_SPECIAL_TOKENS}")
    dup = [s for s, n in Counter(specials).items() if n > 1]
    if dup:
        raise InputError(f"special token {dup[0]!r} is given more than once")
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise InputError(f"vocab size must be an integer, not {vocab_size!r}")
    least = 256 + len(specials)
    if vocab_size < least:
        raise InputError(f"vocab size {vocab_size} is too small: it must be at least 256 bytes + "
                         f"{len(specials)} special tokens = {least}")
    if vocab_size > MAX_VOCAB_SIZE:
        raise InputError(f"vocab size {vocab_size} is too large: token ids are 32-bit, so at most "
                         f"{MAX_VOCAB_SIZE}")
    if not isinstance(pattern, str):
        raise InputError(f"the pre-tokenization pattern must be a string, not {pattern!r}")
    try:
        regex.compile(pattern)
    except regex.error as exc:
        raise InputError(f"the pre-tokenization pattern does not compile: {exc}") from None
    if invalid_utf8 not in ("strict", "replace"):
        raise InputError(f"invalid_utf8 must be 'strict' or 'replace', not {invalid_utf8!r}")
    if max_pretoken_bytes is not None:
        _positive_int("max pre-token bytes", max_pretoken_bytes, MAX_MAX_PRETOKEN_BYTES)
        if max_pretoken_bytes < MIN_MAX_PRETOKEN_BYTES:
            raise InputError(f"max pre-token bytes must be between {MIN_MAX_PRETOKEN_BYTES} and "
                             f"{MAX_MAX_PRETOKEN_BYTES} (one character is up to 4 bytes), not {max_pretoken_bytes}")
    return RunParams(pattern, tuple(specials), vocab_size, invalid_utf8, max_pretoken_bytes=max_pretoken_bytes)


def check_trainer_options(min_frequency: int, max_token_length: int | None) -> dict:
    """Validate ``min_frequency`` and ``max_token_length`` (see ``train``); raise InputError
    naming the bad one. Returns them as ``RunParams`` fields."""
    _positive_int("min_frequency", min_frequency, (1 << 63) - 1)  # word counts are 64-bit
    if max_token_length is not None and _positive_int("max_token_length", max_token_length, 1 << 32) < 2:
        raise InputError("max_token_length must be at least 2 (a merge joins two tokens of at least one "
                         "byte each), or None for no limit, not 1")
    return {"min_frequency": min_frequency, "max_token_length": max_token_length}


def _emit(progress: Progress | None, **event) -> None:
    if progress is not None:
        progress(event)


def _same_inputs(store: Store, paths: Sequence[FileInput | Stream], params: RunParams) -> bool:
    """Refuse a resume whose parameters or inputs differ from the store's, saying what differs.

    Writes nothing; returns whether ``params`` asks for a larger vocabulary than the store's."""
    old = store.params()
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
    sources = store.sources()
    given = [p.name if isinstance(p, Stream) else str(p.path.resolve()) for p in paths]
    if [s.path for s in sources] != given:
        diffs.append(f"inputs {[s.path for s in sources]} -> {given}")
    else:
        diffs += same_kind_diffs(sources, paths)
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
    if diffs:
        raise ResumeMismatch(f"{store.path} was started with other parameters or inputs: "
                             + "; ".join(diffs) + ". Use the same command, or --restart to start over")
    if params.vocab_size < old.vocab_size:
        raise ResumeMismatch(
            f"{store.path} trains to vocab size {old.vocab_size}; a smaller one ({params.vocab_size}) "
            f"is a prefix of it: use `bpe-store export --vocab-size {params.vocab_size}` "
            "(or --restart to start over)")
    return params.vocab_size > old.vocab_size


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
            ``bpe_store.inputs``) or one ``inputs.Stream``; the store records their sizes and SHA-256.
        db: the store (a SQLite file): created if absent, resumed if present.
        vocab_size: target vocabulary size: special tokens + 256 bytes + merges.
        special_tokens: special tokens; they split the text, are never merged and get the first ids.
        pattern: the pre-tokenization regex, or a name in ``pretokenize.PATTERNS`` ("gpt2", the
            default; "gpt4" = "cl100k"; "o200k"). The store keeps the regex, so a name and its
            regex are the same run.
        workers: counting threads/processes (default: all cores); never changes the result.
        chunk_size: bytes per counting unit; never changes the result.
        checkpoint_merges: also end a merge batch (a checkpoint) after this many merges.
        checkpoint_seconds: seconds of merging per checkpoint: the most a kill can lose.
        count_flush_seconds: counting writes its counts to the store at most this often.
        invalid_utf8: "strict" (refuse, naming the byte offset) or "replace" (U+FFFD).
        restart: discard the store's progress and start over.
        progress: called with events such as ``{"stage": "merging", "done": 1200, "total": 31744}``
            (stages: plan, counting, pairs, merging, checkpoint; see ``bpe_store.progress``).
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
            ``bpe_store.ray_count``); never changes the result, so a run may resume with the other.
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
    # 1. check
    if isinstance(inputs, (str, os.PathLike, Stream)):
        inputs = [inputs]
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
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == "native" and not native_available():
        raise InputError("the native merge engine is not built in this installation; use engine='python'")
    if count_engine not in ("local", "ray"):
        raise InputError(f"count_engine must be 'local' or 'ray', not {count_engine!r}")
    if ray_address is not None and count_engine != "ray":
        raise InputError("ray_address needs count_engine='ray'")
    if count_engine == "ray":
        from .ray_count import import_ray

        import_ray()  # missing Ray: say how to install it before anything is written
    db = Path(db)
    session_start = time.monotonic()

    store = _open_for_training(db, paths, invalid_utf8, restart, durable)
    merger: Engine | None = None
    if store is None:
        # 2. plan: everything is checked before the file is created
        sources: list[Source] = []
        for p in paths:
            _emit(progress, stage="plan", file=str(p.name if isinstance(p, Stream) else p.path))
            sources.append(p.source() if isinstance(p, Stream) else scan_input(p, invalid_utf8))
        if params.max_pretoken_bytes is None:
            params = dataclasses.replace(params, max_pretoken_bytes=DEFAULT_MAX_PRETOKEN_BYTES)
        chunks: list[tuple[int, int, int, str, int | None]] = []
        for i, s in enumerate(sources):
            if isinstance(paths[i], Stream):
                chunks.append((i, 0, 0, "stream", None))
                continue
            for start, end, kind, part in plan_units(s, params.special_tokens, params.pattern, chunk_size,
                                                     params.max_pretoken_bytes):
                chunks.append((i, start, end, kind, part))
        # the store appears complete (schema, run, plan, vocabulary) or not at all
        store = Store.create(db, init=lambda new: new.init_run(params, sources, chunks, chunk_size, __version__),
                             durable=durable)
    else:
        # a resume: check everything (parameters, inputs, the store's consistency) before the
        # first write, so a refused resume leaves the store exactly as it was
        try:
            store.check_plan()
            grow = _same_inputs(store, paths, params)
            merger = _preflight(store, params, grow, engine, progress)
            if grow:
                store.set_vocab_size(params.vocab_size)  # continue to a larger vocabulary
        except BaseException:
            store.close()
            raise

    session = None
    try:
        session = sessions.begin(store)  # the store's history: who trained, when, how it ended
        elapsed0 = store.elapsed()

        def elapsed() -> float:
            return elapsed0 + time.monotonic() - session_start

        # the store's own value (a resume that did not give one; NULL = no limit in older stores)
        params = dataclasses.replace(params, max_pretoken_bytes=store.params().max_pretoken_bytes)
        phase = store.run_row()["phase"]
        if phase == "counting":
            _count(store, params, workers, count_flush_seconds, elapsed, progress, stop, chunk_size,
                   next((p for p in paths if isinstance(p, Stream)), None), count_engine, ray_address)
            _check_something_counted(store, params)
            merger = _start_merging(store, params, elapsed, progress, engine)
        _merge(store, params, checkpoint_merges, checkpoint_seconds, elapsed, progress, stop,
               merger or engine)
        result = read_result(store)
        sessions.end(store, session)
        return result
    except BaseException as exc:
        sessions.end(store, session, exc)
        raise
    finally:
        store.close()


def _open_for_training(db: Path, paths: Sequence[FileInput | Stream], invalid_utf8: str, restart: bool,
                       durable: bool = True) -> Store | None:
    """The existing store at ``db`` to resume, locked; None when a new one is to be created.

    A store of ours with no run yet (its creation by an older bpe_store was killed) is deleted
    and created again, as is any store with ``restart`` (once the inputs are checked)."""
    if not db.exists() or db.is_dir() or db.stat().st_size == 0:
        if db.is_dir():
            Store.open(db)  # raises the "is a directory" error
        return None
    store = Store.open(db, allow_unfinished=True, durable=durable)
    try:
        if not restart and store.revision is not None and store.has_run():
            return store
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


def _preflight(store: Store, params: RunParams, grow: bool, engine: str,
               progress: Progress | None = None) -> Engine | None:
    """Check a store about to be resumed, writing nothing; the merge engine when merging will
    need it (built now, since building it is what checks words and pair counts)."""
    run = store.run_row()
    result_check(store, len(params.special_tokens))
    if run["phase"] == "counting":
        if store.sql("SELECT count(*) FROM merges").scalar():
            raise StoreError(f"{store.path}: the store is inconsistent (counting, but it holds merges); "
                             "start over with --restart")
        return None
    if run["phase"] == "merging" or grow:
        # a resume reads the words back and checks them: say so, it can take seconds
        _emit(progress, stage="loading", phase="merging", total=params.num_merges,
              done=store.sql("SELECT count(*) FROM merges").scalar(),
              words=store.sql("SELECT count(*) FROM words").scalar())
        return _load_engine(store, params, engine)
    return None


def _count(store: Store, params: RunParams, workers: int, flush_seconds: float,
           elapsed: Callable[[], float], progress: Progress | None, stop: threading.Event | None,
           block_size: int = DEFAULT_CHUNK_SIZE, stream: Stream | None = None, count_engine: str = "local",
           ray_address: str | None = None) -> None:
    """3. count: every work unit not yet counted; flush counts + unit marks in one transaction.
    A stream (stdin, an iterable) is counted last, committing its position with each flush."""
    sources = store.sources()
    chunks = store.chunks()
    total = sum(c.end - c.start for c in chunks)
    done = sum(c.end - c.start for c in chunks if c.counted)
    todo = [c for c in chunks if not c.counted and c.kind != "stream"]
    streams = [c for c in chunks if not c.counted and c.kind == "stream"]
    _emit(progress, stage="counting", done=done, total=total)
    if todo:
        _count_units(store, params, sources, todo, workers, flush_seconds, elapsed, progress, stop, block_size,
                     done, total, count_engine, ray_address)
    for chunk in streams:
        if stream is None:  # pragma: no cover - _same_inputs refuses a store whose stream is not given
            raise InputError(f"{store.path} was counting a stream; give it again to resume")
        _count_stream(store, params, stream, chunk, workers, flush_seconds, elapsed, progress, stop, block_size)


def _count_units(store: Store, params: RunParams, sources: Sequence[Source], todo: Sequence, workers: int,
                 flush_seconds: float, elapsed: Callable[[], float], progress: Progress | None,
                 stop: threading.Event | None, block_size: int, done: int, total: int,
                 count_engine: str = "local", ray_address: str | None = None) -> None:
    """Count the work units ``todo`` of input files (see ``_count``); ``count_engine="ray"``
    counts them as Ray tasks (``bpe_store.ray_count``)."""
    size_of = {c.id: c.end - c.start for c in todo}
    # plain text cut into byte ranges: the map step reads its range itself (count_chunk*_task);
    # other kinds go through bpe_store.inputs' readers (count_units_threaded, count_unit_task)
    plain = all(c.kind == "range" and sources[c.source_id].format == "text" for c in todo)
    if plain:
        tasks = [(c.id, sources[c.source_id].path, c.start, c.end, params.special_tokens, params.pattern,
                  params.invalid_utf8, params.max_pretoken_bytes) for c in todo]
    else:
        units = [(c.id, unit_of(sources[c.source_id], c.kind, c.start, c.end, c.part)) for c in todo]
        tasks = [(cid, u, params.special_tokens, params.pattern, params.invalid_utf8, block_size,
                  params.max_pretoken_bytes) for cid, u in units]
    results: Iterable
    # native: chunk counts stay in C++ (ChunkCounts summed into a WordCounter), so Python objects
    # are made only at a flush and the GIL is free while threads count
    native = native_counts(params.pattern)
    task = (count_chunk_native_task if native else count_chunk_task) if plain else count_unit_task
    status: Callable[[], dict] = dict  # extra fields of counting events (Ray: units in flight, workers)
    if count_engine == "ray":
        from .ray_count import RayCounter

        # every unit is a Ray task (count.count_unit_packed reads it where it runs); packed
        # results are summed by a WordCounter, whatever the pattern or input kind
        results = RayCounter(tasks, ray_address, workers)
        native, status = True, results.status
    elif native and not plain:
        results = count_units_threaded(units, workers, params.special_tokens, params.pattern,
                                       params.invalid_utf8, block_size, params.max_pretoken_bytes)
    elif workers > 1 and len(tasks) > 1:
        # Both map steps release the GIL while they scan: the native counter, and `regex` with
        # concurrent=True (pretokenize.count_words). So threads give the parallelism of processes
        # without pickling counts back or spawning interpreters, which hung when run from
        # `python -` (spawned workers re-ran __main__, crashed, were respawned; issue 9) and cost
        # ~1 s of imports each (bench/RESULTS-count.md). Ctrl-C reaches only this thread, which
        # decides how to stop.
        results = count_chunks_threaded(tasks, min(workers, len(tasks)), task)
    else:
        results = map(task, tasks)
    # Ray: a flush is written by a second thread while this one keeps adding results into a fresh
    # counter, because the driver is the one reducer of a whole cluster: a synchronous flush
    # (seconds for ~1 M words) left every worker idle once its 2 units in flight were done
    # (bench/RESULTS-ray.md). At most one flush is in flight (two counters in memory); each is
    # still one transaction, and its checkpoint event comes once it has committed.
    flusher = ThreadPoolExecutor(1, thread_name_prefix="bpe-flush") if count_engine == "ray" else None
    flushing: Future | None = None

    def write(delta: Counter[bytes] | WordCounter, marks: list[tuple[int, int]], at: int) -> int:
        store.add_word_counts(delta, marks, elapsed())
        return at

    def committed() -> None:
        nonlocal flushing
        if flushing is not None:
            at, flushing = flushing.result(), None  # a failed flush raises here
            _emit(progress, stage="checkpoint", phase="counting", done=at, total=total, **store.wal)

    try:
        delta = new_word_counts(native)
        marks: list[tuple[int, int]] = []
        last_flush = time.monotonic()
        for cid, counts, n in results:
            add_counts(delta, counts)
            marks.append((cid, n))
            done += size_of[cid]
            _emit(progress, stage="counting", done=done, total=total, **status())
            if flushing is not None and flushing.done():
                committed()
            stopping = stop is not None and stop.is_set()
            if time.monotonic() - last_flush >= flush_seconds or stopping:
                committed()
                _emit(progress, stage="writing", phase="counting", done=done, total=total, words=len(delta),
                      final=False)
                if flusher is not None and not stopping:
                    flushing = flusher.submit(write, delta, marks, done)
                else:
                    store.add_word_counts(delta, marks, elapsed())
                    _emit(progress, stage="checkpoint", phase="counting", done=done, total=total, **store.wal)
                delta, marks, last_flush = new_word_counts(native), [], time.monotonic()
                if stopping:
                    raise Interrupted(f"stopped while counting; {store.path} keeps the counted chunks")
        committed()
        if marks:
            _emit(progress, stage="writing", phase="counting", done=done, total=total, words=len(delta), final=True)
            store.add_word_counts(delta, marks, elapsed())
            _emit(progress, stage="checkpoint", phase="counting", done=done, total=total, **store.wal)
    finally:
        if flusher is not None:  # never leave a flush writing while the store closes
            flusher.shutdown(wait=True)
        close = getattr(results, "close", None)
        if close is not None:  # threads: cancel queued chunks, wait for the running ones
            close()


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


def _count_stream(store: Store, params: RunParams, stream: Stream, chunk, workers: int, flush_seconds: float,
                  elapsed: Callable[[], float], progress: Progress | None, stop: threading.Event | None,
                  block_size: int) -> None:
    """Count a stream from where the store says it stands (``inputs.Stream.blocks`` checks and
    skips what was counted); each flush commits the counts with the stream's new position, and
    the last one marks the stream counted."""
    source = store.sources()[chunk.source_id]
    native = native_counts(params.pattern)
    blocks = stream.blocks(source, params.special_tokens, params.pattern, params.invalid_utf8, block_size)
    # read in a thread, with ticks while the stream pauses: the counts so far are still committed
    # every `flush_seconds`, and a stop request is heard while a pipe is silent
    results = count_blocks_ordered(ticking(blocks, min(flush_seconds, 1.0) or 0.05), workers,
                                   params.special_tokens, params.pattern, documents=stream.format != "text",
                                   max_pretoken_bytes=params.max_pretoken_bytes)
    at = (source.size, source.documents or 0, source.sha256)
    delta = new_word_counts(native)
    pretokens = 0

    def flush(finished: bool) -> None:
        store.add_word_counts(delta, [], elapsed(), StreamMark(chunk.source_id, chunk.id, at[0], at[1], at[2],
                                                               pretokens, finished))
        _emit(progress, stage="checkpoint", phase="counting", done=at[0], total=None, documents=at[1])

    try:
        last_flush = time.monotonic()
        flushed = at
        for pos, counts, n in results:
            if pos is not None:
                add_counts(delta, counts)
                pretokens += n
                at = (pos.bytes, pos.documents, pos.sha256)
                _emit(progress, stage="counting", done=pos.bytes, total=None, documents=pos.documents)
            stopping = stop is not None and stop.is_set()
            if (time.monotonic() - last_flush >= flush_seconds and at != flushed) or stopping:
                flush(False)
                delta, pretokens, last_flush, flushed = new_word_counts(native), 0, time.monotonic(), at
                if stop is not None and stop.is_set():
                    raise Interrupted(
                        f"stopped while counting {stream.name}; {store.path} holds its first {at[1]} documents "
                        f"({at[0]} bytes): give the same stream again to resume from there")
        flush(True)
    finally:
        results.close()


def _byte_vocab(n_specials: int) -> list[bytes | None]:
    """``token_bytes`` before any merge: None for each special token, then the 256 bytes."""
    return [None] * n_specials + [bytes([b]) for b in range(256)]


def _start_merging(store: Store, params: RunParams, elapsed: Callable[[], float], progress: Progress | None,
                   engine: str = "auto") -> Engine:
    """4. pairs: count adjacent pairs of the counted words and move the run to merging.

    Returns the engine it built, so merging starts without reading the words a second time.
    """
    _emit(progress, stage="pairs")
    n = len(params.special_tokens)
    # Why the fresh rows: when this session's single flush wrote every word, its rows are what
    # the store holds, so they feed the engine without reading ~1M rows back (enwiki-100M:
    # -0.3 s); otherwise (resumed or multi-flush counting) the store is read.
    rows = store.take_fresh_word_rows()
    if rows is None:
        rows = store.load_word_rows()
    try:
        merger = new_engine(rows, _byte_vocab(n), n, n + 256, 0, engine, min_frequency=params.min_frequency,
                            max_token_length=params.max_token_length)
    except (TypeError, ValueError, OverflowError) as exc:  # a count or blob of the wrong type or sign
        raise StoreError(f"{store.path}: the store's words are damaged ({exc}); start over with --restart") from None
    del rows  # the engine holds its own copy; free ~1M tuples before the pair rows are made
    store.start_merging(merger.pair_counts(), elapsed())
    return merger


def _load_engine(store: Store, params: RunParams, engine: str = "auto") -> Engine:
    """Rebuild the merge engine from the store and check the store is consistent."""
    n_special = len(params.special_tokens)
    vocab = store.load_vocab()
    merges = store.load_merges()
    first = n_special + 256
    result_check(store, n_special, vocab, merges)
    token_bytes = [b if kind != "special" else None for _, b, kind in vocab]
    rows = store.load_word_rows()
    try:
        merger = new_engine(rows, token_bytes, n_special, first, len(merges), engine,
                            min_frequency=params.min_frequency, max_token_length=params.max_token_length)
    except (TypeError, ValueError, OverflowError) as exc:  # a count or blob of the wrong type or sign
        raise StoreError(f"{store.path}: the store's words are damaged ({exc}); start over with --restart") from None
    if merger.bad_word >= 0:
        raise StoreError(f"{store.path}: the store is inconsistent (word {rows[merger.bad_word][0]} does not "
                         "spell its bytes); start over with --restart")
    del rows
    # Why a digest: SQLite fingerprints pair_counts in one scan, instead of ~1M rows into Python.
    if merger.pair_digest() != store.pair_counts_digest():
        raise StoreError(f"{store.path}: the store is inconsistent (pair counts do not match the words); "
                         "start over with --restart")
    return merger


def _merge(store: Store, params: RunParams, batch: int | None, seconds: float, elapsed: Callable[[], float],
           progress: Progress | None, stop: threading.Event | None, engine: Engine | str = "auto") -> None:
    """5. merge: learn merges in batches; each batch ends in one checkpoint transaction.

    ``engine``: the engine ``_start_merging`` built, or which kind to rebuild from the store.
    A batch ends after ``seconds`` of merging, after ``batch`` merges if that is not None, or on
    a stop request.
    """
    if batch is None:
        batch = sys.maxsize
    run = store.run_row()
    target = params.num_merges
    done_now = store.sql("SELECT count(*) FROM merges").scalar()
    if run["phase"] == "done" and (run["stop_reason"] == "no_pairs" or done_now >= target):
        return  # a finished store: nothing to do (a larger vocab size set phase back to merging)
    merger = _load_engine(store, params, engine) if isinstance(engine, str) else engine
    tb = merger.token_bytes
    stopping = False
    while True:
        # one batch = sub-steps of at most _SUB_STEP merges until the batch size, the batch time
        # or a stop request; sub-steps keep progress lively and let Ctrl-C end a batch early.
        batch_end = time.monotonic() + seconds
        merges = []
        while True:
            remaining = min(target - merger.next_rank, batch - len(merges))
            if remaining <= 0 or merger.exhausted:
                break
            sub = merger.step(min(remaining, _SUB_STEP))
            merges.extend(sub)
            if sub:
                last = sub[-1]
                _emit(progress, stage="merging", done=merger.next_rank, total=target,
                      merge=[tb[last.left].decode("utf-8", "replace"),
                             tb[last.right].decode("utf-8", "replace"), last.count])
            stopping = stop is not None and stop.is_set()
            if stopping or time.monotonic() >= batch_end:
                break
        if merger.next_rank >= target:
            reason = "vocab_size"
        elif merger.exhausted:
            reason = "no_pairs"
        else:
            reason = None
        word_rows, deletes, inserts, updates = merger.take_checkpoint_rows()
        first = merger.first_merge_id
        _emit(progress, stage="writing", phase="merging", done=merger.next_rank, total=target,
              words=len(word_rows), final=reason is not None)
        write_s = store.write_merge_rows(
            [(m.rank, m.left, m.right, m.token, m.count) for m in merges],
            [(first + m.rank, tb[m.left] + tb[m.right]) for m in merges],
            word_rows, deletes, inserts, updates,
            merges_done=merger.next_rank, elapsed_s=elapsed(), done_reason=reason,
        )
        _emit(progress, stage="checkpoint", phase="merging", done=merger.next_rank, total=target,
              words=len(word_rows), pairs=len(deletes) + len(inserts) + len(updates), write_s=write_s,
              **store.wal)  # wal_bytes, wal_blocked: a reader keeping the WAL from being emptied
        if reason is not None:
            return
        if stopping:
            raise Interrupted(f"stopped after {merger.next_rank} merges; {store.path} holds them")


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
        kwargs.setdefault("durable", False)  # deleted below: nothing to keep through a power loss
        r = train([input_path], Path(tmp) / "train.db", vocab_size, special_tokens, **kwargs)
        return r.vocab, r.merges
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
    return train(Stream.of_iterable(iterable, text_column), db, vocab_size, special_tokens, **kwargs)
