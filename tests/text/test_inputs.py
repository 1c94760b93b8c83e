"""Input kinds: text, jsonl and parquet files, compressed or not, standard input and
Python iterables all train exactly as the same documents written as one text file with
``<|endoftext|>`` between them; each kind resumes after a kill; bad records are one line
naming the file and the line / row group, exit 2, and the store keeps its last checkpoint."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import cli_cmd, env, run
from conftest import FIXTURES, ROOT

from bpe_store import InputError, ResumeMismatch, train, train_from_iterator
from bpe_store.text.inputs import file_input
from bpe_store.text.pretokenize import DOC_SEP
from bpe_store.text.streams import Stream

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
zstandard = pytest.importorskip("zstandard")

EOT = "<|endoftext|>"
PARAMS = dict(vocab_size=420, special_tokens=[EOT], chunk_size=30_000, workers=2)

# Documents that would merge or pre-tokenize differently if a boundary were crossed: a word
# cut in two, a special token cut in two, whitespace at the edges, empty documents, non-ASCII.
EDGE_DOCS = ["abc", "def", "<|endof", "text|>", "  ", "", "x\n", "\n y", "naïve café", "日本語", "'s", "s"]


def documents() -> list[str]:
    text = (FIXTURES / "enwiki-1M.txt").read_text(encoding="utf-8")
    docs = [d for d in text.split(EOT)][:120]
    return docs[:60] + EDGE_DOCS + docs[60:]


def write_text(path: Path, docs: list[str]) -> Path:
    path.write_bytes(EOT.join(docs).encode("utf-8"))
    return path


def jsonl_bytes(docs: list[str], field: str = "text") -> bytes:
    return "".join(json.dumps({"id": i, field: d}) + "\n" for i, d in enumerate(docs)).encode("utf-8")


def compress(data: bytes, compression: str) -> bytes:
    return {"none": lambda b: b, "gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress,
            "zst": lambda b: zstandard.ZstdCompressor().compress(b)}[compression](data)


def write_parquet(path: Path, docs: list[str], row_group_size: int = 25, column: str = "text") -> Path:
    pq.write_table(pa.table({"n": list(range(len(docs))), column: docs}), path, row_group_size=row_group_size)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The documents as one text file with <|endoftext|> between them, trained."""
    d = tmp_path_factory.mktemp("ref")
    docs = documents()
    return docs, train([write_text(d / "ref.txt", docs)], d / "ref.db", **PARAMS)


def same(result, expected) -> None:
    assert result.merges == expected.merges
    assert result.merge_counts == expected.merge_counts


@pytest.mark.parametrize("compression", ["none", "gz", "zst", "bz2", "xz"])
@pytest.mark.parametrize("kind", ["text", "jsonl"])
def test_each_kind_and_compression_trains_as_the_text_with_separators(tmp_path, reference, kind, compression):
    docs, expected = reference
    raw = EOT.join(docs).encode("utf-8") if kind == "text" else jsonl_bytes(docs)
    suffix = {"text": ".txt", "jsonl": ".jsonl"}[kind] + ("" if compression == "none" else f".{compression}")
    path = tmp_path / f"in{suffix}"
    path.write_bytes(compress(raw, compression))
    # a small chunk size: several units (uncompressed) or several blocks per unit (compressed)
    same(train([path], tmp_path / "run.db", **{**PARAMS, "chunk_size": 20_000}), expected)


def test_parquet_trains_as_the_text_with_separators(tmp_path, reference):
    docs, expected = reference
    same(train([write_parquet(tmp_path / "in.parquet", docs)], tmp_path / "run.db", **PARAMS), expected)
    # several batches per row group
    path = write_parquet(tmp_path / "big-groups.parquet", docs, row_group_size=1000)
    same(train([path], tmp_path / "run2.db", **{**PARAMS, "chunk_size": 5_000}), expected)


def test_documents_are_boundaries_without_special_tokens(tmp_path, reference):
    """No special token given: documents still split as <|endoftext|> splits the text."""
    docs, expected = reference
    path = tmp_path / "in.jsonl"
    path.write_bytes(jsonl_bytes(docs))
    result = train([path], tmp_path / "run.db", **{**PARAMS, "special_tokens": [], "vocab_size": 419})
    assert result.merges == expected.merges


