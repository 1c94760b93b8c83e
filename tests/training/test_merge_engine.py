"""The merge engines: native (C++) == Python engine == the reference trainer, and the engine
contract training relies on (batch independence, rebuilding from taken changes, checkpoint rows).
"""

from __future__ import annotations

import array
import hashlib
import random
import sqlite3
from collections import Counter

import pytest
from conftest import CS336, EN, RU, corpus_slice, fixture_text, shared_file, stopped_run
from hypothesis import given
from hypothesis import strategies as st

from bpe_store import train, train_bpe
from bpe_store.bpe import merge_pair, merge_with_pairs
from bpe_store.store.store import Store
from bpe_store.text.pretokenize import count_words
from bpe_store.training.merge import (
    ENGINES,
    MergeEngine,
    native_available,
    new_engine,
    pair_digest_of,
)
from bpe_store.training.reference import merge_word, train_from_counts

needs_native = pytest.mark.skipif(not native_available(), reason="the native core is not built")
KINDS = ["python", pytest.param("native", marks=needs_native)]
SPECIALS = 1  # one special token (id 0) before the 256 bytes, as with ["<|endoftext|>"]

# {word bytes: count}: small alphabets force ties and repeated bytes (b"aaaa"); counts up to
# 2**40 make pair counts exceed 32 bits.
words_st = st.dictionaries(
    st.binary(min_size=1, max_size=8).map(lambda b: bytes(b"ab\x00\xff"[x % 4] for x in b))
    | st.text(alphabet="abc ", min_size=1, max_size=10).map(str.encode),
    st.integers(min_value=1, max_value=2**40),
    min_size=1, max_size=12)


def rows_of(word_counts: dict[bytes, int]) -> list[tuple[int, bytes, int, bytes | None]]:
    """Store-like word rows: ids from 1, every word still its single bytes."""
    return [(i + 1, w, c, None) for i, (w, c) in enumerate(word_counts.items())]


def byte_vocab() -> list[bytes | None]:
    return [None] * SPECIALS + [bytes([b]) for b in range(256)]


def engine_for(word_counts: dict[bytes, int], kind: str):
    return new_engine(rows_of(word_counts), byte_vocab(), SPECIALS, SPECIALS + 256, 0, kind)


def as_bytes(engine, merges) -> list[tuple[bytes, bytes, int]]:
    tb = engine.token_bytes
    return [(tb[m.left], tb[m.right], m.count) for m in merges]


def run(word_counts: dict[bytes, int], kind: str, n: int, batch: int | None = None):
    e = engine_for(word_counts, kind)
    merges = []
    while len(merges) < n and not e.exhausted:
        merges += e.step(min(batch or n, n - len(merges)))
    return e, merges


# -- one word: the Python engine's local pair diff --------------------------------------------------

@given(st.lists(st.integers(0, 3), max_size=14), st.integers(0, 3), st.integers(0, 3))
def test_a_merge_changes_only_the_pairs_around_it(tokens, a, b):
    # the engine updates pair counts from merge_with_pairs' gone/made pairs alone; they must be
    # exactly the difference between all pairs of the word before and after (repeats and overlaps:
    # a == b, runs like 1 2 1 2, merges at both ends)
    new, gone, made = merge_with_pairs(tokens, a, b, 9)
    spell = [b"w", b"x", b"y", b"z"]
    assert [(spell[t] if t < 4 else spell[a] + spell[b]) for t in new] == list(
        merge_word(tuple(spell[t] for t in tokens), (spell[a], spell[b])))
    assert new == merge_pair(tokens, a, b, 9)
    diff = Counter(zip(new, new[1:]))
    diff.subtract(Counter(zip(tokens, tokens[1:])))
    expected = Counter(made)
    expected.subtract(Counter(gone))
    assert +diff == +expected and -diff == -expected


# -- differential: native == Python == reference ---------------------------------------------------

@given(words_st, st.integers(min_value=1, max_value=40))
def test_engines_equal_reference_on_generated_counts(word_counts, n):
    ref = train_from_counts(word_counts, n)
    py, py_merges = run(word_counts, "python", n)
    assert as_bytes(py, py_merges) == ref
    assert py.exhausted == (len(ref) < n)
    if native_available():
        nat, nat_merges = run(word_counts, "native", n)
        assert nat_merges == py_merges  # same ranks, ids (including reused ones) and counts
        assert nat.pair_counts() == py.pair_counts()
        assert nat.exhausted == py.exhausted


