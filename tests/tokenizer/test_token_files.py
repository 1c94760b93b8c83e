"""``bpe-store encode``'s data files: dtype rules for nanoGPT's uint16 .bin, the train/val split
at document boundaries, progress like ``train``'s, and what Ctrl-C / SIGTERM leave behind."""

from __future__ import annotations

import json
import signal
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import cli_cmd, env, json_lines, one_error_line, run_main
from conftest import FIXTURES

from bpe_store.tokenizer.token_files import EncodeStopped, choose_dtype, encode_to_file, is_val_document, val_path
from bpe_store.tokenizer.tokenizer import Tokenizer
from bpe_store.training.train import train

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, list[str]]:
    """A store, and 30 short documents (paragraphs of the fixture)."""
    d = tmp_path_factory.mktemp("tf")
    text = (FIXTURES / "enwiki-1M.txt").read_text(encoding="utf-8")
    src = d / "train.txt"
    src.write_text(text[:200_000].replace("\n\n", "\n" + EOT), encoding="utf-8")
    train([src], d / "run.db", 600, [EOT], workers=1)
    docs = [p for p in text[300_000:400_000].split("\n") if p.strip()][:30]
    return d / "run.db", docs


@pytest.fixture
def far_id(monkeypatch):
    """Stores whose vocabulary reaches id 70,000 (a special far out), without training 70K merges."""
    real = Tokenizer.from_store.__func__

    def from_store(cls, db, vocab_size=None, **kw):
        tok = real(cls, db, vocab_size, **kw)
        tok.vocab[70_000] = b"<|far|>"
        return tok

    monkeypatch.setattr(Tokenizer, "from_store", classmethod(from_store))


# -- dtype --------------------------------------------------------------------------------------


def test_bin_refuses_a_vocab_past_uint16(trained, tmp_path, capsys, far_id):
    db, docs = trained
    src = tmp_path / "a.txt"
    src.write_text(docs[0], encoding="utf-8")
    code, err = run_main(["encode", db, src, "-o", tmp_path / "train.bin"], capsys)
    assert code == 2 and one_error_line(err)
    assert "past the 65,535" in err and ".npy" in err and "--dtype uint32" in err
    assert not (tmp_path / "train.bin").exists()
    code, err = run_main(["encode", db, src, "-o", tmp_path / "train.bin", "--dtype", "uint32"], capsys)
    assert code == 2 and "must say so in its name" in err and "train.uint32.bin" in err
    code, err = run_main(["encode", db, src, "-o", tmp_path / "train.uint32.bin", "--dtype", "uint32"], capsys)
    assert code == 0, err
    want = Tokenizer.from_store(db).encode(docs[0])
    assert np.fromfile(tmp_path / "train.uint32.bin", dtype=np.uint32).tolist() == want
    code, err = run_main(["encode", db, src, "-o", tmp_path / "ids.npy"], capsys)
    assert code == 0 and np.load(tmp_path / "ids.npy").dtype == np.uint32
    code, err = run_main(["encode", db, src, "-o", tmp_path / "x.npy", "--dtype", "uint16"], capsys)
    assert code == 2 and "past the 65,535 uint16 holds" in err


def test_choose_dtype():
    assert choose_dtype(Path("a.bin"), 65_535) == "uint16"
    assert choose_dtype(Path("a.npy"), 65_536) == "uint32"
    assert choose_dtype(Path("a.npy"), 10, "uint32") == "uint32"
    assert choose_dtype(Path("a.uint32.bin"), 10, "uint32") == "uint32"
    for out, max_id, dtype in [("a.bin", 65_536, "auto"), ("a.bin", 10, "uint32"), ("a.npy", 65_536, "uint16"),
                               ("a.npy", 10, "int8")]:
        with pytest.raises(Exception) as exc:
            choose_dtype(Path(out), max_id, dtype)
        assert getattr(exc.value, "exit_code", None) == 2


# -- train / val split ----------------------------------------------------------------------------


def test_val_rule_is_exact_and_spread():
    f = Fraction(1, 10)
    assert [i for i in range(40) if is_val_document(i, f)] == [9, 19, 29, 39]
    f = Fraction("0.25")
    assert [i for i in range(12) if is_val_document(i, f)] == [3, 7, 11]
    f = Fraction(2, 3)
    assert sum(is_val_document(i, f) for i in range(300)) == 200
    assert val_path(Path("d/train.bin")) == Path("d/val.bin")
    assert val_path(Path("d/train.uint32.bin")) == Path("d/val.uint32.bin")
    assert val_path(Path("d/ids.npy")) == Path("d/ids.val.npy")


def test_split_at_separators(trained, tmp_path, capsys):
    """Documents end at each separator (written after each file too); document i goes to val
    when floor((i+1)F) > floor(iF); the result does not depend on threads."""
    db, docs = trained
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text(EOT.join(docs[:24]), encoding="utf-8")  # 24 documents, the last ended by encode's separator
    b.write_text(EOT.join(docs[24:]), encoding="utf-8")  # 6 more
    out = tmp_path / "train.bin"
    code, err = run_main(["encode", db, a, b, "-o", out, "--separator", EOT, "--val-fraction", "0.1",
                     "--threads", "1"], capsys)
    assert code == 0, err
    tok = Tokenizer.from_store(db)
    sep = tok.special_id(EOT)
    encoded = [tok.encode(d) + [sep] for d in docs]
    want_val = [i for i in range(30) if i % 10 == 9]
    assert np.memmap(tmp_path / "val.bin", dtype=np.uint16, mode="r").tolist() == \
        [t for i in want_val for t in encoded[i]]
    assert np.memmap(out, dtype=np.uint16, mode="r").tolist() == \
        [t for i in range(30) if i not in want_val for t in encoded[i]]
    first = (out.read_bytes(), (tmp_path / "val.bin").read_bytes())
    code, err = run_main(["encode", db, a, b, "-o", out, "--separator", EOT, "--val-fraction", "0.1",
                     "--threads", "2", "--force"], capsys)
    assert code == 0 and (out.read_bytes(), (tmp_path / "val.bin").read_bytes()) == first


