"""A store may come from someone else: opening it never runs its code, hangs or fails with a
crash; a refused resume writes nothing; ``bpe-store sql`` changes and creates nothing.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, cli_cmd, env, run
from conftest import store_dump

from bpe_store import ResumeMismatch, Store, StoreError, Tokenizer, train
from bpe_store.inspection import answers

VOCAB = 300


@pytest.fixture(scope="module")
def pristine(trained_store) -> Path:
    return trained_store  # VOCAB tokens, [SPECIAL]; the tests tamper with copies


def tampered(tmp_path: Path, pristine: Path, *statements: str) -> Path:
    """A copy of ``pristine`` changed as someone with the sqlite3 shell could."""
    db = tmp_path / "tampered.db"
    shutil.copy(pristine, db)
    con = sqlite3.connect(db)
    con.execute("PRAGMA ignore_check_constraints = ON")
    con.executescript(";\n".join(statements))
    con.commit()
    con.close()
    return db



# -- the schema ------------------------------------------------------------------------------------

HOSTILE_SCHEMA = {
    "trigger": ("CREATE TRIGGER evil AFTER INSERT ON sessions BEGIN DELETE FROM merges; END", "extra trigger 'evil'"),
    "view": ("CREATE VIEW extra AS SELECT 1", "extra view 'extra'"),
    "recursive view": ("DROP VIEW progress; CREATE VIEW progress AS WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL "
                       "SELECT i + 1 FROM r) SELECT count(*) AS phase FROM r", "view 'progress' is not bpe_store's"),
    "index": ("CREATE INDEX words_by_bytes ON words(bytes)", "extra index 'words_by_bytes'"),
    # the one optional index (schema_check.WORDS_BY_COUNT), but not as bpe_store builds it
    "altered optional index": ("CREATE INDEX words_by_count ON words(count) WHERE count > 1",
                               "index 'words_by_count' is not bpe_store's"),
    "altered table": ("DROP TABLE checkpoints; CREATE TABLE checkpoints (id INTEGER PRIMARY KEY, x)",
                      "table 'checkpoints' is not bpe_store's"),
    "missing table": ("DROP TABLE checkpoints", "no table 'checkpoints'"),
}


@pytest.mark.parametrize("kind", list(HOSTILE_SCHEMA))
def test_a_schema_that_is_not_the_migrations_own_is_refused(tmp_path, pristine, corpus, kind):
    statements, what = HOSTILE_SCHEMA[kind]
    db = tampered(tmp_path, pristine, statements)
    before = store_dump(db)
    for args in (["status", db], ["sql", db, "SELECT 1"], ["show", db, "merges"], ["why", db, "t"],
                 ["train", corpus, "--db", db, "--vocab-size", VOCAB, "--special", SPECIAL, "-q"],
                 ["train", corpus, "--db", db, "--vocab-size", VOCAB + 10, "--special", SPECIAL, "-q"]):
        r = run(*args)
        assert r.exit_code == 4, (args, r.output)
        assert "schema is not bpe_store's" in r.stderr and what in r.stderr, r.stderr
    with pytest.raises(StoreError, match="schema is not"):
        Tokenizer.from_store(db)
    assert store_dump(db) == before


def test_schema_code_is_never_trusted(pristine):
    with Store.open(pristine, readonly=True) as store:
        assert store.sql("PRAGMA trusted_schema").scalar() == 0
    with Store.open(pristine) as store:
        assert store.sql("PRAGMA trusted_schema").scalar() == 0


def test_analyze_statistics_are_allowed(tmp_path, pristine):
    db = tampered(tmp_path, pristine, "ANALYZE")
    assert answers.status(db)["merges_done"] == VOCAB - 257


# -- the run row and other contents ----------------------------------------------------------------

DAMAGE = {
    "two schema revisions": ("INSERT INTO alembic_version VALUES ('v0_1_0_initial')", "schema revision is damaged"),
    "special_tokens not JSON": ("UPDATE run SET special_tokens = '[not json'", "special_tokens is not a JSON list"),
    "special_tokens not a list": ("UPDATE run SET special_tokens = '{\"a\": 1}'", "special_tokens is not a JSON list"),
    "200 K specials": (f"UPDATE run SET special_tokens = '{json.dumps([f'<|{i}|>' for i in range(200_000)])}',"
                       " vocab_size = 300000", "200000 special tokens"),
    "vocab_size as text": ("UPDATE run SET vocab_size = 'many'", "vocab_size is 'many'"),
    "vocab_size as a float": ("UPDATE run SET vocab_size = 300.5", "vocab_size is 300.5"),
    "pathological pattern": ("UPDATE run SET pattern = '(a|aa)+$'", "catastrophic backtracking"),
    "pattern that does not compile": ("UPDATE run SET pattern = '(('", "pattern does not compile"),
    "min_frequency 0": ("UPDATE run SET min_frequency = 0", "min_frequency 0"),
    "max_token_length as text": ("UPDATE run SET max_token_length = 'long'", "max_token_length 'long'"),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_run_row_is_a_store_error(tmp_path, pristine, corpus, kind):
    statement, what = DAMAGE[kind]
    db = tampered(tmp_path, pristine, statement)
    before = store_dump(db)
    t0 = time.monotonic()
    for args in (["status", db], ["show", db, "merges"],
                 ["train", corpus, "--db", db, "--vocab-size", VOCAB, "--special", SPECIAL, "-q"]):
        r = run(*args)
        assert r.exit_code == 4, (args, r.output)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and what in r.stderr, r.stderr
    with pytest.raises(StoreError, match="damaged|compile|backtracking"):
        Tokenizer.from_store(db)
    # nothing hangs on it: a pathological pattern unchecked would backtrack for hours; the bound is
    # loose because four processes start here (50 s was seen at load 10 on 2 cores, 5 s idle)
    assert time.monotonic() - t0 < 180
    assert store_dump(db) == before


COUNTS = {
    "negative word count": "UPDATE words SET count = -5 WHERE id = 1",
    "text word count": "UPDATE words SET count = 'lots' WHERE id = 1",
    "negative merge count": "UPDATE merges SET count = -1 WHERE rank = 3",
    "merge of an unknown id": 'UPDATE merges SET "left" = 99999 WHERE rank = 3',
    "text chunk offset": "UPDATE chunks SET \"end\" = 'far' WHERE id = 1",
    "negative input size": "UPDATE sources SET size = -1",
}


@pytest.mark.parametrize("kind", list(COUNTS))
def test_damaged_counts_are_a_store_error_and_change_nothing(tmp_path, pristine, corpus, kind):
    db = tampered(tmp_path, pristine, COUNTS[kind])
    before = store_dump(db)
    r = run("train", corpus, "--db", db, "--vocab-size", VOCAB + 20, "--special", SPECIAL, "-q")
    assert r.exit_code == 4, r.output
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert store_dump(db) == before  # not even a sessions row, nor the larger vocab size


# -- a refused resume writes nothing ---------------------------------------------------------------

def test_a_resume_refused_for_inconsistency_writes_nothing(tmp_path, pristine, corpus):
    # a finished run that kept no pair counts (pairs_merges NULL): one there is not the trainer's
    db = tampered(tmp_path, pristine, "UPDATE run SET phase = 'merging', vocab_size = 320, stop_reason = NULL,"
                  " pairs_merges = NULL",
                  'INSERT INTO pair_counts ("left", "right", count) VALUES (1, 2, 3)')
    before = store_dump(db)
    with pytest.raises(StoreError, match="inconsistent"):
        train([corpus], db, 320, [SPECIAL])
    assert store_dump(db) == before


def test_a_tampered_phase_is_refused_before_any_write(tmp_path, pristine, corpus):
    db = tampered(tmp_path, pristine, "UPDATE run SET phase = 'counting', stop_reason = NULL")
    before = store_dump(db)
    with pytest.raises(StoreError, match="inconsistent"):
        train([corpus], db, VOCAB, [SPECIAL])
    assert store_dump(db) == before  # the old code rewrote pair_counts first


def test_a_resume_with_other_parameters_writes_nothing(tmp_path, pristine, corpus):
    db = tmp_path / "run.db"
    shutil.copy(pristine, db)
    before = store_dump(db)
    with pytest.raises(ResumeMismatch):
        train([corpus], db, VOCAB + 50, ["<|other|>"])
    assert store_dump(db) == before


# -- bpe-store sql -----------------------------------------------------------------------------------

@pytest.mark.parametrize("statement, what", [
    ("ATTACH DATABASE '{dir}/new.db' AS x", "ATTACH"),
    ("VACUUM INTO '{dir}/copy.db'", ""),
    ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode"),
    ("PRAGMA user_version = 7", "PRAGMA user_version"),
    ("SELECT load_extension('/tmp/x')", "load_extension"),
    ("INSERT INTO run SELECT * FROM run", "change the store"),
    ("CREATE TEMP TABLE t (a)", "change the store"),
    ("BEGIN", "transactions"),
])
def test_sql_creates_and_changes_no_file(tmp_path, pristine, statement, what):
    db = tmp_path / "run.db"
    shutil.copy(pristine, db)
    before = store_dump(db)
    listing = sorted(os.listdir(tmp_path))
    r = run("sql", db, statement.format(dir=tmp_path))
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith("error: ") and what in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert store_dump(db) == before
    assert set(os.listdir(tmp_path)) - set(listing) <= {"run.db-wal", "run.db-shm"}


def test_sql_still_reads_schema_pragmas(pristine):
    for q in ("PRAGMA table_info(words)", "SELECT name FROM pragma_table_info('words')", "PRAGMA page_count",
              "PRAGMA integrity_check", "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 5)"
              " SELECT sum(i) FROM r"):
        r = run("sql", pristine, q)
        assert r.exit_code == 0, (q, r.output)


def test_sql_values_are_bounded(pristine):
    # peak RSS from VmHWM (this process image's own): ru_maxrss would include the forking
    # pytest process's peak, which a child inherits
    code = ("import re, sys; from bpe_store.cli.main import main\n"
            "try:\n    main(['sql', sys.argv[1], 'SELECT length(randomblob(900000000))'])\n"
            "except SystemExit as e:\n"
            "    hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())\n"
            "    print(e.code, int(hwm.group(1)) // 1024, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code, str(pristine)], capture_output=True, text=True, env=env(),
                       timeout=120)
    assert "string or blob too big" in r.stderr
    code_, rss_mb = r.stderr.strip().splitlines()[-1].split()
    assert code_ == "2" and int(rss_mb) < 500, r.stderr


def test_a_long_query_stops_at_its_time_limit(pristine):
    forever = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"
    t0 = time.monotonic()
    with (pytest.raises(StoreError, match="longer than 0.5 s"),
          answers.query(pristine, forever, timeout=0.5) as (_, rows)):
        list(rows)
    with pytest.raises(StoreError, match="longer than 0.2 s"):
        answers.sql(pristine, forever, timeout=0.2)
    assert time.monotonic() - t0 < 10
    assert answers.sql(pristine, "SELECT 1", timeout=5) == (["1"], [(1,)])  # the limit ends with the call


FOREVER = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


@contextmanager
def running(cmd: list[str]) -> Iterator[subprocess.Popen]:
    """``cmd`` started with stderr piped; killed and reaped (pipes closed) however the test ends,
    so a child that failed to stop never outlives its test (nor leaks a pipe into another's)."""
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env()) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def wait_until_querying(proc: subprocess.Popen, db: Path, timeout: float = 60) -> None:
    """Until ``proc`` has ``db`` open and has spent 0.3 s of CPU since: inside its query (a fixed
    sleep was not: on a loaded 2-core machine the interpreter's start and imports alone took
    more than 2 s, and a SIGINT then lands before any handler of ours)."""
    deadline = time.monotonic() + timeout
    target, since = os.path.realpath(db), None
    tick = os.sysconf("SC_CLK_TCK")
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()
        try:
            if since is None:
                fds = os.listdir(f"/proc/{proc.pid}/fd")
                if any(os.path.realpath(f"/proc/{proc.pid}/fd/{fd}") == target for fd in fds):
                    since = _cpu_ticks(proc.pid)
            elif _cpu_ticks(proc.pid) - since >= 0.3 * tick:
                return
        except FileNotFoundError:
            pass  # an fd closed while we looked
        time.sleep(0.01)
    pytest.fail(f"the query did not start within {timeout} s")


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