# Long words over 3 letters: runs ("aaaaaaa"), alternations ("abababab") and matches at every
# offset of a word of up to 70 tokens, so the native engine's vectorized scan for a pair (4 token
# positions at a time, then one by one to the end) meets matches in each lane, straddling blocks,
# in the tail and at the last position, and its one-pass rewrite meets adjacent and overlapping
# matches. Each step is checked whole: merges, every pair count, and the changed words and pairs.
long_words_st = st.dictionaries(
    st.text(alphabet="abc", min_size=1, max_size=70).map(str.encode),
    st.integers(min_value=1, max_value=2**33), min_size=1, max_size=6)


@needs_native
@given(long_words_st, st.lists(st.integers(1, 6), min_size=1, max_size=8))
def test_native_equals_python_on_long_words_step_by_step(word_counts, steps):
    nat, py = engine_for(word_counts, "native"), engine_for(word_counts, "python")
    for n in steps:
        assert nat.step(n) == py.step(n)
        assert nat.pair_counts() == py.pair_counts()
        assert nat.take_changes() == py.take_changes()
    assert nat.exhausted == py.exhausted


@pytest.mark.parametrize("kind", KINDS)
def test_overlapping_pairs_and_ties(kind):
    # b"aaaa" holds (a, a) three times; merged left to right it becomes (aa, aa)
    counts = {b"aaaa": 1, b"ab": 2, b"ba": 1}
    e, merges = run(counts, kind, 10)
    assert as_bytes(e, merges)[:2] == [(b"a", b"a", 3), (b"a", b"b", 2)]
    assert b"aaaa" in e.token_bytes.values()  # (aa, aa): the word became two "aa" tokens
    assert as_bytes(e, merges) == train_from_counts(counts, 10)
    # ties go to the greater (left, right) as a pair of byte strings, not the concatenation:
    # (b"b", b"a") > (b"a", b"b") although both spell 2 bytes
    e, merges = run({b"ab": 5, b"ba": 5}, kind, 1)
    assert as_bytes(e, merges) == [(b"b", b"a", 5)]


@pytest.mark.parametrize("kind", KINDS)
def test_pair_compared_as_pair_not_concatenation(kind):
    # ("ab", "b") and ("a", "bc") tie at 5. As pairs ("ab", "b") is greater ("ab" > "a"); as
    # concatenations "abc" > "abb" would pick the other one. Tokens 300 = "ab", 301 = "bc".
    tb = byte_vocab() + [None] * (300 - 257) + [b"ab", b"bc"]
    a, b = SPECIALS + ord("a"), SPECIALS + ord("b")
    rows = [(1, b"abc", 5, array.array("I", [a, 301]).tobytes()),
            (2, b"abb", 5, array.array("I", [300, b]).tobytes())]
    e = new_engine(rows, tb, SPECIALS, 302, 0, kind)
    assert as_bytes(e, e.step(2)) == [(b"ab", b"b", 5), (b"a", b"bc", 5)]


@pytest.mark.parametrize("kind", KINDS)
def test_duplicate_bytes_reuse_the_first_id(kind):
    # The store's vocabulary already spells b"abc" (id 300) when merging (a, bc) spells it again:
    # words keep using the first id, as `id_of` does, and later pairs are made of it.
    tb = byte_vocab() + [None] * (300 - 257) + [b"abc"]
    e = new_engine([(1, b"abcabc", 7, None)], tb, SPECIALS, 301, 0, kind)
    merges = e.step(5)
    assert as_bytes(e, merges) == [(b"b", b"c", 14), (b"a", b"bc", 14), (b"abc", b"abc", 7)]
    assert [m.token for m in merges] == [301, 300, 303]
    assert merges[2].left == merges[2].right == 300
    assert e.exhausted


@pytest.mark.parametrize("kind", KINDS)
def test_counts_are_64_bit(kind):
    big = 2**40 + 3
    e, merges = run({b"xyxyxy": big, b"q": 1}, kind, 3)
    assert as_bytes(e, merges) == train_from_counts({b"xyxyxy": big, b"q": 1}, 3)
    assert merges[0].count == 3 * big


# -- batch independence and rebuilding (resume) ---------------------------------------------------

