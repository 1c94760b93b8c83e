"""A finished store keeps the counts of its most frequent pairs: ``top_pairs``, ``show pairs``,
``status`` and ``sql`` say what the next merges would be; where a store holds none, they say so."""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, run
from conftest import EN, RU, SMALL_TEXT, fixture_text, kill_when_paused, store_contents

from bpe_store import Interrupted, train
from bpe_store.store.store import Store
from bpe_store.training import merge_step as train_module
from bpe_store.training.merge import native_available, new_engine

VOCAB = 420


def top_row(db: Path) -> tuple[bytes, bytes, int]:
    con = sqlite3.connect(db)
    try:
        row = con.execute('SELECT left_hex, right_hex, count FROM top_pairs LIMIT 1').fetchone()
    finally:
        con.close()
    assert row is not None, "the finished store kept no pair counts"
    return bytes.fromhex(row[0]), bytes.fromhex(row[1]), row[2]


def live_pairs(db: Path) -> dict[tuple[int, int], int]:
    """Every live pair count after all the store's merges, recounted from its words."""
    with Store.open(db, readonly=True) as store:
        n_special = store.sql("SELECT count(*) FROM vocab WHERE kind = 'special'").scalar()
        vocab = store.load_vocab()
        merges = store.load_merges()
        rows = [(i, b, c, None) for i, b, c, _t in store.load_word_rows(packed=False, tokens=False)]
        engine = new_engine(rows, [b if k != "special" else None for _, b, k in vocab], n_special,
                            n_special + 256, len(merges), "python",
                            replay=[(a, b, t) for _r, a, b, t, _c in merges])
        return engine.pair_counts()


@pytest.mark.parametrize("engine", ["python", "native"])
def test_the_first_row_of_top_pairs_is_the_merge_continuing_by_one_makes(tmp_path, engine):
    if engine == "native" and not native_available():
        pytest.skip("no native core")
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(RU, 150_000), encoding="utf-8")
    db = tmp_path / "s.db"
    r = train([corpus], db, VOCAB, [SPECIAL], engine=engine)
    for before, vocab in ((VOCAB, VOCAB + 1), (VOCAB + 1, VOCAB + 2), (VOCAB + 2, VOCAB + 40)):
        left, right, count = top_row(db)
        r = train([corpus], db, vocab, [SPECIAL], engine=engine)  # continue: its first merge is that row
        assert (r.merges[before - 257], r.merge_counts[before - 257]) == ((left, right), count)
    # and the straight run learns the same
    straight = train([corpus], tmp_path / "t.db", VOCAB + 40, [SPECIAL], engine=engine)
    assert straight.merges == r.merges and straight.merge_counts == r.merge_counts
    assert store_contents(tmp_path / "t.db")[1:] == store_contents(db)[1:]


def test_a_finished_store_keeps_the_pairs_at_least_as_frequent_as_the_kth(tmp_path, monkeypatch):
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 200_000), encoding="utf-8")
    monkeypatch.setattr(train_module, "KEEP_PAIR_COUNTS", 25)
    db = tmp_path / "s.db"
    train([corpus], db, 600, [SPECIAL])
    live = live_pairs(db)
    floor = sorted(live.values(), reverse=True)[24]
    with Store.open(db, readonly=True) as store:
        kept = store.load_pair_counts()
        assert store.pairs_merges() == 600 - 257 and store.state_merges() is None
    assert kept == {p: c for p, c in live.items() if c >= floor} and len(kept) >= 25
    # fewer live pairs than K: all of them
    monkeypatch.setattr(train_module, "KEEP_PAIR_COUNTS", 10**9)
    train([corpus], db, 610, [SPECIAL])
    with Store.open(db, readonly=True) as store:
        assert store.load_pair_counts() == live_pairs(db)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("next") / "run.db"
    train([SMALL_TEXT], db, VOCAB, [SPECIAL])
    return db


