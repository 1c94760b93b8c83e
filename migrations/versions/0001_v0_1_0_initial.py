"""bpe_store 0.1.0: the initial schema.

Revision ID: v0_1_0_initial
Revises:
Create Date: 2026-11-23

Tables: run (one row of parameters and phase), sources and chunks (what counting has done),
words, pair_counts, merges, vocab, checkpoints. Views decode bytes for people. Token ids are
vocabulary ids: special tokens first, then the 256 bytes, then one per merge.
"""

from alembic import op

revision = "v0_1_0_initial"
down_revision = None
branch_labels = None
depends_on = None

TABLES = [
    # One row: the parameters that define the result, and where the run is.
    """CREATE TABLE run (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        pattern TEXT NOT NULL,
        special_tokens TEXT NOT NULL,          -- JSON list of strings, in vocabulary order
        vocab_size INTEGER NOT NULL,           -- the target; may be raised to continue
        invalid_utf8 TEXT NOT NULL DEFAULT 'strict',
        phase TEXT NOT NULL CHECK (phase IN ('counting', 'merging', 'done')),
        stop_reason TEXT,                      -- 'vocab_size' or 'no_pairs' once done
        chunk_size INTEGER NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        bpe_store_version TEXT NOT NULL
    )""",
    """CREATE TABLE sources (
        id INTEGER PRIMARY KEY,
        path TEXT NOT NULL,                    -- absolute path when the run started
        size INTEGER NOT NULL,
        mtime_ns INTEGER NOT NULL,
        sha256 TEXT NOT NULL
    )""",
    # Counting work units: byte ranges that begin at a special token or a safe boundary.
    """CREATE TABLE chunks (
        id INTEGER PRIMARY KEY,
        source_id INTEGER NOT NULL REFERENCES sources(id),
        start INTEGER NOT NULL,
        "end" INTEGER NOT NULL,
        counted INTEGER NOT NULL DEFAULT 0,    -- 1 once its words are in `words`
        pretokens INTEGER                      -- pre-tokens it held (64-bit)
    )""",
    # tokens: the word's current split as little-endian uint32 vocab ids; NULL = single bytes.
    # No index on bytes: the counter assigns ids itself, so new words are rowid appends (a UNIQUE
    # blob index made 1M-word counting flushes 3x slower, and count updates 6x slower).
    """CREATE TABLE words (
        id INTEGER PRIMARY KEY,
        bytes BLOB NOT NULL,
        count INTEGER NOT NULL,
        tokens BLOB
    )""",
    """CREATE TABLE pair_counts (
        "left" INTEGER NOT NULL,
        "right" INTEGER NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY ("left", "right")
    ) WITHOUT ROWID""",
    "CREATE INDEX pair_counts_by_count ON pair_counts(count DESC)",
    # rank 0 is the first merge; its token is vocab id n_specials + 256 + rank.
    """CREATE TABLE merges (
        rank INTEGER PRIMARY KEY,
        "left" INTEGER NOT NULL,
        "right" INTEGER NOT NULL,
        token INTEGER NOT NULL,                -- the id words use for the result (see vocab)
        count INTEGER NOT NULL                 -- the pair's count when it was merged
    )""",
    """CREATE TABLE vocab (
        id INTEGER PRIMARY KEY,
        bytes BLOB NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('special', 'byte', 'merge'))
    )""",
    """CREATE TABLE checkpoints (
        id INTEGER PRIMARY KEY,
        at TEXT NOT NULL,
        phase TEXT NOT NULL,
        chunks_counted INTEGER NOT NULL,
        merges_done INTEGER NOT NULL,
        elapsed_s REAL NOT NULL,               -- training time so far, summed over sessions
        write_s REAL                           -- how long writing this checkpoint took
    )""",
]

VIEWS = [
    """CREATE VIEW merge_log AS
       SELECT m.rank, CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right",
              CAST(l.bytes || r.bytes AS TEXT) AS token, m.count, m.token AS token_id
       FROM merges m JOIN vocab l ON l.id = m."left" JOIN vocab r ON r.id = m."right"
       ORDER BY m.rank""",
    """CREATE VIEW top_pairs AS
       SELECT CAST(l.bytes AS TEXT) AS "left", CAST(r.bytes AS TEXT) AS "right", p.count,
              p."left" AS left_id, p."right" AS right_id
       FROM pair_counts p JOIN vocab l ON l.id = p."left" JOIN vocab r ON r.id = p."right"
       ORDER BY p.count DESC, l.bytes DESC, r.bytes DESC""",
    """CREATE VIEW top_words AS
       SELECT CAST(bytes AS TEXT) AS word, count, length(bytes) AS n_bytes,
              CASE WHEN tokens IS NULL THEN length(bytes) ELSE length(tokens) / 4 END AS n_tokens
       FROM words ORDER BY count DESC""",
    """CREATE VIEW vocab_text AS
       SELECT id, CAST(bytes AS TEXT) AS token, hex(bytes) AS hex, kind, length(bytes) AS n_bytes
       FROM vocab ORDER BY id""",
    """CREATE VIEW progress AS
       SELECT r.phase,
              (SELECT count(*) FROM chunks WHERE counted = 1) AS chunks_counted,
              (SELECT count(*) FROM chunks) AS chunks_total,
              (SELECT count(*) FROM merges) AS merges_done,
              r.vocab_size - 256 - json_array_length(r.special_tokens) AS merges_target,
              (SELECT count(*) FROM words) AS words,
              (SELECT max(at) FROM checkpoints) AS last_checkpoint
       FROM run r""",
]


def upgrade() -> None:
    for sql in TABLES + VIEWS:
        op.execute(sql)


def downgrade() -> None:
    for view in ("progress", "vocab_text", "top_words", "top_pairs", "merge_log"):
        op.execute(f"DROP VIEW {view}")
    for table in ("checkpoints", "vocab", "merges", "pair_counts", "words", "chunks", "sources", "run"):
        op.execute(f"DROP TABLE {table}")