def _slice_counts(name: str, size: int, offset: int = 0) -> dict[bytes, int]:
    return dict(count_words(corpus_slice(name, size, offset), ["<|endoftext|>"]))


@pytest.fixture(scope="module")
def en_counts() -> dict[bytes, int]:
    return dict(count_words(fixture_text(EN, 300_000, 600_000), ["<|endoftext|>"]))


@needs_native
def test_batch_sizes_and_rebuild_give_the_same_merges(en_counts):
    n = 1500
    _, straight = run(en_counts, "native", n)
    for batch in (1, 7, 1000):
        _, merges = run(en_counts, "native", n, batch)
        assert merges == straight, batch
    # stop midway, keep only what take_changes reported (as a checkpoint does), rebuild, go on
    rows = rows_of(en_counts)
    e = engine_for(en_counts, "native")
    first = e.step(600)
    words, pairs = e.take_changes()
    stored_pairs = engine_for(en_counts, "python").pair_counts()
    stored_pairs.update(pairs)
    stored_pairs = {p: c for p, c in stored_pairs.items() if c}
    rows = [(i, w, c, array.array("I", words[k]).tobytes() if k in words else None)
            for k, (i, w, c, _) in enumerate(rows)]
    vocab = byte_vocab() + [e.token_bytes[m.left] + e.token_bytes[m.right] for m in first]
    for kind in ("native", "python"):
        again = new_engine(rows, vocab, SPECIALS, SPECIALS + 256, len(first), kind)
        assert again.bad_word == -1
        assert again.pair_counts() == stored_pairs
        assert first + again.step(n - len(first)) == straight, kind


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoint_rows_keep_a_store_exact(kind, en_counts):
    """Applying take_checkpoint_rows like SQLite would (INSERT fails on a present row, UPDATE and
    DELETE must hit one) keeps the simulated table equal to the engine's pair counts."""
    counts = dict(list(en_counts.items())[:3000])
    e = engine_for(counts, kind)
    table = e.pair_counts()
    words = {i: None for i, *_ in rows_of(counts)}
    for batch in (1, 1, 5, 50, 300, 10_000):
        e.step(batch)
        word_rows, deletes, inserts, updates = e.take_checkpoint_rows()
        for blob, wid in word_rows:
            assert wid in words
            words[wid] = blob
        for a, b in deletes:
            assert table.pop((a, b)) > 0
        for c, a, b in updates:
            assert (a, b) in table and table[(a, b)] != c
            table[(a, b)] = c
        for a, b, c in inserts:
            assert (a, b) not in table and c > 0
            table[(a, b)] = c
        assert table == e.pair_counts()
        assert e.pair_digest() == pair_digest_of(table)
    # the words' blobs rebuild the same engine state
    rows = [(i, w, c, words[i]) for i, w, c, _ in rows_of(counts)]
    tb = dict(e.token_bytes)
    vocab = [None] * SPECIALS + [tb.get(i) for i in range(SPECIALS, max(tb) + 1)]
    again = new_engine(rows, vocab, SPECIALS, SPECIALS + 256, e.next_rank, kind)
    assert again.bad_word == -1 and again.pair_counts() == table


def listed(checkpoint_rows) -> list[list[tuple]]:
    """Checkpoint rows as lists (the native engine gives row streams, made as they are read)."""
    return [[tuple(r) for r in rows] for rows in checkpoint_rows]


def _counter(word_counts: dict[bytes, int]):
    from bpe_store import _core

    counter = _core.WordCounter()
    counter.add_packed(_core.pack_counts(word_counts))
    return counter


@pytest.mark.slow
@needs_native
@pytest.mark.parametrize("kind", ["python", "native"])
@pytest.mark.parametrize("min_frequency", [1, 3])
def test_an_engine_built_from_a_word_counter_equals_one_built_from_rows(kind, min_frequency, en_counts):
    """A first counting flush hands its WordCounter to the engine (no Python row per word)."""
    counter = _counter(en_counts)
    rows = [(i, bytes(w), c, None) for i, w, c in counter.rows(1)]  # the ids the flush wrote
    assert [tuple(r) for r in counter.row_stream(1)] == [tuple(r) for r in counter.rows(1)]
    assert len(counter.row_stream(1)) == len(counter)
    args = (byte_vocab(), SPECIALS, SPECIALS + 256, 0, kind)
    a = new_engine(counter, *args, min_frequency=min_frequency)
    b = new_engine(rows, *args, min_frequency=min_frequency)
    assert a.pair_counts() == b.pair_counts() and a.bad_word == -1
    assert a.step(800) == b.step(800)
    assert listed(a.take_checkpoint_rows()) == listed(b.take_checkpoint_rows())  # the same store word ids


