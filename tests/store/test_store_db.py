"""The store's native bulk path (``bpe_store.store.native_connection``, native/store_db.cpp): it writes exactly
what the ``executemany`` fallback writes, uses the SQLite library Python's ``sqlite3`` uses (so the
two connections see each other's locks), and fails with the same errors as the driver."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import stopped_run
from test_merge_engine import listed

from bpe_store import train
from bpe_store.errors import StoreError
from bpe_store.store import bulk, connection, counting_rows, merging_rows, native_connection
from bpe_store.store import store as store_mod
from bpe_store.store.bulk import BulkWriter
from bpe_store.store.store import Store
from bpe_store.training.merge import native_available, new_engine

pytestmark = pytest.mark.skipif(not native_available(), reason="the native core is not built here")

SPECIAL = ["<|endoftext|>"]
#: columns that say when or how long, not what: they differ between any two runs
TIMES = {"created_at", "updated_at", "at", "elapsed_s", "write_s", "started_at", "ended_at"}


def tables(db) -> dict[str, list[tuple]]:
    """Every table's rows in key order, with the time columns blanked."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        out = {}
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
            cur = con.execute(f'SELECT * FROM "{name}"')
            cols = [d[0] for d in cur.description]
            out[name] = sorted((tuple(None if c in TIMES else v for c, v in zip(cols, row)) for row in cur), key=repr)
        return out
    finally:
        con.close()


def test_the_native_path_is_available_here():
    """CI builds the native core on Linux with a dynamically linked _sqlite3: the fast path must
    be taken there, not silently fall back."""
    assert native_connection.available()


def test_the_native_path_needs_the_drivers_own_sqlite_at_3_33_or_later():
    # UPDATE ... FROM (the bulk statements) is SQLite 3.33.0's: an older library takes the fallback
    usable = native_connection.usable_version
    assert usable(3_033_000, (3, 33, 0)) and usable(3_045_001, (3, 45, 1))
    assert not native_connection.usable_version(3_031_001, (3, 31, 1))  # Ubuntu 20.04's
    assert not native_connection.usable_version(3_040_001, (3, 40, 0))  # another copy of SQLite than the driver's


@pytest.mark.parametrize("kw", [
    {},  # one counting flush (the WordCounter's packed words), checkpoints every 20 merges
    {"chunk_size": 4096, "count_flush_seconds": 0, "workers": 1},  # many flushes: WordIds rows and deltas
    {"engine": "python"},  # the Python engine's tuples, bound by the native connection
    {"min_frequency": 2, "max_token_length": 6},
], ids=["one-flush", "many-flushes", "python-engine", "options"])
def test_native_and_fallback_write_the_same_store(tmp_path, corpus, monkeypatch, kw):
    used, bulk_used = [], []
    real = BulkWriter.executemany

    def spy(self, statement, rows, bulk=None):
        used.append(self.native)
        bulk_used.append(self.native and bulk is not None)
        return real(self, statement, rows, bulk)

    monkeypatch.setattr(BulkWriter, "executemany", spy)
    results = {}
    for native in (True, False):
        monkeypatch.setenv(native_connection.ENV, "1" if native else "0")
        used.clear(), bulk_used.clear()
        db = tmp_path / f"native-{native}.db"
        results[native] = train([corpus], db, 420, SPECIAL, checkpoint_merges=20, **kw)
        assert used and set(used) == {native}, "every bulk write took the path asked for"
        assert any(bulk_used) == native, "the native path ran bulk statements (bpe_store_rows), the fallback none"
    assert results[True].merges == results[False].merges
    assert tables(tmp_path / "native-True.db") == tables(tmp_path / "native-False.db")


@pytest.mark.parametrize("base", ["store", "tiktoken"])
def test_native_and_fallback_write_the_same_based_store(tmp_path, corpus, trained_store, monkeypatch, base):
    """A base's rows (its ids, merges and tokens: ``bulk_columns`` natively, tuples in the
    fallback) and the run after them: the same store either way, for a store base and a ranks
    base (whose merges come packed)."""
    from bpe_store.tokenizer.export import export_store

    spec = trained_store
    if base == "tiktoken":
        export_store(trained_store, "tiktoken", tmp_path / "tk")
        spec = tmp_path / "tk"
    for native in (True, False):
        monkeypatch.setenv(native_connection.ENV, "1" if native else "0")
        train([corpus], tmp_path / f"native-{native}.db", 340, [], extend=spec, checkpoint_merges=10, workers=1)
    assert tables(tmp_path / "native-True.db") == tables(tmp_path / "native-False.db")


