"""The reference trainer: slow, obviously correct byte-level BPE with CS336 semantics.

It is the oracle of the differential tests; nothing fast may disagree with it. Every step is
recomputed from scratch so that each line can be checked by eye against the contract in
docs/design.md (section Semantics):

1. pre-tokenize (split at specials, GPT-2 pattern) and count words as UTF-8 bytes; a word longer
   than ``max_pretoken_bytes`` counts as pieces of at most that many bytes, cut greedily at
   character starts (``pretokenize.split_long_pretoken``);
2. each word starts as its single bytes;
3. repeat: count all adjacent pairs weighted by word count (overlapping pairs count: ``aaa``
   holds ``(a, a)`` twice); pick the highest count, ties to the lexicographically greater
   ``(bytes_left, bytes_right)``; merge it left to right, without overlap, in every word;
4. stop at the vocabulary size or when no pair is left.

Two options, off by default (then the above is exactly CS336's):

* ``min_frequency`` N: a word counted fewer than N times is left out of step 3 altogether (it
  takes part in no pair), so every pair counted, and every merge, has a count of at least N;
* ``max_token_length`` N: a pair whose two tokens together spell more than N bytes is not
  counted in step 3, so no merge ever makes a token longer than N bytes (specials and the 256
  bytes are not merges and are not limited).

Tokens are identified by their bytes, so two merges that spell the same bytes make one token.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..text.pretokenize import GPT2_PATTERN, count_words, resolve_pattern

Pair = tuple[bytes, bytes]


def merge_word(word: tuple[bytes, ...], pair: Pair) -> tuple[bytes, ...]:
    """Merge every occurrence of ``pair`` in ``word``, left to right, without overlap.

    >>> merge_word((b"a", b"a", b"a"), (b"a", b"a"))
    (b'aa', b'a')
    """
    out: list[bytes] = []
    i = 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train_from_counts(
    word_counts: dict[bytes, int], num_merges: int, min_frequency: int = 1,
    max_token_length: int | None = None,
) -> list[tuple[bytes, bytes, int]]:
    """The merges learned from ``{word bytes: count}``: ``[(left, right, count at merge)]``."""
    words: dict[tuple[bytes, ...], int] = Counter()
    for w, c in word_counts.items():
        if c >= min_frequency:  # rarer words take part in no pair
            words[tuple(bytes([b]) for b in w)] += c
    merges: list[tuple[bytes, bytes, int]] = []
    while len(merges) < num_merges:
        pairs: Counter[Pair] = Counter()
        for w, c in words.items():
            for i in range(len(w) - 1):
                if max_token_length is None or len(w[i]) + len(w[i + 1]) <= max_token_length:
                    pairs[(w[i], w[i + 1])] += c
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append((best[0], best[1], pairs[best]))
        merged: dict[tuple[bytes, ...], int] = Counter()
        for w, c in words.items():
            merged[merge_word(w, best)] += c
        words = merged
    return merges


def reference_train_bpe(
    text: str,
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    pattern: str = GPT2_PATTERN,
    min_frequency: int = 1,
    max_token_length: int | None = None,
    max_pretoken_bytes: int | None = None,
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """CS336 ``train_bpe`` on a string: ``(vocab {id: bytes}, merges [(left, right)])``.

    Vocabulary order: special tokens, the 256 bytes, then one entry per merge. ``pattern`` is a
    regex or a name in ``pretokenize.PATTERNS``.
    """
    pattern = resolve_pattern(pattern)
    specials = list(dict.fromkeys(special_tokens))
    num_merges = vocab_size - 256 - len(specials)
    counts = count_words(text, specials, pattern, max_pretoken_bytes)
    merges = train_from_counts(counts, max(num_merges, 0), min_frequency, max_token_length)
    vocab: dict[int, bytes] = {}
    for s in specials:
        vocab[len(vocab)] = s.encode("utf-8")
    for b in range(256):
        vocab[len(vocab)] = bytes([b])
    for left, right, _ in merges:
        vocab[len(vocab)] = left + right
    return vocab, [(left, right) for left, right, _ in merges]
