"""The counting flush (``Store.add_word_counts``): word ids kept in a native ``WordIds``, updates
sorted by id, the store's words reloaded on resume; and a kill -9 inside a flush's transaction
resumes to exactly the uninterrupted result."""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from collections import Counter

import pytest
from conftest import EN, ROOT, fixture_text

from bpe_store import train
from bpe_store._version import __version__
from bpe_store.errors import StoreError
from bpe_store.pretokenize import GPT2_PATTERN
from bpe_store.sources import Source
from bpe_store.store import PyWordIds, RunParams, Store

try:
    from bpe_store._core import WordIds
except ImportError:  # pragma: no cover - no native core
    WordIds = None

IMPLS = [PyWordIds] + ([WordIds] if WordIds is not None else [])


def _new_store(path, n_chunks: int = 8) -> Store:
    store = Store.create(path)
    store.init_run(RunParams(GPT2_PATTERN, ("<|endoftext|>",), 400), [Source("/x", 100, 0, "0" * 64)],
                   [(0, i, i + 1) for i in range(n_chunks)], 1, __version__)
    return store


def _flushes(seed: int, n: int = 6) -> list[Counter]:
    rng = random.Random(seed)
    alphabet = [b"a", b"b", b" ", "\u00e9".encode(), b"\x00", b"zz"]
    return [Counter({b"".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 5))): rng.randrange(1, 1 << 40)
                     for _ in range(rng.randrange(0, 60))}) for _ in range(n)]


