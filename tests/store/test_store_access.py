"""Opening a store from anywhere, by anyone who may read it, alongside a trainer.

* any file name (``#``, ``?``, ``%``, spaces, non-ASCII) opens exactly that file;
* the reading commands work on a read-only file, directory or mount, and for a user who may
  only read the store;
* ``status``'s lock probe never makes a trainer starting at that instant fail;
* reads take no write lock, and transactions are explicit;
* the WAL is truncated after each write, and a reader that keeps it from shrinking is reported.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, cli_cmd, env, run
from conftest import ROOT, shared_file, tmpfs

from bpe_store import Store, StoreError, Tokenizer, train
from bpe_store.errors import Interrupted
from bpe_store.inspection import answers

VOCAB = 300


@pytest.fixture(scope="module")
def trained(trained_store) -> Path:
    return trained_store  # VOCAB tokens, [SPECIAL]


def merges_of(db: Path) -> list:
    with Store.open(db, readonly=True) as s:
        return s.sql("SELECT * FROM merges ORDER BY rank").fetchall()


# -- paths ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["run#1.db", "a?b=c.db", "100%25.db", "50%.db", "my store.db", "été 中.db"])
def test_any_file_name_opens_that_file(tmp_path, trained, name):
    db = tmp_path / name
    shutil.copy(trained, db)
    # a decoy where the unescaped URI of the old code pointed (`run#1.db` read `run`)
    before = sorted(os.listdir(tmp_path))
    st = answers.status(db)
    assert st["merges_done"] == VOCAB - 257 and st["path"] == str(db)
    assert answers.sql(db, "SELECT count(*) FROM merges")[1] == [(VOCAB - 257,)]
    assert answers.show(db, "merges", 1)[1]
    assert len(Tokenizer.from_store(db).encode("hello world")) > 0
    for args in (["status", db], ["show", db, "vocab", "-n", "1"], ["sql", db, "SELECT 1"]):
        r = run(*args)
        assert r.exit_code == 0, r.output
    created = set(os.listdir(tmp_path)) - set(before)
    assert created <= {f"{name}-wal", f"{name}-shm"}, created  # no other file was made or opened


# -- read-only use -------------------------------------------------------------------------------

READERS = [
    ["status", "{db}", "--json"],
    ["sql", "{db}", "SELECT count(*) AS n FROM merges", "-f", "json"],
    ["show", "{db}", "merges", "-n", "3"],
    ["why", "{db}", " t"],
    ["export", "{db}", "--format", "gpt2", "-o", "{out}/gpt2"],
]
TOKENIZER = ("import sys; from bpe_store import Tokenizer; "
             "print(len(Tokenizer.from_store(sys.argv[1]).encode('hello there')))")


def _readers_work(db: Path, out: Path, as_user: list[str]) -> None:
    for args in READERS:
        argv = [a.format(db=db, out=out) for a in args]
        r = subprocess.run(as_user + cli_cmd(*argv), capture_output=True, text=True, env=env(), timeout=120)
        assert r.returncode == 0, (argv, r.stderr)
        if args[0] == "sql":
            assert json.loads(r.stdout) == [{"n": VOCAB - 257}]
    r = subprocess.run(as_user + [sys.executable, "-c", TOKENIZER, str(db)], capture_output=True, text=True,
                       env=env(), timeout=120)
    assert r.returncode == 0 and int(r.stdout) > 0, r.stderr


@pytest.fixture
def public_dir():
    """A directory every user can reach (pytest's tmp_path is private to its owner)."""
    d = Path(tempfile.mkdtemp(prefix="bpe_store-ro-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    for p in [d, *d.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    shutil.rmtree(d, ignore_errors=True)


def _read_only_copy(trained: Path, public_dir: Path) -> tuple[Path, Path]:
    """``(store, out)``: a 0444 copy of the store in a 0555 directory (no -shm can be made beside
    it), and an empty directory for outputs."""
    store_dir = public_dir / "store"
    store_dir.mkdir()
    db = store_dir / "run.db"
    shutil.copy(trained, db)
    db.chmod(0o444)
    store_dir.chmod(0o555)
    out = public_dir / "out"
    out.mkdir()
    return db, out


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_user_who_can_only_read_the_store_can_use_it(trained, public_dir):
    db, out = _read_only_copy(trained, public_dir)
    store_dir = db.parent
    out.chmod(0o777)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    _readers_work(db, out, nobody)
    assert sorted(os.listdir(store_dir)) == ["run.db"]
    # and training in it is refused with a store error, not a crash
    r = subprocess.run(nobody + cli_cmd("train", "/dev/null", "--db", db, "--vocab-size", "300"),
                       capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode in (2, 4) and "Traceback" not in r.stderr, r.stderr


@pytest.mark.slow
def test_a_read_only_file_in_a_read_only_directory(trained, public_dir):
    """As whoever runs the tests (root ignores permissions: there the mount test below counts)."""
    _readers_work(*_read_only_copy(trained, public_dir), [])


@pytest.fixture
def ro_mount(tmp_path):
    """A tmpfs for a copy of a store, which the test remounts read-only (needs root; skipped elsewhere)."""
    with tmpfs(tmp_path / "mnt", "8m") as mnt:
        yield mnt


@pytest.mark.slow
def test_a_store_on_a_read_only_mount(trained, ro_mount, tmp_path):
    shutil.copy(trained, ro_mount / "run.db")
    subprocess.run(["mount", "-o", "remount,ro", str(ro_mount)], check=True)
    out = tmp_path / "out"
    out.mkdir()
    _readers_work(ro_mount / "run.db", out, [])


# -- the lock probe ------------------------------------------------------------------------------

PROBE = """
import sys, time
from bpe_store import Store
n, end = 0, time.monotonic() + float(sys.argv[2])
print("probing", flush=True)
while time.monotonic() < end:
    Store.is_locked(sys.argv[1]); n += 1
print(n)
"""


@pytest.mark.slow
def test_status_probes_never_make_a_trainer_fail(tmp_path, trained):
    db = tmp_path / "run.db"
    shutil.copy(trained, db)
    probers = [subprocess.Popen([sys.executable, "-c", PROBE, str(db), "4"], stdout=subprocess.PIPE, text=True,
                                env=env()) for _ in range(2)]
    refused = 0
    try:
        for p in probers:
            assert p.stdout.readline().strip() == "probing"
        for _ in range(300):  # trainers starting while the probes run
            try:
                Store.open(db).close()
            except StoreError as exc:
                assert "another bpe-store process" in str(exc)
                refused += 1
    finally:
        probes = [int(p.communicate(timeout=60)[0]) for p in probers]
    assert min(probes) > 100
    assert refused == 0


def test_the_probe_still_sees_a_trainer(tmp_path, trained):
    db = tmp_path / "run.db"
    shutil.copy(trained, db)
    assert not Store.is_locked(db)
    with Store.open(db):
        assert Store.is_locked(db)
        with pytest.raises(StoreError, match="another bpe-store process"):
            Store.open(db)
    assert not Store.is_locked(db)


# -- transactions ----------------------------------------------------------------------------------

def _can_write(db: Path) -> bool:
    other = sqlite3.connect(db, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
        return False
    finally:
        other.close()


def test_reads_take_no_write_lock(tmp_path, trained):
    db = tmp_path / "run.db"
    shutil.copy(trained, db)
    with Store.open(db) as store:  # a writer, as a trainer holds it
        store.params(), store.sources(), store.load_vocab(), store.elapsed(), store.load_word_rows()
        assert _can_write(db)  # the old code held a hidden BEGIN IMMEDIATE after any read
        assert not store.db.in_transaction
        with store.transaction():
            assert not _can_write(db)
        assert _can_write(db)
    with Store.open(db, readonly=True) as reader, reader.snapshot():
        reader.sql("SELECT count(*) FROM merges").scalar()
        assert _can_write(db)


def test_a_transaction_never_commits_hidden_work(tmp_path, trained):
    db = tmp_path / "run.db"
    shutil.copy(trained, db)
    with Store.open(db) as store:
        store.db.execute("BEGIN")
        store.db.execute("UPDATE run SET updated_at = 'x'")
        with pytest.raises(RuntimeError, match="already open"), store.transaction():
            pass
        store.db.execute("ROLLBACK")
    with Store.open(db, readonly=True) as store:
        assert store.run_row()["updated_at"] != "x"


# -- the WAL ---------------------------------------------------------------------------------------

def test_a_reader_keeps_the_wal_and_releasing_it_lets_it_shrink(tmp_path):
    corpus = shared_file("cs336", "corpus.en")
    db = tmp_path / "run.db"
    stop = threading.Event()

    def first(e: dict) -> None:
        if e["stage"] == "checkpoint" and e.get("phase") == "merging" and e["done"] >= 20:
            stop.set()

    with pytest.raises(Interrupted):
        train([corpus], db, 1000, [SPECIAL], checkpoint_merges=20, progress=first, stop=stop)
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    held = reader.execute("SELECT count(*) FROM merges").fetchone()[0]  # holds this snapshot
    events: list[dict] = []
    stop = threading.Event()

    def second(e: dict) -> None:
        if e["stage"] in ("checkpoint", "merge_log"):  # while the reader stays, merges are only logged
            events.append(e)
        if e["stage"] == "merging" and e["done"] >= 200:
            stop.set()

    with pytest.raises(Interrupted):
        train([corpus], db, 1000, [SPECIAL], checkpoint_merges=20, progress=second, stop=stop)
    assert events and all(e["wal_blocked"] for e in events)
    blocked_size = events[-1]["wal_bytes"]
    assert blocked_size > 0
    st = answers.status(db)
    assert st["wal_blocked"] and st["wal_bytes"] >= blocked_size and st["wal_note"]
    assert "reader holds an old snapshot" in run("status", db).stdout
    assert reader.execute("SELECT count(*) FROM merges").fetchone()[0] == held
    reader.execute("ROLLBACK")
    reader.close()
    events.clear()
    r = train([corpus], db, 1000, [SPECIAL], checkpoint_merges=20, progress=lambda e: events.append(e)
              if e["stage"] == "checkpoint" else None)
    assert len(r.merges) == 1000 - 257
    assert not events[-1]["wal_blocked"] and events[-1]["wal_bytes"] == 0
    wal = Path(f"{db}-wal")
    assert not wal.exists() or wal.stat().st_size < blocked_size
    assert not answers.status(db)["wal_blocked"]


def test_the_wal_is_bounded(tmp_path, trained):
    db = tmp_path / "run.db"
    shutil.copy(trained, db)
    with Store.open(db) as store:
        assert store.sql("PRAGMA journal_size_limit").scalar() > 0
        with store.transaction():
            store.sql("UPDATE run SET updated_at = ?", ("now",))
        assert store.wal == {"wal_bytes": 0, "wal_blocked": False}


def test_holding_a_store_open_does_not_stop_another_process_reading(tmp_path, trained):
    db = tmp_path / "run.db"
    shutil.copy(trained, db)
    with Store.open(db):
        r = subprocess.run(cli_cmd("sql", db, "SELECT count(*) FROM merges"), capture_output=True, text=True,
                           env=env(), timeout=60, cwd=ROOT)
        assert r.returncode == 0, r.stderr
