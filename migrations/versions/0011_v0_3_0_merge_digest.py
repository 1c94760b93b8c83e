"""bpe_store 0.3.0: ``checkpoints.merge_digest``, a running digest over the merge log.

Revision ID: v0_3_0_merge_digest
Revises: v0_3_0_next_pairs
Create Date: 2026-11-26

Every checkpoint records the BLAKE2b digest of the merge log as it commits (``bpe_store.store.
digest``); resuming, exporting and loading a tokenizer recompute it from ``merges`` and compare
with the newest checkpoint's, so a merge changed by hand is refused instead of carried into a
result. Older checkpoints get NULL, except the newest, whose digest this upgrade computes from the
log as it stands (when that checkpoint records every merge the store holds, as bpe_store writes
them): an upgraded store is checked from then on like a new one.
"""

import hashlib
import sys
from array import array
from itertools import chain

import sqlalchemy as sa
from alembic import op

revision = "v0_3_0_merge_digest"
down_revision = "v0_3_0_next_pairs"
branch_labels = None
depends_on = None


# copied from bpe_store.store.digest (migrations are history: copied, not imported)
def _merge_digest(rows: list) -> str:
    h = hashlib.blake2b(digest_size=16, person=b"bpe_store.merges")
    if rows:
        a = array("q", chain.from_iterable(rows))
        if sys.byteorder != "little":  # pragma: no cover
            a.byteswap()
        h.update(a)
    return h.hexdigest()


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN: no table rebuild
    op.add_column("checkpoints", sa.Column("merge_digest", sa.Text, nullable=True))
    bind = op.get_bind()
    last = bind.exec_driver_sql("SELECT id, merges_done FROM checkpoints ORDER BY id DESC LIMIT 1").first()
    if last is None:
        return
    rows = [tuple(r) for r in bind.exec_driver_sql(
        'SELECT rank, "left", "right", token, count FROM merges ORDER BY rank')]
    if last[1] != len(rows) or not all(type(v) is int for r in rows for v in r):
        return  # not as bpe_store wrote it: left without a digest, which every check then reports
    bind.exec_driver_sql("UPDATE checkpoints SET merge_digest = ? WHERE id = ?", (_merge_digest(rows), last[0]))


def downgrade() -> None:
    op.execute("ALTER TABLE checkpoints DROP COLUMN merge_digest")