@needs_native
def test_word_ids_are_kept_exactly_up_to_32_bits():
    """The native engine keeps a word's store id in 32 bits (store ids are 1..N, N < 2**32): the
    largest is written back exactly in checkpoint rows, and a larger one is refused, not wrapped,
    from rows and from packed counts."""
    from bpe_store import _core

    tb = byte_vocab()
    e = new_engine([(1, b"ab", 2, None), (2**32 - 1, b"abc", 3, None)], tb, SPECIALS, 257, 0, "native")
    e.step(2)
    assert [wid for _, wid in listed(e.take_checkpoint_rows())[0]] == [1, 2**32 - 1]
    with pytest.raises(ValueError, match="word row 1: word ids"):
        new_engine([(1, b"ab", 2, None), (2**32, b"abc", 3, None)], tb, SPECIALS, 257, 0, "native")
    with pytest.raises(ValueError, match="word row 1: word ids"):
        _core.MergeEngine(_core.pack_counts({b"ab": 2, b"abc": 3}), 2**32 - 1, tb, SPECIALS, 257, 0)


@needs_native
@pytest.mark.parametrize("big", [2**32 - 2, 2**32 - 1, 2**32, 2**61])
def test_word_counts_around_32_bits_are_exact(big):
    """The native engine keeps a word's count in 32 bits, and counts from 2**32 - 1 on in a side
    table: merges, pair counts, checkpoint rows and the top words equal the Python engine's on
    both sides of that line."""
    counts = {b"abcab": big, b"cab": 3, b"abd": big - 1, b"xy": 1, b"xyab": 2**32 - 3}
    engines = {k: engine_for(counts, k) for k in ("native", "python")}
    merges = {k: e.step(6) for k, e in engines.items()}
    assert as_bytes(engines["native"], merges["native"]) == as_bytes(engines["python"], merges["python"])
    assert engines["native"].pair_counts() == engines["python"].pair_counts()
    native, python = engines["native"], engines["python"]
    assert listed(native.take_checkpoint_rows()) == listed(python.take_checkpoint_rows())
    for k in (1, 2, 3):
        assert [tuple(r) for r in native.top_word_rows(k)] == [tuple(r) for r in python.top_word_rows(k)]


