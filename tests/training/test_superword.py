"""SuperBPE's stage 2: the split it keeps (equal to the authors' HF Split), the superword rule, and
both merge engines held to the plain reference (``superword_reference``) on small corpora with
many ties and on random ones."""

from __future__ import annotations

import random

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_store.text.pretokenize import count_words
from bpe_store.text.superword_split import (
    STAGE2_PATTERN,
    STAGE2_SPLIT,
    split_isolated,
    superword_allowed,
    word_parts,
)
from bpe_store.training.merge import native_available, new_engine
from bpe_store.training.reference import reference_train_bpe
from bpe_store.training.superword import stage2_merges
from bpe_store.training.superword_reference import reference_superword_bpe, stage1_tokens, superword_merges

ENGINES = ["python"] + (["native"] if native_available() else [])
#: characters that make every alternative of the split and the rule fire: digits, punctuation
#: runs, colons before spaces, runs of spaces, newlines, letters of two scripts
ALPHABET = "ab ab ab:1.,!'\n/é中"

texts = st.text(alphabet=ALPHABET, max_size=60)


@given(texts)
@settings(max_examples=300, deadline=None)
def test_the_pattern_tiles_text_as_the_authors_split_cuts_it(text):
    assert [m.group() for m in regex.finditer(STAGE2_PATTERN, text)] == split_isolated(text)


@given(texts)
@settings(max_examples=200, deadline=None)
def test_the_split_is_hf_tokenizers_split_isolated(text):
    tokenizers = pytest.importorskip("tokenizers")
    pre = tokenizers.pre_tokenizers.Split(tokenizers.Regex(STAGE2_SPLIT), behavior="isolated")
    assert [p for p, _ in pre.pre_tokenize_str(text)] == split_isolated(text)


def test_the_superword_rule():
    assert word_parts(b" in order to be") == 4
    assert superword_allowed(b" in order", b" to be")
    assert superword_allowed(b" in order", b" to be.")  # ' be.' is one word: four
    assert not superword_allowed(b" in order to", b" be so")  # five words
    assert superword_allowed(b"a", b"b c d e")  # 'ab' is one word: four
    assert not superword_allowed(b"a ", b"b c d e")  # five
    assert not superword_allowed(b"note:", b" this") and not superword_allowed(b"x: y", b"z")
    assert superword_allowed(b"note:", b"this") and superword_allowed(b"  ", b"  ")


def _stage1(text: str, specials: list[str], t: int, engine: str):
    """Stage 1 by the engine: (token_bytes by id, logged merges)."""
    n = len(specials)
    counts = count_words(text, specials)
    rows = [(i + 1, w, c, None) for i, (w, c) in enumerate(counts.items())]
    tb: list[bytes | None] = [None] * n + [bytes([b]) for b in range(256)]
    eng = new_engine(rows, tb, n, n + 256, 0, engine)
    merges = []
    while len(merges) < t and not eng.exhausted:
        merges.extend(eng.step(t - len(merges)))
    size = max([n + 256] + [m.token + 1 for m in merges])
    tb = [eng.token_bytes.get(i) for i in range(size)]
    return tb, [(m.left, m.right, m.token) for m in merges]


def _engine_superword(text: str, vocab_size: int, specials: list[str], t: int, engine: str):
    tb, stage1 = _stage1(text, specials, t, engine)
    pieces = count_words(text, specials, STAGE2_PATTERN)
    num = vocab_size - len(specials) - 256 - len(stage1)
    out = stage2_merges(pieces, tb, len(specials), stage1, num, engine)
    names = dict(enumerate(tb))
    merges = [(names[a], names[b]) for a, b, _ in stage1]
    for m in out:
        names.setdefault(m.token, names[m.left] + names[m.right])
        merges.append((names[m.left], names[m.right]))
    assert [m.rank for m in out] == list(range(len(stage1), len(stage1) + len(out)))
    return merges


