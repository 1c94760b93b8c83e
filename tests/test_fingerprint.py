"""Input fingerprints: what a store records of its inputs, and what a resume or a running count
does when an input changed.

New stores fingerprint files with ``xxh3_128_8MiB`` in the read that checks them; stores made with
SHA-256 keep resuming against their SHA-256; an input that changes while it is being counted is
refused before its counts are committed; a resume over counted inputs reads none of them.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import sqlite3
import threading
from pathlib import Path

import pytest
from conftest import SMALL_TEXT, store_dump

from bpe_store import InputError, Interrupted, ResumeMismatch, train
from bpe_store.counting.fingerprint import BLOCK, DEFAULT_HASH, digest_file

SPECIAL = ["<|endoftext|>"]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    p = tmp_path / "corpus.txt"
    p.write_bytes(SMALL_TEXT.read_bytes()[:60_000])
    return p


def _sources(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT path, size, mtime_ns, digest, hash FROM sources ORDER BY id").fetchall()


def _stop_after_units(n: int, **kwargs):
    """``train`` keyword arguments that stop counting (as Ctrl-C does) after ``n`` units."""
    stop = threading.Event()
    seen = [0]

    def progress(event: dict) -> None:
        if event["stage"] == "checkpoint" and event.get("phase") == "counting":
            seen[0] += 1
            if seen[0] >= n:
                stop.set()

    return dict(stop=stop, progress=progress, count_flush_seconds=0, **kwargs)


def test_new_store_records_xxh3_of_its_blocks(corpus, tmp_path):
    db = tmp_path / "x.db"
    train([corpus], db, 300, SPECIAL)
    [(path, size, _, digest, hash_name)] = _sources(db)
    assert (path, size, hash_name) == (str(corpus.resolve()), corpus.stat().st_size, DEFAULT_HASH)
    import xxhash

    data = corpus.read_bytes()
    assert len(data) < BLOCK  # one block: the digest of its digest and the size
    assert digest == xxhash.xxh3_128_hexdigest(xxhash.xxh3_128_digest(data) + len(data).to_bytes(8, "little"))


def test_fingerprint_of_many_blocks_does_not_depend_on_threads(tmp_path):
    p = tmp_path / "f.txt"
    p.write_bytes(("héllo wörld ✓ 𝄞 " * 5000).encode())
    size = p.stat().st_size
    with open(p, "rb") as f:
        got = {digest_file(p, f.fileno(), size, DEFAULT_HASH, True, block=4093, threads=t) for t in (1, 2, 4, 7)}
    assert len(got) == 1 and None not in got


def _as_sha256_store(db: Path) -> None:
    """Make ``db``'s inputs look as a store made before ``xxh3_128_8MiB`` records them."""
    with sqlite3.connect(db) as con:
        for sid, path in con.execute("SELECT id, path FROM sources").fetchall():
            con.execute("UPDATE sources SET digest = ?, hash = 'sha256' WHERE id = ?",
                        (hashlib.sha256(Path(path).read_bytes()).hexdigest(), sid))


def test_sha256_store_resumes_and_refuses_a_changed_input(corpus, tmp_path):
    whole = train([corpus], tmp_path / "whole.db", 300, SPECIAL, chunk_size=8_000)
    db = tmp_path / "old.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, **_stop_after_units(2))
    _as_sha256_store(db)
    st = corpus.stat()
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))  # touched: digested again
    r = train([corpus], db, 300, SPECIAL, chunk_size=8_000)
    assert (r.merges, r.merge_counts) == (whole.merges, whole.merge_counts)
    assert _sources(db)[0][4] == "sha256"  # the store keeps its hash

    data = bytearray(corpus.read_bytes())
    data[500:505] = b"XXXXX"
    corpus.write_bytes(bytes(data))
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 9_000_000_000))
    before = store_dump(db)
    with pytest.raises(ResumeMismatch, match=r"changed content \(sha256 "):
        train([corpus], db, 310, SPECIAL, chunk_size=8_000)
    assert store_dump(db) == before


@pytest.mark.parametrize("change", ["grow", "same size"])
def test_input_changed_while_counting_is_refused_before_its_counts_commit(corpus, tmp_path, change):
    db = tmp_path / "c.db"
    state = {"done": False}

    def progress(event: dict) -> None:
        # after the first unit's flush committed, change the file under the running count
        if event["stage"] == "checkpoint" and event.get("phase") == "counting" and not state["done"]:
            state["done"] = True
            if change == "grow":
                with open(corpus, "ab") as f:
                    f.write(b" more words at the end")
            else:
                data = bytearray(corpus.read_bytes())
                data[-200:-195] = b"XXXXX"
                corpus.write_bytes(bytes(data))
                st = corpus.stat()
                os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # whatever the clock's tick

    with pytest.raises(InputError, match="changed while training") as info:
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, count_flush_seconds=0, progress=progress)
    assert "\n" not in str(info.value)
    with sqlite3.connect(db) as con:
        counted = con.execute("SELECT count(*) FROM chunks WHERE counted = 1").fetchone()[0]
        total = con.execute("SELECT count(*) FROM chunks").fetchone()[0]
    assert 1 <= counted < total  # what committed before the change, and nothing after it
    # and a resume refuses the changed input
    with pytest.raises(ResumeMismatch, match="changed size" if change == "grow" else "changed content"):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000)


