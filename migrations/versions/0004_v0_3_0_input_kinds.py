"""bpe_store 0.3.0: input kinds (text, jsonl, parquet; compressed; streams) and their work units.

Revision ID: v0_3_0_input_kinds
Revises: v0_3_0_token_hex
Create Date: 2026-11-23

``sources`` says how each input is read: ``format`` (text / jsonl / parquet, or stream for
stdin and Python iterators), ``compression`` (none / gz / zst / bz2 / xz), ``text_field`` (the
jsonl field or parquet column holding the text; NULL for text), and ``documents`` (records
counted so far: for a stream, where a resume picks it up). ``chunks.kind`` says what a work unit
is: ``range`` (a byte range of an uncompressed file; jsonl ranges end at line ends),
``row_group`` (``part`` is the parquet row group), ``file`` (a compressed file, read whole as a
stream) or ``stream``. Older stores hold plain text files cut into byte ranges: the defaults.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_3_0_input_kinds"
down_revision = "v0_3_0_token_hex"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN: a batch (copy and rename) would break the views on these tables
    op.add_column("sources", sa.Column("format", sa.Text, nullable=False, server_default="text"))
    op.add_column("sources", sa.Column("compression", sa.Text, nullable=False, server_default="none"))
    op.add_column("sources", sa.Column("text_field", sa.Text))
    op.add_column("sources", sa.Column("documents", sa.Integer))
    op.add_column("chunks", sa.Column("kind", sa.Text, nullable=False, server_default="range"))
    op.add_column("chunks", sa.Column("part", sa.Integer))


def downgrade() -> None:
    # ALTER TABLE DROP COLUMN (SQLite >= 3.35) for the same reason
    for table, column in (("chunks", "part"), ("chunks", "kind"), ("sources", "documents"),
                          ("sources", "text_field"), ("sources", "compression"), ("sources", "format")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
