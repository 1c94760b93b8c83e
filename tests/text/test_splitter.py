"""The one native splitter (native/splitter.h, ``bpe_store._core.Splitter``): its cut points
change no count and no id, and every reader that cuts text (file and stream encoding, counting
blocks of compressed files and streams) stays bounded where the old ASCII-only rule kept
everything: Chinese text without spaces, one line of hundreds of kilobytes."""

from __future__ import annotations

import io
from collections import Counter

import pytest
import test_tokenizer
from conftest import ZH, fixture_text
from hypothesis import given, settings
from hypothesis import strategies as st

from bpe_store.native import native_count_chunk
from bpe_store.text.chunks import plan_chunks
from bpe_store.text.pretokenize import (
    CL100K_PATTERN,
    GPT2_PATTERN,
    O200K_PATTERN,
    PretokenSpec,
    count_words,
    native_splitter,
)
from bpe_store.text.units import text_blocks
from bpe_store.tokenizer import tokenizer as tokenizer_mod
from bpe_store.tokenizer.tokenizer import Tokenizer, _bytes_blocks

EOT = "<|endoftext|>"
#: fixtures shared with test_tokenizer: GPT-2's vocab and merges, and tiktoken's encoder of them
gpt2, reference = test_tokenizer.gpt2, test_tokenizer.reference


def _zh_without_spaces(size: int) -> str:
    """Chinese text with every ASCII whitespace removed: no point of the old rule (printable
    ASCII before a space or newline) is left, but punctuation still ends pre-tokens."""
    return "".join(ch for ch in fixture_text(ZH, size) if ch not in " \n\r\t")


# -- the cut points themselves ------------------------------------------------------------------

_ALPHABET = st.sampled_from(["a", "b", "s", "t", "'", " ", "  ", "\n", "\t", "1", "22", ".", ",", "中", "文", "，",
                             "。", "é", "🙃", "\u3000", "<|e|>", "<|", "|>", "<|e|><|f|>", "x<|f"])


@settings(max_examples=100, deadline=None)
@given(parts=st.lists(_ALPHABET, max_size=40))
def test_every_cut_point_changes_no_count(parts: list[str]) -> None:
    """Counting the two sides of any cut the splitter reports gives the counts of the whole
    (the GPT-2 pattern through `regex`, special tokens that overlap and share first bytes)."""
    specials = ["<|e|>", "<|e|><|f|>", "<|f|>", "，"]
    text = "".join(parts)
    data = text.encode()
    splitter = native_splitter(specials, GPT2_PATTERN)
    whole = count_words(text, specials)
    cuts = [q for q in range(len(data)) if splitter.first_cut(data, q, q + 1) == q]
    assert cuts == sorted({splitter.last_cut(data, 0, q + 1) for q in cuts})
    for q in cuts:
        left, right = data[:q].decode(), data[q:].decode()
        assert count_words(left, specials) + count_words(right, specials) == whole, (text, q)


@settings(max_examples=100, deadline=None)
@given(parts=st.lists(_ALPHABET | st.sampled_from(["\n/", ".\n", "\r\n", "A", "Ab", "'S", "123"]), max_size=40),
       pattern=st.sampled_from([CL100K_PATTERN, O200K_PATTERN]))
def test_every_cut_point_of_gpt4_and_o200k_changes_no_count(parts: list[str], pattern: str) -> None:
    """The same for GPT-4's and o200k's patterns and their narrower rule (before a space after a
    non-whitespace character; after such a character's newline, for o200k not before "/")."""
    specials = ["<|e|>", "<|e|><|f|>"]
    text = "".join(parts)
    data = text.encode()
    splitter = native_splitter(specials, pattern)
    whole = count_words(text, specials, pattern)
    for q in (q for q in range(len(data)) if splitter.first_cut(data, q, q + 1) == q):
        left, right = data[:q].decode(), data[q:].decode()
        assert count_words(left, specials, pattern) + count_words(right, specials, pattern) == whole, (text, q)


