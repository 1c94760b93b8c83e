"""Counting: the map step, words counted per chunk or unit (the cut points are ``chunks``'s, the
threads ``parallel``'s, the input checks ``input_checks``'s).

Counting is a map step (a byte range of a file -> ``{word: count}``) and a reduce step (add the
counts into the store). Nothing here touches the store; ``train`` drives both and makes each
reduce durable, so a killed run never counts a chunk twice.

For every named pattern the map step is native (``bpe_store._core.count_words``, identical to
the ``regex`` path, see tests/text/test_scanner.py and tests/text/test_pattern_scanners.py); a user's own
regex goes through ``regex`` with ``concurrent=True``. Both release the GIL while scanning, so
``train`` runs either on threads (``parallel.count_chunks_threaded``); no worker processes.

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
  pre-token length at one of the points where it is split anyway (``chunks._cut_in_scan``).

A pre-token longer than ``max_pretoken_bytes`` is counted as pieces of at most that many bytes
(``pretokenize.split_long_pretoken``): cut from its own start, so the pieces do not depend on
the chunking either, and no word (nor a chunk, by the rule above) grows with the input.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import xxhash

from ..errors import InputError
from ..native import (
    ChunkCounts,
    WordCounter,
    native_add_counts,
    native_count_chunk,
    native_count_file_range,
    native_count_strings,
    native_count_words,
    native_pack_counts,
    native_release_chunk_memory,
)
from ..text.input_checks import open_regular, raise_invalid_utf8, valid_utf8
from ..text.inputs import Unit
from ..text.pretokenize import (
    DOC_SEP,
    GPT2_PATTERN,
    PretokenSpec,
    check_covered,
    count_words,
    native_scanner,
    split_at_specials,
    split_long_words,
)
from ..text.units import unit_blocks


@dataclass(frozen=True)
class RangeTask:
    """A counting task: the byte range ``[start, end)`` of the text file ``path`` (unit ``id``), read
    by whoever counts it (a thread here, a Ray node elsewhere), split as ``spec`` says."""

    id: int
    path: str
    start: int
    end: int
    spec: PretokenSpec


@dataclass(frozen=True)
class UnitTask:
    """A counting task: a work unit of any input kind (``inputs.Unit``: a small picklable
    description; the counter reads the file itself), read in blocks of ``block_size`` bytes."""

    id: int
    unit: Unit
    spec: PretokenSpec
    block_size: int


#: What a counting engine is handed: a byte range of a text file or a unit of any kind.
CountTask = RangeTask | UnitTask


def count_chunk(path: str, start: int, end: int, special_tokens: Sequence[str], pattern: str,
                invalid_utf8: str = "strict", max_pretoken_bytes: int | None = None) -> tuple[dict[bytes, int], int]:
    """The map step: ``({word bytes: count}, number of pre-tokens)`` of ``path[start:end]``; a
    pre-token longer than ``max_pretoken_bytes`` counts as pieces (``split_long_pretoken``)."""
    counts, n, _ = _count_range(path, start, end, special_tokens, pattern, invalid_utf8, max_pretoken_bytes)
    return counts, n


def _count_range(path: str, start: int, end: int, special_tokens: Sequence[str], pattern: str,
                 invalid_utf8: str, max_pretoken_bytes: int | None) -> tuple[dict[bytes, int], int, bytes]:
    """``count_chunk`` and the XXH3-128 of the bytes it counted (the unit's fingerprint)."""
    data = _read_chunk(path, start, end)
    digest = xxhash.xxh3_128_digest(data)
    try:
        if native_counts(pattern):
            counts, n = native_count_words(valid_utf8(data, invalid_utf8),
                                            [s.encode("utf-8") for s in special_tokens],
                                            max_pretoken_bytes or 0, native_scanner(pattern))
            return counts, n, digest
        text = data.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict")
    except UnicodeDecodeError:
        invalid_utf8_error(path)
    words = regex_count_words(text, special_tokens, pattern, max_pretoken_bytes, cover=True)
    return dict(words), sum(words.values()), digest


def invalid_utf8_error(path: str) -> NoReturn:
    """Raise the InputError that says where ``path`` first stops being UTF-8 (a unit of it was
    found not to be, as it was counted with ``--invalid-utf8 strict``).

    Why the whole file's first invalid byte, not the unit's: units are counted in any order, by
    any thread; the first one in the file makes the message the same on every run, the one
    planning gave when it checked the whole file first (``input_checks.raise_invalid_utf8``)."""
    raise_invalid_utf8(Path(path))
    raise AssertionError("unreachable")  # pragma: no cover - raise_invalid_utf8 always raises


def _read_chunk(path: str, start: int, end: int) -> bytes:
    with open_regular(path) as f:
        f.seek(start)
        data = f.read(end - start)
    if len(data) != end - start:
        raise InputError(f"{path}: changed while training (shorter than when the run started)")
    return data


def count_chunk_native(path: str, start: int, end: int, special_tokens: Sequence[str],
                       invalid_utf8: str = "strict", max_pretoken_bytes: int | None = None,
                       pattern: str = GPT2_PATTERN) -> ChunkCounts:
    """``count_chunk`` for a pattern with a native scanner, keeping the counts native for a
    ``WordCounter``; ``.digest`` of the result is the XXH3-128 of the bytes read (the unit's
    fingerprint, ``fingerprint.UNITS_HASH``).

    The range is read natively into memory reused from chunk to chunk (``count_file_range``;
    why: see ChunkMemory in native/scanner.cpp), and digested and checked to be UTF-8 in that
    read; only a range that is not valid UTF-8, or a file grown shorter, takes the path through a
    bytes object, which reports it (``invalid_utf8_error``) or replaces."""
    specials = [s.encode("utf-8") for s in special_tokens]
    scanner = native_scanner(pattern)
    with open_regular(path) as f:
        counts = native_count_file_range(f.fileno(), start, end - start, specials, max_pretoken_bytes or 0, scanner)
    if counts is not None:
        return counts
    raw = _read_chunk(path, start, end)
    try:
        data = valid_utf8(raw, invalid_utf8)
    except UnicodeDecodeError:
        invalid_utf8_error(path)
    counts = native_count_chunk(data, specials, max_pretoken_bytes or 0, scanner)
    counts.digest = xxhash.xxh3_128_digest(raw)
    return counts


def release_chunk_memory() -> None:
    """Free the memory native counting keeps for its next chunk (``count_chunk_native``): called
    when counting ends, so that merging does not carry it."""
    if native_release_chunk_memory is not None:
        native_release_chunk_memory()


def count_chunk_native_task(task: RangeTask) -> tuple[int, ChunkCounts, int, bytes]:
    """``count_chunk_native`` for a pool, the same results as ``count_chunk_task``."""
    spec = task.spec
    counts = count_chunk_native(task.path, task.start, task.end, spec.special_tokens, spec.invalid_utf8,
                                spec.max_pretoken_bytes, spec.pattern)
    return task.id, counts, counts.total, counts.digest


def count_unit_packed(task: CountTask) -> tuple[int, bytes, int]:
    """The map step for another process or machine: a unit -> ``(unit id, packed counts, pre-tokens)``.

    ``task`` is the small, picklable unit description a local pool takes: a ``RangeTask`` for a
    byte range of a text file, a ``UnitTask`` for any input kind. The unit is read here, where it
    runs, so the input must be readable at the same path. The counts come back as one bytes object
    (``ChunkCounts.pack``: ~8 bytes per distinct word) for ``WordCounter.add_packed``, never as a
    dict per word. Needs the native core; any pattern (a user's own regex counts through ``regex``).
    """
    cid, counts, n, _ = count_unit_counts(task)
    return cid, counts if isinstance(counts, bytes) else counts.pack(), n


def count_unit_counts(task: CountTask) -> tuple[int, ChunkCounts | WordCounter | bytes, int, bytes | None]:
    """``count_unit_packed`` without the packing where there is nothing to pack: the native counts
    (``ChunkCounts``, or a ``WordCounter`` for a unit read in blocks), packed bytes only for the
    ``regex`` path's dict; any of them goes into a ``WordCounter`` by ``add_counts``. For a process
    that sums many units itself (a Ray node counter, bpe_store.counting.ray_node). The last item
    is the unit's fingerprint for a byte range of a text file (a ``RangeTask``), else None."""
    if isinstance(task, UnitTask):  # a unit of any input kind, read block by block (bpe_store.text.inputs)
        if not native_counts(task.spec.pattern):
            cid, words, n = count_unit_task(task)
            return cid, native_pack_counts(words), n, None
        total, n = _count_unit_native(task.unit, task.spec, task.block_size)
        return task.id, total, n, None
    if native_counts(task.spec.pattern):
        return count_chunk_native_task(task)
    cid, words, n, digest = count_chunk_task(task)
    return cid, native_pack_counts(words), n, digest


def new_word_counts(native: bool) -> Counter[bytes] | WordCounter:
    """An empty in-memory reduce buffer: native (``WordCounter``) for native chunk counts."""
    return WordCounter() if native else Counter()


#: Matches counted at once by ``regex_count_words``: memory for the str objects stays ~4 MB
#: (not one list of every match of an 8 MB chunk, ~100 MB), and a batch still amortizes a call.
_REGEX_COUNT_BATCH = 1 << 16


def regex_count_words(text: str, special_tokens: Sequence[str], pattern: str,
                      max_pretoken_bytes: int | None = None, cover: bool = False) -> Counter[bytes]:
    """``pretokenize.count_words`` for a pattern without a native scanner (a user's own regex):
    ``regex`` finds the pre-tokens, the native core counts them (``count_strings``). ``cover``:
    refuse a pattern whose pre-tokens leave some of the text out (``check_covered``), as training
    does: the named patterns (the native scanners) cover any text.

    Why: ``Counter(findall(...))`` hashed every match as a Python str with the GIL held, ~40 % of
    this path's CPU, so counting threads could not overlap it; ``count_strings`` holds the GIL
    only to take each match's UTF-8 view. The same counts (tests/text/test_pattern_scanners.py)."""
    import regex

    compiled = regex.compile(pattern)  # `regex` caches compiled patterns: no cost per call
    if native_count_strings is None:
        if cover:
            for piece in split_at_specials(text, special_tokens):
                check_covered(pattern, piece, compiled.findall(piece, concurrent=True), compiled)
        return count_words(text, special_tokens, pattern, max_pretoken_bytes)
    total, found = WordCounter(), []
    for piece in split_at_specials(text, special_tokens):
        matches = compiled.findall(piece, concurrent=True)  # concurrent: matching releases the GIL
        if cover:
            check_covered(pattern, piece, matches, compiled)
        found += matches
        if len(found) >= _REGEX_COUNT_BATCH:
            total.add(native_count_strings(found))
            found = []
    total.add(native_count_strings(found))
    return split_long_words(Counter(dict(total.items())), max_pretoken_bytes)


def native_counts(pattern: str) -> bool:
    """Whether ``count_chunk`` counts ``pattern`` natively (GIL released, so threads scale)."""
    return native_scanner(pattern) != "" and native_count_words is not None


def count_chunk_task(task: RangeTask) -> tuple[int, dict[bytes, int], int, bytes]:
    """``count_chunk`` for a pool: ``(unit id, counts, pre-tokens, XXH3-128 of the bytes counted)``."""
    spec = task.spec
    counts, n, digest = _count_range(task.path, task.start, task.end, spec.special_tokens, spec.pattern,
                                     spec.invalid_utf8, spec.max_pretoken_bytes)
    return task.id, counts, n, digest


def count_into(task: Callable[[RangeTask], tuple], into: FlushBuffer, t: RangeTask) -> tuple[int, None, int]:
    """``task(t)``, its counts (and its fingerprint, if it gives one) added into ``into`` on this thread."""
    cid, counts, n, *digest = task(t)
    into.add(cid, counts, n, *digest)
    return cid, None, n


def block_specials(special_tokens: Sequence[str], documents: bool) -> list[bytes]:
    """The native splitter's specials for a block: with ``DOC_SEP`` when it joins documents."""

    return [s.encode("utf-8") for s in special_tokens] + ([DOC_SEP] if documents else [])


def count_block(block: bytes, special_tokens: Sequence[str], pattern: str,
                documents: bool, max_pretoken_bytes: int | None = None) -> Counter[bytes]:
    """The ``regex`` map step on one block (valid UTF-8; documents joined by ``DOC_SEP``)."""

    counts: Counter[bytes] = Counter()
    for doc in block.split(DOC_SEP) if documents else [block]:
        counts.update(regex_count_words(doc.decode("utf-8"), special_tokens, pattern, max_pretoken_bytes,
                                        cover=True))
    return counts


def _count_unit_native(unit: Unit, spec: PretokenSpec, block_size: int) -> tuple[WordCounter, int]:
    """A whole unit counted natively (``native_counts``): its blocks summed in a ``WordCounter``."""

    specials = block_specials(spec.special_tokens, unit.has_documents)  # as count_units_threaded
    scanner, max_bytes = native_scanner(spec.pattern), spec.max_pretoken_bytes
    words, n = WordCounter(), 0
    for block in unit_blocks(unit, spec, block_size):
        counts = native_count_chunk(block, specials, max_bytes or 0, scanner)
        n += counts.total
        words.add(counts)
    return words, n


def count_unit_task(task: UnitTask) -> tuple[int, dict[bytes, int], int]:
    """A whole work unit counted in this process, for a process pool or another machine (the
    ``Unit`` is a small picklable description; the worker reads the file itself) -> ``(unit id,
    {word: count}, pre-tokens)``. Natively for a pattern with a native scanner (blocks summed in a
    ``WordCounter``), through ``regex`` otherwise; the same counts either way."""

    spec, unit = task.spec, task.unit
    if native_counts(spec.pattern):
        words, n = _count_unit_native(unit, spec, task.block_size)
        return task.id, dict(words.items()), n
    max_bytes = spec.max_pretoken_bytes
    blocks = unit_blocks(unit, spec, task.block_size)
    total: Counter[bytes] = Counter()
    for block in blocks:
        total.update(count_block(block, spec.special_tokens, spec.pattern, unit.has_documents, max_bytes))
    return task.id, dict(total), sum(total.values())


class FlushBuffer:
    """The reduce step's buffer: the word counts of the units counted since the last flush, and
    those units' marks ``(unit id, pre-tokens, fingerprint)``, always together (the fingerprint:
    XXH3-128 of a byte range of a text file as it was read, ``fingerprint.UNITS_HASH``; else None).

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
        self._marks: list[tuple[int, int, bytes | None]] = []

    def add(self, cid: int, counts: dict[bytes, int] | ChunkCounts | bytes, n: int,
            digest: bytes | None = None) -> None:
        """Add one unit's counts (``add_counts``) and its mark."""
        with self._lock:  # a native add releases the GIL: the other threads go on meanwhile
            add_counts(self._counts, counts)
            self._marks.append((cid, n, digest))

    def take(self) -> tuple[Counter[bytes] | WordCounter, list[tuple[int, int, bytes | None]]]:
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
    elif native_add_counts is not None:
        native_add_counts(total, counts)
    else:
        total.update(counts)


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
