"""Integrity you can check: every merge's token is its two parts joined, every vocabulary row is
what made it, and the merge log matches the running digest its newest checkpoint recorded. A store
changed by hand is refused (exit 4, the file left as it was) by a resume, ``export``,
``Tokenizer.from_store`` and ``bpe-store db check``, instead of being carried into a result.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from alembic import command
from cli_helpers import SPECIAL, run
from conftest import FIXTURES, stopped_run, store_dump, tampered

from bpe_store import StoreError, Tokenizer, train
from bpe_store.store import digest, migrate
from bpe_store.store.merge_log import read_checked
from bpe_store.store.store import Store

VOCAB = 300
FIRST = 1 + 256  # the first merge's id: one special token, the 256 bytes


def merges_of(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute('SELECT rank, "left", "right", token, count FROM merges ORDER BY rank').fetchall()
    finally:
        con.close()


# -- the digest ------------------------------------------------------------------------------------

def test_every_checkpoint_records_the_digest_of_the_merges_it_commits(tmp_path, corpus):
    db = tmp_path / "run.db"
    stopped_run(corpus, db, 400, [SPECIAL], at=60, checkpoint_merges=25)  # stopped, then resumed
    train([corpus], db, 400, [SPECIAL], checkpoint_merges=25)
    merges = merges_of(db)
    con = sqlite3.connect(db)
    rows = con.execute("SELECT phase, merges_done, merge_digest FROM checkpoints ORDER BY id").fetchall()
    con.close()
    assert len(rows) >= 6 and rows[-1][1] == len(merges) == 400 - FIRST
    for phase, done, recorded in rows:
        assert recorded == digest.merge_digest(merges[:done]), (phase, done)
    assert rows[0][2] == digest.EMPTY  # counting: no merge yet
    # the same log as an uninterrupted run's, so the same digest
    other = tmp_path / "other.db"
    train([corpus], other, 400, [SPECIAL])
    assert merges_of(other) == merges


def test_the_digest_is_stable():
    # a digest is recorded in files: it must never change with the platform or the Python version
    assert digest.EMPTY == "c2ce9069faa1e8879ec0fd2be048b479"
    assert digest.merge_digest([(0, 98, 99, 257, 5), (1, 257, 100, 258, 3)]) == digest.merge_digest(
        [(0, 98, 99, 257, 5), (1, 257, 100, 258, 3)])
    assert digest.merge_digest([(0, 98, 99, 257, 5)]) != digest.merge_digest([(0, 99, 98, 257, 5)])


# -- tampering is refused everywhere ----------------------------------------------------------------

#: ``{case: (SQL, what the error says)}``: the changes someone with the sqlite3 shell could make.
TAMPER = {
    "swapped pair at rank 7": ('UPDATE merges SET "left" = "right", "right" = "left" WHERE rank = 7',
                               "merge 7 joins"),
    "edited merge count": ("UPDATE merges SET count = count + 1 WHERE rank = 7", "merge log was changed"),
    "edited count of the last merge": ("UPDATE merges SET count = count + 1"
                                       " WHERE rank = (SELECT max(rank) FROM merges)", "merge log was changed"),
    "empty token": (f"UPDATE vocab SET bytes = x'' WHERE id = {FIRST + 7}", "merge 7 joins"),
    "grown token": (f"UPDATE vocab SET bytes = CAST(bytes || 'x' AS BLOB) WHERE id = {FIRST + 20}", "merge 20 joins"),
    "swapped pair and token": ('UPDATE merges SET "left" = "right", "right" = "left" WHERE rank = 7;'
                               f" UPDATE vocab SET bytes = (SELECT CAST(l.bytes || r.bytes AS BLOB) FROM merges m"
                               ' JOIN vocab l ON l.id = m."left" JOIN vocab r ON r.id = m."right" WHERE m.rank = 7)'
                               f" WHERE id = {FIRST + 7}", "is inconsistent"),  # later merges made of it no longer join
    "token id of other bytes": (f"UPDATE merges SET token = {FIRST + 2} WHERE rank = 7", "not the ids of its tokens"),
    "last merge removed": (f"DELETE FROM merges WHERE rank = {VOCAB - FIRST - 1};"
                           f" DELETE FROM vocab WHERE id = {VOCAB - 1}", "its newest checkpoint recorded"),
    "digest removed": ("UPDATE checkpoints SET merge_digest = NULL", "no digest"),
    "checkpoint merge count edited": ("UPDATE checkpoints SET merges_done = merges_done - 1"
                                      " WHERE id = (SELECT max(id) FROM checkpoints)",
                                      "its newest checkpoint recorded"),
    "special token edited": ("UPDATE vocab SET bytes = CAST('<|other|>' AS BLOB) WHERE id = 0",
                             "not the special token"),
    "byte edited": ("UPDATE vocab SET bytes = x'41' WHERE id = 1", "not the byte token"),
}


@pytest.fixture(scope="module")
def pristine(trained_store) -> Path:
    return trained_store  # VOCAB tokens, [SPECIAL], done; the tests tamper with copies


@pytest.mark.parametrize("case", list(TAMPER))
def test_a_tampered_merge_log_is_refused_everywhere_and_left_as_it_was(tmp_path, pristine, corpus, case):
    statements, what = TAMPER[case]
    db = tampered(tmp_path, pristine, statements)
    before = store_dump(db)
    assert before != store_dump(pristine)  # the change is real
    out = tmp_path / "tok"
    for args in (["train", corpus, "--db", db, "--vocab-size", VOCAB, "--special", SPECIAL, "-q"],
                 ["train", corpus, "--db", db, "--vocab-size", VOCAB + 20, "--special", SPECIAL, "-q"],
                 ["export", db, "--format", "hf", "-o", out],
                 ["encode", db, corpus, "-o", tmp_path / "ids.npy"]):
        r = run(*args)
        assert r.exit_code == 4, (args, r.output)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and what in r.stderr, (args, r.stderr)
    assert not out.exists() and not (tmp_path / "ids.npy").exists()
    with pytest.raises(StoreError, match=what):
        Tokenizer.from_store(db)
    r = run("db", "check", db)
    assert r.exit_code == 4 and "FAILED  merge log" in r.stdout and what in r.stdout, r.output
    # (a merge removed also leaves the run done short of its vocabulary size: the phase check says so)
    assert r.stderr.startswith(f"error: {db}: ") and "of 8 checks failed" in r.stderr
    assert store_dump(db) == before


def test_a_tampered_store_being_merged_is_refused_before_any_write(tmp_path, corpus):
    db = tmp_path / "run.db"
    stopped_run(corpus, db, 400, [SPECIAL], at=60, checkpoint_merges=25)
    for case in ("swapped pair at rank 7", "edited merge count"):
        bad = tampered(tmp_path, db, TAMPER[case][0])
        before = store_dump(bad)
        r = run("train", corpus, "--db", bad, "--vocab-size", 400, "--special", SPECIAL, "-q")
        assert r.exit_code == 4 and TAMPER[case][1] in r.stderr, r.output
        assert store_dump(bad) == before  # not even a sessions row


@pytest.mark.parametrize("row, what", [(FIRST + 7, "merge 7 joins tokens of"), (1 + 65, "vocab id 66 holds"),
                                       (0, "vocab id 0 holds")], ids=["merge", "byte", "special"])
def test_a_300_mb_token_is_refused_before_it_is_read(tmp_path, pristine, corpus, row, what):
    """Refused by its length, which SQLite reads from the record: an export refusing it peaks far
    below the token's 300 MB (it read the token whole first: 613 MB RSS)."""
    import subprocess
    import sys

    from cli_helpers import cli_cmd, env

    db = tampered(tmp_path, pristine, f"UPDATE vocab SET bytes = zeroblob(300000000) WHERE id = {row}")
    r = run("train", corpus, "--db", db, "--vocab-size", VOCAB + 20, "--special", SPECIAL, "-q")
    assert r.exit_code == 4 and what in r.stderr and "holds 300000000 bytes" in r.stderr, r.output
    r = run("db", "check", db)
    assert r.exit_code == 4 and what in r.stdout
    # a child of its own, so its peak RSS is its own: a fresh child of a fresh helper process
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); "
             "print(r.stderr, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, *cli_cmd("export", db, "--format", "hf", "-o", tmp_path / "hf")],
                         capture_output=True, text=True, env=env(), timeout=120)
    code, peak_kib = map(int, out.stdout.split())
    assert code == 4 and what in out.stderr, out.stderr
    assert peak_kib < 200 << 10, peak_kib  # KiB: well under the token


