"""bpe_store 0.3.0: ``run.max_pretoken_bytes``, the longest pre-token counted whole.

Revision ID: v0_3_0_max_pretoken_bytes
Revises: v0_3_0_trainer_options
Create Date: 2026-11-23

A pre-token longer than this many bytes (a line of letters without whitespace) is counted as
pieces of at most this many bytes, cut at UTF-8 character starts (``pretokenize.
split_long_pretoken``). It defines the run's result, so a resume must give the same value.
Stores from before this revision split nothing: they get NULL, "no limit", which is exactly how
they were counted, so they resume and continue unchanged.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_3_0_max_pretoken_bytes"
down_revision = "v0_3_0_trainer_options"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN: no table rebuild, the CHECK constraints of `run` stay as they are
    op.add_column("run", sa.Column("max_pretoken_bytes", sa.Integer, nullable=True))


def downgrade() -> None:
    # SQLite >= 3.35 drops a column in place; batch mode would rebuild `run` without its CHECKs
    op.execute("ALTER TABLE run DROP COLUMN max_pretoken_bytes")
