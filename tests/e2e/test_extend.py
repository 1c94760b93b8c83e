"""Extending a tokenizer (``train(..., extend=...)``, ``bpe-store train --extend``): every base kind
keeps its ids and merges, the extended store's tokenizer and its three exports give the same ids,
every new token is reachable, and the base's prefix encodes exactly as the base.

A base is made once per module: a small store trained on English, written as each file kind; it
is extended on Russian. OpenAI's real o200k_base is extended in ``test_o200k`` (from the
``bpe-openai`` wheel in the test extra: no download).
"""

from __future__ import annotations

import base64
import gzip
import json
import sqlite3
from importlib import resources
from pathlib import Path

import pytest
from cli_helpers import one_error_line, run
from conftest import EN, RU, ZH, fixture_text

from bpe_store.errors import InputError, ResumeMismatch
from bpe_store.formats.bases import load_base
from bpe_store.tokenizer.export import export_store, load_tiktoken
from bpe_store.tokenizer.tokenizer import Tokenizer
from bpe_store.training.train import train

EOT = "<|endoftext|>"
BASE_VOCAB = 700
ADDED = 300


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The base as every kind: ``store``, ``tiktoken`` (ranks file), ``hf`` (tokenizer.json),
    ``gpt2`` (directory) and ``new`` (the Russian corpus the bases are extended on)."""
    d = tmp_path_factory.mktemp("bases")
    en = d / "en.txt"
    en.write_text(fixture_text(EN, 200_000) + EOT + fixture_text(EN, 50_000, offset=300_000), encoding="utf-8")
    db = d / "base.db"
    train([en], db, BASE_VOCAB, [EOT], workers=1)
    for fmt in ("hf", "gpt2", "tiktoken"):
        export_store(db, fmt, d / fmt)
    ru = d / "ru.txt"
    ru.write_text(fixture_text(RU, 150_000) + EOT + fixture_text(EN, 20_000, offset=600_000), encoding="utf-8")
    return {"store": db, "tiktoken": d / "tiktoken" / "tokenizer.tiktoken", "hf": d / "hf" / "tokenizer.json",
            "gpt2": d / "gpt2", "new": ru}


def samples() -> list[str]:
    return [fixture_text(RU, 40_000, offset=300_000), fixture_text(EN, 40_000, offset=800_000),
            fixture_text(ZH, 20_000, offset=100_000), f"end{EOT}  two  spaces\n\n\tand 12345 it's 🙃"]


def _extend(files: dict[str, Path], kind: str, tmp: Path, **kw) -> Path:
    db = tmp / f"ext-{kind}.db"
    extend = (f"{files['store']}@{BASE_VOCAB - 257 - 100}" if kind == "store@t" else
              files["tiktoken"].parent if kind == "tiktoken" else files[kind])
    n = load_base(extend).n_tokens
    train([files["new"]], db, n + ADDED, [], extend=str(extend), workers=1, **kw)
    return db


@pytest.mark.parametrize("kind", ["store", "store@t", "tiktoken", "hf", "gpt2"])
def test_every_kind_keeps_ids_and_merges(files, kind, tmp_path):
    base_db = files["store"]
    db = _extend(files, kind, tmp_path)
    base = Tokenizer.from_store(base_db)
    ext = Tokenizer.from_store(db)
    kept = BASE_VOCAB - 100 if kind == "store@t" else BASE_VOCAB
    # every base token keeps its id, every base merge its place; the new ids follow the base's largest
    assert {i: ext.vocab[i] for i in range(kept)} == {i: base.vocab[i] for i in range(kept)}
    assert ext.merges[:kept - 257] == base.merges[:kept - 257]
    assert sorted(ext.vocab) == list(range(kept + ADDED))
    # the base's prefix of the extended store is the base itself
    prefix = Tokenizer.from_store(db, vocab_size=kept)
    trimmed = Tokenizer.from_store(base_db, vocab_size=kept)
    for text in samples():
        assert prefix.encode(text) == trimmed.encode(text)
    con = sqlite3.connect(db)
    origins = dict(con.execute("SELECT origin, count(*) FROM model_vocab GROUP BY origin").fetchall())
    kind_row = con.execute("SELECT kind, merges, next_id FROM base").fetchone()
    con.close()
    assert origins == {"base": kept, "trained": ADDED}
    assert kind_row == (kind.split("@")[0], kept - 257, kept)


def test_exports_agree_and_tiktoken_appends(files, tmp_path):
    tiktoken = pytest.importorskip("tiktoken")  # noqa: F841 - load_tiktoken needs it
    tokenizers = pytest.importorskip("tokenizers")
    db = _extend(files, "tiktoken", tmp_path)
    ours = Tokenizer.from_store(db)
    for fmt in ("hf", "gpt2", "tiktoken"):
        export_store(db, fmt, tmp_path / fmt)
    tt = load_tiktoken(tmp_path / "tiktoken")
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "hf" / "tokenizer.json"))
    gpt2 = Tokenizer.from_files(tmp_path / "gpt2" / "vocab.json", tmp_path / "gpt2" / "merges.txt", [EOT])
    for text in samples():
        want = ours.encode(text)
        assert tt.encode(text, allowed_special="all") == want
        assert hf.encode(text).ids == want
        assert gpt2.encode(text) == want
    # append-only: the base's ranks file is the first lines of the extension's
    base_lines = files["tiktoken"].read_bytes()
    assert (tmp_path / "tiktoken" / "tokenizer.tiktoken").read_bytes().startswith(base_lines)


def test_every_new_token_is_reachable(files, tmp_path):
    """Each new token comes out of encoding some text: a word of the corpus it was learned on, or
    its own bytes (a token a later merge always swallowed)."""
    db = _extend(files, "hf", tmp_path)
    ours = Tokenizer.from_store(db)
    con = sqlite3.connect(db)
    words = [w for (w,) in con.execute("SELECT bytes FROM words")]
    con.close()
    seen: set[int] = set()
    for w in words:
        seen.update(ours.encode(w.decode("utf-8")))
    new = range(BASE_VOCAB, BASE_VOCAB + ADDED)
    for i in new:
        if i not in seen:
            assert ours._bpe(ours.vocab[i]) == [i]  # merge order rebuilds it from its bytes
            text = ours.vocab[i].decode("utf-8", "strict")
            assert ours.encode(text) == [i], (i, ours.vocab[i])
    assert len(seen.intersection(new)) > ADDED // 2


@pytest.mark.slow
def test_o200k(tmp_path):
    """OpenAI's o200k_base extended on Russian: its ids kept (specials at 199999 and 200018 too),
    new ids from 200019, the prefix encodes as tiktoken does, the exports agree and the tiktoken
    export begins with OpenAI's very file."""
    tiktoken = pytest.importorskip("tiktoken")
    pytest.importorskip("bpe_openai")
    ru = tmp_path / "ru.txt"
    ru.write_text(fixture_text(RU, 300_000), encoding="utf-8")
    db = tmp_path / "ext.db"
    result = train([ru], db, 200_000 + 200, [], extend="o200k_base", workers=1)
    assert len(result.vocab) == 200_200 and max(result.vocab) == 200_018 + 200
    assert result.vocab[199_999] == EOT.encode() and result.vocab[200_018] == b"<|endofprompt|>"
    data = gzip.decompress((resources.files("bpe_openai") / "data" / "o200k_base.tiktoken.gz").read_bytes())
    ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in data.splitlines() if line)}
    assert all(result.vocab[r] == t for t, r in ranks.items())
    enc = tiktoken.Encoding("o200k", pat_str=Tokenizer.from_store(db).pattern, mergeable_ranks=ranks,
                            special_tokens={EOT: 199_999, "<|endofprompt|>": 200_018})
    prefix = Tokenizer.from_store(db, vocab_size=200_000)
    ext = Tokenizer.from_store(db)
    for text in samples():
        assert prefix.encode(text) == enc.encode(text, allowed_special="all")
    export_store(db, "tiktoken", tmp_path / "tt")
    assert (tmp_path / "tt" / "tokenizer.tiktoken").read_bytes().startswith(data)
    tt = load_tiktoken(tmp_path / "tt")
    for text in samples():
        assert tt.encode(text, allowed_special="all") == ext.encode(text)
    ru_text = samples()[0]
    assert len(ext.encode(ru_text)) < len(prefix.encode(ru_text))  # the new merges help on Russian