def test_split_by_files_into_npy(trained, tmp_path):
    db, docs = trained
    files = []
    for i in range(10):
        p = tmp_path / f"doc{i}.txt"
        p.write_text(docs[i], encoding="utf-8")
        files.append(p)
    result = encode_to_file(db, files, tmp_path / "ids.npy", val_fraction=0.2, threads=1)
    assert result.documents == 10
    tok = Tokenizer.from_store(db)
    assert np.load(tmp_path / "ids.val.npy").tolist() == tok.encode(docs[4]) + tok.encode(docs[9])
    assert np.load(tmp_path / "ids.npy").tolist() == [t for i in range(10) if i not in (4, 9)
                                                      for t in tok.encode(docs[i])]
    assert [n for _, n in result.files] == [np.load(tmp_path / "ids.npy").size, np.load(tmp_path / "ids.val.npy").size]


def test_split_that_takes_nothing_is_refused(trained, tmp_path, capsys):
    db, docs = trained
    a = tmp_path / "a.txt"
    a.write_text(docs[0], encoding="utf-8")
    code, err = run_main(["encode", db, a, "-o", tmp_path / "train.bin", "--val-fraction", "0.1", "-q"], capsys)
    assert code == 2 and "takes no document" in err and one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    for bad in ("0", "1", "-0.5", "nan"):
        code, err = run_main(["encode", db, a, "-o", tmp_path / "train.bin", "--val-fraction", bad], capsys)
        assert code == 2 and "--val-fraction" in err


def test_val_file_exists_needs_force(trained, tmp_path, capsys):
    db, docs = trained
    a = tmp_path / "a.txt"
    a.write_text(EOT.join(docs), encoding="utf-8")
    (tmp_path / "val.bin").write_bytes(b"keep")
    code, err = run_main(["encode", db, a, "-o", tmp_path / "train.bin", "--separator", EOT, "--val-fraction", "0.5"],
                    capsys)
    assert code == 2 and "val.bin: already exists" in err and (tmp_path / "val.bin").read_bytes() == b"keep"


# -- progress and stopping ----------------------------------------------------------------------


def test_progress_json_and_quiet(trained, tmp_path, capsys):
    db, docs = trained
    a = tmp_path / "a.txt"
    a.write_text(EOT.join(docs), encoding="utf-8")
    code, err = run_main(["encode", db, a, "-o", tmp_path / "o.npy", "--progress", "json"], capsys)
    assert code == 0
    events = json_lines(err)
    enc = [e for e in events if e["stage"] == "encoding"]
    size = a.stat().st_size
    assert enc and enc[-1]["done"] == enc[-1]["total"] == size and enc[-1]["unit"] == "bytes"
    assert all({"done", "total", "eta_s"} <= e.keys() for e in enc)
    assert events[-1]["stage"] == "done" and events[-1]["dtype"] == "uint16"
    code, err = run_main(["encode", db, a, "-o", tmp_path / "o.npy", "--quiet", "--force"], capsys)
    assert code == 0 and err == ""
    code, err = run_main(["encode", db, a, "-o", tmp_path / "o.npy", "--progress", "none", "--force"], capsys)
    assert code == 0 and err.startswith(f"{tmp_path / 'o.npy'}: ") and "uint16" in err


def test_stop_event_leaves_nothing(trained, tmp_path):
    import threading

    db, docs = trained
    a = tmp_path / "a.txt"
    a.write_text(EOT.join(docs), encoding="utf-8")
    stop = threading.Event()
    stop.set()
    with pytest.raises(EncodeStopped):
        encode_to_file(db, [a], tmp_path / "train.bin", stop=stop, val_fraction=0.5, separator=EOT)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.parametrize("existing", [False, True])
def test_signal_says_what_happened_to_the_output(trained, tmp_path, sig, code, existing):
    """A real process stopped mid-encoding: the partial output is removed, an old output kept,
    and the message says so (not "the store is at its last checkpoint")."""
    db, _ = trained
    big = tmp_path / "big.txt"
    chunk = (FIXTURES / "enwiki-1M.txt").read_bytes()
    with open(big, "wb") as f:
        for _ in range(64):  # 64 MB: four 16 MB blocks, a second or more of encoding
            f.write(chunk)
    out = tmp_path / "ids.npy"
    if existing:
        out.write_bytes(b"old")
    args = ["encode", db, big, "-o", out, "--progress", "json", "--threads", "1"] + (["--force"] if existing else [])
    proc = subprocess.Popen(cli_cmd(*args), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env())
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith("{") and json.loads(line)["stage"] == "encoding" and json.loads(line)["done"] > 0:
            proc.send_signal(sig)
            break
    rest = proc.communicate(timeout=120)[1]
    err = "".join(seen) + rest
    assert proc.returncode == code, err
    assert "encoding stopped; nothing was written" in err and "checkpoint" not in err
    assert ("keeps its previous contents" if existing else "does not exist") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == (["big.txt", "ids.npy"] if existing else ["big.txt"])
    if existing:
        assert out.read_bytes() == b"old"
    assert json_lines(rest)[-1]["stage"] == "interrupted"
