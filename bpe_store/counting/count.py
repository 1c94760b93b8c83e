"""Counting: plan a corpus into chunks, validate and fingerprint it, and count words per chunk.

Counting is a map step (a byte range of a file -> ``{word: count}``) and a reduce step (add the
counts into the store). Nothing here touches the store; ``train`` drives both and makes each
reduce durable, so a killed run never counts a chunk twice.

For every named pattern the map step is native (``bpe_store._core.count_words``, identical to
the ``regex`` path, see tests/test_scanner.py and tests/test_pattern_scanners.py); a user's own
regex goes through ``regex`` with ``concurrent=True``. Both release the GIL while scanning, so
``train`` runs either on threads (``count_chunks_threaded``); no worker processes.

Chunk boundaries never change the result. Where a chunk may start is decided by the one native
splitter (``pretokenize.native_splitter``; the rules and their proofs are in native/splitter.h):

* at a special token that no other occurrence overlaps from the left (the full left-to-right
  special-token scan finds it), or
* for the GPT-2 pattern, between two characters that end one pre-token and start the next
  whatever surrounds them (a non-whitespace character, not an apostrophe, then whitespace or a
  character of another class), outside any special token: English has such points at every
  space, Chinese at its punctuation; for the tiktoken family (GPT-4's, o200k's, Llama 3's,
  Qwen2's patterns), before a space after a non-whitespace character and after such a
  character's newline (a narrower rule);
* for a named pattern, where no such point is near (one pre-token of hundreds of megabytes):
  found by scanning from the chunk's start, inside a pre-token longer than the run's maximum
  pre-token length at one of the points where it is split anyway (``_cut_in_scan``).

A pre-token longer than ``max_pretoken_bytes`` is counted as pieces of at most that many bytes
(``pretokenize.split_long_pretoken``): cut from its own start, so the pieces do not depend on
the chunking either, and no word (nor a chunk, by the rule above) grows with the input.
"""

from __future__ import annotations

import codecs
import functools
import os
import stat
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from itertools import islice
from pathlib import Path

from ..errors import InputError
from .fingerprint import DEFAULT_HASH, digest_file, utf8_tail
from .pretokenize import GPT2_PATTERN, count_words, native_scanner, native_splitter, split_at_specials, split_long_words
from .sources import Source

try:
    from .. import _core
except ImportError:  # pragma: no cover - a source tree without the built extension
    _core = None
if _core is not None:
    # Why not these imports inside the `try`: a core built from older sources (a stale editable
    # build) lacks some of these names, and every native counting path would then fall back to
    # `regex` silently, ~10x slower. A core that is there must have them all: ImportError here.
    from .._core import ChunkCounts, WordCounter
    from .._core import add_counts as _native_add_counts
    from .._core import count_chunk as _native_count_chunk
    from .._core import count_file_range as _native_count_file_range
    from .._core import count_strings as _native_count_strings
    from .._core import count_words as _native_count_words
    from .._core import pack_counts as _native_pack_counts
    from .._core import release_chunk_memory as _native_release_chunk_memory
    from .._core import utf8_valid as _native_utf8_valid
else:  # pragma: no cover - a source tree without the built extension: every pattern goes through `regex`
    ChunkCounts = WordCounter = None  # type: ignore[assignment,misc]
    _native_add_counts = _native_count_chunk = _native_count_words = _native_utf8_valid = _native_count_strings = None
    _native_pack_counts = _native_count_file_range = _native_release_chunk_memory = None

#: Default chunk size: large enough that per-chunk overhead vanishes, small enough that a kill
#: loses little counting and every core gets work.
DEFAULT_CHUNK_SIZE = 8 << 20
_READ_BLOCK = 16 << 20
_SEARCH_WINDOW = 1 << 20
_FIRST_LOOK = 4 << 10


_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(p: Path, mode: int) -> InputError:
    if stat.S_ISDIR(mode):
        return InputError(f"{p}: is a directory; give the files to train on")
    what = next((name for test, name in _FILE_KINDS if test(mode)), "a special file")
    return InputError(f"{p}: is {what}, not a regular file; inputs must be regular files")