def _tie_corpus(seed: int) -> str:
    """Short repeated phrases: many pairs tie at every step, across words and inside them."""
    rng = random.Random(seed)
    words = ["a", "b", "ab", "ba", "the", "of", "to", "in", "1", "22", ":", "..", "é"]
    docs = []
    for _ in range(40):
        n = rng.randint(1, 9)
        docs.append(" ".join(rng.choice(words) for _ in range(n)) + rng.choice(["", ".", "\n", ": x", "  "]))
    return "<|endoftext|>".join(docs)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("seed", range(6))
def test_engines_equal_the_reference_on_corpora_with_many_ties(engine, seed):
    text = _tie_corpus(seed)
    specials = ["<|endoftext|>"]
    for t in (0, 5, 20):
        _, want = reference_superword_bpe(text, 257 + 60, specials, superword_from=t)
        assert _engine_superword(text, 257 + 60, specials, t, engine) == want, (seed, t)


@pytest.mark.parametrize("engine", ENGINES)
@given(st.text(alphabet=ALPHABET, max_size=120), st.integers(0, 30), st.integers(0, 40))
@settings(max_examples=60, deadline=None)
def test_engines_equal_the_reference_on_random_text(engine, text, t, extra):
    _, want = reference_superword_bpe(text, 256 + t + extra, [], superword_from=t)
    assert _engine_superword(text, 256 + t + extra, [], t, engine) == want


def test_the_reference_learns_superwords_and_keeps_the_rule():
    text = "in order to do it, in order to see it, in order to be: in order to win" * 3
    vocab, merges = reference_superword_bpe(text, 256 + 15 + 15, [], superword_from=15)
    stage2 = [left + right for left, right in merges[15:]]
    assert any(word_parts(tok) >= 2 for tok in stage2)  # superwords were learned
    assert all(word_parts(tok) <= 4 and b": " not in tok for tok in stage2)
    assert all(word_parts(left + right) <= 1 for left, right in merges[:15])  # stage 1: GPT-2 words
    assert any(tok.endswith(b":") for tok in stage2)  # 'be:' is learned, 'be: in' never


def test_stage1_tokens_are_bpe_encoding_of_the_whole_piece():
    _, merges = reference_train_bpe("the cat the hat " * 5, 256 + 10)
    piece = b" the cat the hat"
    word = stage1_tokens(piece, merges)
    assert b"".join(word) == piece and len(word) < len(piece)


def test_superword_merges_stop_when_no_allowed_pair_is_left():
    assert superword_merges({b"a: b": 3}, [(b"a", b":")], 10) == [(b" ", b"b", 3)]


@pytest.mark.skipif(not native_available(), reason="the native engine is not built")
@pytest.mark.parametrize("seed", range(4))
def test_long_pieces_replay_stage_one_natively_as_in_python(seed):
    # pieces of 48 tokens or more replay stage 1 through a heap (merge_replay.cpp replay_long),
    # shorter ones by scans: both must equal the Python engine's word-by-word replay
    rng = random.Random(seed)
    words = ["a", "b", "ab", "aab", "the", "of", "é", "中"]
    text = "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(5, 200))) for _ in range(30))
    for t in (10, 40):
        assert _engine_superword(text, 256 + t + 30, [], t, "native") == \
            _engine_superword(text, 256 + t + 30, [], t, "python")


def _replayed_stage2_engines(seed: int, common: list[str], t: int, docs: int
                             ) -> tuple[dict[bytes, int], dict[str, object]]:
    """Stage 2's pieces of random text over ``common`` words and ``t`` made-up ones, and both
    engines built on them after replaying ``t`` stage-1 merges (at most 4 words a token)."""
    rng = random.Random(seed)
    words = common + ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))) for _ in range(t)]
    text = "\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) for _ in range(docs))
    tb, stage1 = _stage1(text, [], t, "native")
    pieces = count_words(text, [], STAGE2_PATTERN)
    rows = [(i + 1, p, c, None) for i, (p, c) in enumerate(pieces.items())]
    return pieces, {e: new_engine(rows, list(tb), 0, 256, len(stage1), e, replay=stage1, max_words=4)
                    for e in ("native", "python")}