def _bad(tmp_path: Path, name: str, content: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return p


def _hf_doc(files) -> dict:
    return json.loads(files["hf"].read_text(encoding="utf-8"))


@pytest.mark.parametrize("case", ["truncated ranks", "corrupt ranks", "ranks with holes", "wordpiece",
                                  "normalizer", "merges do not rebuild", "specials collide",
                                  "special is a token", "gpt2 merge missing", "no such base"])
def test_bad_bases_exit_2_and_leave_nothing(files, tmp_path, case):
    ranks = files["tiktoken"].read_bytes()
    extra: list[str] = []
    if case == "truncated ranks":
        base = _bad(tmp_path, "t.tiktoken", ranks[: len(ranks) // 2 - 3])
    elif case == "corrupt ranks":
        base = _bad(tmp_path, "c.tiktoken", ranks.replace(b" 300\n", b" 3x0\n"))
    elif case == "ranks with holes":
        lines = ranks.splitlines()
        base = _bad(tmp_path, "h.tiktoken", b"\n".join(lines[:400] + lines[401:]) + b"\n")
    elif case in ("wordpiece", "normalizer", "merges do not rebuild", "specials collide", "special is a token"):
        doc = _hf_doc(files)
        if case == "wordpiece":
            doc["model"]["type"] = "WordPiece"
        elif case == "normalizer":
            doc["normalizer"] = {"type": "NFC"}
        elif case == "merges do not rebuild":
            del doc["model"]["merges"][300]
        elif case == "specials collide":
            doc["added_tokens"].append({**doc["added_tokens"][0], "content": "<|other|>"})
        else:
            doc["added_tokens"][0]["content"] = "a"
        base = _bad(tmp_path, "tokenizer.json", json.dumps(doc))
    elif case == "gpt2 merge missing":
        d = tmp_path / "gpt2"
        d.mkdir()
        (d / "vocab.json").write_bytes((files["gpt2"] / "vocab.json").read_bytes())
        lines = (files["gpt2"] / "merges.txt").read_text(encoding="utf-8").split("\n")
        (d / "merges.txt").write_text("\n".join(lines[:50] + lines[51:]), encoding="utf-8")
        base = d
    else:
        base = tmp_path / "nothing_here"
    db = tmp_path / "ext.db"
    r = run("train", files["new"], "--db", db, "--vocab-size", "2000", "--extend", base, *extra)
    assert r.exit_code == 2, (case, r.stderr)
    assert one_error_line(r.stderr), r.stderr
    assert not db.exists() and not list(tmp_path.glob("ext.db*"))


def test_base_fixes_pattern_and_specials(files, tmp_path):
    db = tmp_path / "ext.db"
    r = run("train", files["new"], "--db", db, "--vocab-size", "2000", "--extend", files["hf"], "--pattern", "o200k")
    assert r.exit_code == 2 and "fixes the pattern" in r.stderr and one_error_line(r.stderr)
    r = run("train", files["new"], "--db", db, "--vocab-size", "2000", "--extend", files["hf"], "--special", "<|x|>")
    assert r.exit_code == 2 and "fixes them" in r.stderr
    r = run("train", files["new"], "--db", db, "--vocab-size", "500", "--extend", files["hf"])
    assert r.exit_code == 2 and "smaller than the base" in r.stderr
    assert not db.exists()
    # the base's own special tokens may be named again
    r = run("train", files["new"], "--db", db, "--vocab-size", str(BASE_VOCAB + 20), "--extend", files["hf"],
            "--special", EOT, "-q")
    assert r.exit_code == 0, r.stderr


def test_resume_with_another_base_is_refused(files, tmp_path):
    db = _extend(files, "hf", tmp_path)
    with pytest.raises(ResumeMismatch, match="another base"):
        train([files["new"]], db, BASE_VOCAB + ADDED, [], extend=str(files["store"]) + "@300")
    with pytest.raises(ResumeMismatch, match="another base"):
        train([files["new"]], db, BASE_VOCAB + ADDED, [])
    r = run("train", files["new"], "--db", db, "--vocab-size", str(BASE_VOCAB + ADDED), "--extend", files["gpt2"])
    assert r.exit_code == 3, r.stderr
    # the same base resumes (a finished store answers at once) and a larger vocab size continues
    more = train([files["new"]], db, BASE_VOCAB + ADDED + 50, [], extend=str(files["hf"]))
    once = train([files["new"]], tmp_path / "once.db", BASE_VOCAB + ADDED + 50, [], extend=str(files["hf"]))
    assert more.merges == once.merges and more.vocab == once.vocab and more.merge_counts == once.merge_counts


def test_a_tiktoken_file_needs_its_pattern_given(files):
    with pytest.raises(InputError):
        load_base(files["tiktoken"])


RUNNER = """
import sys
from bpe_store import train
train([sys.argv[1]], sys.argv[2], int(sys.argv[4]), [], extend=sys.argv[3], workers=2, chunk_size=100_000,
      count_flush_seconds=0.0, checkpoint_merges=10, checkpoint_seconds=0.2)
"""


@pytest.mark.slow
def test_kill_9_in_every_phase_resumes_identically(files, tmp_path):
    """A run extending a base, killed at random moments (counting, the start of merging, merging)
    and run again with the same command each time, ends with the uninterrupted run's result."""
    import random
    import subprocess
    import sys
    import time

    from conftest import ROOT
    from test_resume import phase_of

    corpus = tmp_path / "ru.txt"
    corpus.write_text(fixture_text(RU, 599_000) + fixture_text(ZH, 300_000), encoding="utf-8")
    base = str(files["hf"])
    size = BASE_VOCAB + 400
    expected = train([corpus], tmp_path / "whole.db", size, [], extend=base, workers=1)
    db = tmp_path / "killed.db"
    args = [sys.executable, "-c", RUNNER, str(corpus), str(db), base, str(size)]
    rng = random.Random(37)
    seen = []
    for phase, n in [("counting", 1), ("counting", 3), ("merging", BASE_VOCAB - 257),
                     ("merging", BASE_VOCAB - 257 + 60), ("merging", BASE_VOCAB - 257 + 250)]:
        proc = subprocess.Popen(args, cwd=ROOT)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            now_phase, chunks, merges = phase_of(db)
            if (phase == "counting" and chunks >= n) or (phase == "merging" and now_phase not in ("counting", "none")
                                                         and merges >= n):
                break
            time.sleep(0.01)
        time.sleep(rng.uniform(0, 0.05))
        proc.kill()  # SIGKILL: no cleanup at all
        proc.wait()
        seen.append(phase_of(db))
    assert subprocess.run(args, cwd=ROOT, timeout=300).returncode == 0
    result = train([corpus], db, size, [], extend=base)  # a finished store answers at once
    assert (result.merges, result.merge_counts, result.vocab) == (expected.merges, expected.merge_counts,
                                                                  expected.vocab)
    phases = [p for p, _, _ in seen]
    assert phases.count("counting") >= 1 and phases.count("merging") >= 2, seen


def test_native_tiktoken_merges_equal_the_python_rule(files, tmp_path):
    """The native derivation of a ranks file's merges is the Python statement of tiktoken's rule,
    on a store's export and OpenAI's cl100k_base; a token the rule cannot reach is refused by both."""
    from bpe_store.formats.bases import BaseError, _tiktoken_merge_list, tiktoken_merge_list
    from bpe_store.formats.openai_ranks import find_ranks_file, read_ranks

    pytest.importorskip("bpe_openai")
    for path in (files["tiktoken"], find_ranks_file("cl100k_base")):
        ranks = read_ranks(path)
        assert tiktoken_merge_list(ranks, ranks.vocab(), path) == _tiktoken_merge_list(ranks.mergeable(), path)
    lines = [base64.b64encode(bytes([b])) + b" %d" % b for b in range(256)] + [base64.b64encode(b"xyz") + b" 256"]
    bad = _bad(tmp_path, "xyz.tiktoken", b"\n".join(lines) + b"\n")
    ranks = read_ranks(bad)
    with pytest.raises(BaseError, match="not built from two lower-ranked tokens"):
        tiktoken_merge_list(ranks, ranks.vocab(), bad)
    with pytest.raises(BaseError, match="not built from two lower-ranked tokens"):
        _tiktoken_merge_list(ranks.mergeable(), bad)
    r = run("train", files["new"], "--db", tmp_path / "x.db", "--vocab-size", "300", "--extend", bad)
    assert r.exit_code == 2 and one_error_line(r.stderr) and not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("which", ["export", pytest.param("cl100k_base", marks=pytest.mark.slow),
                                   pytest.param("o200k_base", marks=pytest.mark.slow)])
def test_a_ranks_base_read_natively_equals_the_python_reading(files, which):
    """A ranks base whose merges are made natively in the store's ids (``_native_ranks_base``) is the
    base the Python path makes from the merges' bytes (``_checked`` on ``_tiktoken_merge_list``), and
    its store rows are those ``base_rows`` derives from the bytes: a store's export and OpenAI's
    cl100k_base and o200k_base (slow: the Python rule takes seconds on them), special tokens included."""
    import dataclasses

    from bpe_store.formats.bases import _checked, _tiktoken_merge_list
    from bpe_store.formats.openai_ranks import ENCODINGS, find_ranks_file, read_ranks
    from bpe_store.training.extend import base_rows

    if which == "export":
        cases = [(files["tiktoken"].parent, files["tiktoken"], {EOT: 0})]
    else:
        pytest.importorskip("bpe_openai")
        cases = [(which, find_ranks_file(which), dict(ENCODINGS[which].special_tokens))]
    for spec, path, specials in cases:
        native = load_base(spec)
        assert native.store_merges is not None and native.specials == specials
        ranks = read_ranks(path)
        python = _checked("tiktoken", native.source, native.sha256, native.pattern, ranks.vocab(),
                          _tiktoken_merge_list(ranks.mergeable(), path), specials)
        assert dataclasses.replace(native, store_merges=None, merge_bytes=None) == python
        assert native.merges[:3] == python.merges[:3] and native.merges[-1] == python.merges[-1]
        assert base_rows(native) == base_rows(python)


def test_from_store_builds_the_tokenizer_its_vocab_and_merges_make(files, tmp_path):
    """``Tokenizer.from_store`` makes its tables from the merge log's ids (``Tables._from_result``):
    the same tables, ids and encodings as ``Tokenizer(vocab, merges, specials)`` of the same store,
    for a plain store and a based one (whose ids are the base's)."""
    from bpe_store.tokenizer.tokenizer import load_store

    for db in (files["store"], _extend(files, "tiktoken", tmp_path)):
        fast = Tokenizer.from_store(db)
        vocab, merges, specials, pattern = load_store(db)
        slow = Tokenizer(vocab, merges, specials, pattern=pattern)
        for name in ("vocab", "merges", "special_tokens", "pattern", "_id_of", "_special_id", "_byte_id", "_table"):
            assert getattr(fast, name) == getattr(slow, name), name
        for text in samples():
            assert fast.encode(text) == slow.encode(text) == Tokenizer(vocab, merges, specials, pattern=pattern,
                                                                       native=False).encode(text)
