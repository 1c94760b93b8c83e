"""A reader holding an old snapshot cannot make the WAL grow without bound (``training.wal_watch``):
while it pins the WAL, training writes only what a resume needs, and the result is an unblocked
run's; a kill in that state loses what the docs say; the next write after the reader leaves
empties the WAL."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_helpers import SPECIAL, env
from conftest import FIXTURES, stopped_run, store_contents

from bpe_store import InputError, Interrupted, Store, read_result, train
from bpe_store.inspection import answers
from bpe_store.training import options, wal_watch

CORPUS = FIXTURES / "enwiki-1M.txt"
VOCAB = 1000
#: Small batches and flushes: without the bound, every one of them would grow the WAL.
OPTIONS = {"checkpoint_merges": 10, "chunk_size": 64 << 10, "count_flush_seconds": 0, "workers": 2}
#: The most a blocked WAL may hold in these runs: the probe's page, the start of merging without its
#: pair counts, and about one merge log a second (a few 16 KiB pages each).
BOUND = 2 << 20


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    """The same run with no reader."""
    db = tmp_path_factory.mktemp("clean") / "run.db"
    train([CORPUS], db, VOCAB, [SPECIAL], **OPTIONS)
    return db


def wal_size(db: Path) -> int:
    wal = Path(f"{db}-wal")
    return wal.stat().st_size if wal.exists() else 0


class Reader:
    """A connection holding a read snapshot (``BEGIN; SELECT ...`` left open), as a ``sqlite3``
    session does, opened by ``hold`` and let go by ``leave``."""

    def __init__(self, db: Path):
        self.db, self.con = db, None

    def hold(self) -> None:
        self.con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, isolation_level=None,
                                   check_same_thread=False)
        self.con.execute("BEGIN")
        self.con.execute("SELECT count(*) FROM merges").fetchone()

    def leave(self) -> None:
        if self.con is not None:
            self.con.execute("ROLLBACK")
            self.con.close()
            self.con = None


class CountingReader(Reader):
    """A reader that comes once counting has begun (the store exists) and leaves after training
    has waited for it ``leave_after`` times (deferred events with ``waiting``); ``peak`` is the
    WAL's largest size while it stayed. ``progress`` is the run's progress callback."""

    def __init__(self, db: Path, leave_after: int):
        super().__init__(db)
        self.leave_after, self.waits, self.peak = leave_after, 0, 0

    def progress(self, e: dict) -> None:
        if self.con is None and e["stage"] == "counting" and self.db.exists():
            self.hold()
        if self.con is not None:
            self.peak = max(self.peak, wal_size(self.db))
            if e["stage"] == "deferred" and e["waiting"]:
                self.waits += 1
                if self.waits == self.leave_after:
                    self.leave()


@pytest.fixture
def counting_reader(monkeypatch):
    """``make(db, leave_after)``: a ``CountingReader`` of ``db``, with a deferred event at every
    check; it leaves at the end of the test whatever happened."""
    monkeypatch.setattr(wal_watch, "REPORT_SECONDS", 0.0)  # a deferred event at every check
    made: list[CountingReader] = []

    def make(db: Path, leave_after: int) -> CountingReader:
        made.append(CountingReader(db, leave_after))
        return made[-1]

    yield make
    for reader in made:
        reader.leave()


def test_a_reader_through_merging_and_the_end_bounds_the_wal_and_changes_no_result(tmp_path, clean):
    db = tmp_path / "run.db"
    reader, peak, deferred = Reader(db), [0], []

    def progress(e: dict) -> None:
        if reader.con is None and e["stage"] == "merging":
            reader.hold()
        if reader.con is not None:
            peak[0] = max(peak[0], wal_size(db))
        if e["stage"] == "deferred":
            deferred.append(e["what"])

    try:
        r = train([CORPUS], db, VOCAB, [SPECIAL], progress=progress, reader_memory_words=1234,
                  reader_wal_bytes=3 << 30, **OPTIONS)
        with Store.open(clean, readonly=True) as s:
            assert r.merges == read_result(s).merges
        assert 0 < peak[0] <= BOUND, peak[0]
        assert {"checkpoint", "final checkpoint"} <= set(deferred)
        st = answers.status(db)
        assert st["wal_blocked"] and "defers full checkpoints" in st["wal_note"]
        assert "its last checkpoint only logged the merges" in st["wal_note"]
        # the budgets status names are the run's own (sessions.reader_*), not the defaults
        assert st["reader_budgets"] == {"memory_words": 1234, "wal_bytes": 3 << 30, "recorded": True}
        assert "up to 1,234 words of counts in memory" in st["wal_note"] and "the run's" in st["wal_note"]
        with Store.open(db, readonly=True) as s:  # a finished run, with its working state kept
            assert s.run_row()["phase"] == "done" and s.state_merges() < len(r.merges)
    finally:
        reader.leave()
    # the same command writes the deferred last checkpoint: the store is an unblocked run's, the WAL empty
    r = train([CORPUS], db, VOCAB, [SPECIAL], **OPTIONS)
    assert store_contents(db) == store_contents(clean)
    assert wal_size(db) == 0
    assert answers.status(db)["wal_note"] is None


def test_a_reader_through_counting_defers_the_flushes_and_changes_no_result(tmp_path, clean, counting_reader):
    db = tmp_path / "run.db"
    reader = counting_reader(db, leave_after=4)  # by then counting is over and waits for the reader
    # a WAL budget of 1 byte: the end of counting waits for the reader instead of writing into the WAL
    train([CORPUS], db, VOCAB, [SPECIAL], progress=reader.progress, reader_wal_bytes=1, **OPTIONS)
    assert reader.waits == 4
    assert reader.peak <= 64 << 10, reader.peak  # nothing but the probe's page while the reader stayed
    assert store_contents(db) == store_contents(clean)
    assert wal_size(db) == 0


def test_a_reader_while_a_stream_is_counted_defers_its_flushes(tmp_path, counting_reader):
    from bpe_store import train_from_iterator

    docs = CORPUS.read_text(encoding="utf-8").split(SPECIAL)
    db, clean_db = tmp_path / "run.db", tmp_path / "clean.db"
    options = {"count_flush_seconds": 0, "chunk_size": 16 << 10}
    train_from_iterator(docs, clean_db, 400, [SPECIAL], **options)
    reader = counting_reader(db, leave_after=3)
    train_from_iterator(docs, db, 400, [SPECIAL], progress=reader.progress, reader_wal_bytes=1, **options)
    assert reader.waits == 3 and reader.peak <= 64 << 10, (reader.waits, reader.peak)
    assert store_contents(db) == store_contents(clean_db)


class WholeRunReader(Reader):
    """A reader that comes at the first counting event (the store exists) and stays, holding that
    one snapshot, until the test lets it go; it records the deferred events and the WAL's peak."""

    def __init__(self, db: Path):
        super().__init__(db)
        self.deferred, self.peak, self.held = [], 0, False

    def progress(self, e: dict) -> None:
        if not self.held and e["stage"] == "counting" and self.db.exists():
            self.hold()
            self.held = True
        if e["stage"] == "deferred":
            self.deferred.append(e)
            if e["waiting"]:
                self.leave()  # the run stalled: let it go on, the test fails below
        if self.con is not None:
            self.peak = max(self.peak, wal_size(self.db))


