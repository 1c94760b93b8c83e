"""``bpe-store encode`` and ``bpe-store export``: outputs, layouts and one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from cli_helpers import one_error_line, run_main
from conftest import EN, RU, ZH, fixture_text

from bpe_store.tokenizer.tokenizer import Tokenizer, encode_files
from bpe_store.training.train import train

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    src = d / "train.txt"
    src.write_text(fixture_text(EN, 80_000) + EOT + fixture_text(ZH, 30_000),
                   encoding="utf-8")
    train([src], d / "run.db", 800, [EOT], workers=1)
    a, b = d / "a.txt", d / "b.txt"
    a.write_text(fixture_text(EN, 50_000, offset=600_000) + EOT + "tail\n\n", encoding="utf-8")
    b.write_text(fixture_text(RU, 30_000, offset=400_000), encoding="utf-8")
    return d / "run.db", a, b


def test_encode_npy(trained, tmp_path, capsys):
    db, a, b = trained
    out = tmp_path / "ids.npy"
    code, err = run_main(["encode", str(db), str(a), str(b), "-o", str(out), "--separator", EOT], capsys)
    assert code == 0 and "uint16" in err
    ids = np.load(out)
    assert ids.dtype == np.uint16
    tok = Tokenizer.from_store(db)
    want = (tok.encode(a.read_text(encoding="utf-8")) + [tok.special_id(EOT)]
            + tok.encode(b.read_text(encoding="utf-8")) + [tok.special_id(EOT)])
    assert ids.tolist() == want


def test_encode_nanogpt_bin(trained, tmp_path, capsys):
    db, a, _ = trained
    out = tmp_path / "train.bin"
    code, err = run_main(["encode", str(db), str(a), "-o", str(out), "--vocab-size", "500", "--threads", "2"], capsys)
    assert code == 0 and "nanoGPT" in err
    ids = np.memmap(out, dtype=np.uint16, mode="r")  # how nanoGPT reads it
    assert ids.tolist() == Tokenizer.from_store(db, vocab_size=500).encode(a.read_text(encoding="utf-8"))


def test_encode_files_small_blocks(trained):
    """Reading in tiny blocks cuts the text often; the ids do not change."""
    db, a, b = trained
    tok = Tokenizer.from_store(db)
    got: list[int] = []
    encode_files(tok, [a, b], lambda ids: got.extend(ids.tolist()), block=97)
    want = tok.encode(a.read_text(encoding="utf-8")) + tok.encode(b.read_text(encoding="utf-8"))
    assert got == want


@pytest.mark.parametrize("args,message,code", [
    (["encode", "{tmp}/missing.db", "{a}", "-o", "{tmp}/o.npy"], "no such store", 4),
    (["encode", "{db}", "{tmp}/none.txt", "-o", "{tmp}/o.npy"], "no such file", 2),
    (["encode", "{db}", "{a}", "-o", "{tmp}/o.txt"], ".npy", 2),
    (["encode", "{db}", "{a}", "-o", "{tmp}/o.npy", "--vocab-size", "99999"], "larger than", 2),
    (["encode", "{db}", "{a}", "-o", "{tmp}/o.npy", "--separator", "<x>"], "not one of the store's special", 2),
    (["export", "{db}", "--format", "hf", "-o", "{tmp}/exists"], "--force", 2),
])
def test_errors(trained, tmp_path, capsys, args, message, code):
    db, a, _ = trained
    (tmp_path / "exists").mkdir()
    args = [x.format(tmp=tmp_path, db=db, a=a) for x in args]
    got, err = run_main(args, capsys)
    assert got == code
    assert message in err and one_error_line(err)
    assert not (tmp_path / "o.npy").exists()


def test_export_format_is_a_choice(trained, tmp_path, capsys):
    db, _, _ = trained
    code, err = run_main(["export", str(db), "--format", "spm", "-o", str(tmp_path / "new")], capsys)
    assert code == 2 and "'spm' is not one of 'hf', 'gpt2', 'tiktoken'" in err and "Usage:" in err
    assert not (tmp_path / "new").exists()


def test_encode_refuses_existing_output(trained, tmp_path, capsys):
    db, a, _ = trained
    out = tmp_path / "o.npy"
    out.write_bytes(b"keep")
    code, err = run_main(["encode", str(db), str(a), "-o", str(out)], capsys)
    assert code == 2 and "--force" in err and out.read_bytes() == b"keep"
    code, _ = run_main(["encode", str(db), str(a), "-o", str(out), "--force"], capsys)
    assert code == 0 and np.load(out).size > 0


def test_export_cli(trained, tmp_path, capsys):
    db, a, _ = trained
    for fmt, files in [("hf", "tokenizer.json"), ("gpt2", "merges.txt"), ("tiktoken", "tokenizer.tiktoken")]:
        code, err = run_main(["export", str(db), "--format", fmt, "--vocab-size", "600", "-o", str(tmp_path / fmt)],
                             capsys)
        assert code == 0 and files in err
        assert (tmp_path / fmt / files).is_file()


def test_encode_invalid_utf8(trained, tmp_path, capsys):
    db, _, _ = trained
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine text here\n" * 10 + b"caf\xc3 \xed\xa0\x80 end")
    code, err = run_main(["encode", str(db), str(bad), "-o", str(tmp_path / "o.npy")], capsys)
    assert code == 2 and "invalid UTF-8 at byte 153" in err
    assert not (tmp_path / "o.npy").exists()


@pytest.mark.parametrize("native", [True, False])
def test_encode_files_block_sizes(trained, native):
    """Both file paths (bytes + native split, str + regex) give encode's ids at any block size."""
    db, a, b = trained
    tok = Tokenizer.from_store(db, native=native)
    want = tok.encode(a.read_text(encoding="utf-8")) + tok.encode(b.read_text(encoding="utf-8"))
    for block in (13, 1000, 1 << 20):
        got: list[int] = []
        encode_files(tok, [a, b], lambda ids, got=got: got.extend(ids.tolist()), block=block)
        assert got == want


