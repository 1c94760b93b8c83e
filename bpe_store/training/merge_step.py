"""Steps 4 and 5 of the recipe: count the pairs once and move to merging, then merge in batches,
each batch ONE transaction (the checkpoint), with merge logs between them; a resume builds the
engine from the store (``load_engine``), replaying the logged merges.
"""

from __future__ import annotations

import sys
import time

from ..errors import Interrupted, StoreError
from ..pauses import pause_for_tests as _test_pause
from ..store import words_digest
from ..store.params import RunParams
from ..store.result import result_check
from ..store.store import Store
from . import stage2_words
from .job import Job
from .merge import Engine, new_engine, release_free_memory, uses_native

#: Merging logs its new merges (merges, vocabulary, progress: no word or pair rows, ~15 ms on a
#: 12 GB store) after this many seconds since the last write, between full checkpoints: what a
#: kill during merging loses. A resume applies the logged merges to the words it reads
#: (``load_engine``; words are independent, so two threads share it, and no pair count is kept
#: up to date through it): 13,632 merges on 7.0 M words 1.4 s, where merging the first 12,736 took
#: 4.5 s; counting the pairs after it costs more than at rank 0 (~2.2 s: merged tokens make
#: millions of distinct pairs).
MERGE_LOG_SECONDS = 1.0
#: A finished run keeps the tokens of at most this many of its most frequent words (those more
#: frequent than the next one, so that ties never depend on word ids; ``top_words`` shows them,
#: the others' are NULL): the words people look at, where writing every word's (7.0 M at 12 GB)
#: took 2.2 s. A word's tokens are its split under the merges (``bpe.word_splitter``). A run
#: continued to a larger vocabulary reads the words as bytes and replays every merge.
KEEP_WORD_TOKENS = 100_000
#: A finished run keeps the counts of its live pairs at least as frequent as the 100,000th most
#: frequent one (ties never depend on ids): ``top_pairs`` then says what the next merges would be,
#: its first row the merge that continuing by one token makes. A run continued to a larger
#: vocabulary recounts every pair from its words and replaces them.
KEEP_PAIR_COUNTS = 100_000

#: SuperBPE's stage 2 (a superword store) keeps this many of its most frequent pairs in
#: ``pair_counts`` while it merges, written as merging starts and with each checkpoint (every
#: ``checkpoint_seconds``; its checkpoints otherwise log merges only, see ``_checkpoint``), so that
#: ``status`` and ``top_pairs`` show the next superword pairs. Why not every live pair: tens of
#: millions at 1 GB (a full checkpoint took 115 s); these cost ~1 ms off the engine's heap and a
#: few tens of KB in the store.
STAGE2_NEXT_PAIRS = 1_000


#: Merges per engine call inside a batch (see ``_merge_batch``).
_SUB_STEP = 64


def last_checkpoint_deferred(store: Store) -> bool:
    """Whether the run finished while a reader pinned the WAL, so that its last checkpoint only
    logged the merges (see wal_watch): ``words.tokens`` and ``pair_counts`` still reflect fewer
    merges than the log holds. The same command writes that checkpoint (``run_merge``). (A store
    upgraded from before merge logs has ``state_merges`` equal to its merges.)"""
    if store.run_row()["phase"] != "done":
        return False
    state = store.state_merges()
    return state is not None and state < store.sql("SELECT count(*) FROM merges").scalar()