def test_regex_pattern_path_reads_every_kind(tmp_path, reference):
    """A non-GPT-2 pattern counts through `regex` (worker processes): the same documents."""
    docs, _ = reference
    pattern = r"\p{L}+|\p{N}+|[^\s\p{L}\p{N}]+|\s+"
    p = dict(PARAMS, pattern=pattern, vocab_size=350)
    expected = train([write_text(tmp_path / "ref.txt", docs)], tmp_path / "ref.db", **p)
    jl = tmp_path / "in.jsonl.gz"
    jl.write_bytes(gzip.compress(jsonl_bytes(docs)))
    same(train([jl], tmp_path / "a.db", **p), expected)
    same(train([write_parquet(tmp_path / "in.parquet", docs)], tmp_path / "b.db", **p), expected)


def test_format_and_text_field_override_the_extension(tmp_path, reference):
    docs, expected = reference
    path = tmp_path / "data.log"
    path.write_bytes(jsonl_bytes(docs, field="content"))
    same(train([path], tmp_path / "run.db", format="jsonl", text_field="content", **PARAMS), expected)
    assert file_input("a.jsonl.gz") == file_input(Path("a.jsonl.gz"), "jsonl")
    assert file_input("x.JSONL").format == "jsonl" and file_input("x.txt.zst").compression == "zst"


def test_multi_shard_mixed_kinds_equal_one_text(tmp_path, reference):
    docs, expected = reference
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(jsonl_bytes(docs[:50])))
    write_parquet(tmp_path / "b.parquet", docs[50:100])
    (tmp_path / "c.jsonl").write_bytes(jsonl_bytes(docs[100:]))
    inputs = [tmp_path / "a.jsonl.gz", tmp_path / "b.parquet", tmp_path / "c.jsonl"]
    same(train(inputs, tmp_path / "run.db", **PARAMS), expected)


# -- streams --------------------------------------------------------------------------------------


def test_iterator_rows_and_dataset_equal_the_file_run(tmp_path, reference):
    docs, expected = reference
    same(train_from_iterator(iter(docs), tmp_path / "a.db", **PARAMS), expected)
    same(train_from_iterator(({"text": d, "id": 1} for d in docs), tmp_path / "b.db", **PARAMS), expected)

    class FakeDataset:  # what an HF datasets.Dataset offers: column_names and iter(batch_size)
        column_names = ["id", "body"]

        def iter(self, batch_size):
            for i in range(0, len(docs), batch_size):
                yield {"body": docs[i:i + batch_size], "id": list(range(i, i + batch_size))}

    same(train_from_iterator(FakeDataset(), tmp_path / "c.db", text_column="body", **PARAMS), expected)

    class FakeIterableDataset(FakeDataset):  # column_names may be None for an IterableDataset
        column_names = None

    same(train_from_iterator(FakeIterableDataset(), tmp_path / "c2.db", text_column="body", **PARAMS), expected)
    with pytest.raises(InputError, match="no column 'text'"):
        train_from_iterator(FakeIterableDataset(), tmp_path / "c3.db", **PARAMS)
    with pytest.raises(InputError, match="no column 'text'"):
        train_from_iterator(FakeDataset(), tmp_path / "d.db", **PARAMS)
    with pytest.raises(InputError, match="document 2 is a number"):
        train_from_iterator(["a", 5], tmp_path / "e.db", **PARAMS)


@pytest.mark.slow
def test_stdin_text_and_jsonl_equal_the_file_run(tmp_path, reference):
    docs, expected = reference
    for fmt, data in (("text", EOT.join(docs).encode("utf-8")), ("jsonl", jsonl_bytes(docs))):
        db = tmp_path / f"{fmt}.db"
        proc = subprocess.run(cli_cmd("train", "-", "--db", db, "--vocab-size", 420, "--special", EOT,
                                      "--format", fmt, "--chunk-size", 20_000, "--quiet"),
                              input=data, capture_output=True, env=env(), timeout=120)
        assert proc.returncode == 0, proc.stderr
        same(train(Stream.stdin(fmt), db, **PARAMS), expected)  # finished: stdin is not read


STOPPABLE = dict(PARAMS, chunk_size=2_000, count_flush_seconds=0.0)


def stopped_iterator_run(db: Path, docs: list[str], after: int) -> int:
    """Train on ``docs`` as an iterable, stopped (as Ctrl-C stops it) once ``after`` documents
    were given; the documents the store says it counted."""
    import threading

    stop = threading.Event()

    def stopping_after(n):
        for i, d in enumerate(docs):
            if i == n:
                stop.set()
            yield d

    with pytest.raises(Exception, match="holds its first"):
        train_from_iterator(stopping_after(after), db, stop=stop, **STOPPABLE)
    return counted_documents(db)