def test_a_gpt4_pattern_file_is_chunked_without_special_tokens(tmp_path) -> None:
    """GPT-4's pattern has cut points of its own, so a file without special tokens is counted in
    many chunks (before: one chunk, the whole file in memory on one thread), same counts."""
    text = fixture_text("enwiki-128K.txt", 100_000)
    path = tmp_path / "en.txt"
    path.write_bytes(text.encode())
    chunks = plan_chunks(path, path.stat().st_size, [], CL100K_PATTERN, 4096)
    assert len(chunks) > 10
    data = path.read_bytes()
    total: Counter = Counter()
    for a, b in chunks:
        total.update(count_words(data[a:b].decode(), [], CL100K_PATTERN))
    assert total == count_words(text, [], CL100K_PATTERN)


@settings(max_examples=100, deadline=None)
@given(parts=st.lists(_ALPHABET, max_size=40), which=st.integers(0, 3))
def test_special_tokens_with_many_first_bytes(parts: list[str], which: int) -> None:
    """The special-token search by one memchr per first byte (1 to 4 of them) and by a table
    (5) splits as the `regex` alternation does; 0xFF, the document separator, among them."""
    specials = [["<|e|>"], ["<|e|>", "，"], ["<|e|>", "，", "t"], ["<|e|>", "，", "t", "é", "\u3000"]][which]
    text = "".join(parts)
    native = native_count_chunk(text.encode(), [s.encode() for s in specials]).to_dict()
    assert native == count_words(text, specials)
    docs = text.split("|")  # the same text as documents joined by the separator byte
    joined = b"\xff".join(d.encode() for d in docs)
    by_doc = Counter()
    for d in docs:
        by_doc.update(count_words(d, specials))
    assert native_count_chunk(joined, [s.encode() for s in specials] + [b"\xff"]).to_dict() == by_doc


# -- (a) encoding text without ASCII cut points -------------------------------------------------


def test_file_encoding_blocks_stay_bounded_in_chinese(gpt2, reference, tmp_path) -> None:
    """``encode`` of a file reads it in blocks cut by the splitter: in Chinese without spaces a
    block is still about the read size (before: no cut point, the whole file was kept and
    encoded as one block on one thread), and the ids equal tiktoken's."""
    vocab, merges = gpt2
    tok = Tokenizer(vocab, merges, [EOT])
    if tok._core is None:
        pytest.skip("native encoder not built")
    text = _zh_without_spaces(200_000)
    path = tmp_path / "zh.txt"
    path.write_bytes(text.encode())
    with open(path, "rb") as f:
        blocks = list(_bytes_blocks(tok, f, 4096))
    assert max(len(b) for b, _, _ in blocks) < 3 * 4096
    assert b"".join(b for b, _, _ in blocks) == text.encode()
    ids = [i for b, _, _ in blocks for i in tok.encode_to_array(b, 2).tolist()]
    assert ids == reference.encode(text, allowed_special="all")


def test_native_encoding_of_long_chinese_text_cut_into_blocks(gpt2, reference) -> None:
    """The native encoder cuts a text into 256 KB blocks for its threads at the splitter's
    points; 600 KB of Chinese without spaces (several blocks) encodes as tiktoken does."""
    vocab, merges = gpt2
    tok = Tokenizer(vocab, merges, [EOT])
    if tok._core is None:
        pytest.skip("native encoder not built")
    text = _zh_without_spaces(599_000) + EOT + "尾"
    assert tok.encode_to_array(text, 2).tolist() == reference.encode(text, allowed_special="all")


