"""The Tokenizer does what tiktoken does where code written for tiktoken relies on it: the special
token guard (allowed_special / disallowed_special, CS336's default kept), encode_ordinary, bytes that
are not UTF-8, decode's errors=, n_vocab beside vocab_size, and an unknown id's KeyError."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from bpe_store import Tokenizer
from bpe_store.formats.openai_ranks import ENCODINGS, find_ranks_file
from bpe_store.tokenizer.special_guard import DisallowedSpecialError
from bpe_store.tokenizer.tokenizer import TokenIdError

tiktoken = pytest.importorskip("tiktoken")

SPECIALS = ENCODINGS["cl100k_base"].special_tokens
TEXT = "<|endoftext|> hello <|fim_prefix|> there <|fim_middle|>, <|endofprompt|>"


@pytest.fixture(scope="module")
def pair():
    """(ours, tiktoken's) for cl100k_base, from the same ranks."""
    tok = Tokenizer.from_tiktoken(find_ranks_file("cl100k_base"), pattern="cl100k", special_tokens=SPECIALS)
    enc = tiktoken.Encoding("cl100k_base", pat_str=tok.pattern, mergeable_ranks=tok._whole, special_tokens=SPECIALS)
    return tok, enc


@pytest.mark.parametrize("allowed,disallowed", [
    ("all", ()), (set(), ()), ({"<|fim_prefix|>"}, ()), ({"<|endoftext|>", "<|fim_middle|>"}, ()),
    ("all", "all"), ({"<|endoftext|>"}, {"<|nothing|>"}),
])
def test_the_guard_gives_tiktokens_ids(pair, allowed, disallowed):
    tok, enc = pair
    want = enc.encode(TEXT, allowed_special=allowed, disallowed_special=disallowed)
    assert tok.encode(TEXT, allowed_special=allowed, disallowed_special=disallowed) == want
    assert tok.encode_batch([TEXT, "x"], allowed_special=allowed, disallowed_special=disallowed) == [
        want, enc.encode("x")]
    arr = tok.encode_to_array(TEXT, allowed_special=allowed, disallowed_special=disallowed)
    assert arr.dtype == np.uint32 and arr.tolist() == want


@pytest.mark.parametrize("allowed,disallowed", [
    (set(), "all"), ({"<|fim_prefix|>"}, "all"), (set(), {"<|endoftext|>"}),
])
def test_disallowed_text_raises_a_value_error_as_tiktoken(pair, allowed, disallowed):
    tok, enc = pair
    with pytest.raises(ValueError):
        enc.encode(TEXT, allowed_special=allowed, disallowed_special=disallowed)
    for call in (lambda: tok.encode(TEXT, allowed_special=allowed, disallowed_special=disallowed),
                 lambda: tok.encode_batch(["ok", TEXT], allowed_special=allowed, disallowed_special=disallowed),
                 lambda: tok.encode_to_array(TEXT, allowed_special=allowed, disallowed_special=disallowed)):
        with pytest.raises(DisallowedSpecialError, match=re.escape("the text holds '<|endoftext|>', a special token")):
            call()


def test_cs336_default_is_kept(pair):
    tok, enc = pair
    assert tok.encode(TEXT) == enc.encode(TEXT, allowed_special="all")
    assert tok.encode_ordinary(TEXT) == enc.encode_ordinary(TEXT) == tok.encode(TEXT, allowed_special=set(),
                                                                                 disallowed_special=())


def test_the_guard_on_a_trained_tokenizer():
    vocab = {i: bytes([i]) for i in range(256)}
    tok = Tokenizer(vocab, [], ["<|eot|>"])
    assert tok.encode("a<|eot|>") == [97, 256]
    assert tok.encode("a<|eot|>", allowed_special=set(), disallowed_special=()) == list(b"a<|eot|>")
    with pytest.raises(DisallowedSpecialError):
        tok.encode("a<|eot|>", allowed_special=set(), disallowed_special="all")
    with pytest.raises(TypeError, match="allowed_special must be 'all' or a set"):
        tok.encode("a", allowed_special="<|eot|>")


def test_bytes_that_are_not_utf8_encode_as_tiktoken(pair):
    tok, enc = pair
    assert tok.encode_bytes(b" \xec\x8b\xa4\xed") == enc._encode_bytes(b" \xec\x8b\xa4\xed") == [62085]
    rng = random.Random(7)
    alphabet = b" \n\tab\x80\xbf\xc3\xa9\xe4\xb8\xad\xec\x8b\xa4\xed\xf0\x9f\x98\x80\xff<|>"
    for _ in range(3000):
        data = bytes(rng.choice(alphabet) for _ in range(rng.randrange(0, 14)))
        assert tok.encode_bytes(data) == enc._encode_bytes(data), data
        assert tok.decode_bytes(tok.encode_bytes(data)) == data


def test_decode_errors_n_vocab_and_unknown_ids(pair):
    tok, enc = pair
    ids = tok.encode_bytes(b"ab\xffcd")
    for errors in ("replace", "ignore", "strict", "surrogateescape"):
        try:
            want = enc.decode(ids, errors=errors)
        except UnicodeDecodeError:
            with pytest.raises(UnicodeDecodeError):
                tok.decode(ids, errors=errors)
            continue
        assert tok.decode(ids, errors=errors) == want
    assert tok.n_vocab == enc.n_vocab == 100_277 and tok.vocab_size == 100_261
    with pytest.raises(KeyError):
        enc.decode([100_270])
    with pytest.raises(KeyError, match="token id 100270 is not in the vocabulary"):
        tok.decode([100_270])
    with pytest.raises(TokenIdError):
        tok.decode([100_270])


def test_documents_in_arrays_out(pair):
    """encode_documents: flat ids and offsets, each document as encode gives it, natively or not."""
    tok, _ = pair
    docs = ["hello world<|endoftext|>", "", "你好, мир", "x" * 5000, " \n\n "]
    for native in (True, False):
        t = tok if native else Tokenizer._from_ranks(tok._ranks, "cl100k", SPECIALS, native=False)
        for kw in ({}, {"allowed_special": set(), "disallowed_special": ()}):
            ids, offsets = t.encode_documents(docs, **kw)
            assert ids.dtype == np.uint32 and offsets.dtype == np.uint64 and len(offsets) == len(docs) + 1
            assert [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(docs))] == [
                tok.encode(d, **kw) for d in docs]
    ids, offsets = tok.encode_documents([])
    assert ids.tolist() == [] and offsets.tolist() == [0]
    with pytest.raises(DisallowedSpecialError):
        tok.encode_documents(docs, allowed_special=set(), disallowed_special="all")
