#!/usr/bin/env python3
"""Loading benchmark: how long a tokenizer takes to be ready, bpe_store against tiktoken on the
same ranks, each load in a fresh process (imports done first and not counted), median of N.

* OpenAI's ``cl100k_base`` / ``o200k_base``: tiktoken (``load_tiktoken_bpe`` of the plain ranks
  file + ``Encoding``, what ``tiktoken.get_encoding`` does after its download cache) against
  ``Tokenizer.from_tiktoken`` on the same file and ``bpe_store.tiktoken_compat.get_encoding`` (which
  finds its own file: here the gzipped one the ``bpe-openai`` wheel ships);
* a trained store (``--store DB``, any number): ``Tokenizer.from_store`` against tiktoken loading
  the store's tiktoken export (``--specials-last``), an extended o200k store included.

Both sides run from compiled bytecode, as an installed package does (pip compiles a wheel's modules
when it installs it; tiktoken's are in site-packages' ``__pycache__``): the children get
``PYTHONPYCACHEPREFIX`` (a temporary directory) without ``PYTHONDONTWRITEBYTECODE``, and one
untimed round writes the bytecode first. Where ``PYTHONDONTWRITEBYTECODE`` is set (some CI and
sandboxes), an editable checkout's lazily imported modules were otherwise compiled from source in
every child: ~33 of the 98 ms that ``from_store`` of a 32K store measured.

    python bench/bench_load.py --store /work/big/enwiki-32k.db --store ext-o200k.db --repeat 5 \\
        --out bench/RESULTS-load.md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PATTERN = {"cl100k_base": "cl100k", "o200k_base": "o200k"}


def _ranks(name: str) -> str:
    """OpenAI's ranks as a plain file (tiktoken reads no gzip; its own cache holds plain files)."""
    from bpe_store.formats.openai_ranks import find_ranks_file, read_ranks

    out = Path(tempfile.gettempdir()) / "bench-load" / f"{name}.tiktoken"
    if not out.exists():
        import base64

        out.parent.mkdir(parents=True, exist_ok=True)
        ranks = read_ranks(find_ranks_file(name)).mergeable()
        out.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r for t, r in ranks.items()))
    return str(out)


def _export(db: str) -> Path:
    from bpe_store.tokenizer.export import export_store

    out = Path(tempfile.gettempdir()) / "bench-load" / Path(db).stem
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "tiktoken.json").exists():
        export_store(db, "tiktoken", out, force=True, specials_last=True)
    return out


def child(which: str, target: str) -> dict:
    """Import what ``which`` needs, then time its load of ``target`` (wall and CPU seconds)."""
    import tiktoken  # noqa: F401  (imports are not the load)
    import tiktoken.load

    import bpe_store.tiktoken_compat as compat
    from bpe_store.tokenizer.tokenizer import Tokenizer

    if which == "tiktoken" and target in PATTERN:
        path = _ranks(target)

        def load():
            from bpe_store.text.pretokenize import PATTERNS

            ranks = tiktoken.load.load_tiktoken_bpe(path)
            return tiktoken.Encoding(target, pat_str=PATTERNS[PATTERN[target]], mergeable_ranks=ranks,
                                     special_tokens={})
    elif which == "tiktoken":
        meta = json.loads((Path(target) / "tiktoken.json").read_text(encoding="utf-8"))
        path = str(Path(target) / meta["ranks_file"])

        def load():
            ranks = tiktoken.load.load_tiktoken_bpe(path)
            return tiktoken.Encoding(meta["name"], pat_str=meta["pat_str"], mergeable_ranks=ranks,
                                     special_tokens=meta["special_tokens"])
    elif which == "bpe_store get_encoding":
        def load():
            return compat.get_encoding(target)
    elif which == "bpe_store from_tiktoken":
        path = _ranks(target)

        def load():
            return Tokenizer.from_tiktoken(path, pattern=PATTERN[target])
    elif which == "bpe_store from_store":
        def load():
            return Tokenizer.from_store(target)
    else:
        raise SystemExit(f"unknown contender {which}")
    t0, c0 = time.perf_counter(), time.process_time()
    tok = load()
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    # a first encode, so a lazy load cannot hide its cost
    t1, c1 = time.perf_counter(), time.process_time()
    tok.encode("hello world, 你好")
    return {"wall": dt, "cpu": cpu, "first_encode_wall": time.perf_counter() - t1,
            "first_encode_cpu": time.process_time() - c1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--openai", default="cl100k_base,o200k_base")
    ap.add_argument("--store", action="append", default=[], help="a trained store (repeat)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    cells = []
    for name in [n for n in args.openai.split(",") if n]:
        cells.append((name, [("tiktoken", name), ("bpe_store get_encoding", name), ("bpe_store from_tiktoken", name)]))
    for db in args.store:
        cells.append((Path(db).name, [("tiktoken", str(_export(db))), ("bpe_store from_store", db)]))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1",
               PYTHONPYCACHEPREFIX=str(Path(tempfile.gettempdir()) / "bench-load-pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    rows = []
    for label, contenders in cells:
        runs: dict[str, list[dict]] = {w: [] for w, _ in contenders}
        for which, target in contenders:  # untimed: writes the bytecode the timed runs read
            subprocess.run([sys.executable, __file__, "--child", which, target], check=True,
                           capture_output=True, text=True, env=env)
        for _ in range(args.repeat):  # interleaved, so a change of the machine's load hits all alike
            for which, target in contenders:
                out = subprocess.run([sys.executable, __file__, "--child", which, target], check=True,
                                     capture_output=True, text=True, env=env).stdout
                runs[which].append(json.loads(out))
        for which, _ in contenders:
            med = {k: statistics.median(r[k] for r in runs[which]) for k in runs[which][0]}
            rows.append((label, which, med, os.getloadavg()[0]))
            print(f"{label:28s} {which:26s} load {med['wall']:.3f} s wall {med['cpu']:.3f} CPU s  "
                  f"first encode {med['first_encode_wall'] * 1e3:.1f} ms  (uptime {rows[-1][3]:.1f})", flush=True)
    if args.out:
        import platform
        import shlex

        lines = ["# Loading a tokenizer: bpe_store against tiktoken", "",
                 f"Command: `{shlex.join(['python', 'bench/bench_load.py'] + sys.argv[1:])}`", "",
                 f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
                 f"each load in a fresh process after its imports, median of {args.repeat} (interleaved), "
                 "from compiled bytecode (after one untimed round); "
                 "first encode: one short text right after, so a lazy load would show there.", "",
                 "| ranks | contender | load s (wall) | load CPU s | first encode ms | uptime |",
                 "|---|---|---:|---:|---:|---:|"]
        for label, which, med, load in rows:
            lines.append(f"| {label} | {which} | {med['wall']:.3f} | {med['cpu']:.3f} | "
                         f"{med['first_encode_wall'] * 1e3:.1f} | {load:.1f} |")
        Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