def open_regular(path: str | os.PathLike):
    """``open(path, "rb")`` for a regular file only; InputError for anything else.

    Why not plain ``open``: opening a FIFO blocks until a writer comes (and swallows the first
    Ctrl-C), and a device such as /dev/zero has size 0 but never ends. The file is stat'ed before
    it is opened, opened with O_NONBLOCK (which cannot block on a FIFO swapped in meanwhile) and
    checked again on the descriptor, so what is read is what was checked.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(p, st.st_mode)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(p, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def scan_source(path: str | os.PathLike, invalid_utf8: str = "strict", hash: str = DEFAULT_HASH) -> Source:
    """Check one input (exists, a readable non-empty regular file, valid UTF-8 unless
    ``invalid_utf8`` is "replace") and fingerprint it with ``hash`` in the same read
    (``fingerprint.digest_file``). Raises InputError saying where the problem is.

    A file written to while it is read (still being downloaded or appended to) would get a
    fingerprint of neither its old nor its new content: its size and modification time are
    compared after the read with those before, and a change is refused (``_unchanged_while_read``)."""
    p = Path(path)
    with open_regular(p) as f:
        st = os.fstat(f.fileno())
        if st.st_size == 0:
            raise InputError(f"{p}: is empty")
        digest = digest_file(p, f.fileno(), st.st_size, hash, check_utf8=invalid_utf8 == "strict")
    if digest is None:
        _raise_invalid_utf8(p)
    return _unchanged_while_read(p, st, Source(str(p.resolve()), st.st_size, st.st_mtime_ns, digest, hash=hash))


def _unchanged_while_read(p: Path, before: os.stat_result, source: Source) -> Source:
    try:
        after = os.stat(p)
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
    if (after.st_size, after.st_mtime_ns, after.st_ino) != (before.st_size, before.st_mtime_ns, before.st_ino):
        raise InputError(f"{p}: changed while it was being read ({before.st_size} -> {after.st_size} bytes): "
                         "is it still being written? Train once it is complete")
    return source


def _raise_invalid_utf8(p: Path) -> None:
    """Find where ``p`` stops being UTF-8 (the fingerprint's check said it does) and say so."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0
    lines = 1
    with open_regular(p) as f:
        while True:
            try:
                block = f.read(_READ_BLOCK)
            except OSError as exc:
                raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
            final = not block
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(block, final)
            except UnicodeDecodeError as exc:
                at = offset - pending + exc.start
                line = lines + (block[: max(exc.start - pending, 0)].count(b"\n"))
                raise InputError(
                    f"{p}: invalid UTF-8 at byte {at} (line {line}): {exc.reason}; "
                    "fix the file or pass --invalid-utf8 replace") from None
            lines += block.count(b"\n")
            offset += len(block)
            if final:
                raise InputError(f"{p}: changed while it was read (it is UTF-8 now)")


def cut_context(splitter) -> int:
    """Bytes of context a safe cut needs after it (and before it): a special token, or a UTF-8
    character, may go on that far."""
    return max(splitter.max_len, 4)


def _cut_in_scan(f, start: int, target: int, size: int, splitter,
                 max_pretoken_bytes: int | None) -> int | None:
    """A chunk start at or after ``target`` found by scanning from the previous chunk start
    ``start`` (``Splitter.scan_cut``); None if there is none nearby.

    The fallback when no local cut point lies within a window after ``target``: one pre-token of
    hundreds of megabytes. It cuts inside a pre-token longer than ``max_pretoken_bytes`` at one
    of its split points (see plan_cut in native/splitter.h), so such input is still chunked, and
    memory stays bounded by chunk size + window + the maximum pre-token length. Reads at most that much.
    """
    ctx = cut_context(splitter)
    end = min(size, target + _SEARCH_WINDOW + (max_pretoken_bytes or 0) + ctx + 64)
    f.seek(start)
    data = f.read(end - start)
    if len(data) != end - start:
        return None
    if end < size:
        data = data[: len(data) - utf8_tail(data)]  # a character cut off by the read
    # Why valid UTF-8 only: with --invalid-utf8 replace, counting sees U+FFFD where the file
    # has invalid bytes, so offsets inside such stretches would not mean the same thing.
    if not _native_utf8_valid(data):
        return None
    margin = 0 if end == size else ctx + 16  # what the read may have cut off at its end
    q = splitter.scan_cut(data, target - start, max_pretoken_bytes or 0, margin)
    return None if q < 0 else start + q


def _first_cut_near(f, splitter, base: int, pos: int, size: int, ctx: int) -> int | None:
    """The first cut point in ``[pos, pos + _FIRST_LOOK)`` (read from ``base``), or None.

    Why: English has a cut point within a few bytes of any position, so reading the whole
    ``_SEARCH_WINDOW`` (1 MiB) at every chunk boundary copied an eighth of each input for
    nothing (OWT 1 GB: 128 MB). The cut found is the one the full window finds first: the rules
    look ``ctx`` bytes around a point, and the range searched keeps that much after it."""
    f.seek(base)
    data = f.read(_FIRST_LOOK + 2 * ctx)
    hi = min(pos + _FIRST_LOOK, size, base + len(data) - (0 if base + len(data) >= size else ctx))
    q = splitter.first_cut(data, pos - base, hi - base) if hi > pos else -1
    return base + q if q >= 0 else None


def plan_chunks(path: str | os.PathLike, size: int, special_tokens: Sequence[str],
                pattern: str = GPT2_PATTERN, chunk_size: int = DEFAULT_CHUNK_SIZE,
                max_pretoken_bytes: int | None = None) -> list[tuple[int, int]]:
    """Split a file of ``size`` bytes into ``[(start, end)]`` chunks of about ``chunk_size``.

    For a pattern with a native scanner a chunk is at most about ``chunk_size`` + the search
    window + ``max_pretoken_bytes`` long whatever the text, by the fallback ``_cut_in_scan``. Without
    the native core, or for a user's own pattern without special tokens, the file is one chunk."""
    splitter = native_splitter(special_tokens, pattern)
    scanned = native_scanner(pattern) != ""  # a scan from a chunk start can find a cut
    if splitter is None or (not special_tokens and not splitter.has_local_rule):
        return [(0, size)]
    ctx = cut_context(splitter)
    bounds = [0]
    target = chunk_size
    with open_regular(path) as f:
        while target < size:
            found = None
            pos = target
            while found is None and pos < size:
                base = max(pos - ctx, 0)
                if pos == target:  # most windows have a cut in their first bytes: look there first
                    found = _first_cut_near(f, splitter, base, pos, size, ctx)
                    if found is not None:
                        break
                f.seek(base)
                data = f.read(_SEARCH_WINDOW + 2 * ctx)
                # this window's own range; bytes after it are context for the cut rules
                hi = min(pos + _SEARCH_WINDOW, size, base + len(data) - (0 if base + len(data) >= size else ctx))
                q = splitter.first_cut(data, pos - base, hi - base)
                if q >= 0:
                    found = base + q
                elif scanned and pos == target:
                    found = _cut_in_scan(f, bounds[-1], target, size, splitter, max_pretoken_bytes)
                pos += _SEARCH_WINDOW
            if found is None or found >= size:
                break
            bounds.append(found)
            target = found + chunk_size
    bounds.append(size)
    return list(zip(bounds, bounds[1:]))


def count_chunk(path: str, start: int, end: int, special_tokens: Sequence[str], pattern: str,
                invalid_utf8: str = "strict", max_pretoken_bytes: int | None = None) -> tuple[dict[bytes, int], int]:
    """The map step: ``({word bytes: count}, number of pre-tokens)`` of ``path[start:end]``; a
    pre-token longer than ``max_pretoken_bytes`` counts as pieces (``split_long_pretoken``)."""
    data = _read_chunk(path, start, end)
    if native_counts(pattern):
        return _native_count_words(_valid_utf8(data, invalid_utf8), [s.encode("utf-8") for s in special_tokens],
                                   max_pretoken_bytes or 0, native_scanner(pattern))
    text = data.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict")
    counts = regex_count_words(text, special_tokens, pattern, max_pretoken_bytes)
    return dict(counts), sum(counts.values())


def _read_chunk(path: str, start: int, end: int) -> bytes:
    with open_regular(path) as f:
        f.seek(start)
        data = f.read(end - start)
    if len(data) != end - start:
        raise InputError(f"{path}: changed while training (shorter than when the run started)")
    return data


def _valid_utf8(data: bytes, invalid_utf8: str) -> bytes:
    """``data`` as the native counter needs it: valid UTF-8, as the regex path decodes it."""
    # Checking natively keeps the GIL free (a Python decode of 8 MB holds it ~10 ms). On bad
    # input the strict decode raises the same UnicodeDecodeError as the regex path, and
    # "replace" goes through str and back so both paths see the same U+FFFD substitutions.
    if _native_utf8_valid(data):
        return data
    return data.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict").encode("utf-8")


def count_chunk_native(path: str, start: int, end: int, special_tokens: Sequence[str],
                       invalid_utf8: str = "strict", max_pretoken_bytes: int | None = None,
                       pattern: str = GPT2_PATTERN) -> ChunkCounts:
    """``count_chunk`` for a pattern with a native scanner, keeping the counts native for a
    ``WordCounter``.

    The range is read natively into memory reused from chunk to chunk (``count_file_range``;
    why: see ChunkMemory in native/scanner.cpp); only a range that is not valid UTF-8, or a file
    grown shorter, takes the path through a bytes object, which reports it or replaces."""
    specials = [s.encode("utf-8") for s in special_tokens]
    scanner = native_scanner(pattern)
    with open_regular(path) as f:
        counts = _native_count_file_range(f.fileno(), start, end - start, specials, max_pretoken_bytes or 0, scanner)
    if counts is not None:
        return counts
    data = _valid_utf8(_read_chunk(path, start, end), invalid_utf8)
    return _native_count_chunk(data, specials, max_pretoken_bytes or 0, scanner)


def release_chunk_memory() -> None:
    """Free the memory native counting keeps for its next chunk (``count_chunk_native``): called
    when counting ends, so that merging does not carry it."""
    if _native_release_chunk_memory is not None:
        _native_release_chunk_memory()


def count_chunk_native_task(args: tuple) -> tuple[int, ChunkCounts, int]:
    """``count_chunk_native`` for a pool, same tuples as ``count_chunk_task``."""
    cid, path, start, end, special_tokens, pattern, invalid_utf8, *max_bytes = args
    counts = count_chunk_native(path, start, end, special_tokens, invalid_utf8, max_bytes[0] if max_bytes else None,
                                pattern)
    return cid, counts, counts.total


def count_unit_packed(task: tuple) -> tuple[int, bytes, int]:
    """The map step for another process or machine: a unit -> ``(unit id, packed counts, pre-tokens)``.

    ``task`` is the small, picklable unit description a local pool takes: that of
    ``count_chunk_task`` (chunk id, path, start, end, specials, pattern, UTF-8 policy, max
    pre-token bytes) for a byte range of a text file, or that of ``count_unit_task`` (chunk id,
    ``inputs.Unit``, specials, pattern, policy, block size, max pre-token bytes) for any input
    kind. The unit is read here, where it runs, so the input must be readable at the same path.
    The counts come back as one bytes object (``ChunkCounts.pack``: ~8 bytes per distinct word)
    for ``WordCounter.add_packed``, never as a dict per word. Needs the native core; any pattern
    (a user's own regex counts through ``regex``).
    """
    cid, counts, n = count_unit_counts(task)
    return cid, counts if isinstance(counts, bytes) else counts.pack(), n


def count_unit_counts(task: tuple) -> tuple[int, ChunkCounts | WordCounter | bytes, int]:
    """``count_unit_packed`` without the packing where there is nothing to pack: the native counts
    (``ChunkCounts``, or a ``WordCounter`` for a unit read in blocks), packed bytes only for the
    ``regex`` path's dict; any of them goes into a ``WordCounter`` by ``add_counts``. For a process
    that sums many units itself (a Ray node counter, bpe_store.counting.ray_node)."""
    if not isinstance(task[1], str):  # a unit of any input kind, read block by block (bpe_store.counting.inputs)
        if not native_counts(task[3]):
            cid, words, n = count_unit_task(task)
            return cid, _native_pack_counts(words), n
        cid, unit, special_tokens, pattern, invalid_utf8, block_size, *rest = task
        total, n = _count_unit_native(unit, special_tokens, pattern, invalid_utf8, block_size,
                                      rest[0] if rest else None)
        return cid, total, n
    if native_counts(task[5]):
        return count_chunk_native_task(task)
    cid, words, n = count_chunk_task(task)
    return cid, _native_pack_counts(words), n


def new_word_counts(native: bool) -> Counter[bytes] | WordCounter:
    """An empty in-memory reduce buffer: native (``WordCounter``) for native chunk counts."""
    return WordCounter() if native else Counter()


#: Matches counted at once by ``regex_count_words``: memory for the str objects stays ~4 MB
#: (not one list of every match of an 8 MB chunk, ~100 MB), and a batch still amortizes a call.
_REGEX_COUNT_BATCH = 1 << 16


def regex_count_words(text: str, special_tokens: Sequence[str], pattern: str,
                      max_pretoken_bytes: int | None = None) -> Counter[bytes]:
    """``pretokenize.count_words`` for a pattern without a native scanner (a user's own regex):
    ``regex`` finds the pre-tokens, the native core counts them (``count_strings``).

    Why: ``Counter(findall(...))`` hashed every match as a Python str with the GIL held, ~40 % of
    this path's CPU, so counting threads could not overlap it; ``count_strings`` holds the GIL
    only to take each match's UTF-8 view. The same counts (tests/test_pattern_scanners.py)."""
    if _native_count_strings is None:
        return count_words(text, special_tokens, pattern, max_pretoken_bytes)
    import regex

    compiled = regex.compile(pattern)  # `regex` caches compiled patterns: no cost per call
    total, found = WordCounter(), []
    for piece in split_at_specials(text, special_tokens):
        found += compiled.findall(piece, concurrent=True)  # concurrent: matching releases the GIL
        if len(found) >= _REGEX_COUNT_BATCH:
            total.add(_native_count_strings(found))
            found = []
    total.add(_native_count_strings(found))
    return split_long_words(Counter(dict(total.items())), max_pretoken_bytes)


def native_counts(pattern: str) -> bool:
    """Whether ``count_chunk`` counts ``pattern`` natively (GIL released, so threads scale)."""
    return native_scanner(pattern) != "" and _native_count_words is not None


def count_chunk_task(args: tuple) -> tuple[int, dict[bytes, int], int]:
    """``count_chunk`` for a pool: ``(chunk id, path, start, end, specials, pattern, policy[,
    max pre-token bytes])``."""
    cid, *rest = args
    counts, n = count_chunk(*rest)
    return cid, counts, n


def count_chunks_threaded(tasks: Sequence[tuple], workers: int,
                          task: Callable[[tuple], tuple] = count_chunk_task,
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
        task = functools.partial(_count_into, task, into)
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


def _count_into(task: Callable[[tuple], tuple], into: FlushBuffer, t: tuple) -> tuple[int, None, int]:
    """``task(t)``, its counts added into ``into`` on this thread."""
    cid, counts, n = task(t)
    into.add(cid, counts, n)
    return cid, None, n


class PackedCounts:
    """A flush's word counts as packed buffers (``WordCounter.pack`` / ``pack_parts``): what a Ray
    driver receives from the counting tree, written as they are (``Store.add_word_counts``:
    ``WordIds.add_packed``), never summed into a ``WordCounter`` first. A word may be in several
    buffers (its counts add up)."""

    def __init__(self, parts: list[bytes] | None = None):
        self.parts: list[bytes] = parts if parts is not None else []

    def __len__(self) -> int:
        """Words in all buffers (a word in two counts twice), from each buffer's header."""
        total = 0
        for p in self.parts:
            v, shift, i = 0, 0, 4
            while True:  # varint(n) after the 4-byte magic (scanner.cpp, pack_entries)
                b = p[i]
                v |= (b & 0x7F) << shift
                i, shift = i + 1, shift + 7
                if not b & 0x80:
                    break
            total += v
        return total

    def counter(self) -> WordCounter:
        """The same counts summed into one ``WordCounter``."""
        total = WordCounter()
        for p in self.parts:
            total.add_packed(p)
        return total


class FlushBuffer:
    """The reduce step's buffer: the word counts of the units counted since the last flush, and
    those units' marks ``(unit id, pre-tokens)``, always together.

    A unit's counts are added and its mark recorded under one lock, by whichever thread counted
    it, and ``take`` swaps both out at once: a flush then holds exactly the counts of the units it
    marks counted, however the threads interleave. Why the counting threads add (not only the one
    reading their results): on N cores one consumer adding ~90 k words per 8 MB chunk would be the
    ceiling of counting throughput, and at the end of counting it was the critical path.
    """

    def __init__(self, native: bool):
        self.native = native
        self._lock = threading.Lock()
        self._counts = new_word_counts(native)
        self._marks: list[tuple[int, int]] = []

    def add(self, cid: int, counts: dict[bytes, int] | ChunkCounts | bytes, n: int) -> None:
        """Add one unit's counts (``add_counts``) and its mark."""
        with self._lock:  # a native add releases the GIL: the other threads go on meanwhile
            add_counts(self._counts, counts)
            self._marks.append((cid, n))

    def take(self) -> tuple[Counter[bytes] | WordCounter, list[tuple[int, int]]]:
        """The counts and marks so far, leaving the buffer empty."""
        with self._lock:
            out = self._counts, self._marks
            self._counts, self._marks = new_word_counts(self.native), []
        return out

    def __bool__(self) -> bool:
        """Whether any unit was added since the last ``take``."""
        return bool(self._marks)

    def words(self) -> int:
        """The distinct words held (what the buffer's memory grows with)."""
        with self._lock:
            return len(self._counts)


def add_counts(total: Counter[bytes] | WordCounter, counts: dict[bytes, int] | ChunkCounts | bytes) -> None:
    """The reduce step in memory: ``total += counts`` (native code when the core is built)."""
    if WordCounter is not None and isinstance(total, WordCounter):
        if isinstance(counts, bytes):  # packed by ``count_unit_packed`` in another process
            total.add_packed(counts)
        else:
            total.add(counts)  # GIL released: counting threads keep running
    elif _native_add_counts is not None:
        _native_add_counts(total, counts)
    else:
        total.update(counts)


# -- work units of every input kind (see bpe_store.counting.inputs) ----------------------------------------


def _block_specials(special_tokens: Sequence[str], documents: bool) -> list[bytes]:
    """The native splitter's specials for a block: with ``DOC_SEP`` when it joins documents."""
    from .inputs import DOC_SEP

    return [s.encode("utf-8") for s in special_tokens] + ([DOC_SEP] if documents else [])


def count_block(block: bytes, special_tokens: Sequence[str], pattern: str,
                documents: bool, max_pretoken_bytes: int | None = None) -> Counter[bytes]:
    """The ``regex`` map step on one block (valid UTF-8; documents joined by ``DOC_SEP``)."""
    from .inputs import DOC_SEP

    counts: Counter[bytes] = Counter()
    for doc in block.split(DOC_SEP) if documents else [block]:
        counts.update(regex_count_words(doc.decode("utf-8"), special_tokens, pattern, max_pretoken_bytes))
    return counts


def _count_unit_native(unit: object, special_tokens: Sequence[str], pattern: str, invalid_utf8: str,
                       block_size: int, max_bytes: int | None) -> tuple[WordCounter, int]:
    """A whole unit counted natively (``native_counts``): its blocks summed in a ``WordCounter``."""
    from .inputs import unit_blocks

    specials = _block_specials(special_tokens, unit.has_documents)  # as count_units_threaded
    scanner = native_scanner(pattern)
    words, n = WordCounter(), 0
    for block in unit_blocks(unit, special_tokens, pattern, invalid_utf8, block_size, max_bytes):
        counts = _native_count_chunk(block, specials, max_bytes or 0, scanner)
        n += counts.total
        words.add(counts)
    return words, n


def count_unit_task(args: tuple) -> tuple[int, dict[bytes, int], int]:
    """A whole work unit counted in this process, for a process pool or another machine (the
    ``Unit`` is a small picklable description; the worker reads the file itself):
    ``(chunk id, Unit, specials, pattern, policy, block size[, max pre-token bytes])`` -> ``(chunk id, {word: count},
    pre-tokens)``. Natively for a pattern with a native scanner (blocks summed in a
    ``WordCounter``), through ``regex`` otherwise; the same counts either way."""
    from .inputs import unit_blocks

    cid, unit, special_tokens, pattern, invalid_utf8, block_size, *rest = args
    max_bytes = rest[0] if rest else None
    if native_counts(pattern):
        words, n = _count_unit_native(unit, special_tokens, pattern, invalid_utf8, block_size, max_bytes)
        return cid, dict(words.items()), n
    blocks = unit_blocks(unit, special_tokens, pattern, invalid_utf8, block_size, max_bytes)
    total: Counter[bytes] = Counter()
    for block in blocks:
        total.update(count_block(block, special_tokens, pattern, unit.has_documents, max_bytes))
    return cid, dict(total), sum(total.values())


def count_units_threaded(tasks: Sequence[tuple[int, object]], workers: int, special_tokens: Sequence[str],
                         pattern: str, invalid_utf8: str, block_size: int,
                         max_pretoken_bytes: int | None = None) -> Iterator[tuple[int, ChunkCounts | WordCounter, int]]:
    """The native map step over work units ``[(chunk id, Unit)]``, yielding ``(chunk id, counts,
    pre-tokens)`` per unit as units complete.

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
    import queue
    import threading

    from .inputs import unit_blocks

    slots = threading.Semaphore(2 * workers)
    stopping = threading.Event()
    events: queue.SimpleQueue = queue.SimpleQueue()  # (chunk id, what, value)

    scanner = native_scanner(pattern)

    def count(block: bytes, specials: list[bytes]) -> ChunkCounts:
        return _native_count_chunk(block, specials, max_pretoken_bytes or 0, scanner)

    def read_unit(task: tuple[int, object]) -> None:
        cid, unit = task
        specials = _block_specials(special_tokens, unit.has_documents)
        n = 0
        try:
            for block in unit_blocks(unit, special_tokens, pattern, invalid_utf8, block_size,
                                     max_pretoken_bytes):
                while not slots.acquire(timeout=0.1):
                    if stopping.is_set():
                        return
                if stopping.is_set():
                    slots.release()
                    return
                fut = counters.submit(count, block, specials)
                fut.add_done_callback(lambda f, cid=cid: events.put((cid, "block", f)))
                n += 1
                del block
            events.put((cid, "read", n))
        except BaseException as exc:  # noqa: BLE001 - raised by the consumer
            events.put((cid, "error", exc))

    class _UnitState:
        __slots__ = ("counts", "n", "blocks", "read")

        def __init__(self) -> None:
            self.counts = None
            self.n = 0
            self.blocks = 0
            self.read: int | None = None

    state: dict[int, _UnitState] = {cid: _UnitState() for cid, _ in tasks}
    left = len(state)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bpe-count") as counters, \
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bpe-read") as readers:
        futures = [readers.submit(read_unit, t) for t in tasks]
        try:
            while left:
                cid, what, value = events.get()
                u = state[cid]
                if what == "error":
                    raise value
                if what == "read":
                    u.read = value
                else:
                    try:
                        counts = value.result()
                    finally:
                        slots.release()
                    u.n += counts.total
                    u.blocks += 1
                    if u.counts is None:
                        u.counts = counts
                    else:
                        if not isinstance(u.counts, WordCounter):
                            first = WordCounter()
                            first.add(u.counts)
                            u.counts = first
                        u.counts.add(counts)
                    del counts
                if u.read is not None and u.blocks == u.read:
                    left -= 1
                    result = (cid, u.counts if u.counts is not None else WordCounter(), u.n)
                    del state[cid]
                    yield result
        finally:
            stopping.set()
            for fut in futures:
                fut.cancel()


def count_blocks_ordered(blocks: Iterator[tuple[bytes, object]], workers: int, special_tokens: Sequence[str],
                         pattern: str, documents: bool,
                         max_pretoken_bytes: int | None = None
                         ) -> Iterator[tuple[object, ChunkCounts | Counter[bytes], int]]:
    """``(mark, counts, pre-tokens)`` per ``(block, mark)`` of a stream, in the stream's order.

    Natively, blocks are counted on ``workers`` threads (GIL released) with at most
    ``2 * workers`` in flight. In order, so that every mark the caller commits covers exactly
    the blocks before it. A ``(None, None)`` item (see ``ticking``) passes through as
    ``(None, None, 0)`` once the blocks before it are counted."""
    from collections import deque

    if not native_counts(pattern):
        for block, mark in blocks:
            if block is None:
                yield None, None, 0
                continue
            counts = count_block(block, special_tokens, pattern, documents, max_pretoken_bytes)
            yield mark, counts, sum(counts.values())
        return
    specials = _block_specials(special_tokens, documents)
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
                pending.append((pool.submit(_native_count_chunk, block, specials, max_pretoken_bytes or 0, scanner),
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
    import threading

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
