"""Counting on a Ray cluster (bpe_store.counting.ray_count): the same merges as local counting, whatever
the workers, after a kill -9 of the driver, and after a worker process dies mid-unit.

One real local Ray cluster (2 CPUs, so 2 worker processes) serves the whole module; it is
started by this process with ``ray.init``, and subprocess drivers connect to it by address.
Skipped only where ``ray`` cannot be imported (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import ROOT, SPECIAL, cli_cmd, env, json_lines
from conftest import kill_after_checkpoints

from bpe_store.cli.train_cmd import _ray_flag_args
from bpe_store.store.store import Store
from bpe_store.text.pretokenize import GPT2_PATTERN
from bpe_store.training.train import read_result, train

#: All slow (a real cluster). Under pytest-xdist one worker runs this module and test_ray_tree.py,
#: one after the other (``ONE_UNIT`` in conftest.py): a cluster per worker would not fit two cores.
pytestmark = pytest.mark.slow

FIXTURE = ROOT / "tests" / "fixtures" / "enwiki-1M.txt"
VOCAB = 700
CHUNK = 64 << 10  # ~16 units for the 1 MB fixture
#: The GPT-2 pattern in a group: same matches, but counted through `regex` (the non-native path).
REGEX_PATTERN = f"(?:{GPT2_PATTERN})"


@pytest.fixture(scope="module")
def cluster():
    """The address of a local Ray cluster with 2 CPUs, this process connected to it."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _result(r) -> tuple:
    return r.merges, r.merge_counts, r.vocab


@pytest.fixture(scope="module")
def local_result(tmp_path_factory):
    """Merges of the fixture counted locally (one thread): what every Ray run must equal."""
    db = tmp_path_factory.mktemp("local") / "local.db"
    return _result(train([FIXTURE], db, VOCAB, [SPECIAL], workers=1, chunk_size=CHUNK))


def test_ray_counting_equals_local(cluster, local_result, tmp_path):
    events: list[dict] = []
    r = train([FIXTURE], tmp_path / "ray.db", VOCAB, [SPECIAL], chunk_size=CHUNK, count_engine="ray",
              progress=events.append)
    assert _result(r) == local_result
    counting = [e for e in events if e["stage"] == "counting" and "in_flight" in e]
    assert counting and all(e["workers"] == 2 and e["nodes"] == 1 for e in counting)
    assert max(e["in_flight"] for e in counting) >= 2  # both workers had units
    assert counting[-1]["done"] == counting[-1]["total"] == FIXTURE.stat().st_size