def test_a_native_resume_of_a_fallback_store_is_identical(tmp_path, corpus, monkeypatch):
    """Stores are one format: a run stopped on one path and resumed on the other ends the same."""
    full = train([corpus], tmp_path / "full.db", 420, SPECIAL, checkpoint_merges=20)
    db = tmp_path / "run.db"
    monkeypatch.setenv(native_connection.ENV, "0")
    train([corpus], db, 300, SPECIAL, checkpoint_merges=20)
    monkeypatch.setenv(native_connection.ENV, "1")
    r = train([corpus], db, 420, SPECIAL, checkpoint_merges=20)
    assert r.merges == full.merges and r.merge_counts == full.merge_counts


def test_the_native_connection_shares_pythons_sqlite_and_its_locks(trained_store, tmp_path):
    """Two copies of SQLite in one process would not see each other's locks (POSIX locks of one
    process never conflict); the same copy does: a write lock held by a Python connection makes
    the native connection's BEGIN IMMEDIATE busy."""
    import _sqlite3

    from bpe_store import _core

    a, b, c = sqlite3.sqlite_version_info
    assert _core.store_db_load(_sqlite3.__file__) == a * 1_000_000 + b * 1_000 + c
    db = tmp_path / "run.db"
    shutil.copy(trained_store, db)
    with Store.open(db) as store:
        ndb = store._native()
        assert ndb is not None
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        ndb.execute("PRAGMA busy_timeout = 0")
        with pytest.raises(_core.SqliteError) as info:
            ndb.execute("BEGIN IMMEDIATE")
        assert info.value.args[0] & 0xFF == 5  # SQLITE_BUSY
        other.execute("ROLLBACK")
        other.close()
        ndb.execute("BEGIN IMMEDIATE")  # free again
        ndb.execute("ROLLBACK")


def test_the_fallback_is_taken_when_turned_off(trained_store, tmp_path, monkeypatch):
    db = tmp_path / "run.db"
    shutil.copy(trained_store, db)
    monkeypatch.setenv(native_connection.ENV, "0")
    with Store.open(db) as store:
        assert store._native() is None
    monkeypatch.setenv(native_connection.ENV, "1")
    with Store.open(db, readonly=True) as store:
        assert store._native() is None  # reading commands never open it


# -- errors: the same as the driver's, and the same StoreError on both paths ---------------------

FAILING = [
    ("INSERT INTO t (id, v) VALUES (1, 'x')", ()),  # UNIQUE constraint (IntegrityError)
    ("INSERT INTO t (id, v) VALUES (?, NULL)", (7,)),  # NOT NULL constraint
    ("INSERT INTO t (id, v) VALUES ('text', 'x')", ()),  # datatype mismatch
    ("SELEC 1", ()),  # syntax error (OperationalError)
    ("SELECT * FROM missing", ()),  # no such table
    ("INSERT INTO t (id, v) VALUES (?, ?)", (2, "x" * 5000)),  # database or disk is full (max_page_count)
]


@pytest.mark.parametrize("statement,params", FAILING)
def test_native_errors_are_the_drivers(tmp_path, statement, params):
    from bpe_store import _core

    db = tmp_path / "t.db"
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
    con.execute("INSERT INTO t VALUES (1, 'a')")
    pages = con.execute("PRAGMA page_count").fetchone()[0]
    con.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(sqlite3.Error) as driver:
        con.execute(statement, params)
    ndb = native_connection.connect(db, busy_timeout_ms=0, synchronous="FULL", cache_kib=1024,
                                    journal_size_limit=1 << 20)
    ndb.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(_core.SqliteError) as native:
        ndb.execute(statement, params)
    err = native_connection.to_sqlite_error(native.value)
    assert type(err) is type(driver.value)
    assert str(err) == str(driver.value)
    assert err.sqlite_errorcode == driver.value.sqlite_errorcode
    ndb.close()
    con.close()


def _checkpoint_of(store: Store, words: int) -> dict:
    """A merge checkpoint's arguments writing ``words`` large token blobs (enough to need pages)."""
    return dict(merges=[], new_vocab=[], word_rows=[(b"\x01\x00\x00\x00" * 2000, i) for i in range(1, words + 1)],
                pair_deletes=[], merges_done=store.sql("SELECT count(*) FROM merges").scalar(), elapsed_s=1.0,
                done_reason=None)


