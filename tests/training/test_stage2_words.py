"""Stage 2's words file (``training.stage2_words``, native/merge_words_file.cpp): written once the
stage-2 engine is built, read by a resume instead of the store's pieces and stage 1's replay, never
trusted: a resume from it, from a damaged one or from one naming other merges reaches the merges of an
uninterrupted run, and the file is gone once the run is done."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from cli_helpers import ROOT, SPECIAL
from conftest import EN, fixture_text, kill_when_paused

from bpe_store import train
from bpe_store.store.store import Store
from bpe_store.training import stage2_words
from bpe_store.training.merge import native_available

pytestmark = pytest.mark.skipif(not native_available(), reason="the words file is the native engine's")

RUNNER = """
import sys
from bpe_store import train
train([sys.argv[1]], sys.argv[2], 257 + 600, ["<|endoftext|>"], superword_from=400, workers=2,
      checkpoint_merges=20, checkpoint_seconds=0.2, superword_base=sys.argv[3])
"""


def _corpus(tmp_path):
    rng = random.Random(5)
    text = fixture_text(EN, 100_000)
    docs = [text[i:i + 2000] + "".join(rng.choice([" in order to", " one of the", " as well as"]) for _ in range(5))
            for i in range(0, len(text), 2000)]
    p = tmp_path / "corpus.txt"
    p.write_text(SPECIAL.join(docs), encoding="utf-8")
    return p


def _from_file(db):
    """The engine ``stage2_words.load`` builds for the store at ``db`` (None: no usable file)."""
    store = Store.open(db)
    try:
        params = store.params()
        n = len(params.special_tokens)
        vocab = store.load_vocab()
        merges = [(left, right, token) for _, left, right, token, _ in store.load_merges()]
        tb = [b if kind != "special" else None for _, b, kind in vocab]
        return stage2_words.load(store, params, tb, merges, n, n + 256)
    finally:
        store.close()


def test_a_killed_stage_two_resumes_from_its_words_file_to_identical_merges(tmp_path):
    corpus = _corpus(tmp_path)
    base = tmp_path / "plain.db"
    train([corpus], base, 257 + 600, [SPECIAL])
    expected = train([corpus], tmp_path / "whole.db", 257 + 600, [SPECIAL], superword_from=400, superword_base=base)
    assert not stage2_words.path_of(tmp_path / "whole.db").exists()  # removed at the end
    runs = {}
    for how in ("as written", "damaged", "other merges", "none"):
        db = tmp_path / f"{how}.db"
        cmd = [sys.executable, "-c", RUNNER, str(corpus), str(db), str(base)]
        kill_when_paused(cmd, "merge_log:3")  # inside stage 2's third merge log
        words = stage2_words.path_of(db)
        assert words.exists() and not list(tmp_path.glob("*.part"))
        if how == "as written":
            engine = _from_file(db)  # the resume's engine comes from it: the next merge is the store's
            assert engine is not None and engine.next_rank == 440
            m = engine.step(1)[0]
            tb = engine.token_bytes
            assert (tb[m.left], tb[m.right], m.count) == (*expected.merges[440], expected.merge_counts[440])
        elif how == "damaged":
            data = bytearray(words.read_bytes())
            data[len(data) // 2] ^= 0x55
            words.write_bytes(bytes(data))
            assert _from_file(db) is None
        elif how == "other merges":  # its header says it reflects 399 merges: its tag is not theirs
            data = bytearray(words.read_bytes())
            data[56:64] = (399).to_bytes(8, sys.byteorder)
            words.write_bytes(bytes(data))
            assert _from_file(db) is None
        else:
            words.unlink()
        # the resume says (a pause point of no length) when it builds the engine from the store's words
        env = {**os.environ, "BPE_STORE_TEST_PAUSE": "engine:rows", "BPE_STORE_TEST_PAUSE_SECONDS": "0"}
        r = subprocess.run(cmd, cwd=ROOT, timeout=300, env=env, stderr=subprocess.PIPE, text=True)
        assert r.returncode == 0 and not words.exists(), r.stderr
        assert ("paused at engine:rows" in r.stderr) == (how != "as written"), (how, r.stderr)
        r = train([corpus], db, 257 + 600, [SPECIAL], superword_from=400, superword_base=base)
        runs[how] = (r.merges, r.merge_counts)
    assert all(v == (expected.merges, expected.merge_counts) for v in runs.values()), runs.keys()
