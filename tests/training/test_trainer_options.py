"""The trainer options ``min_frequency`` and ``max_token_length``: native engine == Python engine ==
the reference trainer (their spec), independent of threads, chunking, batches, engines and
kill -9; stored with the run and checked on resume; validated; in the CLI.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys

import pytest
from cli_helpers import run as cli
from conftest import FIXTURES, corpus_slice, train_text
from hypothesis import given, settings
from hypothesis import strategies as st
from test_merge_engine import KINDS, SPECIALS, as_bytes, byte_vocab, rows_of, words_st
from test_reference_diff import texts

from bpe_store import InputError, ResumeMismatch, train, train_bpe
from bpe_store.store.store import Store
from bpe_store.text.pretokenize import count_words
from bpe_store.training.merge import native_available, new_engine
from bpe_store.training.reference import reference_train_bpe, train_from_counts

EOT = "<|endoftext|>"
min_freqs = st.sampled_from([1, 2, 3, 5, 2**40])
max_lens = st.sampled_from([None, 2, 3, 4, 7])


def run_engine(word_counts, kind, n, batch=None, **options):
    e = new_engine(rows_of(word_counts), byte_vocab(), SPECIALS, SPECIALS + 256, 0, kind, **options)
    merges = []
    while len(merges) < n and not e.exhausted:
        merges += e.step(min(batch or n, n - len(merges)))
    return e, merges


# -- the engines against the reference ------------------------------------------------------------

@given(words_st, st.integers(min_value=1, max_value=40), min_freqs, max_lens)
def test_engines_equal_reference_with_options(word_counts, n, min_frequency, max_token_length):
    options = dict(min_frequency=min_frequency, max_token_length=max_token_length)
    ref = train_from_counts(word_counts, n, **options)
    py, py_merges = run_engine(word_counts, "python", n, **options)
    assert as_bytes(py, py_merges) == ref
    assert py.exhausted == (len(ref) < n)
    assert all(c >= min_frequency for *_, c in ref)
    if max_token_length is not None:
        assert all(len(a + b) <= max_token_length for a, b, _ in ref)
    if native_available():
        nat, nat_merges = run_engine(word_counts, "native", n, **options)
        assert nat_merges == py_merges
        assert nat.pair_counts() == py.pair_counts() and nat.pair_digest() == py.pair_digest()
        assert nat.exhausted == py.exhausted
        assert nat.take_changes() == py.take_changes()


@pytest.mark.parametrize("kind", KINDS)
def test_min_frequency_leaves_rare_words_out(kind):
    counts = {b"ab": 2, b"cd": 1, b"cdcd": 1, b"cdcdcd": 1, b"xy": 3}
    e, merges = run_engine(counts, kind, 10, min_frequency=2)
    # cd occurs 6 times, but in words counted once each: no pair of theirs is counted
    assert as_bytes(e, merges) == [(b"x", b"y", 3), (b"a", b"b", 2)] == train_from_counts(counts, 10, 2)
    assert e.exhausted
    # the default is CS336's: every word counts
    e, merges = run_engine(counts, kind, 1)
    assert as_bytes(e, merges) == [(b"c", b"d", 6)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_pair_too_long_is_never_chosen_and_never_blocks(kind):
    # "aaaaaaaa" x 1000: (a, a) then (aa, aa) then (aaaa, aaaa) by count; with a limit of 4 bytes
    # the 8-byte pair is never counted, and the next merges are the rarer short pairs
    counts = {b"aaaaaaaa": 1000, b"bc": 5, b"bcd": 2}
    e, merges = run_engine(counts, kind, 10, max_token_length=4)
    got = as_bytes(e, merges)
    assert got == [(b"a", b"a", 7000), (b"aa", b"aa", 3000), (b"b", b"c", 7), (b"bc", b"d", 2)]
    assert got == train_from_counts(counts, 10, max_token_length=4) and e.exhausted
    assert all(len(e.token_bytes[a] + e.token_bytes[b]) <= 4 for a, b in e.pair_counts())
    e, merges = run_engine(counts, kind, 10)
    assert as_bytes(e, merges)[2] == (b"aaaa", b"aaaa", 1000)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_rows_are_still_found_with_rare_words_left_out(kind):
    import array

    tb = byte_vocab()
    good = array.array("I", [SPECIALS + ord("a"), SPECIALS + ord("b")]).tobytes()
    bad = array.array("I", [999]).tobytes()
    rows = [(1, b"ab", 1, bad), (2, b"ab", 5, good), (3, b"ab", 4, bad)]
    e = new_engine(rows, tb, SPECIALS, 257, 0, kind, min_frequency=2)
    assert e.bad_word == 2  # an index into rows; row 0 is left out unchecked
    e = new_engine(rows[:2], tb, SPECIALS, 257, 0, kind, min_frequency=2)
    assert e.bad_word == -1


# -- training: the store, resume, independence ----------------------------------------------------


@settings(max_examples=40)
@given(text=texts, vocab_extra=st.integers(0, 40), batch=st.sampled_from([1, 3, 2000]),
       min_frequency=st.sampled_from([1, 2, 3]), max_token_length=max_lens,
       engine=st.sampled_from(["python", "auto"]))
def test_trainer_equals_reference_with_options(tmp_path_factory, text, vocab_extra, batch, min_frequency,
                                               max_token_length, engine):
    if not text:
        return  # an empty input file is its own error
    specials = [EOT, "<|a|>"]
    vocab_size = 256 + len(specials) + vocab_extra
    options = dict(min_frequency=min_frequency, max_token_length=max_token_length)
    ref_vocab, ref_merges = reference_train_bpe(text, vocab_size, specials, **options)
    try:
        got = train_text(tmp_path_factory.mktemp("opt"), text, vocab_size, specials, checkpoint_merges=batch,
                     chunk_size=16, workers=1, engine=engine, **options)
    except InputError as exc:  # nothing to train on (no pre-token at all)
        assert "nothing to train on" in str(exc) and not count_words(text, specials)
        return
    assert got.merges == ref_merges
    assert got.vocab == ref_vocab


OPTIONS = dict(min_frequency=3, max_token_length=6)
RU_SLICE = ("tinystories-ru-20M.txt", 600_000, 2_000_000)


@pytest.fixture(scope="module")
def ru_corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("ru") / "corpus.txt"
    p.write_bytes(corpus_slice(*RU_SLICE).encode())
    return p


@pytest.fixture(scope="module")
def straight(ru_corpus, tmp_path_factory):
    """An uninterrupted run with both options, one worker, one chunk, one batch."""
    return train([ru_corpus], tmp_path_factory.mktemp("s") / "s.db", 900, [EOT], workers=1, **OPTIONS)


def reference_digest(ru_corpus) -> str:
    """The digest of the reference trainer's merges of ``ru_corpus`` to 900 with ``OPTIONS``."""
    merges = reference_train_bpe(ru_corpus.read_bytes().decode(), 900, [EOT], **OPTIONS)[1]
    return hashlib.sha256(repr(merges).encode()).hexdigest()


