"""``bpe-store sql --format csv|json|jsonl`` formats rows natively (``answers.write_query``):
the same text as the Python path (``query`` + ``write_rows``), streamed. Its speed beside
``sqlite3 -csv`` is measured by bench/bench_sql_format.py, not asserted here."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, cli_cmd, env, run
from conftest import SMALL_TEXT

from bpe_store import train
from bpe_store.cli.output import Format, write_rows
from bpe_store.inspection import answers


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("sqlfmt") / "run.db"
    train([SMALL_TEXT], p, 400, [SPECIAL])
    return p


QUERIES = [
    "SELECT * FROM merge_log",
    "SELECT * FROM words LIMIT 500",  # blobs (bytes, tokens), NULL tokens
    "SELECT * FROM vocab_text",
    "SELECT 1 AS a, 1 AS a, 2 AS b",  # a repeated name: JSON keeps the first place, the last value
    "SELECT 1.5, 1e16, 1e-5, 0.0001, 1e999, -1e999, -0.0, 123456789.125, 9223372036854775807, -3",
    "SELECT 'a,b', 'q\"x', 'new\nline', 'cr\rx', ' sp ', '', NULL, char(0, 1, 31, 127, 8232), 'é中🙃'",
    "SELECT CAST(x'ff61e4b8' AS TEXT) AS bad, x'00ff' AS blob, CAST(x'e4b8ad' AS TEXT) AS ok",
    "SELECT ''", "SELECT NULL", "SELECT 'x' WHERE 0",
    "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 3000) SELECT i, i * 0.25 FROM r",
    "VALUES (1, 'a'), (2, 'b')",
    "  -- a comment\n select count(*) AS n from words",
]


def python_path(db: Path, statement: str, fmt: str, limit: int | None = None) -> bytes:
    buf = io.StringIO()
    with answers.query(db, statement) as (columns, rows):
        import itertools

        write_rows(buf, columns, itertools.islice(rows, limit), Format(fmt))
    return buf.getvalue().encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl"])
@pytest.mark.parametrize("statement", QUERIES)
def test_native_rows_equal_the_python_path(db, tmp_path, statement, fmt):
    out = tmp_path / "out"
    with open(out, "wb") as f:
        n = answers.write_query(db, statement, f, fmt)
    assert n is not None  # the native path ran
    assert out.read_bytes() == python_path(db, statement, fmt)
    with open(out, "wb") as f:
        assert answers.write_query(db, statement, f, fmt, limit=2) == min(n, 2)
    assert out.read_bytes() == python_path(db, statement, fmt, 2)


def test_the_cli_refuses_writes_and_reports_errors_as_before(db):
    def sub(*args):  # a real stdout (the in-process runner's has no file descriptor)
        return subprocess.run(cli_cmd("sql", db, *args), capture_output=True, text=True, env=env())

    r = sub("SELECT nope FROM merges", "-f", "csv")
    assert r.returncode == 2 and r.stderr == "error: SQL error: no such column: nope\n"
    r = sub("WITH x AS (SELECT 1) DELETE FROM merges", "-f", "csv")
    assert r.returncode == 2 and "read-only" in r.stderr
    r = sub("SELECT randomblob(200000000)", "-f", "jsonl")
    assert r.returncode == 2 and "too big" in r.stderr
    r = sub("SELECT * FROM merge_log", "-f", "csv", "--limit", "3")
    assert r.returncode == 0 and r.stdout.count("\n") == 4
    assert sub("PRAGMA page_size", "-f", "csv").stdout == "page_size\n16384\n"  # the Python path
    assert run("sql", db, "SELECT 1 AS x", "-f", "csv").stdout == "x\n1\n"  # in-process: the Python path


