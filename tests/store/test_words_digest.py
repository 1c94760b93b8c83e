"""The words' digest (issue 33, item 2): every checkpoint from the end of counting records the digest
of ``words`` (``id, bytes, count``), and a resume, a grow and ``db check --deep`` refuse words
changed since (exit 4, the file left as it was): a count edited by hand used to give other merges.
The native digest equals its plain-Python spec on any row, the extremes of 64 bits included.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, run
from conftest import FIXTURES, stopped_run, store_dump, tampered

from bpe_store import StoreError, Tokenizer, native, train
from bpe_store.store import digest, words_digest
from bpe_store.store.native_connection import connect
from bpe_store.store.store import Store

VOCAB = 300


def words_of(db: Path) -> list[tuple[int, bytes, int]]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT id, bytes, count FROM words").fetchall()
    finally:
        con.close()


def checkpoint_digests(db: Path) -> list[tuple[str, str | None]]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT phase, words_digest FROM checkpoints ORDER BY id").fetchall()
    finally:
        con.close()


#: Rows at the edges: empty and long words, trailing zero bytes, 64-bit extremes of ids and counts.
EDGE_ROWS = [(1, b"", 0), (2, b"\x00", 1), (3, b"\x00\x00", 1), (4, b"a" * 7, 2**63 - 1), (5, b"b" * 8, 3),
             (6, bytes(range(256)) * 5, 7), (2**63 - 1, b"\xff" * 15, -(2**63)), (-(2**63), b"x", -1), (0, b"yz", 5)]


@pytest.mark.skipif(not native.BUILT, reason="the native core is not built")
def test_the_native_digest_equals_the_python_spec(tmp_path):
    db = tmp_path / "w.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE words (id INTEGER PRIMARY KEY, bytes BLOB NOT NULL, count INTEGER NOT NULL, tokens BLOB)")
    con.executemany("INSERT INTO words (id, bytes, count) VALUES (?, ?, ?)", EDGE_ROWS)
    con.commit()
    con.close()
    ndb = connect(db, busy_timeout_ms=1000, synchronous="OFF", cache_kib=0, journal_size_limit=0)
    if ndb is None:
        pytest.skip("no native store connection here")
    rows = ndb.read_word_rows("SELECT id, bytes, count, NULL FROM words ORDER BY id")
    assert native.core.words_digest(rows) == digest.add_words((0, 0, 0), EDGE_ROWS)
    ndb.close()


@pytest.mark.skipif(not native.BUILT, reason="the native core is not built")
def test_the_digest_of_a_counter_equals_the_python_spec_of_its_rows():
    """``of_counter``: a WordCounter's words as a first flush writes them (ids 1, 2, ... in its
    order), digested from its packed counts: long words, empty counters and 64-bit counts too."""
    text = "the cat the hat " * 40 + "x" * 300 + " 的是一 \xff 🙂 " * 3
    acc = native.core.WordCounter()
    assert words_digest.of_counter(acc) == digest.words_digest([])
    acc.add(native.core.count_chunk(text.encode(), []))
    acc.add(native.core.count_chunk(b" cat", []))
    rows = [(i, w, c) for i, (w, c) in enumerate(acc.items(), 1)]
    assert len(rows) > 5 and words_digest.of_counter(acc) == digest.words_digest(rows)
    assert native.core.words_digest_packed(acc.pack(), 2**62) == digest.add_words(
        (0, 0, 0), [(2**62 - 1 + i, w, c) for i, w, c in rows])
    assert words_digest.of_counter([(1, b"a", 1)]) is None  # not a counter: the store is read


@pytest.mark.skipif(not native.BUILT, reason="the native core is not built")
def test_a_run_whose_one_flush_wrote_every_word_digests_them_without_reading_them_back(tmp_path, corpus,
                                                                                        trained_store, monkeypatch):
    """The move to merging records the digest of the counter the last flush wrote (a plain run and
    one extending a base): the words' table is not read back, and the digest is the table's."""
    def no_read_back(store):
        raise AssertionError("the words were read back")

    monkeypatch.setattr(words_digest, "of_table", no_read_back)
    for db, extend in ((tmp_path / "plain.db", None), (tmp_path / "based.db", trained_store)):
        train([corpus], db, VOCAB + 20, [], extend=extend, workers=1)
        merging = [v for phase, v in checkpoint_digests(db) if phase != "counting"]
        assert merging and set(merging) == {digest.words_digest(words_of(db))}


def test_the_digest_is_stable_and_sees_every_change():
    # recorded in files: it must never change with the platform or the Python version
    rows = [(1, b"the", 10), (2, b" cat", 3)]
    assert digest.words_digest(rows) == "2:13a515d943142bc2:dd3b385054bd20e6"
    assert digest.words_digest(rows) == digest.words_digest(rows[::-1])  # any order
    changed = [[(1, b"the", 11), (2, b" cat", 3)],   # a count
               [(1, b"the", 3), (2, b" cat", 10)],   # counts swapped between words
               [(1, b"thE", 10), (2, b" cat", 3)],   # a word
               [(2, b"the", 10), (1, b" cat", 3)],   # ids swapped
               [(1, b"the\x00", 10), (2, b" cat", 3)],  # a trailing zero byte
               rows[:1], rows + [(3, b"", 0)]]       # a row deleted, one added
    assert len({digest.words_digest(r) for r in changed} | {digest.words_digest(rows)}) == len(changed) + 1


def test_every_checkpoint_from_the_end_of_counting_records_the_words_digest(tmp_path, corpus):
    db = tmp_path / "run.db"
    stopped_run(corpus, db, 400, [SPECIAL], at=60, checkpoint_merges=25)  # stopped, then resumed
    train([corpus], db, 400, [SPECIAL], checkpoint_merges=25)
    rows = checkpoint_digests(db)
    want = digest.words_digest(words_of(db))
    assert [v for phase, v in rows if phase == "counting"] == [None] * sum(p == "counting" for p, _ in rows)
    merging = [v for phase, v in rows if phase != "counting"]
    assert len(merging) >= 5 and set(merging) == {want}
    with Store.open(db, readonly=True) as store:
        assert words_digest.of_table(store) == want  # the Python reader (read-only: no native connection)
    with Store.open(db) as store:
        assert words_digest.of_table(store) == want  # the native one, in parts
        words_digest._PART, old = 7, words_digest._PART
        try:
            assert words_digest.of_table(store) == want
        finally:
            words_digest._PART = old


#: ``{case: SQL}``: words changed by hand after counting ended.
WORD_EDITS = {
    "count times 40 (the issue's repro)": "UPDATE words SET count = count * 40 WHERE id = (SELECT id FROM words"
                                          " WHERE length(bytes) > 4 ORDER BY count DESC LIMIT 1)",
    "counts swapped": "UPDATE words SET count = CASE id WHEN 3 THEN (SELECT count FROM words WHERE id = 4)"
                      " ELSE (SELECT count FROM words WHERE id = 3) END WHERE id IN (3, 4)",
    "a word deleted": "DELETE FROM words WHERE id = (SELECT max(id) FROM words)",
    "a word added": "INSERT INTO words (bytes, count) VALUES (CAST(' zebra' AS BLOB), 1000)",
    "a word's bytes": "UPDATE words SET bytes = CAST(' zebra' AS BLOB), tokens = NULL WHERE id = 5",
}


@pytest.mark.parametrize("engine", ["native", "python"])
@pytest.mark.parametrize("case", list(WORD_EDITS))
def test_words_edited_in_a_finished_store_are_refused_by_a_grow(tmp_path, trained_store, corpus, case, engine):
    db = tampered(tmp_path, trained_store, WORD_EDITS[case])
    before = store_dump(db)
    assert before != store_dump(trained_store)  # the change is real
    with pytest.raises(StoreError, match="words were changed after counting"):
        train([corpus], db, VOCAB + 20, ["<|endoftext|>"], engine=engine)
    assert store_dump(db) == before


def test_the_issues_repro_from_the_cli(tmp_path, trained_store, corpus):
    db = tampered(tmp_path, trained_store, WORD_EDITS["count times 40 (the issue's repro)"])
    before = store_dump(db)
    r = run("train", corpus, "--db", db, "--vocab-size", VOCAB + 20, "--special", SPECIAL, "-q")
    assert r.exit_code == 4 and r.stderr.count("\n") == 1 and "words were changed" in r.stderr, r.output
    assert store_dump(db) == before
    r = run("db", "check", db, "--deep")
    assert r.exit_code == 4 and "FAILED  words " in r.stdout and "words were changed" in r.stdout, r.output
    assert "ok      words digest" in r.stdout  # the recorded digests agree: only --deep reads the words
    assert run("db", "check", db).exit_code == 0


def test_words_edited_in_a_store_being_merged_are_refused_by_a_resume(tmp_path, corpus):
    db = tmp_path / "run.db"
    stopped_run(corpus, db, 400, [SPECIAL], at=60, checkpoint_merges=25)
    for engine in ("native", "python"):
        bad = tampered(tmp_path, db, WORD_EDITS["counts swapped"])
        before = store_dump(bad)
        with pytest.raises(StoreError, match="words were changed after counting"):
            train([corpus], bad, 400, [SPECIAL], engine=engine, checkpoint_merges=25)
        assert store_dump(bad) == before


@pytest.mark.parametrize("statement", ["UPDATE checkpoints SET words_digest = NULL WHERE id = (SELECT max(id) "
                                       "FROM checkpoints)",
                                       "UPDATE checkpoints SET words_digest = '1:0:0' WHERE phase = 'merging'"])
def test_db_check_sees_a_recorded_digest_removed_or_changed(tmp_path, trained_store, statement):
    db = tampered(tmp_path, trained_store, statement)
    r = run("db", "check", db)
    assert r.exit_code == 4 and "FAILED  words digest" in r.stdout, r.output


def test_an_upgraded_store_gets_the_digest_of_its_words(tmp_path):
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v0_1_0.db", db)
    assert run("db", "upgrade", db).exit_code == 0
    rows = checkpoint_digests(db)
    assert rows[-1][1] == digest.words_digest(words_of(db)) and all(v is None for _, v in rows[:-1])
    assert run("db", "check", db, "--deep").exit_code == 0


# -- a damaged page (issue 33, item 3) ---------------------------------------------------------------

def damage_table(tmp_path: Path, pristine: Path, table: str) -> Path:
    """A copy of ``pristine`` whose ``table``'s root page is overwritten with 0xFF, as a disk or a
    stray write could."""
    db = tmp_path / "damaged.db"
    shutil.copy(pristine, db)
    con = sqlite3.connect(db)
    page_size = con.execute("PRAGMA page_size").fetchone()[0]
    (root,) = con.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)).fetchone()
    con.close()
    with open(db, "r+b") as f:
        f.seek((root - 1) * page_size)
        f.write(b"\xff" * page_size)
    return db


@pytest.mark.parametrize("table", ["words", "merges", "vocab"])
def test_a_damaged_page_is_exit_4_naming_its_table_in_every_command_that_meets_it(tmp_path, trained_store,
                                                                                  corpus, table):
    db = damage_table(tmp_path, trained_store, table)
    said = f"SQLite finds table {table} damaged"
    commands = [["db", "check", db, "--deep"],
                ["train", corpus, "--db", db, "--vocab-size", VOCAB + 20, "--special", SPECIAL, "-q"],
                ["sql", db, f"SELECT count(*) FROM {table}"]]
    if table == "words":
        commands.append(["show", db, "words"])
    else:  # the result: what export, encode and the tokenizer read
        commands += [["db", "check", db], ["export", db, "--format", "hf", "-o", tmp_path / "tok"],
                     ["encode", db, corpus, "-o", tmp_path / "ids.npy"]]
    for args in commands:
        r = run(*args)
        assert r.exit_code == 4 and said in r.output, (args, r.output)
    if table != "words":
        with pytest.raises(StoreError, match=said):
            Tokenizer.from_store(db)


@pytest.mark.parametrize("statement", ["UPDATE words SET tokens = x'010203' WHERE id = 3",  # the issue's 3 bytes
                                       "UPDATE words SET tokens = NULL WHERE id = 3",
                                       "UPDATE words SET tokens = CAST(tokens || tokens AS BLOB) WHERE id = 3"])
def test_db_check_deep_sees_the_tokens_a_finished_store_keeps_changed(tmp_path, trained_store, statement):
    con = sqlite3.connect(trained_store)
    assert con.execute("SELECT tokens IS NOT NULL FROM words WHERE id = 3").fetchone() == (1,)  # kept
    con.close()
    db = tampered(tmp_path, trained_store, statement)
    r = run("db", "check", db, "--deep")
    assert r.exit_code == 4 and "tokens the store keeps for word 3 are not what its merges make" in r.stdout, r.output
