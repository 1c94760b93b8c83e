"""bpe_store 0.3.0: superword stores (SuperBPE's stage 2): ``run.superword_from``, ``run.stage1_pattern``,
``run.superword_max_words`` and the view ``superword_merges``.

Revision ID: v0_3_0_superword
Revises: v0_3_0_source_digest
Create Date: 2026-11-28

A superword store's first ``superword_from`` merges are stage 1's, copied from a store of
``stage1_pattern`` (the transition point t); its words are the pieces of stage 2's pattern (the
store's ``pattern``), and its merges from rank t on are superword merges, none of whose tokens
holds ": " or spans more than ``superword_max_words`` words (docs/superword.md). The three
columns are NULL in any other store. ``superword_merges`` lists the merge log's superword merges,
with how many words each token spans.

Plain ``ADD COLUMN``: SQLite adds a nullable column in place.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_3_0_superword"
down_revision = "v0_3_0_source_digest"
branch_labels = None
depends_on = None

VIEW = """CREATE VIEW superword_merges AS
       SELECT m.rank, m."left", m."right", m.token, m.count, m.token_id,
              m.rank - r.superword_from + 1 AS superword_rank
       FROM merge_log m JOIN run r ON m.rank >= r.superword_from
       ORDER BY m.rank"""


def upgrade() -> None:
    op.add_column("run", sa.Column("superword_from", sa.Integer, nullable=True))
    op.add_column("run", sa.Column("stage1_pattern", sa.Text, nullable=True))
    op.add_column("run", sa.Column("superword_max_words", sa.Integer, nullable=True))
    op.execute(VIEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS superword_merges")
    # SQLite >= 3.35 drops a column in place
    op.execute("ALTER TABLE run DROP COLUMN superword_max_words")
    op.execute("ALTER TABLE run DROP COLUMN stage1_pattern")
    op.execute("ALTER TABLE run DROP COLUMN superword_from")