@needs_native
def test_a_word_costs_a_16_byte_header_and_the_first_lists_are_exact(en_counts):
    """Per distinct word the engine pays a 16-byte header (length, stamp, 32-bit count, store id)
    beside its tokens, and the first pair count lists the words in blocks of exactly the entries
    they hold; merging shortens words in place, and the walks over the arena (checkpoint rows,
    word indexes) still find every word: each word's tokens spell it merged by the reference."""
    e = engine_for(en_counts, "native")
    memory = e._e.memory
    assert memory["words"] == 16 * e._e.num_words == 16 * len(en_counts)
    assert memory["word_lists"] == 4 * e._e.index_entries
    merges = e.step(300)
    words, _ = e.take_changes()
    assert 0 < len(words) < len(en_counts)
    tb = e.token_bytes
    pairs = [(tb[m.left], tb[m.right]) for m in merges]
    every = max(1, len(en_counts) // 400)  # word_tokens walks the arena from its start
    for i, word in enumerate(en_counts):
        if i % every and i not in words:
            continue
        expect = tuple(bytes([b]) for b in word)
        for a, b in pairs:
            if a + b in word:  # else the merge cannot change the word (300 merge_word calls a word: ~4 CPU s)
                expect = merge_word(expect, (a, b))
        assert tuple(tb[t] for t in e._e.word_tokens(i)) == expect
        if i in words:
            assert words[i] == e._e.word_tokens(i)


@needs_native
def test_a_merged_pairs_large_list_is_given_back_at_once():
    """Merging a pair frees its list of words, and a block of 2**14 entries or more gives its
    pages back to the OS at once rather than at the next compaction of the pool: the engine's
    account of its lists drops by the list. 40 K words "ab" + two bytes, no pair made with "ab"
    counted (max_token_length 2), so the merge adds no list; with their two bytes reversed as
    more words, 55 K pairs grow the pair index past its first size (rebuilt from the slots).
    The merges are Python's."""
    tails = [bytes([x, y]) for x in range(100, 256) for y in range(256)]  # no "ab" in them
    counts = {b"ab" + t: 1 for t in tails} | {t[::-1]: 1 for t in tails}
    args = (byte_vocab(), SPECIALS, SPECIALS + 256, 0)
    e = new_engine(rows_of(counts), *args, "native", max_token_length=2)
    python = new_engine(rows_of(counts), *args, "python", max_token_length=2)
    before = e._e.memory["word_lists"]
    assert before == 4 * e._e.index_entries
    merges = e.step(1)
    assert as_bytes(e, merges) == [(b"a", b"b", len(tails))]
    assert e._e.memory["word_lists"] == before - 4 * len(tails) == 4 * e._e.index_entries
    assert as_bytes(python, python.step(1) + python.step(30)) == as_bytes(e, merges + e.step(30))
    assert e.pair_counts() == python.pair_counts()


@needs_native
def test_a_malformed_packed_counter_is_a_value_error():
    from bpe_store import _core

    with pytest.raises(ValueError, match="packed counts"):
        _core.MergeEngine(b"BPC1\x05", 1, byte_vocab(), SPECIALS, SPECIALS + 256, 0)


@needs_native
def test_compacting_the_pair_word_lists_changes_no_merge(en_counts):
    """The lists of words holding each pair share one pool, compacted in place when it is mostly
    freed blocks (automatically only past 1 Mi entries: here forced after every merge)."""
    _, straight = run(en_counts, "native", 400)
    e = engine_for(en_counts, "native")
    merges = []
    for _ in range(400):
        merges += e.step(1)
        before = e._e.index_entries
        e._e.compact_lists()
        assert e._e.index_entries == before
    assert merges == straight
    assert e.pair_digest() == run(en_counts, "python", 400)[0].pair_digest()


@needs_native
@pytest.mark.parametrize("n_specials", [0, 1, 3])
def test_first_pair_count_lists_each_word_once_per_pair(n_specials):
    """The engine's first pair count (``build_pairs``) finds pairs of two byte tokens through a
    dense table and lists a word once under each pair it holds, checked against the words it has
    seen rather than the list's last entry; longer words (over 32 pairs) take the list check.
    Built from rows mixing single bytes, stored tokens with merge ids (outside the dense table)
    and repeated pairs, short and long: the pair counts, the number of (word, pair) listings,
    the merges and the checkpoint rows equal the Python engine's and the exact count."""
    vocab = [None] * n_specials + [bytes([b]) for b in range(256)] + [b"ab", b"aba", b"ba"]
    first = n_specials + 256
    ab, aba, ba = first, first + 1, first + 2

    def ids(*toks) -> bytes:
        return array.array("I", toks).tobytes()

    def byte(c: str) -> int:
        return n_specials + ord(c)

    rows = [(1, b"abab", 5, None), (2, b"aaaa", 2, None), (3, b"abcab", 7, ids(ab, byte("c"), ab)),
            (4, b"abaaba", 3, ids(aba, aba)), (5, b"ab" * 40, 11, None), (6, b"ba" * 30 + b"c", 2, None),
            (7, b"abab" * 12, 4, ids(*[ab] * 24)), (8, b"ba" * 20, 9, ids(*[ba] * 20)), (9, b"x", 1, None)]
    engines = {k: new_engine(rows, vocab, n_specials, first, 3, k) for k in ("python", "native")}
    native, python = engines["native"], engines["python"]
    assert native.bad_word == python.bad_word == -1
    assert native.pair_counts() == python.pair_counts()
    holdings = 0
    for _, wbytes, _, blob in rows:
        toks = array.array("I", blob).tolist() if blob else [n_specials + b for b in wbytes]
        holdings += len(set(zip(toks, toks[1:])))
    assert native._e.index_entries == holdings
    merges = {k: e.step(20) for k, e in engines.items()}
    assert as_bytes(native, merges["native"]) == as_bytes(python, merges["python"])
    assert listed(native.take_checkpoint_rows()) == listed(python.take_checkpoint_rows())


def _many_words() -> dict[bytes, int]:
    """300 K distinct words of 1-9 bytes over "abcdeeetth ", with counts 1-50, drawn from one seed
    in bulk (a draw a byte took 2.9 CPU s)."""
    rng = random.Random(13)
    counts: dict[bytes, int] = {}
    while len(counts) < 300_000:
        text = bytes(rng.choices(b"abcdeeetth ", k=500_000))
        lengths, adds = rng.choices(range(1, 10), k=100_000), rng.choices((1, 1, 2, 3, 50), k=100_000)
        at = 0
        for n, add in zip(lengths, adds):
            word = text[at:at + n]
            at += n
            counts[word] = counts.get(word, 0) + add
            if len(counts) == 300_000:
                break
    return counts


def large_arrays_digest(kind: str) -> str:
    """The digest of what an engine of ``kind`` gives on ``_many_words``: its merges and checkpoint
    rows after 1, 41 and 241 merges, then every pair count."""
    e = engine_for(_many_words(), kind)
    if kind == "native":
        assert e._e.memory["words"] >= 4 << 20
    h = hashlib.sha256()
    for n in (1, 40, 200):
        h.update(repr(as_bytes(e, e.step(n))).encode())
        for rows in e.take_checkpoint_rows():
            for row in rows:  # the native engine's blobs are bytearrays, Python's bytes
                h.update(repr(tuple(bytes(x) if isinstance(x, bytearray) else x for x in row)).encode())
    h.update(repr(sorted(e.pair_counts().items())).encode())
    return h.hexdigest()


#: ``large_arrays_digest("python")``: the independent Python engine's answer, stored (it took ~25
#: CPU s a run, the native engine ~1); ``PYTHONPATH=tests python
#: tests/training/test_merge_engine.py`` computes it again.
LARGE_ARRAYS_PYTHON = "a4d99947e32957d0859e2e658960c81239e0b4e5a01f1875384313448382f03f"


@pytest.mark.slow
@needs_native
def test_an_engine_of_large_arrays_equals_the_python_engine():
    """300 K words: the word arena (a header and the tokens of each word; 4.8 MB here, 16 bytes
    a word) takes the engine's large-array path (``BigArray``, from 4 MiB: mapped on 2 MiB
    boundaries, huge pages asked for, zero-filled by the kernel), which smaller tests never reach;
    the final take walks the arena for its changed words (most of them) instead of sorting them.
    The same merges, counts and checkpoint rows as Python, whose digest is stored: the Python
    engine is compared with the native one step by step on smaller counts above and on corpus
    slices below, and with the reference trainer. (Why not fewer words: below 4 MiB the arena is
    plain memory.)"""
    assert large_arrays_digest("native") == LARGE_ARRAYS_PYTHON


@pytest.mark.parametrize("kind", KINDS)
def test_finish_frees_the_merging_state_and_the_checkpoint_is_the_same(kind, en_counts):
    a, _ = run(en_counts, kind, 500)
    b, _ = run(en_counts, kind, 500)
    b.finish()
    assert listed(b.take_checkpoint_rows()) == listed(a.take_checkpoint_rows())
    assert b.pair_digest() == a.pair_digest()
    if kind == "native":
        memory = b._e.memory
        assert memory["word_lists"] == memory["heap"] == memory["pair_index"] == 0
        with pytest.raises(RuntimeError, match="finish"):
            b.step(1)
    else:
        assert b.step(1) == [] and b.exhausted


@pytest.mark.parametrize("kind", KINDS)
def test_corrupt_word_rows_are_reported_not_crashed(kind):
    tb = byte_vocab()
    good = array.array("I", [SPECIALS + x for x in b"ab"]).tobytes()
    for bad in (b"\x01\x02\x03", array.array("I", [10**6]).tobytes(), array.array("I", [0]).tobytes(),
                array.array("I", [SPECIALS + ord("a")]).tobytes()):
        e = new_engine([(1, b"ab", 2, good), (2, b"ab", 3, bad)], tb, SPECIALS, 257, 0, kind)
        assert e.bad_word == 1
    e = new_engine([(1, b"ab", 2, good)], tb, SPECIALS, 257, 0, kind)
    assert e.bad_word == -1


def test_engine_choice_is_validated(en_counts):
    # every engine ENGINES names is built and learns the same merges on real text; this test used
    # to restate the tuple, which no change to the engines could fail
    merges = {kind: run(en_counts, kind, 50)[1] for kind in ENGINES if kind != "native" or native_available()}
    assert "python" in merges and "auto" in merges
    assert all(m == merges["python"] for m in merges.values())
    with pytest.raises(ValueError, match="engine must be one of auto, native, python, not 'rust'"):
        new_engine([], byte_vocab(), SPECIALS, 257, 0, "rust")
    assert isinstance(new_engine([], byte_vocab(), SPECIALS, 257, 0, "python"), MergeEngine)
    e = new_engine([], byte_vocab(), SPECIALS, 257, 0, "auto")
    assert e.step(5) == [] and e.exhausted


# -- real text ------------------------------------------------------------------------------------

def _gpt2_decoder() -> dict[str, int]:
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in table.items()}


