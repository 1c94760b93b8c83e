"""Where a resume's time goes: a store killed at half of counting or of merging,
resumed in this process with its phases, its native reads and each checkpoint statement timed.

The killed store is made once, as ``bench_scale.py``'s kill runs make theirs (a training process
SIGKILLed when its progress passes half of the stage), and kept as ``killed-<stage>.db`` in
``--workdir``; each repeat resumes a fresh copy of it. To compare builds or settings on the same
store, alternate runs of this script (another checkout's interpreter, an edited constant)::

    python bench/bench_resume.py /work/big/owt-12G.txt --workdir /work/big/resume --stage merging --repeat 2

Prints one line per phase event (wall and CPU seconds of this process since the resume began),
then the timed calls: reading the words (``Store.load_word_rows``, a resume in merging),
the store's word map (``Store._load_words``, a resume in counting), building the engine
(``new_engine``), every bulk statement of a checkpoint or flush with its rows, and each bulk
transaction's commit. The timers wrap internals by name: a rename there needs one here.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import resource
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale  # noqa: E402  (the killed store is made as bench_scale makes its own)

#: What a resume did, in order: its progress events and the timed calls (see ``install_timers``).
LOG: list[str] = []


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def killed_store(corpus: Path, workdir: Path, stage: str, vocab: int, workers: int) -> Path:
    """``workdir/killed-<stage>.db``, made by a training process killed at half of ``stage``."""
    db = workdir / f"killed-{stage}.db"
    if db.exists():
        return db
    work = workdir / "killing.db"
    bench_scale.remove(work)
    half = lambda e: e["stage"] == stage and e.get("total") and e["done"] >= e["total"] / 2  # noqa: E731
    r = bench_scale.run_child(bench_scale.train_cmd([sys.executable], corpus, work, vocab, workers), half)
    if r["killed_at"] is None:
        raise SystemExit(f"the run ended before half of {stage}")
    print(f"killed at {r['killed_at']}: {r['wall']:.1f} s, {r['cpu']:.1f} CPU s")
    copy_store(work, db)
    bench_scale.remove(work)
    return db


def copy_store(src: Path, dst: Path) -> None:
    """``src`` and its WAL (a killed run's last commits may be only there) as ``dst``."""
    bench_scale.remove(dst)
    for suffix in ("", "-wal"):
        if Path(f"{src}{suffix}").exists():
            shutil.copy(f"{src}{suffix}", f"{dst}{suffix}")


def install_timers() -> None:
    """Wrap the resume's heavy calls so each adds its wall and CPU seconds to ``LOG``."""
    import bpe_store.store.bulk as bulk
    import bpe_store.store.store as store

    train_mod = importlib.import_module("bpe_store.training.merge_step")

    def timed(owner: object, name: str) -> None:
        fn = getattr(owner, name)

        def wrapper(*args, **kwargs):
            t, c = time.perf_counter(), cpu()
            try:
                return fn(*args, **kwargs)
            finally:
                LOG.append(f"  {name}: {time.perf_counter() - t:.2f} s, {cpu() - c:.2f} CPU s")
        setattr(owner, name, wrapper)

    for name in ("load_word_rows", "_load_words"):
        timed(store.Store, name)
    timed(train_mod, "new_engine")

    executemany = bulk.BulkWriter.executemany

    def statement(self, sql, rows, bulk=None):
        t = time.perf_counter()
        executemany(self, sql, rows, bulk)
        LOG.append(f"  {time.perf_counter() - t:6.2f} s {len(rows):9d} rows  {(bulk or sql)[:70]}")
    bulk.BulkWriter.executemany = statement

    bulk_transaction = store.Store.bulk_transaction

    @contextlib.contextmanager
    def transaction(self):
        t = time.perf_counter()
        with bulk_transaction(self) as w:
            yield w
            body = time.perf_counter()
        LOG.append(f"  transaction {time.perf_counter() - t:.2f} s, of which commit {time.perf_counter() - body:.2f} s")
    store.Store.bulk_transaction = transaction


def resume(killed: Path, corpus: Path, workdir: Path, vocab: int, workers: int) -> None:
    from bpe_store import train

    db = workdir / "resumed.db"
    copy_store(killed, db)
    LOG.clear()
    t0, c0 = time.monotonic(), cpu()
    last = {"stage": None, "tenth": None}

    def progress(ev: dict) -> None:
        stage = ev.get("stage")
        done, total = ev.get("done") or 0, ev.get("total") or 0
        tenth = 10 * done // total if total else None
        if stage in ("counting", "merging") and (stage, tenth) == (last["stage"], last["tenth"]):
            return  # one line per tenth of a stage
        last.update(stage=stage, tenth=tenth)
        extra = "".join(f" {k}={ev[k]}" for k in ("phase", "words", "write_s") if ev.get(k) is not None)
        LOG.append(f"{time.monotonic() - t0:7.2f} s {cpu() - c0:7.2f} CPU s  {stage} {done}/{total}{extra}")

    train([corpus], db, vocab, ["<|endoftext|>"], workers=workers, progress=progress)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("\n".join(LOG))
    print(f"resume: {time.monotonic() - t0:.2f} s, {cpu() - c0:.2f} CPU s; "
          f"this process's peak RSS so far {peak:.0f} MB")
    bench_scale.remove(db)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--workdir", type=Path, required=True, help="where the stores go (outside the repository)")
    ap.add_argument("--stage", choices=("counting", "merging"), default="merging")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    killed = killed_store(args.corpus, args.workdir, args.stage, args.vocab, args.workers)
    install_timers()
    for k in range(args.repeat):
        print(f"-- resume {k + 1} of {args.repeat}: {killed}")
        resume(killed, args.corpus, args.workdir, args.vocab, args.workers)


if __name__ == "__main__":
    main()