def test_show_pairs_status_and_sql_name_the_next_merge(finished):
    left, right, count = top_row(finished)
    rows = json.loads(run("show", finished, "pairs", "-n", "3", "-f", "json").stdout)
    assert len(rows) == 3 and (rows[0]["left"], rows[0]["right"], rows[0]["count"]) == (
        left.decode(), right.decode(), count)
    r = run("show", finished, "pairs")
    assert r.exit_code == 0 and r.stderr == ""
    st = json.loads(run("status", finished, "--json").stdout)
    assert st["pairs"]["next"] == {"left": left.decode(), "right": right.decode(), "count": count}
    assert st["pairs"]["top_only"] and st["pairs"]["note"] is None
    assert "next merge   " in run("status", finished).stdout
    r = run("sql", finished, "SELECT count FROM top_pairs LIMIT 1", "-f", "csv")
    assert r.stdout == f"count\n{count}\n" and r.stderr == ""


def test_a_store_without_pair_counts_says_so_in_one_line(finished, tmp_path):
    old = tmp_path / "old.db"
    old.write_bytes(finished.read_bytes())
    con = sqlite3.connect(old)  # as an older bpe_store left a finished run: no pair counts kept
    con.execute("DELETE FROM pair_counts")
    con.execute("UPDATE run SET pairs_merges = NULL")
    con.commit()
    con.close()
    r = run("show", old, "pairs", "-f", "json")
    assert r.exit_code == 0 and r.stdout.strip() == "[]"
    assert r.stderr.count("\n") == 1 and "holds no pair counts" in r.stderr
    r = run("sql", old, "SELECT * FROM top_pairs")
    assert r.exit_code == 0 and r.stderr.count("\n") == 1 and "holds no pair counts" in r.stderr
    assert run("sql", old, "SELECT count(*) FROM merges").stderr == ""  # only a statement that reads them
    assert "holds no pair counts" in run("status", old).stdout
    # continuing it keeps them again
    r = train([SMALL_TEXT], old, VOCAB + 1, [SPECIAL])
    assert r.merges == train([SMALL_TEXT], tmp_path / "b.db", VOCAB + 1, [SPECIAL]).merges
    assert run("show", old, "pairs").stderr == ""


def test_a_store_stopped_in_counting_says_it_has_no_pair_counts_yet(tmp_path):
    db = tmp_path / "c.db"
    stop = threading.Event()

    def progress(e: dict) -> None:
        if e["stage"] == "counting":
            stop.set()

    with pytest.raises(Interrupted):
        train([SMALL_TEXT, SMALL_TEXT.parent / "zhwiki-600K.txt"], db, VOCAB, [SPECIAL], chunk_size=1 << 16,
              workers=1, progress=progress, stop=stop)
    assert store_phase(db) == "counting"
    r = run("show", db, "pairs")
    assert r.exit_code == 0 and r.stderr.count("\n") == 1 and "still counting" in r.stderr
    assert "still counting" in run("sql", db, "SELECT * FROM pair_counts").stderr


def store_phase(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT phase FROM run").fetchone()[0]
    finally:
        con.close()


KILLED_RUNNER = """
import importlib, sys
from bpe_store import train
importlib.import_module("bpe_store.training.merge_step").MERGE_LOG_SECONDS = 0.0  # a log after every sub-step
train([sys.argv[1]], sys.argv[2], 600, ["<|endoftext|>"], checkpoint_seconds=600.0)
"""


def test_a_store_killed_between_full_checkpoints_says_its_pairs_lag(tmp_path):
    """Between full checkpoints the merge log runs ahead of the pair counts: say how far."""
    corpus = tmp_path / "c.txt"
    corpus.write_text(fixture_text(EN, 300_000), encoding="utf-8")
    db = tmp_path / "m.db"
    kill_when_paused([sys.executable, "-c", KILLED_RUNNER, str(corpus), str(db)], "merge_log:3")
    with Store.open(db, readonly=True) as store:
        follows, done = store.pairs_merges(), store.sql("SELECT count(*) FROM merges").scalar()
    assert follows == 0 < done
    r = run("show", db, "pairs")
    assert f"after the first 0 of {done} merges" in r.stderr and r.stderr.count("\n") == 1
