"""Decoding inputs: the fast gzip inflater (ISA-L's igzip, the ``gzip``
extra) and its standard-library fallback give the same bytes and the same one-line errors."""

from __future__ import annotations

import gzip
import json
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import run
from conftest import FIXTURES

from bpe_store.text.decompress import checked_reader, open_decompressed

TEXT = (FIXTURES / "enwiki-1M.txt").read_bytes()


@pytest.fixture(params=["isal", "stdlib"])
def gzip_backend(request, monkeypatch) -> str:
    """Each test runs with the fast path (isal installed: it is in the `test` extra) and with
    the fallback (isal hidden, as if not installed)."""
    if request.param == "isal":
        pytest.importorskip("isal.igzip")
    else:
        for mod in ("isal", "isal.igzip"):
            monkeypatch.setitem(sys.modules, mod, None)  # import fails as if not installed
    return request.param


def read_all(path: Path, compression: str = "gz", n: int = 1 << 16) -> bytes:
    out = bytearray()
    with open_decompressed(path, compression) as f:
        read = checked_reader(f, str(path), compression)
        while data := read(n):
            out += data
    return bytes(out)


def test_gzip_inflates_with_isal_when_installed_else_the_standard_library(tmp_path, gzip_backend):
    path = tmp_path / "a.txt.gz"
    path.write_bytes(gzip.compress(b"hello"))
    with open_decompressed(path, "gz") as f:
        module = type(f).__module__
    assert module == ("isal.igzip" if gzip_backend == "isal" else "gzip")


GZIPS = {
    "one member": lambda: gzip.compress(TEXT, compresslevel=6),
    "several members": lambda: gzip.compress(TEXT[:300_000]) + gzip.compress(TEXT[300_000:], compresslevel=1),
    "an empty member first": lambda: gzip.compress(b"") + gzip.compress(TEXT[:50_000]),
    "zero padding after": lambda: gzip.compress(TEXT[:50_000]) + b"\0" * 512,
    "empty file": lambda: b"",
    "stored (level 0)": lambda: gzip.compress(TEXT[:70_000], compresslevel=0),
}


@pytest.mark.parametrize("case", list(GZIPS))
def test_both_inflaters_give_the_bytes_gzip_decompress_gives(tmp_path, gzip_backend, case):
    data = GZIPS[case]()
    path = tmp_path / "a.txt.gz"
    path.write_bytes(data)
    expected = gzip.decompress(data) if data else b""
    assert read_all(path) == expected
    assert read_all(path, n=1000) == expected  # small reads: members and buffers cut anywhere


