"""``bpe-store report``: the numbers behind the plots, and the page as a browser renders it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import ROOT, SPECIAL, run

from bpe_store.inspection import report as report_mod
from bpe_store.tokenizer.tokenizer import Tokenizer

CORPUS = ROOT / "tests" / "fixtures" / "enwiki-1M.txt"
VOCAB = 700


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("report") / "run.db"
    r = run("train", CORPUS, "--db", db, "--vocab-size", VOCAB, "--special", SPECIAL, "--quiet")
    assert r.exit_code == 0, r.output
    return db


@pytest.fixture(scope="module")
def held_out(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("held") / "valid.txt"
    text = CORPUS.read_bytes()[-200_000:].decode("utf-8", "ignore")
    p.write_text("Ünïcödé 中文 текст" + SPECIAL + text, encoding="utf-8")
    return p


def test_compression_at_every_prefix_equals_encoding_at_that_prefix(store, held_out):
    pytest.importorskip("matplotlib")
    data = report_mod.gather(store, held_out)
    text = held_out.read_text(encoding="utf-8")
    sizes = data["vocab_sizes"]
    assert sizes[0] == 257 and sizes[-1] == VOCAB and len(data["tokens"]) == len(sizes)
    for v in (257, 258, 300, 400, 555, VOCAB):
        expected = len(Tokenizer.from_store(store, vocab_size=v).encode(text))
        assert data["tokens"][v - 257] == expected, v
    assert data["tokens"] == sorted(data["tokens"], reverse=True)
    assert data["bytes_per_token"][-1] == pytest.approx(len(text.encode()) / data["tokens"][-1])


def test_tokens_per_prefix_handles_repeated_parts():
    # merges: (a,b)->258, (258,258)->259, (259,a)->260 ; counts of the final tokens
    a, b = 2 + 97, 2 + 98
    c = np.zeros(261, dtype=np.int64)
    c[260], c[258], c[a] = 2, 1, 3
    got = report_mod.tokens_per_prefix(c, [a, 258, 259], [b, 258, a], 2).tolist()
    # bytes: 2*(abab a)=10 + 2 (ab) + 3 (a) = 15; merge 0 applied 2*2+1=5, merge 1 twice, merge 2 twice
    assert got == [15, 10, 8, 6] and got[-1] == int(c.sum())


def test_script_of_tokens():
    assert report_mod.script_of(" Ελλάδα".encode()) == "Greek"
    assert report_mod.script_of("한국".encode()) == "Hangul"
    assert report_mod.script_of(b"...") == "punctuation/symbols"


def test_default_sample_is_whole_lines_from_many_places(tmp_path):
    f = tmp_path / "c.txt"
    f.write_text("".join(f"line {i:05d}\n" for i in range(20000)))
    s = report_mod.default_sample([str(f)], sample_bytes=4000, places=8)
    lines = s.splitlines()
    assert all(re.fullmatch(r"line \d{5}", x) for x in lines) and 200 < len(lines) < 400
    nums = [int(x[5:]) for x in lines]
    assert nums[0] == 0 and nums[-1] == 19999  # from the start to the end of the input


def test_report_without_matplotlib_says_how_to_install(store, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *a, **k):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError("No module named 'matplotlib'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    r = run("report", store, "-o", tmp_path / "r.html")
    assert r.exit_code == 2 and not (tmp_path / "r.html").exists()
    assert r.stderr.strip() == ("error: bpe-store report draws its plots with matplotlib, which is not installed: "
                                "pip install 'bpe-store[report]'")


def test_report_refuses_bad_targets(store, tmp_path):
    pytest.importorskip("matplotlib")
    assert run("report", store, "-o", tmp_path).exit_code == 2
    r = run("report", store, "--held-out", tmp_path / "nope.txt", "-o", tmp_path / "r.html")
    assert r.exit_code == 2 and "no such file" in r.stderr and not (tmp_path / "r.html").exists()


@pytest.fixture(scope="module")
def page(store, held_out, tmp_path_factory) -> Path:
    pytest.importorskip("matplotlib")
    out = tmp_path_factory.mktemp("page") / "report.html"
    r = run("report", store, "--held-out", held_out, "-o", out)
    assert r.exit_code == 0, r.output
    assert f"{out}: report of {VOCAB - 257} merges" in r.stderr
    return out


def test_the_page_is_self_contained(page):
    text = page.read_text(encoding="utf-8")
    assert text.count("<svg") == 3
    # nothing fetched at view time: no external src/href, stylesheet, script or CSS url()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<link" not in text and "<script src" not in text and "@import" not in text
    assert not re.search(r"""url\(\s*['"]?(?!#)""", text)  # only url(#id): the SVG's own clip paths
    assert not re.search(r"""href\s*=\s*["'](?!#)""", text)
    for heading in ("Compression at every vocabulary size", "Compression by script, beside other tokenizers",
                    "Tokens to look at", "Merge count against rank", "Token length by script",
                    "Frequent words still split into many tokens", "The run", "Evaluations: which vocabulary size"):
        assert f">{heading}</h2>" in text
    assert str(CORPUS.resolve()) in text and "Sessions" in text


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        exe = shutil.which(name)
        if exe:
            return exe
    return None


def test_the_page_renders_in_headless_chromium(page, tmp_path):
    exe = _chromium()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI: .ci/run installs Debian's package `chromium`")
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium); CI installs it")
    flags = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2400"]
    url = page.resolve().as_uri()
    shot = tmp_path / "shot.png"
    r = subprocess.run([*flags, f"--screenshot={shot}", url], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("L"), dtype=np.int16)
    assert img.shape[0] >= 2000 and img.shape[1] >= 1000
    dark = (img < 128).mean()
    assert 0.005 < dark < 0.5, dark  # text and plot lines drawn, not a blank or black page
    assert len(np.unique(img)) > 20  # anti-aliased text and colored plots, not one or two flat colors
    dom = subprocess.run([*flags, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert html.count("<svg") == 3 and len(re.findall(r"<path\b", html)) > 20
    assert len(re.findall(r"<h2>", html)) == 8 and "<h1>bpe-store report: run.db</h1>" in html
    assert len(re.findall(r"<tr>", html)) > 10


# -- by script, beside other tokenizers; tokens to look at ---------------------------------------


def test_byte_classes_and_by_script():
    text = "Hi мир, 中文 42!\n\n"
    classes, starts = report_mod.byte_classes(text)
    assert len(classes) == len(text.encode()) and int(starts.sum()) == len(text)
    # tokens: "Hi", " мир", ",", " 中", "文", " 42", "!", "\n\n"; then a partial-UTF-8 split of one char
    pieces = ["Hi", " мир", ",", " 中", "文", " 42", "!", "\n\n"]
    got = report_mod.by_script(classes, starts, [len(p.encode()) for p in pieces])
    assert {k: v["tokens"] for k, v in got.items() if v["tokens"]} == {
        "Latin": 1, "Cyrillic": 1, "punctuation and symbols": 2, "CJK": 2, "digits": 1, "whitespace": 1}
    assert got["CJK"]["bytes"] == 7 and got["CJK"]["bytes_per_token"] == 3.5
    lengths = [2, 7, 1, 2, 2, 3, 3, 1, 2]  # "Hi", " мир", ",", " \xe4", "\xb8\xad", "文", " 42", "!", "\n\n"
    assert sum(lengths) == len(text.encode())
    got = report_mod.by_script(classes, starts, lengths)
    # " \xe4" starts 中, "\xb8\xad" starts nothing and is inside 中: both CJK, beside 文
    assert got["CJK"]["tokens"] == 3 and got["whitespace"]["tokens"] == 1
    with pytest.raises(Exception, match="spell"):
        report_mod.by_script(classes, starts, [1])


def _openai_ranks(name: str) -> Path:
    pytest.importorskip("bpe_openai")
    from importlib import resources

    return Path(str(resources.files("bpe_openai") / "data" / f"{name}.tiktoken.gz"))


def test_compare_with_openai_ranks_and_a_tokenizer_json(store, held_out, tmp_path):
    pytest.importorskip("matplotlib")
    tiktoken = pytest.importorskip("tiktoken")
    cl100k, o200k = _openai_ranks("cl100k_base"), _openai_ranks("o200k_base")
    r = run("export", store, "--format", "hf", "-o", tmp_path / "hf")
    assert r.exit_code == 0, r.output
    data = report_mod.gather(store, held_out, compare=[str(cl100k), f"{o200k}=o200k",
                                                       str(tmp_path / "hf" / "tokenizer.json")])
    text = held_out.read_text(encoding="utf-8")
    n = len(text.encode())
    ours, cl, o2, hf = data["compare"]
    assert ours["kind"] == "store" and ours["tokens"] == data["tokens"][-1]
    # OpenAI's ranks: the counts tiktoken gives (ordinary text: no special token looked for)
    import gzip

    for got, path, pattern in ((cl, cl100k, "cl100k"), (o2, o200k, "o200k")):
        from bpe_store.text.pretokenize import PATTERNS

        ranks = {__import__("base64").b64decode(a): int(b) for a, b in
                 (line.split() for line in gzip.decompress(path.read_bytes()).splitlines() if line)}
        enc = tiktoken.Encoding(path.name, pat_str=PATTERNS[pattern], mergeable_ranks=ranks, special_tokens={})
        assert got["tokens"] == len(enc.encode_ordinary(text)), path
        assert got["bytes_per_token"] == pytest.approx(n / got["tokens"])
        assert got["vocab_size"] == len(ranks)
    assert cl["pattern"] == "cl100k" and o2["pattern"] == "o200k"
    # the store's own export as tokenizer.json: the same tokens, so the same numbers
    assert hf["kind"] == "tokenizer.json" and hf["tokens"] == ours["tokens"] and hf["by_script"] == ours["by_script"]
    for c in data["compare"]:
        assert sum(v["bytes"] for v in c["by_script"].values()) == n
        assert sum(v["tokens"] for v in c["by_script"].values()) == c["tokens"]
    assert ours["by_script"]["Cyrillic"]["tokens"] > 0 and ours["by_script"]["CJK"]["tokens"] > 0


def test_compare_refuses_what_it_cannot_measure(store, held_out, tmp_path):
    pytest.importorskip("matplotlib")
    ranks = tmp_path / "mine.tiktoken"
    ranks.write_bytes(b"".join(__import__("base64").b64encode(bytes([i])) + b" %d\n" % i for i in range(256)))
    r = run("report", store, "--held-out", held_out, "--compare", ranks, "-o", tmp_path / "r.html")
    assert r.exit_code == 2 and "which pattern" in r.stderr and not (tmp_path / "r.html").exists()
    r = run("report", store, "--held-out", held_out, "--compare", f"{ranks}=gpt2", "-o", tmp_path / "r.html")
    assert r.exit_code == 0, r.output
    r = run("report", store, "--held-out", held_out, "--compare", tmp_path / "no.tiktoken", "-o", tmp_path / "x.html")
    assert r.exit_code == 2 and "no such file" in r.stderr
    for pattern, message in [("gpt-2", "(did you mean gpt2?)"), ("([", "does not compile: unterminated character set")]:
        r = run("report", store, "--held-out", held_out, "--compare", f"{ranks}={pattern}", "-o", tmp_path / "p.html")
        assert r.exit_code == 2 and message in r.stderr and not (tmp_path / "p.html").exists(), r.output


def test_token_tables(store, held_out):
    pytest.importorskip("matplotlib")
    data = report_mod.gather(store, held_out)
    tt = data["tokens_tables"]
    tok = Tokenizer.from_store(store)
    counts = np.bincount(tok.encode_to_array(held_out.read_text(encoding="utf-8")), minlength=VOCAB)
    learned = range(257, VOCAB)
    lengths = sorted((len(tok.vocab[t]) for t in learned), reverse=True)
    assert [r["n_bytes"] for r in tt["longest"]] == lengths[:len(tt["longest"])]
    assert [r["rank"] for r in tt["last_learned"]] == list(range(VOCAB - 257 - 1, VOCAB - 257 - 51, -1))
    partial = [t for t in learned if not report_mod._decodes(tok.vocab[t])]
    assert tt["partial_utf8_total"] == len(partial) and [r["id"] for r in tt["partial_utf8"]] == partial[:40]
    unused = [t for t in learned if counts[t] == 0]
    assert tt["unused_total"] == len(unused) and [r["id"] for r in tt["unused"]] == unused[:100]
    assert all(r["held_out"] == counts[r["id"]] for r in tt["longest"] + tt["last_learned"])


def test_the_page_names_the_pattern_and_asks_for_cjk_fonts(page):
    text = page.read_text(encoding="utf-8")
    assert "<td>gpt2 <span" in text  # the pattern's name, its regex beside it
    assert text.count("Noto Sans CJK SC") >= 4  # the page's CSS and every plot's text
    assert "font-family: 'DejaVu Sans'" not in text
