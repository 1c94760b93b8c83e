"""The merge rule of one word: byte-level BPE's step, on the ground floor of the house.

A merge ``(a, b) -> new`` rewrites a word's token ids left to right without overlap; a store's log
of merges (``Replay``: ``[(left, right, token)]`` in rank order) applied word by word is what
training made of the word. The trainer (``training/merge.py``, ``training/merge_step.py``), the
tokenizer (``tokenizer/tokenizer.py``) and inspection (``show words``, ``why``, ``report``) all use
these functions, so none of them imports another for it. The native twins are
``merge_word`` in native/merge_loop.cpp and ``replay_words`` in native/merge_replay.cpp.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

#: Two token ids, left and right.
Pair = tuple[int, int]
#: Merges a store logged after its words' tokens were last written: ``[(left, right, token)]`` in
#: rank order, applied to the words before merging goes on (``replay_word``).
Replay = Sequence[tuple[int, int, int]]


def merge_starts(tokens: Sequence[int], a: int, b: int) -> list[int]:
    """Where ``(a, b)`` is merged in ``tokens``: the index of each match's ``a``, left to right,
    without overlap.

    >>> merge_starts([1, 1, 1, 2, 1, 1], 1, 1)
    [0, 4]
    """
    starts: list[int] = []
    i, n = 0, len(tokens)
    try:
        while True:
            i = tokens.index(a, i)  # Why index: it scans in C, and most tokens are not ``a``
            if i + 1 < n and tokens[i + 1] == b:
                starts.append(i)
                i += 2
            else:
                i += 1
    except ValueError:  # no ``a`` from ``i`` on
        return starts


def merge_pair(tokens: Sequence[int], a: int, b: int, new: int, starts: Sequence[int] | None = None) -> list[int]:
    """``tokens`` with every ``(a, b)`` replaced by ``new``, left to right, without overlap
    (``starts``: ``merge_starts(tokens, a, b)``, when the caller has it).

    >>> merge_pair([1, 1, 1], 1, 1, 9)
    [9, 1]
    """
    out: list[int] = []
    done = 0
    for i in merge_starts(tokens, a, b) if starts is None else starts:
        out += tokens[done:i]
        out.append(new)
        done = i + 2
    out += tokens[done:]
    return out


def merge_with_pairs(tokens: Sequence[int], a: int, b: int, new: int) -> tuple[list[int], list[Pair], list[Pair]]:
    """``merge_pair``, with the pairs the merge removed from ``tokens`` and those it made.

    The old pairs touching a merged token are gone and the new pairs touching a ``new`` appear
    (each as often as it does); every other pair maps one to one between the old and the new
    word, so its count stays (``merge_word`` in native/merge_loop.cpp does the same).

    >>> merge_with_pairs([5, 1, 2, 1, 2, 6], 1, 2, 9)
    ([5, 9, 9, 6], [(5, 1), (1, 2), (2, 1), (1, 2), (2, 6)], [(5, 9), (9, 9), (9, 6)])
    """
    starts = merge_starts(tokens, a, b)
    out = merge_pair(tokens, a, b, new, starts)
    # old pairs at j = i - 1, i, i + 1 of a merge at i; new pairs at k - 1, k of its token at k = i - m
    gone = sorted({j for i in starts for j in (i - 1, i, i + 1) if 0 <= j < len(tokens) - 1})
    made = sorted({k for m, i in enumerate(starts) for k in (i - m - 1, i - m) if 0 <= k < len(out) - 1})
    return out, [(tokens[j], tokens[j + 1]) for j in gone], [(out[k], out[k + 1]) for k in made]


def replay_word(tokens: list[int], replay: Replay, ranks: dict[Pair, list[int]]) -> list[int]:
    """``tokens`` after the merges ``replay`` (``ranks``: each pair's indexes in it, ascending).

    Merging every word rank by rank gives each word this: again and again, the lowest-ranked merge
    above the last one applied whose pair the word holds (the merges in between find no pair in
    it). A pair can have several ranks: a merge whose bytes are an existing token reuses its id,
    which can make a merged pair again. native/merge_replay.cpp's ``replay_words`` does the same.

    >>> replay_word([1, 2, 3], [(2, 3, 9), (1, 9, 10)], {(2, 3): [0], (1, 9): [1]})
    [10]
    """
    done = -1
    while len(tokens) > 1:
        best = -1
        for p in zip(tokens, tokens[1:]):
            at = ranks.get(p)
            if at is not None:
                k = bisect.bisect_right(at, done)
                if k < len(at) and (best < 0 or at[k] < best):
                    best = at[k]
        if best < 0:
            break
        a, b, t = replay[best]
        tokens = merge_pair(tokens, a, b, t)
        done = best
    return tokens


def replay_ranks(replay: Replay) -> dict[Pair, list[int]]:
    """Each pair of ``replay`` with its indexes there, ascending (``replay_word``'s ``ranks``)."""
    ranks: dict[Pair, list[int]] = {}
    for i, (a, b, _t) in enumerate(replay):
        ranks.setdefault((a, b), []).append(i)
    return ranks


def word_splitter(merges: Replay, n_specials: int) -> Callable[[bytes], list[int]]:
    """``split(word)``: the token ids training made of ``word`` with ``merges`` (``[(left, right,
    token)]`` in rank order, a store's log), from its bytes. A finished store does not keep its
    words' tokens (``Store.write_merge_rows``): this is how they are read back.

    >>> split = word_splitter([(99, 100, 258), (98, 258, 259)], 1)  # "bc", then "a" + "bc"
    >>> split(b"`abc")
    [97, 259]
    """
    ranks = replay_ranks(merges)
    return lambda word: replay_word([n_specials + c for c in word], merges, ranks)
