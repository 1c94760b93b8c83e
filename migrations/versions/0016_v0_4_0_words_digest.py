"""bpe_store 0.4.0: ``checkpoints.words_digest``, the digest of the words a merge works on.

Revision ID: v0_4_0_words_digest
Revises: v0_4_0_evaluations
Create Date: 2026-11-28

A store's words (``id, bytes, count``) stop changing when counting ends, and every merge a resume or
a grow makes depends on them. From then on every checkpoint records their digest
(``bpe_store.store.digest.words_digest``); a resume, a grow and ``db check --deep`` recompute it
from ``words``, so a count or a word changed by hand is refused instead of giving other merges.
This upgrade records the digest of the words as they stand in the newest checkpoint of a store
that is merging or done; older checkpoints, and every checkpoint of a store still counting, get
NULL.
"""

import sqlalchemy as sa
from alembic import op

revision = "v0_4_0_words_digest"
down_revision = "v0_4_0_evaluations"
branch_labels = None
depends_on = None

# copied from bpe_store.store.digest (migrations are history: copied, not imported)
_P1, _P2 = (1 << 61) - 1, (1 << 64) - 59
_K_ID1, _K_ID2 = 0x243F6A8885A308D3, 0x13198A2E03707344
_K_COUNT1, _K_COUNT2 = 0xA4093822299F31D0, 0x082EFA98EC4E6C89


def _words_digest(rows) -> str:
    n = s1 = s2 = 0
    for word_id, word, count in rows:
        v = int.from_bytes(bytes(word) + b"\x01", "little")
        s1 = (s1 + (v + word_id * _K_ID1) % _P1 * ((count + _K_COUNT1) % _P1)) % _P1
        s2 = (s2 + (v + word_id * _K_ID2) % _P2 * ((count + _K_COUNT2) % _P2)) % _P2
        n += 1
    return f"{n}:{s1:016x}:{s2:016x}"


def upgrade() -> None:
    # plain ALTER TABLE ADD COLUMN: no table rebuild
    op.add_column("checkpoints", sa.Column("words_digest", sa.Text, nullable=True))
    bind = op.get_bind()
    last = bind.exec_driver_sql("SELECT id FROM checkpoints ORDER BY id DESC LIMIT 1").first()
    phase = bind.exec_driver_sql("SELECT phase FROM run").scalar()
    if last is None or phase not in ("merging", "done"):
        return
    rows = bind.exec_driver_sql("SELECT id, bytes, count FROM words")
    good = []
    for r in rows:
        if type(r[0]) is not int or not isinstance(r[1], bytes) or type(r[2]) is not int:
            return  # not as bpe_store wrote it: left without a digest, which the words check then reports
        good.append((r[0], r[1], r[2]))
    bind.exec_driver_sql("UPDATE checkpoints SET words_digest = ? WHERE id = ?", (_words_digest(good), last[0]))


def downgrade() -> None:
    op.execute("ALTER TABLE checkpoints DROP COLUMN words_digest")
