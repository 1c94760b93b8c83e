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
from conftest import EN, ROOT, RU, fixture_text, kill_when, kill_when_paused, store_contents

import bpe_store.store.counting_rows as counting_rows
from bpe_store import train
from bpe_store._version import __version__
from bpe_store.errors import StoreError
from bpe_store.store import native_connection
from bpe_store.store.counting_rows import PyWordIds
from bpe_store.store.params import RunParams
from bpe_store.store.store import Store
from bpe_store.text.pretokenize import GPT2_PATTERN
from bpe_store.text.sources import Source

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
    from bpe_store.training.merge import native_available, new_engine

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


@pytest.mark.parametrize("native", [True, False])
def test_a_store_whose_word_ids_are_damaged_is_refused_at_the_next_flush(tmp_path, monkeypatch, native):
    monkeypatch.setenv(native_connection.ENV, "1" if native else "0")  # the word map read natively or by sqlite3
    db = tmp_path / "s.db"
    with _new_store(db) as store:
        store.add_word_counts(Counter({b"a": 1, b"b": 2}), [(1, 3)], 1.0)
    con = sqlite3.connect(db)
    con.execute("UPDATE words SET id = 7 WHERE id = 2")
    con.commit()
    con.close()
    with Store.open(db) as store, pytest.raises(StoreError, match="words are damaged"):
        store.add_word_counts(Counter({b"c": 1}), [(2, 1)], 1.0)


def test_a_resumed_flush_reads_the_word_map_natively_in_batches_as_sqlite3_does(tmp_path, monkeypatch):
    """A resume's first flush loads the store's words into a WordIds: through the native
    connection in batches (here of 3 words) or through sqlite3's tuples, the same map."""
    db = tmp_path / "s.db"
    with _new_store(db) as store:
        for k, delta in enumerate(_flushes(5, 4)):
            store.add_word_counts(delta, [(k + 1, 1)], 1.0)
        n = store.sql("SELECT count(*) FROM words").scalar()
    assert n > 7 and n % 3 != 0  # several batches, the last one short
    monkeypatch.setattr(counting_rows, "_WORD_LOAD_BATCH", 3)
    loaded = {}
    for native in (True, False):
        monkeypatch.setenv(native_connection.ENV, "1" if native else "0")
        with Store.open(db) as store:
            assert (store._native() is not None) == native
            words = store._load_words()
            loaded[native] = [(i, bytes(w), c) for i, w, c in words.rows()]
    assert loaded[True] == loaded[False]
    assert len(loaded[True]) == n and [r[0] for r in loaded[True]] == list(range(1, n + 1))


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
    kill_when_paused([sys.executable, "-c", RUNNER, str(corpus), str(db)], f"flush:{flush}")
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


def _unit_word(cid: int) -> bytes:
    return (" " + "".join("abcdefghij"[int(d)] for d in str(cid))).encode()  # one letter run per unit


