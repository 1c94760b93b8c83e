"""Counting throughput: the native scanner (threads or processes) against the `regex` path.

Runs the counting phase's map + in-memory reduce exactly as ``count_step._count`` does (chunks
planned by ``plan_chunks``, ``count_chunk_task`` per chunk, ``Counter.update`` into one total),
without the store, so it measures pre-tokenizing and counting only. Each configuration runs in a
fresh subprocess so its peak RSS is its own.

Example::

    python bench/bench_count.py                       # enwiki-100M, writes bench/RESULTS-count.md
    python bench/bench_count.py --repeat 3 --regex-mb 16 --out -
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_store.counting.count import (  # noqa: E402
    RangeTask,
    add_counts,
    count_chunk_native_task,
    count_chunk_task,
    native_counts,
    new_word_counts,
)
from bpe_store.counting.parallel import count_chunks_threaded  # noqa: E402
from bpe_store.text.chunks import DEFAULT_CHUNK_SIZE, plan_chunks  # noqa: E402
from bpe_store.text.pretokenize import CL100K_PATTERN, GPT2_PATTERN, PretokenSpec  # noqa: E402

DEFAULT_CORPUS = ROOT.parent / "shared" / "corpora" / "enwiki-100M.txt"
SPECIALS = ["<|endoftext|>"]
#: The GPT-2 pattern wrapped in a group: the same matches, but not equal to GPT2_PATTERN, so
#: ``count_chunk`` takes the `regex` path (what any non-GPT-2 pattern gets).
REGEX_PATTERN = f"(?:{GPT2_PATTERN})"
#: GPT-4's (cl100k) regex in a group: a real tiktoken pattern, not a name, so on the `regex` path
#: (the named "gpt4" has a native scanner).
GPT4_PATTERN = f"(?:{CL100K_PATTERN})"
OWT_BYTES = 11.9e9

# (label, engine, pool kind, workers)
CONFIGS: list[tuple[str, str, str, int]] = [
    ("native, 1 thread", "native", "inline", 1),
    ("native, 2 threads", "native", "threads", 2),
    ("native, 2 processes", "native", "processes", 2),
    ("regex, 1 process", "regex", "inline", 1),
    ("regex, 2 processes", "regex", "processes", 2),
    # the counting phase of `train` itself: the pool `_count` picks, flushes into SQLite included
    ("train counting, native, 1 worker", "native", "store", 1),
    ("train counting, native, 2 workers", "native", "store", 2),
    ("train counting, regex, 2 workers", "regex", "store", 2),
    ("train counting, gpt4, 1 worker", "gpt4", "store", 1),
    ("train counting, gpt4, 2 workers", "gpt4", "store", 2),
]


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def cpu_seconds() -> float:
    """User + system CPU time of this process and its waited-for children (pool workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run_one(engine: str, pool_kind: str, workers: int, path: str, limit: int, chunk_size: int) -> dict:
    """Count ``path[:limit]`` once; ``{seconds, bytes, words, pretokens, rss_mb, child_rss_mb}``."""
    pattern = {"native": GPT2_PATTERN, "gpt4": GPT4_PATTERN}.get(engine, REGEX_PATTERN)
    assert native_counts(pattern) == (engine == "native")
    if pool_kind == "store":
        return run_train_counting(pattern, workers, path, limit, chunk_size)
    chunks = plan_chunks(path, limit, SPECIALS, GPT2_PATTERN, chunk_size)
    tasks = [RangeTask(i, path, s, e, PretokenSpec(tuple(SPECIALS), pattern)) for i, (s, e) in enumerate(chunks)]
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    pool = None
    # as `count_step._count`: native chunk counts stay in C++ and are summed by a WordCounter, except
    # across processes, where they must come back as pickled dicts (what a process pool costs)
    native = engine == "native" and pool_kind != "processes"
    task = count_chunk_native_task if native else count_chunk_task
    if pool_kind == "threads":
        results = count_chunks_threaded(tasks, workers, task)
    elif pool_kind == "processes":
        pool = multiprocessing.get_context("spawn").Pool(workers, initializer=_ignore_sigint)
        results = pool.imap_unordered(count_chunk_task, tasks)
    else:
        results = map(task, tasks)
    total = new_word_counts(native)
    pretokens = 0
    for _, counts, n, *_ in results:
        add_counts(total, counts)
        pretokens += n
    seconds = time.perf_counter() - t0
    if pool is not None:
        pool.close()
        pool.join()  # the workers' CPU time is counted once they are waited for
    return {
        "seconds": seconds,
        "cpu": cpu_seconds() - cpu0,
        "bytes": limit,
        "words": len(total),
        "pretokens": pretokens,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def run_train_counting(pattern: str, workers: int, path: str, limit: int, chunk_size: int, **train_kwargs) -> dict:
    """Time `train`'s counting phase (first "counting" event to the "pairs" event) on
    ``path[:limit]``, then abandon the run: the flushes into the store are part of the time.
    ``train_kwargs`` go to ``train`` (bench_ray.py: ``count_engine="ray"``)."""
    import tempfile

    from bpe_store.training.train import train

    class CountingDone(Exception):
        pass

    marks: dict[str, float] = {}

    def progress(event: dict) -> None:
        if event["stage"] == "counting" and "start" not in marks:
            marks["start"] = time.perf_counter()
            marks["cpu0"] = cpu_seconds()
        elif event["stage"] == "pairs":
            marks["end"] = time.perf_counter()
            marks["cpu1"] = cpu_seconds()
            raise CountingDone  # skip the pair counts and merges: not what this measures

    with tempfile.TemporaryDirectory(prefix="bench-count-") as tmp:
        corpus = Path(path)
        if limit < os.path.getsize(path):
            with open(path, "rb") as f:
                data = f.read(limit)
            corpus = Path(tmp) / "corpus.txt"
            corpus.write_bytes(data[: data.rfind(b"\n") + 1])  # whole lines: valid UTF-8
            limit = corpus.stat().st_size
        try:
            train([corpus], Path(tmp) / "run.db", 100_000, SPECIALS, pattern=pattern, workers=workers,
                  chunk_size=chunk_size, progress=progress, **train_kwargs)
        except CountingDone:
            pass
    return {
        "seconds": marks["end"] - marks["start"],
        # worker processes (the regex path) are still alive here, so their CPU time is unknown
        "cpu": marks["cpu1"] - marks["cpu0"],  # counting has no worker processes: all CPU is ours
        "bytes": limit,
        "words": 0,
        "pretokens": 0,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "child_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


def parallelism_probe() -> float:
    """Speed-up of 2 threads over 1 on pure GIL-free work (hashlib.sha256 of 64 MiB): how many
    cores this shared machine actually gives right now (2.0 on an idle 2-core machine)."""
    import hashlib
    import threading

    data = os.urandom(64 << 20)

    def work() -> None:
        for _ in range(2):
            hashlib.sha256(data).digest()

    t0 = time.perf_counter()
    work()
    work()
    serial = time.perf_counter() - t0
    threads = [threading.Thread(target=work) for _ in range(2)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return serial / (time.perf_counter() - t0)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def report_head(title: str, machine_extra: str = "") -> list[str]:
    """The first lines of a RESULTS file: its title, the command that wrote it, the machine."""
    cmd = "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])
    return [f"# {title}", "", f"Command (from the repository root): `{cmd}`", "",
            f"Machine: `nproc` = {os.cpu_count()}, CPU: {cpu_model()}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}{machine_extra}."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default=str(DEFAULT_CORPUS))
    ap.add_argument("--native-mb", type=int, default=100, help="MB counted by the native configurations")
    ap.add_argument("--regex-mb", type=int, default=16, help="MB counted by the regex configurations")
    ap.add_argument("--chunk-mb", type=float, default=DEFAULT_CHUNK_SIZE / 2**20)
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration; the best is reported")
    ap.add_argument("--out", default=str(ROOT / "bench" / "RESULTS-count.md"), help="'-' for stdout only")
    ap.add_argument("--only", help="run only configurations whose label contains this")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # internal: run one configuration, print JSON
    args = ap.parse_args()
    size = os.path.getsize(args.corpus)
    chunk = int(args.chunk_mb * 2**20)

    if args.one:
        engine, kind, workers, limit = args.one.split(",")
        print(json.dumps(run_one(engine, kind, int(workers), args.corpus, int(limit), chunk)))
        return

    # Repeats are interleaved (every configuration once, then again) so that load from other
    # work on a shared machine spreads over all configurations instead of hitting one of them.
    configs = [c for c in CONFIGS if args.only is None or args.only in c[0]]
    runs: dict[str, list[dict]] = {label: [] for label, *_ in configs}
    probes: list[float] = []
    for _ in range(args.repeat):
        probes.append(parallelism_probe())
        print(f"parallelism probe: 2 threads = {probes[-1]:.2f}x one thread (sha256)", flush=True)
        for label, engine, kind, workers in configs:
            limit = min(size, (args.native_mb if engine == "native" else args.regex_mb) * 10**6)
            out = subprocess.run([sys.executable, __file__, "--corpus", args.corpus, "--chunk-mb", str(args.chunk_mb),
                                  "--one", f"{engine},{kind},{workers},{limit}"],
                                 check=True, capture_output=True, text=True).stdout
            runs[label].append(json.loads(out))
    rows = []
    for label, _engine, _kind, workers in configs:
        best = min(runs[label], key=lambda r: r["seconds"])
        mbs = best["bytes"] / 1e6 / best["seconds"]
        rows.append((label, workers, best, mbs, [r["seconds"] for r in runs[label]]))
        print(f"{label:22s} {best['bytes'] / 1e6:6.0f} MB  {best['seconds']:7.2f} s  cpu {best['cpu']:6.2f} s  "
              f"{mbs:7.1f} MB/s  "
              f"{mbs / workers:6.1f} MB/s/core  rss {best['rss_mb']:.0f} MB (+worker {best['child_rss_mb']:.0f} MB)"
              f"  runs {[round(r['seconds'], 2) for r in runs[label]]}", flush=True)

    lines = report_head("Counting throughput (bench/bench_count.py)") + [
        f"Parallelism actually available (2 threads of GIL-free sha256 vs 1, before each round): "
        f"{', '.join(f'{x:.2f}x' for x in probes)}; 2.0x means two free cores, 1.0x means one.",
        f"Corpus: `{os.path.basename(args.corpus)}`, special token `<|endoftext|>`, chunks of "
        f"{args.chunk_mb:g} MiB, map + in-memory reduce as in `count_step._count` (no store writes), except "
        "the `train counting` rows: `train`'s whole counting phase, flushes into SQLite included. "
        f"Best of {args.repeat} runs; the machine is shared with other builds and tests, so timings are "
        "noisy (all runs are listed).",
        "",
        "`MB/s per core` is MB/s / workers; `MB per CPU-s` is MB over the CPU time actually used (user +",
        "system, workers included), which does not depend on how many cores the machine had free.",
        "",
        "| configuration | MB counted | seconds (best) | MB/s | MB/s per core | CPU s | MB per CPU-s"
        " | peak RSS main | peak RSS largest worker | all runs (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for label, workers, best, mbs, all_runs in rows:
        child = f"{best['child_rss_mb']:.0f} MB" if best["child_rss_mb"] > 0 else "-"
        known = best["cpu"] > 0.05 * best["seconds"]
        cpu = f"{best['cpu']:.2f} | {best['bytes'] / 1e6 / best['cpu']:.0f}" if known else "- | -"
        lines.append(f"| {label} | {best['bytes'] / 1e6:.0f} | {best['seconds']:.2f} | {mbs:.1f} | "
                     f"{mbs / workers:.1f} | {cpu} | {best['rss_mb']:.0f} MB | {child} | "
                     f"{', '.join(f'{s:.2f}' for s in all_runs)} |")
    fastest = max(rows, key=lambda r: r[3])
    regex_best = max((r for r in rows if r[0].startswith("regex")), key=lambda r: r[3], default=fastest)
    lines += [
        "",
        "## Projection for OpenWebText (11.9 GB)",
        "",
        f"Counting scales linearly with bytes (chunks are independent), so at the rates above: "
        f"{fastest[0]}: {OWT_BYTES / 1e6 / fastest[3] / 60:.1f} min; "
        f"{regex_best[0]}: {OWT_BYTES / 1e6 / regex_best[3] / 60:.1f} min "
        f"(on this {os.cpu_count()}-core machine; per-core rates extrapolate to more cores until the "
        "single reducing thread or the disk limits). English web text resembles enwiki; the count of "
        "distinct words (~6.6 M for OpenWebText) grows the reduce and the store flushes, not the scan.",
        "",
    ]
    text = "\n".join(lines)
    if args.out == "-":
        print(text)
    else:
        # keep the hand-written "## Notes" section (interpretation) of an earlier run
        old = Path(args.out).read_text() if Path(args.out).exists() else ""
        if "\n## Notes" in old:
            text += old[old.index("\n## Notes"):]
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