@pytest.mark.slow
@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_ctrl_c_stops_a_long_query(pristine, inherited):
    """SIGINT stops ``sql``'s long query: exit 130, one line. ``ignored``: the process inherited
    SIGINT ignored (started in the background by a script; Python then installs no handler),
    as a CI runner may start the test suite: it must stop all the same, as ``train`` does."""
    cmd = cli_cmd("sql", pristine, FOREVER)
    if inherited == "ignored":
        cmd = [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
               "os.execv(sys.executable, sys.argv[1:])", *cmd]
    with running(cmd) as proc:
        wait_until_querying(proc, pristine)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert err == "error: interrupted; the store was only read, nothing changed\n"
        assert time.monotonic() - t0 < 10


def test_a_swallowed_ctrl_c_still_stops_the_next_query(pristine, monkeypatch):
    """A KeyboardInterrupt raised where Python ignores exceptions (a ``__del__`` here; an import
    lock's weakref callback in the CI flake) is lost, but the Ctrl-C is not: the next long
    statement stops with KeyboardInterrupt instead of running on (here: to its time limit)."""
    from bpe_store.interrupts import ctrl_c_stops_statements

    ignored = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: ignored.append(u.exc_type))

    class CtrlCInDel:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)

    with ctrl_c_stops_statements():
        CtrlCInDel()  # collected at once: the handler's KeyboardInterrupt is raised in __del__
        assert ignored == [KeyboardInterrupt]
        with pytest.raises(KeyboardInterrupt):
            answers.sql(pristine, FOREVER, timeout=10)
        assert answers.sql(pristine, "SELECT 1") == (["1"], [(1,)])  # it stopped one statement


