"""A store's result (``read_result``: vocabulary, merges, counts) read natively from its merge log
(``merge_log.read_result``, what the end of ``train`` returns) is the one read through Python, for a
plain store, a store that extends a base (model ids with holes) and their prefixes; a store the
native check refuses gives None (the Python read then says what is wrong)."""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from conftest import tampered

from bpe_store import native, train
from bpe_store.store import merge_log
from bpe_store.store.result import read_result
from bpe_store.store.store import Store

needs_native = pytest.mark.skipif(not native.BUILT, reason="the native core is not built")


@pytest.fixture(scope="module")
def based_store(tmp_path_factory, corpus, trained_store) -> object:
    """A store extending ``trained_store`` at merge 30 (its ids are the base's, its special token
    first), trained on the same corpus to 320 tokens."""
    db = tmp_path_factory.mktemp("based") / "ext.db"
    train([corpus], db, 320, [], extend=f"{trained_store}@30")
    return db


@needs_native
@pytest.mark.parametrize("which", ["trained_store", "based_store"])
@pytest.mark.parametrize("vocab_size", [None, 200, 257, 290, 10_000])
def test_the_native_result_is_the_python_one(request, which, vocab_size):
    db = request.getfixturevalue(which)
    with Store.open(db, readonly=True) as store:
        fast = merge_log.read_result(store, vocab_size)
        assert fast is not None
        assert fast == read_result(store, vocab_size)


@needs_native
def test_train_returns_the_stores_result(corpus, tmp_path):
    """``train``'s return is the store's result as read through Python (the end reads it natively)."""
    db = tmp_path / "run.db"
    got = train([corpus], db, 290, ["<|endoftext|>"])
    with Store.open(db, readonly=True) as store:
        assert got == read_result(store)


@needs_native
def test_a_store_the_native_check_refuses_gives_none(tmp_path, trained_store):
    pristine = tmp_path / "pristine.db"
    shutil.copy(trained_store, pristine)
    db = tampered(tmp_path, pristine, "UPDATE merges SET count = count + 1 WHERE rank = 3")
    with Store.open(db, readonly=True) as store:
        assert merge_log.read_result(store) is None
    with sqlite3.connect(pristine) as con:
        assert con.execute("SELECT count(*) FROM merges").fetchone()[0] > 3


@needs_native
@pytest.mark.parametrize("which", ["trained_store", "based_store"])
@pytest.mark.parametrize("at", [None, 0, 17])
def test_a_store_base_is_read_natively(request, which, at, monkeypatch):
    """``--extend run.db[@T]`` reads the store through the native merge-log reader
    (``store_tokenizer(..., read=merge_log.read_result)``), not the driver's rows: the base is the
    one the Python read gives."""
    from bpe_store.formats.bases import load_base
    from bpe_store.store import result

    db = request.getfixturevalue(which)
    spec = str(db) if at is None else f"{db}@{at}"
    with monkeypatch.context() as m:
        m.setattr(merge_log, "read_result", lambda *args, **kwargs: None)  # the Python read
        want = load_base(spec)

    def no_python_read(*args, **kwargs):
        raise AssertionError("read through the driver")

    monkeypatch.setattr(result, "read_result", no_python_read)
    assert load_base(spec) == want
