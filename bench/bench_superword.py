"""SuperBPE's stage 2 on a store, measured: the plain store (stage 1 and the baseline), the superword
store branched from it at merge t, and the compression of both on held-out text.

    python bench/bench_superword.py --corpus /work/big/owt-1G.txt --work /work/big/sw \
        --vocab 64000 --t 56000 --special '<|endoftext|>' --held-out ../shared/corpora/enwiki-100M.txt

Each training runs as ``bpe-store train`` in its own subprocess: wall time, CPU seconds (user +
sys, ``wait4``) and peak RSS (``ru_maxrss``) are that process's. The superword store's time is
split into its counting (stage 2's pieces) and its merging (the t stage-1 merges replayed on the
pieces, then the superword merges) from its checkpoints. The held-out text is ``--held-out-bytes``
from the end of ``--held-out`` (not in the training corpus when that is another file, or when it is
the same file's tail beyond ``--train-bytes``). The load (``uptime``) is printed beside the numbers.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path


def _run(cmd: list[str]) -> dict:
    """Run ``cmd``; its wall seconds, CPU seconds and peak RSS (MiB)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({os.waitstatus_to_exitcode(status)})")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "rss_mib": ru.ru_maxrss / 1024}


def _phases(db: Path) -> dict[str, float]:
    """Training seconds per phase, from the store's checkpoints."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT phase, max(elapsed_s) FROM checkpoints GROUP BY phase").fetchall()
        words, piece_bytes = con.execute("SELECT count(*), coalesce(sum(length(bytes)), 0) FROM words").fetchone()
    finally:
        con.close()
    out = dict(rows)
    out["words"], out["piece_bytes"] = words, piece_bytes
    return out


def _load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip().split("load average:")[-1].strip()


def _compression(dbs: dict[str, Path], text: str) -> dict[str, float]:
    from bpe_store import Tokenizer

    n = len(text.encode("utf-8"))
    return {name: n / len(Tokenizer.from_store(db).encode(text)) for name, db in dbs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, type=Path)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--vocab", type=int, default=64000)
    ap.add_argument("--t", type=int, default=56000)
    ap.add_argument("--special", default="<|endoftext|>")
    ap.add_argument("--held-out", type=Path, required=True)
    ap.add_argument("--held-out-bytes", type=int, default=5_000_000)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "bpe_store", "train", str(a.corpus), "--vocab-size", str(a.vocab),
           "--special", a.special, "--workers", str(a.workers), "-q"]
    plain, sup = a.work / "plain.db", a.work / "super.db"
    size = a.corpus.stat().st_size
    print(f"corpus {a.corpus} ({size / 1e9:.3f} GB), vocab {a.vocab}, t {a.t}; load before: {_load()}")
    rows = {}
    if not plain.exists():
        rows["plain (stage 1 and baseline)"] = _run(cli + ["--db", str(plain)]) | {"load": _load()}
    rows["superword (stage 2)"] = _run(cli + ["--db", str(sup), "--superword-from", str(a.t),
                                              "--superword-base", str(plain)]) | {"load": _load()}
    print("\n| run | wall s | CPU s | CPU s / GB | peak RSS MiB | load after |\n|---|---:|---:|---:|---:|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['cpu'] / (size / 1e9):.0f} | {r['rss_mib']:,.0f} "
              f"| {r['load']} |")
    ph = _phases(sup)
    print(f"\nstage 2: counting {ph.get('counting', 0):.1f} s, merging (replay + superword merges) "
          f"{ph.get('merging', 0) - ph.get('counting', 0):.1f} s; {ph['words']:,} distinct pieces holding "
          f"{ph['piece_bytes'] / 1e6:,.1f} MB ({ph['piece_bytes'] / size:.3f} bytes per input byte); "
          f"store {sup.stat().st_size / 1e6:,.0f} MB ({sup.stat().st_size / size:.2f} bytes per input byte); "
          f"peak RSS {rows['superword (stage 2)']['rss_mib'] * 2**20 / size:.2f} bytes per input byte")
    with open(a.held_out, "rb") as f:
        f.seek(max(a.held_out.stat().st_size - a.held_out_bytes, 0))
        text = f.read().decode("utf-8", "ignore")
    comp = _compression({"plain": plain, "superword": sup}, text)
    gain = comp["superword"] / comp["plain"] - 1
    print(f"\nheld-out: the last {len(text.encode()):,} bytes of {a.held_out}: bytes per token plain "
          f"{comp['plain']:.3f}, superword {comp['superword']:.3f} ({gain:+.1%}; "
          f"{1 - comp['plain'] / comp['superword']:.1%} fewer tokens); load {_load()}")


if __name__ == "__main__":
    main()
