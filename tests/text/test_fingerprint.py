"""Input fingerprints: what a store records of its inputs, and what a resume or a running count
does when an input changed.

New stores fingerprint uncompressed text unit by unit (``xxh3_128_units``) in the read that counts
it, and read nothing of it before counting; stores made with ``xxh3_128_8MiB`` or SHA-256 keep
resuming against their fingerprints; an input that changes while it is being counted is refused
before its counts are committed; a resume over counted inputs reads none of them.
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
from bpe_store.text.fingerprint import DEFAULT_HASH, UNITS_HASH, digest_file

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


def _units_fingerprint(data: bytes, units: list[tuple[int, int]]) -> str:
    """``xxh3_128_units`` as its definition says (bpe_store/text/fingerprint.py)."""
    import xxhash

    total = 0
    for a, b in units:
        u = xxhash.xxh3_128_digest(data[a:b])
        total += int.from_bytes(xxhash.xxh3_128_digest(u + a.to_bytes(8, "little") + b.to_bytes(8, "little")), "big")
    return f"{total % (1 << 128):032x}"


def _units(db: Path, counted_only: bool = False) -> list[tuple[int, int]]:
    with sqlite3.connect(db) as con:
        return con.execute('SELECT start, "end" FROM chunks' + (" WHERE counted = 1" if counted_only else "")
                           + " ORDER BY start").fetchall()


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("pattern", ["gpt2", r"\S+|\s+"])  # the native counter, and the regex path
def test_new_store_records_xxh3_of_its_units_as_counted(corpus, tmp_path, workers, pattern):
    db = tmp_path / "x.db"
    train([corpus], db, 300, SPECIAL, chunk_size=8_000, workers=workers, pattern=pattern)
    [(path, size, _, digest, hash_name)] = _sources(db)
    assert (path, size, hash_name) == (str(corpus.resolve()), corpus.stat().st_size, UNITS_HASH)
    units = _units(db)
    assert len(units) > 4 and units[0][0] == 0 and units[-1][1] == size
    assert digest == _units_fingerprint(corpus.read_bytes(), units)


def test_mid_count_fingerprint_covers_exactly_the_counted_units(corpus, tmp_path):
    db = tmp_path / "m.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, **_stop_after_units(3, workers=1))
    counted = _units(db, counted_only=True)
    assert 1 <= len(counted) < len(_units(db))
    assert _sources(db)[0][3] == _units_fingerprint(corpus.read_bytes(), counted)


def test_unit_fingerprint_from_the_counting_read_is_xxh3_128(tmp_path):
    """The native read that counts a unit digests it piece by piece (256 KiB): the same XXH3-128
    as ``xxhash`` of the whole range, wherever the range starts and however long it is; a range
    that is not UTF-8 (counted through a bytes object, ``--invalid-utf8 replace``) too."""
    import xxhash

    from bpe_store.counting.count import RangeTask, count_chunk_native, count_chunk_task
    from bpe_store.text.pretokenize import PretokenSpec

    data = ("héllo wörld ✓ 𝄞 " * 40_000).encode() + b"plain ascii text " * 60_000  # ~1.9 MB
    p = tmp_path / "f.txt"
    p.write_bytes(data)
    at = len(data) - (800 << 10)  # ranges in the ASCII part may start and end anywhere
    for a, b in [(0, len(data)), (at + 1, at + 1 + (256 << 10)), (at + 7, at + 7 + (256 << 10) + 1),
                 (at + 1000, at + 1000 + (512 << 10) - 3), (0, 1), (0, 0)]:
        got = count_chunk_native(str(p), a, b, SPECIAL, "strict").digest
        assert got == xxhash.xxh3_128_digest(data[a:b]), (a, b)
        assert count_chunk_task(RangeTask(0, str(p), a, b, PretokenSpec(tuple(SPECIAL), r"\S+|\s+")))[3] == got
    bad = tmp_path / "bad.txt"
    bad.write_bytes(data[:5000] + b"\xff" + data[:5000])
    got = count_chunk_native(str(bad), 0, 10_001, SPECIAL, "replace").digest
    assert got == xxhash.xxh3_128_digest(bad.read_bytes())


def _read_chars() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar")


def test_text_is_read_once_planning_reads_none_of_it(tmp_path):
    """No second pass: training reads an uncompressed text input once, in counting (planning reads
    only a few KB around each cut point), where it was read whole to be fingerprinted and checked
    first. ``rchar``: bytes this process read through any read call (the store's own are few here)."""
    if not Path("/proc/self/io").exists():
        pytest.skip("needs /proc/self/io")
    p = tmp_path / "big.txt"
    p.write_bytes(SMALL_TEXT.read_bytes()[:50_000] * 120)  # 6 MB, few distinct words: a small store
    size = p.stat().st_size
    warm = tmp_path / "warm.txt"
    warm.write_bytes(SMALL_TEXT.read_bytes()[:5_000])
    train([warm], tmp_path / "warm.db", 300, SPECIAL, workers=1)  # imports (their files) read before
    events: list[tuple[str, int]] = []
    before = _read_chars()
    train([p], tmp_path / "o.db", 300, SPECIAL, workers=1, chunk_size=1 << 20,
          progress=lambda e: events.append((e["stage"], _read_chars())))
    read = _read_chars() - before
    planned = next(n for stage, n in events if stage == "counting") - before
    assert planned < 0.05 * size, planned
    assert read < 1.3 * size, read


def test_fingerprint_of_many_blocks_does_not_depend_on_threads(tmp_path):
    p = tmp_path / "f.txt"
    p.write_bytes(("héllo wörld ✓ 𝄞 " * 5000).encode())
    size = p.stat().st_size
    with open(p, "rb") as f:
        got = {digest_file(p, f.fileno(), size, DEFAULT_HASH, True, block=4093, threads=t) for t in (1, 2, 4, 7)}
    assert len(got) == 1 and None not in got


def _as_old_store(db: Path, hash_name: str) -> None:
    """Make ``db``'s inputs look as a store made before ``xxh3_128_units`` records them: the whole
    file's fingerprint, by ``hash_name``, taken when it was planned."""
    with sqlite3.connect(db) as con:
        for sid, path in con.execute("SELECT id, path FROM sources").fetchall():
            data = Path(path).read_bytes()
            if hash_name == "sha256":
                digest = hashlib.sha256(data).hexdigest()
            else:
                with open(path, "rb") as f:
                    digest = digest_file(path, f.fileno(), len(data), hash_name)
            con.execute("UPDATE sources SET digest = ?, hash = ? WHERE id = ?", (digest, hash_name, sid))


@pytest.mark.parametrize("hash_name", ["sha256", DEFAULT_HASH])
def test_old_store_resumes_and_refuses_a_changed_input(corpus, tmp_path, hash_name):
    whole = train([corpus], tmp_path / "whole.db", 300, SPECIAL, chunk_size=8_000)
    db = tmp_path / "old.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, **_stop_after_units(2))
    _as_old_store(db, hash_name)
    st = corpus.stat()
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))  # touched: digested again
    r = train([corpus], db, 300, SPECIAL, chunk_size=8_000)
    assert (r.merges, r.merge_counts) == (whole.merges, whole.merge_counts)
    assert _sources(db)[0][4] == hash_name  # the store keeps its hash, and its fingerprint
    with open(corpus, "rb") as f:
        want = digest_file(corpus, f.fileno(), st.st_size, hash_name)
    assert _sources(db)[0][3] == want

    data = bytearray(corpus.read_bytes())
    data[500:505] = b"XXXXX"
    corpus.write_bytes(bytes(data))
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 9_000_000_000))
    before = store_dump(db)
    with pytest.raises(ResumeMismatch, match=rf"changed content \({hash_name} "):
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
    assert state["done"]  # a unit had committed: a first run so refused leaves no store all the same
    assert not db.exists()
    # and the same command then trains the file as it is now
    assert train([corpus], db, 300, SPECIAL, chunk_size=8_000).merges


