"""One huge pre-token (a line of letters without whitespace): it is counted as pieces of at most
``max_pretoken_bytes`` (cut at UTF-8 character starts, from the pre-token's own start), the
planner cuts chunks inside it, and the result never depends on the chunking."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from conftest import ROOT
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bpe_store import ResumeMismatch, Store, train
from bpe_store.counting.count import count_chunk
from bpe_store.errors import InputError
from bpe_store.text import chunks as chunks_mod
from bpe_store.text.chunks import plan_chunks
from bpe_store.text.pretokenize import GPT2_PATTERN, count_words, split_long_pretoken
from bpe_store.training.options import DEFAULT_MAX_PRETOKEN_BYTES
from bpe_store.training.reference import reference_train_bpe

try:
    from bpe_store import _core
except ImportError:  # pragma: no cover
    _core = None

needs_native = pytest.mark.skipif(_core is None, reason="the native core is not built")
EOT = "<|e|>"

# Text made to have long runs of one class (letters of 1-4 bytes, digits, other, whitespace),
# contractions, leading spaces, and a special token.
ATOMS = ["a", "b", "é", "中", "𝔸", "1", "٣", ".", "'", "'s", " ", "  ", "\n", "\t", "\u00a0", EOT, "x y"]
runs = st.lists(st.tuples(st.sampled_from(ATOMS), st.integers(1, 40)), max_size=12)


def text_of(parts: list[tuple[str, int]]) -> str:
    return "".join(a * n for a, n in parts)


# -- the rule itself ---------------------------------------------------------------------------

@given(st.text(max_size=60), st.integers(4, 20))
def test_split_long_pretoken_pieces(word, m):
    b = word.encode("utf-8")
    pieces = split_long_pretoken(b, m)
    assert b"".join(pieces) == b
    assert all(0 < len(p) <= m for p in pieces) or b == b""
    for p in pieces:
        p.decode("utf-8")  # whole characters
    # greedy: each piece but the last could not take the next character
    for p, nxt in zip(pieces, pieces[1:]):
        first = nxt.decode("utf-8")[0].encode("utf-8")
        assert len(p) + len(first) > m


@needs_native
@given(runs, st.integers(4, 24))
def test_native_counting_splits_as_the_spec(parts, m):
    text = text_of(parts)
    want = dict(count_words(text, [EOT], GPT2_PATTERN, max_pretoken_bytes=m))
    got, n = _core.count_words(text.encode(), [EOT.encode()], m)
    assert got == want
    assert n == sum(want.values())


# -- chunking never changes the counts ------------------------------------------------------------

@needs_native
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs, st.integers(4, 24), st.integers(1, 80), st.integers(2, 64))
def test_counts_do_not_depend_on_chunk_size(tmp_path, monkeypatch, parts, m, chunk_size, window):
    monkeypatch.setattr(chunks_mod, "_SEARCH_WINDOW", window)  # so the fallback scan is exercised
    text = text_of(parts)
    data = text.encode()
    assume(data)
    path = tmp_path / "c.txt"
    path.write_bytes(data)
    want = count_words(text, [EOT], GPT2_PATTERN, max_pretoken_bytes=m)
    chunks = plan_chunks(path, len(data), [EOT], GPT2_PATTERN, chunk_size, max_pretoken_bytes=m)
    assert chunks[0][0] == 0 and chunks[-1][1] == len(data)
    assert all(a < b for a, b in chunks) and all(x[1] == y[0] for x, y in zip(chunks, chunks[1:]))
    got: dict[bytes, int] = {}
    for a, b in chunks:
        counts, _ = count_chunk(str(path), a, b, [EOT], GPT2_PATTERN, "strict", m)
        for w, c in counts.items():
            got[w] = got.get(w, 0) + c
    assert got == dict(want)


@needs_native
def test_a_long_run_is_cut_into_bounded_chunks(tmp_path, monkeypatch):
    # before: no boundary inside a run of letters, so one chunk held the whole run
    monkeypatch.setattr(chunks_mod, "_SEARCH_WINDOW", 1000)
    data = ("x " + "é" * 50_000 + "a" * 33_333 + ". " * 10).encode()
    path = tmp_path / "c.txt"
    path.write_bytes(data)
    chunks = plan_chunks(path, len(data), [EOT], GPT2_PATTERN, 4096, max_pretoken_bytes=1000)
    assert max(b - a for a, b in chunks) <= 4096 + 1000 + 1000 + len(EOT) + 64
    assert len(chunks) > 20
    got: dict[bytes, int] = {}
    for a, b in chunks:
        counts, _ = count_chunk(str(path), a, b, [EOT], GPT2_PATTERN, "strict", 1000)
        for w, c in counts.items():
            got[w] = got.get(w, 0) + c
    assert got == dict(count_words(data.decode(), [EOT], GPT2_PATTERN, max_pretoken_bytes=1000))


@pytest.mark.slow
@settings(max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(runs, st.integers(4, 16), st.sampled_from([1, 7, 64, 1 << 20]))
def test_training_equals_the_reference(tmp_path_factory, parts, m, chunk_size):
    text = text_of(parts)
    assume(text.replace(EOT, ""))  # only special tokens: nothing to train on (an error, tested elsewhere)
    d = tmp_path_factory.mktemp("t")
    (d / "c.txt").write_bytes(text.encode())
    got = train([d / "c.txt"], d / "r.db", 300, [EOT], chunk_size=chunk_size, max_pretoken_bytes=m, workers=2)
    ref_vocab, ref_merges = reference_train_bpe(text, 300, [EOT], max_pretoken_bytes=m)
    assert got.merges == ref_merges and got.vocab == ref_vocab


# -- stored with the run ----------------------------------------------------------------------------

@pytest.fixture
def small(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text(("hello world " * 50 + "z" * 300 + "\n") * 20, encoding="utf-8")
    return p


def test_value_is_stored_and_a_resume_with_another_is_refused(small, tmp_path):
    db = tmp_path / "r.db"
    train([small], db, 280, [EOT], max_pretoken_bytes=64)
    with Store.open(db, readonly=True) as s:
        assert s.params().max_pretoken_bytes == 64
    with pytest.raises(ResumeMismatch, match="max pre-token bytes 64 -> 128"):
        train([small], db, 290, [EOT], max_pretoken_bytes=128)
    r = train([small], db, 290, [EOT])  # not given: the store's value
    assert r.merges == reference_train_bpe(small.read_text(), 290, [EOT], max_pretoken_bytes=64)[1]


def test_default_is_stored_for_a_new_run(small, tmp_path):
    train([small], tmp_path / "r.db", 270, [EOT])
    with Store.open(tmp_path / "r.db", readonly=True) as s:
        assert s.params().max_pretoken_bytes == DEFAULT_MAX_PRETOKEN_BYTES == 1 << 20


@pytest.mark.parametrize("value", [0, 3, -1, 2**40, 1.5, "8"])
def test_bad_values_are_input_errors(small, tmp_path, value):
    with pytest.raises(InputError, match="max pre-token bytes"):
        train([small], tmp_path / "r.db", 270, [EOT], max_pretoken_bytes=value)
    assert not (tmp_path / "r.db").exists()


def test_cli_option_and_exit_3(small, tmp_path):
    from cli_helpers import run

    db = tmp_path / "r.db"
    r = run("train", small, "--db", db, "--vocab-size", "280", "--max-pretoken-bytes", "100", "--quiet")
    assert r.exit_code == 0, r.output
    r = run("train", small, "--db", db, "--vocab-size", "280", "--max-pretoken-bytes", "200", "--quiet")
    assert r.exit_code == 3 and "max pre-token bytes 100 -> 200" in r.stderr
    r = run("train", small, "--db", db, "--vocab-size", "280", "--max-pretoken-bytes", "2", "--quiet")
    assert r.exit_code == 2


def test_an_older_store_keeps_no_limit(tmp_path):
    # stores from before the column: NULL, "no limit", which is how they were counted
    from conftest import FIXTURES

    old = tmp_path / "old.db"
    old.write_bytes((FIXTURES / "v0_1_0.db").read_bytes())
    from bpe_store.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["db", "upgrade", str(old)])
    assert e.value.code in (0, None)
    with Store.open(old, readonly=True) as s:
        assert s.params().max_pretoken_bytes is None


# -- a real huge line ---------------------------------------------------------------------------------

@pytest.mark.slow
@needs_native
def test_a_300_mb_line_of_letters_trains_in_bounded_memory(tmp_path):
    # before: "string or blob too big" at the first checkpoint and on every resume, and ~5 GB of
    # memory for 200 MB
    path = tmp_path / "line.txt"
    with open(path, "wb") as f:
        block = b"a" * (1 << 20)
        for _ in range(300):
            f.write(block)
        f.write(b" the end\n")
    script = (
        "import re\n"
        "from bpe_store import train\n"
        f"r = train([{str(path)!r}], {str(tmp_path / 'r.db')!r}, 300, workers=2)\n"
        # VmHWM, this process image's own peak: ru_maxrss keeps the forking pytest's peak across exec
        # (a landing run once read 7756 MB here, pytest's, not the trainer's)
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())\n"
        "print(len(r.merges), int(hwm.group(1)) // 1024)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    merges, rss_mb = map(int, out.stdout.split())
    assert merges > 20
    assert rss_mb < 1200, rss_mb  # chunks of 8 MiB, pieces of 1 MiB: not the line's size
    con = sqlite3.connect(tmp_path / "r.db")
    longest = con.execute("SELECT max(length(bytes)) FROM words").fetchone()[0]
    con.close()
    assert longest == 1 << 20


@pytest.mark.parametrize("value", ["'big'", "-1", "1e9", "99999999999"])
def test_a_tampered_limit_is_a_store_error(small, tmp_path, value):
    from bpe_store import StoreError

    db = tmp_path / "r.db"
    train([small], db, 270, [EOT], max_pretoken_bytes=64)
    con = sqlite3.connect(db)
    con.execute(f"UPDATE run SET max_pretoken_bytes = {value}")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="max_pretoken_bytes"):
        train([small], db, 280, [EOT])


@pytest.mark.parametrize("pattern", ["gpt2", "gpt4"])
def test_the_limit_applies_to_jsonl_inputs_too(tmp_path, pattern):
    from bpe_store.text.pretokenize import resolve_pattern

    docs = ["x " + "é" * 30 + "ab" * 20, "hello " + "z" * 50 + " end", "'s" + "7" * 40]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    got = train([path], tmp_path / "r.db", 290, [EOT], max_pretoken_bytes=8, pattern=pattern, workers=2)
    _, want = reference_train_bpe(EOT.join(docs), 290, [EOT], resolve_pattern(pattern), max_pretoken_bytes=8)
    assert got.merges == want
