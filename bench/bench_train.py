"""Train side by side: bpe_store and the trainers people use today, on the same corpus and machine.

Each trainer runs in its own subprocess; this parent measures wall time and the peak RSS of the
whole process tree (polled every 20 ms with psutil), and prints a markdown table with the ratio
bpe_store / peer, and its CPU seconds (user + sys of the child and everything it waited for, from
``wait4``). Peers get the corpus streamed from the file as documents split at ``<|endoftext|>``
(rustbpe and bpeasy know no special tokens), except gigabpe, which reads the file itself; thread
pools are capped with RAYON_NUM_THREADS. bpe_store trains with its defaults (checkpoints on), from
the file. ffbpe is the one peer with CS336's tie-break (``tie_break="largest_content"``): the
``same vocab`` column says whether its vocabulary, in id order, equals bpe_store's.

    python bench/bench_train.py --corpus enwiki --vocab 32000 --threads 2
    python bench/bench_train.py --corpus zh --vocab 10000 --threads 2 --tools bpe_store,rustbpe
    python bench/bench_train.py --corpus enwiki --pattern gpt4 --tools bpe_store,rustbpe,ffbpe

``--pattern`` (a name of ``bpe_store.text.pretokenize.PATTERNS``) is given to every trainer that takes a
regex (rustbpe, ffbpe, bpeasy; HF ``tokenizers`` as a Split pre-tokenizer); gigabpe knows GPT-2's
only and is skipped for another.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bpe_store.text.pretokenize import PATTERNS

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BPE_STORE_SHARED", ROOT.parent / "shared"))
CORPORA = {
    "enwiki": SHARED / "corpora" / "enwiki-100M.txt",
    "zh": SHARED / "corpora" / "zhwiki-20M.txt",
    "ru": SHARED / "corpora" / "tinystories-ru-20M.txt",
    "cs336": SHARED / "corpora" / "cs336" / "corpus.en",
}
EOT = "<|endoftext|>"
TOOLS = ["bpe_store", "bpe_store_one_checkpoint", "gigabpe", "ffbpe", "rustbpe", "hf_tokenizers", "bpeasy"]


# -- the trainers (each runs in a child process) ---------------------------------------------------

def _docs(path: Path, block: int = 1 << 20):
    """The corpus's documents, streamed: the peers never hold the whole text (fair peak RSS)."""
    rest = ""
    with open(path, encoding="utf-8", newline="") as f:
        while chunk := f.read(block):
            *docs, rest = (rest + chunk).split(EOT)
            yield from (d for d in docs if d)
    if rest:
        yield rest


def run_bpe_store(path: Path, vocab: int, threads: int, pattern: str, one_checkpoint: bool) -> dict:
    from bpe_store import train

    marks: dict[str, float] = {}
    t0 = time.perf_counter()

    def progress(event: dict) -> None:
        if event["stage"] == "pairs" and "count_s" not in marks:
            marks["count_s"] = time.perf_counter() - t0

    kw = dict(checkpoint_merges=10**9, checkpoint_seconds=1e9) if one_checkpoint else {}
    with tempfile.TemporaryDirectory() as d:
        r = train([path], Path(d) / "bench.db", vocab, [EOT], workers=threads, progress=progress, pattern=pattern, **kw)
        db_mb = (Path(d) / "bench.db").stat().st_size / 1e6
        total = time.perf_counter() - t0
    return {"merges": len(r.merges), "count_s": marks.get("count_s"), "merge_s": total - marks.get("count_s", 0),
            "db_mb": round(db_mb, 1), "vocab_digest": _vocab_digest(r.vocab[i] for i in sorted(r.vocab))}


def _vocab_digest(tokens) -> str:
    """SHA-256 of the vocabulary's tokens in id order (length-prefixed, so no two lists collide)."""
    h = hashlib.sha256()
    for t in tokens:
        h.update(len(t).to_bytes(4, "little") + t)
    return h.hexdigest()


def run_gigabpe(path: Path, vocab: int, threads: int, pattern: str) -> dict:  # main() runs it for gpt2 only
    import gigabpe

    # bytelevel: the GPT-2 byte-level pre-tokenizer (its default splits at whitespace, unlike the others)
    _, merges = gigabpe.train_bpe([str(path)], vocab, special_tokens=[EOT], threads=threads, pretokenizer="bytelevel")
    return {"merges": len(merges)}


def run_ffbpe(path: Path, vocab: int, threads: int, pattern: str) -> dict:
    from ffbpe import BpeTrainer, PreTokenizer

    counter = PreTokenizer([EOT], eot_token=EOT, pat_str=PATTERNS[pattern]).word_counter()
    counter.add_source(_docs(path))
    trainer = BpeTrainer([EOT], tie_break="largest_content")
    trainer.add_word_counter(counter)
    trainer.train(vocab)
    ids = trainer.vocab
    return {"merges": len(ids) - 257, "vocab_digest": _vocab_digest(sorted(ids, key=ids.__getitem__))}