#: ``reference_digest``, stored: the pure-Python reference took ~6 CPU s on these 600 KB (the
#: trainer meets it live with these options on generated text above). ``PYTHONPATH=tests python
#: tests/training/test_trainer_options.py`` computes it again.
REFERENCE_MERGES = "4d79618fc210232e831ba27a5eaf0a8def7fe1515268dadda47642f9559e344c"


@pytest.mark.slow
def test_results_independent_of_workers_chunks_batches_and_engines(ru_corpus, straight, tmp_path):
    assert hashlib.sha256(repr(straight.merges).encode()).hexdigest() == REFERENCE_MERGES
    assert all(len(a + b) <= 6 for a, b in straight.merges) and min(straight.merge_counts) >= 3
    for i, (workers, chunk, batch, engine) in enumerate([(2, 20_000, 50, "native"), (2, 7_000, 7, "python")]):
        if engine == "native" and not native_available():
            continue
        r = train([ru_corpus], tmp_path / f"{i}.db", 900, [EOT], workers=workers, chunk_size=chunk,
                  checkpoint_merges=batch, engine=engine, **OPTIONS)
        assert (r.merges, r.merge_counts) == (straight.merges, straight.merge_counts)


def test_the_store_keeps_rare_words_and_no_pair_too_long(ru_corpus, straight, tmp_path):
    db = tmp_path / "x.db"
    train([ru_corpus], db, 900, [EOT], **OPTIONS)
    con = sqlite3.connect(db)
    try:
        assert con.execute("SELECT min_frequency, max_token_length FROM run").fetchone() == (3, 6)
        # rare words keep their counts and stay single bytes; they hold no counted pair
        rare, rare_with_tokens = con.execute(
            "SELECT count(*), count(tokens) FROM words WHERE count < 3").fetchone()
        assert rare > 1000 and rare_with_tokens == 0
        assert con.execute("SELECT sum(count) FROM words").fetchone()[0] == sum(
            count_words(ru_corpus.read_bytes().decode(), [EOT]).values())
        too_long = con.execute(
            'SELECT count(*) FROM pair_counts p JOIN vocab l ON l.id = p."left" JOIN vocab r ON r.id = p."right"'
            " WHERE length(l.bytes) + length(r.bytes) > 6").fetchone()[0]
        assert too_long == 0
        assert con.execute("SELECT max(length(bytes)) FROM vocab WHERE kind = 'merge'").fetchone()[0] <= 6
    finally:
        con.close()


