"""Red-team figures: kill -9 a training at random moments and resume it, feed the commands bad
inputs, and hand them crafted stores; prints how many came out as docs/reliability.md and
docs/errors.md say (identical results, exit 2 on one line with nothing left behind, exit 4).

    python bench/bench_redteam.py --runs 10 --work /work/big/redteam

Kills: ``--runs`` trainings of ``--corpus`` (enwiki-1M by default) to ``--vocab-size``, each killed
(SIGKILL) after a random 0.3-4 s and started again with the same command until one finishes; each
store is compared with an uninterrupted run's (words, pair counts, merges, vocabulary). Bad inputs
and crafted stores: each case once, its exit code, its stderr's lines and what it left.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EOT = "<|endoftext|>"
TRAIN = ("import sys; from bpe_store import train; train([sys.argv[1]], sys.argv[2], int(sys.argv[3]), [sys.argv[4]], "
         "checkpoint_merges=20, count_flush_seconds=0.2, chunk_size=1 << 16)")


def contents(db: Path) -> tuple:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return tuple(con.execute(q).fetchall() for q in (
            "SELECT bytes, count FROM words ORDER BY bytes", "SELECT * FROM merges ORDER BY rank",
            "SELECT * FROM vocab ORDER BY id"))
    finally:
        con.close()


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def kills(args: argparse.Namespace, work: Path) -> None:
    rng = random.Random(args.seed)
    clean = work / "clean.db"
    subprocess.run([sys.executable, "-c", TRAIN, args.corpus, clean, str(args.vocab_size), EOT], env=env(), check=True)
    want = contents(clean)
    identical, n_kills, failed = 0, 0, []
    for run in range(args.runs):
        db = work / f"killed-{run}.db"
        for _attempt in range(50):
            proc = subprocess.Popen([sys.executable, "-c", TRAIN, args.corpus, db, str(args.vocab_size), EOT],
                                    env=env(), stderr=subprocess.PIPE, text=True)
            try:
                proc.wait(timeout=rng.uniform(0.3, 4.0))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                n_kills += 1
                continue
            finally:
                proc.stderr.close()
            if proc.returncode != 0:
                failed.append(f"run {run}: exit {proc.returncode}")
            break
        identical += contents(db) == want
    print(f"kills: {args.runs} runs of {Path(args.corpus).name} -> {args.vocab_size}, {n_kills} kill -9s at random "
          f"moments (0.3-4 s into each attempt): {identical}/{args.runs} identical to the uninterrupted run, "
          f"{len(failed)} refused a resume {failed}", flush=True)


def _cli(*a: object, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bpe_store", *map(str, a)], capture_output=True, text=True,
                          env=env(), timeout=timeout)


def bad_inputs(args: argparse.Namespace, work: Path) -> None:
    d = work / "bad"
    d.mkdir(exist_ok=True)
    (d / "utf8.txt").write_bytes(b"hello \xff world\n" * 10)
    (d / "empty.txt").write_bytes(b"")
    (d / "deep.jsonl").write_text('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (d / "record.jsonl").write_text('{"text": "ok"}\n{"text": \n')
    (d / "trunc.txt.gz").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)
    ok = Path(args.corpus)
    train = ("train", "--vocab-size", 300, "--progress", "none")
    cases = {
        "invalid UTF-8": (*train[:1], d / "utf8.txt", "--db", d / "a.db", *train[1:]),
        "empty file": (*train[:1], d / "empty.txt", "--db", d / "b.db", *train[1:]),
        "a directory": (*train[:1], d, "--db", d / "c.db", "--glob", "none", *train[1:]),
        "jsonl nested 100,000 deep": (*train[:1], d / "deep.jsonl", "--db", d / "d.db", *train[1:]),
        "a bad jsonl record": (*train[:1], d / "record.jsonl", "--db", d / "e.db", *train[1:]),
        "a truncated .gz": (*train[:1], d / "trunc.txt.gz", "--db", d / "f.db", *train[1:]),
        "pattern that does not compile": (*train[:1], ok, "--db", d / "g.db", "--pattern", "([", *train[1:]),
        "pattern name misspelled": (*train[:1], ok, "--db", d / "h.db", "--pattern", "gpt-2", *train[1:]),
        "pattern leaving text out": (*train[:1], ok, "--db", d / "i.db", "--pattern", r"\w+", *train[1:]),
        "vocab size below 256": ("train", ok, "--db", d / "j.db", "--vocab-size", 100, "--progress", "none"),
        "empty special token": (*train[:1], ok, "--db", d / "k.db", "--special", "", *train[1:]),
        "workers 0": (*train[:1], ok, "--db", d / "l.db", "--workers", 0, *train[1:]),
    }
    good = 0
    for name, argv in cases.items():
        r = _cli(*argv)
        left = sorted(p.name for p in d.iterdir() if p.suffix in (".db", ".part") or ".creating-" in p.name)
        one_line = r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
        good += r.returncode == 2 and one_line and not left
        print(f"  {name}: exit {r.returncode}, {'one line' if one_line else repr(r.stderr[-200:])}"
              f"{', left ' + str(left) if left else ''}", flush=True)
        for p in d.glob("*.db*"):
            p.unlink()
    print(f"bad inputs: {good}/{len(cases)} exit 2 with one line and no store left", flush=True)


#: A trained store changed as someone with the sqlite3 shell could: (name, statements).
CRAFTED = {
    "swapped merge pair": ['UPDATE merges SET "left" = "right", "right" = "left" WHERE rank = 7'],
    "edited merge count": ["UPDATE merges SET count = count + 1 WHERE rank = 3"],
    "merge deleted": ["DELETE FROM merges WHERE rank = (SELECT max(rank) FROM merges)",
                      "DELETE FROM vocab WHERE id = (SELECT max(id) FROM vocab)"],
    "300 MB vocabulary token": ["UPDATE vocab SET bytes = zeroblob(300000000) WHERE id = 300"],
    "emptied token": ["UPDATE vocab SET bytes = x'' WHERE id = 280"],
    "an extra trigger": ["CREATE TRIGGER t AFTER INSERT ON merges BEGIN SELECT 1; END"],
    "run row vocab size negative": ["UPDATE run SET vocab_size = -5"],
    "negative word count": ["UPDATE words SET count = -1 WHERE id = 1"],
    "4 KiB of 0xFF mid-file": [],
}


def crafted(args: argparse.Namespace, work: Path) -> None:
    base = work / "clean.db"
    if not base.exists():
        subprocess.run([sys.executable, "-c", TRAIN, args.corpus, base, str(args.vocab_size), EOT], env=env(),
                       check=True)
    results = {}
    for name, statements in CRAFTED.items():
        db = work / "crafted.db"
        shutil.copy(base, db)
        if statements:
            con = sqlite3.connect(db)
            con.executescript(";\n".join(statements))
            con.commit()
            con.close()
        else:
            with open(db, "r+b") as f:
                f.seek(db.stat().st_size // 2 // 4096 * 4096)
                f.write(b"\xff" * 4096)
        codes = {}
        for cmd in (("db", "check", db), ("export", db, "--format", "hf", "-o", work / "crafted-out"),
                    ("train", args.corpus, "--db", db, "--vocab-size", args.vocab_size + 20, "--special", EOT,
                     "--progress", "none")):
            r = _cli(*cmd)
            codes[cmd[0] if cmd[0] != "db" else "db check"] = r.returncode
            shutil.rmtree(work / "crafted-out", ignore_errors=True)
        results[name] = codes
        print(f"  {name}: {json.dumps(codes)}", flush=True)
    n = sum(all(c == 4 for c in codes.values()) for codes in results.values())
    print(f"crafted stores: {n}/{len(results)} refused with exit 4 by db check, export and a grow", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default=str(ROOT / "tests" / "fixtures" / "enwiki-1M.txt"))
    ap.add_argument("--vocab-size", type=int, default=1500)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--work", default="/tmp/bench-redteam")
    ap.add_argument("--parts", nargs="+", default=["kills", "bad", "crafted"])
    args = ap.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    t0 = time.monotonic()
    for part in args.parts:
        {"kills": kills, "bad": bad_inputs, "crafted": crafted}[part](args, work)
    print(f"{time.monotonic() - t0:.0f} s wall; load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
