"""CS336 assignment 1: train_bpe on the reference fixtures gives the reference merges and vocab."""

from __future__ import annotations

from conftest import CS336, shared_file

from bpe_store import train_bpe
from bpe_store.formats.gpt2_files import read_gpt2


def test_train_bpe_matches_reference_merges_and_vocab():
    corpus = shared_file("cs336", "corpus.en")
    vocab, merges = train_bpe(corpus, 500, ["<|endoftext|>"])
    reference_vocab, reference_merges = read_gpt2(CS336 / "train-bpe-reference-vocab.json",
                                                  CS336 / "train-bpe-reference-merges.txt")
    assert merges == reference_merges
    assert set(vocab.keys()) == set(reference_vocab.keys())
    assert set(vocab.values()) == set(reference_vocab.values())


def test_train_bpe_vocab_order_specials_bytes_merges(tmp_path):
    corpus = shared_file("cs336", "corpus.en")
    vocab, merges = train_bpe(corpus, 300, ["<|endoftext|>", "<|pad|>"], db=tmp_path / "s.db")
    assert vocab[0] == b"<|endoftext|>" and vocab[1] == b"<|pad|>"
    assert [vocab[2 + b] for b in range(256)] == [bytes([b]) for b in range(256)]
    assert [vocab[258 + i] for i in range(len(merges))] == [left + right for left, right in merges]
    assert len(vocab) == 300


def test_special_tokens_never_merged(tmp_path):
    vocab, merges = train_bpe(shared_file("cs336", "corpus.en"), 1000, ["<|endoftext|>"])
    for left, right in merges:
        assert b"<|endoftext|>" not in left + right
