"""Step 3 of the recipe: count. Pre-tokenize and count words per chunk, in parallel (threads, the
native counter, or Ray); each flush is one transaction that adds the counts and marks its chunks
counted, so no chunk is counted twice. A stream (stdin, an iterable) is counted as it is read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence

from ..counting.count import (
    FlushBuffer,
    RangeTask,
    UnitTask,
    add_counts,
    count_chunk_native_task,
    count_chunk_task,
    count_unit_task,
    native_counts,
    new_word_counts,
    release_chunk_memory,
)
from ..counting.parallel import count_blocks_ordered, count_chunks_threaded, count_units_threaded, ticking
from ..errors import InputError, Interrupted
from ..native import WordCounter
from ..store.counting_rows import StreamMark
from ..store.params import RunParams
from ..store.store import Store
from ..text.fingerprint import changed_since_planned
from ..text.inputs import unit_of
from ..text.pretokenize import describe_pattern
from ..text.sources import Source
from ..text.streams import Stream
from .job import Job

#: Counting flushes at most every ``count_flush_seconds`` (``TrainOptions``), and sooner once it
#: has counted this share of the bytes still to count since the last flush, and at least
#: ``COUNT_FLUSH_MIN_BYTES`` (see ``_CountWriter.due``): what a kill loses.
COUNT_FLUSH_LOSS = 0.05
COUNT_FLUSH_MIN_BYTES = 256 << 20
#: While counting, a progress event at least this often (seconds), even when a unit takes longer
#: (``_heartbeat``).
HEARTBEAT_S = 1.0


def run_count(job: Job) -> None:
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
    job.remove_if_refused = False  # every input read: the store is kept (nothing to train on, below)
    if not job.fresh_words:  # else the flush being written holds words
        job.writes.wait()
        _check_something_counted(job.store, job.params)


@contextlib.contextmanager
def _heartbeat(job: Job, every_s: float = HEARTBEAT_S) -> Iterator[None]:
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


def _count_map(job: Job, sources: Sequence[Source], todo: Sequence) -> tuple[Iterable, FlushBuffer,
                                                                              Callable[[], dict]]:
    """The map step over the work units ``todo`` of input files: ``(unit id, counts, pre-tokens)``
    as units are counted (counts None: the counting thread added them to the buffer itself), the
    buffer the reduce step adds them to, and the extra fields of counting events.
    ``count_engine="ray"`` counts them as Ray tasks."""
    params, workers = job.params, job.options.workers
    # plain text cut into byte ranges: the map step reads its range itself (count_chunk*_task);
    # other kinds go through bpe_store.text.inputs' readers (count_units_threaded, count_unit_task)
    plain = all(c.kind == "range" and sources[c.source_id].format == "text" for c in todo)
    spec = params.pretoken_spec
    if plain:
        tasks = [RangeTask(c.id, sources[c.source_id].path, c.start, c.end, spec) for c in todo]
    else:
        tasks = [UnitTask(c.id, unit_of(sources[c.source_id], c.kind, c.start, c.end, c.part), spec,
                          job.options.chunk_size) for c in todo]
    # native: chunk counts stay in C++ (ChunkCounts summed into a WordCounter), so Python objects
    # are made only at a flush and the GIL is free while threads count
    native = native_counts(params.pattern)
    task = (count_chunk_native_task if native else count_chunk_task) if plain else count_unit_task
    if job.options.count_engine == "ray":
        from ..counting.ray_count import RayCounter

        # a counting tree (ray_count): node counters count and sum the units, the buffer's take
        # brings their sums in; its events add the units in flight, the workers and the nodes
        results = RayCounter(tasks, job.options.ray_address, workers)
        return results, results.buffer, results.status
    buffer = FlushBuffer(native)
    if native and not plain:
        return count_units_threaded(tasks, workers), buffer, dict
    if workers > 1 and len(tasks) > 1:
        # Both map steps release the GIL while they scan: the native counter, and `regex` with
        # concurrent=True (pretokenize.count_words). So threads give the parallelism of processes
        # without pickling counts back or spawning interpreters, which hung when run from
        # `python -` (spawned workers re-ran __main__, crashed, were respawned) and cost
        # ~1 s of imports each (bench/RESULTS-count.md). Ctrl-C reaches only this thread, which
        # decides how to stop.
        return count_chunks_threaded(tasks, min(workers, len(tasks)), task, into=buffer), buffer, dict
    return map(task, tasks), buffer, dict


def _count_reduce(job: Job, results: Iterable, buffer: FlushBuffer, status: Callable[[], dict],
                  size_of: dict[int, int], done: int, total: int) -> None:
    """The reduce step: the map step's ``results`` go into ``buffer`` (if their counting thread did
    not add them itself), flushed with the marks of the units it holds every
    ``count_flush_seconds``, on a stop request and at the end; the last flush is left in flight."""
    # count_flush_seconds=0 flushes every unit before the next, in line (tests kill between
    # units), except with Ray, whose driver must never stop feeding the cluster
    ray = job.options.count_engine == "ray"
    writer = _CountWriter(job, total, done, background=job.options.count_flush_seconds > 0 or ray, by_bytes=not ray)
    try:
        last_flush = time.monotonic()
        for cid, counts, n, *digest in results:  # digest: the unit's fingerprint, when counting read it here
            if counts is not None:
                buffer.add(cid, counts, n, *digest)
            done += size_of[cid] if n >= 0 else -size_of[cid]  # -1: a Ray unit lost, counted again
            job.emit(stage="counting", done=done, total=total, **status())
            writer.poll()
            stopping = job.stopping()
            if stopping:
                job.writes.wait()
                if buffer and job.watch.blocked("counting flush", "counting") and not job.watch.room():
                    raise Interrupted(f"stopped while counting; a reader holds an old snapshot of {job.store.path}, "
                                      "so the counts since its last flush were not written (it keeps the chunks "
                                      "counted before)")
            if buffer and writer.flush_now(last_flush, done, buffer) or stopping:
                writer.flush(*buffer.take(), done, final=False, wait=stopping)
                last_flush = time.monotonic()
                if stopping:
                    raise Interrupted(f"stopped while counting; {job.store.path} keeps the counted chunks")
        if buffer:
            job.writes.wait()
            job.watch.write_or_wait("counting flush", "counting", lost=_COUNTS_LOST)
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
    waits; the last flush is left in flight for ``run_pairs`` and ``run_merge`` (see ``_Writes``).
    """

    def __init__(self, job: Job, total: int, done: int = 0, background: bool = True, by_bytes: bool = True):
        self.job, self.total, self.background, self.by_bytes = job, total, background, by_bytes
        self.write_s = 0.0  # how long the last flush took
        self.flushed_at = done  # bytes counted when the last flush began (or this session began)
        self._sources: list[Source] | None = None  # the store's inputs, and each unit's input id
        self._source_of: dict[int, int] = {}

    def flush_now(self, last_flush: float, done: int, buffer: FlushBuffer) -> bool:
        """Whether to flush now: when ``due`` says so, unless a reader pins the WAL and the buffer
        holds fewer than the memory budget's words (``WalWatch.memory_words``; with more, the flush
        goes into the WAL while it is below its budget, else it waits for the reader to leave)."""
        if not self.due(last_flush, done):
            return False
        self.job.writes.wait()  # the store's connection is free (a no-op unless count_flush_seconds is 0)
        if not self.job.watch.blocked("counting flush", "counting"):
            return True
        if buffer.words() < self.job.watch.memory_words:
            return False
        self.job.watch.write_or_wait("counting flush", "counting", lost=_COUNTS_LOST)
        return True

    def due(self, last_flush: float, done: int) -> bool:
        """Whether a flush is due (never while one is in flight): ``count_flush_seconds`` after the
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
        if self.job.options.count_flush_seconds == 0:
            return True
        if self.job.writes.busy():
            return False
        # Why no bytes rule on Ray (by_bytes False): the driver's cost is per distinct word of a flush window, so
        # windows of fixed bytes would make a faster cluster flush more often, until the driver
        # is its cap again; by time, a kill loses about two windows of the cluster's time
        if (self.by_bytes
                and done - self.flushed_at >= max(COUNT_FLUSH_MIN_BYTES, COUNT_FLUSH_LOSS * (self.total - done))):
            return True
        wait = max(self.job.options.count_flush_seconds, 2 * self.write_s)
        return time.monotonic() - last_flush >= wait

    def check_inputs(self, marks: list[tuple[int, int, bytes | None]]) -> None:
        """Refuse to commit units read from an input file that changed since it was planned (or
        since a resume found its content the same): the stat comes after every read of those
        units, so a write during or before one shows in it (``changed_since_planned``)."""
        if self._sources is None:  # fixed while files are counted: read once
            self._sources, self._source_of = self.job.store.sources(), self.job.store.unit_sources()
            for sid, mtime in self.job.touched.items():  # verified by the resume: their time now
                self._sources[sid] = dataclasses.replace(self._sources[sid], mtime_ns=mtime)
        sources = self._sources
        for sid in sorted({self._source_of[m[0]] for m in marks}):
            why = changed_since_planned(sources[sid])
            if why is not None:
                raise InputError(f"{sources[sid].path} changed while training: {why}. The counts read from it "
                                 f"since the last checkpoint were not kept; {self.job.store.path} keeps "
                                 "what was committed before. Put the file back as it was to resume, or "
                                 "--restart to count it again")

    def write(self, delta: Counter[bytes] | WordCounter, marks: list[tuple[int, int, bytes | None]]) -> None:
        t0 = time.monotonic()
        self.job.store.add_word_counts(delta, marks, self.job.elapsed())
        self.write_s = time.monotonic() - t0

    def poll(self) -> None:
        """Report the flush in flight if it has committed meanwhile."""
        self.job.writes.poll()

    def flush(self, delta: Counter[bytes] | WordCounter, marks: list[tuple[int, int, bytes | None]], done: int,
              final: bool, wait: bool) -> None:
        """Write ``delta`` and ``marks``: in the background unless ``wait`` (or there is no background)."""
        job = self.job
        job.writes.wait()
        self.check_inputs(marks)
        self.flushed_at = done
        job.emit(stage="writing", phase="counting", done=done, total=self.total, words=len(delta), final=final)
        if final and hasattr(delta, "row_stream") and job.store.words_are_next_flush():
            job.fresh_words = delta  # the store's words once this commits: the engine starts from it

        def report() -> None:
            job.emit(stage="checkpoint", phase="counting", done=done, total=self.total, **job.store.wal)

        job.writes.submit(self.write, delta, marks, then=report)
        if wait or not self.background:
            job.writes.wait()


#: What a kill loses while counting waits for a reader to leave.
_COUNTS_LOST = "the counts since its last flush are not written yet"


def _check_something_counted(store: Store, params: RunParams) -> None:
    """Refuse to go on when counting found no pre-token at all (the pattern matches none of the
    text, or there is no text outside the special tokens): training would end with 0 merges.

    The store stays as counting left it (phase counting, every chunk counted, no words), so the
    same command fails the same way at once, without counting again; another pattern needs
    ``--restart``.
    """
    if store.has_words():
        return
    raise InputError(
        f"nothing to train on: the pattern {describe_pattern(params.pattern)} matches none of the "
        "inputs' text outside special tokens (0 pre-tokens counted); give another --pattern "
        "with --restart")


def _count_stream(job: Job, stream: Stream, chunk) -> None:
    """Count a stream from where the store says it stands (``streams.Stream.blocks`` checks and
    skips what was counted); each flush commits the counts with the stream's new position, and
    the last one marks the stream counted."""
    store, params, flush_seconds = job.store, job.params, job.options.count_flush_seconds
    source = store.sources()[chunk.source_id]
    native = native_counts(params.pattern)
    blocks = stream.blocks(source, params.pretoken_spec, job.options.chunk_size)
    # read in a thread, with ticks while the stream pauses: the counts so far are still committed
    # every `flush_seconds`, and a stop request is heard while a pipe is silent
    results = count_blocks_ordered(ticking(blocks, min(flush_seconds, 1.0) or 0.05), job.options.workers,
                                   params.pretoken_spec, documents=stream.format != "text")
    at = (source.size, source.documents or 0, source.digest)
    delta = new_word_counts(native)
    pretokens = 0

    def flush(finished: bool) -> None:
        store.add_word_counts(delta, [], job.elapsed(), StreamMark(chunk.source_id, chunk.id, at[0], at[1], at[2],
                                                                   pretokens, finished))
        job.emit(stage="checkpoint", phase="counting", done=at[0], total=None, documents=at[1])

    try:
        last_flush, flushed = time.monotonic(), at
        for pos, counts, n in results:
            if pos is not None:
                add_counts(delta, counts)
                pretokens += n
                at = (pos.bytes, pos.documents, pos.sha256)
                job.emit(stage="counting", done=pos.bytes, total=None, documents=pos.documents)
            if _stream_flush_now(job, stream, last_flush, job.stopping(), at, flushed, len(delta)):
                flush(False)
                delta, pretokens, last_flush, flushed = new_word_counts(native), 0, time.monotonic(), at
                if job.stopping():
                    raise Interrupted(
                        f"stopped while counting {stream.name}; {store.path} holds its first {at[1]} documents "
                        f"({at[0]} bytes): give the same stream again to resume from there")
        _warn_if_nothing_new(job, stream.name, source, at)
        job.watch.write_or_wait("counting flush", "counting", lost=_COUNTS_LOST)
        flush(True)
    finally:
        results.close()


def _warn_if_nothing_new(job: Job, name: str, source: Source, at: tuple[int, int, str]) -> None:
    """A ``warning`` event when a stream given again ended exactly where the part counted before
    ends (``at``: bytes, documents, SHA-256 read). The store cannot know how long the stream was
    when it was counted: if it was longer, its rest is missing from this run."""
    if source.size and at[0] == source.size:
        job.emit(stage="warning", phase="counting", done=at[0], total=None, documents=at[1],
                 message=f"warning: {name} ended where the part counted before ends ({at[0]} bytes, "
                         f"{at[1]} documents): nothing new was read. If it was longer when it was counted, "
                         "the rest is missing from this run: train again with --restart and the whole stream")


def _stream_flush_now(job: Job, stream: Stream, last_flush: float, stopping: bool, at: tuple[int, int, str],
                      flushed: tuple[int, int, str], words: int) -> bool:
    """Whether a stream's counts are flushed now: ``count_flush_seconds`` after the last flush
    (``flushed``: where it stood) if there is more (``at``), or on a stop; unless a reader pins the
    WAL: the counts (``words`` of them) are then kept in memory up to the memory budget's words
    (then they go into the WAL while it is below its budget, else it waits for the reader), and a
    stop with no room in the WAL raises Interrupted, saying what it loses."""
    due = time.monotonic() - last_flush >= job.options.count_flush_seconds and at != flushed
    if not (at != flushed and (due or stopping)) or not job.watch.blocked("counting flush", "counting"):
        return due or stopping
    if stopping and not job.watch.room():
        raise Interrupted(
            f"stopped while counting {stream.name}; a reader holds an old snapshot of {job.store.path}, so "
            f"the counts since its last flush were not written: it holds the stream's first "
            f"{flushed[1]} documents ({flushed[0]} bytes)")
    if stopping:
        return True  # into the WAL: it has room
    if words < job.watch.memory_words:
        return False  # kept in memory while the reader stays
    job.watch.write_or_wait("counting flush", "counting", lost=_COUNTS_LOST)
    return True
