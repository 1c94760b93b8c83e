"""Cold start, measured: whole processes, as a CS336 student or a script runs them.

    python bench/bench_cold.py --repeat 15 [--python CMD]

Times, over ``--repeat`` fresh processes each (best and median, wall and CPU = user + sys):

* ``import bpe_store``
* ``from bpe_store import train_bpe; train_bpe(corpus.en, 500, ["<|endoftext|>"])`` (the whole
  process: interpreter start, imports, a temporary store, training, cleanup)
* ``python -c pass`` (the interpreter alone, for reference)

``--python`` runs another interpreter command (e.g. a script that puts an older checkout first).
With ``PYTHONDONTWRITEBYTECODE`` set, every start also compiles the package's sources: run with
``env -u PYTHONDONTWRITEBYTECODE`` to measure what an installed package (with .pyc files) costs.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BPE_STORE_SHARED", ROOT.parent / "shared"))


def measure(cmd: list[str], repeat: int) -> tuple[list[float], list[float]]:
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        # cwd: a neutral directory, so `-c` does not import a checkout from the current one
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=tempfile.gettempdir())
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args()
    py = shlex.split(a.python)
    corpus = SHARED / "corpora" / "cs336" / "corpus.en"
    cases = {
        "python -c pass": "pass",
        "import bpe_store": "import bpe_store",
        "train_bpe(corpus.en, 500)": (f"from bpe_store import train_bpe; "
                                      f"train_bpe({str(corpus)!r}, 500, ['<|endoftext|>'])"),
    }
    print(f"{a.python}: {a.repeat} processes each; seconds, best / median")
    for name, code in cases.items():
        walls, cpus = measure(py + ["-c", code], a.repeat)
        print(f"  {name:<28} wall {min(walls):.3f} / {statistics.median(walls):.3f}   "
              f"cpu {min(cpus):.3f} / {statistics.median(cpus):.3f}")


if __name__ == "__main__":
    main()
