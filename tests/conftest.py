"""Shared test fixtures: where the corpora are, bundled text, and fresh store paths.

Tests that only need some text read it from tests/fixtures (``fixture_text``, ``SMALL_TEXT``).
Tests that need the shared corpora (the CS336 reference fixtures, multi-megabyte slices) FAIL
where ../shared is missing, so CI cannot pass by skipping them; set
``BPE_STORE_ALLOW_NO_SHARED=1`` to skip them instead (a machine without the corpora).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
#: ../shared beside the checkout (CI puts it there); BPE_STORE_SHARED overrides.
SHARED = Path(os.environ.get("BPE_STORE_SHARED", ROOT.parent / "shared"))
CORPORA = SHARED / "corpora"
CS336 = CORPORA / "cs336"
FIXTURES = ROOT / "tests" / "fixtures"
#: Opt-out: skip, rather than fail, the tests that need ../shared when it is absent.
ALLOW_NO_SHARED_ENV = "BPE_STORE_ALLOW_NO_SHARED"
#: Bundled slices (see tests/fixtures/README.md): English, Russian and Chinese text.
EN, RU, ZH = "enwiki-1M.txt", "tinystories-ru-600K.txt", "zhwiki-600K.txt"
#: A small English corpus file (~128 KB, whole documents ended by <|endoftext|>).
SMALL_TEXT = FIXTURES / "enwiki-128K.txt"

#: tiktoken's own tests, vendored: run against tiktoken_compat in a fresh interpreter by
#: test_tiktoken_suite.py, never collected here (here `import tiktoken` is the real one).
collect_ignore = ["tiktoken_suite"]

#: The files that run longest, queued first, longest first: pytest-xdist hands out whole files
#: (``--dist loadfile``; ``--no-loadscope-reorder`` keeps this order, where xdist would queue the
#: files with the most tests first), and a long one begun last would leave the other worker idle at
#: the end. Measured per test (CPU and wall) in a whole run on 2 cores (docs/development.md); the
#: Ray files (one unit) wait on their cluster more than they compute. Every other file takes less
#: than the last of these.
LONGEST_FILES = ("test_portable_pattern.py", "test_ray_count.py", "test_ray_tree.py", "test_native_sanitizers.py",
                 "test_extend.py", "test_wal_reader.py", "test_from_tiktoken.py", "test_merge_engine.py",
                 "test_scanner.py", "test_superword_store.py", "test_sql_formats.py", "test_pattern_scanners.py",
                 "test_temporaries.py", "test_tokenizer_roundtrip.py", "test_regex_threads.py")
#: Files that run as one unit, one after the other on one worker: each starts a Ray cluster (two
#: workers; three raylets), and two clusters at once on 2 cores starve each other's health checks.
ONE_UNIT = {"test_ray_count.py": "Ray clusters", "test_ray_tree.py": "Ray clusters"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: the rest keep their order


def unit_of(nodeid: str) -> str:
    """The unit of work a test is handed out in: its file, or its file's ONE_UNIT."""
    path = nodeid.split("::", 1)[0]
    return ONE_UNIT.get(path.rsplit("/", 1)[-1], path)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile``, except that the files of ONE_UNIT are one unit of work (``unit_of``;
    xdist's own ``xdist_group`` mark only works under ``--dist loadgroup``, which would hand out
    the other tests one by one)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndUnits(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return FilesAndUnits(config, log)


settings.register_profile("default", max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "100")),
                          deadline=None)
settings.load_profile("default")


def kill_when(cmd: list[str], done: Callable[[str], bool], *, env: dict[str, str] | None = None,
              stream: str = "stdout") -> list[str]:
    """Run ``cmd``, read its ``stream`` (stdout or stderr) line by line until ``done(line)`` is true,
    and kill -9 it (no flush, no clean-up); the lines read. The one way the tests kill a run at a
    point it reports (a progress event, a pause inside a transaction)."""
    pipe = {"stdout": {"stdout": subprocess.PIPE}, "stderr": {"stderr": subprocess.PIPE}}[stream]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=os.environ if env is None else env, text=True, **pipe)
    seen: list[str] = []
    try:
        for line in getattr(proc, stream):
            seen.append(line)
            if done(line):
                break
        proc.kill()
    finally:
        proc.wait()
        getattr(proc, stream).close()
    return seen


def kill_after_checkpoints(cmd: list[str], n: int, phase: str = "counting",
                           env: dict[str, str] | None = None) -> int:
    """Run ``cmd`` (a run printing its progress events as JSON lines on stdout) and kill -9 it as
    soon as it has reported ``n`` checkpoints of ``phase``; how many it reported."""
    count = 0

    def nth_checkpoint(line: str) -> bool:
        nonlocal count
        event = json.loads(line)
        count += event["stage"] == "checkpoint" and event.get("phase") == phase
        return count == n

    kill_when(cmd, nth_checkpoint, env=env)
    return count


