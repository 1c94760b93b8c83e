"""The shortcuts of the performance work give exactly what the slow, obvious path gives.

* counting -> merging: the rows of a single flush into an empty store feed the merge engine
  instead of being read back (``Store.take_fresh_word_rows``); they must equal ``load_word_rows``;
* a later flush must forget them and still add counts to the right words.
"""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import EN, fixture_text

from bpe_store import train
from bpe_store._version import __version__
from bpe_store.counting.count import count_chunk_native, native_counts
from bpe_store.native import WordCounter
from bpe_store.store.params import RunParams
from bpe_store.store.store import Store
from bpe_store.text.pretokenize import GPT2_PATTERN
from bpe_store.text.sources import Source


def _new_store(tmp_path, n_chunks: int = 3) -> Store:
    store = Store.create(tmp_path / "s.db")
    store.init_run(RunParams(GPT2_PATTERN, ("<|endoftext|>",), 400), [Source("/x", 10, 0, "0" * 64)],
                   [(0, i, i + 1) for i in range(n_chunks)], 1, __version__)
    return store


def test_fresh_rows_from_a_counter_equal_the_stored_rows(tmp_path):
    store = _new_store(tmp_path)
    try:
        store.add_word_counts(Counter({b" the": 7, b"a": 2, "é".encode(): 3}), [(1, 12)], 1.0)
        fresh = store.take_fresh_word_rows()
        assert [(i, bytes(w), c, None) for i, w, c in fresh] == store.load_word_rows()
        assert store.take_fresh_word_rows() is None  # handed over once
    finally:
        store.close()


@pytest.mark.skipif(not native_counts(GPT2_PATTERN), reason="native counting not built")
def test_fresh_rows_from_the_native_counter_equal_the_stored_rows(tmp_path):
    text = fixture_text(EN, 200_000)
    path = tmp_path / "c.txt"
    path.write_bytes(text.encode())
    counter = WordCounter()
    counter.add(count_chunk_native(str(path), 0, path.stat().st_size, ["<|endoftext|>"], "strict"))
    store = _new_store(tmp_path)
    try:
        store.add_word_counts(counter, [(1, 5)], 1.0)
        assert store.take_fresh_word_rows() is counter  # kept whole for the engine: no Python row per word
        fresh = counter.rows(1)
        assert [(i, bytes(w), c, None) for i, w, c in fresh] == store.load_word_rows()
        assert [r[0] for r in fresh] == list(range(1, len(fresh) + 1))
        assert {bytes(w): c for _, w, c in fresh} == dict(counter.items())
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["python", "native"])
def test_fresh_rows_build_the_same_engine_as_stored_rows(tmp_path, kind):
    from bpe_store.training.merge import native_available, new_engine

    if kind == "native" and not native_available():
        pytest.skip("native engine not built")
    store = _new_store(tmp_path)
    try:
        store.add_word_counts(Counter({b" the": 7, b" then": 2, b"the": 3, "été".encode(): 4}), [(1, 16)], 1.0)
        fresh = [(i, bytearray(w), c) for i, w, c in store.take_fresh_word_rows()]
        vocab = [None] + [bytes([b]) for b in range(256)]
        a = new_engine(fresh, vocab, 1, 257, 0, kind)
        b = new_engine(store.load_word_rows(), vocab, 1, 257, 0, kind)
        assert a.pair_counts() == b.pair_counts() and a.step(20) == b.step(20)
    finally:
        store.close()


def test_a_second_flush_adds_to_the_right_words_and_the_rows_in_memory_stay_the_stores(tmp_path):
    store = _new_store(tmp_path)
    try:
        store.add_word_counts(Counter({b"a": 1, b"b": 2}), [(1, 3)], 1.0)
        store.add_word_counts(Counter({b"b": 5, b"c": 4}), [(2, 9)], 2.0)
        assert store.load_word_rows() == [(1, b"a", 1, None), (2, b"b", 7, None), (3, b"c", 4, None)]
        rows = store.take_fresh_word_rows()  # the native WordIds, or (no native core) its rows
        rows = rows.rows(1) if hasattr(rows, "pack") else rows
        assert [(i, bytes(w), c, None) for i, w, c in rows] == store.load_word_rows()
        assert store.take_fresh_word_rows() is None  # handed over once
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["python", "auto"])
def test_one_flush_and_many_flushes_train_the_same(tmp_path, engine):
    """One flush (fresh rows feed the engine) against a flush per chunk (the store is read)."""
    corpus = tmp_path / "c.txt"
    corpus.write_bytes(fixture_text(EN, 300_000).encode())
    one = train([corpus], tmp_path / "one.db", 600, ["<|endoftext|>"], engine=engine, workers=1)
    many = train([corpus], tmp_path / "many.db", 600, ["<|endoftext|>"], engine=engine, workers=1,
                 chunk_size=20_000, count_flush_seconds=1e-9)
    assert (one.merges, one.merge_counts) == (many.merges, many.merge_counts)
    with Store.open(tmp_path / "one.db") as a, Store.open(tmp_path / "many.db") as b:
        assert a.load_pair_counts() == b.load_pair_counts()
        assert sorted((w, c, t) for _, w, c, t in a.load_word_rows()) == \
            sorted((w, c, t) for _, w, c, t in b.load_word_rows())


