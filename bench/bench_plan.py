"""Planning against counting: what the plan step (check and fingerprint the inputs, cut them into
work units, create the store) costs before any counting, for one big file and for many small
shards, and what a resume over already counted shards reads again.

Each training is a fresh process (``--python`` runs it; by default this interpreter) that prints
its progress events with times; the phases are taken from them:

* plan: from the first ``plan`` event (the first input looked at) to the first ``counting``
  event (the store exists, every unit planned);
* counting: from the first ``counting`` event to the ``pairs`` event.

``--shards N`` writes N small text shards (each ``--shard-bytes`` of the corpus, cut at a line
end) under ``--workdir`` first, trains on all of them, then runs the same command again over the
counted store (``resume``: a larger vocabulary, so it has work to do) and reports how many shard
files that resume opened (counted with ``strace -f -e trace=openat`` when ``strace`` is there).

Every row gives wall seconds, CPU seconds (user + sys of that process) and the load average.

Example::

    head -c 1G /work/big/owt-12G.txt > /work/big/owt-1G.txt
    python bench/bench_plan.py /work/big/owt-1G.txt --workdir /tmp/plan-bench
    python bench/bench_plan.py /work/big/owt-1G.txt --workdir /tmp/plan-bench --shards 10000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: The training process: one JSON line per progress event kept, with its time and CPU seconds.
CHILD = r"""
import json, resource, sys, time
from bpe_store import train
t0 = time.monotonic()
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return round(r.ru_utime + r.ru_stime, 3)
listing, db, vocab, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
paths = [line for line in open(listing).read().splitlines() if line]
seen = set()
def progress(ev):
    st = ev.get("stage")
    if st in seen and st not in ("pairs",):
        return
    seen.add(st)
    print(json.dumps({"t": round(time.monotonic() - t0, 3), "cpu": cpu(), "stage": st}), flush=True)
train(paths, db, vocab, ["<|endoftext|>"], workers=workers, progress=progress)
print(json.dumps({"t": round(time.monotonic() - t0, 3), "cpu": cpu(), "stage": "end"}), flush=True)
"""


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def run(python: str, listing: Path, db: Path, vocab: int, workers: int, trace: Path | None = None) -> dict:
    """One training process; ``{stage: (t, cpu)}`` of the first event of each stage."""
    cmd = [python, "-c", CHILD, str(listing), str(db), str(vocab), str(workers)]
    if trace is not None:
        cmd = ["strace", "-f", "-qq", "-e", "trace=openat", "-o", str(trace)] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return {e["stage"]: (e["t"], e["cpu"]) for e in events}


def phases(ev: dict) -> dict[str, tuple[float, float]]:
    """plan and counting, each ``(wall s, CPU s)``, from the events' times."""
    out = {}
    if "plan" in ev and "counting" in ev:
        out["plan"] = (ev["counting"][0] - ev["plan"][0], ev["counting"][1] - ev["plan"][1])
    if "counting" in ev and "pairs" in ev:
        out["counting"] = (ev["pairs"][0] - ev["counting"][0], ev["pairs"][1] - ev["counting"][1])
    return out


def write_shards(corpus: Path, where: Path, n: int, size: int) -> list[Path]:
    """``n`` shards of about ``size`` bytes each, cut from ``corpus`` at line ends."""
    where.mkdir(parents=True, exist_ok=True)
    paths = []
    with open(corpus, "rb") as f:
        for i in range(n):
            data = f.read(size)
            data += f.readline()
            p = where / f"shard-{i:05d}.txt"
            p.write_bytes(data)
            paths.append(p)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/plan-bench"))
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--vocab", type=int, default=300)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--shards", type=int, default=0, help="write and train on this many shards instead")
    ap.add_argument("--shard-bytes", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    listing = args.workdir / "inputs.txt"
    if args.shards:
        shards = write_shards(args.corpus, args.workdir / "shards", args.shards, args.shard_bytes)
        listing.write_text("\n".join(map(str, shards)) + "\n")
        what = f"{args.shards} shards of ~{args.shard_bytes} bytes"
    else:
        listing.write_text(f"{args.corpus}\n")
        subprocess.run(["cat", str(args.corpus)], stdout=subprocess.DEVNULL, check=True)  # warm the cache
        what = f"{args.corpus} ({args.corpus.stat().st_size} bytes)"
    print(f"# {what}, vocab {args.vocab}, workers {args.workers}")
    for _ in range(args.repeat):
        db = args.workdir / "plan.db"
        for f in args.workdir.glob("plan.db*"):
            f.unlink()
        before = load()
        ev = run(args.python, listing, db, args.vocab, args.workers)
        ph = phases(ev)
        pw, pc = ph["plan"]
        cw, cc = ph["counting"]
        print(f"| train | {pw:.3f} / {pc:.3f} | {cw:.2f} / {cc:.2f} | {100 * pw / cw:.1f} % | {before} |",
              flush=True)
        if args.shards:
            trace = args.workdir / "resume.strace" if shutil.which("strace") else None
            before = load()
            t0 = time.monotonic()
            ev = run(args.python, listing, db, args.vocab + 50, args.workers, trace)
            wall = time.monotonic() - t0
            opened = "?"
            if trace is not None:
                shard_dir = str(args.workdir / "shards")
                opened = sum(1 for line in trace.read_text().splitlines()
                             if shard_dir in line and "ENOENT" not in line)
            print(f"| resume (vocab +50) | whole process {wall:.2f} s, cpu {ev['end'][1]:.2f} s "
                  f"| shard files opened: {opened} | {before} |", flush=True)


if __name__ == "__main__":
    main()