def kill_when_paused(cmd: list[str], point: str, env: dict[str, str] | None = None) -> None:
    """Run ``cmd`` with ``BPE_STORE_TEST_PAUSE=point`` (the store pauses there, inside its
    transaction, and says so on stderr), wait for that line and kill -9 the process."""
    env = {**(os.environ if env is None else env), "BPE_STORE_TEST_PAUSE": point}
    seen = kill_when(cmd, lambda line: True, env=env, stream="stderr")
    assert seen and f"paused at {point}" in seen[0], seen


def store_contents(db: Path) -> tuple:
    """Everything a run's result is, word ids aside (they follow the order units were counted in):
    words with their counts and tokens, pair counts, merges, vocabulary, and which merges the
    words' tokens and pair counts reflect (``run.state_merges``, ``run.pairs_merges``)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return tuple(con.execute(q).fetchall() for q in (
            "SELECT bytes, count, tokens FROM words ORDER BY bytes",
            'SELECT "left", "right", count FROM pair_counts ORDER BY 1, 2',
            "SELECT * FROM merges ORDER BY rank",
            "SELECT * FROM vocab ORDER BY id",
            "SELECT state_merges, pairs_merges FROM run"))
    finally:
        con.close()


def stopped_run(corpus: Path, db: Path, vocab_size: int, special_tokens: list[str], at: int, **kwargs) -> None:
    """Train into ``db`` and stop (as Ctrl-C does) once ``at`` merges are done: its checkpoint
    keeps the words' tokens and pair counts, which a finished run drops."""
    import threading

    from bpe_store import Interrupted, train

    stop = threading.Event()

    def progress(event: dict) -> None:
        if event["stage"] == "merging" and event["done"] >= at:
            stop.set()

    with pytest.raises(Interrupted):
        train([corpus], db, vocab_size, special_tokens, stop=stop, progress=progress, **kwargs)


def shared_file(*parts: str) -> Path:
    """A file under ../shared/corpora. Where it is absent the test fails, unless
    BPE_STORE_ALLOW_NO_SHARED=1 says to skip it."""
    p = CORPORA.joinpath(*parts)
    if not p.exists():
        if os.environ.get(ALLOW_NO_SHARED_ENV, "") not in ("", "0"):
            pytest.skip(f"{p} is not available ({ALLOW_NO_SHARED_ENV} is set)")
        pytest.fail(f"{p} is not available: put the shared corpora at {SHARED} (or point "
                    f"BPE_STORE_SHARED at them), or set {ALLOW_NO_SHARED_ENV}=1 to skip the tests "
                    "that need them", pytrace=False)
    return p


def fixture_text(name: str, size: int, offset: int = 0) -> str:
    """``size`` bytes of the bundled text tests/fixtures/``name`` from ``offset``, cut back to
    whole characters (a cut-off character at either end is dropped)."""
    p = FIXTURES / name
    if offset + size > p.stat().st_size:
        raise ValueError(f"{p} has {p.stat().st_size} bytes; {offset} + {size} asked")
    with open(p, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    return data.decode("utf-8", "ignore")


def corpus_slice(name: str, size: int, offset: int = 0) -> str:
    """``size`` bytes of a shared corpus from ``offset``, cut back to whole characters."""
    with open(shared_file(name), "rb") as f:
        f.seek(offset)
        data = f.read(size)
    return data.decode("utf-8", "ignore")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A path where a new store can be created."""
    return tmp_path / "run.db"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The store tests' input, one file per test module: the first 30,000 bytes of CS336's
    corpus.en. Modules that need another input define their own ``corpus``, which wins."""
    p = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    p.write_bytes(shared_file("cs336", "corpus.en").read_bytes()[:30_000])
    return p


@pytest.fixture(scope="module")
def trained_store(tmp_path_factory, corpus) -> Path:
    """A store trained on ``corpus`` to 300 tokens with ``<|endoftext|>``, one per test module;
    tests that change it work on a copy."""
    from bpe_store import train

    db = tmp_path_factory.mktemp("trained") / "run.db"
    train([corpus], db, 300, ["<|endoftext|>"])
    return db


def train_text(tmp: Path, text: str, vocab_size: int, specials, **kw):
    """``train`` on ``text`` into ``tmp``/run.db, replacing any store there (hypothesis examples
    reuse one directory)."""
    from bpe_store import train

    path = tmp / "corpus.txt"
    path.write_bytes(text.encode("utf-8"))
    for suffix in ("", "-wal", "-shm"):
        (tmp / ("run.db" + suffix)).unlink(missing_ok=True)
    return train([path], tmp / "run.db", vocab_size, specials, **kw)


def tampered(tmp_path: Path, pristine: Path, *statements: str) -> Path:
    """A copy of ``pristine`` changed as someone with the sqlite3 shell could."""
    db = tmp_path / "tampered.db"
    shutil.copy(pristine, db)
    con = sqlite3.connect(db)
    con.executescript(";\n".join(statements))
    con.commit()
    con.close()
    return db


def store_dump(db: Path) -> list[str]:
    """The store's logical content (robust to WAL checkpointing moving bytes between files)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(con.iterdump())
    finally:
        con.close()


@contextlib.contextmanager
def tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``mount -o size=``) mounted at the new directory ``mnt`` while the
    block runs; skips the test where mounting is not allowed (it needs root and mount rights)."""
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
