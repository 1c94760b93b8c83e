"""The CS336 tokenizer tests, offline: GPT-2's fixtures through bpe_store's Tokenizer and through a
``tiktoken.Encoding`` built from the same fixtures (no download), ids compared."""

from __future__ import annotations

import io

import pytest
import tiktoken
from conftest import CS336, shared_file

from bpe_store.errors import InputError
from bpe_store.formats.gpt2_files import read_gpt2
from bpe_store.text.pretokenize import GPT2_PATTERN
from bpe_store.tokenizer.tokenizer import TokenIdError, Tokenizer, encode_files

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def gpt2() -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    shared_file("cs336", "gpt2_vocab.json")
    return read_gpt2(CS336 / "gpt2_vocab.json", CS336 / "gpt2_merges.txt")


@pytest.fixture(scope="module")
def reference(gpt2) -> tiktoken.Encoding:
    """GPT-2 as tiktoken defines it, built from the fixtures: ranks are the vocab ids."""
    vocab, _ = gpt2
    ranks = {b: i for i, b in vocab.items() if b != EOT.encode()}
    return tiktoken.Encoding("gpt2-offline", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={EOT: 50256})


@pytest.fixture(scope="module", params=["python", "native"])
def make(gpt2, request):
    vocab, merges = gpt2
    native = request.param == "native"
    if native:
        from bpe_store.native import BUILT

        if not BUILT:
            pytest.skip("native encoder not built")

    def _make(specials: list[str] | None = None) -> Tokenizer:
        return Tokenizer(vocab, merges, specials, native=native)

    return _make


def check(tok: Tokenizer, ref: tiktoken.Encoding, text: str) -> list[int]:
    ids = tok.encode(text)
    assert ids == ref.encode(text, allowed_special="all")
    assert tok.decode(ids) == text
    return ids


@pytest.mark.parametrize("text", ["", "s", "🙃", "Hello, how are you?", "Héllò hôw are ü? 🙃",
                                  "  leading and trailing spaces  ", "tabs\tand\r\nCRLF\r\n\n\n",
                                  "numbers 1234567 and 3.14159", "it's don't they'll we've I'd"])
def test_matches_tiktoken(make, reference, text):
    check(make(), reference, text)


def test_single_character_and_emoji(make, reference):
    tok = make()
    assert check(tok, reference, "s") == [82]
    assert len(check(tok, reference, "🙃")) == 3


def test_unicode_with_specials(make, reference):
    tok = make([EOT])
    text = "Héllò hôw <|endoftext|><|endoftext|> are ü? 🙃<|endoftext|>"
    ids = check(tok, reference, text)
    assert ids.count(50256) == 3


def test_overlapping_specials_longest_wins(make):
    tok = make([EOT, EOT + EOT])
    text = "Hello, how <|endoftext|><|endoftext|> are you?<|endoftext|>"
    ids = tok.encode(text)
    pieces = [tok.decode([i]) for i in ids]
    assert pieces.count(EOT + EOT) == 1
    assert pieces.count(EOT) == 1
    assert tok.decode(ids) == text


@pytest.mark.parametrize("name", ["special_token_trailing_newlines.txt",
                                  "special_token_double_newlines_non_whitespace.txt"])
def test_newlines_around_specials(make, reference, name):
    text = shared_file("cs336", name).read_text(encoding="utf-8")
    check(make([EOT]), reference, text)


@pytest.mark.parametrize("name", ["address.txt", "german.txt", "tinystories_sample.txt", "corpus.en"])
def test_fixture_files(make, reference, name):
    with open(shared_file("cs336", name), encoding="utf-8", newline="") as f:
        text = f.read()
    tok = make([EOT])
    ids = check(tok, reference, text)
    with open(shared_file("cs336", name), encoding="utf-8", newline="") as f:
        assert list(tok.encode_iterable(f)) == ids


def test_encode_iterable_small_blocks(make, reference, monkeypatch):
    """Cutting the stream into small blocks changes nothing (exercise many cut points)."""
    import bpe_store.tokenizer.tokenizer as mod

    monkeypatch.setattr(mod, "_STREAM_BLOCK", 7)
    text = (shared_file("cs336", "tinystories_sample.txt").read_text(encoding="utf-8")
            + "\n\n  x \n\n" + EOT + "\n\nend  \n")
    tok = make([EOT])
    lines = io.StringIO(text, newline="")
    assert list(tok.encode_iterable(lines)) == reference.encode(text, allowed_special="all")
    assert list(tok.encode_iterable(iter(text))) == tok.encode(text)


