"""bpe_store 0.3.0: ``run.state_merges``, how many merges the words' tokens and pair counts reflect.

Revision ID: v0_3_0_merge_log
Revises: v0_3_0_words_by_count
Create Date: 2026-11-26

Merging now logs its merges (``merges``, ``vocab``, the progress) about every second in a small
transaction, and rewrites the words' tokens and ``pair_counts`` only at its full checkpoints
(every ``checkpoint_seconds`` and at the end): a kill loses about a second of merging instead of
up to a batch, and a resume applies the logged merges to the words before it goes on. Between two
full checkpoints ``merges`` runs ahead of ``words.tokens`` and ``pair_counts``; this column says
which merge rank those two reflect (the first ``state_merges`` merges). Stores from before this
revision rewrote everything at every checkpoint, so theirs is every merge they hold.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_3_0_merge_log"
down_revision = "v0_3_0_words_by_count"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN: no table rebuild, the CHECK constraints of `run` stay as they are
    op.add_column("run", sa.Column("state_merges", sa.Integer, nullable=False, server_default="0"))
    op.execute("UPDATE run SET state_merges = (SELECT count(*) FROM merges)")


def downgrade() -> None:
    # an older bpe_store takes words.tokens and pair_counts to reflect every merge
    ahead = op.get_bind().exec_driver_sql(
        "SELECT (SELECT count(*) FROM merges) > state_merges FROM run").scalar()
    if ahead:
        raise RuntimeError("the store's merges run ahead of its words' tokens and pair counts (a run "
                           "stopped between full checkpoints): finish or resume it with this bpe_store "
                           "before downgrading")
    op.execute("ALTER TABLE run DROP COLUMN state_merges")
