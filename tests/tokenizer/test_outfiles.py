"""What ``encode`` and ``export`` write is complete or absent, and nothing else is touched:
``--force`` replaces only the files a format writes, temporary files are exclusive and removed
on failure, a full disk is exit 4 (a real tiny tmpfs where we may mount one, else an injected
ENOSPC), and GPT-2 vocab/merges files with faults are refused naming the file and line."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import one_error_line, run_main
from conftest import FIXTURES, tmpfs

from bpe_store.errors import InputError
from bpe_store.formats.gpt2_files import Gpt2FileError, read_gpt2
from bpe_store.tokenizer import outfiles
from bpe_store.tokenizer.export import export_store
from bpe_store.tokenizer.tokenizer import Tokenizer
from bpe_store.training.train import train

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("outfiles")
    text = (FIXTURES / "enwiki-1M.txt").read_text(encoding="utf-8")[:200_000]
    src = d / "train.txt"
    src.write_text(text.replace("\n\n", "\n" + EOT), encoding="utf-8")
    train([src], d / "run.db", 600, [EOT], workers=1)
    return d / "run.db", src


# -- export --force replaces only the format's files ----------------------------------------------


def test_force_keeps_other_files(trained, tmp_path, capsys):
    db, _ = trained
    out = tmp_path / "tok"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    (out / "tokenizer.json").write_text("old")
    code, err = run_main(["export", db, "--format", "hf", "-o", out, "--force"], capsys)
    assert code == 0, err
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "tokenizer.json").read_text())["model"]["type"] == "BPE"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_force_dot_never_deletes_the_working_directory(trained, tmp_path, capsys, monkeypatch):
    """``-o . --force`` next to the store is refused; elsewhere it writes beside the user's files."""
    db, _ = trained
    work = tmp_path / "work"
    work.mkdir()
    local = work / "run.db"
    local.write_bytes(db.read_bytes())
    (work / "data.txt").write_text("precious")
    monkeypatch.chdir(work)
    code, err = run_main(["export", "run.db", "--format", "gpt2", "-o", ".", "--force"], capsys)
    assert code == 2 and "holds the store" in err and one_error_line(err)
    assert sorted(p.name for p in work.iterdir() if not p.name.endswith(("-wal", "-shm"))) == ["data.txt", "run.db"]
    code, err = run_main(["export", local, "--format", "gpt2", "-o", local, "--force"], capsys)
    assert code == 2 and "is a file" in err and local.read_bytes() == db.read_bytes()
    code, err = run_main(["export", local, "--format", "gpt2", "-o", tmp_path, "--force"], capsys)
    assert code == 2 and "holds the store" in err
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "data.txt").write_text("precious")
    monkeypatch.chdir(other)
    code, err = run_main(["export", local, "--format", "gpt2", "-o", ".", "--force"], capsys)
    assert code == 0, err
    assert sorted(p.name for p in other.iterdir()) == ["data.txt", "merges.txt", "special_tokens_map.json",
                                                       "tokenizer_config.json", "vocab.json"]


def test_output_that_is_a_file_is_refused(trained, tmp_path, capsys):
    db, _ = trained
    f = tmp_path / "tok"
    f.write_text("keep")
    for extra in ([], ["--force"]):
        code, err = run_main(["export", db, "--format", "hf", "-o", f, *extra], capsys)
        assert code == 2 and "is a file" in err and one_error_line(err) and f.read_text() == "keep"


def test_force_onto_a_symlinked_directory_follows_it(trained, tmp_path, capsys):
    """Decision: a symlink to a directory is followed; its target receives the format's files,
    the link stays a link, other files stay. A dangling link is refused (exit 2)."""
    db, _ = trained
    target = tmp_path / "real"
    target.mkdir()
    (target / "keep.txt").write_text("k")
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    code, err = run_main(["export", db, "--format", "tiktoken", "-o", link, "--force"], capsys)
    assert code == 0, err
    assert link.is_symlink() and (target / "tokenizer.tiktoken").is_file() and (target / "keep.txt").exists()
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    code, err = run_main(["export", db, "--format", "hf", "-o", dangling, "--force"], capsys)
    assert code == 2 and "symlink to nothing" in err and one_error_line(err)


