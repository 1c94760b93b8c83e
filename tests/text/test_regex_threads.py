"""Counting with a regex of one's own (the `regex` path) runs on the same threads as the native
path: `regex` releases the GIL with ``concurrent=True``. No worker processes, so it also works
where spawned workers cannot re-import ``__main__`` (``python -`` from a pipe)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from conftest import EN, ROOT, RU, fixture_text

from bpe_store import train
from bpe_store.counting.count import count_chunk_task
from bpe_store.text.pretokenize import CL100K_PATTERN, native_scanner

#: GPT-4's (cl100k) regex in a group: the same matches, but not a named pattern, so it counts
#: through `regex` (a regex of one's own), the path these tests are about.
GPT4 = f"(?:{CL100K_PATTERN})"
EOT = "<|endoftext|>"


def _corpus(tmp_path):
    text = (fixture_text(EN, 400_000) + EOT + fixture_text(RU, 300_000) + EOT) * 7  # > 4 MB: the old pool
    p = tmp_path / "corpus.txt"
    p.write_text(text, encoding="utf-8")
    return p


def native_merges(corpus, tmp_path, vocab_size: int) -> list[tuple[bytes, bytes]]:
    """The merges of the same run with GPT-4's named pattern, which the native scanner counts (it
    equals `regex`'s split: tests/text/test_pattern_scanners.py); counting 5 MB with `regex` in
    Python for the expected merges took ~2.5 CPU s a test."""
    return train([corpus], tmp_path / "native.db", vocab_size, [EOT], pattern=CL100K_PATTERN).merges


@pytest.mark.slow
def test_python_stdin_with_a_regex_pattern_and_two_workers(tmp_path):
    # before: 2 spawned workers re-ran `python -`'s __main__, crashed and were respawned forever
    corpus = _corpus(tmp_path)
    script = (f"from bpe_store import train\n"
              f"r = train([{str(corpus)!r}], {str(tmp_path / 'run.db')!r}, 300, [{EOT!r}], pattern={GPT4!r},"
              f" workers=2, chunk_size=200_000)\n"
              f"print(len(r.merges))\n"
              f"for l, rr in r.merges: print(l.hex(), rr.hex())\n")
    out = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.split("\n")
    assert lines[0] == str(300 - 257)
    got = [(bytes.fromhex(a), bytes.fromhex(b)) for a, b in (line.split() for line in lines[1:] if line)]
    assert got == native_merges(corpus, tmp_path, 300)


@pytest.mark.slow
def test_regex_counting_uses_threads_not_processes(tmp_path, monkeypatch):
    import multiprocessing

    corpus = _corpus(tmp_path)
    assert native_scanner(GPT4) == ""  # the path under test: no native scanner

    def no_pools(*a, **k):
        raise AssertionError("counting must not start processes")

    monkeypatch.setattr(multiprocessing.context.SpawnContext, "Pool", no_pools, raising=False)
    seen = set()
    real = count_chunk_task

    def spy(args):
        seen.add(threading.current_thread().name)
        return real(args)

    monkeypatch.setattr(sys.modules["bpe_store.training.count_step"], "count_chunk_task", spy)
    r = train([corpus], tmp_path / "run.db", 280, [EOT], pattern=GPT4, workers=2, chunk_size=100_000)
    assert any(n.startswith("bpe-count") for n in seen)
    assert r.merges == native_merges(corpus, tmp_path, 280)
