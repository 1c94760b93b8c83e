"""The library API refuses a wrong-typed or lone-surrogate argument as the CLI refuses a bad
option: one clear message, as ``ArgumentTypeError`` (an ``InputError`` and a ``TypeError``) or
``ArgumentValueError`` (an ``InputError`` and a ``ValueError``), never a bare error from deep inside
(``expected str, bytes or os.PathLike object``, ``surrogates not allowed``, ``'int' object is not
iterable``, ``encode_list(): incompatible function arguments``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bpe_store import InputError, Tokenizer, train, train_bpe, train_from_iterator
from bpe_store.errors import ArgumentTypeError, ArgumentValueError
from bpe_store.tokenizer.tokenizer import TokenIdError

VOCAB = {i: bytes([i]) for i in range(256)} | {256: b"ab"}


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(VOCAB, [(b"a", b"b")], ["<|endoftext|>"])


def cases(corpus: Path, db: Path, tok: Tokenizer) -> dict:
    """``{case: (call, error class, what the message says)}``"""
    return {
        "train_bpe(input_path=123)": (lambda: train_bpe(123, 300, []), ArgumentTypeError,
                                      "input_path must be a path (str or os.PathLike), not int 123"),
        "train(inputs=[None])": (lambda: train([None], db, 300), ArgumentTypeError, "each input must be a path"),
        "train(db=123)": (lambda: train([corpus], 123, 300), ArgumentTypeError, "db must be a path"),
        "train(text_field=1)": (lambda: train([corpus], db, 300, text_field=1), ArgumentTypeError,
                                "text_field must be a str"),
        "special token with a lone surrogate": (lambda: train_bpe(corpus, 300, ["\ud800"]), ArgumentValueError,
                                                "lone surrogate (U+D800 at index 0)"),
        "pattern with a lone surrogate": (lambda: train([corpus], db, 300, pattern="a\udcff"), ArgumentValueError,
                                          "pattern holds a lone surrogate"),
        "train_from_iterator(123)": (lambda: train_from_iterator(123, db, 300), ArgumentTypeError,
                                     "takes an iterable of documents, not int"),
        "encode(b'bytes')": (lambda: tok.encode(b"bytes"), ArgumentTypeError, "encode takes a str, not bytes"),
        "encode(123)": (lambda: tok.encode(123), ArgumentTypeError, "the text must be a str, not int"),
        "encode(None)": (lambda: tok.encode(None), ArgumentTypeError, "the text must be a str, not NoneType"),
        "encode('\\ud800')": (lambda: tok.encode("ab\ud800"), ArgumentValueError,
                              "the text holds a lone surrogate (U+D800 at index 2)"),
        "encode_batch with a number": (lambda: tok.encode_batch(["a", 7]), ArgumentTypeError,
                                       "text 1 of the batch must be a str, not int"),
        "encode_iterable(123)": (lambda: list(tok.encode_iterable(123)), ArgumentTypeError,
                                 "encode_iterable takes an iterable of str"),
        "encode_iterable of bytes": (lambda: list(tok.encode_iterable([b"x"])), ArgumentTypeError,
                                     "not 'rb'"),
        "from_store(123)": (lambda: Tokenizer.from_store(123), ArgumentTypeError, "db_path must be a path"),
        "from_store(vocab_size='300')": (lambda: Tokenizer.from_store(db, vocab_size="300"), ArgumentTypeError,
                                         "vocab_size must be an integer or None, not str"),
        "from_files(123, 456)": (lambda: Tokenizer.from_files(123, 456), ArgumentTypeError,
                                 "vocab_filepath must be a path"),
        "from_tiktoken(123)": (lambda: Tokenizer.from_tiktoken(123, pattern="gpt2"), ArgumentTypeError,
                               "path must be a path"),
        "Tokenizer(1, 2)": (lambda: Tokenizer(1, 2), ArgumentTypeError, "vocab must be a dict"),
        "Tokenizer with str merges": (lambda: Tokenizer(VOCAB, [("a", "b")]), ArgumentTypeError,
                                      "merge 0 must be a pair of bytes"),
        "Tokenizer with a str token": (lambda: Tokenizer({**VOCAB, 257: "x"}, []), ArgumentTypeError,
                                       "vocab must map int ids to bytes"),
        "Tokenizer with a lone surrogate special": (lambda: Tokenizer(VOCAB, [], ["\ud800"]), ArgumentValueError,
                                                    "lone surrogate"),
        "Tokenizer with a number special": (lambda: Tokenizer(VOCAB, [], [1]), ArgumentTypeError,
                                            "must be a str, not int"),
        "Tokenizer with an empty special": (lambda: Tokenizer(VOCAB, [], [""]), ArgumentValueError,
                                            "special tokens must be non-empty strings; one is ''"),
    }


def test_each_wrong_argument_is_a_clear_type_or_value_error(tmp_path, corpus, tok):
    db = tmp_path / "run.db"
    train([corpus], db, 300, ["<|endoftext|>"])
    found = cases(corpus, tmp_path / "other.db", tok)
    assert len(found) >= 9
    for name, (call, kind, what) in found.items():
        with pytest.raises(kind) as info:
            call()
        assert isinstance(info.value, InputError), name
        assert isinstance(info.value, TypeError if kind is ArgumentTypeError else ValueError), name
        assert what in str(info.value), (name, str(info.value))
        assert "\n" not in str(info.value)
    assert not (tmp_path / "other.db").exists()  # refused before anything was created


def test_a_bool_is_not_a_token_id(tok):
    # True hashes and compares as 1: vocab[True] is token 1, so decode([True]) gave '\x01'
    for ids in ([True], [97, False], np.array([True, False]), iter([97, True])):
        with pytest.raises(TokenIdError, match=r"token id (True|False) is a bool, not an integer id"):
            tok.decode(ids)
    assert tok.decode([97, 256]) == "aab" and tok.decode(np.array([97, 98])) == "ab"


def test_valid_arguments_still_work(tok):
    assert tok.encode("ab") == [256]
    assert list(tok.encode_to_array(b"ab")) == [256]  # UTF-8 bytes are this one's input
    assert list(tok.encode_iterable(iter(["a", "b"]))) == [256]
    assert tok.encode_batch(["ab", "a"]) == [[256], [97]]


def test_a_special_token_with_a_surrogate_escape_on_the_command_line_is_exit_2(tmp_path, corpus):
    from cli_helpers import run

    # a byte that is not UTF-8 in argv reaches Python as a lone surrogate (surrogateescape)
    r = run("train", corpus, "--db", tmp_path / "run.db", "--vocab-size", 300, "--special", "\udcff")
    assert r.exit_code == 2 and "lone surrogate (U+DCFF" in r.stderr, r.output
    assert not (tmp_path / "run.db").exists()
