"""``encode`` reads every input kind ``train`` reads, through the same readers: text, jsonl,
parquet, compressed, stdin, globs and folders; a document is a text file or a record, encoded on
its own and followed by ``--separator``; ``--val-fraction`` goes over those documents."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import SPECIAL
from conftest import SMALL_TEXT
from typer.testing import CliRunner

from bpe_store import Tokenizer, train
from bpe_store.cli.main import app


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("enc")
    db = d / "run.db"
    train([SMALL_TEXT], db, 600, [SPECIAL])
    text = SMALL_TEXT.read_text(encoding="utf-8")
    docs = [x for x in text.split(SPECIAL) if x.strip()]
    docs += ["", "café 中文 ok", " trailing space "]  # an empty record too
    return db, docs, Tokenizer.from_store(db)


def cli(*args, input: bytes | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], input=input, prog_name="bpe-store")


def ids_of(path: Path) -> list[int]:
    if path.suffix == ".npy":
        return np.load(path).tolist()
    return np.fromfile(path, dtype=np.uint16).tolist()


def expected(tok: Tokenizer, docs: list[str], sep: bool) -> list[int]:
    out: list[int] = []
    for doc in docs:
        out += tok.encode(doc) + ([tok.special_id(SPECIAL)] if sep else [])
    return out


def write_jsonl(path: Path, docs: list[str], field: str = "text") -> None:
    data = "".join(json.dumps({field: d, "id": i}, ensure_ascii=False) + "\n" for i, d in enumerate(docs)).encode()
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    elif path.suffix == ".zst":
        import zstandard

        path.write_bytes(zstandard.ZstdCompressor().compress(data))
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("name", ["d.jsonl", "d.jsonl.gz", "d.jsonl.zst", "d.ndjson"])
@pytest.mark.parametrize("sep", [True, False])
def test_jsonl_documents_encode_one_by_one(setup, tmp_path, name, sep):
    db, docs, tok = setup
    f = tmp_path / name
    write_jsonl(f, docs)
    out = tmp_path / "o.npy"
    r = cli("encode", db, f, "-o", out, *(["--separator", SPECIAL] if sep else []), "-q")
    assert r.exit_code == 0, r.output
    assert ids_of(out) == expected(tok, docs, sep)


def test_a_jsonl_encodes_as_its_documents_joined_by_the_separator_as_text(setup, tmp_path):
    """As in training: a jsonl file is the same documents written as one text with the separator."""
    db, docs, _ = setup
    jl, txt = tmp_path / "d.jsonl", tmp_path / "d.txt"
    write_jsonl(jl, docs)
    txt.write_text("".join(d + SPECIAL for d in docs), encoding="utf-8")
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    assert cli("encode", db, jl, "-o", a, "--separator", SPECIAL, "-q").exit_code == 0
    assert cli("encode", db, txt, "-o", b, "-q").exit_code == 0
    assert ids_of(a) == ids_of(b)


def test_parquet_text_field_and_row_groups(setup, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    db, docs, tok = setup
    f = tmp_path / "d.parquet"
    pq.write_table(pa.table({"content": docs, "n": list(range(len(docs)))}), f, row_group_size=7)
    out = tmp_path / "o.npy"
    r = cli("encode", db, f, "-o", out, "--text-field", "content", "--separator", SPECIAL, "-q")
    assert r.exit_code == 0, r.output
    assert ids_of(out) == expected(tok, docs, True)
    r = cli("encode", db, f, "-o", tmp_path / "x.npy", "-q")  # no column "text"
    assert r.exit_code == 2 and "text" in r.stderr


def test_compressed_text_globs_and_folders(setup, tmp_path):
    db, docs, tok = setup
    shards = tmp_path / "shards"
    shards.mkdir()
    for i in range(3):
        (shards / f"part-{i}.txt.gz").write_bytes(gzip.compress(docs[i].encode()))
    (shards / "skip.md").write_text("not this")
    want = expected(tok, docs[:3], True)
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    r = cli("encode", db, shards, "--glob", "*.txt.gz", "-o", a, "--separator", SPECIAL, "-q")
    assert r.exit_code == 0, r.output
    r = cli("encode", db, str(shards / "part-*.txt.gz"), "-o", b, "--separator", SPECIAL, "-q")
    assert r.exit_code == 0, r.output
    assert ids_of(a) == ids_of(b) == want


@pytest.mark.parametrize("fmt", ["text", "jsonl"])
def test_stdin(setup, tmp_path, fmt):
    db, docs, tok = setup
    if fmt == "text":
        data, want = docs[0].encode(), expected(tok, docs[:1], True)
    else:
        data = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode()
        want = expected(tok, docs, True)
    out = tmp_path / "o.npy"
    r = cli("encode", db, "-", "--format", fmt, "-o", out, "--separator", SPECIAL, "-q", input=data)
    assert r.exit_code == 0, r.output
    assert ids_of(out) == want


def test_val_fraction_goes_over_records(setup, tmp_path):
    db, docs, tok = setup
    f = tmp_path / "d.jsonl"
    write_jsonl(f, docs)
    out = tmp_path / "train.bin"
    r = cli("encode", db, f, "-o", out, "--val-fraction", "0.25", "-q")  # no separator: records still split
    assert r.exit_code == 0, r.output
    val = [d for i, d in enumerate(docs) if (i + 1) // 4 > i // 4]
    rest = [d for i, d in enumerate(docs) if not (i + 1) // 4 > i // 4]
    assert ids_of(tmp_path / "val.bin") == expected(tok, val, False)
    assert ids_of(out) == expected(tok, rest, False)


def test_a_bad_record_names_its_line(setup, tmp_path):
    db, _, _ = setup
    f = tmp_path / "bad.jsonl"
    f.write_text('{"text": "ok"}\n{"txt": "no field"}\n')
    out = tmp_path / "o.npy"
    r = cli("encode", db, f, "-o", out, "-q")
    assert r.exit_code == 2 and "line 2" in r.stderr and not out.exists()