def test_decode_invalid_utf8_and_bad_ids(make):
    tok = make()
    assert tok.decode([tok.encode("🙃")[0]]) == "\ufffd"
    with pytest.raises(TokenIdError, match="not in the vocabulary"):
        tok.decode([0, 10**6])


def test_encode_batch_equals_encode(make):
    tok = make()
    docs = ["Hello world", "", "  two  spaces\n\n", "Ünïcödé 🙃 text"] * 5
    assert tok.encode_batch(docs) == [tok.encode(d) for d in docs]


def test_duplicate_bytes_use_first_id():
    """A vocabulary holding the same bytes twice: ranks by merge order, the first id is used."""
    vocab = {i: bytes([i]) for i in range(256)}
    a, b, c = b"a", b"b", b"c"
    vocab.update({256: b"ab", 257: b"bc", 258: b"abc", 259: b"abc"})
    merges = [(a, b), (b, c), (b"ab", c), (a, b"bc")]
    for native in (False, True):
        tok = Tokenizer(vocab, merges, native=native)
        assert tok.encode("abc") == [258]
        assert tok.encode("bca") == [257, ord("a")]


def test_sparse_huge_id_needs_no_huge_table():
    """A vocabulary with one id near 2**32 (a gap, as a hand-made vocab.json may have): the
    native encoder used to build one Python int per id up to the largest, gigabytes; under a
    1 GB address-space limit it must build and encode at once."""
    import subprocess
    import sys

    code = (
        "import resource; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from bpe_store.tokenizer.tokenizer import Tokenizer\n"
        "vocab = {i: bytes([i]) for i in range(256)}; vocab[4_000_000_000] = b'ab'\n"
        "tok = Tokenizer(vocab, [(b'a', b'b')], ['<|x|>'])\n"
        "assert tok._core is not None\n"
        "assert tok.encode('abab<|x|>c') == [4_000_000_000, 4_000_000_000, 4_000_000_001, 99]\n"
        "assert tok.encode_batch(['ab', 'b']) == [[4_000_000_000], [98]]\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]


def test_special_id_is_the_one_lookup_of_a_separator(make, tmp_path):
    # encode_to_file (one output) and encode_files (the blocks) both name a separator through it
    tok = make([EOT, "<|pad|>"])
    assert tok.special_id("<|pad|>") == tok.encode("<|pad|>")[0] and tok.special_id(EOT) == 50256
    with pytest.raises(InputError, match=r"^separator '<x>' is not one of the store's special tokens "
                                         r"\(<\|endoftext\|>, <\|pad\|>\)$"):
        tok.special_id("<x>")
    with pytest.raises(InputError, match=r"\(none\)$"):
        make([]).special_id(EOT)
    f = tmp_path / "a.txt"
    f.write_text("text")
    with pytest.raises(InputError, match="^separator '<x>' is not one of"):
        encode_files(tok, [f], lambda ids: None, separator="<x>")


def test_every_tokenizer_keeps_one_pretoken_spec(gpt2, trained_store):
    """However it is made (vocab and merges, OpenAI's ranks, a store's merge log, a pickle), a
    tokenizer keeps its special tokens and pattern as one frozen ``PretokenSpec``; ``pattern`` and
    ``special_tokens`` read it, and the list handed out cannot change the tokenizer."""
    import pickle

    from bpe_store.formats.openai_ranks import find_ranks_file
    from bpe_store.text.pretokenize import CL100K_PATTERN, PretokenSpec

    vocab, merges = gpt2
    made = {
        "vocab": (Tokenizer(vocab, merges, [EOT, "<|x|>", EOT], pattern="gpt2"), (EOT, "<|x|>"), GPT2_PATTERN),
        "ranks": (Tokenizer.from_tiktoken(find_ranks_file("cl100k_base"), pattern="gpt4",
                                          special_tokens={EOT: 100257}), (EOT,), CL100K_PATTERN),
        "store": (Tokenizer.from_store(trained_store), (EOT,), GPT2_PATTERN),
    }
    for name, (tok, specials, pattern) in made.items():
        for t in (tok, pickle.loads(pickle.dumps(tok))):
            assert t.pretoken_spec == PretokenSpec(specials, pattern), name
            assert (t.special_tokens, t.pattern) == (list(specials), pattern), name
            t.special_tokens.append("<|y|>")
            assert t.special_tokens == list(specials) and t.encode("<|y|>") == t.encode_ordinary("<|y|>"), name
