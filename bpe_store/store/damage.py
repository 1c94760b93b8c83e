"""Which table of a damaged store is damaged: the name every command's error gives when SQLite
reports the file malformed (a page overwritten by a disk, a tool or a hand), so that the user knows
what is lost (``words``: the training state; ``merges``/``vocab``: the result) without reading
SQLite's page numbers.

SQLite checks one table (and its indexes) with ``PRAGMA quick_check(TABLE)``; the tables are
checked smallest-first in the order below and the check stops at the first damaged one, so the
cost is that of reading the file up to the damage, paid only when something already failed.
"""

from __future__ import annotations

import sqlite3

#: The tables whose loss matters most to the user first (a result before the training state), then
#: the big ones; any other table of the file after them.
ORDER = ("run", "merges", "vocab", "checkpoints", "sessions", "sources", "chunks", "base", "base_ids",
         "evaluations", "token_use", "pair_counts", "words")


def damaged_tables(uri: str, *, first_only: bool = True) -> list[str] | None:
    """The tables of the SQLite file at ``uri`` (a read-only ``file:`` URI) that SQLite finds
    damaged (the first only, with ``first_only``), ``["the schema (page 1)"]`` when even the list
    of tables cannot be read, or None when the file cannot be opened or nothing is found damaged."""
    try:
        con = sqlite3.connect(uri, uri=True, timeout=1)
    except sqlite3.Error:
        return None
    try:
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
        except sqlite3.DatabaseError:
            return ["the schema (page 1)"]
        found: list[str] = []
        for name in sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n)):
            try:
                rows = con.execute(f'PRAGMA quick_check("{name}")').fetchall()
            except sqlite3.DatabaseError:
                rows = [("damaged",)]
            if [r[0] for r in rows] != ["ok"]:
                found.append(name)
                if first_only:
                    break
        return found or None
    finally:
        con.close()
