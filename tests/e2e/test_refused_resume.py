"""A refused resume writes nothing: the store file is byte-identical afterwards (hashed before and
after), whether it is refused before training starts (other parameters or inputs, a damaged store)
or while counting (another stream given again, a bad record found again). A session that changed
nothing leaves no ``sessions`` row; one that wrote leaves its row with its outcome."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, cli_cmd, env, run
from conftest import FIXTURES

from bpe_store import ResumeMismatch, StoreError, train, train_from_iterator

EOT = "<|endoftext|>"
STREAM = dict(vocab_size=420, special_tokens=[EOT], chunk_size=2_000, count_flush_seconds=0.0, workers=2)


def file_state(db: Path) -> tuple[str, ...]:
    """The SHA-256 of the store file and of what its WAL or journal holds (an empty one, which
    SQLite may leave or remove as connections close, holds nothing)."""
    def digest(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() and p.stat().st_size else "-"

    return tuple(digest(Path(f"{db}{s}")) for s in ("", "-wal", "-journal"))


def sessions(db: Path) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT id, outcome FROM sessions ORDER BY id").fetchall()
    finally:
        con.close()


def counted_bytes(db: Path) -> int:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT size FROM sources").fetchone()[0]
    except sqlite3.Error:
        return 0  # not created yet
    finally:
        con.close()


def docs() -> list[str]:
    return (FIXTURES / "enwiki-1M.txt").read_text(encoding="utf-8").split(EOT)[:150]


def stopped_iterator_run(db: Path, documents: list[str], after: int) -> None:
    import threading

    stop = threading.Event()

    def stopping_after():
        for i, d in enumerate(documents):
            if i == after:
                stop.set()
            yield d

    with pytest.raises(Exception, match="holds its first"):
        train_from_iterator(stopping_after(), db, stop=stop, **STREAM)


def test_a_refused_iterable_resume_leaves_the_file_byte_identical(tmp_path):
    db = tmp_path / "run.db"
    documents = docs()
    stopped_iterator_run(db, documents, 70)
    before, history = file_state(db), sessions(db)
    assert history == [(1, "interrupted")]
    for other in (["other"] + documents[1:], documents[:10]):
        with pytest.raises(ResumeMismatch, match="not the one"):
            train_from_iterator(iter(other), db, **STREAM)
        assert file_state(db) == before  # the old code added a "failed" sessions row each time
    train_from_iterator(iter(documents), db, **STREAM)  # the same documents: resumed
    assert [o for _, o in sessions(db)] == ["interrupted", "done"]


@pytest.mark.slow
def test_a_refused_stdin_resume_leaves_the_file_byte_identical(tmp_path):
    db = tmp_path / "run.db"
    data = EOT.join(docs()).encode("utf-8")
    args = cli_cmd("train", "-", "--db", db, "--vocab-size", 420, "--special", EOT, "--chunk-size", 2000, "-q")
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env())
    proc.stdin.write(data[: len(data) // 2])
    proc.stdin.flush()
    deadline = 60
    import time

    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline:  # wait until a flush committed part of the stream
        if db.exists() and counted_bytes(db) > 0:
            break
        time.sleep(0.2)
    proc.send_signal(2)
    proc.stdin.close()
    proc.wait(timeout=60)
    before = file_state(db)
    r = subprocess.run(args, input=b"another stream" + data, capture_output=True, env=env(), timeout=120)
    assert r.returncode == 3, r.stderr
    assert file_state(db) == before


def test_rerunning_a_bad_record_run_leaves_no_store(tmp_path):
    good = b"".join(json.dumps({"text": d}).encode() + b"\n" for d in docs()[:40])
    path = tmp_path / "bad.jsonl"
    path.write_bytes(good + b'{"text": 12}\n')
    db = tmp_path / "run.db"
    first = run("train", path, "--db", db, "--vocab-size", 300, "-q")
    assert first.exit_code == 2 and "line 41" in first.stderr, first.output
    # a first run refused by its input leaves no store (docs/reliability.md), nor does a rerun
    assert file_state(db) == ("-", "-", "-") and not db.exists()
    for _ in range(2):
        again = run("train", path, "--db", db, "--vocab-size", 300, "-q")
        assert again.exit_code == 2 and again.stderr == first.stderr
        assert file_state(db) == ("-", "-", "-") and not db.exists()


def test_refused_resumes_before_training_leave_the_file_byte_identical(tmp_path, trained_store, corpus):
    db = tmp_path / "run.db"
    shutil.copy(trained_store, db)
    before = file_state(db)
    with pytest.raises(ResumeMismatch):
        train([corpus], db, 320, ["<|other|>"])
    with pytest.raises(ResumeMismatch):
        train([corpus], db, 290, [SPECIAL])  # smaller
    assert run("train", corpus, "--db", db, "--vocab-size", 320, "--special", SPECIAL, "--min-frequency", 2,
               "-q").exit_code == 3
    assert file_state(db) == before
    # the same command on a finished store: nothing to do, nothing written
    assert run("train", corpus, "--db", db, "--vocab-size", 300, "--special", SPECIAL, "-q").exit_code == 0
    assert file_state(db) == before
    con = sqlite3.connect(db)
    con.execute("UPDATE merges SET count = count + 1 WHERE rank = 3")
    con.commit()
    con.close()
    before = file_state(db)
    with pytest.raises(StoreError):
        train([corpus], db, 320, [SPECIAL])
    assert file_state(db) == before
