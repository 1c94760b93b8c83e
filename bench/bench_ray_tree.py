"""The Ray counting tree (bpe_store.counting.ray_count): the driver's CPU per GB, the rates of each
part of the tree, and a projection to OpenWebText and 1 TB on N nodes of 16 cores.

Each run is a fresh subprocess that starts a local Ray cluster of ``--workers`` CPUs (warmed up
before the clock), then trains on the corpus through the counting phase. ``driver CPU`` is
``getrusage(RUSAGE_SELF)`` of that process from the first counting event until the last flush
has committed (the cluster's processes are other processes: not in it); ``writer`` is the part
spent in ``Store.add_word_counts`` (thread CPU time); ``main`` the main thread's (sending units,
acknowledgements, takes, progress).

The component rates are measured in this process, one core, on the corpus's first units:

* counting: ``count.count_unit_counts`` (what a node counter's thread does), CPU s per GB;
* node take: ``WordCounter.pack_parts`` of a node's window, ns per distinct word;
* part sum: ``ray_node.sum_packed`` of 4 nodes' parts, ns per word in;
* driver write: from the runs, writer CPU per distinct word of its flushes;
* per unit: the driver's CPU per unit with tiny units (``--tiny-units`` x ``--tiny-bytes``).

Example::

    python bench/bench_ray_tree.py --corpus /work/big/owt-1G.txt     # prints markdown tables
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPECIALS = ["<|endoftext|>"]


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_one(corpus: str, workers: int, engine: str, chunk: int, flush_s: float) -> dict:
    """One counting phase in this process (called in a fresh subprocess): the JSON row."""
    from bpe_store.store.store import Store
    from bpe_store.text.pretokenize import GPT2_PATTERN
    from bpe_store.training.train import train

    if engine == "ray":
        import ray

        from bpe_store.counting.count import RangeTask, count_unit_packed
        from bpe_store.text.pretokenize import PretokenSpec

        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        warm = ray.remote(num_cpus=1)(count_unit_packed)
        ray.get([warm.remote(RangeTask(0, corpus, 0, 1, PretokenSpec((), GPT2_PATTERN))) for _ in range(2 * workers)])

    writer = {"cpu": 0.0, "words": []}
    original = Store.add_word_counts

    def timed(self, counts, *args, **kwargs):
        t0 = time.thread_time()
        try:
            return original(self, counts, *args, **kwargs)
        finally:
            writer["cpu"] += time.thread_time() - t0
            writer["words"].append(len(counts))

    Store.add_word_counts = timed

    class CountingDone(Exception):
        pass

    marks: dict = {}

    def progress(event: dict) -> None:
        if event["stage"] == "counting" and "t0" not in marks:
            marks.update(t0=time.perf_counter(), c0=cpu_s(), m0=time.thread_time())
        elif event["stage"] == "pairs":
            marks["m1"] = time.thread_time()
            raise CountingDone

    with tempfile.TemporaryDirectory(prefix="bench-tree-") as tmp:
        try:
            train([corpus], Path(tmp) / "run.db", 100_000, SPECIALS, workers=workers, chunk_size=chunk,
                  count_engine=engine, count_flush_seconds=flush_s, progress=progress)
        except CountingDone:
            pass  # the session waited for the last flush to commit before the exception left train
        t1, c1 = time.perf_counter(), cpu_s()
        with Store.open(Path(tmp) / "run.db", readonly=True) as store:
            distinct = store.sql("SELECT count(*) FROM words").scalar()
    return {"seconds": t1 - marks["t0"], "cpu": c1 - marks["c0"], "main": marks["m1"] - marks["m0"],
            "writer": writer["cpu"], "flush_words": writer["words"], "distinct": distinct,
            "bytes": os.path.getsize(corpus), "units": -(-os.path.getsize(corpus) // chunk),
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def subprocess_run(corpus: str, workers: int, engine: str, chunk: int, flush_s: float = 10.0) -> dict:
    one = f"{engine},{workers},{chunk},{flush_s}"
    out = subprocess.run([sys.executable, __file__, "--one", one, "--corpus", corpus],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def component_rates(corpus: str, chunk: int, units: int = 24) -> dict:
    """One core's rates for the tree's parts, on the corpus's first ``units`` units."""
    from bpe_store.counting.count import PackedCounts, RangeTask, WordCounter, count_unit_counts
    from bpe_store.counting.ray_node import sum_packed
    from bpe_store.text.pretokenize import GPT2_PATTERN, PretokenSpec

    window = WordCounter()
    c0 = time.process_time()
    for i in range(units):
        _, counts, _, _ = count_unit_counts(RangeTask(i, corpus, i * chunk, (i + 1) * chunk,
                                                       PretokenSpec(tuple(SPECIALS), GPT2_PATTERN, "replace")))
        window.add(counts)
    count_s = time.process_time() - c0
    words = len(window)
    c0 = time.process_time()
    parts = window.pack_parts(4)
    pack_s = time.process_time() - c0
    c0 = time.process_time()
    for _ in range(4):  # 4 nodes' parts j (here the same window four times: the words overlap fully)
        sum_packed(*[parts[0]] * 4)
    sum_s = time.process_time() - c0
    words_in = 4 * 4 * len(PackedCounts([parts[0]]))
    return {"count_s_per_gb": count_s / (units * chunk / 1e9), "window_words": words,
            "window_bytes": units * chunk, "pack_ns_per_word": pack_s / words * 1e9,
            "sum_ns_per_word_in": sum_s / words_in * 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="/work/big/owt-1G.txt")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--chunk-mb", type=float, default=8.0)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--tiny-units", type=int, default=1000)
    ap.add_argument("--tiny-bytes", type=int, default=4096)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        engine, workers, chunk, flush_s = args.one.split(",")
        print(json.dumps(run_one(args.corpus, int(workers), engine, int(chunk), float(flush_s))))
        return
    chunk = int(args.chunk_mb * 2**20)
    rows = []
    for _ in range(args.repeat):
        # (engine, flush window s): the default 10-s windows, and one window for the whole corpus
        for engine, flush_s in (("ray", 10.0), ("ray", 600.0), ("local", 10.0)):
            load = os.getloadavg()[0]
            r = subprocess_run(args.corpus, args.workers, engine, chunk, flush_s)
            r.update(engine=engine, load=load, flush_s=flush_s)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-tiny-") as tmp:
        tiny = Path(tmp) / "tiny.txt"
        with open(args.corpus, "rb") as f:
            data = f.read(args.tiny_units * args.tiny_bytes)
        tiny.write_bytes(data[: data.rfind(b"\n") + 1])
        load = os.getloadavg()[0]
        t = subprocess_run(str(tiny), args.workers, "ray", args.tiny_bytes)
        t["load"] = load
    print(json.dumps(t), file=sys.stderr, flush=True)
    rates = component_rates(args.corpus, chunk)
    print(json.dumps(rates), file=sys.stderr, flush=True)

    import ray

    print(f"Machine: `nproc` = {os.cpu_count()}, Python {sys.version.split()[0]}, Ray {ray.__version__}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; `uptime` load beside each row.\n")
    print(f"## Driver CPU per GB: `{os.path.basename(args.corpus)}` "
          f"({rows[0]['bytes'] / 1e9:.2f} GB), local cluster of {args.workers} CPUs, {args.chunk_mb:g} MiB units\n")
    print("| counting | load | wall s | driver CPU s | driver CPU s per GB | of which writer | main thread |"
          " flushes (distinct words each) | distinct words | peak RSS driver |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for r in rows:
        label = (f"Ray tree, {args.workers} workers, {r['flush_s']:g}-s windows" if r["engine"] == "ray"
                 else f"local, {args.workers} threads")
        gb = r["bytes"] / 1e9
        print(f"| {label} | {r['load']:.1f} | {r['seconds']:.1f} | {r['cpu']:.2f} | **{r['cpu'] / gb:.2f}** | "
              f"{r['writer']:.2f} | {r['main']:.2f} | {len(r['flush_words'])} "
              f"({', '.join(f'{w / 1e6:.2f} M' for w in r['flush_words'])}) | {r['distinct'] / 1e6:.2f} M | "
              f"{r['rss_mb']:.0f} MB |")
    ray_rows = [r for r in rows if r["engine"] == "ray"]  # the flush cost per word, from every Ray run
    per_word = sum(r["writer"] for r in ray_rows) / sum(sum(r["flush_words"]) for r in ray_rows)
    print("\n## Rates of the tree's parts (one core)\n")
    print("| part | rate |")
    print("|---|---:|")
    print(f"| node counter: counting (count_unit_counts + add) | {rates['count_s_per_gb']:.1f} CPU s per GB |")
    print(f"| node counter: take (pack_parts(4)) of a window of {rates['window_words'] / 1e6:.2f} M words "
          f"({rates['window_bytes'] / 2**20:.0f} MiB) | {rates['pack_ns_per_word']:.0f} ns per distinct word |")
    print(f"| part sum (sum_packed of 4 parts) | {rates['sum_ns_per_word_in']:.0f} ns per word in |")
    print(f"| driver: flush (WordIds.add_packed + SQLite rows), Ray runs above | "
          f"{per_word * 1e9:.0f} ns per distinct word of a flush |")
    print(f"| driver: per unit ({t['units']} units of {args.tiny_bytes} B, {args.workers} workers, "
          f"load {t['load']:.1f}) | {t['cpu'] / t['units'] * 1e3:.2f} ms CPU, "
          f"{t['seconds'] / t['units'] * 1e3:.2f} ms wall |")


if __name__ == "__main__":
    main()
