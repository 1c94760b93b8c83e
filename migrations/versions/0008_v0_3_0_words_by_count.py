"""bpe_store 0.3.0: ``top_words`` answers at once on a big store, its ties in a stated order.

Revision ID: v0_3_0_words_by_count
Revises: v0_3_0_progress_view
Create Date: 2026-11-23

``SELECT * FROM top_words LIMIT 20`` sorted every word by count: 0.5 s of CPU at 7 M words (an
OpenWebText store), whatever the LIMIT, since SQLite must see every count to know the top 20.
An index ``words_by_count`` on ``words(count DESC)`` answers it by reading 20 entries, but it
would have to be maintained by every counting flush (a flush moves ~1 M words' counts), so the
trainer builds it once counting is over and the counts never change again (``Store.start_merging``),
and only on a store of 1,000,000 words or more (below that the sort takes < 0.1 s and the index
would cost a whole run more than it saves). The index is optional in the schema check: a store
has it or not. This upgrade builds it for a store past counting with that many words.

``top_words`` was ordered by ``count DESC`` alone; ties came out in id order (first seen first)
because SQLite's sorter kept the table's order. Now the view says so: ``ORDER BY count DESC, id``,
which the index gives without sorting (its entries are in count order, then rowid order).
"""

from alembic import op

revision = "v0_3_0_words_by_count"
down_revision = "v0_3_0_progress_view"
branch_labels = None
depends_on = None

# copied from bpe_store.store.store (migrations are history: copied, not imported)
WORDS_BY_COUNT = "CREATE INDEX words_by_count ON words(count DESC)"
WORDS_BY_COUNT_MIN = 1_000_000

NEW = """CREATE VIEW top_words AS
       SELECT CAST(bytes AS TEXT) AS word, count, length(bytes) AS n_bytes,
              CASE WHEN tokens IS NULL THEN length(bytes) ELSE length(tokens) / 4 END AS n_tokens,
              hex(bytes) AS word_hex
       FROM words ORDER BY count DESC, id"""

# The v0_3_0_token_hex definition, for downgrade.
OLD = """CREATE VIEW top_words AS
       SELECT CAST(bytes AS TEXT) AS word, count, length(bytes) AS n_bytes,
              CASE WHEN tokens IS NULL THEN length(bytes) ELSE length(tokens) / 4 END AS n_tokens,
              hex(bytes) AS word_hex
       FROM words ORDER BY count DESC"""


def upgrade() -> None:
    op.execute("DROP VIEW IF EXISTS top_words")
    op.execute(NEW)
    bind = op.get_bind()
    big = bind.exec_driver_sql(
        "SELECT 1 FROM run WHERE phase IN ('merging', 'done')"
        f" AND (SELECT coalesce(max(id), 0) FROM words) >= {WORDS_BY_COUNT_MIN}").first()
    if big is not None:
        op.execute(WORDS_BY_COUNT)


def downgrade() -> None:
    op.execute("DROP INDEX IF EXISTS words_by_count")
    op.execute("DROP VIEW IF EXISTS top_words")
    op.execute(OLD)