def test_touched_input_mid_count_is_refused_until_its_time_is_back(corpus, tmp_path):
    """Mid-count, the store has fingerprints of the counted units only: a resume whose input's
    time moved digests those again, but cannot know whether the rest changed, so it refuses,
    saying how to go on, and writes nothing; with the time given back it resumes."""
    whole = train([corpus], tmp_path / "whole.db", 300, SPECIAL, chunk_size=8_000)
    db = tmp_path / "t.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, **_stop_after_units(2, workers=1))
    assert 1 <= len(_units(db, counted_only=True)) < len(_units(db))
    st = corpus.stat()
    os.utime(corpus, ns=(0, 1_000_000_000))
    before = store_dump(db)
    with pytest.raises(ResumeMismatch, match="units are not counted yet") as info:
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, count_flush_seconds=0)
    sec, ns = divmod(st.st_mtime_ns, 10**9)
    assert f"touch -d @{sec}.{ns:09d} '{corpus.resolve()}'" in str(info.value)
    assert store_dump(db) == before
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = train([corpus], db, 300, SPECIAL, chunk_size=8_000, count_flush_seconds=0)
    assert (r.merges, r.merge_counts) == (whole.merges, whole.merge_counts)


def test_changed_counted_unit_mid_count_is_refused_as_changed_content(corpus, tmp_path):
    db = tmp_path / "c.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, **_stop_after_units(2, workers=1))
    (a, b), *_ = _units(db, counted_only=True)
    data = bytearray(corpus.read_bytes())
    data[a + 10:a + 15] = b"XXXXX"
    corpus.write_bytes(bytes(data))
    before = store_dump(db)
    with pytest.raises(ResumeMismatch, match=r"changed content \(xxh3_128_units "):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000)
    assert store_dump(db) == before


