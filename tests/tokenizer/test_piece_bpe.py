"""The native BPE of one piece (native/piece_bpe.h) against the pure-Python spec on adversarial
merge lists: random merges of random tokens, where a pair's merged token may already exist (two
pairs make one token) and a later merge may use tokens made in any order, on pieces of every
length the native paths split at (1, up to 64 bytes in arrays, longer on the heap), by both rules
(merge by rank, and tiktoken's)."""

from __future__ import annotations

import random

import pytest

from bpe_store.formats.openai_ranks import ranks_of
from bpe_store.native import BUILT
from bpe_store.tokenizer.tokenizer import Tokenizer

pytestmark = pytest.mark.skipif(not BUILT, reason="native encoder not built")
tiktoken = pytest.importorskip("tiktoken")

ALPHABET = "abcé中"


def _random_merges(rng: random.Random, n: int) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    vocab = {i: bytes([i]) for i in range(256)}
    tokens = [c.encode() for c in "abc"] + [bytes([b]) for b in "é中".encode()]
    merges = []
    for _ in range(n):
        a, b = rng.choice(tokens), rng.choice(tokens)
        if (a, b) in merges:
            continue
        merges.append((a, b))
        if a + b not in tokens:
            tokens.append(a + b)
            vocab[len(vocab)] = a + b
    return vocab, merges


def _texts(rng: random.Random) -> list[str]:
    lengths = [1, 2, 3, 15, 16, 17, 22, 23, 40, 63, 64, 65, 80, 130, 300]
    return ["".join(rng.choice(ALPHABET) for _ in range(k)) for k in lengths for _ in range(3)]


@pytest.mark.parametrize("seed", range(12))
def test_merge_by_rank_native_equals_python(seed):
    rng = random.Random(seed)
    vocab, merges = _random_merges(rng, rng.choice([10, 40, 120]))
    py = Tokenizer(vocab, merges, native=False)
    nat = Tokenizer(vocab, merges)
    for text in _texts(rng):
        assert nat.encode(text) == py.encode(text), (seed, text)


@pytest.mark.parametrize("seed", range(12))
def test_tiktoken_rules_native_equals_python(seed):
    """Ranks as tiktoken's (a token's rank is its id, every split of it ranks alike): tokens made
    by random merges, ranked in a random order, so a pair may rank below the merge that made one
    of its tokens."""
    rng = random.Random(100 + seed)
    vocab, _ = _random_merges(rng, rng.choice([10, 40, 120]))
    multi = [t for i, t in sorted(vocab.items()) if i >= 256]
    rng.shuffle(multi)
    ranks = {bytes([i]): i for i in range(256)} | {t: 256 + k for k, t in enumerate(multi)}
    py = Tokenizer._from_ranks(ranks_of(ranks), "gpt2", None, False)
    nat = Tokenizer._from_ranks(ranks_of(ranks), "gpt2", None, True)
    enc = tiktoken.Encoding("random", pat_str=py.pattern, mergeable_ranks=ranks, special_tokens={})
    for text in _texts(rng):
        want = enc.encode_ordinary(text)
        assert py.encode(text) == want, (seed, text)
        assert nat.encode(text) == want, (seed, text)
