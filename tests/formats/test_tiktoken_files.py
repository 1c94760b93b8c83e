"""``.tiktoken`` ranks files: read as tiktoken reads them, every problem one clear ``InputError``."""

from __future__ import annotations

import base64
import gzip

import pytest

from bpe_store.errors import InputError
from bpe_store.formats.tiktoken_files import (
    TiktokenFileError,
    read_tiktoken_ranks,
    tiktoken_merges,
    tiktoken_specials,
)
from bpe_store.tokenizer.tokenizer import Tokenizer

BYTES = {bytes([b]): b for b in range(256)}


def lines(ranks: dict[bytes, int]) -> list[bytes]:
    return [base64.b64encode(t) + b" %d" % r for t, r in ranks.items()]


def test_reads_plain_and_gzipped_with_blank_lines(tmp_path):
    ranks = BYTES | {b"ab": 300, b" the": 256}
    text = b"\n".join(lines(ranks)) + b"\n\n"
    (tmp_path / "r.tiktoken").write_bytes(b"\r\n".join(text.split(b"\n")))
    (tmp_path / "r.tiktoken.gz").write_bytes(gzip.compress(text))
    assert read_tiktoken_ranks(tmp_path / "r.tiktoken") == ranks
    assert read_tiktoken_ranks(tmp_path / "r.tiktoken.gz") == ranks


@pytest.mark.parametrize("extra,message", [
    (b"YWI= 300 7", "line 257 is not 'base64-token rank'"),
    (b"YWI=", "line 257 is not 'base64-token rank'"),
    (b"YW*= 300", "'YW*=' is not base64"),
    (b"YWI 300", "'YWI' is not base64"),  # missing padding
    (b"YWI= -3", "the rank '-3' is not an integer"),
    (b"YWI= 3.0", "the rank '3.0' is not an integer"),
    (b"YWI= 4294967295", "the rank '4294967295' is not an integer from 0 to 4294967294"),
    (b"YWI= 5", "rank 5 is given to b'ab' and to b'\\x05' (line 6)"),
    (b"YQ== 300", "token b'a' is listed twice (first on line 98)"),
])
def test_malformed_lines_name_file_and_line(tmp_path, extra, message):
    p = tmp_path / "bad.tiktoken"
    p.write_bytes(b"\n".join([*lines(BYTES), extra]) + b"\n")
    with pytest.raises(TiktokenFileError) as exc:
        read_tiktoken_ranks(p)
    assert str(exc.value).startswith(f"{p}: ") and message in str(exc.value), str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_single_bytes(tmp_path):
    p = tmp_path / "r.tiktoken"
    p.write_bytes(b"\n".join(lines({t: r for t, r in BYTES.items() if t not in (b"\x00", b"\xff")})))
    with pytest.raises(TiktokenFileError, match=r"2 single byte\(s\) have no rank \(first: 0x00\)"):
        read_tiktoken_ranks(p)


@pytest.mark.parametrize("setup,message", [
    (lambda d: d / "none.tiktoken", "no such file"),
    (lambda d: d, "is a directory"),
    (lambda d: (d / "e.tiktoken").write_bytes(b"\n\n") and d / "e.tiktoken", "holds no ranks"),
    (lambda d: (d / "z.gz").write_bytes(gzip.compress(b"YQ== 0\n" * 50)[:30]) and d / "z.gz", "damaged gzip"),
])
def test_unreadable_files(tmp_path, setup, message):
    with pytest.raises(InputError, match=message):
        Tokenizer.from_tiktoken(setup(tmp_path), pattern="cl100k")


def test_merges_are_every_split_into_two_tokens():
    ranks = BYTES | {b"ab": 256, b"abc": 257, b"bc": 258, b"abcd": 259, b"cd": 300}
    assert tiktoken_merges(ranks) == [(b"a", b"b"), (b"a", b"bc"), (b"ab", b"c"), (b"b", b"c"),
                                      (b"ab", b"cd"), (b"abc", b"d"), (b"c", b"d")]


@pytest.mark.parametrize("specials,message", [
    ("<|x|>", "not one string"),
    ({"": 999}, "non-empty string"),
    ({"a": 999}, "also a token of the ranks (rank 97)"),
    ({"<|x|>": 97}, "the rank of b'a'"),
    ({"<|x|>": -1}, "not an integer"),
])
def test_bad_special_tokens(specials, message):
    token_at = {r: t for t, r in BYTES.items()}.get
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)").replace("|", r"\|")):
        tiktoken_specials(BYTES.get, token_at, specials)


def test_special_tokens_may_share_an_id(tmp_path):
    """As o200k_harmony's <|endofprompt|> and <|reserved_200018|> do: both encode to the id, which
    decodes (as tiktoken decodes it) to the later one."""
    p = tmp_path / "r.tiktoken"
    p.write_bytes(b"\n".join(lines(BYTES | {b"ab": 300})))
    tok = Tokenizer.from_tiktoken(p, pattern="gpt2", special_tokens={"<|x|>": 999, "<|y|>": 999})
    assert tok.encode("<|x|>ab<|y|>") == [999, 300, 999]
    assert tok.decode([999]) == "<|y|>"


def test_special_tokens_as_a_list_get_the_next_free_ids(tmp_path):
    p = tmp_path / "r.tiktoken"
    p.write_bytes(b"\n".join(lines(BYTES | {b"ab": 300})))
    tok = Tokenizer.from_tiktoken(p, pattern="gpt2", special_tokens=["<|a|>", "<|b|>"])
    assert [tok.special_id("<|a|>"), tok.special_id("<|b|>")] == [301, 302]
    tok = Tokenizer.from_tiktoken(p, pattern="gpt2", special_tokens={"<|a|>": 1000})
    assert tok.encode("ab<|a|>") == [300, 1000] and tok.decode([300, 1000]) == "ab<|a|>"
