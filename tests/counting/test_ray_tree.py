"""The Ray counting tree (bpe_store.counting.ray_count, ray_node) on a cluster of 3 nodes simulated on
this machine (``ray.cluster_utils.Cluster``: 3 raylets of 1 CPU each): the same merges as a local
run with a node removed while counting and with the driver killed by kill -9 and resumed; and the
node counters' parts by word hash.

Skipped only where ``ray`` cannot be imported (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import ROOT, SPECIAL, cli_cmd, env
from conftest import kill_after_checkpoints

from bpe_store.store.store import Store
from bpe_store.text.pretokenize import GPT2_PATTERN
from bpe_store.training.train import train

#: All slow (a real cluster); one xdist worker runs the Ray modules (``ONE_UNIT`` in conftest.py).
pytestmark = pytest.mark.slow

FIXTURE = ROOT / "tests" / "fixtures" / "enwiki-1M.txt"
VOCAB = 700
#: The GPT-2 pattern in a group: the same matches through `regex` (~15 MB/s): units that take
#: long enough for a node to be removed while others are still counting.
REGEX_PATTERN = f"(?:{GPT2_PATTERN})"
#: Quick detection of a dead node (Ray's default: ~15-30 s of missed health checks).
FAST_FAILURE = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                "health_check_failure_threshold": 2}


def _result(r) -> tuple:
    return r.merges, r.merge_counts, r.vocab


def _fingerprint_is_the_files(db: Path, corpus: Path) -> bool:
    """Whether the store's fingerprint of ``corpus`` is that of its units read now: each unit's
    fingerprint came back from the node that counted it, once (a unit counted again after a loss
    adds its own only once)."""
    import sqlite3

    from test_fingerprint import _units_fingerprint

    with sqlite3.connect(db) as con:
        [(digest, hash_name)] = con.execute("SELECT digest, hash FROM sources").fetchall()
        units = con.execute('SELECT start, "end" FROM chunks ORDER BY start').fetchall()
    return hash_name == "xxh3_128_units" and digest == _units_fingerprint(corpus.read_bytes(), units)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """4 MB of text (the 1 MB fixture 4 times), counted in 256 KiB units: 16 units."""
    path = tmp_path_factory.mktemp("tree") / "corpus.txt"
    path.write_bytes(FIXTURE.read_bytes() * 4)
    return path


CHUNK = 256 << 10


@pytest.fixture(scope="module")
def local_result(corpus, tmp_path_factory):
    db = tmp_path_factory.mktemp("local") / "local.db"
    return _result(train([corpus], db, VOCAB, [SPECIAL], pattern=REGEX_PATTERN, workers=1, chunk_size=CHUNK))


@pytest.fixture(scope="module")
def cluster3():
    """A cluster of 3 nodes of 1 CPU each, this process connected to it; ``(cluster, workers)``
    with the non-head nodes (shared by the module: see ``three_nodes``)."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "_system_config": FAST_FAILURE})
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    try:
        yield cluster, workers
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture
def three_nodes(cluster3):
    """``cluster3`` with 3 alive nodes again (a test may have removed one)."""
    cluster, workers = cluster3
    alive = [w for w in workers if w in cluster.worker_nodes]
    workers[:] = alive + [cluster.add_node(num_cpus=1) for _ in range(2 - len(alive))]
    cluster.wait_for_nodes()
    return cluster, workers


def test_a_node_removed_while_counting_changes_nothing(three_nodes, corpus, local_result, tmp_path):
    cluster, workers = three_nodes
    events: list[dict] = []
    removed = []

    def progress(event: dict) -> None:
        events.append(event)
        # after half the units are counted (distinct `done`s: progress repeats itself every
        # second), each node counter holds counted units that no flush has taken (after the
        # 3rd only, a loaded machine could have given none to this node yet)
        if (event["stage"] == "counting" and event.get("done") and not removed
                and len({e["done"] for e in events if e["stage"] == "counting" and e.get("done")}) >= 8):
            removed.append(workers[0])
            # the whole machine goes: its raylet, and the workers under it (a killed raylet's
            # workers may otherwise finish their calls before they notice, and lose nothing)
            raylet = workers[0].all_processes["raylet"][0].process.pid
            below = _descendants(raylet) if sys.platform.startswith("linux") else {}
            cluster.remove_node(workers[0], allow_graceful=False)
            for pid, _ in below:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    # no flush before the end (a loaded machine counts slowly enough for a timed flush to take
    # the removed node's units first): what it held is lost and must be counted again
    r = train([corpus], tmp_path / "ray.db", VOCAB, [SPECIAL], pattern=REGEX_PATTERN, chunk_size=CHUNK,
              count_engine="ray", progress=progress, count_flush_seconds=3600)
    assert removed
    counting = [e for e in events if e["stage"] == "counting" and "nodes" in e]
    assert counting[0]["nodes"] == 3
    assert counting[-1]["done"] == counting[-1]["total"] == corpus.stat().st_size
    # the removed node's units (in flight, or counted and not taken) were counted again
    assert counting[-1]["recounted"] > 0
    assert _result(r) == local_result
    assert _fingerprint_is_the_files(tmp_path / "ray.db", corpus)


