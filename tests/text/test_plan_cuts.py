"""Planning's chunk cuts: looking at the first bytes after a target before reading the whole search
window finds the very cut the whole window finds (``chunks._first_cut_near``)."""

from __future__ import annotations

import random

import pytest

from bpe_store.text import chunks
from bpe_store.text.pretokenize import GPT2_PATTERN, native_splitter, resolve_pattern


@pytest.mark.skipif(native_splitter([], GPT2_PATTERN) is None, reason="native core not built")
@pytest.mark.parametrize("pattern", [GPT2_PATTERN, resolve_pattern("gpt4")])
def test_first_look_finds_the_cut_of_the_whole_window(tmp_path, monkeypatch, pattern):
    rng = random.Random(7)
    pieces = ["<|endoftext|>", "<|end", "oftext|>", " ", "  ", "\n", "\n\n", "word", "中文", "é", "'s", "123",
              "!!", "\t", "x" * 50, " " * 30]
    path = tmp_path / "t.txt"
    for _ in range(5):
        path.write_text("".join(rng.choice(pieces) for _ in range(rng.randrange(2000, 12000))), encoding="utf-8")
        size = path.stat().st_size
        for specials in ([], ["<|endoftext|>"], ["<|endoftext|>", "<|end"]):
            for chunk_size in (100, 1000, 7777):
                plans = []
                for look in (0, 16, 4 << 10):  # 0: no first look, the whole window only
                    monkeypatch.setattr(chunks, "_FIRST_LOOK", look)
                    plans.append(chunks.plan_chunks(path, size, specials, pattern, chunk_size, 64))
                assert plans[0] == plans[1] == plans[2], (specials, chunk_size)
                assert len(plans[0]) > 1
