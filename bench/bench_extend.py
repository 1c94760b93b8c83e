"""Extending a tokenizer (issue 37), side by side in one run: compression and speed.

Compression: OpenAI's o200k_base and cl100k_base extended (``train --extend``) on zhwiki-20M and
tinystories-ru-20M (each without its last 2 MB, held out) separately and mixed, against the recipe
people use today (train a separate tokenizer on the same data with the base's pattern and append the
tokens it has that the base lacks, in its merge order, each with its merge), at +4K and +16K tokens;
bytes per token on 2 MB held out of Chinese, Russian and English (enwiki-100M), every tokenizer
encoding by merge order (bpe_store's ``Tokenizer``; the base alone is OpenAI's encoding exactly).

Speed: the jobs below each in a subprocess of its own (wall, CPU s user + sys, peak RSS of the
process tree): extend o200k_base by 16K on zhwiki-20M beside a fresh 16K training on it; continue a
16K store to 20K on zhwiki-20M with bpe_store (``--extend store.db``), bpe-continue and tinybpe.

    python bench/bench_extend.py compression --out /work/big/extend
    python bench/bench_extend.py speed --out /work/big/extend [--peers [--reuse-peer tinybpe]]
    python bench/bench_extend.py engine --out /work/big/extend   # after speed: the engine's build alone
    python bench/bench_extend.py phases --out /work/big/extend   # after speed: CPU s by stage
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPORA = Path(os.environ.get("BPE_STORE_SHARED", ROOT.parent / "shared")) / "corpora"
HELD = 2_000_000
ADDED = (4096, 16384)


def _cut(src: Path, start: int, end: int | None, dst: Path) -> Path:
    """Bytes [start, end) of ``src`` cut back to whole characters, written to ``dst`` once."""
    if not dst.exists():
        with open(src, "rb") as f:
            f.seek(start)
            data = f.read(None if end is None else end - start)
        dst.write_bytes(data.decode("utf-8", "ignore").encode("utf-8"))
    return dst


def data(out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    zh, ru, en = CORPORA / "zhwiki-20M.txt", CORPORA / "tinystories-ru-20M.txt", CORPORA / "enwiki-100M.txt"
    d = {
        "zh": _cut(zh, 0, zh.stat().st_size - HELD, out / "zh-train.txt"),
        "ru": _cut(ru, 0, ru.stat().st_size - HELD, out / "ru-train.txt"),
        "held-zh": _cut(zh, zh.stat().st_size - HELD, None, out / "zh-held.txt"),
        "held-ru": _cut(ru, ru.stat().st_size - HELD, None, out / "ru-held.txt"),
        "held-en": _cut(en, 60_000_000, 60_000_000 + HELD, out / "en-held.txt"),
    }
    mixed = out / "mixed-train.txt"
    if not mixed.exists():
        mixed.write_bytes(d["zh"].read_bytes() + d["ru"].read_bytes())
    d["mixed"] = mixed
    return d


#: Appended to every job's code: its own peak RSS (the process's, or a child's if larger), on stderr.
_RSS = ("\nimport resource as _r, sys as _s\nprint('RSS_KB', max(_r.getrusage(_r.RUSAGE_SELF).ru_maxrss, "
        "_r.getrusage(_r.RUSAGE_CHILDREN).ru_maxrss), file=_s.stderr)\n")


def run_job(args: list[str], timeout: float | None = None) -> dict:
    """``python -c`` job in a subprocess: its wall, CPU s (user + sys, its process tree) and peak RSS
    (MB, the job's own: it reports it as it ends); after ``timeout`` seconds it is killed and
    reported ``stopped`` with the wall and CPU it had taken."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", args[0] + _RSS, *args[1:]], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:  # killed and waited for: its CPU is in RUSAGE_CHILDREN
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return {"wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(cpu, 2), "stopped": True}
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit(f"job failed: {args[1:]}\n{p.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    rss = [int(line.split()[1]) for line in p.stderr.splitlines() if line.startswith("RSS_KB ")]
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "rss_mb": round(rss[-1] / 1024) if rss else None,
            "out": p.stdout.strip()}


#: ``train --extend BASE --vocab-size N``: N (the base's tokens + the tokens added) is given, as a
#: user gives it (``extend_job`` reads the base's size outside the job: reading it again inside took
#: ~0.2 CPU s of a 16 K store's extension).
EXTEND = """
import sys
from bpe_store import train
train([sys.argv[1]], sys.argv[2], int(sys.argv[4]), [], extend=sys.argv[3], workers=2)
"""


def extend_job(corpus: Path, db: Path, base: str, added: int) -> dict:
    """The EXTEND job of ``base`` + ``added`` tokens on ``corpus`` into ``db``."""
    from bpe_store.formats.bases import load_base

    return run_job([EXTEND, str(corpus), str(db), base, str(load_base(base).n_tokens + added)])
FRESH = """
import sys
from bpe_store import train
train([sys.argv[1]], sys.argv[2], 256 + int(sys.argv[3]), [], pattern=sys.argv[4], workers=2)
"""


def _fresh_db(path: Path) -> Path:
    for s in ("", "-wal", "-shm"):
        Path(str(path) + s).unlink(missing_ok=True)
    return path


def bytes_per_token(tok, text: str) -> float:
    return round(len(text.encode("utf-8")) / len(tok.encode_to_array(text)), 4)


def compression(out: Path, bases: list[str], datas: list[str]) -> list[dict]:
    from bpe_store.formats.openai_ranks import ENCODINGS
    from bpe_store.tokenizer.tokenizer import Tokenizer

    d = data(out)
    held = {k: d[f"held-{k}"].read_text(encoding="utf-8") for k in ("zh", "ru", "en")}
    rows = []
    for base in bases:
        pattern = ENCODINGS[base].pattern
        for name in datas:
            ext = _fresh_db(out / f"ext-{base}-{name}.db")
            job = extend_job(d[name], ext, base, max(ADDED))
            fresh = out / f"fresh-{pattern}-{name}.db"
            if not fresh.exists():
                run_job([FRESH, str(d[name]), str(fresh), str(3 * max(ADDED)), pattern])
            full = Tokenizer.from_store(ext)
            n_base = len(full.vocab) - max(ADDED)
            row = {"base": base, "data": name, "extend": job}
            b = Tokenizer.from_store(ext, vocab_size=n_base)
            row["base_bpt"] = {k: bytes_per_token(b, t) for k, t in held.items()}
            for n in ADDED:
                e = Tokenizer.from_store(ext, vocab_size=n_base + n)
                row[f"ext+{n}"] = {k: bytes_per_token(e, t) for k, t in held.items()}
                a = _appended(ext, n_base, fresh, n)
                row[f"app+{n}"] = {k: bytes_per_token(a, t) for k, t in held.items()}
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def _appended(ext: Path, n_base: int, fresh: Path, n: int):
    """The recipe used today: the base (the extended store's base part), plus the first ``n`` tokens of
    a separately trained tokenizer (``fresh``) that the base lacks, in its merge order, each with its
    merge, ids after the base's (merge order BPE; a token whose parts are not in the vocabulary is
    left out: it could never be built)."""
    from bpe_store.store.result import store_tokenizer
    from bpe_store.tokenizer.tokenizer import Tokenizer

    vocab, merges, specials, pattern = store_tokenizer(ext)
    cut = max(vocab) - max(ADDED)  # the base's ids: every id up to its largest (special tokens included)
    vocab = {i: b for i, b in vocab.items() if i <= cut}
    merges = merges[: len(merges) - max(ADDED)]
    have = set(vocab.values())
    nxt = max(vocab) + 1
    _, fresh_merges, _, _ = store_tokenizer(fresh)
    added = 0
    for a, b in fresh_merges:
        if added == n:
            break
        if a + b in have or a not in have or b not in have:
            continue
        vocab[nxt] = a + b
        merges.append((a, b))
        have.add(a + b)
        nxt += 1
        added += 1
    return Tokenizer(vocab, merges, specials, pattern=pattern)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["compression", "speed", "engine", "phases"])
    ap.add_argument("--out", type=Path, default=Path("/work/big/extend"))
    ap.add_argument("--bases", default="o200k_base,cl100k_base")
    ap.add_argument("--data", default="zh,ru,mixed")
    ap.add_argument("--peers", action="store_true")
    ap.add_argument("--reuse-peer", action="append", default=[], choices=list(PEER_NAMES),
                    help="with --peers: take this peer's figure from OUT/peers.json when a run recorded it, "
                         "instead of running it again (tinybpe alone takes ~300 s); said in the output")
    a = ap.parse_args()
    print(json.dumps({"load": os.getloadavg(), "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}))
    if a.what == "compression":
        compression(a.out, a.bases.split(","), a.data.split(","))
    elif a.what == "engine":
        print(json.dumps(run_job([ENGINE, str(a.out / "s-20k.db"), str(a.out / "s-16k.db"), "5"])))
    elif a.what == "phases":
        phases(a.out)
    else:
        speed(a.out, a.peers, set(a.reuse_peer))
    print(json.dumps({"load": os.getloadavg()}))


#: Loading a base: ``train(..., extend=o200k_base)`` from the call to the first counting event (the
#: base read, its merges derived, the store created with them), then stopped; wall and CPU s of
#: that span, measured in the process (the job's own line adds the interpreter and the imports).
TO_COUNTING = """
import sys, time, resource
from bpe_store import train
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
class Counting(Exception):
    pass
def progress(e):
    if e.get("stage") == "counting":
        raise Counting
t, c = time.perf_counter(), cpu()
try:
    train([sys.argv[1]], sys.argv[2], 210_000, [], extend=sys.argv[3], workers=2, progress=progress)
except Counting:
    pass
print(round(time.perf_counter() - t, 3), round(cpu() - c, 3))
"""
#: ``Tokenizer.from_store`` of a store, measured in the process as TO_COUNTING.
FROM_STORE = """
import sys, time, resource
from bpe_store import Tokenizer
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t, c = time.perf_counter(), cpu()
tok = Tokenizer.from_store(sys.argv[1])
print(round(time.perf_counter() - t, 3), round(cpu() - c, 3), len(tok.vocab))
"""
#: The merge engine's build alone (the replay of a base store's merges on a store's words, then the
#: first pair count), best of N in the process: the words of ``speed``'s 16K -> 20K store (zhwiki-20M)
#: and the 16K store's merges; prints CPU s and wall s of each build.
ENGINE = """
import array, itertools, sqlite3, sys, time, resource
from bpe_store import native
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c = sqlite3.connect(sys.argv[1]); c.text_factory = bytes
rows = [(i, b, n, None) for i, b, n in c.execute("SELECT id, bytes, count FROM words ORDER BY id")]
b = sqlite3.connect(sys.argv[2]); b.text_factory = bytes
log = b.execute('SELECT "left", "right", token FROM merges ORDER BY rank').fetchall()
vocab = dict(b.execute("SELECT id, bytes FROM vocab").fetchall())
tb = [vocab.get(i) for i in range(max(vocab) + 1)]
packed = array.array("I", itertools.chain.from_iterable(log)).tobytes()
runs = []
for _ in range(int(sys.argv[3])):
    t, c0 = time.perf_counter(), cpu()
    e = native.core.MergeEngine(rows, tb, 0, 256, len(log), 1, 0, packed, 0)
    runs.append((round(cpu() - c0, 3), round(time.perf_counter() - t, 3)))
    del e
print(len(rows), "words", len(log), "merges; (CPU s, wall s):", runs, "best", min(runs))
"""
#: Where a job's CPU goes: the import, then each stage of ``train``'s progress events (the stage
#: named is the one that begins; its CPU s is what the process and its children used since the one
#: before), in the process. Stages overlap with the writes' thread (the last counting flush is
#: written while the engine is built): a stage's CPU is all the process did meanwhile.
PHASES = """
import os, resource, sys, time, json
def cpu():
    r, q = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + q.ru_utime + q.ru_stime
c0 = cpu()
from bpe_store import train
out = [["import", round(cpu() - c0, 3)]]
last = [cpu(), "call"]
def progress(e):
    if e.get("stage") != last[1]:
        c = cpu()
        out.append([last[1] + " -> " + e["stage"], round(c - last[0], 3)])
        last[0], last[1] = c, e["stage"]
train([sys.argv[1]], sys.argv[2], int(sys.argv[4]), [], extend=sys.argv[3], workers=2, progress=progress)
out.append([last[1] + " -> returned", round(cpu() - last[0], 3)])
print(json.dumps(out))
"""


def phases(out: Path) -> None:
    """CPU s by stage (PHASES) of the 16K store's extension to 20K (``speed`` made the store),
    three runs."""
    from bpe_store.formats.bases import load_base

    zh, base16 = CORPORA / "zhwiki-20M.txt", out / "s-16k.db"
    size = str(load_base(str(base16)).n_tokens + 20000 - 16384)
    for _ in range(3):
        r = run_job([PHASES, str(zh), str(_fresh_db(out / "s-phases.db")), str(base16), size])
        print(json.dumps({"16K store -> 20K, CPU s by stage": json.loads(r.pop("out")), "job": r}), flush=True)


#: A store continued to a larger vocabulary on its own corpus (a resume with a larger --vocab-size).
CONTINUE = """
import sys
from bpe_store import train
train([sys.argv[1]], sys.argv[2], int(sys.argv[3]), [], pattern=sys.argv[4], workers=2)
"""


def speed(out: Path, peers: bool, reuse: set[str] = frozenset()) -> None:
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    zh = CORPORA / "zhwiki-20M.txt"
    res = {"fresh 16K (o200k pattern)": run_job([FRESH, str(zh), str(_fresh_db(out / "s-fresh.db")), "16384",
                                                  "o200k"]),
           "extend o200k_base +16K": extend_job(zh, _fresh_db(out / "s-ext.db"), "o200k_base", 16384),
           "load o200k_base (train --extend to counting)": run_job([TO_COUNTING, str(zh),
                                                                    str(_fresh_db(out / "s-load.db")), "o200k_base"]),
           "Tokenizer.from_store (o200k_base +16K)": run_job([FROM_STORE, str(out / "s-ext.db")])}
    for k, v in res.items():
        print(json.dumps({k: v}), flush=True)
    base16 = out / "s-16k.db"  # 16,384 tokens: 256 bytes + 16,128 merges, no special token
    if not base16.exists():
        run_job([FRESH, str(zh), str(base16), str(16384 - 256), "gpt2"])
    r = extend_job(zh, _fresh_db(out / "s-20k.db"), str(base16), 20000 - 16384)
    print(json.dumps({"bpe_store 16K store -> 20K (--extend)": r}), flush=True)
    cont = _fresh_db(out / "s-16k-cont.db")
    shutil.copy(base16, cont)
    r = run_job([CONTINUE, str(zh), str(cont), "20000", "gpt2"])
    print(json.dumps({"bpe_store 16K store continued to 20K (resume, larger --vocab-size)": r}), flush=True)
    if peers:
        _peers(out, zh, base16, reuse)


PEER_BPE_CONTINUE = """
import sys, json
from bpe_continue import continue_training
from tokenizers import Tokenizer
tok = continue_training(sys.argv[1], files=[sys.argv[2]], vocab_size=20000, show_progress=False)
tok.save(sys.argv[3])
"""


#: The peers' jobs, by the name ``--reuse-peer`` takes: (what the output calls it, its job).
PEER_NAMES = {"bpe-continue": "bpe-continue 16K -> 20K", "tinybpe": "tinybpe 16K -> +{n} merges"}


def _peers(out: Path, zh: Path, base16: Path, reuse: set[str] = frozenset()) -> None:
    from bpe_store.tokenizer.export import export_store

    hf = out / "s-16k-hf"
    if not hf.exists():
        export_store(base16, "hf", hf)
    continued = out / "bpe-continue-20k.json"
    _peer(out, "bpe-continue", reuse if continued.exists() else set(),  # _compare_peers reads its tokenizer
          lambda: run_job([PEER_BPE_CONTINUE, str(hf / "tokenizer.json"), str(zh), str(continued)]))
    _peer(out, "tinybpe", reuse,
          lambda: run_job([PEER_TINYBPE, str(base16), str(zh), str(TINYBPE_MERGES)], timeout=TINYBPE_TIMEOUT))
    _compare_peers(out, base16, zh)


def _peer(out: Path, name: str, reuse: set[str], run) -> None:
    """One peer's job (``run``), printed and recorded in ``out``/peers.json with when and at what
    load it ran; or, for a peer in ``reuse`` that a run recorded, the recorded figure, printed
    with ``"recorded": when`` (it is not run again: tinybpe's job alone takes ~300 s)."""
    label = PEER_NAMES[name].format(n=TINYBPE_MERGES)
    path = out / "peers.json"
    recorded = json.loads(path.read_text()) if path.exists() else {}
    if name in reuse and label in recorded:
        print(json.dumps({label: {**recorded[label], "not run: recorded": recorded[label]["at"]}}), flush=True)
        return
    r = {**run(), "at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "load": os.getloadavg()}
    recorded[label] = r
    path.write_text(json.dumps(recorded, indent=1))
    print(json.dumps({label: r}), flush=True)


#: tinybpe merges so slowly (491 s for 60 merges here in issue 37's measurement) that it is run
#: for this many merges only: its seconds per merge, beside the others' whole jobs.
TINYBPE_MERGES = 10
#: ... and stopped after this many seconds (it had not finished its 10 merges in 760 s).
TINYBPE_TIMEOUT = 300
PEER_TINYBPE = """
import sys, time, regex
from tinybpe import Trainer
from bpe_store.store.result import store_tokenizer
from bpe_store.text.pretokenize import resolve_pattern
vocab, merges, specials, pattern = store_tokenizer(sys.argv[1])
ids = {b: i for i, b in vocab.items()}  # no special token: bytes are 0..255, merge k is 256 + k
pat = regex.compile(resolve_pattern("gpt2"))
text = open(sys.argv[2], encoding="utf-8").read()
trainer = Trainer(text, preprocess=lambda t: [m.encode("utf-8") for m in pat.findall(t)])
trainer.load_merges([(ids[a], ids[b]) for a, b in merges])
t = time.perf_counter()
n = trainer.train(int(sys.argv[3]))
print(n, round(time.perf_counter() - t, 2))
"""


def _compare_peers(out: Path, base16: Path, zh: Path) -> None:
    """Where bpe_store's 20K and bpe-continue's differ: ids kept, merges in common, bytes per token
    on the held-out Chinese (each by its own library)."""
    import tokenizers

    from bpe_store.store.result import store_tokenizer
    from bpe_store.tokenizer.tokenizer import Tokenizer

    ours = Tokenizer.from_store(out / "s-20k.db")
    base_vocab, _, _, _ = store_tokenizer(base16)
    theirs = tokenizers.Tokenizer.from_file(str(out / "bpe-continue-20k.json"))
    from bpe_store.formats.gpt2_files import from_gpt2_str

    tv = {i: from_gpt2_str(t) for t, i in theirs.get_vocab().items()}
    kept = {"bpe_store": all(ours.vocab.get(i) == b for i, b in base_vocab.items()),
            "bpe-continue": all(tv.get(i) == b for i, b in base_vocab.items())}
    new_ours = {ours.vocab[i] for i in ours.vocab if i >= len(base_vocab)}
    new_theirs = {tv[i] for i in tv if i >= len(base_vocab)}
    held = data(out)["held-zh"].read_text(encoding="utf-8")
    print(json.dumps({"ids kept": kept, "new tokens": [len(new_ours), len(new_theirs)],
                      "new tokens in common": len(new_ours & new_theirs),
                      "held-out zh bytes/token": [bytes_per_token(ours, held),
                                                  round(len(held.encode()) / len(theirs.encode(held).ids), 4)]}),
          flush=True)


if __name__ == "__main__":
    main()
