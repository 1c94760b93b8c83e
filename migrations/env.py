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
    context.configure(connection=connection, target_metadata=None, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


run()
