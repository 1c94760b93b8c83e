"""Exit 1 is for bugs: a store on a read-only mount and a store whose history rows are damaged get
the documented code (4, a store problem) and one line saying what is wrong."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess

import pytest
from cli_helpers import SPECIAL, one_error_line, run


@pytest.fixture
def read_only_mount(tmp_path):
    """``(store dir, its read-only bind mount)``; skips where bind mounts are not allowed."""
    src, mnt = tmp_path / "src", tmp_path / "ro"
    src.mkdir()
    mnt.mkdir()
    r = subprocess.run(["mount", "--bind", str(src), str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {r.stderr.decode().strip()}")
    try:
        r = subprocess.run(["mount", "-o", "remount,bind,ro", str(mnt)], capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"cannot remount read-only here: {r.stderr.decode().strip()}")
        yield src, mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_resume_and_upgrade_on_a_read_only_mount_are_exit_4(read_only_mount, trained_store, corpus):
    src, mnt = read_only_mount
    shutil.copy(trained_store, src / "run.db")
    db = mnt / "run.db"
    for args in (["train", corpus, "--db", db, "--vocab-size", 320, "--special", SPECIAL, "-q"],
                 ["db", "upgrade", db]):
        r = run(*args)
        assert r.exit_code == 4, (args, r.output)  # was 1: "unexpected OSError: Read-only file system"
        assert one_error_line(r.stderr) and "read-only" in r.stderr, r.stderr
    assert run("status", db).exit_code == 0  # reading still works
    assert run("db", "check", db).exit_code == 0


@pytest.mark.parametrize("statement, what", [
    ("UPDATE sessions SET argv = '[not json'", "argv '[not json' is not a JSON list of strings"),
    ("UPDATE sessions SET argv = '{\"a\": 1}'", "is not a JSON list of strings"),
    ("UPDATE checkpoints SET at = 'yesterday' WHERE id = (SELECT max(id) FROM checkpoints)",
     "at 'yesterday' is not a date"),
    ("UPDATE checkpoints SET elapsed_s = 'long'", "elapsed_s 'long' is not a duration"),
    ("UPDATE sessions SET started_at = 5", "are not dates"),
])
def test_status_of_a_store_with_damaged_history_names_it_as_train_and_export_use_it(tmp_path, trained_store,
                                                                                   statement, what):
    """History rows (checkpoints, sessions) are nothing a resume or an export reads: train, export
    and from_store use the store, so status shows it too (exit 0; it was 4, and 1 before that),
    naming the damage and leaving out what depends on it; db check fails on it (exit 4)."""
    from bpe_store import Tokenizer

    db = tmp_path / "run.db"
    shutil.copy(trained_store, db)
    con = sqlite3.connect(db)
    con.execute(statement)
    con.commit()
    con.close()
    r = run("status", db)
    assert r.exit_code == 0 and what in r.stdout and f"bpe-store db check {db}" in r.stdout, r.output
    r = run("status", db, "--json")
    st = json.loads(r.stdout)
    assert r.exit_code == 0 and any(what in p for p in st["history_problems"]) and st["sessions"] == []
    assert st["merges_done"] > 0 and st["speed"] is None
    assert run("export", db, "--format", "hf", "-o", tmp_path / "hf").exit_code == 0
    assert Tokenizer.from_store(db).encode("hello world")
    r = run("db", "check", db)
    assert r.exit_code == 4 and what in r.stdout
