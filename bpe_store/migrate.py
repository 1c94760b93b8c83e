"""Schema versions: the Alembic plumbing that creates, checks and upgrades a store's schema.

The schema's only source is ``migrations/`` (shipped inside the package as
``bpe_store/migrations`` by the wheel; found beside the package in a checkout). A new store is
created by running every migration; an older one is refused with the command that upgrades it;
one from a newer bpe_store is refused.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection


def migrations_dir() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "migrations", here.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise RuntimeError(f"bpe_store's migrations are missing (looked in {here} and its parent)")


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic Config built in code; ``connection`` is used instead of opening a new one."""
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def known_revisions() -> set[str]:
    return {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}


def current_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(connection: Connection, revision: str = "head") -> None:
    """Apply migrations up to ``revision`` on ``connection`` (in its own transaction)."""
    command.upgrade(alembic_config(connection), revision)
