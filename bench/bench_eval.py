"""Evaluation's cost and a real comparison (issue 34's targets; docs/evaluate.md's table).

Three parts, each skippable (``--parts``):

* ``sizes``: a 64K store measured at 16 sizes on 10 MB of held-out text (``bpe-store eval
  --sizes``: one encode at the largest size, the rest from ``counts_at_sizes``), beside an encode
  per size (the same call with the shortcut turned off): wall and CPU seconds of each.
* ``during``: ``train --eval HELD --eval-every 1000`` on a corpus to 32K against the same run
  without it, each in a child process: CPU seconds (user + sys of the child) and the overhead.
* ``table``: 32K stores of the gpt2, gpt4 and o200k patterns trained on a mix of English, Russian
  and Chinese, beside cl100k_base and o200k_base, on a 2 MB held-out slice of each language
  (``--by file``): bytes per token, tokens per word and Rényi efficiency, as Markdown.

    python bench/bench_eval.py --workdir /work/big/eval --parts sizes,during,table

Stores are kept in ``--workdir`` and reused by later runs (delete them to train again).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BPE_STORE_SHARED", ROOT.parent / "shared")) / "corpora"
EN, RU, ZH = SHARED / "enwiki-100M.txt", SHARED / "tinystories-ru-20M.txt", SHARED / "zhwiki-20M.txt"
HELD = 2 << 20  # bytes of each language held out (the tail of its corpus)


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def cut(src: Path, dst: Path, start: int, size: int | None) -> Path:
    """Bytes ``[start, start + size)`` of ``src`` (whole lines: cut at newlines) as ``dst``."""
    if not dst.exists():
        data = src.read_bytes()
        end = len(data) if size is None else min(len(data), start + size)
        a = data.rfind(b"\n", 0, start) + 1 if start else 0
        b = data.rfind(b"\n", a, end) + 1 or end
        dst.write_bytes(data[a:b])
    return dst


def train_child(args: list[str]) -> tuple[float, float]:
    """``bpe-store train ARGS`` in a child: ``(wall s, CPU s)``."""
    before, t0 = cpu_children(), time.perf_counter()
    subprocess.run([sys.executable, "-m", "bpe_store", "train", *args, "--quiet"], check=True, cwd=ROOT)
    return time.perf_counter() - t0, cpu_children() - before


def store(workdir: Path, name: str, corpus: list[Path], vocab: int, pattern: str = "gpt2") -> Path:
    db = workdir / f"{name}.db"
    if not db.exists():
        wall, cpu = train_child([*map(str, corpus), "--db", str(db), "--vocab-size", str(vocab),
                                 "--special", "<|endoftext|>", "--pattern", pattern])
        print(f"trained {db.name}: {wall:.1f} s, {cpu:.1f} CPU s ({load()})", flush=True)
    return db


def part_sizes(workdir: Path) -> None:
    from bpe_store.inspection import candidates as cand_mod
    from bpe_store.inspection import evaluation as ev
    from bpe_store.inspection import heldout as ho

    train_part = cut(EN, workdir / "en-train-90M.txt", 0, 90 << 20)
    db = store(workdir, "en-64k", [train_part], 64_000)
    held = ho.read_heldout([cut(EN, workdir / "en-held-10M.txt", len(EN.read_bytes()) - (10 << 20), None)])
    sizes = [4000 * k for k in range(1, 17)]
    for label, shortcut in (("one encode", True), ("an encode per size", False)):
        c0, t0 = cpu_self(), time.perf_counter()
        cand = cand_mod.store_candidate(db, sizes)
        if not shortcut:
            cand.parts = None
        rows = ev.evaluate([cand], held).rows
        wall, cpu = time.perf_counter() - t0, cpu_self() - c0
        print(f"sizes: 64K store, 16 sizes, {len(held.files[0].text) / 1e6:.1f} MB held out, {label}: "
              f"{wall:.2f} s wall, {cpu:.2f} CPU s ({load()}); bytes/token at 4K "
              f"{rows[0].metrics['bytes_per_token']:.3f}, at 64K {rows[-1].metrics['bytes_per_token']:.3f}", flush=True)


def part_during(workdir: Path, corpus: Path) -> None:
    held = cut(EN, workdir / "en-held-1M.txt", len(EN.read_bytes()) - (1 << 20), None)
    out = []
    for label, extra in (("plain", []), ("--eval-every 1000", ["--eval", str(held), "--eval-every", "1000"])):
        db = workdir / "during.db"
        for p in workdir.glob("during.db*"):
            p.unlink()
        wall, cpu = train_child([str(corpus), "--db", str(db), "--vocab-size", "32000", "--special",
                                 "<|endoftext|>", *extra])
        out.append(cpu)
        print(f"during: {corpus.name} -> 32K {label}: {wall:.1f} s wall, {cpu:.2f} CPU s ({load()})", flush=True)
    print(f"during: --eval-every 1000 on a {held.stat().st_size / 1e6:.1f} MB held-out text adds "
          f"{100 * (out[1] / out[0] - 1):.1f} % CPU", flush=True)


def part_table(workdir: Path) -> None:
    from bpe_store.inspection import candidates as cand_mod
    from bpe_store.inspection import evaluation as ev
    from bpe_store.inspection import heldout as ho

    helds = []
    for name, src in (("English", EN), ("Russian", RU), ("Chinese", ZH)):
        size = src.stat().st_size
        helds.append(cut(src, workdir / f"held-{name}.txt", size - HELD, None))
    mix = [cut(EN, workdir / "mix-en.txt", 0, 40 << 20), cut(RU, workdir / "mix-ru.txt", 0, RU.stat().st_size - HELD),
           cut(ZH, workdir / "mix-zh.txt", 0, ZH.stat().st_size - HELD)]
    cands = [cand_mod.store_candidate(store(workdir, f"mix-{p}", mix, 32_000, p)) for p in ("gpt2", "gpt4", "o200k")]
    cands += [cand_mod.parse_candidate("cl100k_base"), cand_mod.parse_candidate("o200k_base")]
    c0, t0 = cpu_self(), time.perf_counter()
    rows = ev.evaluate(cands, ho.read_heldout(helds), by="file").rows
    print(f"table: {len(cands)} tokenizers on {len(helds)} files in {time.perf_counter() - t0:.1f} s, "
          f"{cpu_self() - c0:.1f} CPU s ({load()})", flush=True)
    names = {str(h): n for h, n in zip(helds, ("English", "Russian", "Chinese"))}
    print("\n| tokenizer | vocab | held out | bytes/token | tokens/word | Rényi eff. (α 2.5) | parity |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for r in rows:
        grp = "all" if r.grp == "all" else names[r.grp.removeprefix("file:")]
        m = r.metrics
        who = Path(r.source).stem if r.tokenizer == "self" else r.tokenizer
        tpw = "" if m["tokens_per_word"] is None else f"{m['tokens_per_word']:.3f}"
        par = "" if m["parity"] is None else f"{m['parity']:.3f}"
        print(f"| {who} | {r.vocab_size:,} | {grp} | {m['bytes_per_token']:.3f} | {tpw} | "
              f"{m['renyi_efficiency']:.4f} | {par} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, required=True)
    ap.add_argument("--parts", default="sizes,during,table")
    ap.add_argument("--corpus", type=Path, default=EN, help="the corpus of the 'during' runs")
    a = ap.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    print(f"{os.uname().machine}, {os.cpu_count()} CPUs, {load()}", flush=True)
    for part in a.parts.split(","):
        {"sizes": lambda: part_sizes(a.workdir), "during": lambda: part_during(a.workdir, a.corpus),
         "table": lambda: part_table(a.workdir)}[part]()


if __name__ == "__main__":
    main()
