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
    for heading in ("Compression at every vocabulary size", "Merge count against rank", "Token length by script",
                    "Frequent words still split into many tokens", "The run"):
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
    assert len(re.findall(r"<h2>", html)) == 5 and "<h1>bpe-store report: run.db</h1>" in html
    assert len(re.findall(r"<tr>", html)) > 10
