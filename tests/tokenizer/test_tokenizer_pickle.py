"""A Tokenizer pickles and deep-copies with its native state (it is rebuilt, native encoder and
splitter included), so multiprocessing's spawn pools, DataLoader workers and ``datasets.map``
take it; before, pickling failed with "cannot pickle 'Splitter' object"."""

from __future__ import annotations

import copy
import multiprocessing
import pickle

import pytest

from bpe_store import Tokenizer
from bpe_store.formats.openai_ranks import find_ranks_file

TEXT = "Hello, world<|endoftext|> naïve 你好 12345  \n\n  end"


def _trained() -> Tokenizer:
    vocab = {i: bytes([i]) for i in range(256)} | {256: b"ll", 257: b" w"}
    return Tokenizer(vocab, [(b"l", b"l"), (b" ", b"w")], ["<|endoftext|>"])


def _openai() -> Tokenizer:
    return Tokenizer.from_tiktoken(find_ranks_file("cl100k_base"), pattern="cl100k",
                                   special_tokens={"<|endoftext|>": 100257})


@pytest.mark.parametrize("make", [_trained, _openai], ids=["trained", "cl100k"])
def test_pickle_and_deepcopy_keep_every_id(make):
    tok = make()
    for twin in (pickle.loads(pickle.dumps(tok)), copy.deepcopy(tok)):
        assert twin._core is not None and twin._core is not tok._core  # its own native encoder
        assert twin.encode(TEXT) == tok.encode(TEXT)
        assert twin.encode_batch([TEXT, "x"]) == tok.encode_batch([TEXT, "x"])
        assert list(twin.encode_iterable([TEXT] * 3)) == list(tok.encode_iterable([TEXT] * 3))
        assert twin.vocab == tok.vocab and twin.merges == tok.merges and twin.special_tokens == tok.special_tokens


def _encode_in_child(args):
    tok, text = args
    return tok.encode(text)


def test_a_spawn_pool_encodes_with_it():
    """Spawned workers start a fresh interpreter: the tokenizer crosses as a pickle."""
    tok = _openai()
    texts = [TEXT, "print('hi')\n", "Привет, мир"]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        got = pool.map(_encode_in_child, [(tok, t) for t in texts])
    assert got == [tok.encode(t) for t in texts]


def test_datasets_map_with_two_processes():
    datasets = pytest.importorskip("datasets")
    tok = _openai()
    ds = datasets.Dataset.from_dict({"text": [TEXT, "a b c", "Привет"] * 4})
    out = ds.map(lambda row: {"ids": tok.encode(row["text"])}, num_proc=2)
    assert out["ids"] == [tok.encode(t) for t in ds["text"]]