def _fail_checkpoint(trained_store, tmp_path, monkeypatch, native: bool, setup, unchanged: bool = True) -> str:
    """Copy the store, break it with ``setup(store)``, write a checkpoint: its error, the path
    replaced by DB; and check (``unchanged``) the store is still at its last checkpoint."""
    monkeypatch.setenv(native_connection.ENV, "1" if native else "0")
    db = tmp_path / f"native-{native}.db"
    shutil.copy(trained_store, db)
    with Store.open(db) as store:
        before = tables(db)
        setup(store)
        with pytest.raises(StoreError) as info:
            store.write_merge_rows(**_checkpoint_of(store, 200))
    if unchanged:
        assert tables(db) == before
    return str(info.value).replace(str(db), "DB")


def test_a_full_disk_in_a_checkpoint_is_the_same_error_on_both_paths(trained_store, tmp_path, monkeypatch):
    def fill(store: Store) -> None:
        pages = store.sql("PRAGMA page_count").scalar()
        for con in (store.db, store._native()):
            if con is not None:  # the limit is per connection: the one writing must have it
                con.execute(f"PRAGMA max_page_count = {pages + 2}")

    errors = [_fail_checkpoint(trained_store, tmp_path, monkeypatch, native, fill) for native in (True, False)]
    assert errors[0] == errors[1]
    assert "the disk is full" in errors[0] and "last checkpoint" in errors[0]


