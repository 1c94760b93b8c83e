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
This Python engine is the portable path; ``_core`` provides the same interface natively.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

Pair = tuple[int, int]


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


def pair_counts_of(words: Sequence[Sequence[int]], counts: Sequence[int]) -> dict[Pair, int]:
    """``{pair: count}`` recomputed from scratch (initial state and consistency checks)."""
    pc: Counter[Pair] = Counter()
    for toks, c in zip(words, counts):
        for p in zip(toks, toks[1:]):
            pc[p] += c
    return dict(pc)


class MergeEngine:
    """Incremental merger. ``token_bytes[id]`` must hold the bytes of every id in ``words``;
    ``next_rank`` is the rank of the next merge and ``first_merge_id`` the vocab id of rank 0."""

    def __init__(self, words: list[list[int]], counts: list[int], token_bytes: dict[int, bytes],
                 first_merge_id: int, next_rank: int = 0):
        self.words = words
        self.counts = counts
        self.token_bytes = token_bytes
        self.id_of: dict[bytes, int] = {}
        for i in sorted(token_bytes):
            self.id_of.setdefault(token_bytes[i], i)
        self.first_merge_id = first_merge_id
        self.next_rank = next_rank
        self.pairs: dict[Pair, int] = {}
        self.where: dict[Pair, set[int]] = {}
        for w, toks in enumerate(words):
            c = counts[w]
            for p in zip(toks, toks[1:]):
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
        #: True once no pair is left to merge
        self.exhausted = False

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
        pairs, where, heap, tb = self.pairs, self.where, self.heap, self.token_bytes
        changed_pairs = self._changed_pairs
        for w in where.pop((a, b), ()):
            toks = self.words[w]
            new: list[int] = []
            i, n = 0, len(toks)
            while i < n:
                if i + 1 < n and toks[i] == a and toks[i + 1] == b:
                    new.append(t)
                    i += 2
                else:
                    new.append(toks[i])
                    i += 1
            c = self.counts[w]
            old_pairs = Counter(zip(toks, toks[1:]))
            new_pairs = Counter(zip(new, new[1:]))
            for p, k in old_pairs.items():
                nk = new_pairs.get(p, 0)
                if nk < k:
                    left = pairs[p] - (k - nk) * c
                    changed_pairs.add(p)
                    if left:
                        pairs[p] = left
                    else:
                        del pairs[p]
                    if nk == 0 and p in where:
                        s = where[p]
                        s.discard(w)
                        if not s:
                            del where[p]
            for p, nk in new_pairs.items():
                k = old_pairs.get(p, 0)
                if nk > k:
                    cnt = pairs.get(p, 0) + (nk - k) * c
                    pairs[p] = cnt
                    changed_pairs.add(p)
                    heapq.heappush(heap, (-cnt, _Desc((tb[p[0]], tb[p[1]])), p[0], p[1]))
                    if k == 0:
                        s = where.get(p)
                        if s is None:
                            where[p] = {w}
                        else:
                            s.add(w)
            self.words[w] = new
            self._changed_words.add(w)
        pairs.pop((a, b), None)
        changed_pairs.add((a, b))

    def take_changes(self) -> tuple[dict[int, list[int]], dict[Pair, int]]:
        """What changed since the last call: ``({word index: tokens}, {pair: count, 0 if gone})``."""
        words = {w: self.words[w] for w in self._changed_words}
        pairs = {p: self.pairs.get(p, 0) for p in self._changed_pairs}
        self._changed_words = set()
        self._changed_pairs = set()
        return words, pairs
