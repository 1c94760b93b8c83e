"""A base's rows written from its packed merges (``base_rows.Triples``, a ranks base read natively)
are the rows and the merge digest written from plain triples: the ranks read from the tokens, the
digest laid out from the bytes (``_packed_digest``) and ``digest.update``'s of the five-tuples."""

from __future__ import annotations

import random
import sqlite3
from array import array

import pytest

from bpe_store import train
from bpe_store.store import digest
from bpe_store.store.base_rows import Triples, _packed_digest


def packed_of(triples: list[tuple[int, int, int]]) -> bytes:
    a = array("I", [x for t in triples for x in t])
    return a.tobytes()


@pytest.mark.parametrize("n", [0, 1, 7, 3000])
def test_the_packed_digest_is_the_rows_digest(n):
    rng = random.Random(n)
    first = 259
    triples = [(rng.randrange(2**32), rng.randrange(2**32), first + k) for k in range(n)]
    rows = [(k, a, b, t, 0) for k, (a, b, t) in enumerate(triples)]
    assert _packed_digest(packed_of(triples), n).hexdigest() == digest.update(digest.new_hash(), rows).hexdigest()
    assert Triples.of(packed_of(triples)) == triples and Triples.of(packed_of(triples)).packed == packed_of(triples)


def dump(db) -> list:
    con = sqlite3.connect(db)
    try:
        return [con.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in ("merges", "vocab", "base_ids")] + [
            con.execute("SELECT merges_done, merge_digest FROM checkpoints ORDER BY id LIMIT 1").fetchall()]
    finally:
        con.close()


def test_a_ranks_base_writes_the_rows_plain_triples_write(tmp_path, corpus, trained_store, monkeypatch):
    """The same run extending a tiktoken export of a store, once with the reader's packed merges
    and once with them as a plain list (the rows the packed path must equal)."""
    import dataclasses

    from bpe_store.tokenizer.export import export_store
    from bpe_store.training import extend, plan

    export_store(trained_store, "tiktoken", tmp_path / "tk")
    train([corpus], tmp_path / "packed.db", 310, [], extend=tmp_path / "tk", workers=1)
    packed_rows = extend.base_rows

    def plain_rows(base):
        rows = packed_rows(base)
        assert getattr(rows.merges, "packed", None) is not None  # the reader kept them packed
        return dataclasses.replace(rows, merges=list(rows.merges))

    monkeypatch.setattr(plan, "base_rows", plain_rows)
    train([corpus], tmp_path / "plain.db", 310, [], extend=tmp_path / "tk", workers=1)
    assert dump(tmp_path / "packed.db") == dump(tmp_path / "plain.db")


def test_the_vocab_check_is_back_on_after_the_base_rows(tmp_path, corpus, trained_store, monkeypatch):
    """``write_base`` inserts its vocabulary rows with ``ignore_check_constraints`` (every row's
    kind is 'merge'); the connection checks ``vocab.kind`` again after it, for any later write."""
    from bpe_store.store import base_rows
    from bpe_store.training import plan

    seen = []

    def write_then_look(store, rows):
        out = base_rows.write_base(store, rows)
        seen.append(store._native().execute("PRAGMA ignore_check_constraints", ())[0][0])
        with pytest.raises(Exception, match="CHECK constraint failed"):
            store._native().execute("INSERT INTO vocab (id, bytes, kind) VALUES (?, ?, 'bogus')", (10**6, b"x"))
        return out

    monkeypatch.setattr(plan, "write_base", write_then_look)
    train([corpus], tmp_path / "ext.db", 310, [], extend=trained_store, workers=1)
    assert seen == [0]