# -- encode --tokenizer FILE.tiktoken: OpenAI's ranks instead of a store -------------------------

def _cl100k_gz():
    from importlib import resources

    pytest.importorskip("bpe_openai")
    return resources.files("bpe_openai") / "data" / "cl100k_base.tiktoken.gz"


def test_encode_with_openai_ranks(trained, tmp_path, capsys):
    """`--tokenizer cl100k_base.tiktoken.gz --pattern cl100k` writes tiktoken's ids, OpenAI's
    special token id after each file."""
    import gzip
    from importlib import resources

    from test_from_tiktoken import parse_ranks

    tiktoken = pytest.importorskip("tiktoken")
    _, a, b = trained
    out = tmp_path / "ids.npy"
    with resources.as_file(_cl100k_gz()) as ranks_path:
        code, err = run_main(["encode", "--tokenizer", ranks_path, "--pattern", "cl100k", a, b, "-o", out,
                              "--special", f"{EOT}=100257", "--special", "<|endofprompt|>=100276",
                              "--separator", EOT, "--threads", "2"], capsys)
        ranks = parse_ranks(gzip.decompress(ranks_path.read_bytes()))
    assert code == 0 and "uint32" in err, err
    from bpe_store.text.pretokenize import CL100K_PATTERN

    enc = tiktoken.Encoding("cl100k_base", pat_str=CL100K_PATTERN, mergeable_ranks=ranks,
                            special_tokens={EOT: 100257, "<|endofprompt|>": 100276})
    want = [*enc.encode(a.read_text(encoding="utf-8"), allowed_special="all"), 100257,
            *enc.encode(b.read_text(encoding="utf-8"), allowed_special="all"), 100257]
    assert np.load(out).tolist() == want


@pytest.fixture
def small_ranks(tmp_path):
    """A tiny .tiktoken file: the 256 bytes and "ab"."""
    import base64

    p = tmp_path / "small.tiktoken"
    p.write_bytes(b"".join(base64.b64encode(bytes([i])) + b" %d\n" % i for i in range(256)) + b"YWI= 256\n")
    return p


@pytest.mark.parametrize("args,message", [
    (["{db}", "{a}", "--tokenizer", "{ranks}", "--pattern", "gpt2"], "is a store (SQLite file); give either"),
    (["{a}"], "give the store and then the text files (or --tokenizer"),
    (["{a}", "--tokenizer", "{ranks}"], "--tokenizer needs --pattern"),
    (["{db}", "{a}", "--pattern", "cl100k"], "--pattern and --special go with --tokenizer"),
    (["{a}", "--tokenizer", "{ranks}", "--pattern", "gpt2", "--vocab-size", "300"], "--vocab-size takes a prefix"),
    (["{a}", "--tokenizer", "{ranks}", "--pattern", "gpt2", "--separator", EOT], "is not a special token of"),
    (["{a}", "--tokenizer", "{tmp}/none.tiktoken", "--pattern", "gpt2"], "none.tiktoken: no such file"),
    (["{a}", "--tokenizer", "{a}", "--pattern", "gpt2"], "line 1 is not 'base64-token rank'"),
    (["{a}", "--tokenizer", "{ranks}", "--pattern", "gpt2", "--special", "<|x|>=7"], "has id 7, the rank of"),
    # a misspelled name is no regex (it would drop all text); a regex that does not compile is bad input
    (["{a}", "--tokenizer", "{ranks}", "--pattern", "gpt-2"], "is not a known pattern name (did you mean gpt2?)"),
    (["{a}", "--tokenizer", "{ranks}", "--pattern", "(["], "'([' does not compile: unterminated character set"),
])
def test_encode_tokenizer_errors(trained, small_ranks, tmp_path, capsys, args, message):
    db, a, _ = trained
    args = ["encode", *[x.format(tmp=tmp_path, db=db, a=a, ranks=small_ranks) for x in args], "-o",
            str(tmp_path / "o.npy")]
    code, err = run_main(args, capsys)
    assert code == 2 and message in err and one_error_line(err), err
    assert not (tmp_path / "o.npy").exists()


def test_encode_with_small_ranks_and_new_special(small_ranks, tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("ab<|x|>ba", encoding="utf-8")
    out = tmp_path / "t.bin"
    code, err = run_main(["encode", "--tokenizer", small_ranks, "--pattern", "gpt2", "--special", "<|x|>",
                          "--separator", "<|x|>", text, "-o", out], capsys)
    assert code == 0, err
    assert np.memmap(out, dtype=np.uint16, mode="r").tolist() == [256, 257, 98, 97, 257]