def test_a_locked_store_in_a_checkpoint_is_the_same_error_on_both_paths(trained_store, tmp_path, monkeypatch):
    for mod in (connection, store_mod):  # each connection the checkpoint may use
        monkeypatch.setattr(mod, "BUSY_TIMEOUT_MS", 50)
    holders = []

    def lock(store: Store) -> None:
        store._native()  # opened before the other takes the lock (opening reads nothing)
        other = sqlite3.connect(store.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        holders.append(other)

    errors = [_fail_checkpoint(trained_store, tmp_path, monkeypatch, native, lock) for native in (True, False)]
    for other in holders:
        other.close()
    assert errors[0] == errors[1]
    assert "database is locked" in errors[0]


def test_a_corrupt_store_in_a_checkpoint_is_the_same_error_on_both_paths(trained_store, tmp_path, monkeypatch):
    def corrupt(store: Store) -> None:
        page_size = store.sql("PRAGMA page_size").scalar()
        root = store.sql("SELECT rootpage FROM sqlite_master WHERE name = 'words'").scalar()
        store.sql("PRAGMA wal_checkpoint(TRUNCATE)")
        with open(store.path, "r+b") as f:  # the words table's root page: a garbage b-tree header
            f.seek((root - 1) * page_size)
            f.write(b"\xff" * 16)

    errors = [_fail_checkpoint(trained_store, tmp_path, monkeypatch, native, corrupt, unchanged=False)
              for native in (True, False)]
    assert errors[0] == errors[1]
    assert "SQLite finds table words damaged" in errors[0]


# -- resume: the words read natively into the engine -------------------------------------------

def test_a_resume_reads_the_words_into_the_engine_without_a_tuple_per_word(trained_store, tmp_path):
    from bpe_store import _core
    from bpe_store.training.merge import NativeMergeEngine
    from bpe_store.training.merge_step import load_engine

    db = tmp_path / "run.db"
    shutil.copy(trained_store, db)
    with Store.open(db) as store:
        rows = store.load_word_rows(packed=True)
        assert isinstance(rows, _core.WordRows)
        assert len(rows) == store.sql("SELECT count(*) FROM words").scalar() > 100
        params = store.params()
        packed = load_engine(store, params, "native")
        n = len(params.special_tokens)
        vocab = store.load_vocab()
        replay = [(a, b, t) for _r, a, b, t, _c in store.load_merges()]  # a finished run keeps no tokens
        tuples = NativeMergeEngine(store.load_word_rows(), [b if k != "special" else None for _, b, k in vocab],
                                   n, n + 256, packed.next_rank, replay=replay)
    assert packed.pair_digest() == tuples.pair_digest()
    assert [m.count for m in packed.step(40)] == [m.count for m in tuples.step(40)]
    assert packed.take_checkpoint_rows()[0] is not None


def test_the_engine_empties_the_rows_it_read(trained_store, tmp_path):
    """The native engine frees the rows read natively once their words are in its arena, so
    the buffer is not alive through the first pair count (the peak of a build)."""
    db = tmp_path / "run.db"
    shutil.copy(trained_store, db)
    with Store.open(db) as store:
        rows = store.load_word_rows(packed=True)
        n = len(rows)
        assert n > 100 and rows.nbytes > 0
        vocab = [b if k != "special" else None for _, b, k in store.load_vocab()]
        replay = [(a, b, t) for _r, a, b, t, _c in store.load_merges()]
        engine = new_engine(rows, vocab, 1, 257, len(replay), "native", replay=replay)
    assert len(rows) == 0 and rows.nbytes == 0
    assert engine._e.num_words == n


def test_a_big_store_is_read_in_two_halves_into_the_same_engine(trained_store, tmp_path, monkeypatch):
    """From ``_PARALLEL_READ_MIN`` words the native read takes the upper half of the ids on a second
    connection and thread; the rows joined are the single read's, in order; a damaged row in the
    upper half is refused as in one read."""
    db = tmp_path / "run.db"
    shutil.copy(trained_store, db)
    replay_engines = []
    for limit in (1 << 40, 2):
        monkeypatch.setattr(counting_rows, "_PARALLEL_READ_MIN", limit)
        with Store.open(db) as store:
            rows = store.load_word_rows(packed=True)
            assert len(rows) == store.sql("SELECT count(*) FROM words").scalar()
            vocab = [b if k != "special" else None for _, b, k in store.load_vocab()]
            replay = [(a, b, t) for _r, a, b, t, _c in store.load_merges()]
            replay_engines.append((rows.nbytes, new_engine(rows, vocab, 1, 257, len(replay), "native",
                                                           replay=replay)))
    (size0, e0), (size1, e1) = replay_engines
    assert size0 == size1 and e0.pair_digest() == e1.pair_digest()
    assert listed(e0.take_checkpoint_rows()) == listed(e1.take_checkpoint_rows())
    assert e0.step(30) == e1.step(30)
    con = sqlite3.connect(db)
    con.execute("UPDATE words SET count = 2.5 WHERE id = (SELECT max(id) FROM words)")
    con.commit()
    con.close()
    with Store.open(db) as store, pytest.raises(StoreError, match="words are damaged"):
        store.load_word_rows(packed=True)


DAMAGED = {
    "word bytes as text": ("UPDATE words SET bytes = 'the' WHERE id = 2", "words are damaged"),
    "tokens as a number": ("UPDATE words SET tokens = 7 WHERE id = 3", "words are damaged"),
    "count as a float": ("UPDATE words SET count = 2.5 WHERE id = 1", "words are damaged"),
    "tokens that spell other bytes": ("UPDATE words SET tokens = x'0100000001000000' WHERE id = 5",
                                      "word 5 does not spell its bytes"),
}


@pytest.fixture(scope="module")
def stopped_store(tmp_path_factory, corpus) -> Path:
    """A run stopped at a checkpoint: a resume reads its words' tokens (a finished run's are
    read as bytes: see train.KEEP_WORD_TOKENS)."""
    db = tmp_path_factory.mktemp("stopped") / "run.db"
    stopped_run(corpus, db, 320, SPECIAL, at=20, checkpoint_merges=10)
    return db


@pytest.mark.parametrize("kind", list(DAMAGED))
def test_damaged_words_are_refused_the_same_on_both_paths(stopped_store, tmp_path, corpus, monkeypatch, kind):
    statement, expected = DAMAGED[kind]
    errors = []
    for native in (True, False):
        monkeypatch.setenv(native_connection.ENV, "1" if native else "0")
        db = tmp_path / f"native-{native}.db"
        shutil.copy(stopped_store, db)
        con = sqlite3.connect(db)
        con.execute(statement)
        con.commit()
        con.close()
        before = tables(db)
        with pytest.raises(StoreError, match=expected) as info:
            train([corpus], db, 320, SPECIAL)  # a larger vocabulary: resume merging from the words
        assert tables(db) == before
        errors.append(str(info.value).replace(str(db), "DB"))
    if "spell" in kind:
        assert errors[0] == errors[1]


# -- kill -9 inside a native checkpoint's transaction ------------------------------------------

RUNNER = """
import sys
from bpe_store import train
train([sys.argv[1]], sys.argv[2], 420, ["<|endoftext|>"], checkpoint_merges=40)
"""


@pytest.mark.parametrize("checkpoint", [1, 3])
def test_a_kill_inside_a_native_checkpoint_resumes_to_the_uninterrupted_result(tmp_path, corpus, checkpoint):
    """kill -9 while the N-th merge checkpoint's transaction is open on the native connection, every
    row written but not committed: the store holds exactly the N-1 checkpoints before it, and the
    same command ends with the uninterrupted run's store."""
    import os
    import sys

    from conftest import kill_when_paused

    expected = train([corpus], tmp_path / "whole.db", 420, SPECIAL, checkpoint_merges=40)
    db = tmp_path / "killed.db"
    kill_when_paused([sys.executable, "-c", RUNNER, str(corpus), str(db)], f"checkpoint:{checkpoint}",
                     {**os.environ, native_connection.ENV: "1"})
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    merges = con.execute("SELECT count(*) FROM merges").fetchone()[0]
    last = con.execute("SELECT max(merges_done) FROM checkpoints WHERE phase = 'merging'").fetchone()[0]
    con.close()
    assert merges == last == 40 * (checkpoint - 1)  # the open transaction left nothing
    result = train([corpus], db, 420, SPECIAL, checkpoint_merges=40)
    assert (result.merges, result.merge_counts) == (expected.merges, expected.merge_counts)
    mine, whole = tables(db), tables(tmp_path / "whole.db")
    for t in ("checkpoints", "sessions"):  # the killed session's history differs, by design
        mine.pop(t), whole.pop(t)
    assert mine == whole


def test_an_io_error_maps_as_the_drivers_does():
    """SQLITE_IOERR_* (e.g. 266, IOERR_READ) is an OperationalError keeping its extended code, and
    the store's one-line error says what SQLite said."""
    from bpe_store import _core
    from bpe_store.store.connection import sqlite_error

    err = native_connection.to_sqlite_error(_core.SqliteError(266, "disk I/O error"))
    assert type(err) is sqlite3.OperationalError and err.sqlite_errorcode == 266
    assert str(sqlite_error(Path("x.db"), err)) == "x.db: SQLite error: disk I/O error"


def test_the_native_connection_is_not_closed_under_a_running_statement(tmp_path):
    """close() while a call is inside a statement (another thread with the GIL released, or here a
    generator of rows calling back) is refused: it would finalize the statement under it."""
    db = tmp_path / "t.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    con.close()
    ndb = native_connection.connect(db, busy_timeout_ms=0, synchronous="OFF", cache_kib=0, journal_size_limit=1 << 20)

    def rows():
        yield (1,)
        with pytest.raises(RuntimeError, match="in use"):
            ndb.close()
        yield (2,)

    assert ndb.executemany("INSERT INTO t (id) VALUES (?)", rows()) == 2
    assert ndb.execute("SELECT count(*) FROM t") == [(2,)]
    ndb.close()
    ndb.close()  # a second close does nothing
    with pytest.raises(RuntimeError, match="closed"):
        ndb.execute("SELECT 1")


# -- bulk statements: one statement reading its rows from bpe_store_rows -------------------------

def _table_db(tmp_path, name="t.db"):
    db = tmp_path / name
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a, b NOT NULL)")
    return db, con


