"""The map step on threads: chunks or units counted in parallel (the GIL released while scanning),
their counts reduced in order (``FlushBuffer``, ``add_counts``), progress ticks while waiting.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from itertools import islice

from ..native import (
    ChunkCounts,
    WordCounter,
    native_count_chunk,
)
from ..text.pretokenize import (
    PretokenSpec,
    native_scanner,
)
from ..text.units import unit_blocks
from .count import (
    FlushBuffer,
    RangeTask,
    UnitTask,
    block_specials,
    count_block,
    count_chunk_task,
    count_into,
    native_counts,
)


def count_chunks_threaded(tasks: Sequence[RangeTask], workers: int,
                          task: Callable[[RangeTask], tuple] = count_chunk_task,
                          into: FlushBuffer | None = None) -> Iterator[tuple]:
    """``task`` (``count_chunk_task`` or ``count_chunk_native_task``) over ``tasks`` on ``workers``
    threads, yielded in completion order.

    Both counters release the GIL while they scan (native code; `regex` with concurrent=True):
    threads share the process, so nothing is pickled and no interpreter is spawned. At most
    ``2 * workers`` chunks are in flight, so memory stays bounded however slowly the consumer
    writes. When the consumer stops early (an exception, or ``close()``), chunks not yet started
    are cancelled and running ones finish (a chunk takes well under a second); no thread outlives
    the generator.

    With ``into``, each thread also adds its chunk's counts into that buffer (the reduce step,
    done where the counts are, not by the one consuming thread) and yields ``(chunk id, None,
    pre-tokens)``.
    """
    if into is not None:
        task = functools.partial(count_into, task, into)
    queue = iter(tasks)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bpe-count") as pool:
        running: set[Future] = {pool.submit(task, t) for t in islice(queue, 2 * workers)}
        try:
            while running:
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for fut in finished:
                    nxt = next(queue, None)
                    if nxt is not None:
                        running.add(pool.submit(task, nxt))
                    yield fut.result()
        finally:
            for fut in running:
                fut.cancel()


def count_units_threaded(tasks: Sequence[UnitTask],
                         workers: int) -> Iterator[tuple[int, ChunkCounts | WordCounter, int]]:
    """The native map step over work units (``UnitTask``: each its unit, pre-tokenization spec and
    block size), yielding ``(unit id, counts, pre-tokens)`` per unit as units complete.

    Why readers apart from counters: reading a unit (decompressing, parsing JSON, reading
    parquet) is sequential within the unit and partly holds the GIL, while counting a block
    releases it. ``workers`` reader threads each read one unit at a time and hand its blocks to
    ``workers`` counting threads without waiting for them, so reading the next unit overlaps
    counting this one, and one big compressed file still keeps every core counting. This thread
    sums each unit's block counts (a ``WordCounter`` when it has several) and yields a unit only
    once it is whole: only whole units reach the caller, which makes them durable. A block holds
    one of ``2 * workers`` slots from being read until its counts are summed, so memory stays
    bounded. Stopping early (an exception, ``close()``) stops the readers at their next block; no
    thread outlives the generator.
    """
    slots = threading.Semaphore(2 * workers)
    state: dict[int, _UnitCounts] = {t.id: _UnitCounts() for t in tasks}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bpe-count") as counters, \
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bpe-read") as readers:
        reader = _UnitReader(counters, slots)
        futures = [readers.submit(reader.read, t) for t in tasks]
        try:
            while state:
                cid, what, value = reader.events.get()
                u = state[cid]
                if what == "error":
                    raise value
                if what == "read":
                    u.read = value
                else:
                    try:
                        u.add(value.result())
                    finally:
                        slots.release()
                if u.whole:
                    del state[cid]
                    yield (cid, *u.result())
        finally:
            reader.stopping.set()
            for fut in futures:
                fut.cancel()


class _UnitReader:
    """``count_units_threaded``'s readers: each reads one unit at a time and hands its blocks to the
    counting threads, a block holding one of the ``slots`` until its counts are summed; what
    happens is put on ``events`` as ``(chunk id, "block" | "read" | "error", value)``."""

    def __init__(self, counters: ThreadPoolExecutor, slots: threading.Semaphore) -> None:
        import queue

        self.counters, self.slots = counters, slots
        self.stopping = threading.Event()
        self.events: queue.SimpleQueue = queue.SimpleQueue()

    @staticmethod
    def count(block: bytes, specials: list[bytes], max_bytes: int | None, scanner: str) -> ChunkCounts:
        return native_count_chunk(block, specials, max_bytes or 0, scanner)

    def read(self, task: UnitTask) -> None:
        cid, unit, spec = task.id, task.unit, task.spec
        specials = block_specials(spec.special_tokens, unit.has_documents)
        scanner = native_scanner(spec.pattern)
        n = 0
        try:
            for block in unit_blocks(unit, spec, task.block_size):
                while not self.slots.acquire(timeout=0.1):
                    if self.stopping.is_set():
                        return
                if self.stopping.is_set():
                    self.slots.release()
                    return
                fut = self.counters.submit(self.count, block, specials, spec.max_pretoken_bytes, scanner)
                fut.add_done_callback(lambda f, cid=cid: self.events.put((cid, "block", f)))
                n += 1
                del block
            self.events.put((cid, "read", n))
        except BaseException as exc:  # noqa: BLE001 - raised by the consumer
            self.events.put((cid, "error", exc))


class _UnitCounts:
    """One unit's counts as its blocks complete: summed (a ``WordCounter`` once there are two), its
    pre-tokens, the blocks counted and, once its reader is done, the blocks it read."""

    __slots__ = ("counts", "n", "blocks", "read")

    def __init__(self) -> None:
        self.counts: ChunkCounts | WordCounter | None = None
        self.n = 0
        self.blocks = 0
        self.read: int | None = None

    def add(self, counts: ChunkCounts) -> None:
        self.n += counts.total
        self.blocks += 1
        if self.counts is None:
            self.counts = counts
            return
        if not isinstance(self.counts, WordCounter):
            first = WordCounter()
            first.add(self.counts)
            self.counts = first
        self.counts.add(counts)

    @property
    def whole(self) -> bool:
        """Whether every block the reader read is counted (only whole units reach the caller)."""
        return self.read is not None and self.blocks == self.read

    def result(self) -> tuple[ChunkCounts | WordCounter, int]:
        return (self.counts if self.counts is not None else WordCounter()), self.n


def count_blocks_ordered(blocks: Iterator[tuple[bytes, object]], workers: int, spec: PretokenSpec, documents: bool
                         ) -> Iterator[tuple[object, ChunkCounts | Counter[bytes], int]]:
    """``(mark, counts, pre-tokens)`` per ``(block, mark)`` of a stream, in the stream's order, split
    as ``spec`` says (``documents``: the blocks join documents with ``DOC_SEP``).

    Natively, blocks are counted on ``workers`` threads (GIL released) with at most
    ``2 * workers`` in flight. In order, so that every mark the caller commits covers exactly
    the blocks before it. A ``(None, None)`` item (see ``ticking``) passes through as
    ``(None, None, 0)`` once the blocks before it are counted."""
    from collections import deque

    special_tokens, pattern, max_pretoken_bytes = spec.special_tokens, spec.pattern, spec.max_pretoken_bytes
    if not native_counts(pattern):
        for block, mark in blocks:
            if block is None:
                yield None, None, 0
                continue
            counts = count_block(block, special_tokens, pattern, documents, max_pretoken_bytes)
            yield mark, counts, sum(counts.values())
        return
    specials = block_specials(special_tokens, documents)
    scanner = native_scanner(pattern)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bpe-count") as pool:
        pending: deque[tuple[Future, object]] = deque()
        try:
            for block, mark in blocks:
                if block is None:  # the stream is slow: hand over what is counted, then the tick
                    while pending:
                        fut, m = pending.popleft()
                        counts = fut.result()
                        yield m, counts, counts.total
                    yield None, None, 0
                    continue
                pending.append((pool.submit(native_count_chunk, block, specials, max_pretoken_bytes or 0, scanner),
                                mark))
                del block
                while pending and (len(pending) > 2 * workers or pending[0][0].done()):
                    fut, m = pending.popleft()
                    counts = fut.result()
                    yield m, counts, counts.total
            while pending:
                fut, m = pending.popleft()
                counts = fut.result()
                yield m, counts, counts.total
        finally:
            for fut, _ in pending:
                fut.cancel()


def ticking(items: Iterator, seconds: float) -> Iterator:
    """``items``, read in a background thread, with ``(None, None)`` whenever none came for
    ``seconds``: so a consumer of a slow stream (a pipe that pauses) still commits what it has
    and notices a stop request. The reader is a daemon thread: one blocked on a read that never
    returns does not keep the process alive."""
    import queue

    q: queue.Queue = queue.Queue(maxsize=2)
    done = object()
    quit_ = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                while not quit_.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if quit_.is_set():
                    return
            q.put((done, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer, raised there
            q.put((done, exc))

    threading.Thread(target=produce, name="bpe-stream-read", daemon=True).start()
    try:
        while True:
            try:
                item, exc = q.get(timeout=seconds)
            except queue.Empty:
                yield None, None
                continue
            if item is done:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        quit_.set()
