"""``bpe-store db upgrade`` on a real store made by the oldest schema (tests/fixtures/v0_1_0.db)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from cli_helpers import SPECIAL, run
from conftest import FIXTURES, shared_file

from bpe_store.store import migrate
from bpe_store.store.store import Store
from bpe_store.training.train import read_result

OLD = FIXTURES / "v0_1_0.db"


@pytest.fixture
def old_store(tmp_path) -> Path:
    db = tmp_path / "old.db"
    shutil.copy(OLD, db)
    return db


def raw_merges(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as con:
        rows = con.execute('SELECT rank, "left", "right", token, count FROM merges ORDER BY rank').fetchall()
    con.close()
    return rows


def revision(db: Path) -> str:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    finally:
        con.close()


def test_the_fixture_is_at_the_oldest_revision(old_store):
    assert revision(old_store) == "v0_1_0_initial" != migrate.head_revision()
    with sqlite3.connect(old_store) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()
    assert "sessions" not in tables and "merges" in tables


def test_an_old_store_is_refused_with_the_upgrade_command(old_store):
    r = run("show", old_store, "merges")
    assert r.exit_code == 4
    assert f"upgrade it with: bpe-store db upgrade {old_store}" in r.stderr
    st = json.loads(run("status", old_store, "--json").stdout)  # status still reads it
    assert st["schema"] == "v0_1_0_initial" and st["schema_is_current"] is False
    assert f"bpe-store db upgrade {old_store}" in run("status", old_store).stdout


def test_db_upgrade_in_place(old_store):
    before = raw_merges(old_store)
    r = run("db", "upgrade", old_store)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"{old_store}: upgraded the schema from v0_1_0_initial to {migrate.head_revision()}"
    assert revision(old_store) == migrate.head_revision()
    assert raw_merges(old_store) == before
    st = json.loads(run("status", old_store, "--json").stdout)
    assert st["schema_is_current"] and st["merges_done"] == len(before) == 43
    [history] = st["sessions"]  # the time before sessions were recorded, as one row
    assert history["pid"] is None and history["outcome"] == "done" and history["merges_end"] == 43
    again = run("db", "upgrade", old_store)
    assert again.exit_code == 0 and "already at the newest schema" in again.stdout


def test_an_upgraded_store_continues_to_a_larger_vocab(old_store, tmp_path):
    # the fixture records its input under /work/shared; point it at wherever ../shared is here
    # (same size and content, so the resume check accepts it)
    source = shared_file("cs336", "tinystories_sample.txt").resolve()
    with sqlite3.connect(old_store) as con:
        con.execute("UPDATE sources SET path = ?", (str(source),))
    con.close()
    assert run("db", "upgrade", old_store).exit_code == 0
    grown = run("train", source, "--db", old_store, "--vocab-size", "330", "--special", SPECIAL, "--quiet")
    assert grown.exit_code == 0, grown.output
    fresh = tmp_path / "fresh.db"
    assert run("train", source, "--db", fresh, "--vocab-size", "330", "--special", SPECIAL, "--quiet").exit_code == 0
    with Store.open(old_store, readonly=True) as a, Store.open(fresh, readonly=True) as b:
        assert read_result(a).merges == read_result(b).merges
        outcomes = [r[0] for r in a.sql("SELECT outcome FROM sessions ORDER BY id")]
    assert outcomes == ["done", "done"]


def test_db_upgrade_is_refused_while_a_run_holds_the_store(old_store):
    assert run("db", "upgrade", old_store).exit_code == 0
    with Store.open(old_store):
        r = run("db", "upgrade", old_store)
    assert r.exit_code == 4 and "another bpe-store process" in r.stderr


def test_db_upgrade_of_something_else(tmp_path):
    p = tmp_path / "x.db"
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE t (a)")
    con.close()
    r = run("db", "upgrade", p)
    assert r.exit_code == 4 and "not a bpe_store store" in r.stderr
    assert run("db", "upgrade", tmp_path / "missing.db").exit_code == 4


def test_the_sessions_migration_goes_down_and_up_again(old_store):
    assert run("db", "upgrade", old_store).exit_code == 0
    with Store.open(old_store) as store:
        command.downgrade(migrate.alembic_config(store.conn), "v0_1_0_initial")
        store.conn.commit()
    assert revision(old_store) == "v0_1_0_initial"
    assert run("db", "upgrade", old_store).exit_code == 0
    assert revision(old_store) == migrate.head_revision()


def test_db_upgrade_is_one_transaction_a_kill_after_any_migration_leaves_the_old_revision(old_store, tmp_path):
    """A kill -9 after a migration (inside the upgrade, the pause point ``upgrade:REVISION``)
    leaves the store byte-for-byte at its old revision, and a reader meanwhile sees the old one;
    then the upgrade runs whole. (Alembic's SQLite default committed each migration alone.) Killed
    after the first, a middle and the last migration: a commit in any of them (of its changes or of
    alembic's version row, written after each) would be on disk at the kill after the last one
    (a kill after every one of the ~16 took 12 CPU s, a CLI started for each)."""
    import subprocess

    from cli_helpers import cli_cmd, env

    steps = migrate.alembic_revisions()[1:]  # the fixture is at the first
    assert len(steps) >= 10
    steps = [steps[0], steps[len(steps) // 2], steps[-1]]
    with sqlite3.connect(old_store) as con:
        before = con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    con.close()
    for step in steps:
        proc = subprocess.Popen(cli_cmd("db", "upgrade", old_store), stderr=subprocess.PIPE, text=True,
                                env={**env(), "BPE_STORE_TEST_PAUSE": f"upgrade:{step}"})
        try:
            line = proc.stderr.readline()
            assert f"paused at upgrade:{step}" in line, line + proc.stderr.read()
            assert revision(old_store) == "v0_1_0_initial"  # a reader sees the old revision
        finally:
            proc.kill()
            proc.wait()
            proc.stderr.close()
        assert revision(old_store) == "v0_1_0_initial", step
        with sqlite3.connect(old_store) as con:
            assert con.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall() == before, step
        con.close()
    r = run("db", "upgrade", old_store)
    assert r.exit_code == 0 and revision(old_store) == migrate.head_revision()
