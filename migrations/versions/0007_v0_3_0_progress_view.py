"""bpe_store 0.3.0: the ``progress`` view answers at once on any store, and works at all.

Revision ID: v0_3_0_progress_view
Revises: v0_3_0_max_pretoken_bytes
Create Date: 2026-11-23

Two faults of the v0_1_0 view: ``json_array_length(run.special_tokens)`` is refused by SQLite
when ``trusted_schema`` is off ("unsafe use of json_array_length()"), which is how bpe_store
opens every store, so ``SELECT * FROM progress`` failed in ``bpe-store sql``; and
``(SELECT count(*) FROM words)`` scanned the whole words table (7 M rows, seconds, on an
OpenWebText store). Now: the special tokens are the vocabulary's ``kind = 'special'`` rows,
and the number of words is ``max(words.id)``: bpe_store gives words the ids 1, 2, 3, ... in
order and never deletes one (``Store.add_word_counts``; a resume refuses a store where that
does not hold), so the largest id is the count, read from the end of the table's B-tree.
Views only: upgrading is instant.
"""

from alembic import op

revision = "v0_3_0_progress_view"
down_revision = "v0_3_0_max_pretoken_bytes"
branch_labels = None
depends_on = None

NEW = """CREATE VIEW progress AS
       SELECT r.phase,
              (SELECT count(*) FROM chunks WHERE counted = 1) AS chunks_counted,
              (SELECT count(*) FROM chunks) AS chunks_total,
              (SELECT count(*) FROM merges) AS merges_done,
              r.vocab_size - 256 - (SELECT count(*) FROM vocab WHERE kind = 'special') AS merges_target,
              (SELECT coalesce(max(id), 0) FROM words) AS words,
              (SELECT max(at) FROM checkpoints) AS last_checkpoint
       FROM run r"""

# The v0_1_0_initial definition, for downgrade (migrations are history: copied, not imported).
OLD = """CREATE VIEW progress AS
       SELECT r.phase,
              (SELECT count(*) FROM chunks WHERE counted = 1) AS chunks_counted,
              (SELECT count(*) FROM chunks) AS chunks_total,
              (SELECT count(*) FROM merges) AS merges_done,
              r.vocab_size - 256 - json_array_length(r.special_tokens) AS merges_target,
              (SELECT count(*) FROM words) AS words,
              (SELECT max(at) FROM checkpoints) AS last_checkpoint
       FROM run r"""


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS progress")
    op.execute(NEW)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS progress")
    op.execute(OLD)