@pytest.mark.parametrize("memory_words", [options.DEFERRED_COUNT_WORDS, 50])
def test_a_reader_holding_one_snapshot_for_the_whole_run_never_stalls_it(tmp_path, clean, monkeypatch, memory_words):
    """The repro of issue 33: a reader from the first second of counting to after the run. Counting
    keeps its counts in memory (past ``memory_words``, and at its end, they go into the WAL, which is
    below its budget), merging logs its merges: no wait, and the merges are an unblocked run's."""
    monkeypatch.setattr(wal_watch, "REPORT_SECONDS", 0.0)
    db = tmp_path / "run.db"
    reader = WholeRunReader(db)
    try:
        r = train([CORPUS], db, VOCAB, [SPECIAL], progress=reader.progress, reader_memory_words=memory_words,
                  **OPTIONS)
        assert reader.con is not None, "the run waited for the reader"
        assert not [e for e in reader.deferred if e["waiting"]]
        into_wal = [e for e in reader.deferred if e.get("into_wal")]
        assert into_wal and all(e["phase"] == "counting" and e["wal_budget"] == options.DEFERRED_WAL_BYTES
                                and e["memory_words"] == memory_words for e in into_wal)
        if memory_words == 50:  # flushes past the memory budget went into the WAL while counting went on
            assert len(into_wal) > 1
        with Store.open(clean, readonly=True) as s:
            assert r.merges == read_result(s).merges
        assert reader.peak < 16 << 20, reader.peak
        st = answers.status(db)
        assert st["wal_blocked"] and st["phase"] == "done"
    finally:
        reader.leave()
    train([CORPUS], db, VOCAB, [SPECIAL], **OPTIONS)  # the deferred last checkpoint
    assert store_contents(db) == store_contents(clean)
    assert wal_size(db) == 0


