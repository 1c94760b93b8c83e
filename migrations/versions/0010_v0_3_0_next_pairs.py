"""bpe_store 0.3.0: a finished run keeps its most frequent pair counts; ``run.pairs_merges`` says which.

Revision ID: v0_3_0_next_pairs
Revises: v0_3_0_merge_log
Create Date: 2026-11-26

A finished run emptied ``pair_counts``, so ``top_pairs`` could not say what would merge next.
It now keeps the counts of its most frequent pairs (those at least as frequent as the
100,000th, so that ties never depend on ids): the first row of ``top_pairs`` is the merge that
continuing by one token makes. ``run.pairs_merges`` says how many merges the rows of
``pair_counts`` follow: every live pair while merging (then it equals ``state_merges``), the most
frequent ones once done; NULL when the store holds none (counting is not over, or an older
bpe_store finished the run and kept none). This upgrade sets it to ``state_merges``, which is
exactly what such a store's ``pair_counts`` follows.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_3_0_next_pairs"
down_revision = "v0_3_0_merge_log"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN: no table rebuild, the CHECK constraints of `run` stay as they are
    op.add_column("run", sa.Column("pairs_merges", sa.Integer, nullable=True))
    op.execute("UPDATE run SET pairs_merges = state_merges")


def downgrade() -> None:
    # an older bpe_store refuses a finished store that holds pair counts
    op.execute("DELETE FROM pair_counts WHERE (SELECT state_merges FROM run) IS NULL")
    op.execute("ALTER TABLE run DROP COLUMN pairs_merges")
