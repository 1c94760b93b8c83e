"""bpe_store 0.2.0: a ``sessions`` table, one row per training session.

Revision ID: v0_2_0_sessions
Revises: v0_1_0_initial
Create Date: 2026-11-23

A session is one process that trained in the store: its pid, host, argv, bpe_store version,
when it started and ended, how it ended, and the merges done at each end. ``bpe-store status``
uses it to say who holds the store now and to show the run's history; a session that never
ended (``ended_at`` NULL) and no longer holds the store was killed.

An older store upgrades in place (batch mode, one transaction); its history before this
revision is summed up in one session row built from the ``run`` and ``checkpoints`` tables.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_2_0_sessions"
down_revision = "v0_1_0_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("pid", sa.Integer),                     # NULL for the summary of older history
        sa.Column("host", sa.Text),
        sa.Column("argv", sa.Text),                       # JSON list of strings
        sa.Column("bpe_store_version", sa.Text),
        sa.Column("started_at", sa.Text, nullable=False),
        sa.Column("ended_at", sa.Text),                   # NULL while running, or if killed
        sa.Column("outcome", sa.Text),                    # done / interrupted / failed / unknown
        sa.Column("merges_start", sa.Integer),
        sa.Column("merges_end", sa.Integer),
    )
    # what the store did before sessions were recorded, as one row
    op.execute(
        """INSERT INTO sessions (pid, host, argv, bpe_store_version, started_at, ended_at, outcome,
                                 merges_start, merges_end)
           SELECT NULL, NULL, NULL, bpe_store_version, created_at, updated_at,
                  CASE WHEN phase = 'done' THEN 'done' ELSE 'unknown' END,
                  0, (SELECT count(*) FROM merges)
           FROM run WHERE id = 1""")
    with op.batch_alter_table("sessions") as batch:
        batch.create_index("sessions_by_start", ["started_at"])


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index("sessions_by_start")
    op.drop_table("sessions")
