"""``status``, ``sql``, ``show`` and ``why``: read-only inspection, also while a run trains."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, cli_cmd, env, run
from conftest import SMALL_TEXT

from bpe_store.errors import Interrupted, StoreError
from bpe_store.inspection import answers
from bpe_store.store import migrate
from bpe_store.store.store import Store
from bpe_store.training.train import read_result, train

VOCAB = 400
TARGET = VOCAB - 257


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("inspect") / "run.db"
    r = run("train", SMALL_TEXT, "--db", db, "--vocab-size", VOCAB, "--special", SPECIAL,
            "--checkpoint-merges", "50", "--quiet")
    assert r.exit_code == 0, r.output
    return db


@pytest.fixture(scope="module")
def stopped_path(tmp_path_factory) -> Path:
    """A store stopped mid-merge (as Ctrl-C leaves it)."""
    db = tmp_path_factory.mktemp("stopped") / "run.db"
    stop = threading.Event()

    def progress(e: dict) -> None:
        if e["stage"] == "checkpoint" and e.get("phase") == "merging" and e["done"] >= 40:
            stop.set()

    with pytest.raises(Interrupted):
        train([SMALL_TEXT], db, VOCAB, [SPECIAL], checkpoint_merges=20,
              progress=progress, stop=stop)
    return db


def merges_of(db: Path) -> list[tuple[bytes, bytes]]:
    with Store.open(db, readonly=True) as store:
        return read_result(store).merges


# -- status ------------------------------------------------------------------------------------


def test_status_of_a_finished_run(store_path):
    r = run("status", store_path)
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert "phase        done (vocab_size)" in text
    assert f"merges       {TARGET} / {TARGET} (100.0%)" in text
    assert "running      no" in text
    assert str(SMALL_TEXT.resolve()) in text and "  ok" in text
    assert "checkpoint   " in text and "ETA 0:00:00" in text
    assert f"schema {migrate.SCHEMA_HEAD}" in text


def test_status_json(store_path):
    r = run("status", store_path, "--json")
    st = json.loads(r.stdout)
    assert st["phase"] == "done" and st["merges_done"] == st["merges_target"] == TARGET
    assert st["held"] is False and st["holder"] is None
    assert st["db_bytes"] >= store_path.stat().st_size > 0
    assert st["counting"]["bytes_done"] == st["counting"]["bytes_total"] == SMALL_TEXT.stat().st_size
    assert st["inputs"][0]["state"] == "ok" and len(st["inputs"][0]["digest"]) == 32
    assert st["inputs"][0]["hash"] == "xxh3_128_units"  # text: fingerprinted as it is counted
    assert st["last_checkpoint"]["merges_done"] == TARGET and st["eta_s"] == 0.0
    assert [s["outcome"] for s in st["sessions"]] == ["done"]
    assert st["sessions"][0]["merges_start"] == 0 and st["sessions"][0]["merges_end"] == TARGET
    assert st["sessions"][0]["argv"] and st["special_tokens"] == [SPECIAL]


def test_status_of_a_stopped_run_has_an_eta(stopped_path):
    st = json.loads(run("status", stopped_path, "--json").stdout)
    assert st["phase"] == "merging" and 0 < st["merges_done"] < TARGET
    assert st["speed"] > 0 and st["eta_s"] > 0 and st["speed_unit"] == "merges/s"
    assert st["sessions"][-1]["outcome"] == "interrupted"


def test_status_says_when_a_process_holds_the_store(stopped_path):
    with Store.open(stopped_path):  # a writer holds the lock, as a training run does
        st = json.loads(run("status", stopped_path, "--json").stdout)
        text = run("status", stopped_path).stdout
    assert st["held"] is True and "running      yes" in text


@pytest.fixture(scope="module")
def counting_path(tmp_path_factory) -> Path:
    """A store stopped while counting, after a few flushes (and one resumed session's flushes)."""
    db = tmp_path_factory.mktemp("counting") / "run.db"
    for part in (0.3, 0.6):  # stop when this share of the input is counted
        stop = threading.Event()

        def progress(e: dict, stop=stop, part=part) -> None:
            if e["stage"] == "counting" and e["done"] >= part * e["total"]:
                stop.set()

        with pytest.raises(Interrupted):
            train([SMALL_TEXT.parent / "enwiki-1M.txt"], db, VOCAB, [SPECIAL], chunk_size=20_000,
                  count_flush_seconds=0.0, progress=progress, stop=stop)
    return db


@pytest.mark.parametrize("which", ["counting_path", "stopped_path", "store_path"])
def test_status_and_the_progress_view_answer_from_summaries_equal_to_full_counts(which, request):
    """``words`` comes from ``max(words.id)``, not a scan of the table; it must equal the count,
    while counting (two sessions' flushes), mid-merge and done. The progress view gives the same
    (before v0_3_0_progress_view it failed: json_array_length is unsafe with trusted_schema off)."""
    import sqlite3

    db = request.getfixturevalue(which)
    st = answers.status(db)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    words, merges = con.execute("SELECT (SELECT count(*) FROM words), (SELECT count(*) FROM merges)").fetchone()
    con.close()
    assert words > 0 and st["words"] == words and st["merges_done"] == merges
    columns, rows = answers.sql(db, "SELECT * FROM progress")
    got = dict(zip(columns, rows[0]))
    assert got["words"] == words and got["merges_done"] == merges and got["merges_target"] == TARGET
    assert got["phase"] == st["phase"] and got["chunks_counted"] == st["counting"]["chunks_done"]
    if which == "counting_path":
        assert st["phase"] == "counting" and 0 < st["counting"]["chunks_done"] < st["counting"]["chunks_total"]


# -- sql ---------------------------------------------------------------------------------------


def test_sql_table_csv_json(store_path):
    q = "SELECT rank, token, count FROM merge_log WHERE rank < 3"
    table = run("sql", store_path, q)
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["rank", "token", "count"] and set(lines[1]) <= {"-", " "}
    assert lines[2].startswith("   0  ' t'  ")  # a token beginning with a space is quoted
    csv = run("sql", store_path, q, "--format", "csv").stdout.splitlines()
    assert csv[0] == "rank,token,count" and csv[1].startswith("0, t,")
    rows = json.loads(run("sql", store_path, q, "-f", "json").stdout)
    assert rows[0]["rank"] == 0 and rows[0]["token"] == " t" and len(rows) == 3
    limited = json.loads(run("sql", store_path, "SELECT * FROM vocab", "--limit", "2", "-f", "json").stdout)
    assert len(limited) == 2


def test_sql_jsonl_and_limits(store_path):
    q = "SELECT rank, token, count FROM merge_log"
    lines = run("sql", store_path, q, "-f", "jsonl", "--limit", "3").stdout.splitlines()
    assert [json.loads(x)["rank"] for x in lines] == [0, 1, 2]
    assert json.loads(run("sql", store_path, q, "-f", "json").stdout) == [
        json.loads(x) for x in run("sql", store_path, q, "-f", "jsonl").stdout.splitlines()]
    empty = "SELECT * FROM merges WHERE rank < 0"
    assert json.loads(run("sql", store_path, empty, "-f", "json").stdout) == []
    assert run("sql", store_path, empty, "-f", "jsonl").stdout == ""
    assert run("sql", store_path, empty, "-f", "csv").stdout == "rank,left,right,token,count\n"
    assert run("sql", store_path, q, "--limit", "-1").exit_code == 2


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "jsonl"])
def test_sql_output_streams_rows_as_it_reads_them(fmt):
    """Rows are written while they are read (the first ones long before the last is read), and
    the output equals the whole-list rendering."""
    from bpe_store.cli import output

    n = 5 * output.TABLE_WIDTH_ROWS
    read = 0

    def rows():
        nonlocal read
        for i in range(n):
            read += 1
            yield (i, f"w{i}", b" \xe2" if i % 7 == 0 else None)

    read_at_write: list[int] = []

    class Out(io.StringIO):
        def write(self, text):
            read_at_write.append(read)
            return super().write(text)

    out = Out()
    assert output.write_rows(out, ["id", "word", "blob"], rows(), output.Format(fmt)) == n
    assert min(r for r in read_at_write if r > 0) <= 2 * output.TABLE_WIDTH_ROWS < n
    rows_list = [(i, f"w{i}", b" \xe2" if i % 7 == 0 else None) for i in range(n)]
    assert out.getvalue().rstrip("\n") == output.render(["id", "word", "blob"], rows_list, output.Format(fmt))


