"""Creating a store: complete or absent whatever happens, at the migrations' head schema without
running them, and cheap enough for a cold CS336 ``train_bpe``; and never deleted by ``train``
without ``--restart`` when it holds anything."""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, cli_cmd, env

from bpe_store import Store, StoreError, train
from bpe_store.store import migrate, schemas
from bpe_store.store.connection import APPLICATION_ID, PAGE_SIZE

VOCAB = 300


@pytest.fixture(scope="module")
def expected(tmp_path_factory, corpus) -> list:
    r = train([corpus], tmp_path_factory.mktemp("clean") / "run.db", VOCAB, [SPECIAL])
    return r.merges


def train_cmd(corpus: Path, db: Path, *extra: str) -> list[str]:
    return cli_cmd("train", corpus, "--db", db, "--vocab-size", VOCAB, "--special", SPECIAL, "-q", *extra)


def merges(db: Path) -> list:
    from bpe_store.training.train import read_result

    with Store.open(db, readonly=True) as s:
        return read_result(s).merges


# -- the head schema without Alembic ---------------------------------------------------------------

def test_recorded_schemas_are_what_the_migrations_make():
    revisions = migrate.alembic_revisions()
    fix = "run `python tools/gen_schemas.py` after changing migrations/"
    assert list(schemas.REVISIONS) == revisions, fix
    assert schemas.HEAD == migrate.SCHEMA_HEAD == migrate.alembic_head_revision(), fix
    for rev in revisions:
        assert schemas.SCHEMAS[rev] == migrate.migrated_schema(rev), f"{rev}: {fix}"


