"""bpe_store.tiktoken_compat beside the real tiktoken: the same answers from the same ranks, and
tiktoken's possessive spelling of GPT-2's pattern splits as GPT-2's (so it runs natively)."""

from __future__ import annotations

import pickle
import random

import pytest
import regex

import bpe_store.tiktoken_compat as compat
from bpe_store.errors import InputError
from bpe_store.text.pretokenize import GPT2_PATTERN

tiktoken = pytest.importorskip("tiktoken")

TEXTS = ["hello world", "Hello, world<|endoftext|> naïve 你好 12345  \n\n  end", "  \t\n ", "x" * 3000,
         "The 2024 café's 'quotes' — ok?\r\n", "Привет, мир!", "<|fim_prefix|>def f():\n    return 1<|fim_suffix|>"]


def _random_text(rng: random.Random) -> str:
    pool = "ab Z9'\n\r\t  .,!é中文\u3000\u00a0sdmtllvere"
    return "".join(rng.choice(pool) for _ in range(rng.randrange(0, 30)))


def test_tiktokens_gpt2_spelling_splits_as_gpt2():
    from tiktoken_ext.openai_public import r50k_pat_str

    assert r50k_pat_str == compat.R50K_PAT_STR
    ours, theirs = regex.compile(GPT2_PATTERN), regex.compile(r50k_pat_str)
    rng = random.Random(3)
    for _ in range(20_000):
        t = _random_text(rng)
        assert ours.findall(t) == theirs.findall(t), t


@pytest.mark.parametrize("name", ["cl100k_base", "o200k_base", "o200k_harmony"])
def test_same_answers_as_tiktoken(name):
    ours = compat.get_encoding(name)
    theirs = tiktoken.Encoding(name, pat_str=ours._pat_str, mergeable_ranks=ours._mergeable_ranks,
                               special_tokens=ours._special_tokens)
    assert (ours.n_vocab, ours.max_token_value, ours.eot_token) == (theirs.n_vocab, theirs.max_token_value,
                                                                     theirs.eot_token)
    for t in TEXTS:
        for kw in ({}, {"allowed_special": "all"}, {"disallowed_special": ()}):
            try:
                want = theirs.encode(t, **kw)
            except ValueError:
                with pytest.raises(ValueError):
                    ours.encode(t, **kw)
                continue
            assert ours.encode(t, **kw) == want
        assert ours.encode_ordinary(t) == theirs.encode_ordinary(t)
        assert ours.encode_to_numpy(t, disallowed_special=()).tolist() == theirs.encode_to_numpy(
            t, disallowed_special=()).tolist()
        ids = theirs.encode_ordinary(t)
        assert ours.decode_with_offsets(ids) == theirs.decode_with_offsets(ids)
        assert ours.decode_tokens_bytes(ids) == theirs.decode_tokens_bytes(ids)
    assert ours.encode_batch(TEXTS, allowed_special="all") == theirs.encode_batch(TEXTS, allowed_special="all")
    assert ours.decode_batch([[1, 2], [3]]) == theirs.decode_batch([[1, 2], [3]])
    assert ours.encode_single_token("<|endoftext|>") == theirs.encode_single_token("<|endoftext|>")
    assert ours.token_byte_values() == theirs.token_byte_values()


def test_an_encoding_built_from_ranks_in_memory_pickles():
    base = compat.get_encoding("cl100k_base")
    assert pickle.loads(pickle.dumps(base)) is base  # by name, as tiktoken pickles its own
    enc = compat.Encoding("custom", pat_str=compat.R50K_PAT_STR, mergeable_ranks=base._mergeable_ranks,
                          special_tokens={"<|pickle|>": 200_000})
    assert enc._tok._core.native_split  # tiktoken's GPT-2 spelling runs on the native scanner
    twin = pickle.loads(pickle.dumps(enc))
    theirs = tiktoken.Encoding("custom", pat_str=compat.R50K_PAT_STR, mergeable_ranks=base._mergeable_ranks,
                               special_tokens={"<|pickle|>": 200_000})
    for t in TEXTS:
        assert enc.encode(t, disallowed_special=()) == twin.encode(t, disallowed_special=()) == theirs.encode(
            t, disallowed_special=())
    assert twin.encode("<|pickle|>", allowed_special="all") == [200_000]


def test_models_and_names():
    assert compat.list_encoding_names() == list(tiktoken.list_encoding_names())
    for model in ("gpt-4o", "gpt-4-0314", "gpt-3.5-turbo-0301", "text-davinci-003", "gpt-oss-120b", "gpt2"):
        assert compat.encoding_name_for_model(model) == tiktoken.encoding_name_for_model(model)
    assert compat.encoding_for_model("gpt-4").name == "cl100k_base"
    with pytest.raises(KeyError):
        compat.encoding_name_for_model("no-such-model")
    with pytest.raises(InputError, match="unknown encoding"):
        compat.get_encoding("cl200k")