def test_a_stream_under_a_reader_for_the_whole_run_never_stalls_it(tmp_path, monkeypatch):
    from bpe_store import train_from_iterator

    monkeypatch.setattr(wal_watch, "REPORT_SECONDS", 0.0)
    docs = CORPUS.read_text(encoding="utf-8").split(SPECIAL)
    db, clean_db = tmp_path / "run.db", tmp_path / "clean.db"
    options = {"count_flush_seconds": 0, "chunk_size": 16 << 10}
    train_from_iterator(docs, clean_db, 400, [SPECIAL], **options)
    reader = WholeRunReader(db)
    try:
        train_from_iterator(docs, db, 400, [SPECIAL], progress=reader.progress, reader_memory_words=200, **options)
        assert reader.con is not None and not [e for e in reader.deferred if e["waiting"]]
        assert [e for e in reader.deferred if e.get("into_wal")]
    finally:
        reader.leave()
    train_from_iterator(docs, db, 400, [SPECIAL], **options)
    assert store_contents(db) == store_contents(clean_db)


def test_reader_budgets_are_checked(tmp_path):
    for bad in ({"reader_memory_words": 0}, {"reader_wal_bytes": -1}, {"reader_wal_bytes": 1.5}):
        with pytest.raises(InputError, match="reader"):
            train([CORPUS], tmp_path / "never.db", VOCAB, [SPECIAL], **bad)
    assert not (tmp_path / "never.db").exists()


def test_a_reader_at_the_start_of_merging_leaves_the_pair_counts_to_the_first_checkpoint(tmp_path, clean):
    """The move to merging is written without its pair counts; a resume from there recounts them,
    and the first full checkpoint after the reader leaves writes them all."""
    db = tmp_path / "run.db"
    reader, stop = Reader(db), threading.Event()

    def progress(e: dict) -> None:
        if reader.con is None and e["stage"] == "pairs":
            reader.hold()  # before the start of merging is written
        if e["stage"] == "merging" and e["done"] >= 30:
            stop.set()

    try:
        with pytest.raises(Interrupted):
            train([CORPUS], db, VOCAB, [SPECIAL], progress=progress, stop=stop, **OPTIONS)
        with Store.open(db, readonly=True) as s:
            assert s.run_row()["phase"] == "merging" and s.state_merges() == 0
            assert s.sql("SELECT count(*) FROM pair_counts").scalar() == 0 and s.pairs_merges() is None
            assert s.sql("SELECT count(*) FROM merges").scalar() >= 30  # logged
        assert "left to the first full checkpoint" in answers.status(db)["pairs"]["note"]
    finally:
        reader.leave()
    train([CORPUS], db, VOCAB, [SPECIAL], **OPTIONS)
    assert store_contents(db) == store_contents(clean)


# -- kills while a reader pins the WAL -------------------------------------------------------------

#: ``train`` with OPTIONS in a subprocess, its progress as JSON lines on stderr; argv: the store,
#: the seconds between merge logs (so that merging this small corpus takes several), and more
#: options as JSON.
TRAIN = ("import sys, json; from bpe_store import train; from bpe_store.inspection.progress import JsonLines; "
         "import bpe_store.training.merge_step as t; t.MERGE_LOG_SECONDS = float(sys.argv[2]); "
         f"train([{str(CORPUS)!r}], sys.argv[1], {VOCAB}, [{SPECIAL!r}], progress=JsonLines(sys.stderr), "
         f"**{OPTIONS!r}, **json.loads(sys.argv[3] if len(sys.argv) > 3 else '{{}}'))")


def _started(db: Path, log_seconds: float = 1.0, options: str = "{}", **extra_env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", TRAIN, str(db), str(log_seconds), options],
                            stderr=subprocess.PIPE, text=True, env={**env(), **extra_env})


def _until(proc: subprocess.Popen, seen) -> str:
    """Read ``proc``'s stderr until a line ``seen`` accepts; that line."""
    lines = []
    while line := proc.stderr.readline():
        lines.append(line)
        if seen(line):
            return line
    proc.wait()
    pytest.fail("never seen; it said:\n" + "".join(lines[-20:]))


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()


