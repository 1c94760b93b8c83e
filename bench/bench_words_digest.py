"""What the words' digest costs (docs/reliability.md, "A tampered store"): a store of N synthetic
words (an OpenWebText-like 12 GB corpus has ~7 M distinct words of ~10 bytes) digested as a run
does when counting ends (``words_digest.of_table``: the table read natively in parts, then
digested), and as a resume does (the digest of the ``WordRows`` it reads anyway).

    python bench/bench_words_digest.py --words 7000000 --out /work/big/integ

Prints wall and CPU seconds of each and the process's peak RSS; quote the load (``uptime``).
"""

from __future__ import annotations

import argparse
import resource
import sqlite3
import time
from pathlib import Path

from bpe_store import train
from bpe_store.store import words_digest
from bpe_store.store.store import Store

ROOT = Path(__file__).resolve().parent.parent


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make_store(db: Path, n_words: int) -> None:
    """A real store (trained on the bundled 128 KB slice) whose words are replaced by ``n_words``
    random ones of 5-13 bytes with counts 1-1000."""
    for suffix in ("", "-wal", "-shm"):
        Path(str(db) + suffix).unlink(missing_ok=True)
    train([ROOT / "tests" / "fixtures" / "enwiki-128K.txt"], db, 300, [])
    con = sqlite3.connect(db)
    con.execute("DELETE FROM words")
    con.execute("INSERT INTO words (id, bytes, count) WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1"
                " FROM c WHERE i < ?) SELECT i, CAST(' w' || hex(randomblob(3 + abs(random()) % 3)) AS BLOB),"
                " 1 + abs(random()) % 1000 FROM c", (n_words,))
    con.commit()
    con.close()


def timed(what: str, fn):
    t, c = time.perf_counter(), cpu()
    out = fn()
    print(f"{what}: {time.perf_counter() - t:.2f} s wall, {cpu() - c:.2f} CPU s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=7_000_000)
    ap.add_argument("--out", type=Path, required=True, help="a directory outside the repository")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    db = a.out / "words-digest.db"
    timed(f"a store of {a.words:,} words", lambda: make_store(db, a.words))
    with Store.open(db) as store:
        timed("of_table (counting ends: read in parts + digest)", lambda: words_digest.of_table(store))
        rows = timed("read the words as a resume does", lambda: store.load_word_rows(packed=True, tokens=False))
        timed("digest of those rows (a resume's added cost)", lambda: words_digest.of_rows(rows))
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10} MB")


if __name__ == "__main__":
    main()
