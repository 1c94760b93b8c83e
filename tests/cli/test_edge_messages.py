"""Messages that must say what happened: a file that changes while it is fingerprinted is refused
(not given a fingerprint of neither content), and Ctrl-C in a reading command does not speak of
checkpoints. (A full disk while creating: test_store_create.py.)"""

from __future__ import annotations

import pytest
from cli_helpers import SPECIAL, run

from bpe_store import InputError, train
from bpe_store.text import input_checks


@pytest.mark.parametrize("invalid_utf8", ["strict", "replace"])
def test_a_file_that_grows_while_it_is_fingerprinted_is_refused(tmp_path, monkeypatch, invalid_utf8):
    # jsonl: fingerprinted whole when planned (uncompressed text is fingerprinted as it is counted,
    # and a change under it is caught there: test_fingerprint.py)
    corpus = tmp_path / "growing.jsonl"
    corpus.write_text('{"text": "hello world"}\n' * 50_000, encoding="utf-8")
    real_digest = input_checks.digest_file

    def digest_then_grow(*args, **kwargs):  # the file grows while its one read is under way
        digest = real_digest(*args, **kwargs)
        with open(corpus, "ab") as f:
            f.write(b'{"text": "and more"}\n')
        return digest

    monkeypatch.setattr(input_checks, "digest_file", digest_then_grow)
    with pytest.raises(InputError, match="changed while it was being read .* is it still being written"):
        train([corpus], tmp_path / "run.db", 300, [SPECIAL], invalid_utf8=invalid_utf8)
    assert not (tmp_path / "run.db").exists()
    monkeypatch.undo()
    size = corpus.stat().st_size
    train([corpus], tmp_path / "run.db", 300, [SPECIAL])  # complete now: trains
    assert size == corpus.stat().st_size


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


def test_a_stream_given_again_that_ends_at_the_counted_part_is_warned_about(tmp_path, capsys):
    import sqlite3

    from test_refused_resume import STREAM, docs, stopped_iterator_run

    from bpe_store import train_from_iterator
    from bpe_store.cli.running import StopOnSignal
    from bpe_store.inspection.progress import Silent

    db = tmp_path / "run.db"
    documents = docs()
    stopped_iterator_run(db, documents, 70)
    con = sqlite3.connect(db)
    (counted,) = con.execute("SELECT documents FROM sources").fetchone()
    con.close()
    events: list[dict] = []
    train_from_iterator(iter(documents[:counted]), db, progress=events.append, **STREAM)
    [warning] = [e for e in events if e["stage"] == "warning"]
    assert f"ended where the part counted before ends ({warning['done']} bytes, {counted} documents)" \
        in warning["message"] and "--restart" in warning["message"]
    # the command line shows it even with --quiet
    StopOnSignal().watch(Silent())(warning)
    assert capsys.readouterr().err == warning["message"] + "\n"
    # a stream that brings more is not warned about
    other = tmp_path / "other.db"
    stopped_iterator_run(other, documents, 70)
    events.clear()
    train_from_iterator(iter(documents), other, progress=events.append, **STREAM)
    assert not [e for e in events if e["stage"] == "warning"]
