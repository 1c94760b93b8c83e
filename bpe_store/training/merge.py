"""The merge engine: incremental BPE merging over word counts, in memory.

State, rebuilt from the store on resume:

* ``words[i]``: the current token ids of word i; ``counts[i]``: its count (64-bit in the store);
* ``pairs``: ``{(left, right): count}``, weighted by word count, overlapping pairs counted;
* ``where``: ``{(left, right): {word index}}``, the words holding each pair;
* a max-heap over pairs keyed by ``(count, bytes_left, bytes_right)``, invalidated lazily: an
  entry may carry a count that is too high; when it surfaces it is re-pushed with the true count.
  Any increase pushes a fresh entry, so every live pair always has an entry at least as high as
  its count, and the first entry popped whose count is current is the CS336 choice.

Tokens are identified by bytes: a merge whose bytes already have a token reuses that id.

Two trainer options (``reference.train_from_counts`` is their spec):

* ``min_frequency``: words counted fewer times are left out of the engine (the store keeps them
  and their counts; their tokens stay single bytes); every pair count is then at least that;
* ``max_token_length``: a pair whose two tokens together spell more bytes is never counted: it
  has no entry in ``pairs``, ``where``, the heap or the store's ``pair_counts``, so it can never
  be chosen and never blocks the heap. Token bytes never change, so a pair is always too long or
  never.
* ``max_words`` (SuperBPE's stage 2, ``superword_reference`` is its spec): a pair barred by the
  superword rule (``superword_split.superword_allowed``) is never counted either, the same way.

Two engines share one interface (``Engine``): ``MergeEngine`` here, pure Python, the portable
fallback and the readable spec; and ``NativeMergeEngine``, a thin wrapper over the C++
``_core.MergeEngine`` (native/merge_engine.h and its files), which must give identical merges. ``new_engine``
builds either from the store's word rows; ``engine="auto"`` takes the native one when it is built.
"""

from __future__ import annotations

import array
import gc
import heapq
import itertools
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from .. import native
from ..bpe import Pair, Replay, merge_with_pairs, replay_ranks, replay_word
from ..text.superword_split import superword_allowed

if TYPE_CHECKING:  # pragma: no cover
    from ..native import WordCounter

#: A row of the store's ``words`` table: ``(word id, bytes, count, packed tokens or None)``;
#: None means the word is still its single bytes (id ``n_specials + byte``). A counting flush's own
#: rows are ``(word id, bytes or bytearray, count)``: the same, tokens NULL.
WordRow = tuple[int, bytes, int, "bytes | None"]
#: A checkpoint's executemany parameters: ``(words [(packed tokens, word id)], pair deletes
#: [(left, right)], pair inserts [(left, right, count)], pair updates [(count, left, right)])``.
CheckpointRows = tuple[list[tuple[bytes, int]], list[tuple[int, int]], list[tuple[int, int, int]],
                       list[tuple[int, int, int]]]
#: ``(live pairs, digest 1, digest 2)``; the store computes the same in SQL (pair_counts_digest).
PairDigest = tuple[int, int, int]

ENGINES = ("auto", "native", "python")
_P1 = 2147483647
_P2 = 1000000007


def pair_digest_of(pairs: dict[Pair, int]) -> PairDigest:
    """A cheap fingerprint of ``{pair: count}`` that SQLite can compute over ``pair_counts`` in one
    scan, so a resume checks the store's pair counts without reading them into Python. Each term
    is reduced below a prime, so the sums are exact 64-bit integers in SQL, C++ and Python."""
    n = h1 = h2 = 0
    for (a, b), c in pairs.items():
        if c > 0:
            n += 1
            h1 += ((a * 65599 + b) % _P1) * (c % _P1) % _P1
            h2 += ((a * 1000003 + b * 7 + 11) % _P2) * (c % _P2) % _P2
    return n, h1, h2


class _Desc:
    """Orders a key descending inside Python's min-heap (only compared when counts tie)."""

    __slots__ = ("k",)

    def __init__(self, k: tuple[bytes, bytes]):
        self.k = k

    def __lt__(self, other: _Desc) -> bool:
        return self.k > other.k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.k == other.k


