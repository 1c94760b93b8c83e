"""SuperBPE's stage-2 merge engine built alone, in this process, from a finished superword store: its
pieces (the store's words, as bytes) with the store's first t merges (stage 1) replayed, then its
pairs counted; optionally some superword merges after it. What a stage-2 run (and a resume) spends
before its first superword merge, without the counting around it, for perf and for A/B runs:

    python bench/bench_superword_build.py /work/big/superword/s200/super.db --merges 2000
    perf record -g -o /tmp/build.data python bench/bench_superword_build.py STORE

Prints wall and CPU seconds (``getrusage``, both threads) of reading the rows, of the build, of the
merges, the peak RSS, the engine's memory by part and the load (``os.getloadavg``) beside them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from bpe_store.store.store import Store
from bpe_store.training.merge import new_engine


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store", type=Path)
    ap.add_argument("--merges", type=int, default=0, help="superword merges to learn after the build")
    ap.add_argument("--engine", default="native")
    a = ap.parse_args()
    print(json.dumps({"load": os.getloadavg(), "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}))
    store = Store.open(a.store, readonly=True)
    params = store.params()
    t = params.superword_from
    n = len(params.special_tokens)
    merges = store.load_merges()[:t]
    vocab = store.load_vocab()
    tb = [b if kind != "special" else None for _, b, kind in vocab][: n + 256 + t]
    out = {}
    w0, c0 = time.perf_counter(), _cpu()
    rows = store.load_word_rows(packed=a.engine != "python", tokens=False)
    out["read"] = (round(time.perf_counter() - w0, 2), round(_cpu() - c0, 2))
    w0, c0 = time.perf_counter(), _cpu()
    eng = new_engine(rows, tb, n, n + 256, t, a.engine, replay=[(m[1], m[2], m[3]) for m in merges],
                     max_words=params.superword_max_words)
    out["build"] = (round(time.perf_counter() - w0, 2), round(_cpu() - c0, 2))
    del rows
    if a.merges:
        w0, c0 = time.perf_counter(), _cpu()
        done = []
        while len(done) < a.merges and not eng.exhausted:
            done.extend(eng.step(min(64, a.merges - len(done))))
        out["merges"] = (len(done), round(time.perf_counter() - w0, 2), round(_cpu() - c0, 2))
        want = store.load_merges()[t: t + len(done)]
        out["same_merges"] = [(m.left, m.right, m.count) for m in done] == [(r[1], r[2], r[4]) for r in want]
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if a.engine != "python":
        out["memory_mb"] = {k: round(v / 1e6) for k, v in eng._e.memory.items()}
    out["load"] = os.getloadavg()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
