"""The schema check of a store that may come from someone else: exactly its revision's tables and
indexes (``schemas``), nothing more, with the one optional index ``words_by_count``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..errors import StoreError

#: The index that answers ``top_words`` (and ``show words``) without sorting every word. Built by
#: ``start_merging``, when counting is over and counts never change again (every counting flush
#: would otherwise move ~1 M entries), on a store of ``WORDS_BY_COUNT_MIN`` words or more; below
#: that, sorting every word takes < 0.1 s and the index would cost a run more than it saves. A
#: store's schema may have it or not, from revision ``WORDS_BY_COUNT_SINCE`` on (``check_schema``).
WORDS_BY_COUNT = "CREATE INDEX words_by_count ON words(count DESC)"
WORDS_BY_COUNT_MIN = 1_000_000
WORDS_BY_COUNT_SINCE = "v0_3_0_words_by_count"


def check_schema(p: Path, db: sqlite3.Connection, revision: str) -> None:
    """Refuse (StoreError) a schema that is not exactly ``revision``'s: a missing or altered
    table, or any extra table, index, view or trigger (statistics tables of ANALYZE excepted)."""
    from .schemas import REVISIONS, SCHEMAS

    want = {(t, n): (tbl, sql) for t, n, tbl, sql in SCHEMAS[revision]}
    have = {(t, n): (tbl, sql) for t, n, tbl, sql in db.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master")}
    if REVISIONS.index(revision) >= REVISIONS.index(WORDS_BY_COUNT_SINCE) and ("index", "words_by_count") in have:
        want[("index", "words_by_count")] = ("words", WORDS_BY_COUNT)  # optional: see WORDS_BY_COUNT
    problems = []
    for (t, n), v in have.items():
        if (t, n) not in want:
            if t == "table" and n.startswith("sqlite_stat"):
                continue
            problems.append(f"an extra {t} {n!r}")
        elif want[(t, n)] != v:
            problems.append(f"{t} {n!r} is not bpe_store's")
    problems += [f"no {t} {n!r}" for (t, n) in want if (t, n) not in have]
    if problems:
        more = f" and {len(problems) - 4} more" if len(problems) > 4 else ""
        raise StoreError(f"{p}: the store's schema is not bpe_store's {revision} ({', '.join(problems[:4])}{more}); "
                         "refusing to use it")
