"""Pre-tokenization patterns by name (gpt2, gpt4 = cl100k, o200k) and the error when a pattern
matches no text at all.

The named regexes are tiktoken's own strings, and ``regex`` splits text as tiktoken's engine
does: tiktoken exposes no "split" call, so each comparison builds a tiktoken ``Encoding`` whose
ranks hold every short substring of the text that starts where one of ``regex``'s pre-tokens does;
tiktoken then encodes each of its pre-tokens as ONE token (a piece found in the ranks is emitted
whole), and decoding the tokens gives its pre-tokens (``tiktoken_pieces`` says why that suffices).
"""

from __future__ import annotations

import sqlite3
from unittest import mock

import pytest
import regex
from cli_helpers import run
from conftest import EN, corpus_slice, fixture_text
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bpe_store import InputError, ResumeMismatch, train
from bpe_store.errors import PatternError
from bpe_store.text.chunks import plan_chunks
from bpe_store.text.pretokenize import (
    CL100K_PATTERN,
    GPT2_PATTERN,
    O200K_PATTERN,
    PATTERNS,
    count_words,
    pretokenize,
    resolve_pattern,
)
from bpe_store.tokenizer.tokenizer import Tokenizer
from bpe_store.training.reference import reference_train_bpe

EOT = "<|endoftext|>"
NAMED = ["gpt2", "gpt4", "o200k"]
#: every named pattern, the published models' ones too: regex and tiktoken's engine agree on each
ALL_NAMED = [*NAMED, "llama3", "qwen2"]


