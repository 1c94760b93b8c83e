"""Benchmark of the merge phase: native vs Python engine, checkpoint overhead, resume after kill -9.

Counts the corpus once (with the project's own chunking and counting) into a template store under
bench/out/ (gitignored), then runs each measurement in a fresh child process so that its peak
RSS is its own:

* engine-native / engine-python: read the word rows, build the engine, merge to the vocab size
  (no SQLite writes): the merge phase proper;
* train-default: ``train()`` on a copy of the counted store with the default checkpoint policy;
* train-2000: the same with a checkpoint every 2000 merges (the default before this bench);
* train-one: the same with a single checkpoint at the end (the cost of checkpoints is the gap);
* resume: ``train()`` with one checkpoint at 50% of the merges, killed with SIGKILL just after
  it, then resumed with the default policy; the time to resume is that of the second ``train()``
  call (read the store, rebuild and check the engine, merge the other half, write), and its
  result must equal an uninterrupted run.

Usage::

    python bench/bench_merge.py                       # everything, enwiki-100M -> 32000
    python bench/bench_merge.py --only engine-native --repeat 3
    python bench/bench_merge.py --corpus ../shared/corpora/zhwiki-20M.txt --vocab-size 8000

Prints a Markdown table (and JSON lines with --json) to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "enwiki-100M.txt"
SPECIALS = ["<|endoftext|>"]
MODES = ["engine-native", "engine-python", "train-default", "train-2000", "train-one", "resume"]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_s() -> float:
    """CPU seconds of this process: steadier than wall time on a machine shared with others."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def counted_store(corpus: Path, workers: int) -> Path:
    """The template: a store whose counting phase is complete (built once, then reused)."""
    OUT.mkdir(exist_ok=True)
    template = OUT / f"{corpus.stem}-counted.db"
    if template.exists():
        from bpe_store.errors import StoreError
        from bpe_store.store.store import Store

        try:
            Store.open(template, readonly=True).close()
            return template
        except StoreError as exc:  # e.g. made before a schema change: count again
            print(f"recounting: {exc}", file=sys.stderr)
            template.unlink()
    import multiprocessing

    from bpe_store import __version__
    from bpe_store.counting.count import RangeTask, count_chunk_task
    from bpe_store.store.store import Store
    from bpe_store.text.chunks import DEFAULT_CHUNK_SIZE, plan_chunks
    from bpe_store.text.input_checks import scan_source
    from bpe_store.text.pretokenize import GPT2_PATTERN, PretokenSpec
    from bpe_store.training.options import check_params

    t0 = time.perf_counter()
    params = check_params(32000, SPECIALS, GPT2_PATTERN, "strict")
    source = scan_source(corpus)
    chunks = [(0, s, e) for s, e in plan_chunks(source.path, source.size, SPECIALS, GPT2_PATTERN,
                                                 DEFAULT_CHUNK_SIZE)]
    tmp = template.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    store = Store.create(tmp)
    try:
        store.init_run(params, [source], chunks, DEFAULT_CHUNK_SIZE, __version__)
        tasks = [RangeTask(c.id, source.path, c.start, c.end, PretokenSpec(tuple(SPECIALS), GPT2_PATTERN))
                 for c in store.chunks()]
        from collections import Counter

        total: Counter[bytes] = Counter()
        marks = []
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            for cid, counts, n, _ in pool.imap_unordered(count_chunk_task, tasks):
                total.update(counts)
                marks.append((cid, n))
        store.add_word_counts(total.items(), marks, time.perf_counter() - t0)
    finally:
        store.close()
    for suffix in ("-wal", "-shm"):
        Path(str(tmp) + suffix).unlink(missing_ok=True)
    tmp.rename(template)
    print(f"counted {corpus} into {template} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return template


def _copy(template: Path, name: str) -> Path:
    db = OUT / name
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    shutil.copyfile(template, db)
    return db


# -- the measurements (each runs in its own child process) ----------------------------------------

def run_engine(template: Path, kind: str, vocab_size: int) -> dict:
    from bpe_store.store.store import Store
    from bpe_store.training.merge import new_engine

    n = len(SPECIALS)
    t0 = time.perf_counter()
    with Store.open(template, readonly=True) as store:
        rows = store.load_word_rows()
    t1 = time.perf_counter()
    engine = new_engine(rows, [None] * n + [bytes([b]) for b in range(256)], n, n + 256, 0, kind)
    del rows
    t2 = time.perf_counter()
    target = vocab_size - 256 - n
    c2 = _cpu_s()
    merges = engine.step(target)
    t3 = time.perf_counter()
    merge_cpu = _cpu_s() - c2
    rows = engine.take_checkpoint_rows()
    t4 = time.perf_counter()
    return {"read_words_s": t1 - t0, "build_s": t2 - t1, "merge_s": t3 - t2, "merge_cpu_s": merge_cpu,
            "rows_s": t4 - t3,
            "merges": len(merges), "last_count": merges[-1].count if merges else None,
            "changed_words": len(rows[0]), "peak_rss_mb": _peak_rss_mb()}


def run_train(template: Path, vocab_size: int, policy: str, db_name: str) -> dict:
    """``policy``: "default", "one" (a single checkpoint at the end) or a number of merges."""
    from bpe_store.training.train import train

    db = _copy(template, db_name)
    corpus = _corpus_of(template)
    writes: list[float] = []
    marks: dict[str, float] = {}
    t0 = time.perf_counter()

    def progress(ev: dict) -> None:
        if ev["stage"] == "checkpoint" and ev.get("phase") == "merging":
            writes.append(ev["write_s"])
        elif ev["stage"] == "merging" and "first_merge" not in marks:
            marks["first_merge"] = time.perf_counter() - t0

    kw: dict = {}
    if policy == "one":
        kw = {"checkpoint_merges": 10**9, "checkpoint_seconds": 1e9}
    elif policy != "default":
        kw = {"checkpoint_merges": int(policy)}
    c0 = _cpu_s()
    r = train([corpus], db, vocab_size, SPECIALS, progress=progress, **kw)
    total = time.perf_counter() - t0
    return {"total_s": total, "cpu_s": _cpu_s() - c0, "to_first_merge_s": marks.get("first_merge"),
            "checkpoints": len(writes),
            "write_s": sum(writes), "max_write_s": max(writes, default=0.0), "merges": len(r.merges),
            "db_mb": db.stat().st_size / 2**20, "peak_rss_mb": _peak_rss_mb(),
            "merges_digest": _digest(r.merges)}


def run_killed(template: Path, vocab_size: int, db_name: str) -> dict:
    """Train with a checkpoint at half of the merges, and SIGKILL this very process in the middle
    of the next batch (the default policy would write nothing before the end on this corpus)."""
    from bpe_store.training.train import train

    db = _copy(template, db_name)
    half = (vocab_size - 256 - len(SPECIALS)) // 2

    def progress(ev: dict) -> None:
        if ev["stage"] == "merging" and ev["done"] > half:
            os.kill(os.getpid(), signal.SIGKILL)

    train([_corpus_of(template)], db, vocab_size, SPECIALS, progress=progress, checkpoint_merges=half)
    raise SystemExit("the kill did not happen")


def run_resume(template: Path, vocab_size: int, db_name: str) -> dict:
    import sqlite3

    db = OUT / db_name
    con = sqlite3.connect(db)
    before = con.execute("SELECT count(*) FROM merges").fetchone()[0]
    con.close()
    r = run_train_existing(db, template, vocab_size)
    r["merges_at_kill"] = before
    return r


def run_train_existing(db: Path, template: Path, vocab_size: int) -> dict:
    from bpe_store.training.train import train

    marks: dict[str, float] = {}
    t0 = time.perf_counter()

    def progress(ev: dict) -> None:
        if ev["stage"] == "merging" and "first_merge" not in marks:
            marks["first_merge"] = time.perf_counter() - t0

    c0 = _cpu_s()
    r = train([_corpus_of(template)], db, vocab_size, SPECIALS, progress=progress)
    return {"total_s": time.perf_counter() - t0, "cpu_s": _cpu_s() - c0, "to_first_merge_s": marks.get("first_merge"),
            "merges": len(r.merges), "peak_rss_mb": _peak_rss_mb(),
            "merges_digest": _digest(r.merges)}


def _digest(merges: list[tuple[bytes, bytes]]) -> str:
    import hashlib

    return hashlib.sha256(b"".join(len(a).to_bytes(4, "little") + a + len(b).to_bytes(4, "little") + b
                                   for a, b in merges)).hexdigest()[:16]


def _corpus_of(template: Path) -> Path:
    from bpe_store.store.store import Store

    with Store.open(template, readonly=True) as store:
        return Path(store.sources()[0].path)


def child(mode: str, template: Path, vocab_size: int) -> dict:
    if mode == "engine-native":
        return run_engine(template, "native", vocab_size)
    if mode == "engine-python":
        return run_engine(template, "python", vocab_size)
    if mode.startswith("train-"):
        return run_train(template, vocab_size, mode.removeprefix("train-"), f"{mode}.db")
    if mode == "killed":
        return run_killed(template, vocab_size, "resume.db")
    if mode == "resume":
        return run_resume(template, vocab_size, "resume.db")
    raise SystemExit(f"unknown mode {mode}")


def spawn(mode: str, template: Path, vocab_size: int) -> dict | None:
    cmd = [sys.executable, __file__, "--child", mode, "--template", str(template), "--vocab-size", str(vocab_size)]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if mode == "killed":
        if p.returncode != -signal.SIGKILL:
            raise SystemExit(f"{mode}: expected SIGKILL, got {p.returncode}: {p.stderr}")
        return None
    if p.returncode != 0:
        raise SystemExit(f"{mode} failed ({p.returncode}):\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=1, help="runs per measurement (the table shows the median)")
    ap.add_argument("--only", action="append", choices=MODES, help="run only these measurements")
    ap.add_argument("--json", action="store_true", help="also print every run as a JSON line")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--template", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.template, a.vocab_size)))
        return
    template = counted_store(a.corpus.resolve(), a.workers)
    modes = a.only or MODES
    results: dict[str, list[dict]] = {}
    for mode in modes:
        for _ in range(a.repeat):
            if mode == "resume":
                spawn("killed", template, a.vocab_size)
            r = spawn(mode, template, a.vocab_size)
            results.setdefault(mode, []).append(r)
            if a.json:
                print(json.dumps({"mode": mode, **r}), flush=True)
    print(f"\nmachine: {machine()}\ncorpus: {a.corpus} -> vocab {a.vocab_size}, specials {SPECIALS}\n")
    print("| measurement | median wall s | runs wall (s) | median CPU s | peak RSS MB | notes |")
    print("|---|---:|---|---:|---:|---|")
    for mode, runs in results.items():
        key, cpu_key = ("merge_s", "merge_cpu_s") if mode.startswith("engine") else ("total_s", "cpu_s")
        vals = [r[key] for r in runs]
        cpu = statistics.median(r[cpu_key] for r in runs)
        last = runs[-1]
        if mode.startswith("engine"):
            note = (f"read words {last['read_words_s']:.2f} s, build {last['build_s']:.2f} s, "
                    f"rows {last['rows_s']:.2f} s, {last['merges']} merges")
        elif mode == "resume":
            note = (f"killed at {last['merges_at_kill']} merges; first merge after "
                    f"{last['to_first_merge_s']:.2f} s")
        else:
            note = (f"{last['checkpoints']} checkpoints, writes {last['write_s']:.2f} s "
                    f"(max {last['max_write_s']:.2f}), first merge after {last['to_first_merge_s']:.2f} s")
        print(f"| {mode} | {statistics.median(vals):.2f} | {', '.join(f'{v:.2f}' for v in vals)} | {cpu:.2f} | "
              f"{max(r['peak_rss_mb'] for r in runs):.0f} | {note} |")
    digests = {r["merges_digest"] for m, runs in results.items() if not m.startswith("engine") for r in runs}
    if len(digests) > 1:
        print("\nWARNING: the train runs did not all learn the same merges")


if __name__ == "__main__":
    main()
