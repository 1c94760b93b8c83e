"""Messages that must say what happened: a file that changes while it is fingerprinted is refused
(not given a SHA-256 of neither content), a full disk while creating says no store exists, and
Ctrl-C in a reading command does not speak of checkpoints."""

from __future__ import annotations

import os
import subprocess

import pytest
from cli_helpers import SPECIAL, run

from bpe_store import InputError, StoreError, train
from bpe_store.counting import fingerprint


@pytest.mark.parametrize("invalid_utf8", ["strict", "replace"])
def test_a_file_that_grows_while_it_is_fingerprinted_is_refused(tmp_path, monkeypatch, invalid_utf8):
    corpus = tmp_path / "growing.txt"
    corpus.write_text("hello world " * 50_000, encoding="utf-8")
    real_native, real_open = fingerprint._fingerprint_native, fingerprint.open_regular

    def grow() -> None:
        with open(corpus, "ab") as f:
            f.write(b" and more")

    def native_then_grow(p, f, *args):  # the native path (strict): the file grows as it is read
        grow()
        return real_native(p, f, *args)

    class GrowingReader:  # the slow path (replace): the file grows after the first block
        def __init__(self, f):
            self.f, self.reads = f, 0

        def read(self, n):
            self.reads += 1
            if self.reads == 2:
                grow()
            return self.f.read(n)

        def __getattr__(self, name):  # fileno, readinto, close, ...: the file's own
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(fingerprint, "_fingerprint_native", native_then_grow)
    monkeypatch.setattr(fingerprint, "open_regular", lambda p: GrowingReader(real_open(p)))
    monkeypatch.setattr(fingerprint, "_READ_BLOCK", 64 << 10)
    with pytest.raises(InputError, match="changed while it was being read .* is it still being written"):
        train([corpus], tmp_path / "run.db", 300, [SPECIAL], invalid_utf8=invalid_utf8)
    assert not (tmp_path / "run.db").exists()
    monkeypatch.undo()
    size = corpus.stat().st_size
    train([corpus], tmp_path / "run.db", 300, [SPECIAL])  # complete now: trains
    assert size == corpus.stat().st_size


def test_a_full_disk_while_creating_says_no_store_was_created(tmp_path, corpus):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        with pytest.raises(StoreError) as info:
            train([corpus], mnt / "run.db", 300, [SPECIAL])
        msg = str(info.value)
        assert msg.startswith(f"{mnt / 'run.db'}: the disk is full") and msg.endswith("no store was created"), msg
        assert "last checkpoint" not in msg and os.listdir(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


@pytest.mark.parametrize("args, said", [
    (["sql", "{db}", "SELECT 1"], "error: interrupted; the store was only read, nothing changed\n"),
    (["status", "{db}"], "error: interrupted; the store was only read, nothing changed\n"),
    (["db", "check", "{db}"], "error: interrupted; the store was only read, nothing changed\n"),
])
def test_ctrl_c_in_a_reading_command_says_nothing_changed(trained_store, monkeypatch, args, said):
    from bpe_store.store import store as store_mod

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(store_mod.Store, "open", classmethod(lambda cls, *a, **k: ctrl_c()))
    r = run(*[a.format(db=trained_store) for a in args])
    assert r.exit_code == 130 and r.stderr == said, r.stderr