def tiktoken_pieces(text: str, pattern: str) -> list[bytes]:
    """tiktoken's pre-tokens of ``text`` under ``pattern`` (see the module doc)."""
    tiktoken = pytest.importorskip("tiktoken")
    ours = [m.encode() for m in regex.findall(pattern, text)]
    # Substrings up to twice our longest piece: a piece of tiktoken's that spans a boundary of
    # ours (the likely kind of disagreement) is then in the ranks and shows up whole. Only those
    # that start where one of ours does: a piece of tiktoken's that starts elsewhere is no token
    # then, and comes out in parts, the first of which starts where none of ours does (every
    # substring made the ranks 5-25 times larger, and the corpus slices 4-5 times slower).
    cap = 2 * max(map(len, ours), default=1) + 16
    data = text.encode()
    ranks = {bytes([b]): b for b in range(256)}
    i = 0
    for piece in ours:
        for j in range(i + 2, min(len(data), i + cap) + 1):
            ranks.setdefault(data[i:j], len(ranks))
        i += len(piece)
    enc = tiktoken.Encoding("pieces", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    return [enc.decode_single_token_bytes(t) for t in enc.encode_ordinary(text)]


def ours(text: str, pattern: str) -> list[bytes]:
    return [p.encode() for p in pretokenize(text, [], pattern)]


def test_named_patterns_are_tiktokens_own_strings():
    op = pytest.importorskip("tiktoken_ext.openai_public")
    with mock.patch.object(op, "load_tiktoken_bpe", lambda *a, **k: {}):  # no download: only pat_str
        assert op.cl100k_base()["pat_str"] == CL100K_PATTERN
        assert op.o200k_base()["pat_str"] == O200K_PATTERN
    assert PATTERNS["gpt4"] == PATTERNS["cl100k"] == PATTERNS["cl100k_base"] == CL100K_PATTERN
    assert PATTERNS["o200k"] == PATTERNS["o200k_base"] == O200K_PATTERN
    assert PATTERNS["gpt2"] == GPT2_PATTERN
    assert resolve_pattern(None) == GPT2_PATTERN and resolve_pattern(r"\S+") == r"\S+"
    for p in PATTERNS.values():
        regex.compile(p)


# What tells the three patterns apart: case runs and contractions (o200k keeps "CamelCase" apart
# and attaches "'S"), digit runs (gpt4/o200k cut them in 3s), "/" and newlines after punctuation,
# a space before letters, marks (\p{M}), titlecase and modifier letters, CR/LF runs.
KNOWN = {
    "gpt2": ("Hello WORLD's CamelCase don'T 12345 a/b\r\n\n x",
             [b"Hello", b" WORLD", b"'s", b" CamelCase", b" don", b"'", b"T", b" 12345", b" a", b"/",
              b"b", b"\r\n\n", b" x"]),
    "gpt4": ("Hello WORLD's CamelCase don'T 12345 a/b\r\n\n x",
             [b"Hello", b" WORLD", b"'s", b" CamelCase", b" don", b"'T", b" ", b"123", b"45", b" a", b"/b",
              b"\r\n\n", b" x"]),
    "o200k": ("Hello WORLD's CamelCase don'T 12345 a/b\r\n\n x",
              [b"Hello", b" WORLD's", b" Camel", b"Case", b" don'T", b" ", b"123", b"45", b" a", b"/b",
               b"\r\n\n", b" x"]),
}


@pytest.mark.parametrize("name", NAMED)
def test_known_splits(name):
    text, expected = KNOWN[name]
    assert ours(text, PATTERNS[name]) == expected
    assert tiktoken_pieces(text, PATTERNS[name]) == expected


@pytest.mark.slow
@pytest.mark.parametrize("corpus,size,offset", [("enwiki-100M.txt", 6000, 10_000_000),
                                                ("tinystories-ru-20M.txt", 6000, 1_000_000),
                                                ("zhwiki-20M.txt", 2500, 3_000_000)])
@pytest.mark.parametrize("name", ALL_NAMED)
def test_splits_equal_tiktokens_on_corpus_slices(name, corpus, size, offset):
    text = corpus_slice(corpus, size, offset)
    assert ours(text, PATTERNS[name]) == tiktoken_pieces(text, PATTERNS[name])


# Characters of every class the patterns tell apart; not arbitrary code points, because the two
# regex engines may follow different Unicode versions for characters assigned recently.
_pieces = st.sampled_from([
    "a", "Z", "the", " The", "ABC", "aBc", "'s", "'S", "'ll", "'LL", "'d", "'", "’s", "ǅ", "ʰ", "中文",
    "e\u0301", "\u0301", "1", "12", "1234", "٣", " ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0",
    "\u3000", ".", "!!", "/", "//", " /", "?\n", "🙂", "x", "кот", " Собака", "$", "-", "_",
])


@settings(max_examples=60)
@given(st.lists(_pieces, max_size=25).map("".join))
@pytest.mark.parametrize("name", ALL_NAMED)
def test_splits_equal_tiktokens_on_generated_text(name, text):
    assert ours(text, PATTERNS[name]) == tiktoken_pieces(text, PATTERNS[name])


# -- names in the API and the CLI; the store keeps the regex --------------------------------------

@pytest.fixture
def corpus(tmp_path):
    p = tmp_path / "corpus.txt"
    p.write_text(("Hello WORLD's CamelCase don'T 12345 a/b\r\n\n x " * 30 + EOT) * 20
                 + "Привет, мир! 中文字 1234567", encoding="utf-8")
    return p


def stored_pattern(db) -> str:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT pattern FROM run").fetchone()[0]
    finally:
        con.close()


@pytest.mark.parametrize("name", ["gpt4", "o200k", "cl100k"])
def test_a_name_trains_as_its_regex_and_the_store_keeps_the_regex(tmp_path, corpus, name):
    by_name = train([corpus], tmp_path / "a.db", 400, [EOT], pattern=name, workers=1)
    by_regex = train([corpus], tmp_path / "b.db", 400, [EOT], pattern=PATTERNS[name], workers=1)
    assert stored_pattern(tmp_path / "a.db") == PATTERNS[name]
    assert (by_name.merges, by_name.merge_counts) == (by_regex.merges, by_regex.merge_counts)
    text = corpus.read_bytes().decode("utf-8")  # not read_text: it would turn \r\n into \n
    assert by_name.merges == reference_train_bpe(text, 400, [EOT], pattern=name)[1]
    # a resume (here: to a larger vocabulary) with the regex of a run started by name, and back
    more = train([corpus], tmp_path / "a.db", 420, [EOT], pattern=PATTERNS[name], workers=1)
    assert more.merges[:len(by_name.merges)] == by_name.merges
    train([corpus], tmp_path / "a.db", 420, [EOT], pattern=name, workers=1)
    with pytest.raises(ResumeMismatch, match="pattern"):
        train([corpus], tmp_path / "a.db", 420, [EOT], pattern="gpt2" if name != "gpt2" else "o200k")


@pytest.mark.parametrize("pattern", [None, "gpt2", "r50k_base"])
def test_gpt2_by_name_or_default_is_gpt2_everywhere(tmp_path, corpus, pattern):
    # the stored run and its chunking: GPT-2's plan also cuts between words, not only at specials
    kw = {} if pattern is None else {"pattern": pattern}
    train([corpus], tmp_path / "n.db", 300, [EOT], chunk_size=256, **kw)
    expected = plan_chunks(corpus, corpus.stat().st_size, [EOT], GPT2_PATTERN, 256)
    assert len(expected) > 2 * corpus.read_bytes().count(EOT.encode())
    con = sqlite3.connect(tmp_path / "n.db")
    try:
        assert con.execute('SELECT start, "end" FROM chunks ORDER BY id').fetchall() == expected
    finally:
        con.close()
    assert stored_pattern(tmp_path / "n.db") == GPT2_PATTERN


def test_cli_pattern_names(tmp_path, corpus):
    db = tmp_path / "cli.db"
    r = run("train", corpus, "--db", db, "--vocab-size", 300, "--special", EOT, "--pattern", "o200k",
            "--progress", "none")
    assert r.exit_code == 0, r.stderr
    assert stored_pattern(db) == O200K_PATTERN
    r = run("train", corpus, "--db", db, "--vocab-size", 300, "--special", EOT, "--pattern", O200K_PATTERN,
            "--progress", "none")
    assert r.exit_code == 0, r.stderr  # the same run: nothing to do
    r = run("train", corpus, "--db", db, "--vocab-size", 300, "--special", EOT, "--pattern", "gpt4",
            "--progress", "none")
    assert r.exit_code == 3 and "pattern" in r.stderr
    assert "o200k" in run("train", "--help").stdout


# -- a pattern that matches nothing ---------------------------------------------------------------

def _counted(db):
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT phase, (SELECT count(*) FROM words), (SELECT count(*) FROM chunks"
                           " WHERE counted = 0), (SELECT count(*) FROM checkpoints) FROM run").fetchone()
    finally:
        con.close()


def test_a_pattern_that_leaves_text_out_is_refused_where_the_text_is_first_seen(tmp_path, corpus, capsys):
    """A pattern whose pre-tokens do not cover the text (``\\p{Han}+`` on English, ``\\w+`` and its
    spaces) lost that text silently: training never counted it (a pattern matching none of it
    trained 0 merges), and encode wrote no id for it (``from_tiktoken(p, r"\\w+").encode("a b")``
    gave the ids of "ab"). Now it is refused where the text is first read, exit 2, and a first run
    leaves no store."""
    from cli_helpers import run_main

    from bpe_store import export_store

    db = tmp_path / "han.db"
    for pattern in (r"\p{Han}{5}", r"\p{Han}+", r"\w+"):
        with pytest.raises(PatternError, match=r"leaves '.' \(U\+[0-9A-F]{4}, character \d+ of a \d+-character text\) "
                                                "outside every pre-token"):
            train([corpus], db, 400, [EOT], pattern=pattern)
        assert not db.exists()
    code, err = run_main(["train", corpus, "--db", db, "--vocab-size", 300, "--pattern", r"\w+", "--progress",
                          "none"], capsys)
    assert code == 2 and "outside every pre-token" in err and not db.exists(), err
    # encode: a tokenizer's own pattern, a ranks file's, and the command
    bytes_only = Tokenizer({i: bytes([i]) for i in range(256)}, [], pattern=r"\w+")
    with pytest.raises(PatternError, match="outside every pre-token"):
        bytes_only.encode("a b")
    assert Tokenizer({i: bytes([i]) for i in range(256)}, [], pattern=r"\w+|\s+").encode("a b") == [97, 32, 98]
    train([corpus], tmp_path / "ok.db", 300, [EOT])
    export_store(tmp_path / "ok.db", "tiktoken", tmp_path / "tt")
    ranks = next((tmp_path / "tt").glob("*.tiktoken"))
    with pytest.raises(PatternError, match="outside every pre-token"):
        Tokenizer.from_tiktoken(ranks, r"\w+").encode("hello world")
    out = tmp_path / "ids.npy"
    code, err = run_main(["encode", "--tokenizer", ranks, "--pattern", r"\w+", corpus, "-o", out], capsys)
    assert code == 2 and "outside every pre-token" in err and not out.exists(), err


def test_a_corpus_of_special_tokens_only_is_nothing_to_train_on(tmp_path):
    """A covering pattern matches all text there is: only a corpus with no text outside its
    special tokens counts no pre-token, an error (not 0 merges), and the store stays as counting
    left it, so the same command fails the same way at once."""
    corpus = tmp_path / "specials.txt"
    corpus.write_text(EOT * 50)
    db = tmp_path / "none.db"
    with pytest.raises(InputError, match="nothing to train on: the pattern gpt2 matches none"):
        train([corpus], db, 400, [EOT])
    state = _counted(db)
    assert state[:3] == ("counting", 0, 0)
    with pytest.raises(InputError, match="nothing to train on"):
        train([corpus], db, 400, [EOT])
    assert _counted(db) == state
    with pytest.raises(ResumeMismatch):
        train([corpus], db, 400, [EOT], pattern=r"\S+|\s+")


def test_a_word_that_is_no_name_is_refused(tmp_path, corpus):
    # "gpt-2" is no name, and as a regex it would match only its literal text: refused at once,
    # with the closest name, and no store is made
    r = run("train", corpus, "--db", tmp_path / "x.db", "--vocab-size", 300, "--pattern", "gpt-2",
            "--progress", "none")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: 'gpt-2' is not a known pattern name (did you mean gpt2?); a regex "
                                "that is only a word can be written (?:gpt-2)")
    assert not (tmp_path / "x.db").exists()
    with pytest.raises(PatternError, match=r"'o200k-base' is not a known pattern name \(did you mean o200k_base\?\)"):
        resolve_pattern("o200k-base")
    with pytest.raises(PatternError, match="known names: gpt2, r50k_base, gpt4"):
        resolve_pattern("zzz")
    assert issubclass(PatternError, InputError) and issubclass(PatternError, ValueError)
    # a word written as a regex is one, and a pattern with regex syntax is never taken as a name
    assert resolve_pattern("(?:gpt5)") == "(?:gpt5)" and resolve_pattern(r"\w+") == r"\w+"


