"""Merges logged between full checkpoints (``merge_step.MERGE_LOG_SECONDS``) and replayed on resume.

A merge log holds merges, their vocabulary and the progress but no word or pair rows, so the
store's ``merges`` runs ahead of ``words.tokens`` and ``pair_counts`` (``run.state_merges``). A
resume applies the logged merges to the words (``replay``) and must then be exactly where merging
them again would be: the same words, pair counts and next merges, and the next checkpoint must
leave the store as an uninterrupted run's.
"""

from __future__ import annotations

import random
import sqlite3
import sys

import pytest
import regex
from alembic import command
from conftest import EN, RU, ZH, fixture_text, kill_when_paused, stopped_run, store_contents
from hypothesis import given
from hypothesis import strategies as st
from test_merge_engine import KINDS, SPECIALS, byte_vocab, listed, needs_native, rows_of, words_st

from bpe_store import train
from bpe_store.bpe import replay_ranks, replay_word
from bpe_store.inspection.answers import splitter
from bpe_store.store import migrate
from bpe_store.store.counting_rows import unpack_tokens
from bpe_store.store.store import Store
from bpe_store.text.pretokenize import resolve_pattern
from bpe_store.training import merge_step as train_module
from bpe_store.training.merge import new_engine


def built(word_counts: dict[bytes, int], kind: str, merges: list, k: int):
    """An engine over the words still single bytes, ``merges[:k]`` replayed on them."""
    tb = byte_vocab()
    vocab = tb + [None] * max(0, max((m.token for m in merges[:k]), default=0) + 1 - len(tb))
    for m in merges[:k]:
        vocab[m.token] = (vocab[m.left] or b"") + (vocab[m.right] or b"")
    replay = [(m.left, m.right, m.token) for m in merges[:k]]
    return new_engine(rows_of(word_counts), vocab, SPECIALS, SPECIALS + 256, k, kind, replay=replay)


def merged(word_counts: dict[bytes, int], kind: str, n: int):
    e = new_engine(rows_of(word_counts), byte_vocab(), SPECIALS, SPECIALS + 256, 0, kind)
    merges: list = []
    while len(merges) < n and not e.exhausted:
        merges += e.step(n - len(merges))
    return e, merges


@pytest.mark.parametrize("kind", KINDS)
@given(word_counts=words_st, n=st.integers(1, 40), cut=st.floats(0, 1))
def test_replaying_logged_merges_equals_merging_them(kind, word_counts, n, cut):
    """Small alphabets make repeated bytes (b"aaaa") and merges that spell an existing token (a
    reused id, so a merged pair can come back under a later rank)."""
    replay_equals_merging(word_counts, kind, n, cut)


#: Words of a few characters of 1 to 4 UTF-8 bytes, with bytes that are no whole character among
#: them (a character cut short, a continuation byte alone, 0xFF): merges join characters into
#: tokens of several, and tokens that begin or end inside a character.
utf8_words_st = st.dictionaries(
    st.lists(st.sampled_from(["的", "是", "一", "é", "a", " ", "🙂", b"\xe7", b"\x84", b"\xff"]), min_size=1,
             max_size=24).map(lambda units: b"".join(u if isinstance(u, bytes) else u.encode() for u in units)),
    st.integers(min_value=1, max_value=50), min_size=1, max_size=16)


@pytest.mark.parametrize("kind", KINDS)
@given(word_counts=utf8_words_st, n=st.integers(1, 80), cut=st.floats(0, 1))
def test_replaying_utf8_words_part_by_part_equals_merging_them(kind, word_counts, n, cut):
    """The native replay cuts a word between two characters no token holds side by side, and
    replays the parts alone (replay_cuts.h): a token across the cut, whole characters or parts of
    them, must keep it whole."""
    replay_equals_merging(word_counts, kind, n, cut)


def _replayed_slice(name: str):
    """``(the engine merged to 1,200, its merges, the engine merged to 1,000, an engine built by
    replaying those 1,000)`` over the GPT-2 words of a 300 KB slice of a corpus, all native."""
    words: dict[bytes, int] = {}
    for w in regex.findall(resolve_pattern("gpt2"), fixture_text(name, 300_000)):
        words[w.encode()] = words.get(w.encode(), 0) + 1
    whole, merges = merged(words, "native", 1200)
    at_k, _ = merged(words, "native", 1000)
    return whole, merges, at_k, built(words, "native", merges, 1000)