@pytest.mark.parametrize("impl", IMPLS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("seed", range(5))
def test_word_ids_give_each_flush_its_new_rows_and_sorted_deltas(impl, seed):
    ids, total, order = impl(), Counter(), []
    for delta in _flushes(seed):
        known = {w for w in delta if w in total}
        new, deltas = ids.add(dict(delta))
        fresh = [w for w in delta if w not in total]  # first-seen order
        assert [(i, bytes(w), c) for i, w, c in new] == \
            [(len(order) + k + 1, w, delta[w]) for k, w in enumerate(fresh)]
        order += fresh
        assert deltas == sorted(((delta[w], order.index(w) + 1) for w in known), key=lambda r: r[1])
        total.update(delta)
        assert len(ids) == len(order)
    assert [(i, bytes(w), c) for i, w, c in ids.rows()] == [(k + 1, w, total[w]) for k, w in enumerate(order)]
    assert [i for i, _, _ in ids.rows(5)] == list(range(5, 5 + len(order)))


@pytest.mark.skipif(WordIds is None, reason="native core not built")
def test_native_word_ids_take_a_word_counter_like_its_dict():
    from bpe_store._core import WordCounter, count_chunk

    text = fixture_text(EN, 100_000).encode()
    a, b = WordIds(), WordIds()
    for part in (text[:50_000], text[50_000:]):
        counter = WordCounter()
        counter.add(count_chunk(part, []))
        assert a.add(counter) == b.add(dict(counter.items()))
    assert a.rows() == b.rows()


@pytest.mark.parametrize("impl", IMPLS, ids=lambda c: c.__name__)
def test_word_ids_refuse_rows_that_are_not_a_store_s_words(impl):
    for rows in ([(2, b"a", 1)], [(1, b"a", 1), (2, b"a", 1)], [(1, b"a", -1)]):
        with pytest.raises(ValueError):
            impl().load(rows)


def test_flushes_across_sessions_add_to_the_right_words(tmp_path):
    """A second session (a resume) reloads the store's words and goes on with the same ids."""
    flushes = _flushes(7, 8)
    db = tmp_path / "s.db"
    store = _new_store(db)
    try:
        for k, delta in enumerate(flushes[:4]):
            store.add_word_counts(delta, [(k + 1, 1)], 1.0)
    finally:
        store.close()
    with Store.open(db) as store:
        for k, delta in enumerate(flushes[4:], 4):
            store.add_word_counts(list(delta.items()), [(k + 1, 1)], 1.0)  # (word, count) pairs too
        rows = store.load_word_rows()
        in_memory = store.take_fresh_word_rows()
    in_memory = in_memory.rows(1) if hasattr(in_memory, "pack") else in_memory
    total = sum(flushes, Counter())
    assert {w: c for _, w, c, _ in rows} == total and len(rows) == len(total)
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    assert [(i, bytes(w), c, None) for i, w, c in in_memory] == rows


@pytest.mark.parametrize("kind", ["python", "native"])
def test_the_words_in_memory_after_many_flushes_build_the_engine_the_store_builds(tmp_path, kind):
    """After several flushes the merge engine starts from the WordIds (packed for the native
    engine: no Python row per word), not from the store: the same engine either way."""
    from bpe_store.merge import native_available, new_engine

    if kind == "native" and not native_available():
        pytest.skip("native engine not built")
    flushes = _flushes(11, 5)
    store = _new_store(tmp_path / "s.db")
    try:
        for k, delta in enumerate(flushes):
            store.add_word_counts(delta, [(k + 1, 1)], 1.0)
        vocab = [None] + [bytes([b]) for b in range(256)]
        a = new_engine(store.take_fresh_word_rows(), vocab, 1, 257, 0, kind)
        b = new_engine(store.load_word_rows(), vocab, 1, 257, 0, kind)
        assert a.pair_counts() == b.pair_counts() and a.pair_digest() == b.pair_digest()
        assert a.step(30) == b.step(30)
    finally:
        store.close()


def test_a_failed_flush_changes_nothing_and_the_next_one_is_right(tmp_path, monkeypatch):
    store = _new_store(tmp_path / "s.db")
    try:
        store.add_word_counts(Counter({b"a": 1, b"b": 2}), [(1, 3)], 1.0)

        def disk_full(*args):
            raise StoreError("the disk is full")

        monkeypatch.setattr(store, "add_checkpoint_row", disk_full)  # fails inside the transaction
        with pytest.raises(StoreError):
            store.add_word_counts(Counter({b"b": 5, b"c": 4}), [(2, 1)], 1.0)
        monkeypatch.undo()
        store.add_word_counts(Counter({b"c": 1, b"d": 1}), [(2, 2)], 2.0)
        assert store.load_word_rows() == [(1, b"a", 1, None), (2, b"b", 2, None), (3, b"c", 1, None),
                                          (4, b"d", 1, None)]
    finally:
        store.close()


def test_a_store_whose_word_ids_are_damaged_is_refused_at_the_next_flush(tmp_path):
    db = tmp_path / "s.db"
    with _new_store(db) as store:
        store.add_word_counts(Counter({b"a": 1, b"b": 2}), [(1, 3)], 1.0)
    con = sqlite3.connect(db)
    con.execute("UPDATE words SET id = 7 WHERE id = 2")
    con.commit()
    con.close()
    with Store.open(db) as store, pytest.raises(StoreError, match="words are damaged"):
        store.add_word_counts(Counter({b"c": 1}), [(2, 1)], 1.0)


RUNNER = """
import sys
from bpe_store import train
train([sys.argv[1]], sys.argv[2], 600, ["<|endoftext|>"], workers=2, chunk_size=20_000, count_flush_seconds=0.0)
"""


@pytest.mark.parametrize("flush", [1, 2])
def test_a_kill_inside_a_flush_resumes_to_the_uninterrupted_result(tmp_path, flush):
    """kill -9 while the N-th flush's transaction is open (words written, not committed): the
    store is at flush N-1, and the same command ends with the uninterrupted run's words and merges."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 600_000), encoding="utf-8")
    expected = train([corpus], tmp_path / "whole.db", 600, ["<|endoftext|>"], workers=2, chunk_size=20_000)
    db = tmp_path / "killed.db"
    env = {**os.environ, "BPE_STORE_TEST_PAUSE": f"flush:{flush}"}
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(corpus), str(db)], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert f"paused at flush:{flush}" in line, line
        proc.kill()
    finally:
        proc.wait()
        proc.stderr.close()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    counted = con.execute("SELECT count(*) FROM checkpoints WHERE phase = 'counting'").fetchone()[0]
    con.close()
    assert counted == flush - 1  # the open transaction left nothing
    rc = subprocess.run([sys.executable, "-c", RUNNER, str(corpus), str(db)], cwd=ROOT, timeout=300).returncode
    assert rc == 0
    result = train([corpus], db, 600, ["<|endoftext|>"])
    assert (result.merges, result.merge_counts) == (expected.merges, expected.merge_counts)
    with Store.open(db) as a, Store.open(tmp_path / "whole.db") as b:
        assert sorted((w, c) for _, w, c, _ in a.load_word_rows()) == \
            sorted((w, c) for _, w, c, _ in b.load_word_rows())
