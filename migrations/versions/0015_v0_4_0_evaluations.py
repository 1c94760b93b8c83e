"""bpe_store 0.4.0: held-out evaluations live in the store (``evaluations``, view ``eval_curve``).

Revision ID: v0_4_0_evaluations
Revises: v0_3_0_extend_base
Create Date: 2026-11-28

``bpe-store eval`` and ``train --eval`` measure tokenizers on held-out text: this store's merge
log at any vocabulary size (a prefix is a tokenizer) and others beside it (a ``.tiktoken`` file,
a ``tokenizer.json``, GPT-2 files, OpenAI's encodings by name). Each measurement is one row:
which tokenizer, its vocabulary size, the held-out data (its name and SHA-256), the group of the
text it covers (``all``, a script such as ``Latin``, or one input file), the metric and its
value. ``eval_curve`` puts a tokenizer's metrics at one size and group on one row. Evaluations
are not training state: no resume, export or digest reads them, and deleting them changes no
result.

``token_use`` holds, for each token a merge made, how often its pair occurred when it was merged
and how often it is a final token of the store's words (each word encoded with every merge,
weighted by its count): LiteToken's "intermediate residue" tokens are those with few final uses
for their merge count, listed by ``residue_tokens`` (lowest ratio first). Analysis only.
"""

from alembic import op

revision = "v0_4_0_evaluations"
down_revision = "v0_3_0_extend_base"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""CREATE TABLE evaluations (
        id INTEGER PRIMARY KEY,
        tokenizer TEXT NOT NULL,               -- 'self' for this store's own merge log, else a label
        kind TEXT NOT NULL,                    -- store, tiktoken, tokenizer.json, gpt2
        source TEXT NOT NULL,                  -- a path or an encoding's name
        vocab_size INTEGER NOT NULL,           -- the tokenizer's tokens (a store: its prefix)
        heldout TEXT NOT NULL,                 -- the held-out inputs, as given
        heldout_digest TEXT NOT NULL,          -- SHA-256 of the held-out text, in order
        grp TEXT NOT NULL,                     -- 'all', a script ('Latin', ...) or 'file:PATH'
        metric TEXT NOT NULL,                  -- bytes_per_token, renyi_efficiency, ...
        value REAL,                            -- NULL when undefined (e.g. no word in the group)
        recorded_by TEXT NOT NULL CHECK (recorded_by IN ('eval', 'train')),
        created_at TEXT NOT NULL,
        UNIQUE (tokenizer, source, vocab_size, heldout_digest, grp, metric)
    )""")
    op.execute("""CREATE VIEW eval_curve AS
        SELECT tokenizer, kind, source, vocab_size, heldout, heldout_digest, grp,
               MAX(CASE metric WHEN 'bytes_per_token' THEN value END) AS bytes_per_token,
               MAX(CASE metric WHEN 'chars_per_token' THEN value END) AS chars_per_token,
               MAX(CASE metric WHEN 'tokens_per_word' THEN value END) AS tokens_per_word,
               MAX(CASE metric WHEN 'renyi_efficiency' THEN value END) AS renyi_efficiency,
               MAX(CASE metric WHEN 'renyi_alpha' THEN value END) AS renyi_alpha,
               MAX(CASE metric WHEN 'vocab_used' THEN value END) AS vocab_used,
               MAX(CASE metric WHEN 'tokens_unused' THEN value END) AS tokens_unused,
               MAX(CASE metric WHEN 'parity' THEN value END) AS parity,
               MAX(CASE metric WHEN 'tokens' THEN value END) AS tokens,
               MAX(CASE metric WHEN 'bytes' THEN value END) AS bytes,
               MAX(created_at) AS created_at
        FROM evaluations
        GROUP BY tokenizer, kind, source, vocab_size, heldout_digest, grp""")


    op.execute("""CREATE TABLE token_use (
        token INTEGER PRIMARY KEY,             -- a merge's token id
        merge_count INTEGER NOT NULL,          -- its pair's count when merged (merges.count)
        final_count INTEGER NOT NULL,          -- its occurrences in the words, each fully encoded, by count
        merges INTEGER NOT NULL                -- the merge log's length these counts are for
    )""")
    op.execute("""CREATE VIEW residue_tokens AS
        SELECT u.token AS id, CAST(v.bytes AS TEXT) AS token, hex(v.bytes) AS token_hex, u.merge_count,
               u.final_count, CAST(u.final_count AS REAL) / u.merge_count AS final_ratio
        FROM token_use u JOIN vocab v ON v.id = u.token
        ORDER BY final_ratio, u.token""")


def downgrade() -> None:
    op.execute("DROP VIEW residue_tokens")
    op.execute("DROP TABLE token_use")
    op.execute("DROP VIEW eval_curve")
    op.execute("DROP TABLE evaluations")
