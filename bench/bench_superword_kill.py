"""What a kill -9 in SuperBPE's stage 2 costs: a superword store trained from a finished plain store
(``bench_superword.py`` makes both), killed once its merges reach ``--kill-at``, then resumed to the
end; beside it, the uninterrupted stage 2's time from that run's store.

    python bench/bench_superword_kill.py --corpus /work/big/superword/owt-1G.txt \
        --work /work/big/superword/owt1g-s15 --vocab 64000 --t 56000 --kill-at 60000

The cost of the kill is (the killed run's wall + the resume's wall) - the uninterrupted run's wall
(``--whole``: its bench.log row, or measured here when absent): the merges lost since the last log
(a second at most) and the resume's start (reading the words file, or the store's pieces, and
replaying the merges logged since). Each run is a ``bpe-store train`` subprocess: wall, CPU
(``wait4``) and peak RSS; the load (``uptime``) beside them. The resumed store's merges are
compared with the uninterrupted one's.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1].strip()


def _merges(db: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            return con.execute("SELECT count(*) FROM merges").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def _rows(db: Path) -> list[tuple]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute('SELECT rank, "left", "right", token, count FROM merges ORDER BY rank').fetchall()
    finally:
        con.close()


def _run(cmd: list[str], kill_at: int | None = None, db: Path | None = None) -> dict:
    """Run ``cmd`` (killed with SIGKILL once ``db`` holds ``kill_at`` merges): wall, CPU, peak RSS."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    if kill_at is not None:
        while proc.poll() is None and _merges(db) < kill_at:
            time.sleep(0.2)
        proc.kill()
    _, status, ru = os.wait4(proc.pid, 0)
    out = {"wall": time.perf_counter() - t0, "cpu": ru.ru_utime + ru.ru_stime, "rss_mib": ru.ru_maxrss / 1024,
           "rc": os.waitstatus_to_exitcode(status), "load": _load()}
    if kill_at is None and out["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({out['rc']})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, type=Path)
    ap.add_argument("--work", required=True, type=Path, help="holds plain.db (and super.db: the whole run)")
    ap.add_argument("--vocab", type=int, default=64000)
    ap.add_argument("--t", type=int, default=56000)
    ap.add_argument("--kill-at", type=int, required=True)
    ap.add_argument("--special", default="<|endoftext|>")
    a = ap.parse_args()
    db = a.work / "killed.db"
    for p in a.work.glob("killed.db*"):
        p.unlink()
    cmd = [sys.executable, "-m", "bpe_store", "train", str(a.corpus), "--db", str(db), "--vocab-size", str(a.vocab),
           "--special", a.special, "--workers", "2", "-q", "--superword-from", str(a.t),
           "--superword-base", str(a.work / "plain.db")]
    print(f"load before: {_load()}")
    killed = _run(cmd, a.kill_at, db)
    at = _merges(db)
    words = a.work / "killed.db.stage2-words"
    print(f"killed at {at} merges: {killed}; words file {words.stat().st_size / 1e6:,.0f} MB"
          if words.exists() else f"killed at {at} merges: {killed}; no words file")
    resumed = _run(cmd)
    print(f"resumed: {resumed}")
    whole = a.work / "super.db"
    same = _rows(db) == _rows(whole) if whole.exists() else None
    print(f"merges equal to {whole}: {same}")


if __name__ == "__main__":
    main()