def bad_gzip(case: str) -> bytes:
    good = gzip.compress(b'{"text": "hello world"}\n' * 20_000)
    return {
        "truncated": good[: len(good) // 2],
        "cut in the header": good[:5],
        "corrupt deflate data": good[:30] + b"\xff" * 20 + good[50:],
        "bad crc": good[:-8] + b"\0\0\0\0" + good[-4:],
        "not gzip": b'{"text": "plain jsonl named .gz"}\n',
        "garbage after the member": good + b"garbage!",
    }[case]


@pytest.mark.parametrize("case", ["truncated", "cut in the header", "corrupt deflate data", "bad crc", "not gzip",
                                  "garbage after the member"])
def test_bad_gzip_is_one_line_exit_2_with_either_inflater(tmp_path, gzip_backend, case):
    """ISA-L fails where zlib fails and is reported the same way: one line naming the file,
    exit 2, nothing of the file counted (a corrupt deflate stream is isal's own exception type,
    an exit 1 if unrecognised)."""
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(bad_gzip(case))
    db = tmp_path / "run.db"
    result = run("train", path, "--db", db, "--vocab-size", 300, "--progress", "none")
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert re.match(r"error: .*bad\.jsonl\.gz: truncated or corrupt gz data after \d+ decompressed bytes \(.+\)$",
                    lines[0]), lines[0]
    if case == "not gzip":  # said by the standard library on either path: it names the first bytes
        assert "Not a gzipped file (b'{\"')" in lines[0]
    assert not db.exists()  # a refused first run leaves no store


def test_jsonl_gz_trains_the_same_with_either_inflater(tmp_path, gzip_backend):
    from bpe_store import train

    docs = TEXT.decode("utf-8").split("<|endoftext|>")[:80]
    lines = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode("utf-8")
    gz = tmp_path / "in.jsonl.gz"
    gz.write_bytes(gzip.compress(lines))
    plain = tmp_path / "in.jsonl"
    plain.write_bytes(lines)
    params = dict(vocab_size=400, special_tokens=["<|endoftext|>"], chunk_size=20_000, workers=2)
    a = train([gz], tmp_path / "gz.db", **params)
    b = train([plain], tmp_path / "plain.db", **params)
    assert a.merges == b.merges and a.merge_counts == b.merge_counts


# -- zstd -----------------------------------------------------------------------------------------


def test_zstd_frames_read_whole_in_any_read_size(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    c = zstandard.ZstdCompressor()
    frames = [TEXT[:400_000], b"", TEXT[400_000:401_000], TEXT[401_000:]]
    path = tmp_path / "a.txt.zst"
    path.write_bytes(b"".join(c.compress(f) for f in frames))
    for n in (777, 1 << 16, 1 << 22):
        assert read_all(path, "zst", n=n) == TEXT


# -- reading ahead --------------------------------------------------------------------------------


def read_ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "bpe-read-ahead"]


def test_a_compressed_unit_is_inflated_ahead_on_its_own_thread_and_the_thread_ends_with_it(tmp_path):
    """Inflating overlaps parsing (one thread each), and leaving the unit early (as a failing
    count does) stops the inflating thread: no thread outlives its unit."""
    from bpe_store.counting.planning import plan_units, scan_input
    from bpe_store.text.inputs import file_input, unit_of
    from bpe_store.text.pretokenize import GPT2_PATTERN, PretokenSpec
    from bpe_store.text.units import unit_blocks

    path = tmp_path / "a.txt.gz"
    data = TEXT * 8  # more than the 4 pieces of 1 MB read ahead: the thread waits for the reader
    path.write_bytes(gzip.compress(data))
    src = scan_input(file_input(path))
    (start, end, kind, part), = plan_units(src, PretokenSpec((), GPT2_PATTERN), 1 << 20)
    blocks = unit_blocks(unit_of(src, kind, start, end, part), PretokenSpec((), GPT2_PATTERN), 100_000)
    first = next(blocks)
    assert len(read_ahead_threads()) == 1
    blocks.close()
    assert read_ahead_threads() == []
    whole = b"".join(unit_blocks(unit_of(src, kind, start, end, part), PretokenSpec((), GPT2_PATTERN), 100_000))
    assert whole.startswith(first) and whole == data and read_ahead_threads() == []


def test_read_ahead_gives_the_pieces_in_order_then_the_error_and_stays_bounded():
    from bpe_store.errors import InputError
    from bpe_store.text.decompress import read_ahead

    calls = []
    release = threading.Event()

    def read(n: int) -> bytes:
        calls.append(n)
        if len(calls) == 10:
            release.wait(5)
            raise InputError("x.gz: truncated or corrupt gz data")
        return bytes([len(calls)]) * 3

    with read_ahead(read, depth=2) as ahead:
        assert ahead(1) == b"\x01\x01\x01"
        deadline = time.monotonic() + 5
        while len(calls) < 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.05)
        assert len(calls) <= 4  # one taken, two waiting, one blocked on the full queue
        got = [ahead(1) for _ in range(8)]
        assert got == [bytes([i]) * 3 for i in range(2, 10)]
        release.set()
        with pytest.raises(InputError, match="truncated"):
            ahead(1)
        assert ahead(1) == b""  # after the error: nothing more
    assert read_ahead_threads() == []


# -- parquet --------------------------------------------------------------------------------------

DOCS = ["abc", "", "naïve café", "日本語", "", "x\n", "<|endoftext|>", " y"]


def arrow_columns() -> dict[str, object]:
    pa = pytest.importorskip("pyarrow")
    cols = {
        "string": pa.array(DOCS, pa.string()),
        "large_string": pa.array(DOCS, pa.large_string()),
        "dictionary": pa.array(DOCS, pa.string()).dictionary_encode(),
        "sliced": pa.array(["before", *DOCS, "after"], pa.string()).slice(1, len(DOCS)),
        "chunked": pa.chunked_array([pa.array(DOCS[:3]), pa.array([], pa.string()), pa.array(DOCS[3:])]),
        "chunked large_string": pa.chunked_array([pa.array(d, pa.large_string()) for d in (DOCS[:1], DOCS[1:])]),
    }
    if hasattr(pa, "string_view"):
        cols["string_view"] = pa.array(DOCS, pa.string_view())
    return cols


