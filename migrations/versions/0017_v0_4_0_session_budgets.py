"""bpe_store 0.4.0: each session records its reader budgets (``sessions.reader_memory_words``,
``sessions.reader_wal_bytes``).

Revision ID: v0_4_0_session_budgets
Revises: v0_4_0_words_digest
Create Date: 2026-11-28

While a reader pins the store's WAL, a run keeps up to ``reader_memory_words`` words of counts in
memory and then writes into the WAL while it is under ``reader_wal_bytes`` (docs/reliability.md,
"A long reader"). ``status`` shows the running (or last) session's budgets from these columns.
Older sessions get NULL: they ran before the budgets existed, or did not record them.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_4_0_session_budgets"
down_revision = "v0_4_0_words_digest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN: no table rebuild
    op.add_column("sessions", sa.Column("reader_memory_words", sa.Integer, nullable=True))
    op.add_column("sessions", sa.Column("reader_wal_bytes", sa.Integer, nullable=True))


def downgrade() -> None:
    op.execute("ALTER TABLE sessions DROP COLUMN reader_wal_bytes")
    op.execute("ALTER TABLE sessions DROP COLUMN reader_memory_words")