def test_a_pattern_that_does_not_compile_is_refused(tmp_path, corpus):
    r = run("train", corpus, "--db", tmp_path / "x.db", "--vocab-size", 300, "--pattern", "([",
            "--progress", "none")
    assert r.exit_code == 2 and "does not compile: unterminated character set" in r.stderr
    with pytest.raises(PatternError, match=r"the pattern '\(\[' does not compile: unterminated character set"):
        Tokenizer({i: bytes([i]) for i in range(256)}, [], pattern="([")


def test_from_tiktoken_refuses_a_bad_pattern(tmp_path):
    import base64

    ranks = tmp_path / "r.tiktoken"
    ranks.write_bytes(b"".join(base64.b64encode(bytes([i])) + b" %d\n" % i for i in range(256)))
    with pytest.raises(PatternError, match=r"did you mean gpt2\?"):
        Tokenizer.from_tiktoken(ranks, "gpt-2")
    with pytest.raises(PatternError, match="does not compile: unterminated character set"):
        Tokenizer.from_tiktoken(ranks, "([")
    assert Tokenizer.from_tiktoken(ranks, "gpt2").encode("hello") == list(b"hello")


def test_only_special_tokens_is_an_error(tmp_path):
    p = tmp_path / "specials.txt"
    p.write_text(EOT * 3)
    with pytest.raises(InputError, match="nothing to train on"):
        train([p], tmp_path / "s.db", 300, [EOT])