@needs_native
@pytest.mark.parametrize("name", [ZH, RU])
def test_replaying_a_corpus_slice_part_by_part_equals_merging_it(name):
    """Real text: Han runs are the words the character cuts are for."""
    whole, merges, at_k, replayed = _replayed_slice(name)
    assert replayed.pair_counts() == at_k.pair_counts()
    assert listed(replayed.take_checkpoint_rows())[0] == listed(at_k.take_checkpoint_rows())[0]
    assert replayed.step(200) == merges[1000:]


@needs_native
@pytest.mark.parametrize("name", [ZH, RU])
def test_a_replayed_engine_gives_rare_pairs_no_slot_and_merges_on_the_same(name):
    """After a replay the native engine packs its words and gives the pairs counted fewer than 4
    times no slot (merge_prune.cpp; a run extending a base starts so). Merging on from there,
    pruned, with no checkpoint in between, gives the merges, pair counts and kept top pairs of
    the words merged all along."""
    whole, merges, at_k, replayed = _replayed_slice(name)
    live = at_k.pair_counts()
    assert replayed._e.pair_slots < len(live) / 2  # most pairs are rare: no slot
    assert replayed._e.memory["tokens"] < at_k._e.memory["tokens"]  # packed: no padding of the bytes
    assert replayed.pair_counts() == live  # read exactly from a tally
    assert replayed.step(200) == merges[1000:]
    assert replayed.pair_counts() == whole.pair_counts()
    assert list(replayed.top_pair_rows(500)) == list(whole.top_pair_rows(500))


def replay_equals_merging(word_counts: dict[bytes, int], kind: str, n: int, cut: float) -> None:
    """``merges[:k]`` replayed on the words (``built``) is where merging them left off: the same
    pair counts, first checkpoint and next merges."""
    whole, merges = merged(word_counts, kind, n)
    k = int(cut * len(merges))
    at_k, _ = merged(word_counts, kind, k)
    replayed = built(word_counts, kind, merges, k)
    assert replayed.bad_word == -1 and replayed.next_rank == k
    assert replayed.pair_counts() == at_k.pair_counts()
    assert replayed.rewrite_pairs == (k > 0)
    # its first checkpoint: the words the replay changed, and every live pair as a new row
    word_rows, deletes, inserts, updates = listed(replayed.take_checkpoint_rows())
    assert not replayed.rewrite_pairs
    expected_words, _d, _i, _u = listed(at_k.take_checkpoint_rows())
    if k:
        assert word_rows == expected_words
        assert deletes == updates == []
        assert sorted(inserts) == sorted((a, b, c) for (a, b), c in at_k.pair_counts().items())
    else:
        assert (word_rows, deletes, inserts, updates) == ([], [], [], [])
    rest: list = []
    while len(rest) < n - k and not replayed.exhausted:
        rest += replayed.step(n - k - len(rest))
    assert rest == merges[k:]
    assert replayed.pair_counts() == whole.pair_counts()


@pytest.mark.slow
@needs_native
def test_the_native_replay_on_two_threads_equals_merging():
    """From 100,000 words the native replay splits the words between two threads."""
    rng = random.Random(7)
    words: dict[bytes, int] = {}
    while len(words) < 150_000:
        words[bytes(rng.choice(b"abcde ") for _ in range(rng.randint(1, 14)))] = rng.randint(1, 1000)
    whole, merges = merged(words, "native", 400)
    at_k, _ = merged(words, "native", 250)
    replayed = built(words, "native", merges, 250)
    assert replayed.pair_counts() == at_k.pair_counts()
    assert listed(replayed.take_checkpoint_rows())[0] == listed(at_k.take_checkpoint_rows())[0]
    assert replayed.step(150) == merges[250:]
    assert replayed.pair_counts() == whole.pair_counts()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n_specials", [0, 3])
def test_replay_with_other_numbers_of_special_tokens(kind, n_specials):
    """Byte ids start after the special tokens (the native replay looks pairs of two bytes up in
    a table of its own)."""
    words = {f" w{i % 97}x{i % 13}".encode(): 1 + i % 7 for i in range(400)}
    rows = [(i + 1, w, c, None) for i, (w, c) in enumerate(words.items())]
    vocab = [None] * n_specials + [bytes([b]) for b in range(256)]
    first = n_specials + 256
    whole = new_engine(rows, vocab, n_specials, first, 0, kind)
    merges = whole.step(60)
    at_k = new_engine(rows, vocab, n_specials, first, 0, kind)
    at_k.step(30)
    tb = dict(whole.token_bytes)
    grown = vocab + [tb[first + r] for r in range(30)]
    replayed = new_engine(rows, grown, n_specials, first, 30, kind,
                          replay=[(m.left, m.right, m.token) for m in merges[:30]])
    assert replayed.pair_counts() == at_k.pair_counts()
    assert replayed.step(30) == merges[30:]