@dataclass(frozen=True)
class Merge:
    """One learned merge: ``left + right -> token`` (a word-level id), chosen at ``count``."""

    rank: int
    left: int
    right: int
    token: int
    count: int


class Engine(Protocol):
    """What training needs from a merge engine (both engines below provide it)."""

    token_bytes: dict[int, bytes]  # every id words use, and every merge's token
    #: index of the first word whose tokens do not spell its bytes (a corrupt store), or -1
    bad_word: int
    #: the store's pair counts predate a replay (built with ``replay``): the next checkpoint
    #: replaces them all; False again once ``take_checkpoint_rows`` gave those rows
    rewrite_pairs: bool

    @property
    def exhausted(self) -> bool: ...
    @property
    def next_rank(self) -> int: ...
    @property
    def first_merge_id(self) -> int: ...
    def step(self, max_merges: int) -> list[Merge]: ...
    def next_pairs(self, k: int) -> list[tuple[int, int, int]]: ...
    def finish(self) -> None: ...
    def take_changes(self) -> tuple[dict[int, list[int]], dict[Pair, int]]: ...
    def take_checkpoint_rows(self) -> CheckpointRows: ...
    def top_word_rows(self, k: int) -> Sequence[tuple[bytes, int]]: ...
    def top_pair_rows(self, k: int) -> Sequence[tuple[int, int, int]]: ...
    def forget_stored_pairs(self) -> None: ...
    def pair_counts(self) -> dict[Pair, int]: ...
    def pair_digest(self) -> PairDigest: ...


def _tokens_of_row(wbytes: bytes, blob: bytes | None, n_specials: int) -> list[int]:
    if blob is None:
        return [n_specials + b for b in wbytes]
    a = array.array("I")
    a.frombytes(blob)  # raises ValueError on a length that is not a multiple of 4
    if a.itemsize != 4:  # pragma: no cover
        raise RuntimeError("array('I') is not 32-bit here")
    return a.tolist()