@pytest.mark.parametrize("kind", ["string", "large_string", "dictionary", "sliced", "chunked", "chunked large_string",
                                  "string_view"])
def test_parquet_strings_join_from_arrow_buffers(kind):
    from bpe_store.text.parquet import _parquet_documents
    from bpe_store.text.pretokenize import DOC_SEP

    cols = arrow_columns()
    if kind not in cols:
        pytest.skip("this pyarrow has no string_view")
    got = _parquet_documents(cols[kind], "f.parquet: row group 0", 0, "text", "strict")
    assert got == DOC_SEP.join(d.encode("utf-8") for d in DOCS)


def test_parquet_null_names_its_row_across_chunks():
    pa = pytest.importorskip("pyarrow")
    from bpe_store.errors import InputError
    from bpe_store.text.parquet import _parquet_documents

    arr = pa.chunked_array([pa.array(["a", "b"]), pa.array(["c", None, "d"])])
    with pytest.raises(InputError, match=r"^f.parquet: row group 3, row 13: 'text' is null, not a string$"):
        _parquet_documents(arr, "f.parquet: row group 3", 10, "text", "strict")


def write_invalid_utf8_parquet(path: Path) -> Path:
    """A string column holding invalid UTF-8 (pyarrow writes what it is given)."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    raw = pa.array([b"good one", b"bad \xff byte", b"caf\xc3", b"\xa9 split"], pa.binary())
    pq.write_table(pa.table({"text": pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())}), path)
    return path


def test_parquet_invalid_utf8_is_refused_naming_the_row_or_replaced(tmp_path):
    path = write_invalid_utf8_parquet(tmp_path / "bad.parquet")
    result = run("train", path, "--db", tmp_path / "a.db", "--vocab-size", 300, "--progress", "none")
    assert result.exit_code == 2
    assert result.stderr.strip() == ("error: " + str(path) + ": row group 0, row 1: invalid UTF-8 at byte 4: "
                                     "invalid start byte; fix the file or pass --invalid-utf8 replace")
    # replaced per document: a character cut between two rows is two U+FFFD, never rejoined
    from bpe_store import train
    from bpe_store.text.parquet import _parquet_documents
    from bpe_store.text.pretokenize import DOC_SEP

    pq = pytest.importorskip("pyarrow.parquet")
    replaced = ["good one", "bad \ufffd byte", "caf\ufffd", "\ufffd split"]
    col = pq.read_table(path).column("text")
    assert _parquet_documents(col, "x", 0, "text", "replace") == DOC_SEP.join(d.encode("utf-8") for d in replaced)
    text = tmp_path / "same.txt"
    text.write_text("<|endoftext|>".join(replaced), encoding="utf-8")
    params = dict(vocab_size=270, special_tokens=["<|endoftext|>"], invalid_utf8="replace")
    a = train([path], tmp_path / "b.db", **params)
    b = train([text], tmp_path / "c.db", **params)
    assert a.merges == b.merges and a.merge_counts == b.merge_counts


def test_large_string_and_dictionary_parquet_columns_train_as_the_text(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from bpe_store import train

    docs = TEXT.decode("utf-8").split("<|endoftext|>")[:60] + DOCS
    text = tmp_path / "same.txt"
    text.write_text("<|endoftext|>".join(docs), encoding="utf-8")
    params = dict(vocab_size=350, special_tokens=["<|endoftext|>"], chunk_size=20_000, workers=2)
    expected = train([text], tmp_path / "t.db", **params)
    for name, col in [("large", pa.array(docs, pa.large_string())),
                      ("dict", pa.array(docs, pa.string()).dictionary_encode())]:
        path = tmp_path / f"{name}.parquet"
        pq.write_table(pa.table({"text": col}), path, row_group_size=16)
        assert pq.read_schema(path).field("text").type == col.type  # read back as written
        got = train([path], tmp_path / f"{name}.db", **params)
        assert got.merges == expected.merges and got.merge_counts == expected.merge_counts