def test_a_created_store_equals_a_migrated_one(tmp_path):
    Store.create(tmp_path / "new.db").close()
    con = sqlite3.connect(tmp_path / "new.db")
    try:
        rows = tuple(con.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid"))
        assert rows == migrate.migrated_schema(migrate.SCHEMA_HEAD)
        assert con.execute("SELECT version_num FROM alembic_version").fetchall() == [(migrate.SCHEMA_HEAD,)]
        assert con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert con.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 16384
    finally:
        con.close()


def test_an_upgraded_store_has_the_head_schema(tmp_path):
    from conftest import FIXTURES

    db = tmp_path / "old.db"
    db.write_bytes((FIXTURES / "v0_1_0.db").read_bytes())
    with Store.open(db, allow_old=True) as store:
        migrate.upgrade(store.conn)
        store.conn.commit()
    with Store.open(db) as store:  # checks the schema against schemas.SCHEMAS[HEAD]
        assert store.revision == migrate.SCHEMA_HEAD
    con = sqlite3.connect(db)
    try:  # an old store keeps its page size: it cannot change in WAL mode
        assert con.execute("PRAGMA page_size").fetchone()[0] == 4096
    finally:
        con.close()


LIGHT = ("import sys, bpe_store; heavy = {'sqlalchemy', 'alembic', 'numpy', 'typer', 'rich', 'regex', 'click'}; "
         "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")


def test_import_bpe_store_loads_nothing_heavy():
    out = subprocess.run([sys.executable, "-c", LIGHT], capture_output=True, text=True, check=True, env=env())
    assert out.stdout.strip() == "[]"


def test_public_names_still_import():
    code = ("from bpe_store import (BpeStoreError, InputError, ResumeMismatch, StoreError, export_store, "
            "GPT2_PATTERN, Store, Tokenizer, Interrupted, TrainResult, read_result, train, train_bpe); "
            "import bpe_store; assert set(bpe_store.__all__) <= set(dir(bpe_store)); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env())
    assert out.stdout.strip() == "ok", out.stderr
    import bpe_store

    with pytest.raises(AttributeError):
        bpe_store.no_such_name  # noqa: B018


def test_train_bpe_imports_neither_sqlalchemy_nor_alembic_nor_regex(corpus):
    # regex: GPT-2's pattern is counted by the native scanner and is known to compile (test below)
    code = ("import sys; from bpe_store import train_bpe; v, m = train_bpe(sys.argv[1], 300, ['<|endoftext|>']); "
            "print(len(m), sorted(x for x in sys.modules if x.split('.')[0] in ('sqlalchemy', 'alembic', 'regex')))")
    out = subprocess.run([sys.executable, "-c", code, str(corpus)], capture_output=True, text=True, env=env())
    assert out.stdout.strip() == f"{VOCAB - 257} []", out.stderr


def test_the_built_in_patterns_compile_and_another_is_still_checked():
    import regex

    from bpe_store.errors import InputError
    from bpe_store.text.pretokenize import PATTERNS
    from bpe_store.training.options import check_params

    for pattern in PATTERNS.values():  # check_params trusts these without compiling them
        regex.compile(pattern)
        assert check_params(300, [], pattern, "strict").pattern == pattern
    with pytest.raises(InputError, match="does not compile"):
        check_params(300, [], r"(\p{L}", "strict")


# -- complete or absent ----------------------------------------------------------------------------

def test_a_kill_while_creating_leaves_no_store_and_the_same_command_trains(tmp_path, corpus, expected):
    db = tmp_path / "run.db"
    proc = subprocess.Popen(train_cmd(corpus, db), stderr=subprocess.PIPE, text=True,
                            env={**env(), "BPE_STORE_TEST_PAUSE": "create"})
    try:
        line = proc.stderr.readline()
        assert "paused at create" in line, line
        assert any(n.startswith(".run.db.creating-") for n in os.listdir(tmp_path))
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        proc.stderr.close()
    assert not db.exists()  # nothing under the store's name: never a half-made store
    r = subprocess.run(train_cmd(corpus, db), capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert merges(db) == expected
    assert not [n for n in os.listdir(tmp_path) if ".creating-" in n]  # the killed build's file is gone


def _plain_readonly_sqlite_reads(db: Path) -> int:
    """What plain read-only SQLite (no bpe_store) counts in ``run``; fails on a hot -journal."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM run").fetchone()[0]
    finally:
        con.close()


def test_a_store_appears_under_its_name_already_in_wal_mode(tmp_path, monkeypatch):
    """Nothing switches the journal mode on the final name (a rollback-journal write a kill could
    leave hot): the file is published in WAL mode, with no -wal, -shm or -journal beside it."""
    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as if killed right after the store got its name

    monkeypatch.setattr(Store, "open", classmethod(killed))
    db = tmp_path / "run.db"
    with pytest.raises(KeyboardInterrupt):
        Store.create(db, lambda s: s.init_run(train_params(), [], [], 1 << 20, "test"))
    assert sorted(os.listdir(tmp_path)) == ["run.db"]
    header = db.read_bytes()[:20]
    assert (header[18], header[19]) == (2, 2), "the file format bytes say WAL"
    assert _plain_readonly_sqlite_reads(db) == 1


def train_params():
    from bpe_store.store.params import RunParams

    return RunParams("x", (SPECIAL,), VOCAB)


def test_a_kill_just_after_creation_leaves_a_store_plain_sqlite_reads(tmp_path, corpus, expected):
    db = tmp_path / "run.db"
    proc = subprocess.Popen(train_cmd(corpus, db), stderr=subprocess.PIPE, text=True,
                            env={**env(), "BPE_STORE_TEST_PAUSE": "published"})
    try:
        line = proc.stderr.readline()
        assert "paused at published" in line, line
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        proc.stderr.close()
    assert not Path(f"{db}-journal").exists()
    assert _plain_readonly_sqlite_reads(db) == 1  # no hot journal: read-only readers work at once
    r = subprocess.run(cli_cmd("status", db), capture_output=True, text=True, env=env(), timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(train_cmd(corpus, db), capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert merges(db) == expected


@pytest.mark.slow
@pytest.mark.parametrize("how", ["no schema", "no run"])
def test_a_store_whose_creation_never_finished_is_recovered(tmp_path, corpus, expected, how):
    """Stores left by older versions killed while creating: the same command, and --restart, train."""
    for extra in ((), ("--restart",)):
        db = tmp_path / f"run{len(extra)}.db"
        if how == "no schema":  # killed after the header was written, before the migrations
            con = sqlite3.connect(db)
            con.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            con.execute("PRAGMA journal_mode = WAL")
            con.close()
        else:  # killed after the schema, before the run's first transaction
            Store.create(db).close()
        r = subprocess.run(train_cmd(corpus, db, *extra), capture_output=True, text=True, env=env(), timeout=120)
        assert r.returncode == 0, r.stderr
        assert merges(db) == expected


@pytest.mark.parametrize("damage", ["DELETE FROM run", "DELETE FROM alembic_version", "DROP TABLE alembic_version"])
def test_a_store_with_data_but_no_run_or_version_is_never_deleted(tmp_path, corpus, expected, damage):
    """A trained store whose run row or schema version is gone is not an unfinished creation:
    `train`, even on other inputs, refuses it (exit 4) and leaves the file as it was; --restart
    deletes it and trains."""
    db = tmp_path / "run.db"
    train([corpus], db, VOCAB, [SPECIAL])
    con = sqlite3.connect(db)
    con.execute(damage)
    con.commit()
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    before = db.read_bytes()
    other = tmp_path / "other.txt"
    other.write_text("something else entirely " * 50, encoding="utf-8")
    for inputs in (corpus, other):
        r = subprocess.run(train_cmd(inputs, db), capture_output=True, text=True, env=env(), timeout=120)
        assert r.returncode == 4, r.stderr
        assert "nothing was deleted" in r.stderr and "--restart" in r.stderr, r.stderr
        assert db.read_bytes() == before
    r = subprocess.run(train_cmd(corpus, db, "--restart"), capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert merges(db) == expected


@pytest.mark.slow
def test_a_full_disk_while_creating_leaves_nothing(tmp_path, corpus):
    """RLIMIT_FSIZE makes every write past 40 KB fail, as a full disk does."""
    db = tmp_path / "run.db"

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))

    r = subprocess.run(train_cmd(corpus, db), capture_output=True, text=True, env=env(), timeout=120,
                       preexec_fn=limit)
    assert r.returncode == 4, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert sorted(os.listdir(tmp_path)) == []
    r = subprocess.run(train_cmd(corpus, db), capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_full_tmpfs_while_creating_leaves_nothing(tmp_path, corpus):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        with pytest.raises(StoreError) as info:
            train([corpus], mnt / "run.db", VOCAB, [SPECIAL])
        msg = str(info.value)  # no store exists, so none is "at its last checkpoint"
        assert msg.startswith(f"{mnt / 'run.db'}: the disk is full") and msg.endswith("no store was created"), msg
        assert "last checkpoint" not in msg and os.listdir(mnt) == []
        subprocess.run(["mount", "-o", "remount,size=16m", str(mnt)], check=True)
        assert len(train([corpus], mnt / "run.db", VOCAB, [SPECIAL]).merges) == VOCAB - 257
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_create_never_replaces_a_store(tmp_path):
    Store.create(tmp_path / "a.db").close()
    with pytest.raises(StoreError, match="already exists"):
        Store.create(tmp_path / "a.db")
    (tmp_path / "empty.db").touch()
    Store.create(tmp_path / "empty.db").close()  # an empty file holds nothing