def test_touched_input_resumes_mid_count(corpus, tmp_path):
    """A resume that finds an input's content the same goes on counting it, checking it against
    its time now, not the store's (which the resume does not write: a refused resume changes
    nothing)."""
    whole = train([corpus], tmp_path / "whole.db", 300, SPECIAL, chunk_size=8_000)
    db = tmp_path / "t.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, **_stop_after_units(2))
    os.utime(corpus, ns=(0, 1_000_000_000))
    r = train([corpus], db, 300, SPECIAL, chunk_size=8_000, count_flush_seconds=0)
    assert (r.merges, r.merge_counts) == (whole.merges, whole.merge_counts)


def test_resume_reads_none_of_the_counted_shards(tmp_path, monkeypatch):
    text = SMALL_TEXT.read_bytes()[:40_000]
    shards = []
    for i in range(40):
        p = tmp_path / f"shard-{i:02d}.txt"
        p.write_bytes(text[i * 1000:(i + 1) * 1000])
        shards.append(p)
    whole = train(shards, tmp_path / "whole.db", 300, SPECIAL)
    db = tmp_path / "s.db"
    with pytest.raises(Interrupted):
        train(shards, db, 300, SPECIAL, **_stop_after_units(15, workers=1))
    with sqlite3.connect(db) as con:
        counted = {Path(p) for (p,) in con.execute(
            "SELECT s.path FROM sources s WHERE NOT EXISTS"
            " (SELECT 1 FROM chunks c WHERE c.source_id = s.id AND c.counted = 0)")}
    assert 10 <= len(counted) < len(shards)

    opened: list[str] = []
    real_os_open, real_open = os.open, builtins.open

    def os_open(path, *a, **k):
        opened.append(os.fsdecode(path))
        return real_os_open(path, *a, **k)

    def py_open(file, *a, **k):
        if isinstance(file, (str, bytes, os.PathLike)):
            opened.append(os.fsdecode(file))
        return real_open(file, *a, **k)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", py_open)
    r = train(shards, db, 300, SPECIAL, workers=1)
    monkeypatch.undo()
    assert (r.merges, r.merge_counts) == (whole.merges, whole.merge_counts)
    read = {Path(p).resolve() for p in opened} & {p.resolve() for p in shards}
    assert read and not read & {p.resolve() for p in counted}


def test_native_utf8_check_equals_decode_around_vector_blocks():
    """The native check (32 bytes at a time where the CPU has AVX2) judges every 2-byte string,
    and 3-byte ones after each kind of lead byte, as the strict decoder does, wherever they sit
    against its 32-byte blocks (the last block is padded, so the end of the input is one too)."""
    from bpe_store.counting.native import _native_utf8_valid

    if _native_utf8_valid is None:
        pytest.skip("native core not built")

    def decodes(b: bytes) -> bool:
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    wrong = []
    for before, after in ((0, 40), (30, 33), (31, 1), (62, 0)):
        pad_a, pad_b = b"x" * before, b"y" * after
        for a in range(256):
            for b in range(256):
                s = pad_a + bytes([a, b]) + pad_b
                if _native_utf8_valid(s) != decodes(s):
                    wrong.append(s)
        for a in (0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF3, 0xF4, 0xF5):
            for b in range(0x80, 0xC0):
                for c in range(256):
                    s = pad_a + bytes([a, b, c]) + pad_b
                    if _native_utf8_valid(s) != decodes(s):
                        wrong.append(s)
    assert not wrong, wrong[:5]


def test_downgrade_keeps_an_xxh3_digest_that_no_sha256_equals(corpus, tmp_path):
    from alembic import command

    from bpe_store import Store
    from bpe_store.store import migrate

    db = tmp_path / "d.db"
    train([corpus], db, 300, SPECIAL)
    [(_, _, _, digest, _)] = _sources(db)
    with Store.open(db) as store:
        command.downgrade(migrate.alembic_config(store.conn), "v0_3_0_next_pairs")
        store.conn.commit()
        assert store.sql("SELECT sha256 FROM sources").fetchall() == [(f"{DEFAULT_HASH}:{digest}",)]
        command.upgrade(migrate.alembic_config(store.conn), "head")
        store.conn.commit()
    assert _sources(db)[0][3:] == (f"{DEFAULT_HASH}:{digest}", "sha256")  # refused if touched, as before