def run_rustbpe(path: Path, vocab: int, threads: int, pattern: str) -> dict:
    import rustbpe

    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(_docs(path), vocab_size=vocab, pattern=PATTERNS[pattern])
    return {"merges": tok.vocab_size - 256}


def run_hf_tokenizers(path: Path, vocab: int, threads: int, pattern: str) -> dict:
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if pattern != "gpt2":  # a speed peer only: Oniguruma reads some of these regexes otherwise
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(PATTERNS[pattern]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_docs(path), trainer=trainer)
    return {"merges": tok.get_vocab_size() - 257}


def run_bpeasy(path: Path, vocab: int, threads: int, pattern: str) -> dict:
    import bpeasy

    ranks = bpeasy.train_bpe(_docs(path), PATTERNS[pattern], 128, vocab)
    return {"merges": len(ranks) - 256}


def child(tool: str, path: Path, vocab: int, threads: int, pattern: str) -> None:
    t0 = time.perf_counter()
    if tool.startswith("bpe_store"):
        out = run_bpe_store(path, vocab, threads, pattern, tool == "bpe_store_one_checkpoint")
    else:
        out = globals()[f"run_{tool}"](path, vocab, threads, pattern)
    out["inner_s"] = time.perf_counter() - t0
    print("RESULT " + json.dumps(out), flush=True)


# -- the parent: measure each child ----------------------------------------------------------------

def measure(tool: str, path: Path, vocab: int, threads: int, pattern: str) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="true")
    t0 = time.perf_counter()
    # -S passes on: `python -S` with PYTHONPATH measures another checkout (an editable install's
    # import hook, set up by site, would otherwise win over PYTHONPATH)
    flags = ["-S"] if sys.flags.no_site else []
    proc = subprocess.Popen([sys.executable, *flags, __file__, "--child", tool, "--path", str(path), "--vocab",
                             str(vocab), "--threads", str(threads), "--pattern", pattern],
                            stdout=subprocess.PIPE, text=True, env=env)
    ps = psutil.Process(proc.pid)
    peak = 0
    # wait4, not poll(): the child's rusage (CPU seconds, its own max RSS) is only there at the reap.
    while (reaped := os.wait4(proc.pid, os.WNOHANG))[0] == 0:
        try:
            rss = sum(p.memory_info().rss for p in [ps, *ps.children(recursive=True)])
            peak = max(peak, rss)
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    _, status, usage = reaped
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = proc.stdout.read()
    proc.stdout.close()
    result = next((json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")), None)
    if proc.returncode != 0 or result is None:
        return {"tool": tool, "error": f"exit {proc.returncode}"}
    # ru_maxrss is KiB: the largest single process; the poll above sums the tree but can miss a spike.
    peak = max(peak, usage.ru_maxrss * 1024)
    return {"tool": tool, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": peak / 1e6,
            **result}


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    return (f"{cpu}, {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, "
            f"Python {platform.python_version()}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="enwiki", help=f"one of {sorted(CORPORA)} or a path")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--pattern", default="gpt2", choices=sorted(PATTERNS), help="the pre-tokenization pattern")
    ap.add_argument("--child"), ap.add_argument("--path")
    a = ap.parse_args()
    if a.child:
        return child(a.child, Path(a.path), a.vocab, a.threads, a.pattern)
    path = CORPORA.get(a.corpus, Path(a.corpus))
    load = os.getloadavg()
    tools = [t for t in a.tools.split(",") if a.pattern == "gpt2" or t != "gigabpe"]
    rows = [measure(t, path, a.vocab, a.threads, a.pattern) for t in tools]
    ours = next((r for r in rows if r["tool"] == "bpe_store" and "wall_s" in r), None)
    print(f"\n{path.name} ({path.stat().st_size / 1e6:.1f} MB) -> vocab {a.vocab}, {a.threads} threads; {machine()}")
    print(f"command: python bench/bench_train.py --corpus {a.corpus} --vocab {a.vocab} --threads {a.threads}"
          f" --pattern {a.pattern} --tools {a.tools}\n")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in load)}; after: "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    print("| trainer | wall s | CPU s | counting s | merging s | peak RSS MB | merges | same vocab"
          " | bpe_store wall / this | bpe_store CPU / this | bpe_store RSS / this |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    def fmt(v: float | None) -> str:
        return "" if v is None else f"{v:.2f}"

    for r in rows:
        if "error" in r:
            print(f"| {r['tool']} | {r['error']} | | | | | | | | | |")
            continue
        ratios = [fmt(ours[k] / r[k]) if ours else "" for k in ("wall_s", "cpu_s", "peak_rss_mb")]
        same = ""
        if ours and "vocab_digest" in r:
            same = "yes" if r["vocab_digest"] == ours["vocab_digest"] else "NO"
        cells = [r["tool"], f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}", fmt(r.get("count_s")), fmt(r.get("merge_s")),
                 f"{r['peak_rss_mb']:.0f}", str(r["merges"]), same, *ratios]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