def test_a_bulk_statement_stores_what_the_per_row_statement_stores(tmp_path):
    """Every kind of value the driver binds (int, 64-bit extremes, float, str, bytes, bytearray,
    empty blob, None) comes out of bpe_store_rows with the same type and value, in row order."""
    db, con = _table_db(tmp_path)
    rows = [(1, 2**63 - 1, b"x"), (2, -2**63, bytearray(b"\x00\xff")), (3, 1.5, "t\u00e9xt"), (4, None, b""),
            (5, "", bytearray()), (7, 0, 3)]
    con.executemany("INSERT INTO t (id, a, b) VALUES (?, ?, ?)", rows)
    want = con.execute("SELECT id, a, typeof(a), b, typeof(b) FROM t ORDER BY id").fetchall()
    con.execute("DELETE FROM t")
    ndb = native_connection.connect(db, busy_timeout_ms=0, synchronous="OFF", cache_kib=0, journal_size_limit=1 << 20)
    assert ndb.bulk("INSERT INTO t (id, a, b) SELECT p1, p2, p3 FROM bpe_store_rows", rows) == len(rows)
    assert con.execute("SELECT id, a, typeof(a), b, typeof(b) FROM t ORDER BY id").fetchall() == want
    # UPDATE ... FROM: the same as the per-row UPDATE
    ndb.bulk("UPDATE t SET a = r.p1 FROM bpe_store_rows AS r WHERE t.id = r.p2", [(10, 1), (b"z", 4), (None, 99)])
    assert con.execute("SELECT a FROM t WHERE id IN (1, 4) ORDER BY id").fetchall() == [(10,), (b"z",)]
    ndb.close()
    con.close()


