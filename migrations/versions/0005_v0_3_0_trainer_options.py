"""bpe_store 0.3.0: the trainer options ``min_frequency`` and ``max_token_length`` in ``run``.

Revision ID: v0_3_0_trainer_options
Revises: v0_3_0_input_kinds
Create Date: 2026-11-23

``min_frequency``: words counted fewer times take part in no pair (1, the default, leaves every
word in: CS336's semantics). ``max_token_length``: no merge makes a token longer than this many
bytes (NULL: no limit). Both define the run's result, so a resume must give the same values.
A store made before this revision trained with neither, which is what the defaults say.

Plain ``ADD COLUMN`` rather than batch mode: SQLite adds a column with a constant default in
place, and batch mode would rebuild ``run`` without its CHECK constraints (SQLAlchemy does not
reflect them).
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_3_0_trainer_options"
down_revision = "v0_3_0_input_kinds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run", sa.Column("min_frequency", sa.Integer, nullable=False, server_default="1"))
    op.add_column("run", sa.Column("max_token_length", sa.Integer, nullable=True))


def downgrade() -> None:
    # SQLite >= 3.35 drops a column in place
    op.execute("ALTER TABLE run DROP COLUMN max_token_length")
    op.execute("ALTER TABLE run DROP COLUMN min_frequency")