def test_a_directory_where_a_file_goes_is_refused(trained, tmp_path, capsys):
    db, _ = trained
    out = tmp_path / "tok"
    (out / "vocab.json").mkdir(parents=True)
    (out / "vocab.json" / "inside").write_text("x")
    code, err = run_main(["export", db, "--format", "gpt2", "-o", out, "--force"], capsys)
    assert code == 2 and "is a directory" in err
    assert (out / "vocab.json" / "inside").exists() and not (out / "merges.txt").exists()


# -- export is complete or absent --------------------------------------------------------------


def _fail_in_writer(monkeypatch, exc: BaseException) -> None:
    """Make the JSON writer fail after half a file is on disk, as a kill or full disk would."""
    from bpe_store.tokenizer import export

    real = export.json.dump

    def dump(obj, f, **kw):
        f.write(json.dumps(obj, **kw)[:1000])
        f.flush()
        raise exc

    monkeypatch.setattr(export.json, "dump", dump)
    return real


@pytest.mark.parametrize("exists", [False, True])
def test_failed_export_leaves_nothing_that_looks_finished(trained, tmp_path, monkeypatch, exists):
    db, _ = trained
    out = tmp_path / "tok"
    if exists:
        out.mkdir()
        (out / "tokenizer.json").write_text("old")
    _fail_in_writer(monkeypatch, KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        export_store(db, "hf", out, force=True)
    if exists:
        assert [p.name for p in out.iterdir()] == ["tokenizer.json"]
        assert (out / "tokenizer.json").read_text() == "old"
    else:
        assert list(tmp_path.iterdir()) == []


def test_injected_enospc_is_exit_4(trained, tmp_path, capsys, monkeypatch):
    db, _ = trained
    _fail_in_writer(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    code, err = run_main(["export", db, "--format", "hf", "-o", tmp_path / "tok"], capsys)
    assert code == 4 and "no space left" in err and one_error_line(err)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def tiny_disk(tmp_path):
    """An 8 KiB tmpfs (needs root and mount rights; skipped elsewhere, the injected test covers it)."""
    with tmpfs(tmp_path / "tiny", "8k") as mnt:
        yield mnt


def test_real_full_disk(trained, tiny_disk, capsys):
    db, src = trained
    code, err = run_main(["export", db, "--format", "hf", "-o", tiny_disk / "tok"], capsys)
    assert code == 4 and "no space left" in err and one_error_line(err)
    code, err = run_main(["encode", db, src, "-o", tiny_disk / "ids.npy"], capsys)
    assert code == 4 and "no space left" in err
    assert list(tiny_disk.iterdir()) == []


# -- encode's temporary file ---------------------------------------------------------------------


def test_encode_never_follows_a_planted_symlink(trained, tmp_path, capsys):
    """The old code wrote through ``OUT.tmp``, following a symlink planted there."""
    db, src = trained
    victim = tmp_path / "victim.txt"
    victim.write_text("do not touch")
    out = tmp_path / "ids.npy"
    for name in (out.name + ".tmp", "." + out.name + ".tmp"):
        (tmp_path / name).symlink_to(victim)
    code, err = run_main(["encode", db, src, "-o", out], capsys)
    assert code == 0, err
    assert victim.read_text() == "do not touch"
    assert np.load(out).tolist() == Tokenizer.from_store(db).encode(src.read_text(encoding="utf-8"))
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_encode_failure_removes_its_temporary(trained, tmp_path, capsys):
    db, _ = trained
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok " * 100 + b"\xff")
    code, err = run_main(["encode", db, bad, "-o", tmp_path / "ids.npy"], capsys)
    assert code == 2 and "invalid UTF-8" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.txt"]


def test_encode_output_may_not_be_an_input_or_the_store(trained, tmp_path, capsys):
    db, src = trained
    copy = tmp_path / "in.npy"
    copy.write_bytes(src.read_bytes())
    code, err = run_main(["encode", db, copy, "-o", copy, "--force"], capsys)
    assert code == 2 and "which this command reads" in err
    assert copy.read_bytes() == src.read_bytes()


def test_new_files_removes_temporaries_on_failure(tmp_path):
    out = tmp_path / "a.bin"
    with pytest.raises(RuntimeError), outfiles.new_files([out, tmp_path / "b.bin"]) as (fa, fb):
        fa.write(b"x" * 100)
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


# -- from_files on bad GPT-2 files ---------------------------------------------------------------


@pytest.fixture(scope="module")
def gpt2_files(trained, tmp_path_factory) -> Path:
    db, _ = trained
    d = tmp_path_factory.mktemp("g") / "g"
    export_store(db, "gpt2", d)
    return d


def _vocab_lines(d: Path) -> list[str]:
    """The vocabulary written one entry per line (as many hand-edited files are)."""
    vocab = json.loads((d / "vocab.json").read_text(encoding="utf-8"))
    return ["{"] + [f" {json.dumps(k, ensure_ascii=False)}: {v}," for k, v in vocab.items()] + ["}"]


@pytest.mark.parametrize("edit,message", [
    (lambda ls: ls[:3] + ["  \"a\" 5,"] + ls[3:], "line 4 column 7: not valid JSON"),
    (lambda ls: ls[:5] + ['  "dup": 7,'] + ls[5:], "and to 'dup' (line 6); ids must be distinct"),
    (lambda ls: ls[:5] + [ls[2]] + ls[5:], "line 6: token"),
    (lambda ls: ls[:5] + ['  "x": "12",'] + ls[5:], "line 6: the id of 'x' is \"12\""),
    (lambda ls: ls[:5] + ['  "x": -1,'] + ls[5:], "line 6: the id of 'x' is -1"),
    (lambda ls: ls[:5] + ['  "x": 1.5,'] + ls[5:], "line 6: the id of 'x' is 1.5"),
    (lambda ls: ls[:5] + ['  "a b": 99999,'] + ls[5:], "line 6: 'a b' is not in GPT-2's"),
    (lambda ls: ["[1, 2]"], "line 1: not a JSON object"),
])
def test_from_files_bad_vocab(gpt2_files, tmp_path, edit, message):
    lines = _vocab_lines(gpt2_files)
    lines[-2] = lines[-2].rstrip(",")
    text = "\n".join(edit(lines)).replace(",\n}", "\n}")
    v = tmp_path / "vocab.json"
    v.write_text(text, encoding="utf-8")
    with pytest.raises(Gpt2FileError, match="^" + str(v).replace("\\", "\\\\") + ": ") as exc:
        Tokenizer.from_files(v, gpt2_files / "merges.txt")
    assert message in str(exc.value) and "\n" not in str(exc.value)
    assert isinstance(exc.value, InputError)


@pytest.mark.parametrize("line,message", [
    ("a b c", "line 3 is not 'left right'"),
    ("a", "line 3 is not 'left right'"),
    ("Ġ\x00 b", "line 3: 'Ġ\\x00' is not in GPT-2's"),
    ("zzzq zzzq", "line 3: 'zzzq' is not in"),
])
def test_from_files_bad_merges(gpt2_files, tmp_path, line, message):
    lines = (gpt2_files / "merges.txt").read_text(encoding="utf-8").split("\n")
    lines.insert(2, line)
    m = tmp_path / "merges.txt"
    m.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(Gpt2FileError) as exc:
        Tokenizer.from_files(gpt2_files / "vocab.json", m)
    assert str(exc.value).startswith(f"{m}: ") and message in str(exc.value)


def test_from_files_invalid_utf8_and_good_files(gpt2_files, tmp_path, trained):
    v = tmp_path / "vocab.json"
    v.write_bytes(b'{\n"a": 1,\n"\xff": 2}')
    with pytest.raises(Gpt2FileError, match="line 3: invalid UTF-8 at byte 11"):
        read_gpt2(v, gpt2_files / "merges.txt")
    # the good files, one entry per line or one line, read back to the store's tokenizer
    db, _ = trained
    (tmp_path / "lines.json").write_text("\n".join(_vocab_lines(gpt2_files)).replace(",\n}", "\n}"),
                                         encoding="utf-8")
    want = Tokenizer.from_store(db)
    for vpath in (gpt2_files / "vocab.json", tmp_path / "lines.json"):
        tok = Tokenizer.from_files(vpath, gpt2_files / "merges.txt", [EOT])
        assert (tok.vocab, tok.merges) == (want.vocab, want.merges)
