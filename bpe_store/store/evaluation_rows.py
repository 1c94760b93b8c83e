"""The store's ``evaluations`` table: held-out measurements of tokenizers (``bpe-store eval``,
``train --eval``), one row per metric, and their view ``eval_curve`` (one row per tokenizer, size
and group). Evaluations are not training state: nothing a resume, an export or the integrity
digest reads depends on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .connection import now

if TYPE_CHECKING:  # pragma: no cover
    from .store import Store

#: The revision from which a store has the table.
SINCE = "v0_4_0_evaluations"
#: The metrics of a row of ``eval_curve``, in its column order (``renyi_alpha`` is the α used).
METRICS = ("bytes_per_token", "chars_per_token", "tokens_per_word", "renyi_efficiency", "renyi_alpha",
           "vocab_used", "tokens_unused", "parity", "tokens", "bytes")
#: The name of this store's own merge log in the ``tokenizer`` column.
SELF = "self"


@dataclass(frozen=True)
class Measurement:
    """One tokenizer at one vocabulary size on one group of held-out text: ``metrics`` is
    ``{metric: value or None}`` with keys from ``METRICS``."""

    tokenizer: str
    kind: str
    source: str
    vocab_size: int
    heldout: str
    heldout_digest: str
    grp: str
    metrics: dict[str, float | None] = field(default_factory=dict)


def has_table(store: Store) -> bool:
    """Whether the store's schema has ``evaluations`` (a store made before ``SINCE`` has not)."""
    from .schemas import REVISIONS

    return store.revision is not None and REVISIONS.index(store.revision) >= REVISIONS.index(SINCE)


def record(store: Store, rows: Sequence[Measurement], recorded_by: str) -> None:
    """Write ``rows`` in one transaction; a measurement taken again replaces the old one."""
    stamp = now()
    params = [(m.tokenizer, m.kind, m.source, m.vocab_size, m.heldout, m.heldout_digest, m.grp, metric,
               None if value is None else float(value), recorded_by, stamp)
              for m in rows for metric, value in m.metrics.items()]
    with store.transaction():
        store.executemany(
            "INSERT OR REPLACE INTO evaluations (tokenizer, kind, source, vocab_size, heldout, heldout_digest,"
            " grp, metric, value, recorded_by, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", params)


def sizes_recorded(store: Store, heldout_digest: str) -> set[int]:
    """The vocabulary sizes of this store's own merge log already measured on that held-out text."""
    rows = store.sql("SELECT DISTINCT vocab_size FROM evaluations WHERE tokenizer = ? AND heldout_digest = ?",
                     (SELF, heldout_digest)).fetchall()
    return {r[0] for r in rows}


def curve(store: Store, grp: str | None = "all", limit: int = -1, offset: int = 0) -> list[dict[str, Any]]:
    """Rows of ``eval_curve`` (of group ``grp``; None: every group), this store's own first, each
    tokenizer by vocabulary size."""
    where, params = ("", ()) if grp is None else ("WHERE grp = ?", (grp,))
    res = store.sql(f"SELECT * FROM eval_curve {where} ORDER BY tokenizer != 'self', tokenizer, heldout_digest,"
                    f" grp, vocab_size LIMIT ? OFFSET ?", (*params, limit, offset))
    return list(res.mappings())


def latest(store: Store) -> dict[str, Any] | None:
    """The newest measurement of this store's own merge log on all of its held-out text, or None."""
    res = store.sql("SELECT * FROM eval_curve WHERE tokenizer = ? AND grp = 'all'"
                    " ORDER BY created_at DESC, vocab_size DESC LIMIT 1", (SELF,))
    return res.mappings().first()
