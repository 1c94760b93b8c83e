"""``Tokenizer.from_store`` reads the merge log natively (``store.merge_log.read_checked``,
native/merge_log_reader.cpp) and builds its encoder from the log's arrays (``Tables._from_log``):
the same tables, ids and encodings as the Python path (``Tables._from_result`` of the rows read
through ``sqlite3``), for a plain store, one whose special token is also a byte, an extended one
(the base's ids) and prefixes of each; and a store the native checks do not pass goes the Python
way (tests/store/test_integrity.py: what it then says).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from conftest import EN, RU, ZH, fixture_text

from bpe_store import Tokenizer, train
from bpe_store.store import native_connection
from bpe_store.store.merge_log import read_checked
from bpe_store.store.store import Store
from bpe_store.tokenizer.tables import load_store_ids

EOT = "<|endoftext|>"
TABLES = ("vocab", "merges", "special_tokens", "pattern", "_id_of", "_special_id", "_byte_id", "_table")


def samples() -> list[str]:
    return [fixture_text(EN, 20_000, offset=500_000), fixture_text(RU, 20_000, offset=200_000),
            fixture_text(ZH, 10_000), f"a{EOT}b aaa  {EOT}{EOT} x 123 🙃"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("loading")
    en = d / "en.txt"
    en.write_text(fixture_text(EN, 120_000) + EOT + fixture_text(EN, 30_000, offset=200_000), encoding="utf-8")
    plain = d / "plain.db"
    train([en], plain, 600, [EOT], workers=1)
    # a special token whose bytes are a byte's: the byte's id is the special's (first_ids)
    byte_special = d / "byte-special.db"
    train([en], byte_special, 500, ["a", EOT], workers=1)
    ru = d / "ru.txt"
    ru.write_text(fixture_text(RU, 100_000), encoding="utf-8")
    extended = d / "extended.db"
    train([ru], extended, 600 + 200, [], extend=str(plain), workers=1)
    return {"plain": plain, "byte special": byte_special, "extended": extended}


@pytest.mark.parametrize("kind", ["plain", "byte special", "extended"])
def test_the_native_load_builds_what_the_python_load_builds(stores, kind):
    db = stores[kind]
    full = len(Tokenizer.from_store(db).vocab)
    for vocab_size in (None, 300, full - 57, full):
        fast = Tokenizer.from_store(db, vocab_size=vocab_size)
        assert "_log" in fast.__dict__, "the native path was not taken"
        slow = Tokenizer._from_result(*load_store_ids(db, vocab_size))
        assert "_log" not in slow.__dict__
        for name in TABLES:
            assert getattr(fast, name) == getattr(slow, name), (vocab_size, name)
        plain = Tokenizer(slow.vocab, slow.merges, slow.special_tokens, pattern=slow.pattern, native=False)
        for text in samples():
            assert fast.encode(text) == slow.encode(text) == plain.encode(text), vocab_size
            assert fast.encode_to_array(text.encode("utf-8")).tolist() == slow.encode(text)


def test_the_byte_special_store_names_the_byte_by_the_special(stores):
    tok = Tokenizer.from_store(stores["byte special"])
    assert tok._byte_id[ord("a")] == tok._special_id["a"] == 0


def test_without_the_native_store_path_the_python_load_is_taken(stores, monkeypatch):
    monkeypatch.setenv(native_connection.ENV, "0")
    tok = Tokenizer.from_store(stores["extended"])
    assert "_log" not in tok.__dict__
    monkeypatch.delenv(native_connection.ENV)
    fast = Tokenizer.from_store(stores["extended"])
    assert "_log" in fast.__dict__
    for name in TABLES:
        assert getattr(fast, name) == getattr(tok, name), name


def test_the_native_read_is_the_stores_rows(stores):
    db = stores["extended"]
    with Store.open(db, readonly=True) as store:
        log = read_checked(store, json.loads(store.run_row()["special_tokens"]))
        merges = store.load_merges()
        vocab = store.load_vocab()
        model = store.sql("SELECT model_id FROM base_ids ORDER BY id").fetchall()
    assert log.n_merges == len(merges) and log.n_vocab == len(vocab)
    assert log.merge_rows == struct.pack(f"<{5 * len(merges)}q", *(v for m in merges for v in m))
    offsets = struct.unpack(f"<{len(vocab) + 1}Q", log.token_offsets)
    blob = log.token_blob
    assert [blob[offsets[i]:offsets[i + 1]] for i in range(len(vocab))] == [b for _, b, _ in vocab]
    ids = struct.unpack(f"<{len(vocab)}q", log.model_ids)
    assert list(ids[:len(model)]) == [m for (m,) in model]
    assert log.has_base and log.checkpoint[0] == len(merges)