@pytest.mark.slow
def test_sql_memory_does_not_grow_with_rows(store_path):
    """A query of ~1M rows streams: the process stays within a few MB of one of 10 rows."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc (Linux) to read the process's own peak memory")
    # VmHWM, not ru_maxrss: the latter keeps the forking pytest's peak across exec
    script = ("import re, sys; from bpe_store.cli.main import main\n"
              "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
              "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1), file=sys.stderr)")
    q = ("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {}) "
         "SELECT i, printf('%0100d', i) AS pad FROM n")

    def peak_kb(rows: int, fmt: str) -> int:
        out = subprocess.run([sys.executable, "-c", script, "sql", str(store_path), q.format(rows), "-f", fmt],
                             capture_output=True, text=True, env=env(), timeout=300)
        assert out.returncode == 0, out.stderr
        return int(out.stderr.strip().splitlines()[-1])

    for fmt in ("table", "jsonl"):
        small, big = peak_kb(10, fmt), peak_kb(300_000, fmt)
        assert big - small < 20_000, (fmt, small, big)  # all rows held would be > 60 MB


def test_tables_measure_width_in_terminal_cells():
    from bpe_store.cli.output import Format, render

    lines = render(["token", "n"], [("日本語", 1), ("abc", 22), ("e\u0301", 3)], Format.table).splitlines()
    from bpe_store.inspection.display import width

    assert len({width(line.rstrip()) for line in lines}) == 1, lines  # every line ends in the same cell


def test_one_escaped_form_for_tokens_in_every_view(store_path, stopped_path):
    # whitespace-only and partial-UTF-8 tokens: quoted and escaped alike by show (bytes) and sql (text)
    show = run("show", store_path, "vocab", "-n", "300").stdout
    sql = run("sql", store_path, "SELECT id, token FROM vocab_text WHERE id < 300").stdout
    for shown in ("'\\n'", "' '", "'\\xe2'", "'\\\\'", "'\\x00'", "'\\xa0'"):
        assert shown in show and shown in sql, shown
    # the views carry hex for scripts
    hexes = json.loads(run("sql", store_path, "SELECT token, token_hex, left_hex, right_hex FROM merge_log "
                                              "LIMIT 5", "-f", "json").stdout)
    for r in hexes:
        assert bytes.fromhex(r["token_hex"]) == bytes.fromhex(r["left_hex"]) + bytes.fromhex(r["right_hex"])
        assert bytes.fromhex(r["token_hex"]).decode("utf-8", "backslashreplace") == r["token"]
    word = json.loads(run("sql", store_path, "SELECT word, word_hex FROM top_words LIMIT 1", "-f", "json").stdout)[0]
    assert bytes.fromhex(word["word_hex"]).decode() == word["word"]
    # pair counts are the merging's working state: a stopped run's checkpoint has them
    pair = json.loads(run("sql", stopped_path, "SELECT left_hex, right_hex FROM top_pairs LIMIT 1",
                          "-f", "json").stdout)
    assert len(pair) == 1 and pair[0]["left_hex"]


def test_sql_blobs_and_invalid_utf8_are_shown_not_fatal(store_path):
    r = run("sql", store_path, "SELECT bytes, CAST(bytes AS TEXT) AS t FROM vocab WHERE id IN (11, 257)")
    assert r.exit_code == 0, r.output
    assert "'\\n'" in r.stdout
    assert "\\xff" in run("sql", store_path, "SELECT token FROM vocab_text WHERE id = 256").stdout


@pytest.mark.parametrize("statement", [
    "DELETE FROM merges", "DROP TABLE merges", "UPDATE run SET vocab_size = 1",
    "CREATE TABLE x (a)", "PRAGMA query_only = OFF; DELETE FROM merges",
])
def test_sql_refuses_writes(store_path, statement):
    before = merges_of(store_path)
    r = run("sql", store_path, statement)
    assert r.exit_code == 2
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.output
    assert merges_of(store_path) == before


def test_sql_errors_are_one_line(store_path):
    r = run("sql", store_path, "SELECT nope FROM merges")
    assert r.exit_code == 2 and r.stderr == "error: SQL error: no such column: nope\n"


# -- show --------------------------------------------------------------------------------------


def test_show_merges_words_pairs_vocab(store_path, stopped_path):
    merges = merges_of(store_path)
    rows = json.loads(run("show", store_path, "merges", "--limit", "5", "-f", "json").stdout)
    assert [(r["left"].encode(), r["right"].encode()) for r in rows] == merges[:5]
    assert [r["rank"] for r in rows] == list(range(5))
    table = run("show", store_path, "merges", "-n", "3").stdout.splitlines()
    assert table[0].split() == ["rank", "left", "right", "token", "count", "token_id"] and len(table) == 5
    assert "' '" in table[2] and "' t'" in table[2]
    words = json.loads(run("show", store_path, "words", "-f", "json").stdout)
    assert len(words) == 20 and [w["count"] for w in words] == sorted((w["count"] for w in words), reverse=True)
    # n_tokens: each word's split under the store's merges, which a finished run does not store
    assert all(1 <= w["n_tokens"] <= w["n_bytes"] for w in words) and any(w["n_tokens"] < w["n_bytes"] for w in words)
    # a finished run keeps its most frequent pairs: the next merges
    assert len(json.loads(run("show", store_path, "pairs", "-n", "3", "-f", "json").stdout)) == 3
    pairs = json.loads(run("show", stopped_path, "pairs", "-n", "4", "-f", "json").stdout)
    assert len(pairs) == 4 and pairs[0]["count"] >= pairs[-1]["count"]
    vocab = json.loads(run("show", store_path, "vocab", "--offset", "1", "-n", "2", "-f", "json").stdout)
    assert [v["id"] for v in vocab] == [1, 2] and vocab[0]["token"] == "\x00" and vocab[0]["kind"] == "byte"
    special = json.loads(run("show", store_path, "vocab", "-n", "1", "-f", "json").stdout)[0]
    assert special == {"id": 0, "token": SPECIAL, "kind": "special", "n_bytes": len(SPECIAL)}


def test_show_bad_limit_is_a_usage_error(store_path):
    r = run("show", store_path, "merges", "--limit", "-1")
    assert r.exit_code == 2 and "must not be negative" in r.stderr


# -- why ---------------------------------------------------------------------------------------


def test_why_the(store_path):
    r = run("why", store_path, " the")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("' the'  (id ") and ", count " in lines[0]
    assert any(line.startswith("├── ' t'") for line in lines)
    assert any("'h'" in line and "byte" in line for line in lines)
    info = json.loads(run("why", store_path, " the", "--json").stdout)
    tree = info["token"]
    assert tree["kind"] == "merge" and tree["bytes"] == " the"
    assert "".join(p["bytes"] for p in tree["parts"]) == " the"
    assert tree["count"] <= min(p["count"] for p in tree["parts"] if p["count"] is not None)
    assert info["words"][0]["word"] == " the" and info["words"][0]["uses"] is True
    counts = [w["count"] for w in info["words"]]
    assert counts == sorted(counts, reverse=True) and info["words_containing"] >= len(counts)


def test_why_by_id_and_bytes(store_path):
    by_text = json.loads(run("why", store_path, " t", "--json").stdout)
    by_id = json.loads(run("why", store_path, str(by_text["token"]["id"]), "--id", "--json").stdout)
    assert by_id["token"] == by_text["token"]
    byte = json.loads(run("why", store_path, "e", "--json").stdout)["token"]
    assert byte["kind"] == "byte" and byte["parts"] == []


@pytest.mark.parametrize("args, answer", [
    ([SPECIAL], "a special token: never inside a word"),
    (["255", "--id"], "no word the store counted holds these bytes"),  # 0xFE: never in UTF-8
    ([" the"], "listed words use"),
    ([" the", "-n", "0"], "none listed: --limit 0"),
])
def test_why_always_ends_in_an_answer(store_path, args, answer):
    r = run("why", store_path, *args)
    assert r.exit_code == 0, r.output
    last = r.stdout.splitlines()[-1]
    assert answer in last and not last.endswith(":")
    info = json.loads(run("why", store_path, *args, "--json").stdout)
    assert answer in info["answer"]


def test_why_says_when_no_listed_word_uses_the_token(store_path):
    """A token every frequent word holding it merged further (' t' is inside ' the' and ' to')."""
    for tid in range(257, VOCAB):
        info = json.loads(run("why", store_path, str(tid), "--id", "-n", "3", "--json").stdout)
        if info["words"] and not any(w["uses"] for w in info["words"]):
            assert info["answer"].startswith("none of the 3 listed words uses it")
            return
    pytest.fail("no such token in the store")


@pytest.mark.parametrize("args, message", [
    (["qqqzzz"], "is not a token of this vocabulary"),
    (["99999", "--id"], "no token with id 99999"),
    (["abc", "--id"], "--id needs an integer id"),
])
def test_why_unknown_tokens(store_path, args, message):
    r = run("why", store_path, *args)
    assert r.exit_code == 2 and message in r.stderr and r.stderr.count("\n") == 1


# -- reading while a run writes ------------------------------------------------------------------

CONSISTENCY = ("SELECT (SELECT count(*) FROM merges), (SELECT max(rank) FROM merges),"
               " (SELECT count(*) FROM vocab), (SELECT merges_done FROM checkpoints ORDER BY id DESC LIMIT 1),"
               " (SELECT phase FROM run), (SELECT count(*) FROM merges m JOIN vocab v ON v.id = 257 + m.rank)")


@pytest.mark.slow
def test_readers_see_consistent_snapshots_while_a_run_writes(tmp_path):
    db = tmp_path / "live.db"
    target = 1500 - 257
    proc = subprocess.Popen(
        cli_cmd("train", SMALL_TEXT, "--db", db, "--vocab-size", "1500", "--special", SPECIAL,
                "--checkpoint-merges", "10", "--quiet"), env=env())
    seen_mid, held_by_it, via_cli, seen_any = set(), False, 0, False
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if not db.exists():
                time.sleep(0.01)
                continue
            try:
                _, rows = answers.sql(db, CONSISTENCY)
                st = answers.status(db) if rows[0][4] is not None else None
            except StoreError:
                if seen_any:
                    raise
                continue  # the store is being created (schema and run row not yet committed)
            merges, max_rank, vocab, last, phase, joined = rows[0]
            if phase is None:  # the schema is there, the run's first transaction not yet
                assert not seen_any and merges == vocab == 0
                continue
            assert vocab == 257 + merges and joined == merges
            assert max_rank == (merges - 1 if merges else None)
            seen_any = True
            if phase != "counting":
                assert last == merges
            if 0 < merges < target:
                seen_mid.add(merges)
                if st["held"] and st["holder"] and st["holder"]["pid"] == proc.pid:
                    held_by_it = held_by_it or st["sessions"][-1]["state"] == "running"
                if via_cli < 3:
                    r = run("sql", db, "SELECT count(*) AS n FROM merges", "-f", "json")
                    assert r.exit_code == 0, r.output
                    assert json.loads(r.stdout)[0]["n"] >= merges
                    via_cli += 1
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == 0
    assert len(seen_mid) >= 3, seen_mid
    assert held_by_it
    assert json.loads(run("status", db, "--json").stdout)["held"] is False


def test_status_counts_a_wal_that_vanishes_as_it_looks(tmp_path, monkeypatch):
    """A run that closes removes its WAL: status, looking at the store meanwhile, counts it 0
    (it once found the file, then failed to stat it: FileNotFoundError under load)."""
    from bpe_store.inspection import answers as insp

    db = tmp_path / "s.db"
    db.write_bytes(b"x" * 100)
    monkeypatch.setattr(Path, "exists", lambda self: True)  # the WAL was there when looked for
    assert insp._db_bytes(db) == 100
