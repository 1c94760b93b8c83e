"""Merging at tens of millions of distinct words: a synthetic word-count store, trained to 64K.

Internet-scale corpora hold tens of millions of distinct pre-tokens even after --min-frequency.
This writes a store whose counting is done and whose ``words`` are N distinct synthetic words
(default 50 M) with a Zipf-like count distribution, then measures, each in a fresh process:

* ``engine``: read the words from the store, build the native merge engine and merge to the
  vocabulary size, no store writes: the merge phase proper; with the engine's own account of its
  memory (``MergeEngine.memory``) per word;
* ``train``: ``train()`` on a copy of the store (the words read back, merged, checkpointed).

Each row gives wall seconds, CPU seconds (user + sys) and peak RSS (``ru_maxrss``), and the load.

Words. Each is a space (most of them) and one or two syllables of an English-like list of
~21,600 (a few with accented Latin letters): word i's syllables are the digits of a scrambled i in
base 21,600, so there is no set of 50 M strings to keep; a few percent of the words spell the same
bytes as another (syllables can join the same way) and add up, so ``--words`` asks for a few
percent more than the distinct words wanted (the store's count is printed). Counts: ``round(top / rank**s)``
with s = 1.1, at least 1 (rank: a random permutation of the words, so frequency and spelling
are independent). Built with numpy in ~1 minute; the store is kept under ``--workdir`` and
reused when it exists (``--rebuild`` to make it again).

Example::

    python bench/bench_merge_words.py --words 50000000 --vocab-size 65793 --workdir /work/big/words50m
    python bench/bench_merge_words.py --words 5000000 --workdir /tmp/words5m --only engine
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

SPECIALS = ["<|endoftext|>"]

_ONSETS = ["", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "y", "z",
           "bl", "br", "ch", "cl", "cr", "dr", "fl", "fr", "gl", "gr", "pl", "pr", "sc", "sh", "sk", "sl",
           "sm", "sn", "sp", "st", "sw", "th", "tr", "tw", "wh", "wr", "str", "spr", "thr", "qu"]
_VOWELS = ["a", "e", "i", "o", "u", "y", "ai", "ea", "ee", "ie", "oa", "oo", "ou", "au", "oi", "ue"]
_CODAS = ["", "", "", "n", "r", "s", "t", "l", "m", "d", "ng", "st", "nt", "rs", "ck", "th", "sh", "ll", "ss",
          "rd", "nd", "ts", "ly", "ed", "er", "es", "ing"]


def syllables() -> list[bytes]:
    """~21,600 syllables, most frequent first (a plain onset + vowel before clusters)."""
    out = [(o + v + c).encode() for c in _CODAS for v in _VOWELS for o in _ONSETS]
    extra = ["é", "ü", "ñ", "ø", "ç", "ö"]
    out += [(o + e).encode() for e in extra for o in _ONSETS[:20]]
    seen, uniq = set(), []
    for s in out:
        if s and s not in seen:
            seen.add(s)
            uniq.append(s)
    return uniq


def _varint(x: int) -> bytes:
    out = bytearray()
    while x >= 0x80:
        out.append((x & 0x7F) | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def _pack_part(idx, rank, syl_len, syl_off, flat, S: int, s: float, space) -> bytes:
    """The packed records (no header) of the words numbered ``idx`` with Zipf ranks ``rank``."""
    import numpy as np

    n = len(idx)
    d0, d1 = idx % S, (idx // S) % S
    two = idx >= S  # word i < S has one syllable, the others two (S^2 > any n used here)
    l0, l1 = syl_len[d0], np.where(two, syl_len[d1], 0)
    lens = space.astype(np.int64) + l0 + l1
    counts = np.maximum(1, np.round(1e8 / rank.astype(np.float64) ** s)).astype(np.int64)
    cnb = np.ones(n, dtype=np.int64)
    x = counts >> 7
    while (x > 0).any():
        cnb += x > 0
        x >>= 7
    rec = 1 + lens + cnb
    pos = np.concatenate([[0], np.cumsum(rec)[:-1]])
    out = np.empty(int(rec.sum()), dtype=np.uint8)
    out[pos] = lens.astype(np.uint8)  # < 128: one varint byte
    pos += 1
    out[pos[space]] = ord(" ")
    pos += space
    for d, ln in ((d0, l0), (d1, l1)):  # each syllable's bytes, column by column
        so = syl_off[d]
        for j in range(int(ln.max())):
            m = ln > j
            out[pos[m] + j] = flat[so[m] + j]
        pos += ln
    v = counts
    for b in range(int(cnb.max())):
        m = cnb > b
        byte = (v & 0x7F) | np.where(cnb > b + 1, 0x80, 0)
        out[pos[m] + b] = byte[m].astype(np.uint8)
        v = v >> 7
    return out.tobytes()


def make_packed(n: int, seed: int = 0, s: float = 1.1, part: int = 4_000_000) -> tuple[bytes, int]:
    """``(packed counts in WordCounter.pack's format, total count)`` of ``n`` words (a few
    percent spell the same bytes as another: two syllables can join the same way two others do;
    the counter adds them up)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    syl = syllables()
    S = len(syl)
    assert n < S * S
    syl_len = np.array([len(x) for x in syl], dtype=np.int64)
    assert int(syl_len.max()) * 2 + 1 < 128
    flat = np.frombuffer(b"".join(syl), dtype=np.uint8)
    syl_off = np.concatenate([[0], np.cumsum(syl_len)[:-1]])
    idx_all = rng.permutation(n).astype(np.int64)
    rank_all = rng.permutation(n).astype(np.int64) + 1
    space_all = rng.random(n) < 0.92
    parts, total = [], 0
    for a in range(0, n, part):
        b = min(n, a + part)
        parts.append(_pack_part(idx_all[a:b], rank_all[a:b], syl_len, syl_off, flat, S, s, space_all[a:b]))
        total += int(np.maximum(1, np.round(1e8 / rank_all[a:b].astype(np.float64) ** s)).sum())
    return b"BPC1" + _varint(n) + b"".join(parts), total