@pytest.mark.parametrize("native", [True, False], ids=["WordCounter", "Counter"])
def test_a_flush_buffer_holds_exactly_the_counts_of_the_units_it_marks(native):
    """Threads add units (as the counting threads do) while flushes take the buffer: every take
    holds the counts of exactly the units it marks, and every unit is in exactly one take."""
    import threading

    from bpe_store.counting.count import FlushBuffer

    if native and WordIds is None:
        pytest.skip("native core not built")
    from bpe_store._core import count_chunk

    buffer, units, seen = FlushBuffer(native), 600, []

    def add(ids: range) -> None:
        for cid in ids:
            text = _unit_word(cid) + b" common"
            buffer.add(cid, count_chunk(text, []) if native else {_unit_word(cid): 1, b" common": 1}, 2)

    def check(counts, marks: list[tuple[int, int]]) -> None:  # each take checked, then dropped
        words = dict(counts.items())
        assert words.pop(b" common", 0) == len(marks) and all(m[1] == 2 for m in marks)
        assert set(words) == {_unit_word(cid) for cid, *_ in marks} and set(words.values()) <= {1}
        seen.extend(cid for cid, *_ in marks)

    threads = [threading.Thread(target=add, args=(range(k, units, 4),)) for k in range(4)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        check(*buffer.take())
    for t in threads:
        t.join()
    check(*buffer.take())
    assert not buffer
    assert sorted(seen) == list(range(units))


def test_store_contents_are_the_same_for_any_threads_chunk_size_and_flush_interval(tmp_path):
    """Counting threads add their own units into the flush buffer, in whatever order they finish;
    the store ends the same for 1, 2 and 4 threads, any chunk size, one flush or one per unit."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 300_000) + "<|endoftext|>" + fixture_text(RU, 100_000), encoding="utf-8")
    runs = [(1, 1 << 30, 10.0), (2, 4096, 10.0), (4, 20_000, 10.0), (4, 7_777, 0.0), (2, 50_000, 0.0)]
    contents = []
    for i, (workers, chunk_size, flush_s) in enumerate(runs):
        train([corpus], tmp_path / f"r{i}.db", 500, ["<|endoftext|>"], workers=workers, chunk_size=chunk_size,
              count_flush_seconds=flush_s)
        contents.append(store_contents(tmp_path / f"r{i}.db"))
    assert contents[0][0] and contents[0][2]
    assert all(c == contents[0] for c in contents[1:])


def test_words_are_the_next_flush_only_for_the_first_flush_into_an_empty_store(tmp_path):
    db = tmp_path / "s.db"
    with _new_store(db) as store:
        assert store.words_are_next_flush()
        store.add_word_counts(Counter({b"a": 1}), [(1, 1)], 1.0)
        assert not store.words_are_next_flush()
    with Store.open(db) as store:
        assert not store.words_are_next_flush()


PAUSE_RUNNER = """
import json, sys
from bpe_store import train
train([sys.argv[1]], sys.argv[2], 600, ["<|endoftext|>"], workers=2, chunk_size=20_000,
      progress=lambda e: print(json.dumps(e), file=sys.stderr, flush=True))
"""


def test_merging_starts_while_the_last_flush_is_written_and_a_kill_then_loses_only_that(tmp_path):
    """The last counting flush is written on its own thread while the engine is built from the
    counter and merging begins: with that flush held open (its transaction paused), merging
    events still come; a kill -9 then leaves the store as before the flush (no words, no merges:
    nothing of merging is written before the flush commits), and the same command resumes to
    the uninterrupted store."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 600_000), encoding="utf-8")
    train([corpus], tmp_path / "whole.db", 600, ["<|endoftext|>"], workers=2, chunk_size=20_000)
    db = tmp_path / "killed.db"
    env = {**os.environ, "BPE_STORE_TEST_PAUSE": "flush:1"}
    said = {"paused": False, "merging": False}

    def paused_and_merging(line: str) -> bool:
        said["paused"] |= "paused at flush:1" in line
        said["merging"] |= '"stage": "merging"' in line
        return said["paused"] and said["merging"]

    seen = kill_when([sys.executable, "-c", PAUSE_RUNNER, str(corpus), str(db)], paused_and_merging, env=env,
                     stream="stderr")
    assert any('"stage": "merging"' in s for s in seen), seen[-5:]
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT phase FROM run").fetchone()[0] == "counting"
        assert con.execute("SELECT (SELECT count(*) FROM words), (SELECT count(*) FROM merges),"
                           " (SELECT count(*) FROM pair_counts)").fetchone() == (0, 0, 0)
    finally:
        con.close()
    train([corpus], db, 600, ["<|endoftext|>"], workers=2, chunk_size=20_000)
    assert store_contents(db) == store_contents(tmp_path / "whole.db")


def test_a_stop_while_the_last_flush_is_written_checkpoints_it_then_the_merges(tmp_path):
    """A stop request as merging starts: the checkpoint waits for the last flush and the start of
    merging, then writes the merges so far; the resume ends as an uninterrupted run."""
    import threading

    from bpe_store.errors import Interrupted

    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 400_000), encoding="utf-8")
    train([corpus], tmp_path / "whole.db", 500, ["<|endoftext|>"], workers=2, chunk_size=50_000)
    stop = threading.Event()

    def progress(event: dict) -> None:
        if event["stage"] == "pairs":
            stop.set()

    db = tmp_path / "stopped.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 500, ["<|endoftext|>"], workers=2, chunk_size=50_000, progress=progress, stop=stop)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        phase, merges, words = con.execute(
            "SELECT phase, (SELECT count(*) FROM merges), (SELECT count(*) FROM words) FROM run").fetchone()
    finally:
        con.close()
    assert phase == "merging" and 0 < merges < 500 - 257 and words > 1000
    train([corpus], db, 500, ["<|endoftext|>"], workers=2, chunk_size=50_000)
    assert store_contents(db) == store_contents(tmp_path / "whole.db")