@needs_native
def test_both_engines_keep_the_same_most_frequent_words_whatever_their_ids():
    """The words more frequent than the (k+1)-th: the counts decide, not the ids (which follow
    the order counting met the words, so threads and chunk sizes change them)."""
    words = {f" w{i}".encode(): 1 + i // 3 for i in range(300)}  # three words per count
    backwards = dict(reversed(list(words.items())))  # the same words, other ids
    got = {}
    for kind in ("python", "native"):
        for order, counts in (("forwards", words), ("backwards", backwards)):
            e = new_engine(rows_of(counts), byte_vocab(), SPECIALS, SPECIALS + 256, 0, kind)
            e.step(20)
            ids = {i + 1: w for i, w in enumerate(counts)}
            got[kind, order] = [sorted((ids[wid], bytes(blob)) for blob, wid in listed([e.top_word_rows(k)])[0])
                                for k in (0, 7, 1000)]
    assert len({tuple(map(tuple, v)) for v in got.values()}) == 1
    none, seven, every = got["native", "forwards"]
    assert none == [] and len(every) == 300
    assert [w for w, _ in seven] == sorted(f" w{i}".encode() for i in range(294, 300))  # counts 100, 99: not 98


def test_a_pair_merged_again_under_a_later_rank_is_replayed_at_that_rank():
    # ranks 0 (a, b) -> 5, 1 (5, c) -> 6, 2 (c, c) -> 7, 3 (5, c) again -> 6
    replay = [(1, 2, 5), (5, 3, 6), (3, 3, 7), (5, 3, 6)]
    ranks = {(1, 2): [0], (5, 3): [1, 3], (3, 3): [2]}
    assert replay_ranks(replay) == ranks
    assert replay_word([1, 2, 3, 3, 1, 2, 3], replay, ranks) == [6, 3, 6]
    assert replay_word([3, 3, 3], replay, ranks) == [7, 3]


@pytest.mark.parametrize("kind", KINDS)
def test_a_pair_met_after_its_first_rank_waits_for_its_next_one(kind):
    """Bytes a b c d (ids 98..101 with one special token). Log: 0 (e, e), 1 (ab, c) -> abc,
    2 (a, b) -> ab, 3 (c, d) -> cd, 4 (ab, c) -> abc again. In "abcd", (ab, c) exists only after
    rank 2: its next rank is 4, so (c, d) at 3 comes first: ab cd, not abc d."""
    vocab = byte_vocab() + [b"ee", b"abc", b"ab", b"cd"]  # ids 257, 258, 259, 260
    replay = [(102, 102, 257), (259, 100, 258), (98, 99, 259), (100, 101, 260), (259, 100, 258)]
    e = new_engine(rows_of({b"abcd": 1}), vocab, SPECIALS, SPECIALS + 256, len(replay), kind, replay=replay)
    [(blob, _id)], *_ = listed(e.take_checkpoint_rows())
    assert unpack_tokens(bytes(blob)) == [259, 260]
    assert replay_word([98, 99, 100, 101], replay, replay_ranks(replay)) == [259, 260]


@pytest.mark.parametrize("kind", KINDS)
def test_a_damaged_merge_log_is_refused(kind):
    vocab = byte_vocab() + [b"ab"]
    with pytest.raises(ValueError, match="logged merge"):
        new_engine(rows_of({b"ab": 1}), vocab, SPECIALS, SPECIALS + 256, 1, kind,
                   replay=[(SPECIALS + ord("a"), SPECIALS + ord("c"), SPECIALS + 256)])


RUNNER = """
import importlib, sys
from bpe_store import train
t = importlib.import_module("bpe_store.training.merge_step")
t.MERGE_LOG_SECONDS = 0.0  # a log after every sub-step of merges
train([sys.argv[1]], sys.argv[2], 600, ["<|endoftext|>"], workers=2, chunk_size=50_000,
      checkpoint_seconds=600.0, checkpoint_merges={every}, engine={engine!r})
"""


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("every", [None, 150], ids=["no-full-checkpoint", "full-every-150"])
def test_a_kill_between_full_checkpoints_loses_only_the_unlogged_merges(tmp_path, engine, every):
    """Killed inside a merge log's transaction after logs with no full checkpoint since, a run's
    store holds merges ahead of the words' tokens and pair counts. The same command resumes it (replaying
    those merges) to exactly the store of an uninterrupted run."""
    if engine == "native":
        pytest.importorskip("bpe_store._core")
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 300_000), encoding="utf-8")
    script = RUNNER.format(every=every, engine=engine)
    whole = tmp_path / "whole.db"
    train([corpus], whole, 600, ["<|endoftext|>"], workers=2, chunk_size=50_000, engine=engine)
    db = tmp_path / "killed.db"
    # a log after each 64-merge sub-step; with full checkpoints every 150 merges (sub-steps of 64,
    # 64, 22), log 5 follows the full checkpoint at 300 and the kill comes inside log 6
    point = "merge_log:3" if every is None else "merge_log:6"
    kill_when_paused([sys.executable, "-c", script, str(corpus), str(db)], point)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        merges, state, phase = con.execute(
            "SELECT (SELECT count(*) FROM merges), state_merges, phase FROM run").fetchone()
    finally:
        con.close()
    assert phase == "merging" and merges > state, (merges, state)
    if every is None:
        assert state == 0 and merges == 128  # two logs of one 64-merge sub-step each
    else:
        assert state > 0 and state % 150 == 0
    train_module.MERGE_LOG_SECONDS, saved = 0.0, train_module.MERGE_LOG_SECONDS
    try:
        train([corpus], db, 600, ["<|endoftext|>"], workers=2, chunk_size=50_000, checkpoint_merges=every,
              engine=engine)
    finally:
        train_module.MERGE_LOG_SECONDS = saved
    assert store_contents(db) == store_contents(whole)