def test_stopped_iterator_resumes_from_where_the_store_says(tmp_path, reference):
    """Interrupted while counting: given the same documents again it skips the counted ones;
    other documents are refused (exit 3)."""
    docs, expected = reference
    db = tmp_path / "run.db"
    p = STOPPABLE
    counted = stopped_iterator_run(db, docs, 70)
    assert 0 < counted < len(docs)
    with pytest.raises(ResumeMismatch, match="not the one"):
        train_from_iterator(iter(["other"] + docs[1:]), db, **p)
    with pytest.raises(ResumeMismatch, match="not the one"):
        train_from_iterator(iter(docs[:counted - 1]), db, **p)
    same(train_from_iterator(iter(docs), db, **p), expected)


def test_status_shows_how_much_of_a_stream_was_counted(tmp_path, reference):
    """A stream's inputs row says it is a stream and how many documents of it were counted
    (what a resume skips), in the text and the JSON of ``status``; a file's row shows its kind."""
    docs, _ = reference
    db = tmp_path / "run.db"
    counted = stopped_iterator_run(db, docs, 70)
    st = json.loads(run("status", db, "--json").stdout)
    (inp,) = st["inputs"]
    assert inp["path"] == "<iterable>" and inp["state"] == "stream"
    assert inp["documents"] == counted and 0 < counted < len(docs) and inp["format"] == "iterable"
    line = next(ln for ln in run("status", db).stdout.splitlines() if "<iterable>" in ln)
    assert f"counted  {counted} documents" in line and line.endswith("  stream")

    path = tmp_path / "in.jsonl.gz"
    path.write_bytes(gzip.compress(jsonl_bytes(docs, field="body")))
    train([path], tmp_path / "file.db", format="jsonl", text_field="body", **PARAMS)
    (inp,) = json.loads(run("status", tmp_path / "file.db", "--json").stdout)["inputs"]
    assert (inp["format"], inp["compression"], inp["text_field"], inp["documents"], inp["state"]) == (
        "jsonl", "gz", "body", None, "ok")
    assert "in.jsonl.gz  jsonl field 'body' (gz)  " in run("status", tmp_path / "file.db").stdout


