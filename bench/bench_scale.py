"""OpenWebText scale: a multi-GB OWT-like corpus -> 32K, whole, and resumed after kills.

Runs, each as a fresh training process (``--python`` runs it; by default this interpreter):

* ``full``: the whole training from an empty store;
* ``kill-count``: the same, killed (SIGKILL) once counting has passed half of the corpus, then
  the same command again: the resume's cost against the remaining work (the full run's time
  after its own half-way point of counting);
* ``kill-merge``: killed once half of the merges are done, then resumed: its cost against the
  full run;
* ``inspect``: ``bpe-store status`` and ``bpe-store sql`` on the finished 12 GB store, as
  commands (wall and CPU of the whole process) and the queries alone in-process.

Every row gives wall seconds, CPU seconds (user + sys of that process: the machine is shared,
so CPU is the steadier figure) and peak RSS (``wait4``'s ``ru_maxrss``), and the phase times
taken from the progress events (counting, pairs, merging, final checkpoint).

Example::

    python ../shared/owt_synth.py /work/big/owt-12G.txt --size 12G --corpora ../shared/corpora
    python bench/bench_scale.py /work/big/owt-12G.txt --workdir /work/big/scale
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The training process: prints one JSON line per progress event it cares about, with its time.
CHILD = r"""
import json, resource, sys, time
from bpe_store import train
t0 = time.monotonic()
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return round(r.ru_utime + r.ru_stime, 2)
corpus, db, vocab, workers, pattern = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
seen = {"stage": None, "pct": None}
def progress(ev):
    st, done, total = ev.get("stage"), ev.get("done") or 0, ev.get("total") or 0
    pct = int(100 * done / total) if total else None
    if st in ("counting", "merging") and (st, pct) == (seen["stage"], seen["pct"]):
        return  # many events: one per percent is enough
    seen.update(stage=st, pct=pct)
    keep = {k: ev[k] for k in ("stage", "phase", "done", "total", "words", "final") if k in ev}
    print(json.dumps({"t": round(time.monotonic() - t0, 3), "cpu": cpu(), **keep}), flush=True)
