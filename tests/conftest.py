"""Shared test fixtures: where the corpora are, bundled text, and fresh store paths.

Tests that only need some text read it from tests/fixtures (``fixture_text``, ``SMALL_TEXT``).
Tests that need the shared corpora (the CS336 reference fixtures, multi-megabyte slices) FAIL
where ../shared is missing, so CI cannot pass by skipping them; set
``BPE_STORE_ALLOW_NO_SHARED=1`` to skip them instead (a machine without the corpora).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
#: ../shared beside the checkout (CI puts it there); BPE_STORE_SHARED overrides.
SHARED = Path(os.environ.get("BPE_STORE_SHARED", ROOT.parent / "shared"))
CORPORA = SHARED / "corpora"
CS336 = CORPORA / "cs336"
FIXTURES = ROOT / "tests" / "fixtures"
#: Opt-out: skip, rather than fail, the tests that need ../shared when it is absent.
ALLOW_NO_SHARED_ENV = "BPE_STORE_ALLOW_NO_SHARED"
#: Bundled slices (see tests/fixtures/README.md): English, Russian and Chinese text.
EN, RU, ZH = "enwiki-1M.txt", "tinystories-ru-600K.txt", "zhwiki-600K.txt"
#: A small English corpus file (~128 KB, whole documents ended by <|endoftext|>).
SMALL_TEXT = FIXTURES / "enwiki-128K.txt"

settings.register_profile("default", max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "100")),
                          deadline=None)
settings.load_profile("default")


def shared_file(*parts: str) -> Path:
    """A file under ../shared/corpora. Where it is absent the test fails, unless
    BPE_STORE_ALLOW_NO_SHARED=1 says to skip it."""
    p = CORPORA.joinpath(*parts)
    if not p.exists():
        if os.environ.get(ALLOW_NO_SHARED_ENV, "") not in ("", "0"):
            pytest.skip(f"{p} is not available ({ALLOW_NO_SHARED_ENV} is set)")
        pytest.fail(f"{p} is not available: put the shared corpora at {SHARED} (or point "
                    f"BPE_STORE_SHARED at them), or set {ALLOW_NO_SHARED_ENV}=1 to skip the tests "
                    "that need them", pytrace=False)
    return p


def fixture_text(name: str, size: int, offset: int = 0) -> str:
    """``size`` bytes of the bundled text tests/fixtures/``name`` from ``offset``, cut back to
    whole characters (a cut-off character at either end is dropped)."""
    p = FIXTURES / name
    if offset + size > p.stat().st_size:
        raise ValueError(f"{p} has {p.stat().st_size} bytes; {offset} + {size} asked")
    with open(p, "rb") as f:
        f.seek(offset)
        data = f.read(size)
    return data.decode("utf-8", "ignore")


def corpus_slice(name: str, size: int, offset: int = 0) -> str:
    """``size`` bytes of a shared corpus from ``offset``, cut back to whole characters."""
    with open(shared_file(name), "rb") as f:
        f.seek(offset)
        data = f.read(size)
    return data.decode("utf-8", "ignore")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A path where a new store can be created."""
    return tmp_path / "run.db"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The store tests' input, one file per test module: the first 30,000 bytes of CS336's
    corpus.en. Modules that need another input define their own ``corpus``, which wins."""
    p = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    p.write_bytes(shared_file("cs336", "corpus.en").read_bytes()[:30_000])
    return p