def load_engine(store: Store, params: RunParams, engine: str = "auto", words_file: bool = False) -> Engine:
    """Rebuild the merge engine from the store and check the store is consistent. ``words_file``
    (a superword store's run, not a check): start from its stage-2 words file when there is a
    usable one, else write one after the build (``stage2_words``)."""
    n_special = len(params.special_tokens)
    vocab = store.load_vocab()
    merges = store.load_merges()
    first = n_special + 256
    result_check(store, params.special_tokens, vocab, merges)
    token_bytes = [b if kind != "special" else None for _, b, kind in vocab]
    # the merges logged after the last full checkpoint: the words' tokens and pair counts are older
    # None: a finished run's store, whose words are read as their bytes (see KEEP_WORD_TOKENS)
    state = store.state_merges()
    if state is None and store.pairs_merges() is None and store.has_pair_counts():
        raise StoreError(f"{store.path}: the store is inconsistent (pair counts in a finished run's store "
                         "that kept none); start over with --restart")
    if state is not None and not 0 <= state <= len(merges):
        raise StoreError(f"{store.path}: the store is inconsistent (its words reflect {state} merges of "
                         f"{len(merges)}); start over with --restart")
    replay = [(left, right, token) for _rank, left, right, token, _count in merges[state or 0:]]
    words_file = words_file and params.superword_from is not None and state == 0 and uses_native(engine)
    if words_file:  # stage 2: its words as stage 1's replay left them, and the merges logged since
        merger = stage2_words.load(store, params, token_bytes, replay, n_special, first)
        if merger is not None:
            return merger
    _test_pause("engine:rows")  # tests: the engine is built from the store's words, not a words file
    # packed: no Python tuple per word
    rows = store.load_word_rows(packed=uses_native(engine), tokens=state is not None)
    words_digest.check(store, rows)  # a count or word edited since counting ended: other merges
    try:
        merger = new_engine(rows, token_bytes, n_special, first, len(merges), engine,
                            min_frequency=params.min_frequency, max_token_length=params.max_token_length,
                            replay=replay, max_words=params.superword_max_words or 0)
    except (TypeError, ValueError, OverflowError) as exc:  # a count or blob of the wrong type or sign
        raise StoreError(f"{store.path}: the store's words are damaged ({exc}); start over with --restart") from None
    if merger.bad_word >= 0:
        word = store.word_id_at(merger.bad_word)
        raise StoreError(f"{store.path}: the store is inconsistent (word {word} does not "
                         "spell its bytes); start over with --restart")
    del rows
    if words_file:  # before any merge changes the words (a resume's replay: every logged merge)
        stage2_words.save(store, params, merger, replay)
    # the store holds the top pairs only (a finished run; stage 2, STAGE2_NEXT_PAIRS), or none
    if not merger.rewrite_pairs and (state is None or store.pairs_merges() is None
                                     or params.superword_from is not None):
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
    merger = load_engine(store, store.params())
    n = store.last_word_id()
    if store.state_merges() is not None:
        return f"{n} words match their digest and spell their bytes under the merges; the pair counts are theirs"
    # a finished store keeps the tokens of its most frequent words only, for inspection (not read by
    # a resume or a grow, which start from the bytes): they must be what the merges make of them
    kept = store.sql("SELECT tokens, id FROM words WHERE tokens IS NOT NULL ORDER BY id").fetchall()
    want = [(bytes(blob), word) for blob, word in merger.top_word_rows(KEEP_WORD_TOKENS)]
    if kept != want:
        bad = min(w for _, w in set(kept) ^ set(want))
        raise StoreError(f"{store.path}: the tokens the store keeps for word {bad} are not what its merges make of "
                         "it (they are kept for inspection only: a resume or a grow does not read them)")
    return (f"{n} words match their digest and their merges; the {len(kept)} kept words' tokens are theirs")


def _byte_vocab(n_specials: int) -> list[bytes | None]:
    """``token_bytes`` before any merge: None for each special token, then the 256 bytes."""
    return [None] * n_specials + [bytes([b]) for b in range(256)]


def run_pairs(job: Job) -> Engine:
    """4. pairs: count adjacent pairs of the counted words and move the run to merging.

    Returns the engine it built, so merging starts without reading the words a second time.
    """
    store, params = job.store, job.params
    job.emit(stage="pairs")
    if params.superword_from is not None:
        return _superword_pairs(job)
    n = len(params.special_tokens)
    # Why the words in memory: when the last flush writes every word (the first flush into an
    # empty store), its counter is what the store will hold, so the engine is built from it while
    # the flush is still being written (enwiki-100M: the flush's ~0.5 s leaves the critical path);
    # after several flushes the store's word map (``take_fresh_word_rows``) once they committed,
    # without reading ~1M rows back; otherwise (a resume) the store is read.
    rows, job.fresh_words = job.fresh_words, None
    words = words_digest.of_counter(rows)  # the words the store will hold, digested without reading them back
    if rows is None:
        job.writes.wait()
        rows = store.take_fresh_word_rows()
    if rows is None:
        rows = store.load_word_rows(packed=uses_native(job.options.engine))
    # a run extending a base starts from every word as the base encodes it: its merges replayed
    based = job.base_rows
    token_bytes = _byte_vocab(n) + ([] if based is None else list(based.merge_bytes))
    replay = [] if based is None else based.merges
    try:
        merger = new_engine(rows, token_bytes, n, n + 256, len(replay), job.options.engine,
                            min_frequency=params.min_frequency, max_token_length=params.max_token_length,
                            replay=replay)
    except (TypeError, ValueError, OverflowError) as exc:  # a count or blob of the wrong type or sign
        raise StoreError(f"{store.path}: the store's words are damaged ({exc}); start over with --restart") from None
    del rows  # the engine holds its own copy; free ~1M tuples before the pair rows are made
    release_free_memory()  # what counting freed would otherwise stay resident through merging
    if replay:
        # Why no pair counts for a run extending a base: its words start as the base's tokens, whose
        # pairs are many and spread over a large vocabulary (o200k_base on zhwiki-20M: 940 K rows,
        # 13 CPU s of inserts at random places in two b-trees, where the fresh run's pairs of bytes are
        # few); the engine holds them as after any replay (``rewrite_pairs``): the first full
        # checkpoint writes them all, sorted, and a run shorter than ``checkpoint_seconds`` writes
        # only the pairs a finished run keeps. A kill before it resumes as when a reader pinned the
        # WAL: the words replayed from their bytes, their pairs counted again (``load_engine``).
        job.writes.submit(_start_merging, job, None, job.elapsed(), words)
        return merger
    # written after the last flush, before the first merge checkpoint; the counts are taken now,
    # before merging changes them
    job.writes.submit(_start_merging, job, merger.pair_counts(), job.elapsed(), words, then=lambda: job.pairs_unwritten
                      and job.emit(stage="deferred", phase="merging", what="pair counts", waiting=False,
                                   **store.wal))
    return merger


