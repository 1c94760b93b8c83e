"""Schema versions: the Alembic plumbing that creates, checks and upgrades a store's schema.

The schema's only source is ``migrations/`` (shipped inside the package as
``bpe_store/migrations`` by the wheel; found beside the package in a checkout).
``tools/gen_schemas.py`` runs them and records each revision's resulting schema in
``bpe_store/store/schemas.py``; a new store is created from the head entry, an older one is refused
with the command that upgrades it (``upgrade`` runs the migrations), one from a newer bpe_store
is refused.

Alembic is imported only when a migration runs. Why: importing it costs ~0.17-0.25 s
(alembic.ddl pulls in every dialect) and running the migrations ~0.3 s, which every new store,
``train`` resume, ``status`` and ``sql`` paid. tests/store/test_store_create.py checks that ``SCHEMA_HEAD``
and ``bpe_store.store.schemas`` equal what Alembic finds and produces, so the migrations stay the only
source.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import StoreError
from .schemas import HEAD, REVISIONS

if TYPE_CHECKING:  # pragma: no cover
    from alembic.config import Config
    from sqlalchemy.engine import Connection

#: The newest revision in ``migrations/versions`` (tests/store/test_store_create.py checks it is Alembic's
#: head). After adding a migration run ``python tools/gen_schemas.py``, which updates it.
SCHEMA_HEAD = HEAD


def migrations_dir() -> Path:
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "migrations", here.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise RuntimeError(f"bpe_store's migrations are missing (looked in {here} and its parent)")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic Config built in code; ``connection`` is used instead of opening a new one."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    return SCHEMA_HEAD


def alembic_head_revision() -> str:
    """The head revision as Alembic finds it in ``migrations/`` (what ``SCHEMA_HEAD`` must equal)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def known_revisions() -> set[str]:
    return set(REVISIONS)


def alembic_revisions() -> list[str]:
    """Every revision in ``migrations/``, oldest first, as Alembic finds them."""
    from alembic.script import ScriptDirectory

    return [s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()][::-1]


def migrated_schema(revision: str) -> tuple[tuple[str, str, str, str | None], ...]:
    """``sqlite_master`` rows ``(type, name, tbl_name, sql)`` in creation order after running the
    migrations up to ``revision`` on an empty file (what ``bpe_store.store.schemas`` records)."""
    import tempfile

    from sqlalchemy import create_engine

    with tempfile.TemporaryDirectory(prefix="bpe_store-schema-") as d:
        path = os.path.join(d, "s.db")
        engine = create_engine("sqlite:///" + path)
        with engine.connect() as conn:
            upgrade(conn, revision)
            conn.commit()
        engine.dispose()
        db = sqlite3.connect(path)
        try:
            return tuple(db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid"))
        finally:
            db.close()


def _rows(connection: Any, sql: str) -> list[tuple]:
    """Rows of ``sql`` on a sqlite3 or a SQLAlchemy connection."""
    run = getattr(connection, "exec_driver_sql", None) or connection.execute
    return [tuple(r) for r in run(sql)]


def current_revision(connection: Any, path: Any = "the store") -> str | None:
    """The store's revision, read as Alembic's MigrationContext reads it (``alembic_version``;
    None when the table is absent or empty), without importing Alembic. ``connection``: sqlite3
    or SQLAlchemy. Several rows (bpe_store's migrations have a single head) are a StoreError."""
    if not _rows(connection, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'"):
        return None
    rows = [r[0] for r in _rows(connection, "SELECT version_num FROM alembic_version LIMIT 10")]
    if len(rows) > 1 or (rows and not isinstance(rows[0], str)):
        raise StoreError(f"{path}: the store's schema revision is damaged (alembic_version holds "
                         f"{', '.join(map(repr, rows))}; bpe_store's migrations have a single head)")
    return rows[0] if rows else None


def preload() -> None:
    """Import what ``upgrade`` needs (called in a background thread while a new store's inputs
    are fingerprinted, so the import overlaps that I/O-bound work)."""
    try:
        import alembic.command  # noqa: F401
        import alembic.runtime.migration  # noqa: F401
    except Exception:  # pragma: no cover - upgrade() reports a broken installation itself
        pass


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` on ``connection`` (in its own transaction)."""
    from alembic import command

    command.upgrade(alembic_config(connection), revision)