@needs_native
def test_cs336_reference_merges_with_the_native_engine(tmp_path):
    dec = _gpt2_decoder()
    expected = []
    for line in shared_file("cs336", "train-bpe-reference-merges.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#version"):
            left, right = line.split(" ")
            expected.append((bytes(dec[c] for c in left), bytes(dec[c] for c in right)))
    _, merges = train_bpe(CS336 / "corpus.en", 500, ["<|endoftext|>"], engine="native")
    assert merges == expected


@pytest.mark.slow
@needs_native
@pytest.mark.parametrize("name", ["enwiki-100M.txt", "tinystories-ru-20M.txt", "zhwiki-20M.txt"])
def test_native_equals_python_on_corpus_slices(name):
    counts = _slice_counts(name, 1_000_000, 3_000_000)
    n = 600
    py, py_merges = run(counts, "python", n)
    nat, nat_merges = run(counts, "native", n)
    assert nat_merges == py_merges
    assert nat.pair_counts() == py.pair_counts()
    assert nat.take_changes() == py.take_changes()


def deep_merges_digest(name: str, kind: str) -> str:
    """The digest of the first 3000 merges (rank, ids, count) an engine of ``kind`` makes on the
    first 2 MB of the shared corpus ``name``."""
    _, merges = run(_slice_counts(name, 2_000_000), kind, 3000)
    return hashlib.sha256(repr([(m.rank, m.left, m.right, m.token, m.count) for m in merges]).encode()).hexdigest()