@pytest.mark.parametrize("callback", ["authorizer", "progress handler"])
def test_ctrl_c_inside_a_sqlite_callback_is_an_interrupt(pristine, monkeypatch, callback):
    """A SIGINT noticed while SQLite runs one of our callbacks (the sqlite3 module swallows an
    exception raised there): still exit 130, not ``sql``'s read-only refusal (the authorizer
    turned a KeyboardInterrupt into SQLITE_DENY) nor a query that goes on."""
    from bpe_store.store import connection as store_module

    cls = answers._ReadOnlyAuthorizer if callback == "authorizer" else store_module.Guard
    original = cls.__call__
    fired = []

    def ctrl_c_now(self, *args):
        if not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGINT)  # its handler runs right here, inside the callback
        return original(self, *args)

    monkeypatch.setattr(cls, "__call__", ctrl_c_now)
    query = "SELECT count(*) FROM words" if callback == "authorizer" else FOREVER
    r = run("sql", pristine, query)
    assert fired and r.exit_code == 130, r.stderr
    assert r.stderr == "error: interrupted; the store was only read, nothing changed\n"
    assert run("sql", pristine, "SELECT 1").exit_code == 0  # nothing left pending


def test_result_check_refuses_each_kind_of_bad_row():
    from types import SimpleNamespace

    from bpe_store.store.result import result_check

    store = SimpleNamespace(path="x.db")
    vocab = [(0, b"<s>", "special")] + [(i + 1, bytes([i]), "byte") for i in range(256)] + [(257, b"ab", "merge")]
    merges = [(0, 98, 99, 257, 5)]
    check = functools.partial(result_check, digest_check=False)  # no checkpoints here
    check(store, ["<s>"], vocab, merges)  # a good one passes
    for i, v in [(5, vocab[:5] + [(5, b"\x04", "merge")] + vocab[6:]), (257, vocab[:257] + [(257, "ab", "merge")]),
                 (0, [(0, b"<s>", "byte")] + vocab[1:])]:  # a kind out of place, text for bytes
        with pytest.raises(StoreError, match=f"vocab id {i} is not a"):
            check(store, ["<s>"], v, merges)
    for m in [(0, 98, 257, 257, 5), (0, -1, 99, 257, 5), (0, 98, 99, 258, 5), (0, 98, 99, 257, -1),
              (0, 98.0, 99, 257, 5), (0, 98, 99, 257, "5"), (0, 98, None, 257, 5)]:
        with pytest.raises(StoreError, match="merge 0 is"):
            check(store, ["<s>"], vocab, [m])