class MergeEngine:
    """Incremental merger. ``token_bytes[id]`` must hold the bytes of every id in ``words``;
    ``next_rank`` is the rank of the next merge and ``first_merge_id`` the vocab id of rank 0."""

    @classmethod
    def from_rows(cls, rows: Sequence[WordRow], token_bytes: Sequence[bytes | None], n_specials: int,
                  first_merge_id: int, next_rank: int, min_frequency: int = 1,
                  max_token_length: int | None = None, replay: Replay = (), max_words: int = 0) -> MergeEngine:
        """Build from the store's word rows and ``token_bytes[id]`` (None for special tokens).
        Rows counted fewer than ``min_frequency`` times are left out (``bad_word`` still indexes
        ``rows``). ``replay``: merges logged after the rows' tokens, applied to them first."""
        tb = {i: b for i, b in enumerate(token_bytes) if b is not None}
        words: list[list[int]] = []
        kept: list[WordRow] = []
        bad = -1
        for i, row in enumerate(rows):
            if row[2] < min_frequency:
                continue
            kept.append(row)
            wbytes = row[1]
            blob = row[3] if len(row) > 3 else None  # (id, bytes, count): still single bytes
            try:
                toks = _tokens_of_row(wbytes, blob, n_specials)
                ok = blob is None or b"".join(tb[t] for t in toks) == wbytes
            except (KeyError, ValueError):
                ok = False
            if not ok:
                toks = []
                if bad < 0:
                    bad = i
            words.append(toks)
        changed: set[int] = set()
        if replay:
            for a, b, t in replay:  # a damaged log must be an error, not wrong words
                if any(x not in tb for x in (a, b, t)) or tb[t] != tb[a] + tb[b]:
                    raise ValueError("a logged merge does not match the vocabulary")
            ranks = replay_ranks(replay)
            for w, toks in enumerate(words):
                new = replay_word(toks, replay, ranks)
                if len(new) != len(toks):
                    words[w] = new
                    changed.add(w)
        engine = cls(words, [r[2] for r in kept], tb, first_merge_id, next_rank, max_token_length, max_words)
        engine.word_ids = [r[0] for r in kept]
        engine.bad_word = bad
        if replay:
            engine._changed_words = changed
            engine.forget_stored_pairs()  # the store's are those of the words before the replay
        return engine

    def __init__(self, words: list[list[int]], counts: list[int], token_bytes: dict[int, bytes],
                 first_merge_id: int, next_rank: int = 0, max_token_length: int | None = None,
                 max_words: int = 0):
        #: store id of each word (for checkpoint rows); the word index unless built from rows
        self.word_ids: list[int] = list(range(len(words)))
        self.bad_word = -1
        self.words = words
        self.counts = counts
        self.token_bytes = token_bytes
        self.id_of: dict[bytes, int] = {}
        for i in sorted(token_bytes):
            self.id_of.setdefault(token_bytes[i], i)
        self.first_merge_id = first_merge_id
        self.next_rank = next_rank
        #: the longest token a merge may make, in bytes; None: no limit
        self.max_token_length = max_token_length
        #: the superword rule's most words a token may span; 0: no rule (not a superword stage)
        self.max_words = max_words
        self.pairs: dict[Pair, int] = {}
        self.where: dict[Pair, set[int]] = {}
        for w, toks in enumerate(words):
            c = counts[w]
            for p in self._pairs_of(toks):
                self.pairs[p] = self.pairs.get(p, 0) + c
                s = self.where.get(p)
                if s is None:
                    self.where[p] = {w}
                else:
                    s.add(w)
        tb = token_bytes
        self.heap = [(-c, _Desc((tb[a], tb[b])), a, b) for (a, b), c in self.pairs.items()]
        heapq.heapify(self.heap)
        self._changed_words: set[int] = set()
        self._changed_pairs: set[Pair] = set()
        #: the pair counts as the store holds them (after the last take), to skip unchanged rows
        self._stored: dict[Pair, int] = dict(self.pairs)
        #: True once no pair is left to merge
        self.exhausted = False
        self.rewrite_pairs = False

    def _pairs_of(self, toks: list[int]) -> Iterator[Pair]:
        """The adjacent pairs of ``toks`` that may be merged (all of them without a length limit)."""
        pairs = zip(toks, toks[1:])
        if self.max_token_length is None and not self.max_words:
            return pairs
        return (p for p in pairs if self._fits(p))

    def _fits(self, p: Pair) -> bool:
        """Whether pair ``p`` may be merged: its two tokens spell at most ``max_token_length`` bytes."""
        limit, tb = self.max_token_length, self.token_bytes
        if limit is not None and len(tb[p[0]]) + len(tb[p[1]]) > limit:
            return False
        return not self.max_words or superword_allowed(tb[p[0]], tb[p[1]], self.max_words)

    def _pop_best(self) -> tuple[Pair, int] | None:
        heap, pairs = self.heap, self.pairs
        while heap:
            negc, key, a, b = heapq.heappop(heap)
            actual = pairs.get((a, b), 0)
            if actual == -negc:
                return (a, b), actual
            if actual > 0:
                heapq.heappush(heap, (-actual, key, a, b))
        return None

    def step(self, max_merges: int) -> list[Merge]:
        """Learn up to ``max_merges`` merges; fewer only when no pair is left (``exhausted``)."""
        out: list[Merge] = []
        while len(out) < max_merges:
            best = self._pop_best()
            if best is None:
                self.exhausted = True
                break
            (a, b), count = best
            new_bytes = self.token_bytes[a] + self.token_bytes[b]
            vocab_id = self.first_merge_id + self.next_rank
            token = self.id_of.setdefault(new_bytes, vocab_id)
            self.token_bytes.setdefault(token, new_bytes)
            self._apply(a, b, token)
            out.append(Merge(self.next_rank, a, b, token, count))
            self.next_rank += 1
        return out

    def _apply(self, a: int, b: int, t: int) -> None:
        """Merge ``(a, b)`` into ``t`` in every word holding it; update ``pairs``, ``where``, the heap.

        Only the pairs around the merges change in a word (``merge_with_pairs``). Why not diff all
        its pairs before and after: two counters per word visited were most of this engine's time
        (a 2 MB zhwiki slice to 3000 merges, words of ~26 bytes: 39-46 CPU s; this way 17-19).
        """
        pairs, where, words = self.pairs, self.where, self.words
        changed_pairs, limited = self._changed_pairs, self.max_token_length is not None or bool(self.max_words)
        grown: set[Pair] = set()
        for w in where.pop((a, b), ()):
            new, gone, made = merge_with_pairs(words[w], a, b, t)
            c = self.counts[w]
            held = set(zip(new, new[1:]))  # the pairs the word still holds somewhere
            for p in gone:
                if limited and not self._fits(p):
                    continue  # a pair too long is never counted
                left = pairs[p] - c
                changed_pairs.add(p)
                if left:
                    pairs[p] = left
                else:
                    del pairs[p]
                if p not in held and p in where:
                    s = where[p]
                    s.discard(w)
                    if not s:
                        del where[p]
            for p in made:
                if limited and not self._fits(p):
                    continue
                pairs[p] = pairs.get(p, 0) + c
                changed_pairs.add(p)
                grown.add(p)
                s = where.get(p)
                if s is None:
                    where[p] = {w}
                else:
                    s.add(w)
            words[w] = new
            self._changed_words.add(w)
        pairs.pop((a, b), None)
        changed_pairs.add((a, b))
        # one push per pair that grew keeps "every live pair has a heap entry >= its count"
        tb = self.token_bytes
        for p in grown:
            cnt = pairs.get(p, 0)  # a reused token id may shrink a pair this step made
            if cnt:
                heapq.heappush(self.heap, (-cnt, _Desc((tb[p[0]], tb[p[1]])), p[0], p[1]))

    def next_pairs(self, k: int) -> list[tuple[int, int, int]]:
        """The ``k`` best live pairs, best first (the order ``step`` takes them in, had no merge
        changed the others): ``[(left, right, count)]``. Stage 2 writes them at its checkpoints."""
        tb = self.token_bytes
        best = heapq.nsmallest(k, ((-c, _Desc((tb[a], tb[b])), a, b) for (a, b), c in self.pairs.items()))
        return [(a, b, -negc) for negc, _, a, b in best]

    def finish(self) -> None:
        """Merging is over: drop what only merging needs (the pair -> words sets and the heap),
        so the final checkpoint is written with less memory held; ``step`` learns nothing after."""
        self.where, self.heap = {}, []
        self.exhausted = True

    def forget_stored_pairs(self) -> None:
        """The store holds no pair counts of these words (a replay, a finished run's store): the
        next checkpoint empties its table and writes every live pair (``rewrite_pairs``)."""
        self._stored = {}
        self._changed_pairs = set(self.pairs)
        self.rewrite_pairs = True

    def take_changes(self) -> tuple[dict[int, list[int]], dict[Pair, int]]:
        """What changed since the last call: ``({word index: tokens}, {pair: count, 0 if gone})``."""
        words = {w: self.words[w] for w in self._changed_words}
        pairs = {p: self.pairs.get(p, 0) for p in self._changed_pairs}
        self._changed_words = set()
        self._changed_pairs = set()
        self._stored.update(pairs)
        return words, pairs

    def take_checkpoint_rows(self) -> CheckpointRows:
        """The changes since the last take as a checkpoint's executemany rows (see CheckpointRows)."""
        ids = self.word_ids
        self.rewrite_pairs = False
        word_rows = [(array.array("I", self.words[w]).tobytes(), ids[w]) for w in sorted(self._changed_words)]
        deletes: list[tuple[int, int]] = []
        inserts: list[tuple[int, int, int]] = []
        updates: list[tuple[int, int, int]] = []
        stored = self._stored
        for p in sorted(self._changed_pairs):
            cur, old = self.pairs.get(p, 0), stored.get(p, 0)
            if cur == old:
                continue
            if old == 0:
                inserts.append((p[0], p[1], cur))
            elif cur == 0:
                deletes.append(p)
            else:
                updates.append((cur, p[0], p[1]))
            if cur:
                stored[p] = cur
            else:
                stored.pop(p, None)
        self._changed_words = set()
        self._changed_pairs = set()
        return word_rows, deletes, inserts, updates

    def top_word_rows(self, k: int) -> list[tuple[bytes, int]]:
        """``[(packed tokens, word id)]`` of the words more frequent than the ``k+1``-th most
        frequent one (all of them when there are at most ``k``), in id order. The counts alone
        decide (word ids depend on the order counting met the words)."""
        floor = sorted(self.counts, reverse=True)[k] if len(self.counts) > k else 0
        ids = self.word_ids
        return [(array.array("I", self.words[w]).tobytes(), ids[w])
                for w in range(len(self.words)) if self.counts[w] > floor]

    def top_pair_rows(self, k: int) -> list[tuple[int, int, int]]:
        """``[(left, right, count)]`` of the live pairs at least as frequent as the ``k``-th most
        frequent one (all of them when there are at most ``k``), in ``(left, right)`` order: what a
        finished run keeps of its pair counts. The counts alone decide, as for ``top_word_rows``."""
        if k <= 0:
            return []
        counts = sorted(self.pairs.values(), reverse=True)
        floor = counts[k - 1] if len(counts) > k else 1
        return [(a, b, c) for (a, b), c in sorted(self.pairs.items()) if c >= floor]

    def pair_counts(self) -> dict[Pair, int]:
        return dict(self.pairs)

    def pair_digest(self) -> PairDigest:
        return pair_digest_of(self.pairs)