DRIVER = """
import json, sys, time
from bpe_store.training.train import train
def progress(event):
    print(json.dumps(event), flush=True)
train([sys.argv[1]], sys.argv[2], int(sys.argv[3]), [sys.argv[4]], chunk_size=int(sys.argv[5]),
      pattern=sys.argv[7], count_engine="ray", ray_address=sys.argv[6], count_flush_seconds=0.0,
      progress=progress)
"""


def test_driver_killed_on_three_nodes_resumes_identically(three_nodes, corpus, local_result, tmp_path):
    cluster, _ = three_nodes
    db = tmp_path / "ray.db"
    flushes = kill_after_checkpoints([sys.executable, "-c", DRIVER, str(corpus), str(db), str(VOCAB), SPECIAL,
                                      str(CHUNK), cluster.address, REGEX_PATTERN], 2, env=env())
    assert flushes == 2
    with Store.open(db, readonly=True) as store:
        marks = [c.counted for c in store.chunks()]
    assert 1 <= sum(marks) < len(marks)  # killed mid-counting, after some flushes
    events: list[dict] = []
    r = train([corpus], db, VOCAB, [SPECIAL], pattern=REGEX_PATTERN, chunk_size=CHUNK, count_engine="ray",
              progress=events.append)
    first = next(e for e in events if e["stage"] == "counting")
    assert first["done"] > 0  # resumed: the flushed units were not counted again
    assert _result(r) == local_result
    assert _fingerprint_is_the_files(db, corpus)


def test_parts_split_words_by_a_stable_hash():
    from bpe_store._core import WordCounter, pack_counts

    counts = {f"w{i}".encode(): i + 1 for i in range(1000)}
    total = WordCounter()
    total.add_packed(pack_counts(counts))
    parts = total.pack_parts(3)
    assert len(parts) == 3
    seen: dict[bytes, int] = {}
    for p in parts:
        one = WordCounter()
        one.add_packed(p)
        for word, count in one.items():
            assert word not in seen  # each word in exactly one part
            seen[word] = count
    assert seen == counts
    # the same words split the same way in another process (a fixed hash, not a seeded one)
    code = ("import hashlib, sys; from bpe_store._core import WordCounter, pack_counts; w = WordCounter(); "
            "w.add_packed(pack_counts({f'w{i}'.encode(): i + 1 for i in range(1000)})); "
            "sys.stdout.write(','.join(hashlib.sha256(p).hexdigest() for p in w.pack_parts(3)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), check=True).stdout
    assert out == ",".join(hashlib.sha256(p).hexdigest() for p in parts)


def _proc_table() -> dict[int, tuple[int, int, bytes]]:
    """pid -> (parent pid, start time, command line) of every process now."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] != b"Z":  # a zombie has exited
            out[int(name)] = (int(fields[1]), int(fields[19]), cmd)
    return out


def _descendants(root: int) -> dict[tuple[int, int], bytes]:
    """``{(pid, start time): command line}`` of every descendant of ``root`` now."""
    table = _proc_table()
    out, stack = {}, [root]
    while stack:
        parent = stack.pop()
        for pid, (ppid, start, cmd) in table.items():
            if ppid == parent and (pid, start) not in out:
                out[(pid, start)] = cmd
                stack.append(pid)
    return out


def test_a_killed_train_leaves_no_ray_process_and_q_hides_ray_notices(corpus, tmp_path):
    # `bpe-store train --ray -q` starts a local cluster; kill -9 it while it counts: every process
    # of its cluster (the GCS, the raylet, the dashboard and runtime-env agents, the workers) must
    # be gone soon after, and -q must have kept Ray's token-authentication notice off stderr
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[ray]')")
    if not sys.platform.startswith("linux"):
        pytest.skip("finding the cluster's processes needs /proc")
    cmd = cli_cmd("train", corpus, "--db", tmp_path / "k.db", "--vocab-size", 5000, "--special", SPECIAL,
                  "--chunk-size", CHUNK, "--ray", "--workers", "1", "-q")
    seen: dict[tuple[int, int], bytes] = {}
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env()) as proc:
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                now = _descendants(proc.pid)
                seen.update(now)
                if any(c.startswith(b"ray::NodeCounter") for c in now.values()):
                    break
                time.sleep(0.05)
            assert proc.poll() is None, proc.stderr.read().decode()
            assert any(c.startswith(b"ray::NodeCounter") for c in seen.values())
            assert any(b"raylet" in c for c in seen.values())
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            proc.kill()
            _, err = proc.communicate()
    assert b"Token authentication" not in err and not err.strip(), err.decode()
    left: dict = {}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        table = _proc_table()
        left = {k: c for k, c in seen.items() if k[0] in table and table[k[0]][1] == k[1]}
        if not left:
            break
        time.sleep(0.2)
    assert not left, [c.split(b"\0")[0].decode(errors="replace") for c in left.values()]
