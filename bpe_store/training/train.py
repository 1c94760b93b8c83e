"""Training: the resumable recipe that turns corpus files into merges inside a store.

``train`` runs these steps, in this order: steps 1-2 live in ``plan``, 3 in ``count_step``, 4-5
in ``merge_step``; the job they share (``Job``) in ``job``.

1. check  (``run_check``) — parameters and inputs; on any problem, raise before anything is written
2. plan   (``run_plan``) — fingerprint the inputs, cut them into chunks, create the store (one
          transaction); or, to resume, check the store, the parameters and the inputs, writing nothing
3. count  (``run_count``) — pre-tokenize and count words per chunk, in parallel; each flush is one
          transaction that adds the counts and marks its chunks counted, so no chunk is counted twice
4. pairs  (``run_pairs``) — count adjacent pairs once; the run moves to the merging phase
5. merge  (``run_merge``) — batches of merges; each batch is ONE transaction (merges, vocab, changed
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
import inspect
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ArgumentTypeError, InputError, path_argument
from ..store import sessions
from ..store.files import remove_files
from ..store.merge_log import read_result as native_result
from ..store.result import TrainResult, read_result
from ..temporaries import new_dir, remove_stale
from ..text.inputs import DEFAULT_TEXT_FIELD
from ..text.streams import Stream
from .count_step import run_count
from .job import Job, Progress, without_gc_store_errors
from .merge import release_free_memory
from .merge_step import run_merge, run_pairs
from .options import TrainOptions, options_doc, stage1_params
from .plan import run_check, run_plan
from .superword_plan import check_superword_inputs, read_stage1, stage1_done, stage1_path

if TYPE_CHECKING:  # pragma: no cover
    from ..store.store import Store


@without_gc_store_errors
def train(
    inputs: Sequence[str | os.PathLike] | str | os.PathLike | Stream,
    db: str | os.PathLike, vocab_size: int, special_tokens: Sequence[str] = (),
    *, pattern: str = TrainOptions.pattern,
    workers: int | None = TrainOptions.workers,
    chunk_size: int = TrainOptions.chunk_size,
    checkpoint_merges: int | None = TrainOptions.checkpoint_merges,
    checkpoint_seconds: float = TrainOptions.checkpoint_seconds,
    count_flush_seconds: float = TrainOptions.count_flush_seconds,
    invalid_utf8: str = TrainOptions.invalid_utf8,
    restart: bool = TrainOptions.restart,
    progress: Progress | None = None, stop: threading.Event | None = None,
    engine: str = TrainOptions.engine,
    durable: bool = TrainOptions.durable, format: str | None = TrainOptions.format,
    text_field: str = TrainOptions.text_field,
    min_frequency: int = TrainOptions.min_frequency,
    max_token_length: int | None = TrainOptions.max_token_length,
    count_engine: str = TrainOptions.count_engine,
    ray_address: str | None = TrainOptions.ray_address,
    max_pretoken_bytes: int | None = TrainOptions.max_pretoken_bytes,
    superword_from: int | None = TrainOptions.superword_from,
    superword_base: str | os.PathLike | None = TrainOptions.superword_base,
    max_superword_words: int = TrainOptions.max_superword_words,
    extend: str | os.PathLike | None = TrainOptions.extend,
    reader_memory_words: int = TrainOptions.reader_memory_words,
    reader_wal_bytes: int = TrainOptions.reader_wal_bytes,
    verify_inputs: bool = TrainOptions.verify_inputs,
    on_checkpoint: Callable[[Store, int, bool], None] | None = None,
) -> TrainResult:
    """Train (or resume training) a byte-level BPE into the store ``db``; returns its ``TrainResult``
    (``vocab``, ``merges``, ``merge_counts``, ``phase``, ``stop_reason``). See the module doc.

    Running it again with the same arguments resumes from the store's last checkpoint and gives
    the result of an uninterrupted run; a larger ``vocab_size`` continues a finished store.

    Args:
        inputs: corpus file(s) (text, jsonl or parquet, maybe .gz/.zst/.bz2/.xz; see
            ``bpe_store.text.inputs``) or one ``streams.Stream``; the store records their sizes and SHA-256.
        db: the store (a SQLite file): created if absent, resumed if present.
        vocab_size: target vocabulary size: special tokens + 256 bytes + merges.
        special_tokens: special tokens; they split the text, are never merged and get the first ids.
        progress: called with events such as ``{"stage": "merging", "done": 1200, "total": 31744}``
            (stages: plan, counting, pairs, merging, checkpoint; see ``bpe_store.inspection.progress``).
        stop: when set, training finishes its batch, writes a checkpoint and raises ``Interrupted``.
        on_checkpoint: called with ``(store, merges in it, whether over)`` after each merge write and at the end.
        (the options: ``TrainOptions``' fields, listed here from its docstring)

    Raises:
        InputError: bad parameters or inputs (exit code 2 on the command line).
        ResumeMismatch: the store was started with other parameters or inputs (3).
        StoreError: not a store, corrupt, damaged or tampered, held by another run, disk full, ... (4).
    """
    options = TrainOptions.of(locals())  # the keyword parameters are its fields, by name (tests/api/test_api.py)
    return train_with(inputs, db, vocab_size, special_tokens, options, progress, stop, on_checkpoint)


@without_gc_store_errors
def train_with(inputs: Sequence[str | os.PathLike] | str | os.PathLike | Stream, db: str | os.PathLike,
               vocab_size: int, special_tokens: Sequence[str], options: TrainOptions,
               progress: Progress | None = None, stop: threading.Event | None = None,
               on_checkpoint: Callable[[Store, int, bool], None] | None = None) -> TrainResult:
    """``train`` with its settings as one ``TrainOptions``, as the CLI and a superword run's stage 1
    hold them: the recipe's steps, numbered as the module doc lists them."""
    job = run_check(inputs, db, vocab_size, special_tokens, options, progress, stop, on_checkpoint)  # 1. check
    _superword_stage1(job, inputs, special_tokens)        # SuperBPE: stage 1 first (docs/superword.md)
    release_free_memory()  # from here on, large blocks one phase frees are not kept resident by the next
    merger = run_plan(job)                                    # 2. plan (or check a resume)
    try:
        with _session(job):
            if job.store.run_row()["phase"] == "counting":
                run_count(job)                                # 3. count
                merger = run_pairs(job)                       # 4. pairs
            run_merge(job, merger or job.options.engine)      # 5. merge
            # 6. done: read natively and checked, else as written here or checked by step 2
            return job.done(native_result(job.store) or read_result(job.store, checked=True))
    except InputError:
        if job.remove_if_refused:  # a first run refused by its input leaves no store (closed by now)
            remove_files(job.db)
        raise


def _superword_stage1(job: Job, inputs: Sequence[str | os.PathLike] | str | os.PathLike | Stream,
                      special_tokens: Sequence[str]) -> None:
    """SuperBPE (docs/superword.md): read the superword store's stage 1 from its base into ``job``;
    without one, train stage 1 into ``stage1_path(db)`` first (a plain run, resumed like any;
    skipped when it is finished with enough merges). Checks all before anything is written."""
    t = job.params.superword_from
    if t is None:
        return
    stage1 = stage1_params(job.params)
    check_superword_inputs(job, job.options.superword_base)
    given = job.options.superword_base
    base = Path(given) if given is not None else stage1_path(job.db)
    if given is None and not stage1_done(base, t):
        plain = TrainOptions.of_run(dataclasses.replace(job.options, superword_base=None), stage1)
        train_with(inputs, base, stage1.vocab_size, special_tokens, plain, job.progress, job.stop)
    job.stage1 = read_stage1(base, stage1, t)


# help(train) lists the options from TrainOptions' docstring, where each is said once
train.__doc__ = inspect.cleandoc(train.__doc__ or "").replace(
    "    (the options: ``TrainOptions``' fields, listed here from its docstring)\n", options_doc())


@contextlib.contextmanager
def _session(job: Job) -> Iterator[None]:
    """Steps 3-6 as one session in the store's history (who trained, when, how it ended); the
    store is closed at the end, whatever happens."""
    store, session = job.store, None
    try:
        session = sessions.begin(store, (job.options.reader_memory_words, job.options.reader_wal_bytes))
        job.elapsed0 = store.elapsed()
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