train([corpus], db, vocab, ["<|endoftext|>"], workers=workers, progress=progress, pattern=pattern)
print(json.dumps({"t": round(time.monotonic() - t0, 3), "cpu": cpu(), "stage": "end"}), flush=True)
"""

def run_child(cmd: list[str], kill_when=None) -> dict:
    """Run ``cmd``; return wall, CPU, peak RSS and its events. ``kill_when(event)``: SIGKILL it
    as soon as this returns True for an event."""
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    events, killed_at = [], None
    for line in proc.stdout:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        events.append(ev)
        if kill_when is not None and killed_at is None and kill_when(ev):
            os.kill(proc.pid, signal.SIGKILL)
            killed_at = ev
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = status
    proc.stdout.close()
    wall = time.monotonic() - t0
    if kill_when is None and status != 0:
        raise SystemExit(f"training failed ({status}): {shlex.join(cmd)}")
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "peak_mb": ru.ru_maxrss / 1024,
            "events": events, "killed_at": killed_at, "phases": phases(events)}


def phases(events: list[dict]) -> dict:
    """``{stage: (wall s, CPU s)}`` from the events' times: counting (first counting event to the
    pairs event), pairs (to the first merge), merging (to the final checkpoint's writing), final
    checkpoint (its writing to its checkpoint event); a resume's ``start`` (process start to its
    first counting or merging event: imports, checks, reloading the store)."""
    def first(pred):
        return next((e for e in events if pred(e)), None)

    start = {"t": 0.0, "cpu": 0.0}
    c0 = first(lambda e: e["stage"] == "counting")
    p0 = first(lambda e: e["stage"] == "pairs")
    m0 = first(lambda e: e["stage"] == "merging")
    w0 = first(lambda e: e["stage"] == "writing" and e.get("phase") == "merging" and e.get("final"))
    end = first(lambda e: e["stage"] == "end")
    out = {}
    for name, a, b in (("start", start, c0 or m0), ("counting", c0, p0), ("pairs", p0, m0), ("merging", m0, w0),
                       ("final checkpoint", w0, end)):
        if a is not None and b is not None:
            out[name] = (b["t"] - a["t"], b.get("cpu", 0.0) - a.get("cpu", 0.0))
    return out


def lost_at_kill(r: dict) -> int | None:
    """Bytes the killed run had counted beyond its last committed counting flush: what its
    resume counts again."""
    killed = r.get("killed_at")
    if not killed or killed["stage"] != "counting":
        return None
    committed = [e["done"] for e in r["events"] if e["stage"] == "checkpoint" and e.get("phase") == "counting"]
    return killed["done"] - (committed[-1] if committed else 0)


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def train_cmd(python: list[str], corpus: Path, db: Path, vocab: int, workers: int, pattern: str = "gpt2") -> list[str]:
    return [*python, "-c", CHILD, str(corpus), str(db), str(vocab), str(workers), pattern]


def remove(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def evict(db: Path) -> None:
    """Drop the store's pages from the OS page cache (this file only), as after a reboot or when
    the store is larger than memory."""
    for suffix in ("", "-wal"):
        p = Path(f"{db}{suffix}")
        if p.exists():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def timed_command(cmd: list[str], repeat: int, cold: Path | None = None) -> dict:
    """Best of ``repeat`` runs of ``cmd``; ``cold``: evict this store from the page cache before each."""
    best = None
    for _ in range(repeat):
        if cold is not None:
            evict(cold)
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        err = proc.stderr.read()
        _, status, ru = os.wait4(proc.pid, 0)
        proc.stderr.close()
        if status != 0:
            return {"error": err.strip().splitlines()[-1] if err.strip() else f"exit status {status}"}
        r = {"wall": time.monotonic() - t0, "cpu": ru.ru_utime + ru.ru_stime, "peak_mb": ru.ru_maxrss / 1024}
        if best is None or r["wall"] < best["wall"]:
            best = r
    return best


QUERIES = [
    "SELECT * FROM progress",
    "SELECT * FROM merge_log LIMIT 20",
    "SELECT * FROM top_pairs LIMIT 20",
    "SELECT * FROM top_words LIMIT 20",
    "SELECT word, count, n_tokens FROM top_words WHERE n_tokens > 3 LIMIT 10",
    "SELECT count(*) FROM words",
]


def inspect_rows(python: list[str], db: Path, repeat: int) -> list[tuple[str, dict]]:
    cli = [*python, "-m", "bpe_store"]
    rows = []
    for cold in (db, None):
        when = "cold" if cold else "warm"
        rows.append((f"{when}: bpe-store status", timed_command([*cli, "status", str(db)], repeat, cold)))
        for q in QUERIES:
            rows.append((f"{when}: bpe-store sql \"{q}\"", timed_command([*cli, "sql", str(db), q], repeat, cold)))
        rows.append((f"{when}: bpe-store show words", timed_command([*cli, "show", str(db), "words"], repeat, cold)))
    # the queries alone, in one process (no interpreter start, no CLI imports)
    code = ("import json, sys, time\nfrom bpe_store.inspection.answers import status\n"
            "db = sys.argv[1]\nout = {}\n"
            "t = time.perf_counter(); status(db); out['status()'] = time.perf_counter() - t\n"
            "print(json.dumps(out))")
    proc = subprocess.run([*python, "-c", code, str(db)], capture_output=True, text=True)
    if proc.returncode == 0:
        for k, v in json.loads(proc.stdout).items():
            rows.append((f"in-process {k}", {"wall": v, "cpu": None, "peak_mb": None}))
    return rows


def fmt(r: dict) -> str:
    if "error" in r:
        return f"fails: {r['error']} | | "
    cpu = f"{r['cpu']:.1f}" if r.get("cpu") is not None else "-"
    peak = f"{r['peak_mb']:.0f}" if r.get("peak_mb") is not None else "-"
    return f"{r['wall']:.1f} | {cpu} | {peak}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--workdir", type=Path, required=True, help="where the stores go (outside the repository)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pattern", default="gpt2",
                    help="a pattern name (bpe_store.text.pretokenize.PATTERNS) or a regex")
    ap.add_argument("--runs", default="full,kill-count,kill-merge,inspect")
    ap.add_argument("--python", default=sys.executable,
                    help="command that runs the training processes (default: this interpreter)")
    ap.add_argument("--out", type=Path, help="append the Markdown results here")
    ap.add_argument("--keep", action="store_true", help="keep the stores")
    args = ap.parse_args()
    python = shlex.split(args.python)
    runs = args.runs.split(",")
    args.workdir.mkdir(parents=True, exist_ok=True)
    full_db, count_db, merge_db = (args.workdir / f"{n}.db" for n in ("full", "kill-count", "kill-merge"))
    lines = [f"## `{args.corpus.name}` ({args.corpus.stat().st_size / 1e9:.2f} GB) -> {args.vocab}, "
             f"{args.workers} workers, pattern {args.pattern}",
             "", f"Command: `python bench/bench_scale.py {shlex.join(sys.argv[1:])}`; machine: {platform.node()}, "
             f"{os.cpu_count()} cores, {platform.python_version()}; started "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "",
             "| run | wall s | CPU s | peak RSS MB | phases (wall s / CPU s) | load before |",
             "|---|---|---|---|---|---|"]
    results: dict[str, dict] = {}

    def row(name: str, r: dict, before: str, slug: str) -> None:
        ph = ", ".join(f"{k} {w:.1f} / {c:.1f}" for k, (w, c) in r.get("phases", {}).items())
        lost = lost_at_kill(r)
        if lost is not None:
            ph += f"{', ' if ph else ''}killed {lost / 1e6:.0f} MB past its last committed flush"
        lines.append(f"| {name} | {fmt(r)} | {ph} | {before} |")
        print(lines[-1], flush=True)
        with open(args.workdir / f"{slug}.events.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(e) + "\n" for e in r["events"])

    def cmd(db: Path) -> list[str]:
        return train_cmd(python, args.corpus, db, args.vocab, args.workers, args.pattern)

    if "full" in runs:
        remove(full_db)
        before = load()
        results["full"] = r = run_child(cmd(full_db))
        row("full run", r, before, "full")
    full = results.get("full")
    def half_of(stage: str):
        return lambda e: e["stage"] == stage and e.get("total") and e["done"] >= e["total"] / 2

    def killed_and_resumed(what: str, db: Path, stage: str) -> dict:
        """Kill a run at half of ``stage``, then run the same command; the resume's figures."""
        remove(db)
        before = load()
        row(f"killed at 50 % of {what}", run_child(cmd(db), half_of(stage)), before, f"{db.stem}-killed")
        before = load()
        r = run_child(cmd(db))
        row("  its resume", r, before, f"{db.stem}-resume")
        if not args.keep:
            remove(db)
        return r

    def ratio_row(name: str, r: dict, wall: float, cpu: float) -> None:
        lines.append(f"|  {name} | {r['wall'] / wall:.2f} | {r['cpu'] / cpu:.2f} | | | |")
        print(lines[-1], flush=True)

    if "kill-count" in runs:
        r = killed_and_resumed("counting", count_db, "counting")
        if full is not None:
            half = next(e for e in full["events"] if half_of("counting")(e))
            wall, cpu = full["wall"] - half["t"], full["cpu"] - half["cpu"]
            ratio_row(f"resume / the full run's work after its 50 % of counting ({wall:.1f} s, {cpu:.1f} CPU s)",
                      r, wall, cpu)
    if "kill-merge" in runs:
        r = killed_and_resumed("merges", merge_db, "merging")
        if full is not None:
            ratio_row("resume / full run", r, full["wall"], full["cpu"])
    if "inspect" in runs and full_db.exists():
        size = sum(Path(f"{full_db}{s}").stat().st_size for s in ("", "-wal") if Path(f"{full_db}{s}").exists())
        lines += ["", f"Inspection of the finished store ({size / 1e9:.2f} GB), best of 3, whole processes "
                  "(cold: the store evicted from the page cache before each run):", "",
                  "| command | wall s | CPU s | peak RSS MB |", "|---|---|---|---|"]
        for name, r in inspect_rows(python, full_db, 3):
            lines.append(f"| {name} | {fmt(r)} |")
            print(lines[-1], flush=True)
    if not args.keep and "full" in runs:
        remove(full_db)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
