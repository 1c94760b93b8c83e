"""Counting throughput per input kind: the same documents as plain text (with <|endoftext|>),
jsonl, jsonl.gz (one file, and shards), zstd jsonl and parquet.

    python bench/bench_inputs.py --make /tmp/bench-inputs     # write the conversions (once)
    python bench/bench_inputs.py /tmp/bench-inputs --workers 2 --repeat 3

Each run is a fresh process training to vocab size 257 (no merges) so that only planning and
counting are timed: ``count_s`` is from the first counting event to the last counting
checkpoint, ``total_s`` the whole run (fingerprinting included), ``cpu_s`` the process's CPU
time and ``rss_mb`` its peak resident memory. MB/s are of the documents' text (the plain text
file's size), so every kind is measured against the same work. Results: bench/RESULTS-inputs.md.
"""

from __future__ import annotations

import argparse
import gzip
import json
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
    "jsonl.gz x4 shards": [f"shards/part-{i}.jsonl.gz" for i in range(4)],
    "jsonl.zst": ["enwiki.jsonl.zst"],
    "parquet": ["enwiki.parquet"],
}

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
    (out / "shards").mkdir(exist_ok=True)
    n = len(lines)
    for i in range(4):
        part = "".join(lines[i * n // 4:(i + 1) * n // 4]).encode("utf-8")
        (out / "shards" / f"part-{i}.jsonl.gz").write_bytes(gzip.compress(part, compresslevel=6))
    pq.write_table(pa.table({"id": list(range(n)), "text": docs}), out / "enwiki.parquet", row_group_size=4096)


def run(inputs: list[Path], workers: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        arg = json.dumps({"inputs": [str(p) for p in inputs], "db": str(Path(tmp) / "b.db"), "workers": workers})
        out = subprocess.run([sys.executable, "-c", CHILD, arg], capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path, nargs="?")
    ap.add_argument("--make", type=Path, help="write the conversions of --corpus here and exit")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--kinds", nargs="*", default=list(KINDS))
    a = ap.parse_args()
    if a.make:
        make(a.make, a.corpus)
        return
    text_mb = (a.dir / "enwiki.txt").stat().st_size / 1e6
    print(f"| kind | input MB | count s (best of {a.repeat}) | MB/s of text | vs text | total s | CPU s"
          " | peak RSS MB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for kind in a.kinds:
        inputs = [a.dir / p for p in KINDS[kind]]
        runs = [run(inputs, a.workers) for _ in range(a.repeat)]
        best = min(runs, key=lambda r: r["count_s"])
        rate = text_mb / best["count_s"]
        base = base or rate
        size = sum(p.stat().st_size for p in inputs) / 1e6
        print(f"| {kind} | {size:.0f} | {best['count_s']:.2f} | {rate:.0f} | {rate / base:.0%} | "
              f"{best['total_s']:.2f} | {best['cpu_s']:.2f} | {max(r['rss_mb'] for r in runs):.0f} |", flush=True)


if __name__ == "__main__":
    main()
