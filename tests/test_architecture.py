"""The package's structure, checked: module names that cannot shadow the standard library."""

from __future__ import annotations

import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "bpe_store"


def test_no_module_shadows_the_standard_library():
    # A module named like a stdlib one (bpe_store/inspect.py did) is imported instead of the stdlib's
    # by a script run from inside the package directory, and confuses readers and tools.
    ours = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert sorted(ours & sys.stdlib_module_names) == []