@pytest.mark.parametrize("native", [True, False])
def test_encode_iterable_streams_chinese(gpt2, reference, monkeypatch, native: bool) -> None:
    """``encode_iterable`` yields ids while Chinese text without spaces still streams in (before,
    with GPT-2's pattern, it found no cut point and held the whole stream)."""
    monkeypatch.setattr(tokenizer_mod, "_STREAM_BLOCK", 4096)
    vocab, merges = gpt2
    tok = Tokenizer(vocab, merges, [EOT], native=native)
    if native and tok._core is None:
        pytest.skip("native encoder not built")
    text = _zh_without_spaces(100_000)
    lines = [text[i:i + 100] for i in range(0, len(text), 100)]
    consumed = 0

    def stream():
        nonlocal consumed
        for line in lines:
            consumed += 1
            yield line

    it = tok.encode_iterable(stream())
    first = next(it)
    if native:
        assert consumed < len(lines) // 4, "no ids before most of the stream was read"
    assert [first, *it] == reference.encode(text, allowed_special="all")


# -- (b) a user's own pattern is cut only where that is provably safe ---------------------------


def test_stream_of_a_users_pattern_is_cut_only_at_special_tokens(monkeypatch) -> None:
    """A user's regex may join what GPT-2's splits: with ``\\w+ \\w+`` a pre-token spans a space
    after a letter, where the GPT-2-family stream rule cut (before: different ids). Now such a
    stream is cut only at special tokens, and the ids equal ``encode`` of the whole."""
    monkeypatch.setattr(tokenizer_mod, "_STREAM_BLOCK", 16)
    vocab = {i: bytes([i]) for i in range(256)} | {256: b"b "}
    tok = Tokenizer(vocab, [(b"b", b" ")], [EOT], pattern=r"\w+ \w+|\s+|\w+|[^\w\s]+")
    text = ("ab cd\n" * 5 + EOT) * 4 + "ab cd"
    whole = tok.encode(text)
    assert 256 in whole
    assert list(tok.encode_iterable(iter(text))) == whole
    assert list(tok.encode_iterable([text[i:i + 3] for i in range(0, len(text), 3)])) == whole


# -- (c) blocks of a stream or a compressed file inside one giant line --------------------------


def _block_counts(blocks: list[bytes], max_bytes: int) -> Counter:
    total: Counter = Counter()
    for b in blocks:
        total.update(native_count_chunk(b, [EOT.encode()], max_bytes).to_dict())
    return total


@pytest.mark.parametrize("kind", ["chinese", "one pre-token"])
def test_text_blocks_cut_inside_a_giant_line(kind: str) -> None:
    """A line of 400 KB with no space and no special token (Chinese; or one pre-token of letters)
    is read in blocks of about the block size (before: the Chinese line was one block of
    392 KB), with the counts of the whole text. ``max_pretoken_bytes`` reaches the reader."""
    if kind == "chinese":
        text = _zh_without_spaces(400_000).replace(EOT, "。")
    else:
        text = "x " + "a" * 400_000 + " y"
    data = text.encode()
    blocks = list(text_blocks(io.BytesIO(data).read, PretokenSpec((EOT,), GPT2_PATTERN, "strict", 1000), 16_384,
                              "test"))
    assert b"".join(blocks) == data
    if kind == "chinese":
        assert len(blocks) > 10 and max(len(b) for b in blocks) < 4 * 16_384
    assert _block_counts(blocks, 1000) == count_words(text, [EOT], GPT2_PATTERN, 1000)


def test_text_blocks_cut_a_long_run_from_a_stream() -> None:
    """The same for a stream that delivers a 5 MB run of one letter in small reads: blocks stay
    bounded by about twice (block size + maximum pre-token length + a read)."""
    text = "start " + "a" * (5 << 20) + " end"
    data = text.encode()
    src = io.BytesIO(data)
    blocks = list(text_blocks(lambda n: src.read(min(n, 65536)), PretokenSpec((EOT,), GPT2_PATTERN, "strict", 4096),
                              65536, "stdin"))
    assert b"".join(blocks) == data
    assert len(blocks) > 1 and max(len(b) for b in blocks) < 3 * (65536 + 4096 + (1 << 20))
    assert _block_counts(blocks, 4096) == count_words(text, [EOT], GPT2_PATTERN, 4096)
