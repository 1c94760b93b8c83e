"""The whole native core, ``bpe_store._core``, built with AddressSanitizer + UBSan and driven
through the Python API: training (scanner, threaded counting, merge engine, a base's merges
replayed), encoding (every entry point, threads, invalid UTF-8, a huge sparse id), and other
threads changing the lists the encoder reads while it runs with the GIL released; the jsonl
extractor on records cut at every byte.

The module is compiled straight from native/*.cpp and nanobind's sources (the ``nanobind``
package, in the test extra) and loaded into a child Python with the ASan runtime preloaded and
``PYTHONMALLOC=malloc``, so that a freed Python object is poisoned memory. Any report aborts the
child. Most of it is compiling (the core as one unit beside nanobind's; ~36 CPU s); slow.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "native"

DRIVER = r'''
import importlib.util, sys, threading, time
spec = importlib.util.spec_from_file_location("bpe_store._core", sys.argv[1])
core = importlib.util.module_from_spec(spec)
spec.loader.exec_module(core)
sys.modules["bpe_store._core"] = core   # the package imports this one, not its built module

import numpy as np
from bpe_store import Tokenizer
from bpe_store.training.train import train

EOT = "<|endoftext|>"
work = sys.argv[2]
text = open(sys.argv[3], encoding="utf-8").read()[:300_000].replace("\n\n", "\n" + EOT)
src = work + "/train.txt"
open(src, "w", encoding="utf-8").write(text)
train([src], work + "/run.db", 700, [EOT], workers=2, chunk_size=1 << 15, engine="native")
# a run extending that store at merge 300 on Chinese and English: the engine replays the base's
# merges on every word, part by part (native/replay_cuts.h cuts between characters); the test
# compares both stores' merges with the regular build's
zh = open(sys.argv[3].replace("enwiki-1M.txt", "zhwiki-600K.txt"), encoding="utf-8").read()[:120_000]
mixed = work + "/mixed.txt"
open(mixed, "w", encoding="utf-8").write(zh + EOT + text[:60_000])
train([mixed], work + "/ext.db", 900, [EOT], extend=work + "/run.db@300", workers=2, engine="native")
tok = Tokenizer.from_store(work + "/run.db")
spec_tok = Tokenizer.from_store(work + "/run.db", native=False)
sample = text[-60_000:] + EOT + "  odd\t\r\n spaces 12345 \U0001F643 中文字符" + EOT
want = spec_tok.encode(sample)
assert tok.encode(sample) == want
assert tok.encode_to_array(sample, threads=2).tolist() == want
assert tok.encode_to_array(sample.encode("utf-8"), threads=2).tolist() == want
assert tok.encode_batch([sample, "", sample[:999]], threads=2) == [want, [], spec_tok.encode(sample[:999])]
assert list(tok.encode_iterable(sample.splitlines(keepends=True))) == want
assert "_log" in tok.__dict__, "from_store did not read the merge log natively (merge_log_reader.cpp)"
# ~1.3 MB: the piece cache on 2 MiB pages (piece_cache.h shape_for); each copy ends at a special token
assert tok.encode_to_array((sample * 22).encode("utf-8"), threads=2).tolist() == want * 22
try:
    tok._core.encode(b"ok \xed\xa0\x80", 1)
    raise AssertionError("invalid UTF-8 accepted")
except ValueError:
    pass
gpt4 = Tokenizer(tok.vocab, tok.merges, [EOT], pattern=r"\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+")
assert gpt4.encode(sample) == Tokenizer(tok.vocab, tok.merges, [EOT], pattern=gpt4.pattern, native=False).encode(sample)
sparse = dict(tok.vocab); sparse[3_000_000_000] = b"<|huge|>"
assert Tokenizer(sparse, tok.merges, ["<|huge|>"]).encode("a<|huge|>")[-1] == 3_000_000_000

# Another thread empties the list while the encoder reads its items with the GIL released:
# each item is held only by the list, so without a reference of the encoder's own it is freed.
letters = "etaoinshrdlucmfw"
def long_piece(i):  # 40,000 letters; j * j % 16 repeats every 8 j (a letter at a time took ~4 CPU s here)
    return "".join(letters[(i * 7 + j * j) % len(letters)] for j in range(8)) * 5_000
for name in ("encode_pieces", "encode_batch"):
    items = [long_piece(i) for i in range(24)]
    lengths = [len(tok._core.encode_pieces([s])) for s in items] if name == "encode_pieces" else None
    go = threading.Event()
    def clear():
        go.wait()
        time.sleep(0.02)
        items.clear()
    t = threading.Thread(target=clear)
    t.start()
    go.set()
    out = getattr(tok._core, name)(items, 1) if name == "encode_batch" else tok._core.encode_pieces(items)
    t.join()
    assert len(out) == (sum(lengths) if lengths else 24), name

# The jsonl extractor on records cut at every byte (no read past the end), and from two threads.
rec = ('{"id": 1, "t\\u0065xt": "a\\u00e9\\ud83d\\ude00 \\/ x\\n", "m": [1, -2.5e3, true, null, NaN, '
       '{"text": 1}], "k": "\\ud800"}\r\n\n').encode()
assert core.jsonl_texts(rec * 3, b"text") == (b"\xff".join([b"a\xc3\xa9\xf0\x9f\x98\x80 / x\n"] * 3), 3, 7)
for k in range(len(rec)):
    core.jsonl_texts(rec[:k], b"text")
threads = [threading.Thread(target=core.jsonl_texts, args=(rec * 20000, b"text")) for _ in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("ok")
'''


def _build(tmp: Path) -> Path:
    nanobind = pytest.importorskip("nanobind")
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    nb_root = Path(nanobind.__file__).parent
    out = tmp / ("_core" + sysconfig.get_config_var("EXT_SUFFIX"))
    # the module's own source list, so that a new native file is covered too
    sources = [ROOT / f for f in re.findall(r"native/[\w/.-]+\.cpp", (ROOT / "CMakeLists.txt").read_text())]
    if NATIVE != ROOT / "native":
        sources = [NATIVE / p.name for p in sources]
    assert sources, "no native sources found in CMakeLists.txt"
    # Why -O0: every access and check is instrumented (nothing optimized away), and it compiles
    # fastest; the driver runs ~1.2x as long as at -Og (8.0 vs 6.5 CPU s), the build ~0.6x. Why -g1:
    # the reports' stacks still name functions, files and lines; the unit compiles in 30 CPU s, 34 with -g.
    flags = [cxx, "-std=c++17", "-O0", "-g1", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
             "-fno-omit-frame-pointer", "-fPIC", "-fvisibility=hidden"]
    includes = ["-I", sysconfig.get_paths()["include"], "-I", nanobind.include_dir(),
                "-I", str(nb_root / "ext" / "robin_map" / "include"), "-I", str(NATIVE)]
    # Why one translation unit of all the sources (a unity build): each source parses the same
    # headers (the standard library's, nanobind's: ~1 CPU s a source) and instantiates the same
    # templates; as one unit the core compiles in 33 CPU s instead of 53 (GCC 12, -O0, loaded
    # cores). Two sources that define one name at file scope cannot be one unit: rename one.
    # It compiles beside nanobind's own (nb_combined.cpp), then a link.
    unity = tmp / "core_unity.cpp"
    unity.write_text("".join(f'#include "{src}"\n' for src in sources))
    units = [unity, Path(nanobind.source_dir()) / "nb_combined.cpp"]
    objects = [tmp / f"{k}-{src.stem}.o" for k, src in enumerate(units)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for build in pool.map(lambda job: subprocess.run([*flags, *includes, "-c", str(job[0]), "-o", str(job[1])],
                                                         capture_output=True, text=True), zip(units, objects)):
            _check(build)
    _check(subprocess.run([*flags, "-shared", *map(str, objects), "-o", str(out)], capture_output=True, text=True))
    return out


def _check(build: subprocess.CompletedProcess) -> None:
    if build.returncode != 0 and "sanitize" in build.stderr:
        pytest.skip(f"the compiler has no sanitizers: {build.stderr[:200]}")
    assert build.returncode == 0, build.stderr[-3000:]


def _runtime(name: str) -> str | None:
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    path = subprocess.run([cxx, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.mark.slow
def test_core_is_memory_safe_under_asan_and_ubsan(tmp_path: Path) -> None:
    module = _build(tmp_path)
    asan, cxxrt = _runtime("libasan.so"), _runtime("libstdc++.so")
    if asan is None:
        pytest.skip("no shared ASan runtime to preload into Python")
    # the C++ runtime preloaded too: ASan's exception interceptor must find it at start-up
    preload = " ".join(p for p in (asan, cxxrt) if p)
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(DRIVER))
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, LD_PRELOAD=preload, PYTHONMALLOC="malloc",
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, str(driver), str(module), str(work),
                          str(ROOT / "tests" / "fixtures" / "enwiki-1M.txt")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), (run.stdout + run.stderr)[-6000:]
    # the sanitized build trained as the regular one does (which the engine tests compare with the
    # Python engine; running that engine under the sanitizers took 6.7 of the driver's 13.7 CPU s):
    # a finished store answers at once with its result
    from bpe_store import train

    src, mixed, eot = work / "train.txt", work / "mixed.txt", ["<|endoftext|>"]
    regular = train([src], work / "regular.db", 700, eot, workers=2, chunk_size=1 << 15)
    assert train([src], work / "run.db", 700, eot).merges == regular.merges, "the sanitized engine trained otherwise"
    regular_ext = train([mixed], work / "regular_ext.db", 900, eot, extend=f"{work / 'regular.db'}@300", workers=2)
    assert train([mixed], work / "ext.db", 900, eot, extend=f"{work / 'run.db'}@300").merges == regular_ext.merges, \
        "the sanitized engine replayed the base otherwise"
