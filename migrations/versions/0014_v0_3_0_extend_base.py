"""bpe_store 0.3.0: a store may extend a base tokenizer (``train --extend``); the base and its ids.

Revision ID: v0_3_0_extend_base
Revises: v0_3_0_superword
Create Date: 2026-11-28

A run that extends a base (OpenAI's cl100k_base / o200k_base, a ``.tiktoken`` file, a
``tokenizer.json``, GPT-2's files or another store) holds the base's merges as its first merges
(count 0) and its tokens in the store's usual order: special tokens, the 256 bytes, one per merge.
``base`` says which base it was (one row, or none), ``base_ids`` the base's own id of each of those
tokens (the ids a model's embeddings use); a token the run learns gets the id ``id + shift``, so the
new ids follow the base's largest (``base.next_id`` is the first). ``model_vocab`` shows every
token with its model id and where it came from. A store without a base has no rows there and its
model ids are its ids. New tables and a view only: upgrading is instant.
"""

from alembic import op

revision = "v0_3_0_extend_base"
down_revision = "v0_3_0_superword"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("""CREATE TABLE base (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        kind TEXT NOT NULL CHECK (kind IN ('tiktoken', 'hf', 'gpt2', 'store')),
        source TEXT NOT NULL,                  -- the name, path or store@merges it was read from
        sha256 TEXT NOT NULL,                  -- of the file(s) read; a store's: of its vocab and merges
        merges INTEGER NOT NULL,               -- the store's merges of rank < this are the base's
        tokens INTEGER NOT NULL,               -- the base's tokens (special tokens included)
        next_id INTEGER NOT NULL,              -- the model id of the run's first new token
        shift INTEGER NOT NULL                 -- a new token's model id is its id + shift
    )""")
    op.execute("""CREATE TABLE base_ids (
        id INTEGER PRIMARY KEY,                -- the store's id (vocab.id) of a base token
        model_id INTEGER NOT NULL UNIQUE       -- the base's own id of it
    )""")
    op.execute("""CREATE VIEW model_vocab AS
       SELECT v.id, coalesce(b.model_id, v.id + coalesce((SELECT shift FROM base), 0)) AS model_id,
              CAST(v.bytes AS TEXT) AS token, hex(v.bytes) AS hex, v.kind,
              CASE WHEN b.id IS NOT NULL THEN 'base' ELSE 'trained' END AS origin
       FROM vocab v LEFT JOIN base_ids b ON b.id = v.id ORDER BY model_id""")


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS model_vocab")
    op.execute("DROP TABLE IF EXISTS base_ids")
    op.execute("DROP TABLE IF EXISTS base")
