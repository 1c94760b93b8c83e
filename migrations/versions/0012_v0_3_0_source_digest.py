"""bpe_store 0.3.0: an input's fingerprint says which hash made it (``sources.digest``, ``sources.hash``).

Revision ID: v0_3_0_source_digest
Revises: v0_3_0_merge_digest
Create Date: 2026-11-26

Planning fingerprinted every input with SHA-256 in a pass of its own before counting: 0.5-0.9 s
per GB on one core, a quarter of counting's time on some machines. New stores fingerprint a
file with ``xxh3_128_8MiB`` (XXH3-128 of each 8 MiB block, read and digested on every core, then
of the blocks' digests; ``bpe_store.text.fingerprint``): the same pass checks the file is
UTF-8 and costs about what reading it does. The column ``sha256`` becomes ``digest`` and a new
column ``hash`` names the function. Older stores' rows are SHA-256 digests: they get ``hash =
'sha256'`` and a resume still checks an input against its SHA-256. Streams (standard input, an
iterable) keep SHA-256 of the prefix counted, ``hash = 'sha256'``. A downgrade keeps another
hash's digest prefixed with its name (``xxh3_128_8MiB:...``), which no SHA-256 equals.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_3_0_source_digest"
down_revision = "v0_3_0_merge_digest"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # in place (SQLite >= 3.25 renames a column without rebuilding the table)
    op.execute("ALTER TABLE sources RENAME COLUMN sha256 TO digest")
    op.add_column("sources", sa.Column("hash", sa.Text, nullable=False, server_default="sha256"))


def downgrade() -> None:
    # The older schema holds SHA-256 only. Another hash's digest keeps its name as a prefix, so it
    # never equals a SHA-256: an older bpe_store refuses a resume whose input's modification time
    # moved (it would digest the file and compare), and resumes one whose time did not, as before.
    # Why not digest the inputs here: a migration must not read gigabytes of corpus.
    op.execute("UPDATE sources SET digest = hash || ':' || digest WHERE hash != 'sha256'")
    op.execute("ALTER TABLE sources DROP COLUMN hash")
    op.execute("ALTER TABLE sources RENAME COLUMN digest TO sha256")