def test_empty_matches_are_not_words(tmp_path):
    assert count_words("ab, cd", [], r"\w*") == count_words("ab, cd", [], r"\w+")
    p = tmp_path / "c.txt"
    p.write_text("ab ab, cd!")
    # patterns that cover the text (training refuses others), one with empty matches at the end
    assert (train([p], tmp_path / "a.db", 300, [], pattern=r"\W+|\w*").merges
            == train([p], tmp_path / "b.db", 300, [], pattern=r"\W+|\w+").merges)


# -- the tokenizer of a store trained with a named pattern ----------------------------------------

@pytest.fixture(scope="module")
def o200k_tokenizer(tmp_path_factory) -> Tokenizer:
    d = tmp_path_factory.mktemp("o200k")
    src = d / "train.txt"
    src.write_bytes(((".\n/a CamelCase don'T 12345 foo/bar!\n/x\n\n" * 40 + EOT) * 4
                     + fixture_text(EN, 30_000)).encode())
    train([src], d / "o.db", 700, [EOT], pattern="o200k", workers=1)
    return Tokenizer.from_store(d / "o.db")


def test_the_tokenizer_takes_pattern_names(o200k_tokenizer):
    tok = o200k_tokenizer
    assert tok.pattern == O200K_PATTERN
    by_name = Tokenizer(tok.vocab, tok.merges, [EOT], pattern="o200k")
    assert by_name.pattern == O200K_PATTERN
    text = "Hello WORLD's a.\n/b"
    assert by_name.encode(text) == tok.encode(text)


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_pieces | st.sampled_from([".\n/", "!\n/x", "\n/", EOT]), max_size=30),
       block=st.integers(1, 24))
def test_o200k_streaming_equals_whole(o200k_tokenizer, parts, block):
    # o200k joins "/" to a punctuation run and its newlines (".\n/" is one pre-token): a stream
    # may not be cut between that newline and the slash
    import bpe_store.tokenizer.tokenizer as mod

    old = mod._STREAM_BLOCK
    mod._STREAM_BLOCK = block
    try:
        assert list(o200k_tokenizer.encode_iterable(parts)) == o200k_tokenizer.encode("".join(parts))
    finally:
        mod._STREAM_BLOCK = old
