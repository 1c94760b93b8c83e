"""Decoding inputs (issue 11, throughput): the fast gzip inflater (ISA-L's igzip, the ``gzip``
extra) and its standard-library fallback give the same bytes and the same one-line errors."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest
from cli_helpers import run
from conftest import FIXTURES

from bpe_store.inputs import _reader, open_decompressed

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
        read = _reader(f, str(path), compression)
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
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM words").fetchone()[0] == 0
    con.close()


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