#: ``deep_merges_digest(name, "python")`` of each corpus: the independent Python engine's merges,
#: stored (on zhwiki it took 17-19 CPU s a run, the native engine 0.5); ``PYTHONPATH=tests python
#: tests/training/test_merge_engine.py`` computes them again.
DEEP_MERGES_PYTHON = {
    "enwiki-100M.txt": "ee6c87c479109dea2aa5c7f401ec4d1d875b5eb2dea84ba9b0341e867533e541",
    "tinystories-ru-20M.txt": "5128817fbecebab5732421d32441fba823536c87c6c5011b32b5ce1de5f0f29c",
    "zhwiki-20M.txt": "fbbe8cf1172dd974b908828bfe601fa67325378960c52eba2108dfbb7237f46a",
}


@pytest.mark.slow
@needs_native
@pytest.mark.parametrize("name", list(DEEP_MERGES_PYTHON))
def test_native_equals_python_on_2mb_slices_to_3000_merges(name):
    # The check that the native engine agrees with the independent Python engine deep into a merge
    # log (3000 merges) on CJK text, whose words are long (~26 bytes on zhwiki), so late merges
    # touch long words with large ids. The Python engine's merges are a stored digest (the whole
    # zh case was 34 CPU s, nearly all of it the Python engine); the two engines run side by side
    # on 1 MB slices to 600 merges above (test_native_equals_python_on_corpus_slices), every pair
    # count and changed word compared too.
    assert deep_merges_digest(name, "native") == DEEP_MERGES_PYTHON[name]


# -- through train(): engines interchangeable, the store stays consistent ----------------------------