def test_resume_with_other_options_is_refused(ru_corpus, tmp_path):
    db = tmp_path / "r.db"
    train([ru_corpus], db, 400, [EOT], **OPTIONS)
    for other in (dict(min_frequency=2, max_token_length=6), dict(min_frequency=3, max_token_length=None),
                  dict(min_frequency=3, max_token_length=7), {}):
        with pytest.raises(ResumeMismatch, match="min_frequency|max_token_length") as info:
            train([ru_corpus], db, 420, [EOT], **other)
        assert "\n" not in str(info.value)
    r = train([ru_corpus], db, 420, [EOT], **OPTIONS)  # the same values continue it
    assert len(r.merges) == 420 - 257
    args = ["train", ru_corpus, "--db", db, "--vocab-size", "420", "--special", EOT, "--progress", "none"]
    refused = cli(*args, "--min-frequency", "3")
    assert refused.exit_code == 3 and "max_token_length 6 -> None" in refused.stderr
    assert cli(*args, "--min-frequency", "3", "--max-token-length", "6").exit_code == 0


def test_cli_options_are_stored_and_give_the_api_result(ru_corpus, straight, tmp_path):
    db = tmp_path / "cli.db"
    r = cli("train", ru_corpus, "--db", db, "--vocab-size", "900", "--special", EOT, "--min-frequency", "3",
            "--max-token-length", "6", "--progress", "none")
    assert r.exit_code == 0, r.stderr
    with Store.open(db, readonly=True) as store:
        p = store.params()
        assert (p.min_frequency, p.max_token_length) == (3, 6)
    st = json.loads(cli("status", db, "--json").stdout)
    assert (st["min_frequency"], st["max_token_length"], st["pattern_name"]) == (3, 6, "gpt2")
    assert "pattern gpt2, min frequency 3, max token length 6" in cli("status", db).stdout
    vocab, merges = train_bpe(ru_corpus, 900, [EOT], db=db, **OPTIONS)
    assert merges == straight.merges
    help_text = cli("train", "--help").stdout
    assert "--min-frequency" in help_text and "--max-token-length" in help_text


@pytest.mark.parametrize("bad", [dict(min_frequency=0), dict(min_frequency=-2), dict(min_frequency=True),
                                 dict(min_frequency=1.5), dict(max_token_length=1), dict(max_token_length=0),
                                 dict(max_token_length=False), dict(max_token_length="8"),
                                 dict(max_token_length=2**64), dict(min_frequency=2**63)])
def test_bad_option_values(tmp_path, bad):
    p = tmp_path / "c.txt"
    p.write_text("hello hello")
    with pytest.raises(InputError, match=next(iter(bad))):
        train([p], tmp_path / "x.db", 300, [], **bad)
    assert not (tmp_path / "x.db").exists()