def test_a_failing_bulk_statement_is_the_per_row_statements_error(tmp_path):
    """A constraint failing on the 3rd row: the same exception, message and extended code as the
    driver's per-row statement, and the bulk statement changed nothing (it is one statement)."""
    from bpe_store import _core

    db, con = _table_db(tmp_path)
    con.execute("INSERT INTO t VALUES (3, 0, 'old')")
    for rows in ([(1, 0, b"a"), (2, 0, b"b"), (3, 0, b"c")], [(1, 0, b"a"), (2, 0, None)]):
        with pytest.raises(sqlite3.Error) as driver:
            con.execute("BEGIN")
            try:
                con.executemany("INSERT INTO t (id, a, b) VALUES (?, ?, ?)", rows)
            finally:
                con.execute("ROLLBACK")
        ndb = native_connection.connect(db, busy_timeout_ms=0, synchronous="OFF", cache_kib=0,
                                        journal_size_limit=1 << 20)
        with pytest.raises(_core.SqliteError) as native:
            ndb.bulk("INSERT INTO t (id, a, b) SELECT p1, p2, p3 FROM bpe_store_rows", rows)
        err = native_connection.to_sqlite_error(native.value)
        assert (type(err), str(err), err.sqlite_errorcode) == (
            type(driver.value), str(driver.value), driver.value.sqlite_errorcode)
        assert con.execute("SELECT id FROM t").fetchall() == [(3,)]
        ndb.close()
    con.close()


def test_bpe_store_rows_exist_only_inside_a_bulk_call(tmp_path):
    """bpe_store_rows outside a bulk call, a column past the rows' parameters, or a bulk statement
    with parameters of its own: each is an error, never rows from elsewhere or NULLs."""
    from bpe_store import _core

    db, con = _table_db(tmp_path)
    ndb = native_connection.connect(db, busy_timeout_ms=0, synchronous="OFF", cache_kib=0, journal_size_limit=1 << 20)
    with pytest.raises(_core.SqliteError):
        ndb.execute("SELECT p1 FROM bpe_store_rows")
    with pytest.raises(_core.SqliteError, match="no such parameter"):
        ndb.bulk("INSERT INTO t (id, a, b) SELECT p1, p2, p3 FROM bpe_store_rows", [(1, 2)])
    with pytest.raises(ValueError, match="no parameters"):
        ndb.bulk("INSERT INTO t (id, a, b) SELECT p1, p2, ? FROM bpe_store_rows", [(1, 2)])
    with pytest.raises(ValueError, match="as many parameters"):
        ndb.bulk("INSERT INTO t (id, a, b) SELECT p1, p2, 0 FROM bpe_store_rows", [(1, 2), (3,)])
    with pytest.raises(TypeError, match="cannot store"):
        ndb.bulk("INSERT INTO t (id, a, b) SELECT p1, p2, 0 FROM bpe_store_rows", [(1, object())])
    assert con.execute("SELECT count(*) FROM t").fetchone() == (0,)
    other = sqlite3.connect(db)  # another connection has no such table: it is this connection's only
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        other.execute("SELECT * FROM bpe_store_rows")
    other.close()
    ndb.close()
    con.close()