def _resumes_to(db, clean) -> None:
    """The same command, run again with no reader, finishes the store as an uninterrupted run did."""
    r = subprocess.run([sys.executable, "-c", TRAIN, str(db), "1"], capture_output=True, text=True, env=env(),
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert store_contents(db) == store_contents(clean)


def test_a_kill_while_merging_under_a_reader_loses_only_the_unlogged_merges(tmp_path, clean):
    db = tmp_path / "run.db"
    stopped_run(CORPUS, db, VOCAB, [SPECIAL], 50, **OPTIONS)
    with Store.open(db, readonly=True) as s:
        before = s.sql("SELECT count(*) FROM merges").scalar()
    reader = Reader(db)
    reader.hold()
    # the second merge log under the reader: a kill inside its transaction, the first one committed
    proc = _started(db, 0.001, BPE_STORE_TEST_PAUSE="merge_log:2")
    try:
        _until(proc, lambda ln: "paused at merge_log:2" in ln)
        _kill(proc)
        assert wal_size(db) <= BOUND
        with Store.open(db, readonly=True) as s:  # a kill keeps every committed log: the first one
            logged = s.sql("SELECT count(*) FROM merges").scalar()
            assert logged > before
            assert s.sql("SELECT merges_done FROM checkpoints ORDER BY id DESC LIMIT 1").scalar() == logged
            assert s.state_merges() == before  # no full checkpoint while the reader stayed
    finally:
        reader.leave()
        if proc.poll() is None:
            _kill(proc)
    _resumes_to(db, clean)
    assert wal_size(db) == 0


def test_a_kill_while_counting_waits_for_a_reader_loses_only_the_unflushed_counts(tmp_path, clean):
    db = tmp_path / "run.db"
    stop = threading.Event()

    def first_flush(e: dict) -> None:
        if e["stage"] == "checkpoint" and e.get("phase") == "counting":
            stop.set()

    with pytest.raises(Interrupted):
        train([CORPUS], db, VOCAB, [SPECIAL], progress=first_flush, stop=stop, **OPTIONS)
    with Store.open(db, readonly=True) as s:
        flushed = s.sql("SELECT count(*) FROM chunks WHERE counted = 1").scalar()
        total = s.sql("SELECT count(*) FROM chunks").scalar()
    assert 0 < flushed < total
    reader = Reader(db)
    reader.hold()
    proc = _started(db, options='{"reader_wal_bytes": 1}')  # no room in the WAL: counting waits
    try:
        # counting the rest, nothing flushed: at its end it waits for the reader
        _until(proc, lambda ln: '"stage": "deferred"' in ln and '"waiting": true' in ln)
        _kill(proc)
        with Store.open(db, readonly=True) as s:  # the kill lost the counting since the reader came
            assert s.run_row()["phase"] == "counting"
            assert s.sql("SELECT count(*) FROM chunks WHERE counted = 1").scalar() == flushed
        assert wal_size(db) <= 64 << 10
    finally:
        reader.leave()
        if proc.poll() is None:
            _kill(proc)
    _resumes_to(db, clean)


def test_a_kill_once_counting_went_into_the_wal_loses_no_counts(tmp_path, clean):
    """Under a reader, the end of counting goes into the WAL: a kill after it keeps every count."""
    db = tmp_path / "run.db"
    stop = threading.Event()

    def first_flush(e: dict) -> None:
        if e["stage"] == "checkpoint" and e.get("phase") == "counting":
            stop.set()

    with pytest.raises(Interrupted):
        train([CORPUS], db, VOCAB, [SPECIAL], progress=first_flush, stop=stop, **OPTIONS)
    reader = Reader(db)
    reader.hold()
    proc = _started(db, 0.001, BPE_STORE_TEST_PAUSE="merge_log:2")
    try:
        _until(proc, lambda ln: '"into_wal": true' in ln)
        _until(proc, lambda ln: "paused at merge_log:2" in ln)  # after the last flush and the move to merging
        _kill(proc)
        with Store.open(db, readonly=True) as s:  # every chunk counted, in the WAL the reader pins
            assert s.run_row()["phase"] == "merging"
            assert s.sql("SELECT count(*) FROM chunks WHERE counted = 0").scalar() == 0
    finally:
        reader.leave()
        if proc.poll() is None:
            _kill(proc)
    _resumes_to(db, clean)


# -- a larger run, a reader in every phase (slow) --------------------------------------------------

@pytest.mark.slow
def test_a_reader_for_a_whole_enwiki_100m_run_to_32k_changes_no_merge_and_keeps_the_wal_small(tmp_path, monkeypatch):
    """The issue's test at its scale: one snapshot held from the first counting event to after the
    run. Small flushes and batches (without the bound, every one of them would grow the WAL: GBs);
    the end of counting goes into the WAL, nothing waits, and the merges are an unblocked run's.
    (Its time beside the run without a reader: bench/bench_wal_reader.py --whole-run.)"""
    from conftest import shared_file

    monkeypatch.setattr(wal_watch, "REPORT_SECONDS", 0.0)
    corpus = shared_file("enwiki-100M.txt")
    options = {"checkpoint_merges": 50, "count_flush_seconds": 0.5, "chunk_size": 1 << 20}
    db = tmp_path / "run.db"
    reader = WholeRunReader(db)
    try:
        r = train([corpus], db, 32000, [SPECIAL], progress=reader.progress, **options)
        assert reader.con is not None and not [e for e in reader.deferred if e["waiting"]]
        assert [e for e in reader.deferred if e.get("into_wal")]
    finally:
        reader.leave()
    assert reader.peak <= 256 << 20, reader.peak
    train([corpus], db, 32000, [SPECIAL], **options)  # the deferred last checkpoint
    clean = tmp_path / "clean.db"
    assert train([corpus], clean, 32000, [SPECIAL]).merges == r.merges
    assert store_contents(db) == store_contents(clean)
