"""Superword stores (SuperBPE's stage 2 in a store): both stages in one run, a branch from a
finished store at merge t, a kill -9 in stage 2 resumed to identical merges, SQL, ``db check``,
the tokenizer and its exports, and bad input refused with its exit code and nothing written."""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import subprocess
import sys
import time

import pytest
from cli_helpers import ROOT, SPECIAL, run
from conftest import EN, RU, ZH, fixture_text, kill_when_paused

from bpe_store import train
from bpe_store.cli.output import show_token
from bpe_store.text.superword_split import STAGE2_PATTERN, word_parts
from bpe_store.training.superword_reference import reference_superword_bpe


def _corpus(tmp_path, n: int = 24_000, name: str = "corpus.txt"):
    """English with repeated phrases and document boundaries: superwords have something to learn."""
    rng = random.Random(7)
    text = fixture_text(EN, n)
    docs = [text[i:i + 2000] for i in range(0, len(text), 2000)]
    phrases = [" in order to", " as well as", " one of the", " at the same time"]
    docs = [d + "".join(rng.choice(phrases) for _ in range(5)) for d in docs]
    p = tmp_path / name
    p.write_text(SPECIAL.join(docs), encoding="utf-8")
    return p


def test_both_stages_in_one_run_equal_the_reference(tmp_path):
    corpus = _corpus(tmp_path)
    r = train([corpus], tmp_path / "super.db", 256 + 1 + 300, [SPECIAL], superword_from=200, engine="python")
    _, want = reference_superword_bpe(corpus.read_text(encoding="utf-8"), 256 + 1 + 300, [SPECIAL], 200)
    assert r.merges == want
    assert (tmp_path / "super.stage1.db").exists()  # stage 1, kept for the next transition point
    assert any(word_parts(a + b) >= 2 for a, b in r.merges[200:])  # superwords were learned
    assert all(word_parts(a + b) <= 4 and b": " not in a + b for a, b in r.merges[200:])
    con = sqlite3.connect(tmp_path / "super.db")
    assert con.execute("SELECT pattern, superword_from, superword_max_words FROM run").fetchone() == (
        STAGE2_PATTERN, 200, 4)
    ranks = [row[0] for row in con.execute("SELECT rank FROM superword_merges")]
    assert ranks == list(range(200, 300))


def merges_digest(merges: list[tuple[bytes, bytes]]) -> str:
    return hashlib.sha256(repr(merges).encode()).hexdigest()


#: ``{t: digest of reference_superword_bpe's merges of _corpus() to 557 from t}``, stored: the
#: pure-Python reference took ~12 CPU s for t = 60 and ~6 for 250 (it runs live at t = 200 above).
#: ``PYTHONPATH=tests python tests/e2e/test_superword_store.py`` computes them again.
BRANCH_REFERENCE = {60: "9801c7a316c05406a8ddae719282d332eb2c5828bbf94e30fa08ee21e50c0185",
                    250: "edac2d60740510f8e389086441ba2d1fd85fccdb5f3879bba1f52d2f86f03327"}


def test_a_branch_of_a_finished_store_reuses_its_merges(tmp_path):
    corpus = _corpus(tmp_path)
    base = train([corpus], tmp_path / "plain.db", 256 + 1 + 300, [SPECIAL])
    for t, want in BRANCH_REFERENCE.items():
        r = train([corpus], tmp_path / f"super{t}.db", 256 + 1 + 300, [SPECIAL], superword_from=t,
                  superword_base=tmp_path / "plain.db")
        assert r.merges[:t] == base.merges[:t]
        assert merges_digest(r.merges) == want, t
    assert not (tmp_path / "super100.stage1.db").exists()