def _proc_title(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descends_from_me(pid: int) -> bool:
    me = os.getpid()
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid == me:
            return True
    return False


def test_worker_killed_mid_unit_still_identical(cluster, tmp_path):
    # the regex path (~15 MB/s) on 8 MB in 1 MB units: each unit runs ~70 ms, long enough to
    # find the worker running it (its process title is ray::count_unit_packed) and kill -9 it
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(FIXTURE.read_bytes() * 8)
    expected = _result(train([corpus], tmp_path / "local.db", VOCAB, [SPECIAL], pattern=REGEX_PATTERN,
                             workers=1, chunk_size=1 << 20))
    killed: list[int] = []
    done = threading.Event()

    def kill_one_running_unit() -> None:
        if not sys.platform.startswith("linux"):
            return
        while not done.is_set() and not killed:
            for name in os.listdir("/proc"):
                if (name.isdigit() and _proc_title(int(name)).startswith(b"ray::NodeCounter")
                        and _descends_from_me(int(name))):
                    os.kill(int(name), signal.SIGKILL)
                    killed.append(int(name))
                    break
            time.sleep(0.001)

    killer = threading.Thread(target=kill_one_running_unit, daemon=True)
    killer.start()
    try:
        r = train([corpus], tmp_path / "ray.db", VOCAB, [SPECIAL], pattern=REGEX_PATTERN, chunk_size=1 << 20,
                  count_engine="ray")
    finally:
        done.set()
        killer.join()
    if not sys.platform.startswith("linux"):
        pytest.skip("finding Ray's worker processes needs /proc")
    assert killed, "no worker was caught running a unit"
    assert _result(r) == expected


DRIVER = """
import json, sys, time
from bpe_store.training.train import train
def progress(event):
    print(json.dumps(event), flush=True)
    if event["stage"] == "counting":
        time.sleep(0.05)  # a slow driver, so that the kill lands mid-counting
train([sys.argv[1]], sys.argv[2], int(sys.argv[3]), [sys.argv[4]], chunk_size=int(sys.argv[5]),
      count_engine="ray", ray_address=sys.argv[6], count_flush_seconds=0.0, progress=progress)
"""


def test_driver_killed_mid_counting_resumes_identically(cluster, local_result, tmp_path):
    db = tmp_path / "ray.db"
    chunk = 16 << 10  # ~60 units, one flush (transaction) per unit
    flushes = kill_after_checkpoints([sys.executable, "-c", DRIVER, str(FIXTURE), str(db), str(VOCAB), SPECIAL,
                                      str(chunk), cluster], 3, env=env())
    assert flushes == 3
    with Store.open(db, readonly=True) as store:
        marks = [c.counted for c in store.chunks()]
    assert 3 <= sum(marks) < len(marks)  # killed mid-counting, after some flushes
    events: list[dict] = []
    # the fixture's chunks must be re-planned identically, so the same chunk size
    r = train([FIXTURE], db, VOCAB, [SPECIAL], chunk_size=chunk, count_engine="ray", progress=events.append)
    first = next(e for e in events if e["stage"] == "counting")
    assert first["done"] > 0  # resumed: the flushed units were not counted again
    assert _result(r) == local_result


def test_cli_ray_flag_starts_a_local_cluster(cluster, local_result, tmp_path):
    # `--ray` alone (followed by another option): the CLI starts its own 2-CPU local cluster
    db = tmp_path / "cli.db"
    p = subprocess.run(cli_cmd("train", FIXTURE, "--db", db, "--vocab-size", VOCAB, "--special", SPECIAL,
                               "--chunk-size", CHUNK, "--ray", "--workers", "2", "--progress", "json"),
                       capture_output=True, text=True, env=env(), timeout=300)
    assert p.returncode == 0, p.stderr
    counting = [e for e in json_lines(p.stderr) if e.get("stage") == "counting" and "in_flight" in e]
    assert counting and counting[-1]["workers"] == 2
    with Store.open(db, readonly=True) as store:
        assert _result(read_result(store)) == local_result


def test_ray_flag_takes_an_address_only_when_it_looks_like_one(tmp_path):
    f = tmp_path / "a.txt"
    f.write_text("x")
    assert _ray_flag_args(["a", "--ray"]) == ["a", "--ray", "local"]
    assert _ray_flag_args(["--ray", "--db", "x"]) == ["--ray", "local", "--db", "x"]
    assert _ray_flag_args(["--ray", str(f)]) == ["--ray", "local", str(f)]
    for address in ("10.0.0.1:6379", "ray://head:10001", "auto"):
        assert _ray_flag_args(["--ray", address, "a"]) == ["--ray", address, "a"]
    assert _ray_flag_args(["--ray=h:1"]) == ["--ray=h:1"]
    assert _ray_flag_args(["--", "--ray"]) == ["--", "--ray"]


def test_ray_missing_says_how_to_install(tmp_path):
    # runs without ray too: the import is made to fail
    db = tmp_path / "x.db"
    code = ("import sys; sys.modules['ray'] = None; from bpe_store.cli.main import main; "
            f"main(['train', {str(FIXTURE)!r}, '--db', {str(db)!r}, '--vocab-size', '300', '--ray'])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "error: counting on Ray needs the ray package: pip install 'bpe-store[ray]' (or: pip install ray)"]
    assert not db.exists()  # refused before anything was written


def test_ray_address_unreachable_is_one_line_exit_2(tmp_path):
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    p = subprocess.run(cli_cmd("train", FIXTURE, "--db", tmp_path / "x.db", "--vocab-size", 300,
                               "--ray", "127.0.0.1:1", "--progress", "none"),
                       capture_output=True, text=True, env=env(), timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines()[-1] == (
        "error: cannot connect to the Ray cluster at 127.0.0.1:1: 127.0.0.1:1 does not answer (Connection refused)")


def test_ray_flush_does_not_stop_the_workers(cluster, local_result, tmp_path, monkeypatch):
    # the driver is the only reducer of the cluster: while a flush is written (made slow here),
    # results must keep being added, or every worker waits for the store
    writing = threading.Event()
    slow_flushes = []
    original = Store.add_word_counts

    def slow(self, counts, marks, elapsed_s):
        writing.set()
        try:
            time.sleep(0.3)
            original(self, counts, marks, elapsed_s)
        finally:
            writing.clear()
        slow_flushes.append(len(marks))

    monkeypatch.setattr(Store, "add_word_counts", slow)
    during = []

    def progress(event):
        if event["stage"] == "counting" and "in_flight" in event:
            during.append(writing.is_set())

    # ~16 units, each result flushed at once: a few slow flushes, results arriving during them
    r = train([FIXTURE], tmp_path / "ray.db", VOCAB, [SPECIAL], chunk_size=CHUNK, count_engine="ray",
              count_flush_seconds=0.0, progress=progress)
    assert _result(r) == local_result
    assert len(slow_flushes) >= 2
    assert any(during), "no result was added while a flush was written"


def test_ray_counts_every_input_kind_like_local(cluster, tmp_path):
    # jsonl (line-aligned ranges) and gzip-compressed jsonl (one whole-file unit): each Ray task
    # reads its unit through bpe_store.text.inputs, as the local readers do
    import gzip

    docs = FIXTURE.read_text(encoding="utf-8").split(SPECIAL)[:400]
    lines = "".join(json.dumps({"text": d}) + "\n" for d in docs).encode("utf-8")
    (tmp_path / "a.jsonl").write_bytes(lines)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(lines))
    inputs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz"]
    local = train(inputs, tmp_path / "local.db", 400, [SPECIAL], workers=1, chunk_size=CHUNK)
    r = train(inputs, tmp_path / "ray.db", 400, [SPECIAL], chunk_size=CHUNK, count_engine="ray")
    assert _result(r) == _result(local)


@pytest.mark.parametrize("kind", ["text", "jsonl"])
def test_ray_applies_the_max_pretoken_bytes_of_the_run(cluster, tmp_path, kind):
    # the unit descriptions carry the run's limit: a Ray task that ignored it would count the
    # long runs of letters whole, and the merges would differ from the local run's
    docs = [("x" * 700 + " hello world ") * 3 for _ in range(40)]
    if kind == "text":
        (tmp_path / "in.txt").write_text(SPECIAL.join(docs), encoding="utf-8")
        inputs = [tmp_path / "in.txt"]
    else:
        (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs),
                                           encoding="utf-8")
        inputs = [tmp_path / "in.jsonl"]
    local = train(inputs, tmp_path / "local.db", 300, [SPECIAL], workers=1, chunk_size=4096,
                  max_pretoken_bytes=64)
    r = train(inputs, tmp_path / "ray.db", 300, [SPECIAL], chunk_size=4096, count_engine="ray",
              max_pretoken_bytes=64)
    assert _result(r) == _result(local)