def test_packed_words_are_written_whole_or_not_at_all(tmp_path):
    """A counting flush's packed words: ids from first_id in order, bytes and counts as packed; a
    count past 64 bits or a damaged buffer is refused before any row is written."""
    from bpe_store import _core

    db = tmp_path / "w.db"
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("CREATE TABLE words (id INTEGER PRIMARY KEY, bytes BLOB NOT NULL, count INTEGER NOT NULL)")
    ndb = native_connection.connect(db, busy_timeout_ms=0, synchronous="OFF", cache_kib=0, journal_size_limit=1 << 20)
    sql = "INSERT INTO words (id, bytes, count) SELECT p1, p2, p3 FROM bpe_store_rows"
    counts = {b"the": 5, b"": 1, bytes(range(256)) * 40: 2**63 - 1, b" a": 7}
    assert ndb.bulk_packed_words(sql, _core.pack_counts(counts), 10) == 4
    assert con.execute("SELECT id, bytes, count FROM words ORDER BY id").fetchall() == [
        (10 + k, w, c) for k, (w, c) in enumerate(counts.items())]
    with pytest.raises(OverflowError):
        ndb.bulk_packed_words(sql, _core.pack_counts({b"x": 1, b"y": 2**63}), 100)
    with pytest.raises(ValueError, match="packed counts"):
        ndb.bulk_packed_words(sql, _core.pack_counts({b"x": 1, b"yy": 2})[:-2], 100)
    assert con.execute("SELECT count(*) FROM words").fetchone() == (4,)
    ndb.close()
    con.close()


def test_rows_given_as_columns_are_the_rows_as_tuples(tmp_path):
    """``bulk_columns`` (a base's ids, merges and tokens): row numbers from a start, uint32s read
    with a stride (packed triples), blobs cut by offsets (empty ones too, and bytes past 127)
    store what the same rows as tuples store; a column shorter than its rows or offsets out of
    order are refused before any row is written; the fallback writer runs the tuples."""
    from array import array

    db, con = _table_db(tmp_path)
    blobs = [b"ab", b"", bytes(range(256)), b"z"]
    triples = [(7, 8, 2**32 - 1), (0, 1, 2), (5, 5, 5), (9, 10, 11)]
    packed = array("I", [x for t in triples for x in t]).tobytes()
    offsets = array("q", [0, 2, 2, 258, 259]).tobytes()
    ndb = native_connection.connect(db, busy_timeout_ms=0, synchronous="OFF", cache_kib=0, journal_size_limit=1 << 20)
    sql = "INSERT INTO t (id, a, b) SELECT p1, p2 * 10 + p3, p4 FROM bpe_store_rows"
    assert ndb.bulk_columns(sql, 4, [40, (packed, 3, 2), (packed, 3, 1), (b"".join(blobs), offsets)]) == 4
    want = [(40 + i, t[2] * 10 + t[1], b) for i, (t, b) in enumerate(zip(triples, blobs))]
    assert con.execute("SELECT id, a, b FROM t ORDER BY id").fetchall() == want
    short = array("q", [0, 2, 1, 258, 259]).tobytes()
    for columns in ([50, (packed[:-4], 3, 2)], [50, (packed, 3, 3)], [50, (b"".join(blobs), short)],
                    [50, (b"".join(blobs), offsets[:-8])], [50, (b"xy", offsets)]):
        with pytest.raises(ValueError, match="bulk_columns"):
            ndb.bulk_columns("INSERT INTO t (id, a) SELECT p1, p2 FROM bpe_store_rows", 4, columns)
    assert con.execute("SELECT count(*) FROM t").fetchone() == (4,)
    ndb.close()
    con.execute("DELETE FROM t")
    fallback = BulkWriter(_Driver(con), None)
    fallback.columns("INSERT INTO t (id, a, b) VALUES (?, ?, ?)", 4, [], lambda: want, sql)
    assert con.execute("SELECT id, a, b FROM t ORDER BY id").fetchall() == want
    con.close()


class _Driver:
    """The ``Statements`` of a ``BulkWriter`` over a plain ``sqlite3`` connection."""

    def __init__(self, con):
        self.con = con

    def sql(self, statement, params=None):  # pragma: no cover - not called here
        return self.con.execute(statement, params or ())

    def executemany(self, statement, rows):
        self.con.executemany(statement, rows)