def test_a_merge_log_commits_merges_without_word_or_pair_rows(tmp_path):
    """Each log is one transaction of merges and vocabulary; ``state_merges`` moves only with a
    full checkpoint. The last write of a run drops the working state but the tokens of its most
    frequent words (``KEEP_WORD_TOKENS``)."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 300_000), encoding="utf-8")
    seen: list[dict] = []
    saved = train_module.MERGE_LOG_SECONDS, train_module.KEEP_WORD_TOKENS
    train_module.MERGE_LOG_SECONDS, train_module.KEEP_WORD_TOKENS = 0.0, 50
    try:
        train([corpus], tmp_path / "s.db", 600, ["<|endoftext|>"], progress=seen.append)
    finally:
        train_module.MERGE_LOG_SECONDS, train_module.KEEP_WORD_TOKENS = saved
    logs = [e["done"] for e in seen if e["stage"] == "merge_log"]
    assert logs and logs == sorted(logs) and logs[-1] < 600 - 257
    with Store.open(tmp_path / "s.db", readonly=True) as store:
        assert store.state_merges() is None  # done: the working state is dropped
        assert store.pairs_merges() == 600 - 257  # but for the most frequent pairs' counts
        assert len(store.load_pair_counts()) > 0  # exactly which: tests/training/test_next_pairs.py
        # but the tokens of the words more frequent than the 51st, their split under the merges
        kept = store.sql("SELECT bytes, tokens FROM words WHERE tokens IS NOT NULL ORDER BY id").fetchall()
        floor = store.sql("SELECT count FROM words ORDER BY count DESC LIMIT 1 OFFSET 50").scalar()
        top = store.sql("SELECT bytes FROM words WHERE count > ?", (floor,)).fetchall()
        split = splitter(store)
        rows = store.sql("SELECT merges_done FROM checkpoints WHERE phase = 'merging' ORDER BY id").fetchall()
    assert sorted(w for w, _ in kept) == sorted(w for (w,) in top) and 20 < len(kept) <= 50
    assert all(unpack_tokens(t) == split(w) for w, t in kept)
    assert [r[0] for r in rows][1:] == logs  # the first: merging began (0 merges)


def test_the_migration_sets_state_merges_and_refuses_to_go_down_when_merges_run_ahead(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 200_000), encoding="utf-8")
    db = tmp_path / "s.db"
    stopped_run(corpus, db, 400, ["<|endoftext|>"], at=100, checkpoint_merges=50)  # a full checkpoint at 100
    with Store.open(db) as store:
        command.downgrade(migrate.alembic_config(store.conn), "v0_3_0_words_by_count")
        store.conn.commit()
        command.upgrade(migrate.alembic_config(store.conn), "head")
        store.conn.commit()
        assert store.state_merges() == 100 == store.sql("SELECT count(*) FROM merges").scalar()
        for state in ("3", "NULL"):  # merges ahead of the words; a finished run's dropped state
            store.sql(f"UPDATE run SET state_merges = {state}")
            store.conn.commit()
            with pytest.raises(RuntimeError, match="older bpe_store cannot use it"):
                command.downgrade(migrate.alembic_config(store.conn), "v0_3_0_words_by_count")
            store.conn.rollback()
