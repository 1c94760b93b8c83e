"""Alembic environment for bpe_store stores.

bpe_store builds the Alembic ``Config`` in code (see ``bpe_store.store.migrate``) and hands the open
connection over in ``config.attributes["connection"]``; there is no ini file to keep in sync.
SQLite cannot ALTER most things in place, so migrations run in batch mode.
"""

from alembic import context
from sqlalchemy import create_engine

config = context.config


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is None:  # `alembic -x db=path.db upgrade head` from a checkout
        url = "sqlite:///" + context.get_x_argument(as_dictionary=True)["db"]
        with create_engine(url).connect() as conn:
            _migrate(conn)
            conn.commit()
    else:
        _migrate(connection)


def _migrate(connection) -> None:
    # Why transactional_ddl=True: Alembic's SQLite dialect says SQLite has no transactional DDL, and
    # then commits each migration on its own, so a kill between two left a store at an intermediate
    # revision, which an outside reader saw too. SQLite's DDL is transactional: this runs every
    # migration up to the head in ONE transaction (the store's BEGIN IMMEDIATE), which a kill rolls back.
    context.configure(connection=connection, target_metadata=None, render_as_batch=True, transactional_ddl=True,
                      on_version_apply=_applied)
    with context.begin_transaction():
        context.run_migrations()


def _applied(ctx, step, heads, run_args) -> None:
    """Tests only: a pause point after each migration, inside the upgrade's transaction."""
    from bpe_store.pauses import pause_for_tests

    pause_for_tests(f"upgrade:{step.up_revision_id}")


run()
