"""``top_words`` and ``show words`` on a big store: the ``words_by_count`` index.

The index is built when counting ends on a store of ``WORDS_BY_COUNT_MIN`` words or more; the
tests lower that threshold so a small corpus crosses it. With the index or without, the views and
``show words`` give the same rows in the same order (ties in ``top_words`` by id, first seen first;
in ``show words`` by bytes).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from cli_helpers import SPECIAL
from conftest import FIXTURES, SMALL_TEXT

from bpe_store.errors import StoreError
from bpe_store.inspection import answers
from bpe_store.store import merging_rows, migrate
from bpe_store.store.store import Store
from bpe_store.training.train import train

VOCAB = 400
TOP_WORDS = "SELECT word, count, n_bytes, n_tokens, word_hex FROM top_words"


def has_index(db: Path) -> bool:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT sql FROM sqlite_master WHERE name = 'words_by_count'").fetchone() is not None
    finally:
        con.close()


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> tuple[Path, Path]:
    """The same run twice: under the threshold (no index) and over it (a threshold of 100 words)."""
    small, big = (tmp_path_factory.mktemp(n) / "run.db" for n in ("small", "big"))
    train([SMALL_TEXT], small, VOCAB, [SPECIAL])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(merging_rows, "WORDS_BY_COUNT_MIN", 100)
        train([SMALL_TEXT], big, VOCAB, [SPECIAL])
    return small, big


def reference_top_words(db: Path, limit: int | None = None) -> list[tuple]:
    """``top_words`` computed in Python (its first ``limit`` rows): count descending, ties by id;
    ``n_tokens`` NULL where the store keeps no tokens (a finished run), else the tokens' count
    (NULL tokens: its bytes)."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, bytes, count, tokens FROM words").fetchall()
        kept = con.execute("SELECT state_merges IS NOT NULL FROM run").fetchone()[0]
    finally:
        con.close()
    rows.sort(key=lambda r: (-r[2], r[0]))
    return [(b.decode("utf-8", "surrogateescape"), c, len(b),
             len(t) // 4 if t is not None else len(b) if kept else None, b.hex().upper())
            for _, b, c, t in rows[:limit]]


def test_the_index_is_built_once_counting_is_over_on_a_big_store_only(stores):
    small, big = stores
    assert not has_index(small) and has_index(big)
    with Store.open(big) as s:  # the schema check accepts it
        assert s.revision == migrate.SCHEMA_HEAD


def test_top_words_reads_the_index_instead_of_sorting_every_word(stores):
    _, big = stores
    con = sqlite3.connect(big)
    try:
        for q in ("SELECT * FROM top_words LIMIT 20", "SELECT word FROM top_words WHERE n_tokens > 3 LIMIT 10"):
            plan = " / ".join(r[3] for r in con.execute("EXPLAIN QUERY PLAN " + q))
            assert "USING INDEX words_by_count" in plan and "TEMP B-TREE" not in plan, plan
        plan = " / ".join(r[3] for r in con.execute(
            "EXPLAIN QUERY PLAN " + answers.SHOW_QUERIES["words"], (20, 0)))
        assert "USING INDEX words_by_count" in plan, plan  # ties by bytes: sorted within a count only
    finally:
        con.close()


def test_the_same_rows_in_the_same_order_with_the_index_or_without(stores):
    small, big = stores
    want = reference_top_words(small)
    assert len({c for _, c, *_ in want}) < len(want)  # there are ties to order
    assert reference_top_words(big) == want
    for db in stores:
        assert answers.sql(db, TOP_WORDS)[1] == want
        for limit in (1, 20, 500):
            assert answers.sql(db, f"{TOP_WORDS} LIMIT {limit}")[1] == want[:limit]
    shown = [answers.show(db, "words", limit=10_000)[1] for db in stores]
    assert shown[0] == shown[1]
    assert [(w, c) for w, c, *_ in shown[0]] == sorted(((w, c) for w, c, *_ in shown[0]), key=lambda r: (-r[1], r[0]))
    assert [answers.show(db, "words", limit=7, offset=30)[1] for db in stores] == [shown[0][30:37]] * 2


def test_a_wrong_index_of_that_name_is_refused(stores, tmp_path):
    _, big = stores
    db = tmp_path / "run.db"
    shutil.copy(big, db)
    con = sqlite3.connect(db)
    con.executescript("DROP INDEX words_by_count; CREATE INDEX words_by_count ON words(count)")
    con.close()
    with pytest.raises(StoreError, match="index 'words_by_count' is not bpe_store's"):
        Store.open(db)


@pytest.mark.slow
def test_an_upgrade_builds_the_index_for_a_big_store_past_counting(tmp_path):
    """A store at the previous revision, done, with a million words: ``db upgrade`` builds the
    index (and a downgrade drops it)."""
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v0_1_0.db", db)
    with Store.open(db, allow_old=True) as s:
        migrate.upgrade(s.conn, "v0_3_0_progress_view")
        s.conn.commit()
    con = sqlite3.connect(db)
    first = con.execute("SELECT max(id) FROM words").fetchone()[0] + 1
    # the words b"w<id>" with counts 1-7, made by SQLite (a row at a time from Python: 2.6 CPU s)
    con.execute("INSERT INTO words (id, bytes, count) WITH RECURSIVE n(i) AS (SELECT ? UNION ALL "
                "SELECT i + 1 FROM n WHERE i < ?) SELECT i, CAST('w' || i AS BLOB), i % 7 + 1 FROM n",
                (first, merging_rows.WORDS_BY_COUNT_MIN))
    con.commit()
    con.close()
    with Store.open(db, allow_old=True) as s:
        migrate.upgrade(s.conn)
        s.conn.commit()
    assert has_index(db)
    with Store.open(db, readonly=True) as s:
        assert s.revision == migrate.SCHEMA_HEAD
    # the first 10,000 rows, which the index gives without sorting (all 1 M formatted twice took
    # 6.8 CPU s); the same rows with the index or without on whole stores: the test above
    assert answers.sql(db, TOP_WORDS + " LIMIT 10000")[1] == reference_top_words(db, 10_000)
    from alembic import command

    with Store.open(db) as s:
        command.downgrade(migrate.alembic_config(s.conn), "v0_3_0_progress_view")
        s.conn.commit()
    assert not has_index(db)