@pytest.mark.skipif(not native_available(), reason="the native engine is not built")
@pytest.mark.parametrize("part", [None, "64"])
def test_stage_two_engine_packs_its_words_and_gives_rare_pairs_no_slot(part, monkeypatch):
    # merge_prune.cpp: after the stage-1 replay the arena holds the replayed tokens, not 4 bytes a
    # byte of the pieces, and pairs counted fewer than 4 times have no slot; the pair counts read
    # from it are still every pair's, and its merges the Python engine's. The pairs are counted by
    # sorting (merge_sorted_pairs.cpp) in parts of the left ids: one part, or (part "64": at most 64
    # occurrences a part) hundreds, taken by two threads, with the same result
    if part is not None:
        monkeypatch.setenv("BPE_STORE_SORTED_PART", part)
    pieces, engines = _replayed_stage2_engines(7, ["the", "of", "and"], 300, 400)
    native = engines["native"]
    memory = native._e.memory
    assert memory["tokens"] < 2 * sum(len(p) for p in pieces)  # was 4 bytes a byte
    live = native.pair_counts()
    assert live == engines["python"].pair_counts()
    assert native._e.pair_slots < len(live) / 2  # most pairs are rare: no slot
    a, b = native.step(30), engines["python"].step(30)
    assert [(m.left, m.right, m.count) for m in a] == [(m.left, m.right, m.count) for m in b]
    assert native.pair_counts() == engines["python"].pair_counts()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_superword_merge_that_spells_an_older_token_is_counted_exactly(engine):
    # stage 1 merged (b, c) before (a, b): ' abc' is ' ', 'a', 'bc' after it, though 'abc' (id 258)
    # is a token; stage 2 merging ('a', 'bc') reuses id 258, whose pairs a pruned count may have
    # left out (merge_prune.cpp: the pairs are counted again after such a merge)
    tb: list[bytes | None] = [bytes([b]) for b in range(256)] + [b"bc", b"ab", b"abc"]
    stage1 = [(98, 99, 256), (97, 98, 257), (257, 99, 258)]
    pieces = {b" abc x abc": 9, b" abd abd": 7, b"abc abc": 5, b" z abc": 3, b"q abd": 2}
    got = [(m.left, m.right, m.token, m.count) for m in stage2_merges(pieces, tb, 0, stage1, 12, engine)]
    want = [(m.left, m.right, m.token, m.count) for m in stage2_merges(pieces, tb, 0, stage1, 12, "python")]
    assert got == want and any(t == 258 for _, _, t, _ in got)


@pytest.mark.skipif(not native_available(), reason="the native engine is not built")
def test_next_pairs_are_the_merges_to_come_in_both_engines():
    # stage 2 writes next_pairs at its checkpoints (merge_step.STAGE2_NEXT_PAIRS): the best live
    # pairs in the heap's order, the first the next merge; the native engine takes them off its
    # heap and puts them back, which must not change a merge, and stops above its pruning floor
    _, engines = _replayed_stage2_engines(3, ["the", "of", "and", "in"], 200, 300)
    for _ in range(25):
        native, python = engines["native"].next_pairs(40), engines["python"].next_pairs(40)
        by_count = sorted(engines["python"].pair_counts().items(), key=lambda pc: -pc[1])
        assert [c for _, _, c in python] == [c for _, c in by_count[:40]]
        assert native and native == python[:len(native)] and all(c >= 4 for _, _, c in native)
        assert len(native) == 40 or python[len(native)][2] < 4
        merged = [(m.left, m.right, m.count) for m in engines["native"].step(1)]
        assert merged == [(m.left, m.right, m.count) for m in engines["python"].step(1)] == [native[0]]
