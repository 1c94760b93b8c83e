"""``bpe-store eval`` and ``train --eval``: every metric against an independent computation (plain
Python, and tokenization-scorer for Rényi efficiency), on a store's prefixes and on every other
kind of tokenizer; the rows in SQL; the errors and their exit codes."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import regex
from cli_helpers import ROOT, SPECIAL, json_lines, run

from bpe_store import Tokenizer, export_store, train
from bpe_store.inspection import candidates as cands
from bpe_store.inspection import evaluation as ev
from bpe_store.inspection import heldout as ho

CORPUS = ROOT / "tests" / "fixtures" / "enwiki-1M.txt"
RU = ROOT / "tests" / "fixtures" / "tinystories-ru-600K.txt"
ZH = ROOT / "tests" / "fixtures" / "zhwiki-600K.txt"
VOCAB = 700


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("eval") / "run.db"
    train([CORPUS], db, VOCAB, [SPECIAL])
    return db


@pytest.fixture(scope="module")
def held_out(tmp_path_factory) -> Path:
    """Three scripts, a special token, words across lines: 60 KB."""
    p = tmp_path_factory.mktemp("held") / "held.txt"
    en = CORPUS.read_bytes()[-30_000:].decode("utf-8", "ignore")
    ru = RU.read_bytes()[:15_000].decode("utf-8", "ignore")
    zh = ZH.read_bytes()[:15_000].decode("utf-8", "ignore")
    p.write_text(f"  Ünïcödé\t{en}{SPECIAL}{ru}\n\n{zh}  ", encoding="utf-8")
    return p


def _plain(ids: list[int], text: str, vocab_size: int) -> dict:
    """The metrics by their definitions, in plain Python."""
    words = len(regex.findall(r"\S+", text))
    return {"bytes_per_token": len(text.encode()) / len(ids), "chars_per_token": len(text) / len(ids),
            "tokens_per_word": len(ids) / words, "vocab_used": len(set(ids)) / vocab_size,
            "tokens_unused": vocab_size - len(set(ids)), "tokens": len(ids)}


def _scorer(ids: list[int], alpha: float) -> float:
    scorer = pytest.importorskip("tokenization_scorer")
    return scorer.score(" ".join(map(str, ids)), metric="renyi", power=alpha)


def _check(row: dict, ids: list[int], text: str, vocab_size: int, alpha: float = 2.5) -> None:
    for k, v in _plain(ids, text, vocab_size).items():
        assert row[k] == pytest.approx(v, rel=1e-12), k
    assert row["renyi_efficiency"] == pytest.approx(_scorer(ids, alpha), abs=1e-9)


def test_every_size_of_a_store_against_plain_python_and_tokenization_scorer(store, held_out):
    text = held_out.read_text(encoding="utf-8")
    sizes = [257, 300, 500, VOCAB]
    rows = ev.evaluate([cands.store_candidate(store, sizes)], ho.read_heldout([held_out])).rows
    assert [r.vocab_size for r in rows] == sizes and {r.grp for r in rows} == {"all"}
    for r in rows:
        ids = Tokenizer.from_store(store, vocab_size=r.vocab_size).encode(text)
        _check(r.metrics, ids, text, r.vocab_size)


def test_the_one_encode_path_equals_an_encode_per_size(store, held_out):
    cand = cands.store_candidate(store, every=50)
    assert cand.parts is not None and cand.sizes[-1] == VOCAB and cand.sizes[0] == 300
    fast = ev.evaluate([cand], ho.read_heldout([held_out])).rows
    cand.parts = None  # forces an encode per size
    slow = ev.evaluate([cand], ho.read_heldout([held_out])).rows
    assert [r.metrics for r in fast] == [r.metrics for r in slow]


def test_a_prefix_equals_a_store_trained_to_that_size(store, held_out, tmp_path):
    small = tmp_path / "small.db"
    train([CORPUS], small, 400, [SPECIAL])
    held = ho.read_heldout([held_out])
    a = ev.evaluate([cands.store_candidate(store, [400])], held).rows[0]
    b = ev.evaluate([cands.store_candidate(small)], held).rows[0]
    assert a.metrics == b.metrics
    data = held_out.read_bytes()
    for size in (257, 400, VOCAB):  # the native encoder built from the store's ids, as the Tokenizer
        enc = cands.store_candidate(store, [size]).make(size)
        assert enc(data).tolist() == Tokenizer.from_store(store, size).encode(data.decode()), size
    assert cands.store_candidate(store, [400]).make(400)(data).tolist() == Tokenizer.from_store(small).encode(
        data.decode())


@pytest.mark.parametrize("fmt", ["tiktoken", "hf", "gpt2"])
def test_every_export_measures_as_the_store(store, held_out, tmp_path, fmt):
    out = tmp_path / fmt
    export_store(store, fmt, out)
    spec = (f"{next(out.glob('*.tiktoken'))}=gpt2" if fmt == "tiktoken"
            else str(out / ("tokenizer.json" if fmt == "hf" else "vocab.json")))
    plain = tmp_path / "plain.txt"  # GPT-2 files and a ranks file do not name the special token
    plain.write_text(held_out.read_text(encoding="utf-8").replace(SPECIAL, "\n"), encoding="utf-8")
    held = ho.read_heldout([plain])
    mine = ev.evaluate([cands.store_candidate(store)], held).rows[0].metrics
    other = ev.evaluate([cands.parse_candidate(spec)], held).rows[0].metrics
    for k in ("bytes_per_token", "chars_per_token", "tokens_per_word", "renyi_efficiency", "tokens"):
        assert other[k] == pytest.approx(mine[k], rel=1e-12), k


def test_openai_encoding_by_name(held_out):
    pytest.importorskip("bpe_openai")
    tiktoken = pytest.importorskip("tiktoken")
    import base64
    import gzip
    from importlib import resources

    from bpe_store.text.pretokenize import PATTERNS

    data = gzip.decompress((resources.files("bpe_openai") / "data" / "cl100k_base.tiktoken.gz").read_bytes())
    ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in data.splitlines() if line)}
    enc = tiktoken.Encoding("cl100k_base", pat_str=PATTERNS["cl100k"], mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 100257, "<|fim_prefix|>": 100258,
                                            "<|fim_middle|>": 100259, "<|fim_suffix|>": 100260,
                                            "<|endofprompt|>": 100276})
    text = held_out.read_text(encoding="utf-8")
    row = ev.evaluate([cands.parse_candidate("cl100k_base")], ho.read_heldout([held_out])).rows[0]
    ids = enc.encode(text, allowed_special="all")
    assert row.tokenizer == "cl100k_base" and row.kind == "tiktoken"
    _check(row.metrics, ids, text, row.vocab_size)


def test_groups_add_up_and_parity(store, held_out, tmp_path):
    held = ho.read_heldout([held_out])
    rows = {r.grp: r.metrics for r in ev.evaluate([cands.store_candidate(store)], held, by="script").rows}
    assert {"all", "Latin", "Cyrillic", "CJK"} <= set(rows)
    parts = [m for g, m in rows.items() if g != "all"]
    assert sum(m["tokens"] for m in parts) == rows["all"]["tokens"]
    assert sum(m["bytes"] for m in parts) == rows["all"]["bytes"]
    # characters and words per group (from the per-byte index) add up to the text's (counted apart)
    assert sum(m["chars_per_token"] * m["tokens"] for m in parts) == pytest.approx(rows["all"]["chars_per_token"]
                                                                                  * rows["all"]["tokens"])
    assert sum(m["tokens"] / m["tokens_per_word"] for m in parts if m["tokens_per_word"]) == pytest.approx(
        rows["all"]["tokens"] / rows["all"]["tokens_per_word"])
    assert max(m["parity"] for m in parts) == 1.0 and rows["all"]["parity"] is None
    best = max(parts, key=lambda m: m["bytes_per_token"])
    assert best["parity"] == 1.0 and rows["Latin"] is best  # an English-trained store
    # by file: each file's row is the file measured alone
    other = tmp_path / "ru.txt"
    other.write_bytes(RU.read_bytes()[-20_000:].decode("utf-8", "ignore").encode())
    both = ev.evaluate([cands.store_candidate(store)], ho.read_heldout([held_out, other]), by="file").rows
    alone = ev.evaluate([cands.store_candidate(store)], ho.read_heldout([other])).rows[0]
    by = {r.grp: r.metrics for r in both}
    assert by[f"file:{other}"]["bytes_per_token"] == alone.metrics["bytes_per_token"]
    assert by["all"]["tokens"] == by[f"file:{held_out}"]["tokens"] + alone.metrics["tokens"]


def test_token_groups_follow_the_letters():
    text = "Hello, мир! 中文 123"
    index = ho.TextIndex.of(text.encode())
    lengths = np.array([len(t.encode()) for t in ["Hello", ",", " м", "ир", "!", " 中", "文", " 123"]])
    pos = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    groups = [ho.SCRIPTS[g] for g in ev._token_groups(lengths, pos, index)]
    assert groups == ["Latin", "Latin", "Cyrillic", "Cyrillic", "Cyrillic", "CJK", "CJK", "CJK"]


def test_renyi_efficiency_matches_the_package_at_other_orders():
    ids = [1, 1, 2, 3, 3, 3, 4, 5, 5, 9] * 7 + [11]
    for alpha in (0.5, 2.0, 2.5, 3.0):
        assert ev.renyi_efficiency(np.bincount(ids), alpha) == pytest.approx(_scorer(ids, alpha), abs=1e-12)
    # the package's own alpha = 1 (Shannon) reads its input twice and fails; Shannon by hand
    p = np.bincount(ids)[np.bincount(ids) > 0] / len(ids)
    assert ev.renyi_efficiency(np.bincount(ids), 1.0) == pytest.approx(-(p * np.log2(p)).sum() / np.log2(len(p)))
    assert ev.renyi_efficiency(np.bincount([4, 4, 4]), 2.5) is None


# -- the command line ---------------------------------------------------------------------------

def test_cli_json_rows_and_sql(store, held_out, tmp_path):
    db = tmp_path / "copy.db"
    db.write_bytes(store.read_bytes())
    r = run("eval", db, "cl100k_base", "--on", held_out, "--sizes", "300,500", "--json")
    assert r.exit_code == 0, r.output
    rows = json_lines(r.stdout)
    assert [(x["tokenizer"], x["vocab_size"]) for x in rows] == [(str(db), 300), (str(db), 500),
                                                                  ("cl100k_base", 100261)]
    for x in rows:
        assert {"tokenizer", "vocab_size", "bytes_per_token", "chars_per_token", "tokens_per_word",
                "renyi_efficiency", "vocab_used"} <= set(x)
    con = sqlite3.connect(db)
    got = con.execute("SELECT tokenizer, vocab_size, bytes_per_token FROM eval_curve ORDER BY tokenizer,"
                      " vocab_size").fetchall()
    assert [(t, v) for t, v, _ in got] == [("cl100k_base", 100261), ("self", 300), ("self", 500)]
    assert got[1][2] == pytest.approx(rows[0]["bytes_per_token"])
    digest = con.execute("SELECT DISTINCT heldout_digest FROM evaluations").fetchall()
    assert digest == [(ho.read_heldout([held_out]).digest,)]
    # shown by status and show evals
    st = run("status", db, "--json")
    assert json.loads(st.stdout)["eval"]["vocab_size"] == 500
    shown = run("show", db, "evals", "--format", "jsonl")
    assert shown.exit_code == 0 and len(json_lines(shown.stdout)) == 3
    # --csv, and a table by script
    csv = run("eval", db, "--on", held_out, "--csv", "--no-record", "--by", "script")
    assert csv.exit_code == 0 and csv.stdout.splitlines()[0].startswith("tokenizer,vocab_size,grp,")


@pytest.mark.parametrize("args, says", [
    (["--sizes", "9999"], "larger than"),
    (["--sizes", "100"], "too small"),
    (["--sizes", "3x"], "not a vocabulary size"),
    (["--every", "0"], "at least 1"),
])
def test_cli_refuses_bad_sizes(store, held_out, args, says):
    r = run("eval", store, "--on", held_out, "--no-record", *args)
    assert r.exit_code == 2 and says in r.stderr


def test_cli_refuses_bad_held_out_and_tokenizers(store, tmp_path):
    empty, bad, ok = tmp_path / "empty.txt", tmp_path / "bad.txt", tmp_path / "ok.txt"
    empty.write_text("")
    bad.write_bytes(b"abc \xff\xfe def")
    ok.write_text("some text")
    r = run("eval", store, "--on", empty, "--no-record")
    assert r.exit_code == 2 and "empty" in r.stderr
    r = run("eval", store, "--on", bad, "--no-record")
    assert r.exit_code == 2 and "UTF-8" in r.stderr
    r = run("eval", store, "--on", bad, "--no-record", "--invalid-utf8", "replace", "--json")
    assert r.exit_code == 0 and json_lines(r.stdout)[0]["tokens"] > 0
    unreadable = tmp_path / "x.tiktoken"
    unreadable.write_text("not base64 at all\n")
    r = run("eval", f"{unreadable}=gpt2", "--on", ok)
    assert r.exit_code == 2
    r = run("eval", tmp_path / "missing.tiktoken", "--on", ok)
    assert r.exit_code == 2 and "no such" in r.stderr
    r = run("eval", tmp_path / "ok.txt", "--on", ok, "--sizes", "300")
    assert r.exit_code == 2


def test_train_records_a_series_and_a_resume_continues_it(held_out, tmp_path):
    db = tmp_path / "series.db"
    r = run("train", CORPUS, "--db", db, "--vocab-size", 600, "--special", SPECIAL, "--eval", held_out,
            "--eval-every", 100, "--quiet")
    assert r.exit_code == 0, r.output
    con = sqlite3.connect(db)
    q = "SELECT vocab_size, bytes_per_token FROM eval_curve WHERE tokenizer = 'self' ORDER BY vocab_size"
    first = con.execute(q).fetchall()
    assert [s for s, _ in first] == [357, 457, 557, 600]
    r = run("train", CORPUS, "--db", db, "--vocab-size", 800, "--special", SPECIAL, "--eval", held_out,
            "--eval-every", 100, "--quiet")
    assert r.exit_code == 0, r.output
    second = con.execute(q).fetchall()
    assert [s for s, _ in second] == [357, 457, 557, 600, 657, 757, 800]
    assert second[:4] == first  # the old points stay as they were
    text = held_out.read_text(encoding="utf-8")
    for size, bpt in second:
        assert bpt == pytest.approx(len(text.encode()) / len(Tokenizer.from_store(db, size).encode(text)))
    assert {r[0] for r in con.execute("SELECT recorded_by FROM evaluations")} == {"train"}
    # a resume with another held-out text starts a second series beside the first, complete at once
    other = tmp_path / "other.txt"
    other.write_text(text[::2], encoding="utf-8")
    r = run("train", CORPUS, "--db", db, "--vocab-size", 800, "--special", SPECIAL, "--eval", other,
            "--eval-every", 100, "--quiet")
    assert r.exit_code == 0, r.output
    series = con.execute("SELECT heldout, count(DISTINCT vocab_size) FROM evaluations GROUP BY heldout_digest"
                         " ORDER BY heldout").fetchall()
    assert series == sorted([(str(held_out), 7), (str(other), 6)])  # every 100 merges and the end


def test_train_eval_every_needs_eval(tmp_path):
    r = run("train", CORPUS, "--db", tmp_path / "x.db", "--vocab-size", 300, "--eval-every", 10)
    assert r.exit_code == 2 and "--eval" in r.stderr and not (tmp_path / "x.db").exists()


def test_counts_at_sizes_unmerges_like_the_report():
    from bpe_store.inspection.report import tokens_per_prefix

    rng = np.random.default_rng(0)
    first = 258
    lefts = np.array([97, 98, first, first + 1, 99, first + 2])
    rights = np.array([98, 97, first + 1, 99, first, first])
    counts = np.zeros(first + len(lefts), dtype=np.int64)
    counts[first:] = rng.integers(0, 5, len(lefts))
    counts[97:100] = rng.integers(0, 5, 3)
    totals = tokens_per_prefix(counts, lefts.tolist(), rights.tolist(), 2)
    at = ev.counts_at_sizes(counts, (lefts, rights, first), range(first, first + len(lefts) + 1))
    assert [int(at[first + k].sum()) for k in range(len(lefts) + 1)] == totals.tolist()
    # every size spells the same bytes: a count left at an id the size cuts off would be lost
    lengths = np.ones(first + len(lefts), dtype=np.int64)
    for k in range(len(lefts)):
        lengths[first + k] = lengths[lefts[k]] + lengths[rights[k]]
    spelled = int((counts * lengths).sum())
    assert spelled > 0 and all(int((at[s] * lengths[:s]).sum()) == spelled for s in at)


# -- residue tokens -----------------------------------------------------------------------------

def test_token_use_counts_final_tokens_of_the_words_by_the_trainers_rule(store):
    from bpe_store.bpe import word_splitter
    from bpe_store.inspection.residue import RESIDUE_RATIO, residues, token_use

    rows, n_merges = token_use(store)
    con = sqlite3.connect(store)
    log = con.execute('SELECT "left", "right", token, count FROM merges ORDER BY rank').fetchall()
    split = word_splitter([(a, b, t) for a, b, t, _ in log], 1)
    finals: Counter[int] = Counter()
    for word, count in con.execute("SELECT bytes, count FROM words"):
        for t in split(bytes(word)):
            finals[t] += count
    made: Counter[int] = Counter()
    for _, _, t, c in log:
        made[t] += c
    assert n_merges == len(log) == VOCAB - 257
    assert rows == [(t, made[t], finals[t]) for t in sorted(made)]
    few = residues(rows)
    assert few and all(f / m < RESIDUE_RATIO for _, m, f in few)
    assert [f / m for _, m, f in few] == sorted(f / m for _, m, f in few)


def test_cli_residues_recorded_and_shown(store, held_out, tmp_path):
    db = tmp_path / "res.db"
    db.write_bytes(store.read_bytes())
    r = run("eval", db, "--on", held_out, "--residues")
    assert r.exit_code == 0, r.output
    assert "residues" in r.stderr
    shown = run("sql", db, "SELECT * FROM residue_tokens LIMIT 5", "--format", "jsonl")
    rows = json_lines(shown.stdout)
    assert len(rows) == 5 and rows == sorted(rows, key=lambda x: x["final_ratio"])
    con = sqlite3.connect(db)
    assert con.execute("SELECT count(*) FROM token_use").fetchone()[0] == VOCAB - 257


def test_the_report_draws_the_recorded_curves_and_lists_residues(store, held_out, tmp_path):
    pytest.importorskip("matplotlib")
    from bpe_store.inspection import report

    db = tmp_path / "rep.db"
    db.write_bytes(store.read_bytes())
    assert run("eval", db, "cl100k_base", "--on", held_out, "--every", 100).exit_code == 0
    data = report.gather(db, held_out)
    curve = data["evals"]["curve"]
    assert [r["vocab_size"] for r in curve if r["tokenizer"] == "self"] == [300, 400, 500, 600, VOCAB]
    assert any(r["tokenizer"] == "cl100k_base" for r in curve)
    assert data["evals"]["residues"]["count"] > 0
    page = report.render_html(data)
    assert 'id="evaluations"' in page and "Residue tokens" in page and page.count("<svg") >= 4


def test_words_are_regexs_non_space_runs():
    text = "a\x1cb  c\u3000d\u00a0e\x85f\n\tg\x1fh" + "\xff".join(["x y", "z"])
    index = ho.TextIndex.of(text.encode("utf-8").replace("\xff".encode(), b"\xff"))
    docs = text.split("\xff")
    assert index.words == sum(len(regex.findall(r"\S+", d)) for d in docs)
    assert index.words == int(index.per_byte()[2].sum())
