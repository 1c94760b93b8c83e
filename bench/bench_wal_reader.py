"""A reader holding an old snapshot for a while during training: how large the WAL grows.

The reader (``BEGIN; SELECT ...`` left open, as a ``sqlite3`` session) starts at the first event of
``--phase`` (counting or merging) and leaves after ``--hold`` seconds. ``--slow-merging S`` makes the
progress callback sleep S seconds every 4 merges, so that merging outlasts the reader. Prints the
WAL's size every minute, its peak while the reader stayed, and its size at the first writes after.

    python bench/bench_wal_reader.py ../shared/corpora/enwiki-100M.txt --vocab-size 32000 \\
        --phase merging --hold 600 --slow-merging 0.07
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

import bpe_store.training.merge_step as merge_step
from bpe_store import train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--phase", choices=["counting", "merging"], default="merging")
    ap.add_argument("--hold", type=float, default=600.0, help="seconds the reader holds its snapshot")
    ap.add_argument("--slow-merging", type=float, default=0.0, help="seconds slept every 4 merges")
    ap.add_argument("--checkpoint-merges", type=int, default=None)
    ap.add_argument("--db", default=None)
    args = ap.parse_args()
    db = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="bench-wal-")) / "run.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    if args.slow_merging:
        merge_step._SUB_STEP = 4  # a progress event every 4 merges

    def wal() -> int:
        p = Path(f"{db}-wal")
        return p.stat().st_size if p.exists() else 0

    st: dict = {"reader": None, "since": None, "left": None, "peak": 0, "minute": 0, "after": 0}

    def leave() -> None:
        time.sleep(args.hold)
        st["reader"].execute("ROLLBACK")
        st["left"] = time.monotonic()
        print(f"reader left after {args.hold:.0f} s: WAL {wal() / 1e6:.2f} MB, peak while held "
              f"{st['peak'] / 1e6:.2f} MB", flush=True)

    def progress(e: dict) -> None:
        if st["reader"] is None and e["stage"] == args.phase and db.exists():
            r = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
            r.execute("BEGIN")
            r.execute("SELECT count(*) FROM run").fetchone()
            st["reader"], st["since"] = r, time.monotonic()
            threading.Thread(target=leave, daemon=True).start()
            print(f"reader holds a snapshot from {e['stage']} at {e.get('done')}", flush=True)
        if st["since"] is not None and st["left"] is None:
            st["peak"] = max(st["peak"], wal())
            held = time.monotonic() - st["since"]
            if held >= 60 * (st["minute"] + 1):
                st["minute"] += 1
                print(f"{held:.0f} s held ({e['stage']} {e.get('done')}): WAL {wal() / 1e6:.2f} MB", flush=True)
        if st["left"] is not None and e["stage"] in ("merge_log", "checkpoint") and st["after"] < 3:
            st["after"] += 1
            print(f"{e['stage']} {time.monotonic() - st['left']:.1f} s after: WAL {wal() / 1e6:.2f} MB", flush=True)
        if e["stage"] == "merging" and args.slow_merging:
            time.sleep(args.slow_merging)

    t0, c0 = time.monotonic(), os.times()
    r = train([args.corpus], db, args.vocab_size, ["<|endoftext|>"], progress=progress,
              checkpoint_merges=args.checkpoint_merges)
    c1 = os.times()
    print(f"{len(r.merges)} merges; WAL peak while held {st['peak'] / 1e6:.2f} MB, at the end {wal() / 1e6:.2f} MB; "
          f"{time.monotonic() - t0:.0f} s wall, {c1.user + c1.system - c0.user - c0.system:.1f} CPU s; "
          f"load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
