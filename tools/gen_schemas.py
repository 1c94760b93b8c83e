"""Regenerate ``bpe_store/store/schemas.py``: every revision's schema as the migrations produce it.

Run after adding or changing a migration (``tests/store/test_store_create.py`` fails until you do)::

    python tools/gen_schemas.py

It runs the Alembic migrations up to each revision on an empty file and writes what SQLite then
holds in ``sqlite_master``. ``bpe_store`` creates new stores from the head entry (no Alembic at
run time) and checks every store it opens against the entry of its revision.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpe_store.store import migrate  # noqa: E402

HEADER = '''"""The schema of every store revision, as SQLite holds it (``sqlite_master``): GENERATED.

Do not edit: ``python tools/gen_schemas.py`` writes this file by running the Alembic migrations
in ``migrations/`` (the schema's only source) up to each revision; ``tests/store/test_store_create.py``
checks that it still equals what they produce. ``bpe_store.store.store`` creates a new store from
``SCHEMAS[HEAD]`` without importing Alembic, and refuses to open a store whose schema is not
exactly its revision's (an extra trigger, view or index would run code the store's author chose).
"""

'''


def main() -> None:
    revisions = migrate.alembic_revisions()
    schemas = {rev: migrate.migrated_schema(rev) for rev in revisions}
    out = HEADER
    out += "#: Revisions, oldest first; the last is the head.\n"
    out += f"REVISIONS: tuple[str, ...] = {tuple(revisions)!r}\n"
    out += f"HEAD = {revisions[-1]!r}\n\n"
    out += ("#: ``{revision: ((type, name, tbl_name, sql or None), ...)}`` in creation order "
            "(``sqlite_master`` rowid order).\n")
    out += "SCHEMAS: dict[str, tuple[tuple[str, str, str, str | None], ...]] = {\n"
    for rev, rows in schemas.items():
        out += f"    {rev!r}: (\n"
        for t, name, tbl, sql in rows:
            out += f"        ({t!r}, {name!r}, {tbl!r},\n         {sql!r}),\n"
        out += "    ),\n"
    out += "}\n"
    path = ROOT / "bpe_store" / "store" / "schemas.py"
    path.write_text(out)
    print(f"wrote {path} ({len(revisions)} revisions, head {revisions[-1]})")


if __name__ == "__main__":
    main()
