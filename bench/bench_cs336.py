"""CS336's speed test, measured: ``train_bpe(corpus.en, 500, ["<|endoftext|>"])`` (CS336 asks < 1.5 s).

Times the call itself (as the CS336 test does: imports excluded), best and median of ``--repeat``
runs, each with a fresh temporary store, and the process's peak RSS.

    python bench/bench_cs336.py --repeat 7
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BPE_STORE_SHARED", ROOT.parent / "shared"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    t0 = time.perf_counter()
    from bpe_store import train_bpe

    import_s = time.perf_counter() - t0
    corpus = SHARED / "corpora" / "cs336" / "corpus.en"
    times = []
    for _ in range(a.repeat):
        t = time.perf_counter()
        vocab, merges = train_bpe(corpus, 500, ["<|endoftext|>"])
        times.append(time.perf_counter() - t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"train_bpe(corpus.en, 500): best {min(times):.3f} s, median {statistics.median(times):.3f} s "
          f"over {a.repeat} runs; import bpe_store {import_s:.2f} s; peak RSS {rss:.0f} MB; {len(merges)} merges")


if __name__ == "__main__":
    main()
