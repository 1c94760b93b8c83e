"""bpe_store 0.3.0: merges are logged between checkpoints; ``run.state_merges`` says what the words hold.

Revision ID: v0_3_0_merge_log
Revises: v0_3_0_words_by_count
Create Date: 2026-11-26

Merging now logs its merges (``merges``, ``vocab``, a ``checkpoints`` row) about every second in a
small transaction, and writes the words' tokens and ``pair_counts`` only at its full checkpoints
(every ``checkpoint_seconds`` while it runs): a kill loses about a second of merging, and a resume
applies the logged merges to the words before it goes on. A finished run keeps its result
(``merges``, ``vocab``) and its inputs (``words`` with their counts), not the merging's working
state: ``pair_counts`` is emptied and ``words.tokens`` kept only for the most frequent words (a
word's tokens are its split under the merges). ``run.state_merges`` says which merges
``words.tokens`` and ``pair_counts`` reflect (the first ``state_merges``), or NULL once they are
not kept. Stores from before this
revision rewrote everything at every checkpoint, the last one included: theirs is every merge.

``top_words.n_tokens`` is NULL where a finished run kept no tokens, no longer the word's byte count.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_3_0_merge_log"
down_revision = "v0_3_0_words_by_count"
branch_labels = None
depends_on = None

NEW = """CREATE VIEW top_words AS
       SELECT CAST(bytes AS TEXT) AS word, count, length(bytes) AS n_bytes,
              CASE WHEN tokens IS NOT NULL THEN length(tokens) / 4
                   WHEN (SELECT state_merges FROM run) IS NOT NULL THEN length(bytes) END AS n_tokens,
              hex(bytes) AS word_hex
       FROM words ORDER BY count DESC, id"""

# The v0_3_0_words_by_count definition, for downgrade.
OLD = """CREATE VIEW top_words AS
       SELECT CAST(bytes AS TEXT) AS word, count, length(bytes) AS n_bytes,
              CASE WHEN tokens IS NULL THEN length(bytes) ELSE length(tokens) / 4 END AS n_tokens,
              hex(bytes) AS word_hex
       FROM words ORDER BY count DESC, id"""


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN: no table rebuild, the CHECK constraints of `run` stay as they are
    op.add_column("run", sa.Column("state_merges", sa.Integer, nullable=True))
    op.execute("UPDATE run SET state_merges = (SELECT count(*) FROM merges)")
    op.execute("DROP VIEW IF EXISTS top_words")
    op.execute(NEW)


def downgrade() -> None:
    # an older bpe_store takes words.tokens and pair_counts to reflect every merge
    behind = op.get_bind().exec_driver_sql(
        "SELECT state_merges IS NULL OR state_merges < (SELECT count(*) FROM merges) FROM run").scalar()
    if behind:
        raise RuntimeError("the store's words' tokens and pair counts do not reflect all its merges "
                           "(a finished run does not keep them, a stopped one may lag behind its "
                           "merge log): an older bpe_store cannot use it")
    op.execute("DROP VIEW IF EXISTS top_words")
    op.execute(OLD)
    op.execute("ALTER TABLE run DROP COLUMN state_merges")