@pytest.mark.parametrize("changed", [[], [1], [3, 4], [1, 2, 3, 4, 5, 6, 7, 8], [2, 5, 8], [9]])
def test_a_lookup_scan_updates_what_update_from_updates(tmp_path, changed):
    """``bpe_store_lookup`` (the final checkpoint's one-pass words UPDATE): row by row the same
    change as ``UPDATE ... FROM bpe_store_rows``, whichever rows changed (none, the first, the last,
    all, every third, one past the table's end), found from Python rows and in a scan's order."""
    db, con = _table_db(tmp_path)
    con.executemany("INSERT INTO t (id, a, b) VALUES (?, ?, ?)", [(i, None, f"w{i}") for i in range(1, 9)])
    rows = [(bytes([i]) * i, i) for i in changed]
    ndb = native_connection.connect(db, busy_timeout_ms=0, synchronous="OFF", cache_kib=0, journal_size_limit=1 << 20)
    ndb.bulk("UPDATE t SET a = r.p1 FROM bpe_store_rows AS r WHERE t.id = r.p2", rows)
    want = con.execute("SELECT id, a, b FROM t ORDER BY id").fetchall()
    con.execute("UPDATE t SET a = NULL")
    ndb.bulk(merging_rows._WORD_TOKENS[2].replace("words", "t").replace("tokens", "a"), rows)
    assert con.execute("SELECT id, a, b FROM t ORDER BY id").fetchall() == want
    # out of a scan's order (descending, repeated, missing keys): found by search, the same rows
    if rows:
        keys = [9, 8, 3, 3, 0, 5, 1, 2, 7, 4, 6, -1]
        con.execute("CREATE TABLE probe (k)")
        ndb.bulk("INSERT INTO probe SELECT group_concat(ifnull(nullif(hex(bpe_store_lookup(value)), ''), '-'), ',')"
                 f" FROM json_each('{keys}')", rows)
        found = {i: bytes([i]) * i for i in changed}
        want_keys = ",".join(found[k].hex().upper() if k in found else "-" for k in keys)
        assert con.execute("SELECT k FROM probe").fetchone() == (want_keys,)
    ndb.close()
    con.close()


def test_a_lookup_needs_rows_in_key_order_inside_a_bulk_call(tmp_path):
    """``bpe_store_lookup`` outside a bulk call, over rows without an integer key, or over rows not
    in ascending key order is an error (a binary search over unsorted keys would miss rows)."""
    from bpe_store import _core

    db, con = _table_db(tmp_path)
    con.execute("INSERT INTO t (id, a, b) VALUES (1, NULL, 'x'), (2, NULL, 'y')")
    ndb = native_connection.connect(db, busy_timeout_ms=0, synchronous="OFF", cache_kib=0, journal_size_limit=1 << 20)
    scan = "UPDATE t SET a = bpe_store_lookup(id) WHERE bpe_store_lookup(id) IS NOT NULL"
    with pytest.raises(_core.SqliteError, match="no bulk statement"):
        ndb.execute(scan)
    for rows, why in (([(b"a", 2), (b"b", 1)], "ascending"), ([(b"a", 1), (b"b", 1)], "ascending"),
                      ([(b"a", "1")], "no integer key"), ([(b"a",)], "no integer key")):
        with pytest.raises(_core.SqliteError, match=why):
            ndb.bulk(scan, rows)
    assert con.execute("SELECT a FROM t").fetchall() == [(None,), (None,)]
    other = sqlite3.connect(db)  # the function is this connection's only, like bpe_store_rows
    with pytest.raises(sqlite3.OperationalError, match="no such function"):
        other.execute("SELECT bpe_store_lookup(1)")
    other.close()
    ndb.close()
    con.close()


@pytest.mark.parametrize("share", [0, 10**9])
def test_flushes_and_checkpoints_write_the_same_store_with_the_lookup_scan_or_update_from(
        tmp_path, corpus, monkeypatch, share):
    """A run whose counting flushes (count deltas) and merge checkpoints (words' tokens) write by
    the lookup scan always (share 10**9) or by UPDATE ... FROM always (0), with many flushes and a
    checkpoint every 20 merges (few words change in each after the first), stores exactly what the
    fallback's per-row statements store."""
    kw = dict(workers=1, checkpoint_merges=20, chunk_size=4096, count_flush_seconds=0)
    monkeypatch.setenv(native_connection.ENV, "0")
    train([corpus], tmp_path / "fallback.db", 400, SPECIAL, **kw)
    monkeypatch.setenv(native_connection.ENV, "1")
    monkeypatch.setattr(bulk, "_WORDS_SCAN_SHARE", share)
    bulks = []
    real = BulkWriter.executemany

    def spy(self, statement, rows, bulk=None):
        bulks.append(bulk)
        return real(self, statement, rows, bulk)

    monkeypatch.setattr(BulkWriter, "executemany", spy)
    train([corpus], tmp_path / "native.db", 400, SPECIAL, **kw)
    form = 2 if share else 1
    assert counting_rows._COUNT_DELTAS[form] in bulks and merging_rows._WORD_TOKENS[form] in bulks
    assert tables(tmp_path / "native.db") == tables(tmp_path / "fallback.db")