def test_touched_input_resumes_once_counted_and_refuses_a_changed_one(corpus, tmp_path):
    """Past counting, every unit has its fingerprint: a touched input is digested again (unit by
    unit) and resumes when its content is the same; other content is refused."""
    db = tmp_path / "g.db"
    train([corpus], db, 300, SPECIAL, chunk_size=8_000)
    bigger = train([corpus], tmp_path / "big.db", 320, SPECIAL, chunk_size=8_000)
    st = corpus.stat()
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    r = train([corpus], db, 320, SPECIAL, chunk_size=8_000)  # grow: a resume of a finished store
    assert (r.merges, r.merge_counts) == (bigger.merges, bigger.merge_counts)
    data = bytearray(corpus.read_bytes())
    data[-300:-295] = b"XXXXX"
    corpus.write_bytes(bytes(data))
    before = store_dump(db)
    with pytest.raises(ResumeMismatch, match=r"changed content \(xxh3_128_units "):
        train([corpus], db, 330, SPECIAL, chunk_size=8_000)
    assert store_dump(db) == before


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
    from bpe_store.native import native_utf8_valid

    if native_utf8_valid is None:
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
                if native_utf8_valid(s) != decodes(s):
                    wrong.append(s)
        for a in (0xC2, 0xDF, 0xE0, 0xE1, 0xED, 0xEF, 0xF0, 0xF3, 0xF4, 0xF5):
            for b in range(0x80, 0xC0):
                for c in range(256):
                    s = pad_a + bytes([a, b, c]) + pad_b
                    if native_utf8_valid(s) != decodes(s):
                        wrong.append(s)
    assert not wrong, wrong[:5]


def test_downgrade_keeps_an_xxh3_digest_that_no_sha256_equals(corpus, tmp_path):
    from alembic import command

    from bpe_store import Store
    from bpe_store.store import migrate

    db = tmp_path / "d.db"
    train([corpus], db, 300, SPECIAL)
    [(_, _, _, digest, hash_name)] = _sources(db)
    assert hash_name == UNITS_HASH
    with Store.open(db) as store:
        command.downgrade(migrate.alembic_config(store.conn), "v0_3_0_next_pairs")
        store.conn.commit()
        assert store.sql("SELECT sha256 FROM sources").fetchall() == [(f"{UNITS_HASH}:{digest}",)]
        command.upgrade(migrate.alembic_config(store.conn), "head")
        store.conn.commit()
    assert _sources(db)[0][3:] == (f"{UNITS_HASH}:{digest}", "sha256")  # refused if touched, as before


def _edit_keeping_time(path: Path, at: int) -> None:
    """Change one byte of ``path`` at ``at`` (size kept) and give the file back its times."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[at] = ord("Q") if data[at] != ord("Q") else ord("R")
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_verify_inputs_finds_a_counted_byte_changed_with_its_time_restored(corpus, tmp_path):
    """A changed counted byte whose file keeps its size and time passes the stat check (documented);
    ``verify_inputs`` reads the counted units again and refuses it, writing nothing."""
    db = tmp_path / "v.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, **_stop_after_units(2, workers=1))
    (a, _b), *_ = _units(db, counted_only=True)
    clean = corpus.read_bytes()
    _edit_keeping_time(corpus, a + 10)
    before = store_dump(db)
    with pytest.raises(ResumeMismatch, match=r"changed content \(xxh3_128_units "):
        train([corpus], db, 300, SPECIAL, chunk_size=8_000, verify_inputs=True)
    assert store_dump(db) == before
    st = corpus.stat()
    corpus.write_bytes(clean)  # the same content again, the time kept: verified, and it resumes
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = train([corpus], db, 300, SPECIAL, chunk_size=8_000, verify_inputs=True)
    assert r.merges == train([corpus], tmp_path / "w.db", 300, SPECIAL).merges


def test_verify_inputs_on_a_finished_store_and_a_jsonl_input(tmp_path):
    import json

    docs = SMALL_TEXT.read_text(encoding="utf-8")[:30_000].split("\n\n")
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    db = tmp_path / "j.db"
    train([jsonl], db, 300, SPECIAL)
    train([jsonl], db, 310, SPECIAL, verify_inputs=True)  # unchanged: grows
    _edit_keeping_time(jsonl, jsonl.stat().st_size // 2)
    train([jsonl], db, 310, SPECIAL)  # without the option, the stat check alone (documented)
    before = store_dump(db)
    with pytest.raises(ResumeMismatch, match="changed content"):
        train([jsonl], db, 320, SPECIAL, verify_inputs=True)
    assert store_dump(db) == before


def test_verify_inputs_on_the_command_line_is_exit_3(corpus, tmp_path, capsys):
    from cli_helpers import one_error_line, run_main

    db = tmp_path / "cli.db"
    train([corpus], db, 300, SPECIAL)
    _edit_keeping_time(corpus, 100)
    code, err = run_main(["train", corpus, "--db", db, "--vocab-size", "300", "--special", SPECIAL[0],
                          "--verify-inputs"], capsys)
    assert code == 3 and "changed content" in err and one_error_line(err), err
