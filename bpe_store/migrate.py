"""Schema versions: the Alembic plumbing that creates, checks and upgrades a store's schema.

The schema's only source is ``migrations/`` (shipped inside the package as
``bpe_store/migrations`` by the wheel; found beside the package in a checkout). A new store is
created by running every migration; an older one is refused with the command that upgrades it;
one from a newer bpe_store is refused.

Alembic is imported only when a migration runs or an unknown revision must be named. Why:
importing it costs ~0.17-0.25 s (alembic.ddl pulls in every dialect), which every ``train``
resume, ``status`` and ``sql`` paid only to read one row of ``alembic_version``. Opening a store
at the head revision compares that row with ``SCHEMA_HEAD``; a test checks that constant
against the head Alembic finds in ``migrations/``, so the migrations stay the only source.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from alembic.config import Config
    from sqlalchemy.engine import Connection

#: The newest revision in ``migrations/versions`` (tests/test_fast_paths.py checks it is Alembic's
#: head): bump it with every new migration.
SCHEMA_HEAD = "v0_2_0_sessions"


def migrations_dir() -> Path:
    here = Path(__file__).resolve().parent
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
    from alembic.script import ScriptDirectory

    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def current_revision(connection: Connection) -> str | None:
    """The store's revision, read as Alembic's MigrationContext reads it (``alembic_version``;
    None when the table is absent or empty), without importing Alembic."""
    has_table = connection.exec_driver_sql(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'").first()
    if has_table is None:
        return None
    rows = [r[0] for r in connection.exec_driver_sql("SELECT version_num FROM alembic_version")]
    if len(rows) > 1:
        raise RuntimeError(f"the store has several schema revisions ({', '.join(rows)}); "
                           "bpe_store's migrations have a single head")
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