@pytest.mark.parametrize("case", [*TAMPER, "300 MB token"])
def test_the_native_read_leaves_every_tampered_store_to_the_checks(tmp_path, pristine, case):
    """``Tokenizer.from_store``'s native read (``store.merge_log.read_checked``) passes only a store
    as bpe_store writes it: a tampered one goes to the Python checks, which say what is wrong (above);
    a 300 MB token is refused by SQLite before it is read."""
    with Store.open(pristine, readonly=True) as store:
        assert read_checked(store, [SPECIAL]) is not None
    sql = (f"UPDATE vocab SET bytes = zeroblob(300000000) WHERE id = {FIRST + 7}" if case == "300 MB token"
           else TAMPER[case][0])
    with Store.open(tampered(tmp_path, pristine, sql), readonly=True) as store:
        assert read_checked(store, [SPECIAL]) is None


# -- db check --------------------------------------------------------------------------------------

def test_db_check_passes_a_good_store_and_says_what_it_checked(pristine):
    r = run("db", "check", pristine)
    assert r.exit_code == 0 and r.stderr == "", r.output
    lines = r.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["ok"] * 8
    assert [ln.split()[1] for ln in lines] == ["open", "schema", "run", "inputs", "phase", "merge", "words",
                                               "history"]
    assert "digest matches the newest checkpoint's" in r.stdout
    r = run("db", "check", pristine, "--deep", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["ok"] and [c["check"] for c in report["checks"]][-2:] == ["sqlite", "words"]
    assert all(c["ok"] and not c["skipped"] for c in report["checks"])


def test_db_check_of_a_store_being_trained_and_of_one_counting(tmp_path, corpus):
    db = tmp_path / "run.db"
    stopped_run(corpus, db, 400, [SPECIAL], at=60, checkpoint_merges=25)
    r = run("db", "check", db, "--deep")
    assert r.exit_code == 0 and "ok      words" in r.stdout, r.output


def test_db_check_names_every_problem(tmp_path, pristine):
    db = tampered(tmp_path, pristine, "UPDATE merges SET count = 1 WHERE rank = 3",
                  "UPDATE sessions SET argv = '[not json'", "UPDATE checkpoints SET at = 'yesterday' WHERE id = 1",
                  "UPDATE chunks SET \"end\" = -1")
    r = run("db", "check", db)
    assert r.exit_code == 4
    failed = [ln.split()[1] for ln in r.stdout.splitlines() if ln.startswith("FAILED")]
    assert failed == ["inputs", "merge", "history"], r.stdout
    assert "argv '[not json' is not a JSON list" in r.stdout and "at 'yesterday' is not a date" in r.stdout
    assert r.stderr == f"error: {db}: 3 of 8 checks failed: inputs (and 2 more)\n"


@pytest.mark.parametrize("content", [b"", b"not a database at all, just some text" * 3])
def test_db_check_of_something_that_is_not_a_store(tmp_path, content):
    p = tmp_path / "x.db"
    p.write_bytes(content)
    r = run("db", "check", p)
    assert r.exit_code == 4 and r.stdout.startswith("FAILED  open"), r.output
    assert run("db", "check", tmp_path / "missing.db").exit_code == 4


# -- stores from before the digest -------------------------------------------------------------------

def test_an_upgraded_store_gets_the_digest_of_its_log_and_is_checked_from_then_on(tmp_path):
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v0_1_0.db", db)
    r = run("db", "check", db)  # an old schema: said, and what needs the new one is skipped
    assert r.exit_code == 4 and "FAILED  schema" in r.stdout and "skip    history" in r.stdout, r.output
    assert "(no digest: an older schema)" in r.stdout
    assert run("db", "upgrade", db).exit_code == 0
    assert run("db", "check", db).exit_code == 0
    con = sqlite3.connect(db)
    (recorded,) = con.execute("SELECT merge_digest FROM checkpoints ORDER BY id DESC LIMIT 1").fetchone()
    con.close()
    assert recorded == digest.merge_digest(merges_of(db))
    bad = tampered(tmp_path, db, "UPDATE merges SET count = count + 1 WHERE rank = 7")
    with pytest.raises(StoreError, match="merge log was changed"):
        Tokenizer.from_store(bad)


def test_a_store_at_the_previous_revision_is_read_without_a_digest_and_upgraded_with_one(tmp_path, pristine):
    db = tmp_path / "run.db"
    shutil.copy(pristine, db)
    with Store.open(db) as store:
        command.downgrade(migrate.alembic_config(store.conn), "v0_3_0_next_pairs")
        store.conn.commit()
    assert run("status", db).exit_code == 0  # read as it is (status reads older schemas)
    assert run("export", db, "--format", "hf", "-o", tmp_path / "tok").exit_code == 4  # asks for the upgrade
    assert run("db", "upgrade", db).exit_code == 0
    assert run("db", "check", db).exit_code == 0
    assert Tokenizer.from_store(db).encode("the cat") == Tokenizer.from_store(pristine).encode("the cat")


@pytest.mark.parametrize("case", [None, *TAMPER])
def test_the_whole_array_check_refuses_and_accepts_as_the_merge_by_merge_one(tmp_path, pristine, monkeypatch, case):
    """With the merges' ids tested as whole arrays (``result._ARRAY_CHECK``: large stores), a tampered
    log is refused with the same message (the merge-by-merge loop says which) and an intact one is
    read as before."""
    from bpe_store.store import result

    db = pristine if case is None else tampered(tmp_path, pristine, TAMPER[case][0])
    want = None if case is not None else Tokenizer.from_store(pristine)
    monkeypatch.setattr(result, "_ARRAY_CHECK", 1)
    if case is None:
        tok = Tokenizer.from_store(db)
        assert (tok.vocab, tok.merges) == (want.vocab, want.merges)
    else:
        with pytest.raises(StoreError, match=TAMPER[case][1]):
            Tokenizer.from_store(db)
