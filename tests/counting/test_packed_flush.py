"""A counting flush of packed counts (what a Ray driver receives from the counting tree): written
natively (``WordIds.add_packed``, bulk statements over native buffers) it stores exactly what the
``sqlite3`` fallback and a ``WordCounter`` flush store, with words repeated across parts and
flushes, and a second flush after a first one into an empty store."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from bpe_store.counting.count import PackedCounts
from bpe_store.store import native_connection
from bpe_store.store.store import Store
from bpe_store.training.train import train

_core = pytest.importorskip("bpe_store._core")


class _Stop(Exception):
    pass


def _empty_store(path: Path) -> Store:
    """A store in its counting phase with no words (a run stopped at its first counting event)."""
    src = path.parent / f"{path.stem}.txt"
    src.write_text("unused")

    def stop(event: dict) -> None:
        if event["stage"] == "counting":
            raise _Stop

    with pytest.raises(_Stop):
        train([src], path, 300, [], progress=stop)
    return Store.open(path)


def _words(path: Path) -> dict[bytes, int]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT id, bytes, count FROM words ORDER BY id").fetchall()
    finally:
        con.close()
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))  # ids 1, 2, ... as the merge engine reads them
    return {bytes(w): c for _, w, c in rows}


FLUSHES = [
    # flush 1: two parts sharing a word (b"the" in both)
    [{b"the": 5, b" cat": 2, b"\xe2\x82\xac": 1}, {b"the": 1, b" dog": 3}],
    # flush 2: known words, new ones, a word in both parts again
    [{b" cat": 4, b"new": 1}, {b"new": 2, b"the": 10, b"": 0}],
    # flush 3: one part
    [{b" dog": 1, b"zzz" * 100: 7}],
]


def _packed(parts: list[dict[bytes, int]]) -> PackedCounts:
    return PackedCounts([_core.pack_counts({w: c for w, c in p.items() if c}) for p in parts])


@pytest.mark.parametrize("native", ["1", "0"])
def test_packed_flushes_store_the_summed_counts(tmp_path, monkeypatch, native):
    monkeypatch.setenv(native_connection.ENV, native)
    db = tmp_path / "p.db"
    store = _empty_store(db)
    try:
        for n, parts in enumerate(FLUSHES):
            counts = _packed(parts)
            assert len(counts) == sum(1 for p in parts for c in p.values() if c)
            store.add_word_counts(counts, [], float(n))
    finally:
        store.close()
    expected: Counter[bytes] = Counter()
    for parts in FLUSHES:
        for p in parts:
            expected.update({w: c for w, c in p.items() if c})
    assert _words(db) == dict(expected)


def test_a_second_flush_after_a_counter_flush_adopts_its_words(tmp_path):
    # the first flush into an empty store writes a WordCounter as it is; the second builds its
    # word map from that counter (WordIds.adopt), not from the store: same ids, same counts
    db = tmp_path / "a.db"
    store = _empty_store(db)
    try:
        first = _core.WordCounter()
        first.add_packed(_core.pack_counts({b"a": 1, b"b": 2, b"c": 3}))
        store.add_word_counts(first, [], 0.0)
        store.add_word_counts(_packed([{b"c": 1, b"d": 4}, {b"a": 5}]), [], 1.0)
        assert len(first) == 0  # its words moved into the store's word map
    finally:
        store.close()
    assert _words(db) == {b"a": 6, b"b": 2, b"c": 4, b"d": 4}


def test_word_ids_add_packed_sums_a_word_given_twice():
    ids = _core.WordIds()
    new, first, deltas = ids.add_packed([_core.pack_counts({b"x": 1, b"y": 2})])
    assert first == 1 and deltas == b""
    new, first, deltas = ids.add_packed([_core.pack_counts({b"x": 3, b"z": 1}), _core.pack_counts({b"x": 4})])
    assert first == 3 and len(PackedCounts([new])) == 1  # only z is new
    n = len(deltas) // 16
    ids_ = [int.from_bytes(deltas[8 * i:8 * i + 8], "little", signed=True) for i in range(n)]
    vals = [int.from_bytes(deltas[8 * (n + i):8 * (n + i) + 8], "little", signed=True) for i in range(n)]
    assert list(zip(ids_, vals)) == [(1, 7)]  # x, once, with 3 + 4
    with pytest.raises(ValueError):
        ids.add_packed([b"not packed"])
