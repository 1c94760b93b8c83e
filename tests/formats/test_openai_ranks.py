"""OpenAI's encodings by name, found offline (bpe_store.formats.openai_ranks), and ranks files read natively:
the native reader gives what the strict Python reader gives, and falls back to it where it must."""

from __future__ import annotations

import gzip
import hashlib
import shutil

import pytest

from bpe_store.errors import InputError
from bpe_store.formats.openai_ranks import (
    DIR_VARIABLE,
    ENCODINGS,
    _bpe_openai_dir,
    encoding_spec,
    find_ranks_file,
    read_ranks,
    strict_ranks,
    tiktoken_cache_dir,
)

BYTES = {bytes([b]): b for b in range(256)}
_BPE_OPENAI = _bpe_openai_dir()  # before a test hides it


def _write(path, ranks, sep=b" ", end=b"\n"):
    import base64

    path.write_bytes(end.join(base64.b64encode(t) + sep + str(r).encode() for t, r in ranks.items()) + end)
    return path


@pytest.fixture
def no_sources(monkeypatch, tmp_path):
    """No directory named, an empty tiktoken cache, and no bpe-openai package."""
    monkeypatch.delenv(DIR_VARIABLE, raising=False)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("bpe_store.formats.openai_ranks._bpe_openai_dir", lambda: None)
    return tmp_path


def _real_file(name: str):
    """OpenAI's file inside the bpe-openai package (the test extra installs it)."""
    assert _BPE_OPENAI is not None, "pip install bpe-openai (in the test extra)"
    return _BPE_OPENAI / f"{name}.tiktoken.gz"


def test_bpe_openai_files_are_found_and_are_openais():
    for name in ("cl100k_base", "o200k_base", "o200k_harmony"):
        p = find_ranks_file(name)
        assert p == _real_file(ENCODINGS[name].file.removesuffix(".tiktoken"))
        assert hashlib.sha256(gzip.decompress(p.read_bytes())).hexdigest() == ENCODINGS[name].sha256


def test_a_missing_encoding_says_how_to_provide_it(no_sources):
    with pytest.raises(InputError, match=r"no ranks file for encoding 'r50k_base'.*r50k_base\.tiktoken.*"
                                         r"directory=.*BPE_STORE_TIKTOKEN_DIR.*tiktoken\.get_encoding"):
        find_ranks_file("r50k_base")
    with pytest.raises(InputError, match="unknown encoding 'cl200k'; the encodings are gpt2, r50k_base"):
        find_ranks_file("cl200k")


def test_tiktoken_cache_by_its_own_key(no_sources, monkeypatch):
    """A file tiktoken cached (named by the SHA-1 of its URL) is found; one whose SHA-256 is not
    OpenAI's is passed over, and the error says so."""
    src = _real_file("cl100k_base")
    cache = no_sources / "cache"
    cache.mkdir()
    key = hashlib.sha1(ENCODINGS["cl100k_base"].url.encode()).hexdigest()
    (cache / key).write_bytes(gzip.decompress(src.read_bytes()))
    assert find_ranks_file("cl100k_base") == cache / key
    (cache / key).write_bytes(b"YQ== 0\n")
    with pytest.raises(InputError, match="passed over .* another SHA-256"):
        find_ranks_file("cl100k_base")
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    monkeypatch.setenv("DATA_GYM_CACHE_DIR", str(cache))
    assert tiktoken_cache_dir() == cache
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")  # tiktoken's way to turn its cache off
    assert tiktoken_cache_dir() is None


def test_a_named_directory_comes_first(no_sources, monkeypatch):
    d = no_sources / "mine"
    d.mkdir()
    shutil.copy(_real_file("o200k_base"), d / "o200k_base.tiktoken.gz")
    assert find_ranks_file("o200k_harmony", directory=d) == d / "o200k_base.tiktoken.gz"
    monkeypatch.setenv(DIR_VARIABLE, str(d))
    assert find_ranks_file("o200k_base") == d / "o200k_base.tiktoken.gz"


def test_native_reading_equals_the_strict_reader():
    p = _real_file("cl100k_base")
    ranks = read_ranks(p)
    expected = strict_ranks(gzip.decompress(p.read_bytes()), p)
    assert ranks.mergeable() == expected
    assert len(ranks) == 100_256 and ranks.max_id == 100_255 and ranks.n_pairs() == 233_378
    assert ranks.vocab() == {r: t for t, r in expected.items()}


@pytest.mark.parametrize("sep,end", [(b"\t", b"\n"), (b"  ", b"\r\n"), (b" ", b"\r")])
def test_unusual_but_valid_files_read_as_tiktoken_reads_them(tmp_path, sep, end):
    ranks = BYTES | {b"ab": 256, b"\xff\xfe": 999}
    assert read_ranks(_write(tmp_path / "r.tiktoken", ranks, sep, end)).mergeable() == ranks


@pytest.mark.parametrize("line,message", [
    (b"YWI=", "is not 'base64-token rank'"),
    (b"YW!= 300", "is not base64"),
    (b"YWI= x", "is not an integer"),
    (b"YQ== 300", "is listed twice"),
    (b"YWI= 97", "rank 97 is given to"),
])
def test_wrong_lines_are_named_by_the_strict_reader(tmp_path, line, message):
    p = _write(tmp_path / "r.tiktoken", BYTES)
    p.write_bytes(p.read_bytes() + line + b"\n")
    with pytest.raises(InputError, match=rf"r\.tiktoken: line 257.*{message}"):
        read_ranks(p)


def test_the_specs_are_tiktokens():
    """Each name's file, hash, pattern and specials are what tiktoken's registry says."""
    tiktoken_ext = pytest.importorskip("tiktoken_ext.openai_public")
    import tiktoken.load

    from bpe_store.text.pretokenize import resolve_pattern

    calls = []
    real = tiktoken.load.load_tiktoken_bpe
    tiktoken.load.load_tiktoken_bpe = lambda url, expected_hash=None: calls.append((url, expected_hash)) or {}
    try:
        for name, make in tiktoken_ext.ENCODING_CONSTRUCTORS.items():
            if name == "gpt2":  # built from GPT-2's two files; r50k_base's ranks
                continue
            tiktoken_ext.load_tiktoken_bpe = tiktoken.load.load_tiktoken_bpe
            spec = make()
            ours = encoding_spec(name)
            assert calls[-1] == (ours.url, ours.sha256)
            assert spec["special_tokens"] == ours.special_tokens
            # tiktoken writes GPT-2's pattern possessively (the same splits)
            assert spec["pat_str"] in (resolve_pattern(ours.pattern), tiktoken_ext.r50k_pat_str)
    finally:
        tiktoken.load.load_tiktoken_bpe = real
        tiktoken_ext.load_tiktoken_bpe = real
    assert list(ENCODINGS) == list(tiktoken_ext.ENCODING_CONSTRUCTORS)