@pytest.mark.slow
def test_stdin_killed_then_given_again_resumes_identically(tmp_path, reference):
    docs, expected = reference
    data = jsonl_bytes(docs)
    db = tmp_path / "run.db"
    args = cli_cmd("train", "-", "--db", db, "--vocab-size", 420, "--special", EOT, "--format", "jsonl",
                   "--chunk-size", 2_000, "--quiet")
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, env=env(), cwd=ROOT)
    proc.stdin.write(data[: len(data) // 2])  # half the stream, then nothing: the run waits
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and counted_documents(db) == 0:
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    proc.stdin.close()
    assert 0 < counted_documents(db) < len(docs)
    proc = subprocess.run(args, input=data, capture_output=True, env=env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    same(train(Stream.stdin("jsonl"), db, **PARAMS), expected)


def counted_documents(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = con.execute("SELECT documents FROM sources").fetchone()
        return (row[0] or 0) if row else 0
    except sqlite3.Error:
        return 0
    finally:
        con.close()


# -- resume ---------------------------------------------------------------------------------------


RUNNER = """
import sys
from bpe_store import train
train(sys.argv[2:], sys.argv[1], 420, ["<|endoftext|>"], workers=2, chunk_size=3_000,
      count_flush_seconds=0.0, checkpoint_merges=5, checkpoint_seconds=0.2)
"""


@pytest.mark.slow
def test_sigkill_while_counting_shards_resumes_identically(tmp_path, reference):
    """jsonl.gz shards (whole-file units) and a parquet file (row groups), killed -9 after some
    units are counted, then resumed: the result of an uninterrupted run."""
    docs, _ = reference
    shards = []
    for i in range(4):
        p = tmp_path / f"part-{i}.jsonl.gz"
        p.write_bytes(gzip.compress(jsonl_bytes(docs[i * 20:(i + 1) * 20])))
        shards.append(p)
    shards.append(write_parquet(tmp_path / "rest.parquet", docs[80:], row_group_size=5))
    expected = train(shards, tmp_path / "whole.db", 420, [EOT], workers=2, chunk_size=3_000)
    db = tmp_path / "killed.db"
    argv = [sys.executable, "-c", RUNNER, str(db), *map(str, shards)]
    seen = []
    for target in (1, 4, 8):
        proc = subprocess.Popen(argv, cwd=ROOT, env=env())
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and units_counted(db) < target:
            time.sleep(0.005)
        proc.kill()
        proc.wait()
        seen.append(units_counted(db))
    assert seen == sorted(seen) and seen[0] > 0, seen
    assert subprocess.run(argv, cwd=ROOT, env=env(), timeout=300).returncode == 0
    same(train(shards, db, 420, [EOT]), expected)


def units_counted(db: Path) -> int:
    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT count(*) FROM chunks WHERE counted = 1").fetchone()[0]
    except sqlite3.Error:
        return 0
    finally:
        con.close()


def test_units_are_recorded_per_kind(tmp_path, reference):
    docs, _ = reference
    (tmp_path / "a.jsonl").write_bytes(jsonl_bytes(docs))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(jsonl_bytes(docs)))
    write_parquet(tmp_path / "c.parquet", docs, row_group_size=50)
    db = tmp_path / "run.db"
    train([tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz", tmp_path / "c.parquet"], db, **PARAMS)
    con = sqlite3.connect(db)
    kinds = con.execute("SELECT s.format, s.compression, c.kind, count(*) FROM chunks c JOIN sources s"
                        " ON s.id = c.source_id GROUP BY s.id ORDER BY s.id").fetchall()
    ranges = con.execute('SELECT start, "end" FROM chunks WHERE source_id = 0 ORDER BY start').fetchall()
    con.close()
    assert kinds[0][:3] == ("jsonl", "none", "range") and kinds[0][3] > 1
    assert kinds[1] == ("jsonl", "gz", "file", 1)
    assert kinds[2] == ("parquet", "none", "row_group", 3)
    data = (tmp_path / "a.jsonl").read_bytes()
    assert all(data[e - 1:e] == b"\n" for _, e in ranges)  # line-aligned


def test_resume_with_another_format_or_field_is_refused(tmp_path, reference):
    docs, _ = reference
    path = tmp_path / "in.jsonl"
    path.write_bytes(jsonl_bytes(docs))
    db = tmp_path / "run.db"
    train([path], db, **PARAMS)
    with pytest.raises(ResumeMismatch, match="read as jsonl"):
        train([path], db, format="text", **PARAMS)
    result = run("train", path, "--db", db, "--vocab-size", 420, "--special", EOT, "--text-field", "body")
    assert result.exit_code == 3 and "field 'body'" in result.stderr


# -- bad input ------------------------------------------------------------------------------------


def bad_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    good = jsonl_bytes(["hello world"] * 3)
    cases = {}

    def jl(name: str, data: bytes) -> Path:
        p = tmp_path / name
        p.write_bytes(data)
        return p

    cases["no field"] = (jl("nofield.jsonl", good + b'{"body": "x"}\n'), r"nofield.jsonl: line 4: no field 'text'")
    cases["not a string"] = (jl("num.jsonl", good + b'{"text": 12}\n'),
                             r"num.jsonl: line 4: field 'text' is a number, not a string")
    cases["null"] = (jl("null.jsonl", good + b'{"text": null}\n'), r"null.jsonl: line 4: field 'text' is null")
    cases["broken json"] = (jl("broken.jsonl", good + b'{"text": "x"\n' + good),
                            r"broken.jsonl: line 4: broken JSON")
    cases["not an object"] = (jl("arr.jsonl", b'["a"]\n'), r"arr.jsonl: line 1: not a JSON object")
    deep = b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"  # json recurses per level
    cases["nested 100,000 deep"] = (jl("deep.jsonl", good + deep), r"deep.jsonl: line 4: the JSON is nested too deeply")
    cases["broken json, gz"] = (jl("broken.jsonl.gz", gzip.compress(good * 50 + b"{oops\n")),
                                r"broken.jsonl.gz: line 151: broken JSON")
    whole = gzip.compress(good * 2000)
    cases["truncated gzip"] = (jl("cut.jsonl.gz", whole[: len(whole) // 2]), r"cut.jsonl.gz: truncated or corrupt gz")
    zst = zstandard.ZstdCompressor().compress(b"hello " * 100_000)
    cases["truncated zst"] = (jl("cut.txt.zst", zst[: len(zst) // 2]),
                              r"cut.txt.zst: truncated or corrupt zst")
    cases["invalid utf-8 in gz text"] = (jl("bad.txt.gz", gzip.compress(b"hello\nw\xffrld")),
                                         r"bad.txt.gz: invalid UTF-8 at byte 7 of the decompressed text \(line 2\)")
    cases["no column"] = (write_parquet(tmp_path / "nocol.parquet", ["a"], column="body"),
                          r"nocol.parquet: no column 'text' \(columns: n, body\)")
    cases["null in parquet"] = (write_parquet(tmp_path / "null.parquet", ["a", None, "b"], row_group_size=2),
                                r"null.parquet: row group 0, row 1: 'text' is null")
    num = tmp_path / "num.parquet"
    pq.write_table(pa.table({"text": [1, 2]}), num)
    cases["non-string column"] = (num, r"num.parquet: column 'text' holds int64, not strings")
    cases["compressed parquet"] = (jl("x.parquet.gz", gzip.compress(b"x")), r"compressed parquet")
    return cases


@pytest.mark.parametrize("case", ["no field", "not a string", "null", "broken json", "not an object",
                                  "nested 100,000 deep",
                                  "broken json, gz", "truncated gzip", "truncated zst", "invalid utf-8 in gz text",
                                  "no column", "null in parquet", "non-string column", "compressed parquet"])
def test_bad_input_is_one_line_exit_2_and_counts_nothing_of_it(tmp_path, case):
    path, message = bad_cases(tmp_path)[case]
    db = tmp_path / "run.db"
    result = run("train", path, "--db", db, "--vocab-size", 300, "--progress", "none")
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    import re

    assert re.search(message, lines[0]), lines[0]
    assert not db.exists()  # found at plan or while counting: a refused first run leaves no store
    again = run("train", path, "--db", db, "--vocab-size", 300, "--progress", "none")
    assert again.exit_code == 2 and again.stderr == result.stderr  # the same, every time


def test_missing_optional_dependency_says_what_to_install(tmp_path, monkeypatch, reference):
    docs, _ = reference
    path = write_parquet(tmp_path / "in.parquet", docs)
    for mod in ("pyarrow", "pyarrow.parquet"):
        monkeypatch.setitem(sys.modules, mod, None)  # import fails as if not installed
    result = run("train", path, "--db", tmp_path / "run.db", "--vocab-size", 300)
    assert result.exit_code == 2
    assert "pip install 'bpe-store[parquet]'" in result.stderr
    assert not (tmp_path / "run.db").exists()


def test_doc_separator_is_never_in_utf8():
    assert DOC_SEP == b"\xff"
    with pytest.raises(UnicodeDecodeError):
        DOC_SEP.decode("utf-8")


def test_a_unit_is_counted_by_any_process_from_its_description(tmp_path, reference, monkeypatch):
    """What a distributed engine does: pickle a unit, count it elsewhere; the counts equal the
    threaded native path's, and the regex path's for the same pattern spelled differently."""
    import pickle
    from collections import Counter

    from bpe_store.counting.count import UnitTask, count_unit_task
    from bpe_store.counting.parallel import count_units_threaded
    from bpe_store.counting.planning import plan_units, scan_input
    from bpe_store.text.inputs import unit_of
    from bpe_store.text.pretokenize import GPT2_PATTERN, PretokenSpec

    docs, _ = reference
    path = tmp_path / "in.jsonl.gz"
    path.write_bytes(gzip.compress(jsonl_bytes(docs)))
    src = scan_input(file_input(path))
    units = [(i, unit_of(src, k, a, b, p)) for i, (a, b, k, p) in
             enumerate(plan_units(src, PretokenSpec((EOT,)), 10_000))]
    threaded = Counter()
    for _, counts, _ in count_units_threaded([UnitTask(cid, u, PretokenSpec((EOT,)), 10_000) for cid, u in units], 2):
        threaded.update(dict(counts.items()) if hasattr(counts, "items") else counts.to_dict())
    from bpe_store.counting import count

    regex_block = count.count_block
    for pattern in (GPT2_PATTERN, "(?:" + GPT2_PATTERN + ")"):  # native, then regex
        if pattern == GPT2_PATTERN:  # the GPT-2 pattern is counted natively, never by `regex`
            monkeypatch.setattr(count, "count_block", None)
        else:
            monkeypatch.setattr(count, "count_block", regex_block)
        got = Counter()
        for cid, unit in units:
            task = pickle.loads(pickle.dumps(UnitTask(cid, unit, PretokenSpec((EOT,), pattern), 10_000)))
            got.update(count_unit_task(task)[1])
        assert got == threaded


def test_a_json_array_file_says_jsonl_is_one_object_per_line(tmp_path):
    path = tmp_path / "data.json"
    path.write_text('[\n  {"text": "a"}\n]\n')
    result = run("train", path, "--db", tmp_path / "run.db", "--vocab-size", 300, "--progress", "none")
    assert result.exit_code == 2 and "line 1: broken JSON" in result.stderr
    assert "one JSON object per line" in result.stderr
