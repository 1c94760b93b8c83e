"""Counting throughput per input kind: the same documents as plain text (with <|endoftext|>),
jsonl, jsonl.gz (one file, and shards; inflated by ISA-L when isal is installed, and as
``jsonl.gz, zlib`` by the standard library's fallback), zstd jsonl and parquet.

    python bench/bench_inputs.py --make /tmp/bench-inputs     # write the conversions (once)
    python bench/bench_inputs.py /tmp/bench-inputs --workers 2 --repeat 3
    python bench/bench_inputs.py /tmp/bench-inputs --read-only --repeat 3   # reading CPU alone

Each run is a fresh process training to vocab size 257 (no merges) so that only planning and
counting are timed: ``count_s`` is from the first counting event to the last counting
checkpoint, ``total_s`` the whole run (fingerprinting included), ``cpu_s`` the process's CPU
time (user + sys, the least of the runs: on a shared machine the stable figure) and ``rss_mb``
its peak resident memory. MB/s are of the documents' text (the plain text file's size), so every
kind is measured against the same work. ``--read-only``: CPU seconds of one thread turning every
work unit into the blocks counting consumes (``units.unit_blocks``: decompressing, parsing,
checking UTF-8), without counting; it also reads bz2 and xz conversions (``--make`` writes them;
they inflate too slowly to be worth a counting run). Results: bench/RESULTS-inputs.md.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import subprocess
import sys
import tempfile
from pathlib import Path

EOT = "<|endoftext|>"
CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpora" / "enwiki-100M.txt"

KINDS = {
    "text": ["enwiki.txt"],
    "jsonl": ["enwiki.jsonl"],
    "jsonl.gz": ["enwiki.jsonl.gz"],
    "jsonl.gz, zlib": ["enwiki.jsonl.gz"],  # isal hidden: the standard library's inflater
    "jsonl.gz x4 shards": [f"shards/part-{i}.jsonl.gz" for i in range(4)],
    "jsonl.zst": ["enwiki.jsonl.zst"],
    "parquet": ["enwiki.parquet"],
}
#: read by --read-only only
SLOW_KINDS = {"jsonl.bz2": ["enwiki.jsonl.bz2"], "jsonl.xz": ["enwiki.jsonl.xz"]}
#: run first in a child of a ", zlib" kind: importing isal fails as if it were not installed
NO_ISAL = 'import sys; sys.modules["isal"] = sys.modules["isal.igzip"] = None\n'

CHILD = """
import json, resource, sys, time
from bpe_store import train
t0 = time.perf_counter()
marks = {}
def progress(e):
    if e.get("stage") == "counting":
        marks.setdefault("first", time.perf_counter())
    if e.get("stage") == "checkpoint" and e.get("phase") == "counting":
        marks["last"] = time.perf_counter()
args = json.loads(sys.argv[1])
train(args["inputs"], args["db"], 257, ["<|endoftext|>"], workers=args["workers"], progress=progress)
t1 = time.perf_counter()
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"count_s": marks["last"] - marks["first"], "total_s": t1 - t0,
                  "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}))
