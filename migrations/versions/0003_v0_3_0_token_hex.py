"""bpe_store 0.3.0: the views gain hex columns of the token bytes, for scripts.

Revision ID: v0_3_0_token_hex
Revises: v0_2_0_sessions
Create Date: 2026-11-23

The views' text columns are ``CAST(bytes AS TEXT)``: readable, but a token made of part of a
UTF-8 character is not valid text, and one made only of whitespace is hard to tell apart. Each
view now also has the bytes as upper-case hex (``merge_log.left_hex/right_hex/token_hex``,
``top_pairs.left_hex/right_hex``, ``top_words.word_hex``; ``vocab_text.hex`` was there), added
after the existing columns so positional readers of ``SELECT *`` are not disturbed. Views only:
no table changes, so upgrading is instant.
"""

from alembic import op

revision = "v0_3_0_token_hex"
down_revision = "v0_2_0_sessions"
branch_labels = None
depends_on = None

NEW = {
    "merge_log": """CREATE VIEW merge_log AS
       SELECT m.rank, CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right",
              CAST(l.bytes || r.bytes AS TEXT) AS token, m.count, m.token AS token_id,
              hex(l.bytes) AS left_hex, hex(r.bytes) AS right_hex, hex(l.bytes || r.bytes) AS token_hex
       FROM merges m JOIN vocab l ON l.id = m."left" JOIN vocab r ON r.id = m."right"
       ORDER BY m.rank""",
    "top_pairs": """CREATE VIEW top_pairs AS
       SELECT CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right", p.count,
              p."left" AS left_id, p."right" AS right_id, hex(l.bytes) AS left_hex, hex(r.bytes) AS right_hex
       FROM pair_counts p JOIN vocab l ON l.id = p."left" JOIN vocab r ON r.id = p."right"
       ORDER BY p.count DESC, l.bytes DESC, r.bytes DESC""",
    "top_words": """CREATE VIEW top_words AS
       SELECT CAST(bytes AS TEXT) AS word, count, length(bytes) AS n_bytes,
              CASE WHEN tokens IS NULL THEN length(bytes) ELSE length(tokens) / 4 END AS n_tokens,
              hex(bytes) AS word_hex
       FROM words ORDER BY count DESC""",
}

# The v0_1_0_initial definitions, for downgrade (migrations are history: copied, not imported).
OLD = {
    "merge_log": """CREATE VIEW merge_log AS
       SELECT m.rank, CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right",
              CAST(l.bytes || r.bytes AS TEXT) AS token, m.count, m.token AS token_id
       FROM merges m JOIN vocab l ON l.id = m."left" JOIN vocab r ON r.id = m."right"
       ORDER BY m.rank""",
    "top_pairs": """CREATE VIEW top_pairs AS
       SELECT CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right", p.count,
              p."left" AS left_id, p."right" AS right_id
       FROM pair_counts p JOIN vocab l ON l.id = p."left" JOIN vocab r ON r.id = p."right"
       ORDER BY p.count DESC, l.bytes DESC, r.bytes DESC""",
    "top_words": """CREATE VIEW top_words AS
       SELECT CAST(bytes AS TEXT) AS word, count, length(bytes) AS n_bytes,
              CASE WHEN tokens IS NULL THEN length(bytes) ELSE length(tokens) / 4 END AS n_tokens
       FROM words ORDER BY count DESC""",
}


def _replace(views: dict[str, str]) -> None:
    for name, sql in views.items():
        op.execute(f"DROP VIEW IF EXISTS {name}")
        op.execute(sql)


def upgrade() -> None:
    _replace(NEW)


def downgrade() -> None:
    _replace(OLD)