# -- the UTF-8 check of scan_source's fingerprint, block by block ----------------------------------

_SAMPLES = [b"", b"abc", "héllo wörld ✓ 𝄞 текст 中文".encode(), b"\xff", b"a\xc3", b"\xc3(", b"\xe2\x82",
            b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xef\xbb\xbfBOM\r\n\r",
            "𝄞".encode()[:3] + b"x", b"\x80abc", b"\x80\x80\x80\x80a", b"a\xf0\x9d\x84"]


def _tree_digest(data: bytes, block: int) -> str:
    """``xxh3_128_8MiB`` as its definition says (with ``block`` for the 8 MiB)."""
    import xxhash

    parts = b"".join(xxhash.xxh3_128_digest(data[i:i + block]) for i in range(0, len(data), block))
    return xxhash.xxh3_128_hexdigest(parts + len(data).to_bytes(8, "little"))


@pytest.mark.parametrize("block", [1, 2, 3, 4, 5, 7, 64])
@pytest.mark.parametrize("hash_name,threads", [("xxh3_128_8MiB", 1), ("xxh3_128_8MiB", 3), ("sha256", 1)])
def test_fingerprint_judges_utf8_like_decode_at_any_block_size(tmp_path, block, hash_name, threads):
    import hashlib
    import random

    from bpe_store.text.fingerprint import digest_file

    rng = random.Random(block)
    alphabet = "aé✓𝄞中\\n".encode() + bytes([0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFF, 0xED, 0xA0])
    cases = list(_SAMPLES)
    for _ in range(300):
        cases.append(bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 24))))
    for _ in range(100):  # valid text cut anywhere by the blocks
        cases.append("".join(rng.choice("aé✓𝄞中 \n") for _ in range(rng.randrange(0, 30))).encode())
    path = tmp_path / "f.bin"
    for data in cases:
        path.write_bytes(data)
        digest = hashlib.sha256(data).hexdigest() if hash_name == "sha256" else _tree_digest(data, block)
        try:
            data.decode("utf-8")
            expect = digest
        except UnicodeDecodeError:
            expect = None
        with open(path, "rb") as f:
            got = digest_file(path, f.fileno(), len(data), hash_name, True, block=block, threads=threads)
            assert got == expect, (data, block)
            # unchecked: the digest whatever the bytes
            assert digest_file(path, f.fileno(), len(data), hash_name, False, block=block,
                               threads=threads) == digest


# -- opening a store without Alembic --------------------------------------------------------------

def test_schema_head_constant_is_alembics_head():
    from bpe_store.store import migrate

    assert migrate.alembic_head_revision() == migrate.SCHEMA_HEAD
    assert migrate.SCHEMA_HEAD in migrate.known_revisions()


def test_current_revision_reads_what_alembic_reads(tmp_path):
    from alembic.runtime.migration import MigrationContext

    from bpe_store.store import migrate

    store = _new_store(tmp_path)
    try:
        assert migrate.current_revision(store.conn) == MigrationContext.configure(
            store.conn).get_current_revision() == migrate.SCHEMA_HEAD
    finally:
        store.close()
    import sqlalchemy

    eng = sqlalchemy.create_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    with eng.connect() as conn:
        assert migrate.current_revision(conn) is None


def test_opening_a_current_store_does_not_import_alembic(tmp_path):
    import subprocess
    import sys

    store = _new_store(tmp_path)
    store.close()
    code = ("import sys; from bpe_store.store.store import Store; s = Store.open(sys.argv[1]); s.run_row(); "
            "s.close(); print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s.db")], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "[]"


def test_a_core_built_from_older_sources_fails_loudly_instead_of_counting_slowly():
    """A stale native core (an editable build older than the sources: here one without
    ``count_file_range``) makes ``bpe_store.native`` fail to import, naming the missing function,
    rather than sending every native counting path to ``regex`` without a word."""
    import subprocess
    import sys

    code = (
        "import sys, types\n"
        "import bpe_store._core as real\n"
        "fake = types.ModuleType('bpe_store._core')\n"
        "fake.__dict__.update({k: v for k, v in vars(real).items() if k != 'count_file_range'})\n"
        "sys.modules['bpe_store._core'] = fake\n"
        "import bpe_store.native\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr and "count_file_range" in proc.stderr