class NativeMergeEngine:
    """``Engine`` over the C++ ``_core.MergeEngine``: the same contract, built for ~1M words.

    It keeps ``token_bytes`` as a Python dict (extended after each step) so callers read token
    bytes without a native call per lookup.
    """

    def __init__(self, rows: list[WordRow], token_bytes: Sequence[bytes | None], n_specials: int,
                 first_merge_id: int, next_rank: int, min_frequency: int = 1,
                 max_token_length: int | None = None, replay: Replay = (), max_words: int = 0):
        core = native.core
        log = _packed_log(replay)
        if hasattr(rows, "pack"):  # a WordCounter: its words as ids 1, 2, ... (see new_engine)
            self._e = core.MergeEngine(rows.pack(), 1, list(token_bytes), n_specials, first_merge_id, next_rank,
                                       min_frequency, max_token_length or 0, max_words, log)
        else:
            if not isinstance(rows, core.WordRows):  # else read natively (Store.load_word_rows)
                if not isinstance(rows, list):
                    rows = list(rows)
                # sqlite3 returns tuples; other row types (SQLAlchemy Row) are converted once here
                if rows and type(rows[0]) is not tuple:
                    rows = [tuple(r) for r in rows]
            self._e = core.MergeEngine(rows, list(token_bytes), n_specials, first_merge_id, next_rank,
                                       min_frequency, max_token_length or 0, log, max_words)
        self.token_bytes: dict[int, bytes] = {i: b for i, b in enumerate(token_bytes) if b is not None}
        self.bad_word: int = self._e.bad_word

    @classmethod
    def from_words_file(cls, path: str | os.PathLike, tag: int, token_bytes: Sequence[bytes | None], n_specials: int,
                        first_merge_id: int, next_rank: int, max_token_length: int | None, max_words: int,
                        replay: Replay) -> NativeMergeEngine:
        """The engine from a words file (``save_words``, ``training.stage2_words``) named ``tag``,
        then ``replay``: the merges logged since its words. ValueError: not such a file."""
        self = cls.__new__(cls)
        self._e = native.core.MergeEngine(os.fspath(path), tag, list(token_bytes), n_specials, first_merge_id,
                                          next_rank, max_token_length or 0, max_words, _packed_log(replay))
        self.token_bytes = {i: b for i, b in enumerate(token_bytes) if b is not None}
        self.bad_word = -1
        return self

    def save_words(self, path: str | os.PathLike, tag: int, merges: int) -> None:
        """Write the words as they are (they reflect ``merges`` merges) to ``path``, named ``tag``."""
        self._e.save_words(os.fspath(path), tag, merges)

    @property
    def exhausted(self) -> bool:
        return self._e.exhausted

    @property
    def rewrite_pairs(self) -> bool:
        return self._e.rewrite_pairs

    @property
    def next_rank(self) -> int:
        return self._e.next_rank

    @property
    def first_merge_id(self) -> int:
        return self._e.first_merge_id

    def step(self, max_merges: int) -> list[Merge]:
        tb = self.token_bytes
        out = []
        for rank, left, right, token, count in self._e.step(max_merges):
            if token not in tb:
                tb[token] = tb[left] + tb[right]
            out.append(Merge(rank, left, right, token, count))
        return out

    def next_pairs(self, k: int) -> list[tuple[int, int, int]]:
        return self._e.next_pairs(k)

    def finish(self) -> None:
        self._e.finish()

    def take_changes(self) -> tuple[dict[int, list[int]], dict[Pair, int]]:
        return self._e.take_changes()

    def take_checkpoint_rows(self) -> CheckpointRows:
        gc_on = gc.isenabled()
        gc.disable()  # up to ~1M new tuples, none cyclic: collections would only cost time
        try:
            return self._e.take_checkpoint_rows()
        finally:
            if gc_on:
                gc.enable()

    def top_word_rows(self, k: int) -> Sequence[tuple[bytes, int]]:
        return self._e.top_word_rows(k)

    def top_pair_rows(self, k: int) -> Sequence[tuple[int, int, int]]:
        return self._e.top_pair_rows(k)

    def forget_stored_pairs(self) -> None:
        self._e.forget_stored_pairs()

    def pair_counts(self) -> dict[Pair, int]:
        return self._e.pair_counts()

    def pair_digest(self) -> PairDigest:
        return self._e.pair_digest()