@needs_native
def test_train_resumes_across_engines(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(fixture_text(RU, 200_000).encode())
    straight = train([corpus], tmp_path / "a.db", 700, ["<|endoftext|>"], engine="python", checkpoint_merges=97)
    db = tmp_path / "b.db"
    train([corpus], db, 450, ["<|endoftext|>"], engine="native", checkpoint_merges=31)
    half = train([corpus], db, 600, ["<|endoftext|>"], engine="python", checkpoint_merges=50)
    assert half.merges == straight.merges[:600 - 257]
    r = train([corpus], db, 700, ["<|endoftext|>"], engine="native")
    assert (r.merges, r.merge_counts) == (straight.merges, straight.merge_counts)
    with Store.open(db) as store:
        # a finished run keeps its words and merges, not the merging's working state, but the
        # counts of its most frequent pairs and the tokens of its most frequent words: here all
        assert store.state_merges() is None and store.pairs_merges() == 700 - 257
        assert len(store.load_pair_counts()) > 0  # exactly which: tests/training/test_next_pairs.py
        assert store.sql("SELECT count(*) FROM words WHERE tokens IS NULL").scalar() == 0


def test_train_rejects_an_unknown_engine(tmp_path):
    from bpe_store import InputError

    corpus = tmp_path / "c.txt"
    corpus.write_text("hello hello")
    with pytest.raises(InputError, match="engine"):
        train([corpus], tmp_path / "x.db", 300, [], engine="rust")
    assert not (tmp_path / "x.db").exists()


def test_store_digest_sees_any_changed_count(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(fixture_text(EN, 50_000).encode())
    db = tmp_path / "x.db"
    stopped_run(corpus, db, 300, [], at=20, checkpoint_merges=5)  # a finished run keeps no pair counts
    with Store.open(db) as store:
        d = store.pair_counts_digest()
        assert d == pair_digest_of(store.load_pair_counts()) and d[0] > 1000
    con = sqlite3.connect(db)
    con.execute('UPDATE pair_counts SET count = count + 1 WHERE ("left", "right") IN '
                '(SELECT "left", "right" FROM pair_counts ORDER BY count LIMIT 1)')
    con.commit()
    con.close()
    with Store.open(db) as store:
        assert store.pair_counts_digest() != d


_KILLED_CHILD = """
import os, signal, sys
from bpe_store import train
def progress(ev):
    if ev["stage"] == "merging" and ev["done"] >= int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
train([sys.argv[1]], sys.argv[2], 1000, ["<|endoftext|>"], engine="native", checkpoint_merges=50,
      progress=progress)
"""


@needs_native
def test_kill_9_mid_batch_then_resume_equals_straight_run(tmp_path):
    import subprocess
    import sys

    corpus = tmp_path / "c.txt"
    corpus.write_bytes(fixture_text(EN, 400_000, 500_000).encode())
    straight = train([corpus], tmp_path / "a.db", 1000, ["<|endoftext|>"], engine="native")
    db = tmp_path / "b.db"
    p = subprocess.run([sys.executable, "-c", _KILLED_CHILD, str(corpus), str(db), "420"])
    assert p.returncode == -9
    with Store.open(db) as store:
        assert store.sql("SELECT count(*) FROM merges").scalar() == 400  # the last whole batch
    r = train([corpus], db, 1000, ["<|endoftext|>"], engine="native")
    assert (r.merges, r.merge_counts) == (straight.merges, straight.merge_counts)


@needs_native
@pytest.mark.parametrize("keep", [None, "0", "40"])
def test_the_first_pair_count_lists_the_same_words_with_or_without_the_kept_slots(monkeypatch, keep):
    """build_pairs keeps each word's slots from its first pass for its second while they fit
    (merge_build.cpp); past the bound (BPE_STORE_BUILD_KEEP_SLOTS, 16 M by default) it looks them
    up again. Both must list every word under every pair it holds: the merges (which follow those
    lists) and the pair counts equal the Python engine's."""
    if keep is None:
        monkeypatch.delenv("BPE_STORE_BUILD_KEEP_SLOTS", raising=False)
    else:
        monkeypatch.setenv("BPE_STORE_BUILD_KEEP_SLOTS", keep)
    rng = random.Random(5)
    words = {bytes(rng.choice(b"abcd ") for _ in range(rng.randint(1, 12))): rng.randint(1, 50) for _ in range(300)}
    nat, py = engine_for(words, "native"), engine_for(words, "python")
    assert nat.pair_counts() == py.pair_counts()
    assert nat.step(60) == py.step(60)
    assert nat.pair_counts() == py.pair_counts()


if __name__ == "__main__":  # the stored digests, computed again: PYTHONPATH=tests python <this file>
    print("LARGE_ARRAYS_PYTHON =", repr(large_arrays_digest("python")))
    print("DEEP_MERGES_PYTHON =", {name: deep_merges_digest(name, "python") for name in DEEP_MERGES_PYTHON})