def make_store(db: Path, n: int, vocab_size: int) -> None:
    """A store whose counting is done and whose words are the synthetic ones."""
    from bpe_store._core import WordCounter

    from bpe_store._version import __version__
    from bpe_store.store.params import RunParams
    from bpe_store.store.store import Store
    from bpe_store.text.input_checks import scan_source
    from bpe_store.text.pretokenize import GPT2_PATTERN
    from bpe_store.training.options import DEFAULT_MAX_PRETOKEN_BYTES

    t0 = time.monotonic()
    packed, total = make_packed(n)
    print(f"# words generated: {n}, {total} in all, {len(packed) / 1e6:.0f} MB packed, "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    marker = db.parent / "source.txt"  # the run's one input: the words do not come from it
    marker.write_text("synthetic word counts: see bench/bench_merge_words.py\n")
    src = scan_source(marker)
    params = RunParams(GPT2_PATTERN, tuple(SPECIALS), vocab_size, "strict", 1, None,
                       max_pretoken_bytes=DEFAULT_MAX_PRETOKEN_BYTES)
    store = Store.create(db, init=lambda new: new.init_run(params, [src], [(0, 0, src.size)], 8 << 20, __version__))
    counter = WordCounter()
    counter.add_packed(packed)
    del packed
    print(f"# distinct words: {len(counter)}", flush=True)
    t1 = time.monotonic()
    store.add_word_counts(counter, [(1, total)], 0.0)
    store.close()
    print(f"# store written: {db} ({db.stat().st_size / 1e9:.2f} GB), {time.monotonic() - t1:.1f} s", flush=True)


ENGINE = r"""
import json, os, resource, sys, threading, time
from bpe_store.store.store import Store
from bpe_store.training.merge import new_engine
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
phase = ["read"]
peaks = {}
def sample():  # the peak RSS of each phase, from /proc every 20 ms
    page = os.sysconf("SC_PAGE_SIZE")
    while True:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * page
        peaks[phase[0]] = max(peaks.get(phase[0], 0), rss)
        time.sleep(0.02)
threading.Thread(target=sample, daemon=True).start()
db, vocab = sys.argv[1], int(sys.argv[2])
t0, c0 = time.monotonic(), cpu()
store = Store.open(db)
n = 1
rows = store.load_word_rows(packed=True)
t1, c1 = time.monotonic(), cpu()
rss_rows = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
token_bytes = [None] + [bytes([b]) for b in range(256)]
phase[0] = "build"
eng = new_engine(rows, token_bytes, n, n + 256, 0, "native")
del rows
t2, c2 = time.monotonic(), cpu()
mem_built = dict(eng._e.memory)
words = eng._e.num_words
phase[0] = "merge"
done = 0
while done < vocab - 257:
    got = eng.step(min(4096, vocab - 257 - done))
    done += len(got)
    if len(got) == 0:
        break
t3, c3 = time.monotonic(), cpu()
print(json.dumps({"read_s": t1 - t0, "read_cpu": c1 - c0, "build_s": t2 - t1, "build_cpu": c2 - c1,
                  "merge_s": t3 - t2, "merge_cpu": c3 - c2, "merges": done, "words": words,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "peak_after_read_mb": rss_rows / 1024,
                  "memory_built": mem_built, "memory_end": dict(eng._e.memory),
                  "phase_peaks_mb": {k: v / 2**20 for k, v in peaks.items()}}))
"""

TRAIN = r"""
import json, resource, sys, time
from bpe_store import train
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF); return r.ru_utime + r.ru_stime
src, db, vocab = sys.argv[1], sys.argv[2], int(sys.argv[3])
t0, c0 = time.monotonic(), cpu()
marks = {}
def progress(ev):
    st = ev.get("stage")
    if st not in marks:
        marks[st] = (time.monotonic() - t0, cpu() - c0)
r = train([src], db, vocab, ["<|endoftext|>"], progress=progress)
print(json.dumps({"wall": time.monotonic() - t0, "cpu": cpu() - c0, "merges": len(r.merges),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "stages": marks}))
"""


def child(code: str, *args: str) -> dict:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    d["process_wall"] = time.monotonic() - t0
    return d


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--words", type=int, default=50_000_000)
    ap.add_argument("--vocab-size", type=int, default=65_793, help="65,536 merges + 256 bytes + 1 special")
    ap.add_argument("--workdir", type=Path, default=Path("/work/big/words50m"))
    ap.add_argument("--only", choices=["engine", "train"], action="append")
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    template = args.workdir / "words.db"
    if args.rebuild or not template.exists():
        for f in args.workdir.glob("words.db*"):
            f.unlink()
        make_store(template, args.words, args.vocab_size)
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    for what in args.only or ["engine", "train"]:
        before = load()
        if what == "engine":
            d = child(ENGINE, str(template), str(args.vocab_size))
            w = d["words"]
            per = {k: round(v / w, 1) for k, v in d["memory_built"].items()}
            print(f"| engine | read {d['read_s']:.1f} / {d['read_cpu']:.1f} | build {d['build_s']:.1f} / "
                  f"{d['build_cpu']:.1f} | merge {d['merge_s']:.1f} / {d['merge_cpu']:.1f} | {d['merges']} merges | "
                  f"{w} words | peak {d['peak_mb']:.0f} MB ({d['peak_mb'] * 2**20 / w:.0f} B/word) | "
                  f"after read {d['peak_after_read_mb']:.0f} MB | load {before} |", flush=True)
            print(f"  engine memory per word when built: {per}; at the end: "
                  f"{ {k: round(v / w, 1) for k, v in d['memory_end'].items()} }; peak RSS per phase, B/word: "
                  f"{ {k: round(v * 2**20 / w) for k, v in d['phase_peaks_mb'].items()} }", flush=True)
        else:
            db = args.workdir / "train.db"
            for f in args.workdir.glob("train.db*"):
                f.unlink()
            shutil.copy(template, db)
            d = child(TRAIN, str(args.workdir / "source.txt"), str(db), str(args.vocab_size))
            print(f"| train | {d['wall']:.1f} / {d['cpu']:.1f} | {d['merges']} merges | peak {d['peak_mb']:.0f} MB | "
                  f"stages {d['stages']} | load {before} |", flush=True)


if __name__ == "__main__":
    main()
