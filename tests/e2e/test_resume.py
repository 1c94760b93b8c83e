"""Resume after kill -9: a training subprocess killed at random moments, during counting and
during merging, and restarted each time with the same command, ends with exactly the merges (and
counts at merge time) of an uninterrupted run."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import EN, ROOT, ZH, corpus_slice, fixture_text

from bpe_store import train

PARAMS = dict(vocab_size=700, special_tokens=["<|endoftext|>"], workers=2, chunk_size=200_000,
              count_flush_seconds=0.0, checkpoint_merges=10, checkpoint_seconds=0.2)

RUNNER = """
import sys
from bpe_store import train
train([sys.argv[1]], sys.argv[2], {vocab_size}, {special_tokens!r}, workers={workers},
      chunk_size={chunk_size}, count_flush_seconds={count_flush_seconds},
      checkpoint_merges={checkpoint_merges}, checkpoint_seconds={checkpoint_seconds})
"""


def phase_of(db: Path) -> tuple[str, int, int]:
    """(phase, chunks counted, merges) as a reader sees the store."""
    if not db.exists():
        return ("none", 0, 0)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        if not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'run'").fetchone():
            return ("none", 0, 0)
        phase = con.execute("SELECT phase FROM run").fetchone()
        chunks = con.execute("SELECT count(*) FROM chunks WHERE counted = 1").fetchone()[0]
        merges = con.execute("SELECT count(*) FROM merges").fetchone()[0]
        return (phase[0] if phase else "none", chunks, merges)
    finally:
        con.close()


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_uninterrupted_result(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(corpus_slice("tinystories-ru-20M.txt", 5_000_000), encoding="utf-8")
    expected = train([corpus], tmp_path / "whole.db", **PARAMS)

    db = tmp_path / "killed.db"
    script = RUNNER.format(**PARAMS)
    rng = random.Random(1234)
    # Kill once the store shows each target (chunks counted, or merges done), a random few
    # milliseconds later so that kills also land inside transactions.
    targets = [("counting", 1), ("counting", 5), ("merging", 0), ("merging", 60), ("merging", 200),
               ("merging", 330)]
    seen: list[tuple[str, int, int]] = []
    for phase, n in targets:
        proc = subprocess.Popen([sys.executable, "-c", script, str(corpus), str(db)], cwd=ROOT)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            now_phase, chunks, merges = phase_of(db)
            if (phase == "counting" and chunks >= n) or (phase == "merging" and now_phase != "counting"
                                                         and now_phase != "none" and merges >= n):
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.05))
        proc.kill()  # SIGKILL: no cleanup at all
        proc.wait()
        seen.append(phase_of(db))
    rc = subprocess.run([sys.executable, "-c", script, str(corpus), str(db)], cwd=ROOT, timeout=300).returncode
    assert rc == 0

    result = train([corpus], db, **PARAMS)  # a finished store answers at once
    assert result.merges == expected.merges
    assert result.merge_counts == expected.merge_counts
    assert result.vocab == expected.vocab
    phases = [p for p, _, _ in seen]
    assert phases.count("counting") >= 2 and phases.count("merging") >= 3, seen
    # progress only ever moved forward between kills
    merges = [m for _, _, m in seen]
    assert merges == sorted(merges)


def test_resume_after_interrupt_in_process(tmp_path):
    """A stop request mid-merge writes a checkpoint; the same call resumes to the same result."""
    import threading

    from bpe_store import Interrupted

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(fixture_text(EN, 400_000), encoding="utf-8")
    expected = train([corpus], tmp_path / "whole.db", 600, ["<|endoftext|>"])
    stop = threading.Event()
    seen = []

    def progress(event):
        seen.append(event)
        if event["stage"] == "merging" and event["done"] >= 100:
            stop.set()

    db = tmp_path / "stopped.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 600, ["<|endoftext|>"], progress=progress, stop=stop, checkpoint_merges=1000)
    assert 100 <= phase_of(db)[2] < 600 - 257
    result = train([corpus], db, 600, ["<|endoftext|>"])
    assert result.merges == expected.merges and result.merge_counts == expected.merge_counts


def test_continue_to_larger_vocab_equals_training_at_once(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(fixture_text(ZH, 300_000), encoding="utf-8")
    at_once = train([corpus], tmp_path / "once.db", 700, ["<|endoftext|>"])
    db = tmp_path / "grown.db"
    small = train([corpus], db, 500, ["<|endoftext|>"])
    assert small.merges == at_once.merges[: len(small.merges)]
    grown = train([corpus], db, 700, ["<|endoftext|>"])
    assert grown.merges == at_once.merges and grown.merge_counts == at_once.merge_counts