def _superword_pairs(job: Job) -> Engine:
    """4. pairs for a superword store (SuperBPE's stage 2, docs/superword.md): its words are stage
    2's pieces, still their bytes; the engine applies the store's stage-1 merges to them first, as
    a resume applies logged merges (``load_engine``: their state is 0 merges), and merges on from
    there under the superword rule. The move to merging comes first and writes no pair counts: the
    first full checkpoint writes them all (as when a reader pins the WAL)."""
    job.fresh_words = None  # the engine reads the store's rows: a counter cannot be replayed
    job.writes.wait()
    # Why first: the move frees counting's word map before the engine loads every piece; a kill
    # after it resumes by the same load (words at 0 merges, the stage-1 merges replayed)
    job.store.start_merging(None, job.elapsed())
    release_free_memory()
    job.pairs_unwritten = True
    stage2_words.remove(job.store.path)  # another run's: these words were just counted
    return load_engine(job.store, job.params, job.options.engine, words_file=True)


def _start_merging(job: Job, pairs: dict[tuple[int, int], int] | None, elapsed_s: float,
                   words: str | None = None) -> None:
    """The move to merging (on the writes' thread), without the pair counts while a reader pins
    the WAL (``Store.start_merging``) or when ``pairs`` is None: the first full checkpoint writes
    them then. ``words``: the words' digest, when run_pairs had them in memory."""
    job.pairs_unwritten = pairs is None or job.store.wal_blocked_now()
    job.store.start_merging(None if job.pairs_unwritten else pairs, elapsed_s, words)


def run_merge(job: Job, engine: Engine | str) -> None:
    """5. merge: learn merges in batches; each batch ends in one checkpoint transaction.

    ``engine``: the engine ``run_pairs`` or the resume checks built, or which kind to rebuild from
    the store. A batch ends after ``checkpoint_seconds`` of merging, after ``checkpoint_merges``
    merges if that is not None, or on a stop request.
    """
    store, target = job.store, job.params.num_merges
    if job.writes.idle():  # else counting just ended: merging starts while its writes finish
        run = store.run_row()
        done_now = store.count_merges()
        if (run["phase"] == "done" and (run["stop_reason"] == "no_pairs" or done_now >= target)
                and not last_checkpoint_deferred(store)):
            return  # a finished store: nothing to do (a larger vocab size set phase back to merging)
    merger = load_engine(store, job.params, engine, words_file=True) if isinstance(engine, str) else engine
    if job.params.superword_from is not None and not merger.exhausted:  # the first superword pairs
        job.writes.wait()
        store.write_next_pairs(merger.next_pairs(STAGE2_NEXT_PAIRS), merger.next_rank)
    job.logged_at = time.monotonic()
    while True:
        merges, stopping = _merge_batch(job, merger)
        if _checkpoint(job, merger, merges, stopping) is not None:
            return
        if stopping:
            raise Interrupted(f"stopped after {merger.next_rank} merges; {store.path} holds them")