def test_the_tokenizer_and_hf_export_encode_superwords_alike(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from bpe_store import Tokenizer

    corpus = _corpus(tmp_path)
    db = tmp_path / "super.db"
    train([corpus], db, 256 + 1 + 300, [SPECIAL], superword_from=200)
    tok = Tokenizer.from_store(db)
    assert run("export", db, "--format", "hf", "--out", tmp_path / "hf").exit_code == 0
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    auto = pytest.importorskip("transformers").AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    # 600+ documents in three scripts, and the split's corners
    texts = [fixture_text(name, 200 * 400)[i:i + 400] for name in (EN, RU, ZH) for i in range(0, 200 * 400, 400)]
    texts += ["in order to be 12345: yes...  ok", "a  b\n\nc", "one of the", " ,, x", "1 2  3   "]
    for text in texts:
        ids = tok.encode(text)
        assert ids == hf.encode(text).ids == auto.encode(text, add_special_tokens=False), text
        assert tok.decode(ids) == text
    r = run("export", db, "--format", "tiktoken", "--out", tmp_path / "tt")
    assert r.exit_code == 2 and "tiktoken cannot express a superword store" in r.stderr
    # encode writes .npy for a superword store as for any store: the tokenizer's ids
    (tmp_path / "doc.txt").write_text(texts[0], encoding="utf-8")
    assert run("encode", db, tmp_path / "doc.txt", "-o", tmp_path / "ids.npy").exit_code == 0
    import numpy as np

    assert np.load(tmp_path / "ids.npy").tolist() == tok.encode(texts[0])


def test_db_check_and_sql_of_a_superword_store(tmp_path):
    corpus = _corpus(tmp_path)
    db = tmp_path / "super.db"
    train([corpus], db, 256 + 1 + 260, [SPECIAL], superword_from=200)
    r = run("db", "check", db, "--deep")
    assert r.exit_code == 0, r.stdout + r.stderr


def test_bad_superword_input_is_refused_and_writes_nothing(tmp_path):
    corpus = _corpus(tmp_path)
    db = tmp_path / "super.db"
    r = run("train", corpus, "--db", db, "--vocab-size", 300, "--superword-from", 100)
    assert r.exit_code == 2 and "larger than the vocabulary" in r.stderr
    assert not db.exists() and not (tmp_path / "super.stage1.db").exists()
    train([corpus], tmp_path / "gpt4.db", 400, [SPECIAL], pattern="gpt4")
    r = run("train", corpus, "--db", db, "--vocab-size", 420, "--special", SPECIAL, "--superword-from", 100,
            "--superword-base", tmp_path / "gpt4.db")
    assert r.exit_code == 2 and "another pattern" in r.stderr and not db.exists()
    r = run("train", corpus, "--db", db, "--vocab-size", 420, "--special", SPECIAL, "--superword-from", 150,
            "--superword-base", tmp_path / "gpt4.db", "--pattern", "gpt4")
    assert r.exit_code == 2 and "fewer than the transition point" in r.stderr and not db.exists()
    # a superword store resumed with other options: exit 3, the store as it was
    assert run("train", corpus, "--db", db, "--vocab-size", 420, "--special", SPECIAL, "--superword-from", 100,
               "--superword-base", tmp_path / "gpt4.db", "--pattern", "gpt4").exit_code == 0
    before = db.read_bytes()
    same = ["train", corpus, "--db", db, "--vocab-size", 420, "--special", SPECIAL, "--superword-base",
            tmp_path / "gpt4.db", "--pattern", "gpt4"]
    for other in (["--superword-from", 90], ["--superword-from", 100, "--max-superword-words", 3]):
        r = run(*same, *other)
        assert r.exit_code == 3 and "other parameters" in r.stderr, (other, r.stderr)
    assert db.read_bytes() == before


RUNNER = """
import sys
from bpe_store import train
from bpe_store.cli.output import show_token
train([sys.argv[1]], sys.argv[2], 257 + 1200, ["<|endoftext|>"], superword_from=400, workers=2,
      chunk_size=100_000, count_flush_seconds=0.0, checkpoint_merges=20, checkpoint_seconds=0.2,
      superword_base=sys.argv[3])
"""


def test_status_and_sql_show_the_next_superword_pairs_while_stage_two_merges(tmp_path):
    # stage 2's checkpoints log merges only: its most frequent pairs go with them (merge_step.
    # STAGE2_NEXT_PAIRS), so a reader sees the next superword pairs while it merges. Held inside
    # its third merge log (at merge 440): the second's are what the reader sees
    corpus = _corpus(tmp_path, 100_000)
    base = tmp_path / "plain.db"
    train([corpus], base, 257 + 600, [SPECIAL])
    expected = train([corpus], tmp_path / "whole.db", 257 + 600, [SPECIAL], superword_from=400, superword_base=base)
    db = tmp_path / "super.db"
    runner = RUNNER.replace("257 + 1200", "257 + 600")
    cmd = [sys.executable, "-c", runner, str(corpus), str(db), str(base)]
    env = {**os.environ, "BPE_STORE_TEST_PAUSE": "merge_log:3"}
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert "paused at merge_log:3" in proc.stderr.readline()
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            con.text_factory = bytes  # token text may be part of a character
            follows = con.execute("SELECT pairs_merges FROM run").fetchone()[0]
            top = con.execute('SELECT "left", "right", count FROM top_pairs').fetchall()
            con.close()
            status = run("status", db)
            sql = run("sql", db, "SELECT * FROM top_pairs LIMIT 3")
            check = run("db", "check", db)
        finally:
            proc.kill()
    assert follows == 440 and 0 < len(top) <= 1000
    rank = follows  # the first row is the merge that comes next, with its count
    assert (top[0][0], top[0][1]) == expected.merges[rank]
    assert top[0][2] == expected.merge_counts[rank]
    assert status.exit_code == 0 and f"next merge   {show_token(expected.merges[rank][0])}" in status.stdout
    assert sql.exit_code == 0 and str(top[0][2]) in sql.stdout
    assert check.exit_code == 0, check.stdout + check.stderr


def _state(db) -> tuple[str, int, int]:
    """``(phase, chunks counted, merges)`` as a reader sees the store."""
    if not db.exists():
        return ("none", 0, 0)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        phase = con.execute("SELECT phase FROM run").fetchone()
        chunks = con.execute("SELECT count(*) FROM chunks WHERE counted = 1").fetchone()[0]
        return (phase[0] if phase else "none", chunks, con.execute("SELECT count(*) FROM merges").fetchone()[0])
    except sqlite3.Error:
        return ("none", 0, 0)
    finally:
        con.close()


def _reached(db, phase: str, target: int) -> bool:
    now, chunks, merges = _state(db)
    if phase == "counting":
        return now == "counting" and chunks >= target
    return now in ("merging", "done") and merges >= target


@pytest.mark.slow
def test_sigkill_in_stage_two_resumes_to_identical_merges(tmp_path):
    corpus = _corpus(tmp_path, 400_000)
    base = tmp_path / "plain.db"
    train([corpus], base, 257 + 600, [SPECIAL])
    expected = train([corpus], tmp_path / "whole.db", 257 + 1200, [SPECIAL], superword_from=400, superword_base=base)
    db = tmp_path / "killed.db"
    seen = []
    # inside stage 2's counting flush (a pause point: its units go in one flush, so the state the
    # poll once waited for, "counting, a unit counted", lasts only from that flush's commit to the
    # move to merging, a few ms, and was seen or not by the load's luck), while its engine is built
    # (merging, no superword merge yet), then while it merges (past the transition point)
    kill_when_paused([sys.executable, "-c", RUNNER, str(corpus), str(db), str(base)], "flush:1")
    seen.append(_state(db))
    for phase, target in (("merging", 400), ("merging", 450), ("merging", 700), ("merging", 1000)):
        proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(corpus), str(db), str(base)], cwd=ROOT)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline and not _reached(db, phase, target):
            time.sleep(0.005)
        time.sleep(random.uniform(0, 0.02))
        proc.kill()
        proc.wait()
        seen.append(_state(db))
    rc = subprocess.run([sys.executable, "-c", RUNNER, str(corpus), str(db), str(base)], cwd=ROOT,
                        timeout=300).returncode
    assert rc == 0
    r = train([corpus], db, 257 + 1200, [SPECIAL], superword_from=400, superword_base=base)
    assert r.merges == expected.merges and r.merge_counts == expected.merge_counts
    phases = [p for p, _, _ in seen]
    merges = [m for _, _, m in seen]
    assert seen[0][:2] == ("counting", 0) and phases[1] == "merging" and merges == sorted(merges), seen
    assert 400 < merges[2] < merges[-1] < 1200, seen  # killed inside stage 2


if __name__ == "__main__":  # BRANCH_REFERENCE computed again: PYTHONPATH=tests python <this file>
    import tempfile
    from pathlib import Path

    text = _corpus(Path(tempfile.mkdtemp())).read_text(encoding="utf-8")
    print({t: merges_digest(reference_superword_bpe(text, 256 + 1 + 300, [SPECIAL], t)[1]) for t in (60, 250)})
