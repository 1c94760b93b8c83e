"""Bad input gets a clear one-line error, and the store is left exactly as it was.

Missing, unreadable, empty or invalid-UTF-8 inputs; bad parameters; a resume with other
parameters or changed inputs; foreign, corrupt, newer or locked databases; a read-only location
and a full disk (real tmpfs mounts where the machine allows them).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SMALL_TEXT, shared_file, stopped_run, store_dump

from bpe_store import InputError, ResumeMismatch, Store, StoreError, train
from bpe_store.cli.main import main

SPECIAL = ["<|endoftext|>"]



def file_hash(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    p = tmp_path / "corpus.txt"
    p.write_bytes(SMALL_TEXT.read_bytes()[:20_000])
    return p


@pytest.fixture
def trained(tmp_path: Path, corpus: Path) -> Path:
    db = tmp_path / "trained.db"
    train([corpus], db, 300, SPECIAL)
    return db


def _raises(exc_type, match: str, *args, **kwargs):
    with pytest.raises(exc_type, match=match) as info:
        train(*args, **kwargs)
    assert "\n" not in str(info.value)
    return info.value


# -- inputs -------------------------------------------------------------------------------------

def test_missing_input_creates_nothing(tmp_path, db_path):
    _raises(InputError, "no such file", [tmp_path / "nope.txt"], db_path, 300, SPECIAL)
    assert not db_path.exists()


def test_directory_input(tmp_path, db_path):
    _raises(InputError, "is a directory", [tmp_path], db_path, 300, SPECIAL)
    assert not db_path.exists()


def _cli_train_sub(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """``bpe-store train ARGS`` in a subprocess: a hang fails the test instead of blocking it."""
    return subprocess.run([sys.executable, "-m", "bpe_store", "train", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_fifo_input_is_refused_at_once(tmp_path, db_path):
    # before: open() blocked forever waiting for a writer (and swallowed the first Ctrl-C)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = _cli_train_sub(fifo, "--db", db_path, "--vocab-size", "300", "--quiet")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert "FIFO" in r.stderr and "not a regular file" in r.stderr
    assert not db_path.exists()


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_device_input_is_refused(db_path, device):
    # before: /dev/zero (size 0 but endless) was called "empty"
    if not os.path.exists(device):
        pytest.skip(f"{device} does not exist here")
    _raises(InputError, "is a character device, not a regular file", [device], db_path, 300, SPECIAL)
    assert not db_path.exists()


def test_input_swapped_for_a_fifo_before_counting_is_refused(tmp_path, corpus, db_path, monkeypatch):
    # the file is checked when the run starts; if a FIFO replaces it before a chunk is read,
    # reading must not block either
    from bpe_store.counting import planning

    real = planning.plan_chunks

    def swap(path, *a, **kw):
        chunks = real(path, *a, **kw)
        Path(path).unlink()
        os.mkfifo(path)
        return chunks

    monkeypatch.setattr(planning, "plan_chunks", swap)  # plan_units calls it
    _raises(InputError, "FIFO", [corpus], db_path, 300, SPECIAL)


def test_unreadable_input(tmp_path, db_path, corpus):
    corpus.chmod(0)
    try:
        try:
            corpus.read_bytes()
            pytest.skip("running as a user who can read a mode-000 file (root)")
        except PermissionError:
            pass
        _raises(InputError, "cannot read", [corpus], db_path, 300, SPECIAL)
        assert not db_path.exists()
    finally:
        corpus.chmod(0o644)


def test_unreadable_input_message(tmp_path, db_path, corpus, monkeypatch):
    """The same path as above, forced even for root: open() refusing the file."""
    real_open = os.open

    def deny(path, *a, **k):
        if Path(path) == corpus:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *a, **k)

    monkeypatch.setattr(os, "open", deny)
    _raises(InputError, "cannot read .*Permission denied", [corpus], db_path, 300, SPECIAL)
    assert not db_path.exists()


def test_empty_corpus(tmp_path, db_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    _raises(InputError, "is empty", [empty], db_path, 300, SPECIAL)
    assert not db_path.exists()


def test_no_inputs(db_path):
    _raises(InputError, "no input", [], db_path, 300, SPECIAL)


def test_invalid_utf8_says_where(tmp_path, db_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"hello\nworld\n" + b"ok \xff\xfe more\n" * 3)
    e = _raises(InputError, r"invalid UTF-8 at byte 15 \(line 3\)", [bad], db_path, 300, SPECIAL)
    assert "--invalid-utf8 replace" in str(e)
    # found as it is counted (text is checked in the read that counts it): a first run leaves no store
    assert not db_path.exists() and not Path(f"{db_path}-wal").exists()


def test_a_refused_first_run_leaves_no_store_and_the_suggested_command_trains(tmp_path):
    """Issue 33's sequence: `train bad-utf8.txt --db n.db` exits 2 advising `--invalid-utf8
    replace`; that command then trains (it was exit 3: the refused run had left n.db)."""
    bad = tmp_path / "bad-utf8.txt"
    bad.write_bytes(b"hello world\n" * 50 + b"bad \xff byte\n" + b"more text here\n" * 50)
    db = tmp_path / "n.db"
    first = subprocess.run([sys.executable, "-m", "bpe_store", "train", str(bad), "--db", str(db),
                            "--vocab-size", "300", "--progress", "none"], capture_output=True, text=True)
    assert first.returncode == 2 and "pass --invalid-utf8 replace" in first.stderr, first.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad-utf8.txt"]
    again = subprocess.run([sys.executable, "-m", "bpe_store", "train", str(bad), "--db", str(db),
                            "--vocab-size", "300", "--progress", "none", "--invalid-utf8", "replace"],
                           capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    assert Store.open(db).run_row()["phase"] == "done"


@pytest.mark.parametrize("workers", [1, 2])
def test_invalid_utf8_found_while_counting_says_the_first(tmp_path, db_path, workers):
    """Invalid UTF-8 deep in a text file is found by the read that counts it: the message names
    the file's first invalid byte whichever unit a thread found first, every run says the same,
    and a first run so refused leaves no store (units it committed before are removed with it)."""
    good = SMALL_TEXT.read_bytes()[:40_000]
    cut = good.index(b" ", 25_000)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(good[:cut] + b" \xc3(" + good[cut:] + b" \xff end\n")
    line = good[:cut].count(b"\n") + 1
    kwargs = dict(chunk_size=4_000, count_flush_seconds=0, workers=workers)
    e = _raises(InputError, rf"bad.txt: invalid UTF-8 at byte {cut + 1} \(line {line}\)", [bad], db_path, 300,
                SPECIAL, **kwargs)
    assert "--invalid-utf8 replace" in str(e) and "\n" not in str(e)
    assert not db_path.exists()
    again = _raises(InputError, "invalid UTF-8", [bad], db_path, 300, SPECIAL, **kwargs)
    assert str(again) == str(e) and not db_path.exists()


def test_invalid_utf8_across_read_blocks(tmp_path, db_path, monkeypatch):
    import bpe_store.text.input_checks as input_checks

    monkeypatch.setattr(input_checks, "_READ_BLOCK", 7)
    bad = tmp_path / "bad.txt"
    bad.write_bytes("ab é cd\n".encode() * 3 + b"x\xc3")  # truncated 2-byte sequence at the end
    _raises(InputError, r"invalid UTF-8 at byte 28 \(line 4\)", [bad], db_path, 300, SPECIAL)


def test_invalid_utf8_replace_policy_trains(tmp_path, db_path):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"low lower \xff lowest " * 50)
    r = train([bad], db_path, 270, SPECIAL, invalid_utf8="replace")
    assert (b"\xef\xbf", b"\xbd") in r.merges  # the byte became U+FFFD, a word of its own
    assert r.merge_counts[r.merges.index((b"\xef\xbf", b"\xbd"))] == 50


# -- parameters ---------------------------------------------------------------------------------

@pytest.mark.parametrize("vocab_size,specials,match", [
    (256, SPECIAL, "too small: it must be at least 256 bytes \\+ 1 special tokens = 257"),
    (100, [], "too small"),
    (300, [""], "non-empty"),
    (300, ["<|x|>", "<|x|>"], "more than once"),
])
def test_bad_parameters(corpus, db_path, vocab_size, specials, match):
    _raises(InputError, match, [corpus], db_path, vocab_size, specials)
    assert not db_path.exists()


BIG = 2**63


@pytest.mark.parametrize("kwargs,match", [
    ({"vocab_size": BIG}, "vocab size 9223372036854775808 is too large: token ids are 32-bit"),
    ({"vocab_size": 2**32}, "too large"),
    ({"vocab_size": 300.0}, "must be an integer"),
    ({"checkpoint_seconds": float("nan")}, "checkpoint seconds must be a finite number"),
    ({"checkpoint_seconds": float("inf")}, "checkpoint seconds must be a finite number"),
    ({"checkpoint_seconds": -1.0}, "checkpoint seconds"),
    ({"checkpoint_seconds": 0}, "checkpoint seconds"),
    ({"checkpoint_seconds": "30"}, "checkpoint seconds must be a number"),
    ({"count_flush_seconds": float("nan")}, "count flush seconds"),
    ({"chunk_size": 0}, "chunk size must be between 1 and"),
    ({"chunk_size": BIG}, "chunk size must be between 1 and"),
    ({"chunk_size": 1.5}, "chunk size must be an integer"),
    ({"checkpoint_merges": 0}, "checkpoint merges must be at least 1"),
    ({"workers": 0}, "workers must be between 1 and 1024"),
    ({"workers": -3}, "workers"),
    ({"workers": BIG}, "workers must be between 1 and 1024"),
    ({"workers": "2"}, "workers must be an integer"),
    ({"special_tokens": "<|endoftext|>"}, "special tokens must be a list"),
    ({"special_tokens": None}, "special tokens must be a list"),
    ({"pattern": None}, "pattern must be a string"),
])
def test_absurd_parameters_are_input_errors(corpus, db_path, kwargs, match):
    # before: 2^63 failed with exit 1 (SQLite OverflowError), NaN/inf trained without checkpoints,
    # workers=0 meant "all cores", a 2^63 chunk size failed with exit 1
    args = {"vocab_size": 300, "special_tokens": SPECIAL, **kwargs}
    vocab_size, specials = args.pop("vocab_size"), args.pop("special_tokens")
    _raises(InputError, match, [corpus], db_path, vocab_size, specials, **args)
    assert not db_path.exists()


@pytest.mark.parametrize("option,value", [
    ("--vocab-size", str(BIG)), ("--vocab-size", "99999999999"), ("--checkpoint-seconds", "nan"),
    ("--checkpoint-seconds", "inf"), ("--checkpoint-seconds", "-1"), ("--chunk-size", "0"),
    ("--chunk-size", str(BIG)), ("--chunk-size", "99999999999999999999"), ("--workers", "0"),
    ("--workers", "100000000000"), ("--checkpoint-merges", "0"),
])
def test_absurd_options_exit_2_with_one_line(tmp_path, capsys, corpus, option, value):
    argv = ["train", str(corpus), "--db", str(tmp_path / "x.db"), "--vocab-size", "300", option, value]
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "unexpected" not in err
    assert not (tmp_path / "x.db").exists()


def test_bad_pattern(corpus, db_path):
    _raises(InputError, "pattern does not compile", [corpus], db_path, 300, SPECIAL, pattern="(unclosed")


# -- resuming with something else ---------------------------------------------------------------

def test_resume_with_other_specials_is_refused(trained, corpus):
    before = store_dump(trained)
    e = _raises(ResumeMismatch, "special tokens", [corpus], trained, 300, ["<|other|>"])
    assert "--restart" in str(e)
    assert store_dump(trained) == before


def test_resume_with_other_pattern_is_refused(trained, corpus):
    before = store_dump(trained)
    _raises(ResumeMismatch, "pattern", [corpus], trained, 300, SPECIAL, pattern=r"\S+|\s+")
    assert store_dump(trained) == before


def test_resume_with_other_inputs_is_refused(trained, corpus, tmp_path):
    other = tmp_path / "other.txt"
    other.write_text("something else entirely")
    before = store_dump(trained)
    _raises(ResumeMismatch, "inputs", [other], trained, 300, SPECIAL)
    assert store_dump(trained) == before


def test_resume_with_grown_input_is_refused(trained, corpus):
    before = store_dump(trained)
    with open(corpus, "ab") as f:
        f.write(b"more text")
    _raises(ResumeMismatch, "changed size", [corpus], trained, 300, SPECIAL)
    assert store_dump(trained) == before


def test_resume_with_same_size_edit_is_refused(trained, corpus):
    data = bytearray(corpus.read_bytes())
    data[100:105] = b"XXXXX"
    corpus.write_bytes(bytes(data))
    st = corpus.stat()
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    before = store_dump(trained)
    _raises(ResumeMismatch, "changed content", [corpus], trained, 300, SPECIAL)
    assert store_dump(trained) == before


def test_touched_but_unchanged_input_resumes(trained, corpus):
    os.utime(corpus, None)
    r = train([corpus], trained, 300, SPECIAL)
    assert len(r.merges) == 300 - 257


def test_smaller_vocab_points_to_export(trained, corpus):
    before = store_dump(trained)
    _raises(ResumeMismatch, "export --vocab-size 280", [corpus], trained, 280, SPECIAL)
    assert store_dump(trained) == before


def test_restart_starts_over(trained, corpus):
    r = train([corpus], trained, 290, ["<|endoftext|>", "<|pad|>"], restart=True)
    assert r.vocab[1] == b"<|pad|>" and len(r.vocab) == 290


# -- the database -------------------------------------------------------------------------------

def test_foreign_sqlite_database_is_refused_and_untouched(corpus, tmp_path):
    db = tmp_path / "foreign.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO customers VALUES (1, 'Ada')")
    con.commit()
    con.close()
    before = file_hash(db)
    _raises(StoreError, "not a bpe_store store \\(customers\\)", [corpus], db, 300, SPECIAL)
    _raises(StoreError, "not a bpe_store store", [corpus], db, 300, SPECIAL, restart=True)
    assert file_hash(db) == before
    assert not Path(str(db) + "-wal").exists()


def test_non_sqlite_file_is_refused(corpus, tmp_path):
    db = tmp_path / "notes.db"
    db.write_bytes(b"these are my notes, not a database\n" * 100)
    before = file_hash(db)
    _raises(StoreError, "not a SQLite database", [corpus], db, 300, SPECIAL)
    assert file_hash(db) == before


def test_truncated_store_is_refused(trained, corpus, tmp_path):
    data = trained.read_bytes()
    cut = tmp_path / "cut.db"
    cut.write_bytes(data[: len(data) // 3])
    before = file_hash(cut)
    _raises(StoreError, "corrupt|malformed|inconsistent", [corpus], cut, 300, SPECIAL)
    assert file_hash(cut) == before


def test_store_from_newer_version_is_refused(trained, corpus):
    con = sqlite3.connect(trained)
    con.execute("UPDATE alembic_version SET version_num = 'v9_9_9_future'")
    con.commit()
    con.close()
    before = store_dump(trained)
    _raises(StoreError, "newer bpe_store", [corpus], trained, 300, SPECIAL)
    assert store_dump(trained) == before


def test_inconsistent_store_is_refused(tmp_path, corpus):
    """A stopped run's checkpoint keeps its words' tokens and pair counts (a finished run drops
    them): pair counts that do not match the words are refused."""
    db = tmp_path / "half.db"
    stopped_run(corpus, db, 300, SPECIAL, at=10, checkpoint_merges=5)
    con = sqlite3.connect(db)
    assert con.execute("SELECT state_merges = (SELECT count(*) FROM merges) FROM run").fetchone() == (1,)
    con.execute('UPDATE pair_counts SET count = count + 1'
                ' WHERE ("left", "right") IN (SELECT "left", "right" FROM pair_counts LIMIT 1)')
    con.commit()
    con.close()
    _raises(StoreError, "inconsistent", [corpus], db, 300, SPECIAL)


def test_db_path_is_a_directory(corpus, tmp_path):
    _raises(StoreError, "is a directory", [corpus], tmp_path, 300, SPECIAL)


def test_store_held_by_another_process(trained, corpus):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from bpe_store import Store; s = Store.open(sys.argv[1]);"
         " print('held', flush=True); time.sleep(60)", str(trained)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert Store.is_locked(trained)
        before = store_dump(trained)
        _raises(StoreError, "another bpe-store process", [corpus], trained, 300, SPECIAL)
        assert store_dump(trained) == before
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    assert not Store.is_locked(trained)


@pytest.fixture
def tmpfs(tmp_path):
    """Mount a small tmpfs (needs root and a kernel that allows it; skipped elsewhere)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def mount(*opts: str) -> Path:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(opts), "tmpfs", str(mnt)],
                           capture_output=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
        return mnt

    yield mount
    subprocess.run(["umount", str(mnt)], capture_output=True)


def test_read_only_location(corpus, tmpfs):
    mnt = tmpfs("ro", "size=1m")
    _raises(StoreError, "cannot write|read-only", [corpus], mnt / "run.db", 300, SPECIAL)
    assert not (mnt / "run.db").exists()


def test_full_disk_leaves_last_checkpoint_and_resume_completes(tmp_path, tmpfs):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(shared_file("cs336", "corpus.en").read_bytes())
    full = train([corpus], tmp_path / "full.db", 1200, SPECIAL, checkpoint_merges=20)
    mnt = tmpfs("size=720k")
    db = mnt / "run.db"
    e = _raises(StoreError, "disk is full", [corpus], db, 1200, SPECIAL, checkpoint_merges=20)
    assert "last checkpoint" in str(e)
    # the store is readable, consistent and at a checkpoint: grow the disk and resume
    subprocess.run(["mount", "-o", "remount,size=64m", str(mnt)], check=True)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    saved = con.execute("SELECT count(*) FROM merges").fetchone()[0]
    last = con.execute("SELECT merges_done FROM checkpoints ORDER BY id DESC LIMIT 1").fetchone()[0]
    con.close()
    assert saved == last  # exactly the last checkpoint, nothing half-written
    r = train([corpus], db, 1200, SPECIAL, checkpoint_merges=20)
    assert r.merges == full.merges and r.merge_counts == full.merge_counts


# -- the command line -----------------------------------------------------------------------------

def test_cli_prints_one_line_and_exit_code(tmp_path, capsys, corpus):
    with pytest.raises(SystemExit) as info:
        main(["train", str(tmp_path / "missing.txt"), "--db", str(tmp_path / "x.db"), "--vocab-size", "300"])
    assert info.value.code == InputError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_cli_resume_mismatch_has_its_own_exit_code(trained, corpus, capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", str(corpus), "--db", str(trained), "--vocab-size", "300", "--special", "<|x|>"])
    assert info.value.code == ResumeMismatch.exit_code
    assert ResumeMismatch.exit_code not in (0, 1, 2, 130, 143)
