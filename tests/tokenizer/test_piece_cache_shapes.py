"""The encoder's piece cache takes its shape from the pass (native/piece_cache.h, ``shape_for``):
4 MiB on ordinary pages for a short text, on 2 MiB pages from 1 MiB of text, 16 MiB from 8 MiB;
a thread's cache that does not fit a pass is replaced. The cache is a memo, so every shape, in any
order, gives the ids a tiny cache gives (``BPE_STORE_PIECE_CACHE_SLOTS=1024``, nearly every piece
a miss) and tiktoken's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
from conftest import EN, fixture_text, shared_file

from bpe_store import Tokenizer
from bpe_store.formats.openai_ranks import find_ranks_file

tiktoken = pytest.importorskip("tiktoken")

#: short (ordinary pages), 2 MB (huge pages), 9 MB (the large cache), short again (kept large)
SIZES = (3_000, 2_000_000, 9_000_000, 5_000)

ENCODE = """
import sys, zlib
from bpe_store import Tokenizer
from bpe_store.formats.openai_ranks import find_ranks_file
tok = Tokenizer.from_tiktoken(find_ranks_file("cl100k_base"), pattern="cl100k")
with open(sys.argv[1], "rb") as f:
    data = f.read()
for n in map(int, sys.argv[2:]):
    ids = tok.encode_to_array(data[:n], 1)
    print(len(ids), zlib.crc32(ids.tobytes()))
"""


def _text(tmp_path) -> bytes:
    with shared_file("enwiki-100M.txt").open("rb") as f:
        data = f.read(max(SIZES) + 4)
    data = data.decode("utf-8", "ignore").encode("utf-8")
    path = tmp_path / "text.txt"
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("threads", [1, 2])
def test_every_cache_shape_gives_the_ids_of_a_tiny_cache(tmp_path, threads):
    data = _text(tmp_path)
    cuts = [len(data[:n].decode("utf-8", "ignore").encode("utf-8")) for n in SIZES]
    tok = Tokenizer.from_tiktoken(find_ranks_file("cl100k_base"), pattern="cl100k")
    ours = []
    for n in cuts:
        ids = tok.encode_to_array(data[:n], threads)
        ours.append(f"{len(ids)} {zlib.crc32(ids.tobytes())}")
    env = dict(os.environ, BPE_STORE_PIECE_CACHE_SLOTS="1024")
    tiny = subprocess.run([sys.executable, "-c", ENCODE, str(tmp_path / "text.txt"), *map(str, cuts)],
                          capture_output=True, text=True, env=env, check=True).stdout.split("\n")[:len(cuts)]
    assert ours == tiny
    enc = tiktoken.Encoding("cl100k_base", pat_str=tok.pattern, mergeable_ranks=tok._whole, special_tokens={})
    text = data[:cuts[1]].decode("utf-8")
    assert tok.encode_to_array(data[:cuts[1]], threads).tolist() == enc.encode_ordinary(text)
    short = fixture_text(EN, 5_000)
    assert tok.encode(short) == enc.encode_ordinary(short)
    assert np.array_equal(tok.encode_to_array(short.encode("utf-8"), threads), enc.encode_ordinary(short))


SHORT = """
import sys, json
from bpe_store import Tokenizer
from bpe_store.formats.openai_ranks import find_ranks_file
tok = Tokenizer.from_tiktoken(find_ranks_file("cl100k_base"), pattern="cl100k")
docs = json.loads(sys.stdin.read())
print(json.dumps([tok.encode_to_array(d.encode(), 1).tolist() for d in docs] + tok.encode_batch(docs, 2)))
"""


def _short_docs() -> list[str]:
    """Short pieces of many ids (consonant runs: 5-10 ids in 8-15 bytes), each many times, with
    different bytes after them; documents that end inside the last 16 bytes of a piece."""
    import random

    rng = random.Random(36)
    words = ["".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(rng.randint(2, 15))) for _ in range(300)]
    seps = [" ", ", ", ".\n", "!", "  ", "\t", "'", "-"]
    long = "".join(rng.choice(words) + rng.choice(seps) for _ in range(40_000))
    docs = [long] + [" ".join(rng.sample(words, 3)) for _ in range(200)] + [w for w in words[:50]]
    return docs


@pytest.mark.parametrize("slots", [None, "1024"])
def test_short_pieces_of_many_ids_and_near_the_end_equal_tiktoken(slots):
    """The short table (native/short_cache.h): a 2-15 byte piece of more than 4 ids is kept in the
    64-byte cache and marked in the short table; a piece near the end of a block is packed byte by
    byte, the others by one 16-byte load whose bytes past the piece are masked off. Encoded twice
    over (hits), with the default cache and with 1024 buckets (collisions), arrays and lists."""
    import json

    docs = _short_docs()
    tok = Tokenizer.from_tiktoken(find_ranks_file("cl100k_base"), pattern="cl100k")
    enc = tiktoken.Encoding("cl100k_base", pat_str=tok.pattern, mergeable_ranks=tok._whole, special_tokens={})
    want = [enc.encode_ordinary(d) for d in docs]
    assert max(len(enc.encode_ordinary(w)) for w in docs[-50:]) > 4  # the marked path is taken
    env = dict(os.environ) if slots is None else dict(os.environ, BPE_STORE_PIECE_CACHE_SLOTS=slots)
    out = subprocess.run([sys.executable, "-c", SHORT], input=json.dumps(docs), capture_output=True, text=True,
                         env=env, check=True).stdout
    got = json.loads(out)
    assert got[:len(docs)] == want
    assert got[len(docs):] == want
