"""The reference SuperBPE trainer: slow, plain, the oracle every fast superword path is held to.

The rules (docs/superword.md gives each with its source in the authors' code):

1. stage 1 is ordinary BPE (``reference.reference_train_bpe``: the store's pattern, CS336's
   semantics) up to the transition point: its first ``superword_from`` merges;
2. stage 2 reads the same text again: special tokens and document boundaries still cut it, then
   ``superword_split.STAGE2_PATTERN`` (digit groups, runs of two or more punctuation marks, runs of
   spaces before a space or the end) instead of the store's pattern; each distinct piece is a word,
   weighted by how often it occurs;
3. a piece's stage-1 tokens are its bytes with the stage-1 merges applied in rank order, each
   everywhere left to right: BPE's encoding of the whole piece, as the authors' trainer replays
   the inherited merges over its words and as their released ``tokenizer.json`` encodes;
4. then merging goes on as in stage 1 (highest count, ties to the lexicographically greater
   ``(left bytes, right bytes)``, overlapping pairs counted) among the pairs the superword rule
   allows (``superword_split.superword_allowed``: no ``": "``, at most ``max_words`` words), until
   the vocabulary size or until no allowed pair is left.

Tokens are their bytes, as in stage 1: a superword merge whose bytes an earlier token spells
makes no new token (the vocabulary's ids are those of ``reference_train_bpe``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..text.pretokenize import GPT2_PATTERN, count_words
from ..text.superword_split import MAX_WORDS, STAGE2_PATTERN, superword_allowed
from .reference import merge_word, reference_train_bpe

Pair = tuple[bytes, bytes]


def stage1_tokens(piece: bytes, merges: Sequence[Pair]) -> tuple[bytes, ...]:
    """``piece`` as stage-1 tokens: its bytes, then each merge in rank order applied everywhere.

    >>> stage1_tokens(b" the cat", [(b" ", b"t"), (b"h", b"e"), (b" t", b"he")])
    (b' the', b' ', b'c', b'a', b't')
    """
    word = tuple(bytes([b]) for b in piece)
    for pair in merges:
        if len(word) < 2:
            break
        word = merge_word(word, pair)
    return word


def superword_merges(pieces: dict[bytes, int], stage1: Sequence[Pair], num_merges: int,
                     max_words: int = MAX_WORDS) -> list[tuple[bytes, bytes, int]]:
    """Stage 2's merges from ``{piece bytes: count}``: ``[(left, right, count at merge)]``."""
    words: Counter[tuple[bytes, ...]] = Counter()
    for piece, count in pieces.items():
        words[stage1_tokens(piece, stage1)] += count
    merges: list[tuple[bytes, bytes, int]] = []
    while len(merges) < num_merges:
        pairs: Counter[Pair] = Counter()
        for w, c in words.items():
            for i in range(len(w) - 1):
                if superword_allowed(w[i], w[i + 1], max_words):
                    pairs[(w[i], w[i + 1])] += c
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append((best[0], best[1], pairs[best]))
        merged: Counter[tuple[bytes, ...]] = Counter()
        for w, c in words.items():
            merged[merge_word(w, best)] += c
        words = merged
    return merges


def reference_superword_bpe(
    text: str,
    vocab_size: int,
    special_tokens: Sequence[str] = (),
    superword_from: int = 0,
    pattern: str = GPT2_PATTERN,
    max_words: int = MAX_WORDS,
) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """SuperBPE on a string: ``(vocab {id: bytes}, merges [(left, right)])``, stage 1's
    ``superword_from`` merges first. ``vocab_size`` counts the special tokens, the 256 bytes and
    the merges of both stages. If stage 1 runs out of pairs first, stage 2 starts there."""
    specials = list(dict.fromkeys(special_tokens))
    t = superword_from
    vocab, stage1 = reference_train_bpe(text, min(vocab_size, len(specials) + 256 + t), specials, pattern)
    num = vocab_size - len(specials) - 256 - len(stage1)
    pieces = count_words(text, specials, STAGE2_PATTERN)
    stage2 = superword_merges(pieces, stage1, max(num, 0), max_words)
    for left, right, _ in stage2:
        vocab[len(vocab)] = left + right
    return vocab, stage1 + [(left, right) for left, right, _ in stage2]
