"""Loading a large ``.tiktoken`` ranks file: ``Tokenizer.from_tiktoken`` beside tiktoken's own load.

Writes a synthetic ranks file of ``--tokens`` tokens (the 256 bytes, then tokens each made by
extending a recent one by a letter, so most prefixes are tokens, as in a real BPE vocabulary;
seeded) unless ``--file`` names one, then loads it in a fresh process per loader and repeat, and
prints each load's wall and CPU seconds and peak RSS, with the load average.

    python bench/bench_ranks_load.py --tokens 3000000 --dir /work/big --repeat 2
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from bpe_store.text.pretokenize import GPT2_PATTERN

#: Each loader, run in a process of its own: prints JSON {wall, cpu, rss_mb}.
LOADERS = {
    "bpe_store": "from bpe_store import Tokenizer; t = Tokenizer.from_tiktoken(PATH, 'gpt2'); n = len(t.vocab)",
    "tiktoken": ("import tiktoken; from tiktoken.load import load_tiktoken_bpe; r = load_tiktoken_bpe(PATH); "
                 "t = tiktoken.Encoding('x', pat_str=PATTERN, mergeable_ranks=r, special_tokens={}); n = t.n_vocab"),
}
PROBE = """import os, resource, sys, time, json
PATH, PATTERN = sys.argv[1], sys.argv[2]
t0, c0 = time.perf_counter(), os.times()
{code}
c1 = os.times()
print(json.dumps({{"wall": time.perf_counter() - t0, "cpu": c1.user + c1.system - c0.user - c0.system,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "tokens": n}}))
"""


def write_ranks(path: Path, tokens: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    seen = {bytes([b]) for b in range(256)}
    lines = [base64.b64encode(bytes([b])) + b" %d" % b for b in range(256)]
    made = [bytes([b]) for b in range(97, 123)]
    while len(lines) < tokens:
        recent = rng.random() < 0.7
        a = made[rng.randrange(max(0, len(made) - 50_000) if recent else 0, len(made))]
        t = a + bytes([rng.randrange(97, 123)])
        if t in seen or len(t) > 24:
            continue
        seen.add(t)
        made.append(t)
        lines.append(base64.b64encode(t) + b" %d" % len(lines))
    path.write_bytes(b"\n".join(lines) + b"\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=3_000_000)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--file", default=None, help="a ranks file to load instead of the synthetic one")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--loaders", nargs="+", default=list(LOADERS))
    args = ap.parse_args()
    path = Path(args.file) if args.file else Path(args.dir) / f"synthetic-{args.tokens}.tiktoken"
    if not path.exists():
        write_ranks(path, args.tokens)
    print(f"{path}: {path.stat().st_size / 1e6:.1f} MB", flush=True)
    for _ in range(args.repeat):
        for name in args.loaders:
            load0 = os.getloadavg()[0]
            r = subprocess.run([sys.executable, "-c", PROBE.format(code=LOADERS[name]), str(path), GPT2_PATTERN],
                               capture_output=True, text=True, check=True)
            m = json.loads(r.stdout.strip().splitlines()[-1])
            print(f"{name:>10}: {m['wall']:.2f} s wall, {m['cpu']:.2f} CPU s, peak RSS {m['rss_mb']:.0f} MB, "
                  f"{m['tokens']} tokens; load {load0:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