"""


def make(out: Path, corpus: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard

    out.mkdir(parents=True, exist_ok=True)
    docs = corpus.read_text(encoding="utf-8").split(EOT)
    (out / "enwiki.txt").write_text(EOT.join(docs), encoding="utf-8")
    lines = [json.dumps({"id": i, "text": d}, ensure_ascii=False) + "\n" for i, d in enumerate(docs)]
    data = "".join(lines).encode("utf-8")
    (out / "enwiki.jsonl").write_bytes(data)
    (out / "enwiki.jsonl.gz").write_bytes(gzip.compress(data, compresslevel=6))
    (out / "enwiki.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=3).compress(data))
    (out / "enwiki.jsonl.bz2").write_bytes(bz2.compress(data, 9))
    (out / "enwiki.jsonl.xz").write_bytes(lzma.compress(data, preset=6))
    (out / "shards").mkdir(exist_ok=True)
    n = len(lines)
    for i in range(4):
        part = "".join(lines[i * n // 4:(i + 1) * n // 4]).encode("utf-8")
        (out / "shards" / f"part-{i}.jsonl.gz").write_bytes(gzip.compress(part, compresslevel=6))
    pq.write_table(pa.table({"id": list(range(n)), "text": docs}), out / "enwiki.parquet", row_group_size=4096)


READ_ONLY = """
import json, resource, sys, time
from bpe_store.counting.planning import plan_units, scan_input
from bpe_store.text.inputs import file_input, unit_of
from bpe_store.text.pretokenize import GPT2_PATTERN, PretokenSpec
from bpe_store.text.units import unit_blocks
args = json.loads(sys.argv[1])
specials = ["<|endoftext|>"]
cpu = 0.0
for path in args["inputs"]:
    src = scan_input(file_input(path))
    t = time.process_time()
    spec = PretokenSpec(tuple(specials), GPT2_PATTERN)
    for a, b, kind, part in plan_units(src, spec, 8 << 20):
        for _ in unit_blocks(unit_of(src, kind, a, b, part), spec, 8 << 20):
            pass
    cpu += time.process_time() - t
print(json.dumps({"read_cpu_s": cpu, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child_code(code: str, kind: str) -> str:
    return (NO_ISAL if kind.endswith(", zlib") else "") + code


def read_only(inputs: list[Path], kind: str) -> dict:
    arg = json.dumps({"inputs": [str(p) for p in inputs]})
    out = subprocess.run([sys.executable, "-c", child_code(READ_ONLY, kind), arg], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(inputs: list[Path], workers: int, kind: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        arg = json.dumps({"inputs": [str(p) for p in inputs], "db": str(Path(tmp) / "b.db"), "workers": workers})
        out = subprocess.run([sys.executable, "-c", child_code(CHILD, kind), arg], capture_output=True, text=True,
                             check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, nargs="?")
    ap.add_argument("--make", type=Path, help="write the conversions of --corpus here and exit")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", nargs="*", help="default: all (--read-only: also bz2 and xz)")
    ap.add_argument("--read-only", action="store_true", help="time reading alone (one thread, no counting)")
    a = ap.parse_args()
    if a.make:
        make(a.make, a.corpus)
        return
    text_mb = (a.dir / "enwiki.txt").stat().st_size / 1e6
    if a.read_only:
        print(f"| kind | reading CPU s (least of {a.repeat}) | per 100 MB of text | peak RSS MB |")
        print("|---|---:|---:|---:|")
        for kind in a.kinds or [*KINDS, *SLOW_KINDS]:
            runs = [read_only([a.dir / p for p in {**KINDS, **SLOW_KINDS}[kind]], kind) for _ in range(a.repeat)]
            cpu = min(r["read_cpu_s"] for r in runs)
            print(f"| {kind} | {cpu:.2f} | {cpu * 100 / text_mb:.2f} | {max(r['rss_mb'] for r in runs):.0f} |",
                  flush=True)
        return
    print(f"| kind | input MB | count s (best of {a.repeat}) | MB/s of text | vs text | total s | CPU s (least)"
          " | CPU vs text | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = base_cpu = None
    for kind in a.kinds or list(KINDS):
        inputs = [a.dir / p for p in KINDS[kind]]
        runs = [run(inputs, a.workers, kind) for _ in range(a.repeat)]
        best = min(runs, key=lambda r: r["count_s"])
        cpu = min(r["cpu_s"] for r in runs)
        rate = text_mb / best["count_s"]
        base = base or rate
        base_cpu = base_cpu or cpu
        size = sum(p.stat().st_size for p in inputs) / 1e6
        print(f"| {kind} | {size:.0f} | {best['count_s']:.2f} | {rate:.0f} | {rate / base:.0%} | "
              f"{best['total_s']:.2f} | {cpu:.2f} | {cpu / base_cpu - 1:+.0%} | {max(r['rss_mb'] for r in runs):.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