def test_a_last_flush_that_fails_on_its_thread_fails_the_run_and_writes_nothing_of_merging(tmp_path, monkeypatch):
    """The last flush fails (a full disk, inside its transaction) on the writer thread while
    merging goes on: the run fails with that StoreError, the store keeps nothing of that flush
    nor of merging, and the same command then ends as an uninterrupted run."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 300_000), encoding="utf-8")
    train([corpus], tmp_path / "whole.db", 400, ["<|endoftext|>"])
    add_checkpoint_row = Store.add_checkpoint_row

    def disk_full(self, phase, *args):
        if phase == "counting":
            raise StoreError("the disk is full")
        return add_checkpoint_row(self, phase, *args)

    monkeypatch.setattr(Store, "add_checkpoint_row", disk_full)
    db = tmp_path / "r.db"
    with pytest.raises(StoreError, match="disk is full"):
        train([corpus], db, 400, ["<|endoftext|>"])
    monkeypatch.undo()
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT phase, (SELECT count(*) FROM words), (SELECT count(*) FROM merges),"
                           " (SELECT count(*) FROM checkpoints) FROM run").fetchone() == ("counting", 0, 0, 0)
    finally:
        con.close()
    train([corpus], db, 400, ["<|endoftext|>"])
    assert store_contents(db) == store_contents(tmp_path / "whole.db")

# -- when counting flushes: what a kill loses ----------------------------------------------------


def simulated_losses(monkeypatch, total: int, rate: float = 64e6, write: tuple[float, float] = (1.0, 200e6),
                     unit: int = 8 << 20) -> list[tuple[int, int]]:
    """``[(done, lost)]`` after each unit of a simulated counting run of ``total`` bytes driven by
    ``_CountWriter.due`` (counting ``rate`` bytes/s; a flush of B bytes takes write[0] + B /
    write[1] seconds on its own thread): ``lost`` is what a kill there loses, the bytes counted
    beyond the last committed flush."""
    import importlib
    from types import SimpleNamespace

    train_module = importlib.import_module("bpe_store.training.count_step")

    clock = [0.0]
    monkeypatch.setattr(train_module.time, "monotonic", lambda: clock[0])
    in_flight: list[tuple[float, int, float]] = []  # (commits at, done at its start, its write time)
    writes = SimpleNamespace(busy=lambda: bool(in_flight))
    job = SimpleNamespace(options=SimpleNamespace(count_flush_seconds=10.0), writes=writes)
    writer = train_module._CountWriter(job, total, 0)
    done = committed = 0
    last_flush, out = 0.0, []
    while done < total:
        done = min(done + unit, total)
        clock[0] += unit / rate
        if in_flight and clock[0] >= in_flight[0][0]:  # the writer thread has committed it
            (_, committed, writer.write_s), in_flight[:] = in_flight[0], []
        out.append((done, done - committed))
        if done < total and writer.due(last_flush, done):
            took = write[0] + (done - writer.flushed_at) / write[1]
            in_flight.append((clock[0] + took, done, took))
            writer.flushed_at, last_flush = done, clock[0]
    return out


def test_a_kill_in_the_middle_of_counting_loses_at_most_a_tenth_of_the_counting_left(monkeypatch):
    """A 12 GB corpus counted at 64 MB/s: a kill anywhere up to 60 % of it loses (counts again on
    resume) at most 10 % of the bytes left to count; by time alone (a flush every 10 s: 640 MB),
    a kill at half lost up to 0.8 GB of the 6 GB left."""
    total = 12 * 10**9
    for done, lost in simulated_losses(monkeypatch, total):
        if done <= 0.6 * total:
            assert lost <= 0.1 * (total - done), (done, lost)


def test_late_in_counting_a_kill_loses_at_most_about_two_small_flushes(monkeypatch):
    from bpe_store.training.count_step import COUNT_FLUSH_MIN_BYTES

    total = 12 * 10**9
    lost = max(lost for done, lost in simulated_losses(monkeypatch, total) if done > 0.6 * total)
    assert lost <= 2 * COUNT_FLUSH_MIN_BYTES


def test_a_corpus_under_the_byte_cap_flushes_by_time_only(monkeypatch):
    """enwiki-100M counts in ~2 s: no flush before the last one, as before the cap."""
    losses = simulated_losses(monkeypatch, 100 * 10**6)
    assert [lost for _, lost in losses] == [done for done, _ in losses]  # nothing committed before the end
