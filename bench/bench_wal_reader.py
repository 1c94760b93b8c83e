"""A reader holding an old snapshot for a while during training: how large the WAL grows.

The reader (``BEGIN; SELECT ...`` left open, as a ``sqlite3`` session) starts at the first event of
``--phase`` (counting or merging) and leaves after ``--hold`` seconds. ``--slow-merging S`` makes the
progress callback sleep S seconds every 4 merges, so that merging outlasts the reader. Prints the
WAL's size every minute, its peak while the reader stayed, and its size at the first writes after.

    python bench/bench_wal_reader.py ../shared/corpora/enwiki-100M.txt --vocab-size 32000 \\
        --phase merging --hold 600 --slow-merging 0.07

``--whole-run`` is the peer comparison instead: the same run without a reader, then with a reader
that holds one snapshot from the first counting event until the run has returned (the repro of
issue 33: it used to stall at the end of counting), ``--rounds`` times alternately; it prints each
run's wall and CPU seconds, the WAL's peak, the waits, whether the merges are identical, and the load.

    python bench/bench_wal_reader.py ../shared/corpora/enwiki-100M.txt --vocab-size 32000 --whole-run
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
    ap.add_argument("--whole-run", action="store_true", help="without a reader, then with one for the whole run")
    ap.add_argument("--rounds", type=int, default=1)
    args = ap.parse_args()
    if args.whole_run:
        whole_run(args)
        return
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


def _one_run(corpus: str, vocab_size: int, db: Path, with_reader: bool) -> dict:
    """One train into a new ``db``, with or without a reader held from its first counting event to
    after it returns: its wall and CPU seconds, merges, the WAL's peak and the waits."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    st: dict = {"reader": None, "peak": 0, "waits": 0, "into_wal": 0}

    def progress(e: dict) -> None:
        if with_reader and st["reader"] is None and e["stage"] == "counting" and db.exists():
            r = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None, check_same_thread=False)
            r.execute("BEGIN")
            r.execute("SELECT count(*) FROM words").fetchone()
            st["reader"] = r
        if e["stage"] == "deferred":
            st["waits"] += bool(e.get("waiting"))
            st["into_wal"] += bool(e.get("into_wal"))
        p = Path(f"{db}-wal")
        st["peak"] = max(st["peak"], p.stat().st_size if p.exists() else 0)

    load0, t0, c0 = os.getloadavg()[0], time.monotonic(), os.times()
    r = train([corpus], db, vocab_size, ["<|endoftext|>"], progress=progress)
    c1, wall = os.times(), time.monotonic() - t0
    held = st["reader"] is not None
    if held:
        st["reader"].execute("ROLLBACK")
        st["reader"].close()
    return {"wall": wall, "cpu": c1.user + c1.system - c0.user - c0.system, "merges": r.merges, "held": held,
            "peak": st["peak"], "waits": st["waits"], "into_wal": st["into_wal"],
            "load": f"{load0:.1f} -> {os.getloadavg()[0]:.1f}"}


def whole_run(args: argparse.Namespace) -> None:
    """``--whole-run``: the run without a reader and with one for the whole run, alternately."""
    work = Path(tempfile.mkdtemp(prefix="bench-wal-whole-"))
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(args.rounds):
        for with_reader in (False, True):
            run = _one_run(args.corpus, args.vocab_size, work / f"run-{int(with_reader)}.db", with_reader)
            runs[with_reader].append(run)
            print(f"{'reader for the whole run' if with_reader else 'no reader':>24}: {run['wall']:.1f} s wall, "
                  f"{run['cpu']:.1f} CPU s; WAL peak {run['peak'] / 1e6:.1f} MB; writes into the WAL "
                  f"{run['into_wal']}, waits {run['waits']}; reader held to the end: {run['held']}; "
                  f"load {run['load']}", flush=True)
    base, read = min(r["wall"] for r in runs[False]), min(r["wall"] for r in runs[True])
    same = all(r["merges"] == runs[False][0]["merges"] for r in runs[True] + runs[False])
    print(f"best wall with a reader / without: {read:.1f} / {base:.1f} = {read / base:.2f}x; "
          f"merges identical: {same}", flush=True)


if __name__ == "__main__":
    main()