def _merge_batch(job: Job, merger: Engine) -> tuple[list, bool]:
    """One batch: sub-steps of at most _SUB_STEP merges until the batch size, the batch time or a
    stop request; sub-steps keep progress lively and let Ctrl-C end a batch early. Every
    ``MERGE_LOG_SECONDS`` the merges so far are logged (``_log_merges``). Returns the batch's
    merges not logged yet and whether a stop was requested."""
    batch = sys.maxsize if job.options.checkpoint_merges is None else job.options.checkpoint_merges
    target, tb = job.params.num_merges, merger.token_bytes
    batch_end = time.monotonic() + job.options.checkpoint_seconds
    log_at = job.logged_at + MERGE_LOG_SECONDS
    # merges a deferred checkpoint left to the next log (see _checkpoint), then this batch's
    merges, job.unlogged = job.unlogged, []
    carried = len(merges)
    logged = 0  # merges[:logged] are in the store
    stopping = False
    while True:
        remaining = min(target - merger.next_rank, batch - (len(merges) - carried))
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


def _log_merges(job: Job, merger: Engine, merges: list, done_reason: str | None = None,
                next_pairs: list[tuple[int, int, int]] | None = None) -> None:
    """Log ``merges`` in the store: ONE small transaction with their rows and the progress, no word
    or pair rows (``Store.write_merge_rows(log_only=True)``); ``done_reason``: and the run's end;
    ``next_pairs``: and these most frequent pairs in ``pair_counts`` (stage 2's checkpoints)."""
    job.writes.wait()  # the last counting flush and the start of merging commit before any merge
    merge_rows, vocab_rows = _merge_rows(merger, merges)
    write_s = job.store.write_merge_rows(merge_rows, vocab_rows, (), (), merges_done=merger.next_rank,
                                         elapsed_s=job.elapsed(), done_reason=done_reason, log_only=True,
                                         next_pairs=next_pairs)
    job.logged_at = time.monotonic()
    job.emit(stage="merge_log", phase="merging", done=merger.next_rank, total=job.params.num_merges,
             write_s=write_s, **job.store.wal)
    if done_reason is None:
        job.checkpointed(merger.next_rank)


def _checkpoint_deferred(job: Job, merger: Engine, merges: list, reason: str | None, stopping: bool) -> bool:
    """Whether a reader pins the WAL, so that the checkpoint is deferred: then only what a resume
    needs is written (see wal_watch): the merges, and the run's end (``reason``), in a log; at most
    one log every ``MERGE_LOG_SECONDS`` however small the batches (each log grows the WAL), the
    merges otherwise left to the next (``job.unlogged``)."""
    if not job.watch.blocked("checkpoint" if reason is None else "final checkpoint", "merging"):
        return False
    if reason is not None or stopping or time.monotonic() >= job.logged_at + MERGE_LOG_SECONDS:
        _log_merges(job, merger, merges, reason)
    else:
        job.unlogged = merges
    return True


def _checkpoint(job: Job, merger: Engine, merges: list, stopping: bool = False) -> str | None:
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
    if _checkpoint_deferred(job, merger, merges, reason, stopping):
        return reason
    if not final and job.params.superword_from is not None:
        # Why only a log in stage 2 (a superword store, docs/superword.md): its words are phrases,
        # nearly one per occurrence, and a full checkpoint wrote every word's tokens and every live
        # pair (1 GB of OWT-like text: 6.6 M words, tens of millions of pairs, 115 s and 1 GB of
        # rows in memory for the first); a resume replays all the logged merges on the words'
        # bytes instead, which costs what building the engine did (``load_engine``, state 0).
        # The most frequent pairs go with it, for people (STAGE2_NEXT_PAIRS).
        _log_merges(job, merger, merges, next_pairs=merger.next_pairs(STAGE2_NEXT_PAIRS))
        return None
    if job.pairs_unwritten and not final:
        merger.forget_stored_pairs()  # the store holds none: this checkpoint writes them all
    job.pairs_unwritten = False
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
    job.logged_at = time.monotonic()
    if final and job.params.superword_from is not None:
        stage2_words.remove(job.store.path)  # a finished store is never resumed from it
    job.emit(stage="checkpoint", phase="merging", done=merger.next_rank, total=target,
             words=len(word_rows), pairs=len(deletes) + len(inserts) + len(updates), write_s=write_s,
             **job.store.wal)  # wal_bytes, wal_blocked: a reader keeping the WAL from being emptied
    if not final:
        job.checkpointed(merger.next_rank)  # the end's call is train's, once the result is read
    return reason
