"""Shared test fixtures: where the corpora are, and fresh store paths."""

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

settings.register_profile("default", max_examples=int(os.environ.get("HYPOTHESIS_EXAMPLES", "100")),
                          deadline=None)
settings.load_profile("default")


def shared_file(*parts: str) -> Path:
    """A file under ../shared/corpora; the test is skipped (not failed) where it is absent."""
    p = CORPORA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} is not available")
    return p


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