def _packed_log(replay: Replay) -> bytes:
    """``replay``'s ``(left, right, token)`` triples as the native engine reads them: little-endian
    uint32, packed."""
    log = getattr(replay, "packed", None)  # a ranks base's merges as it read them (store.base_rows.Triples)
    if log is None:
        merges = array.array("I", itertools.chain.from_iterable(replay))  # 200 K merges: no list of 600 K
        if sys.byteorder == "big":  # pragma: no cover
            merges.byteswap()  # the engine reads little-endian uint32
        log = merges.tobytes()
    return log


def release_free_memory() -> None:
    """Give the memory malloc holds free back to the OS, and from the first call on have large
    blocks mapped on their own, so that what a phase frees does not stay resident through the
    next (glibc; see native/merge_engine.cpp). ``train`` calls it as it starts and between
    phases; the native engine's ``finish`` calls it too."""
    if native.core is not None:
        native.core.release_free_memory()


def native_available() -> bool:
    """Whether the native engine is built into this installation (``native.BUILT``)."""
    return native.BUILT


def uses_native(engine: str) -> bool:
    """Whether ``new_engine(..., engine)`` builds the native engine (which reads packed rows)."""
    return engine == "native" or (engine == "auto" and native_available())


def new_engine(rows: list[WordRow] | WordCounter, token_bytes: Sequence[bytes | None], n_specials: int,
               first_merge_id: int, next_rank: int, engine: str = "auto", *, min_frequency: int = 1,
               max_token_length: int | None = None, replay: Replay = (), max_words: int = 0) -> Engine:
    """A merge engine over the store's word rows (in id order); ``engine`` is one of ``ENGINES``:
    "native" requires the C++ core, "python" forces the fallback, "auto" prefers native.
    ``rows`` may also be the native ``WordCounter`` a first counting flush wrote (words still single
    bytes, ids 1, 2, ... in its order; ``Store.take_fresh_word_rows``): the native engine then
    reads it without a Python object per word. ``min_frequency`` and ``max_token_length``: see the
    module doc. ``replay``: merges the store logged after the rows' tokens (``Replay``).
    ``max_words``: 0, or the superword rule of SuperBPE's stage 2 (see the module doc)."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if uses_native(engine):
        if not native_available():
            raise RuntimeError("the native merge engine is not built here (use engine='python')")
        return NativeMergeEngine(rows, token_bytes, n_specials, first_merge_id, next_rank, min_frequency,
                                 max_token_length, replay, max_words)
    if hasattr(rows, "pack"):
        rows = rows.rows(1)
    return MergeEngine.from_rows(rows, token_bytes, n_specials, first_merge_id, next_rank, min_frequency,
                                 max_token_length, replay, max_words)
