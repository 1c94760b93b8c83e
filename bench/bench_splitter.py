#!/usr/bin/env python3
"""What the one splitter (native/splitter.h) changes: encoding text without ASCII cut points, and
counting documents joined by the separator byte 0xFF. One measurement per process, so run it
on two checkouts (before/after) and compare; prints wall and CPU seconds and peak RSS.

    python bench/bench_splitter.py encode zh.db zh.txt --threads 2   # bpe-store encode's path
    python bench/bench_splitter.py count ../shared/corpora/enwiki-100M.txt [--docs] [--repeat 5]

``count`` times ``count_chunk`` over a file's chunks on 2 threads; ``--docs`` first replaces each
``<|endoftext|>`` by 0xFF and counts with both as specials (what every jsonl/parquet block pays).
Timings on a shared machine are noisy: for a deterministic comparison run ``count --repeat 1``
under ``valgrind --tool=cachegrind --cache-sim=no`` (instructions).
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

EOT = "<|endoftext|>"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def encode(args: argparse.Namespace) -> None:
    from bpe_store.tokenizer.token_files import encode_to_file

    with tempfile.TemporaryDirectory() as d:
        t, c = time.perf_counter(), _cpu()
        n = encode_to_file(Path(args.db), [Path(args.file)], Path(d) / "ids.npy", threads=args.threads, force=True)
        print(f"encode {args.file}: {n} ids, wall {time.perf_counter() - t:.2f} s, CPU {_cpu() - c:.2f} s, "
              f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def count(args: argparse.Namespace) -> None:
    from bpe_store import native
    from bpe_store.text import chunks

    data = Path(args.file).read_bytes()
    specials = [EOT.encode()]
    if args.docs:
        data = data.replace(EOT.encode(), b"\xff")
        specials.append(b"\xff")
    step = chunks.DEFAULT_CHUNK_SIZE
    chunks = [data[i:i + step] for i in range(0, len(data), step)]  # counts are exact only per chunk; fine for timing
    best = None
    for _ in range(args.repeat):
        t, cpu = time.perf_counter(), _cpu()
        with ThreadPoolExecutor(2) as pool:
            n = sum(cc.total for cc in pool.map(lambda b: native.native_count_chunk(b, specials, 0), chunks))
        run = (time.perf_counter() - t, _cpu() - cpu)
        best = run if best is None or run[1] < best[1] else best
    print(f"count {args.file}{' as documents' if args.docs else ''}: {n} pre-tokens, best of {args.repeat}: "
          f"wall {best[0]:.2f} s, CPU {best[1]:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    e = sub.add_parser("encode")
    e.add_argument("db")
    e.add_argument("file")
    e.add_argument("--threads", type=int, default=2)
    k = sub.add_parser("count")
    k.add_argument("file")
    k.add_argument("--docs", action="store_true")
    k.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    (encode if args.what == "encode" else count)(args)


if __name__ == "__main__":
    sys.exit(main())
