"""The migration files sort in the order they apply: ``NNNN_`` then the revision id, the numbers
following the chain of ``down_revision``s (a new migration takes the next number)."""

from __future__ import annotations

import re

from conftest import ROOT

VERSIONS = ROOT / "migrations" / "versions"


def _chain() -> list[str]:
    """The revision ids from the first to the head, following each file's ``down_revision``."""
    down_of = {}
    for path in VERSIONS.glob("*.py"):
        text = path.read_text(encoding="utf-8")
        rev = re.search(r'^revision = "([^"]+)"', text, re.M).group(1)
        down = re.search(r'^down_revision = (None|"([^"]+)")', text, re.M).group(2)
        down_of[rev] = down
    order, nxt = [], {d: r for r, d in down_of.items()}
    while (rev := nxt.get(order[-1] if order else None)) is not None:
        order.append(rev)
    assert len(order) == len(down_of), "the revisions are not one chain"
    return order


def test_the_files_sort_in_the_order_they_apply():
    names = sorted(p.stem for p in VERSIONS.glob("*.py"))
    assert names == [f"{i:04d}_{rev}" for i, rev in enumerate(_chain(), 1)]