def test_cli_bad_option_values(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("hello hello")
    for opt, value in (("--min-frequency", "0"), ("--max-token-length", "1")):
        r = cli("train", p, "--db", tmp_path / "x.db", "--vocab-size", "300", opt, value)
        assert r.exit_code == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
        assert not (tmp_path / "x.db").exists()


def test_an_old_store_has_the_default_options(tmp_path):
    db = tmp_path / "old.db"
    shutil.copy(FIXTURES / "v0_1_0.db", db)
    assert cli("db", "upgrade", db).exit_code == 0
    with Store.open(db, readonly=True) as store:
        p = store.params()
        assert (p.min_frequency, p.max_token_length) == (1, None)


_KILLED_CHILD = """
import os, signal, sys
from bpe_store import train
def progress(ev):
    if ev["stage"] == "merging" and ev["done"] >= int(sys.argv[3]):
        os.kill(os.getpid(), signal.SIGKILL)
train([sys.argv[1]], sys.argv[2], 900, ["<|endoftext|>"], engine=sys.argv[4], checkpoint_merges=50,
      progress=progress, min_frequency=3, max_token_length=6)
"""


@pytest.mark.parametrize("engine", KINDS)
def test_kill_9_mid_merge_then_resume_equals_straight_run(ru_corpus, straight, tmp_path, engine):
    db = tmp_path / "k.db"
    p = subprocess.run([sys.executable, "-c", _KILLED_CHILD, str(ru_corpus), str(db), "320", engine])
    assert p.returncode == -9
    with Store.open(db) as store:
        assert store.sql("SELECT count(*) FROM merges").scalar() == 300  # the last whole batch
    # resumed with the other engine: the store, not the process, holds the state
    r = train([ru_corpus], db, 900, [EOT], engine="python" if engine == "native" else "auto", **OPTIONS)
    assert (r.merges, r.merge_counts) == (straight.merges, straight.merge_counts)


def test_the_pretoken_limit_is_decided_once_as_the_store_is_opened(tmp_path):
    """The run's ``max_pretoken_bytes`` is set in ``job.params`` when the plan step creates or opens
    the store (the one given, else the store's, else the default), before any check or step reads
    it; it used to be patched in again after the store was opened, and compared through a second
    call of the same rule."""
    from bpe_store.training.options import DEFAULT_MAX_PRETOKEN_BYTES, TrainOptions
    from bpe_store.training.plan import run_check, run_plan

    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world, hello there " * 200, encoding="utf-8")
    db = tmp_path / "run.db"

    def planned(**given) -> int | None:
        job = run_check([corpus], db, 300, [], TrainOptions(**given), None, None)
        try:
            run_plan(job)
            return job.params.max_pretoken_bytes
        finally:
            job.store.close()

    assert planned() == DEFAULT_MAX_PRETOKEN_BYTES  # a new store: the default
    db.unlink()
    assert planned(max_pretoken_bytes=64) == 64
    assert planned() == 64  # a resume that does not give it: the store's
    assert Store.open(db, readonly=True).params().max_pretoken_bytes == 64


def test_run_params_and_run_options_share_no_field_and_make_the_options_whole(tmp_path):
    """``TrainOptions.checked`` splits the options in two that share no field: what defines the run
    (``RunParams``) and the rest (``RunOptions``), which the job holds side by side; every option is
    in exactly one of them, and ``TrainOptions.of_run`` puts them back together (a superword run's
    stage 1 is trained from its own). They overlapped in five fields (the pattern, the invalid-UTF-8
    policy, min_frequency, max_token_length, max_pretoken_bytes), two of which could disagree once
    the plan step decided the pre-token limit."""
    import dataclasses

    from bpe_store.store.params import RunParams
    from bpe_store.text.pretokenize import PATTERNS
    from bpe_store.text.superword_split import STAGE2_PATTERN
    from bpe_store.training.options import PARAMS_OF_OPTIONS, RunOptions, TrainOptions, stage1_params
    from bpe_store.training.plan import run_check

    options = {f.name for f in dataclasses.fields(TrainOptions)}
    run = {f.name for f in dataclasses.fields(RunOptions)}
    params = {f.name for f in dataclasses.fields(RunParams)}
    assert not run & params and not run & set(PARAMS_OF_OPTIONS)
    assert run | set(PARAMS_OF_OPTIONS) == options
    assert set(PARAMS_OF_OPTIONS.values()) <= params

    given = TrainOptions(pattern="gpt4", workers=3, min_frequency=2, max_token_length=9, invalid_utf8="replace",
                         max_pretoken_bytes=64, chunk_size=1 << 16, engine="python")
    run_options, run_params = given.checked(400, [EOT])
    assert TrainOptions.of_run(run_options, run_params) == dataclasses.replace(given, pattern=PATTERNS["gpt4"])
    assert (run_params.min_frequency, run_params.max_token_length, run_params.max_pretoken_bytes) == (2, 9, 64)

    superword = dataclasses.replace(given, superword_from=40, max_superword_words=3)
    run_options, run_params = superword.checked(400, [EOT])
    assert (run_params.pattern, run_params.stage1_pattern) == (STAGE2_PATTERN, PATTERNS["gpt4"])
    assert (run_params.superword_from, run_params.superword_max_words) == (40, 3)
    stage1 = TrainOptions.of_run(run_options, stage1_params(run_params))
    assert stage1 == dataclasses.replace(given, pattern=PATTERNS["gpt4"])
    assert stage1_params(run_params).vocab_size == 1 + 256 + 40

    corpus = tmp_path / "c.txt"
    corpus.write_text("hello world " * 50, encoding="utf-8")
    job = run_check([corpus], tmp_path / "run.db", 300, [], given, None, None)
    assert isinstance(job.options, RunOptions) and isinstance(job.params, RunParams)


if __name__ == "__main__":  # the stored digest, computed again: PYTHONPATH=tests python <this file>
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp()) / "corpus.txt"
    path.write_bytes(corpus_slice(*RU_SLICE).encode())
    print(reference_digest(path))
