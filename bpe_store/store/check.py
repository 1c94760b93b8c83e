"""``bpe-store db check``: every check bpe_store makes of a store, run at once, each one's verdict.

Opening a store already checks that the file is a SQLite store of ours whose schema is exactly its
revision's and whose ``run`` row bpe_store could have written (``Store.open``); a resume, an
export and ``Tokenizer.from_store`` check the rest before they use it, and refuse the store at the
first problem. ``check_store`` runs them all, read-only, and reports each (``Finding``): the
schema revision, the run, the inputs and work units, the phase against what the store holds, the
merge log and vocabulary (each merge's token is its two parts joined, each vocabulary row what
made it, the log's digest what the newest checkpoint recorded: ``result.result_check``), and the
history rows ``status`` reads (``checkpoints``, ``sessions``).

These read the merges, the vocabulary and a few small tables, never the words: a 32 K-merge
store checks in well under a second whatever its corpus. ``deep`` adds SQLite's own page check
(``PRAGMA quick_check``, which reads the whole file) and whatever the caller passes as
``words_check`` (the CLI passes training's: the words rebuilt into a merge engine, checked against
the merges and the pair counts); both take time in proportion to the store.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import StoreError
from . import migrate
from .base_rows import base_row
from .connection import sqlite_uri
from .damage import damaged_tables
from .result import DIGEST_SINCE, result_check
from .schemas import REVISIONS
from .store import Store


@dataclass(frozen=True)
class Finding:
    """One check's verdict: ``problem`` None when it passed (or was ``skipped``); ``detail`` what
    it found (or why it was skipped)."""

    check: str
    problem: str | None
    detail: str = ""
    skipped: bool = False

    @property
    def ok(self) -> bool:
        return self.problem is None


def _schema(store: Store) -> str:
    rev, head = store.revision, migrate.head_revision()
    if rev != head:
        raise StoreError(f"{store.path}: the store's schema is older ({rev}) than this bpe_store's ({head}); "
                         f"upgrade it with: bpe-store db upgrade {store.path}")
    return f"{rev} (the newest), exactly the migrations' own"


def _specials(store: Store) -> list[str]:
    """The run's special tokens (read from the row itself: ``params()`` needs the newest schema)."""
    return json.loads(store.run_row()["special_tokens"])  # run_row checked it is a JSON list


def _run(store: Store) -> str:
    run = store.run_row()  # raises for no run, and checks it (check_run)
    return f"phase {run['phase']}, vocab size {run['vocab_size']}, {len(_specials(store))} special tokens"


def _inputs(store: Store) -> str:
    store.check_plan()
    n_sources, n_chunks, counted = store.sql(
        "SELECT (SELECT count(*) FROM sources), count(*), coalesce(sum(counted), 0) FROM chunks").one()
    return f"{n_sources} inputs, {counted} of {n_chunks} work units counted"


def _phase(store: Store) -> str:
    run = store.run_row()
    phase, merges = run["phase"], store.sql("SELECT count(*) FROM merges").scalar()
    target = run["vocab_size"] - 256 - len(_specials(store))
    state = run.get("state_merges", merges)  # a store from before the column: every merge
    pairs = store.sql("SELECT EXISTS (SELECT 1 FROM pair_counts)").scalar()

    def bad(what: str) -> StoreError:
        return StoreError(f"{store.path}: the store is inconsistent ({what}); start over with --restart")

    based = base_row(store)
    if phase == "counting" and (merges != (0 if based is None else based["merges"]) or pairs):
        raise bad("counting, but it holds merges (other than its base's) or pair counts")
    if phase != "counting" and state is not None and not 0 <= state <= merges:
        raise bad(f"its words reflect {state} merges of {merges}")
    kept = run.get("pairs_merges", state)  # what pair_counts follows (the column is newer)
    if kept is None and pairs:
        raise bad("pair counts in a finished run's store that kept none")
    if kept is not None and not 0 <= kept <= merges:
        raise bad(f"its pair counts follow {kept} merges of {merges}")
    if merges > target:
        raise bad(f"{merges} merges, more than its vocabulary size allows ({target})")
    if phase == "done" and run["stop_reason"] == "vocab_size" and merges != target:
        raise bad(f"done at its vocabulary size with {merges} merges of {target}")
    if phase == "done" and run["stop_reason"] is None:
        raise bad("done, without a stop reason")
    return f"{merges} merges of {target}" + (f", words at merge {state}" if state is not None else "")


def _merge_log(store: Store) -> str:
    specials = _specials(store)
    result_check(store, specials)
    n = store.sql("SELECT count(*) FROM merges").scalar()
    has_digest = REVISIONS.index(store.revision) >= REVISIONS.index(DIGEST_SINCE)
    return (f"{n} merges and {n + 256 + len(specials)} vocabulary rows consistent"
            + (", digest matches the newest checkpoint's" if has_digest else " (no digest: an older schema)"))


def _words_digest(store: Store) -> str:
    """The words' digests the checkpoints recorded: the newest checkpoint holds one, and every
    checkpoint since the first that recorded one holds the same (``--deep`` recomputes it from the
    words). An upgraded store's older checkpoints hold none."""
    if store.run_row()["phase"] == "counting":
        return "counting: recorded when counting ends"
    rows = store.sql("SELECT id, words_digest FROM checkpoints WHERE id >= (SELECT coalesce(min(id), 0) FROM"
                     " checkpoints WHERE words_digest IS NOT NULL) ORDER BY id").fetchall()
    newest = rows[-1][1] if rows else None
    bad = next((cid for cid, v in rows if v != newest), None)
    if not isinstance(newest, str) or bad is not None:
        where = f"checkpoint {bad}" if bad is not None else "the newest checkpoint has none"
        raise StoreError(f"{store.path}: the checkpoints' digests of the words are missing or differ ({where}); "
                         "the words may have been changed: check them with db check --deep")
    return f"{newest.split(':')[0]} words, one digest recorded by {len(rows)} checkpoints since counting ended"


def _is_date(v: object) -> bool:
    if not isinstance(v, str):
        return False
    try:
        _dt.datetime.fromisoformat(v)
    except ValueError:
        return False
    return True


def _history(store: Store) -> str:
    if not store.sql("SELECT 1 FROM sqlite_master WHERE name = 'sessions'").first():
        raise StoreError(f"{store.path}: no sessions table (an older schema: bpe-store db upgrade adds it)")
    problems = history_problems(store)
    if problems:
        raise StoreError(f"{store.path}: the store's history is damaged ({'; '.join(problems[:3])})")
    n_cp = store.sql("SELECT count(*) FROM checkpoints").scalar()
    n_s = store.sql("SELECT count(*) FROM sessions").scalar()
    return f"{n_cp} checkpoints, {n_s} sessions"


def history_problems(store: Store, checkpoint_limit: int | None = None,
                     session_limit: int | None = None) -> list[str]:
    """What is wrong with the ``checkpoints`` and ``sessions`` rows (the newest ``*_limit`` of
    each; all when None): times that are not ISO dates, numbers that are not numbers, an
    ``argv`` that is not a JSON list of strings."""
    out = []
    if REVISIONS.index(store.revision or REVISIONS[0]) < REVISIONS.index("v0_2_0_sessions"):
        return out  # no sessions table yet (and checkpoints from then are read as they are)
    cps = store.sql("SELECT id, at, merges_done, elapsed_s FROM checkpoints ORDER BY id DESC LIMIT ?",
                    (-1 if checkpoint_limit is None else checkpoint_limit,)).fetchall()
    for cid, at, merges_done, elapsed in cps:
        if not _is_date(at):
            out.append(f"checkpoint {cid}: at {at!r} is not a date")
        elif type(merges_done) is not int or merges_done < 0:
            out.append(f"checkpoint {cid}: merges_done {merges_done!r} is not a count")
        elif not isinstance(elapsed, (int, float)) or isinstance(elapsed, bool) or elapsed < 0:
            out.append(f"checkpoint {cid}: elapsed_s {elapsed!r} is not a duration")
    sessions = store.sql("SELECT id, argv, started_at, ended_at FROM sessions ORDER BY id DESC LIMIT ?",
                         (-1 if session_limit is None else session_limit,)).fetchall()
    for sid, argv, started, ended in sessions:
        try:
            args = json.loads(argv) if argv is not None else []
        except (TypeError, ValueError, RecursionError):
            args = None
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            out.append(f"session {sid}: argv {str(argv)[:40]!r} is not a JSON list of strings")
        elif not _is_date(started) or (ended is not None and not _is_date(ended)):
            out.append(f"session {sid}: started_at / ended_at {started!r} / {ended!r} are not dates")
    return out


#: ``(name, check)``: each returns what it found, or raises StoreError saying what is wrong.
CHECKS: tuple[tuple[str, Callable[[Store], str]], ...] = (
    ("schema", _schema), ("run", _run), ("inputs", _inputs), ("phase", _phase),
    ("merge log", _merge_log), ("words digest", _words_digest), ("history", _history),
)


#: Checks that read columns only the newest schema has.
_NEED_HEAD = {"inputs", "history", "words", "words digest"}


def _sqlite_pages(store: Store) -> str:
    try:
        rows = [r[0] for r in store.sql("PRAGMA quick_check(10)")]
    except sqlite3.DatabaseError as exc:  # a page so damaged that the check itself stops
        rows = [str(exc)]
    if rows != ["ok"]:
        tables = [t if t.startswith("the ") else f"table {t}"
                  for t in damaged_tables(sqlite_uri(store.path, mode="ro"), first_only=False) or ["the file"]]
        first = str(rows[0]).replace("*** in database main ***", "").strip().splitlines()[:1]
        raise StoreError(f"{store.path}: SQLite finds {', '.join(tables)} damaged (first: {'; '.join(first)})")
    return "PRAGMA quick_check: ok"


def check_store(path: str | os.PathLike, *, deep: bool = False,
                words_check: Callable[[Store], str] | None = None) -> list[Finding]:
    """Every check of the store at ``path`` (read-only, one snapshot), in order; stops after the
    opening when the store cannot be opened at all (not ours, a schema not bpe_store's, a
    damaged run row). ``deep``: also SQLite's page check and ``words_check``."""
    p = Path(path)
    try:
        store = Store.open(p, readonly=True, allow_old=True)
    except StoreError as exc:
        return [Finding("open", str(exc))]
    findings = [Finding("open", None, "a bpe_store store")]
    checks = list(CHECKS)
    if deep:
        checks.append(("sqlite", _sqlite_pages))
        if words_check is not None:
            checks.append(("words", words_check))
    try:
        store.db.execute("PRAGMA query_only = ON")
        with store.snapshot():
            if store.revision is None or not store.has_run():
                return findings + [Finding("run", f"{p}: the store has no run (it was never started, or its "
                                                  "run or schema version was removed)")]
            for name, check in checks:
                if name in _NEED_HEAD and store.revision != migrate.head_revision():
                    findings.append(Finding(name, None, "not checked: the schema is older (upgrade it, then check "
                                                        "again)", skipped=True))
                    continue
                try:
                    findings.append(Finding(name, None, check(store)))
                except StoreError as exc:
                    findings.append(Finding(name, str(exc)))
    except StoreError as exc:  # ending the read: a damaged page a check met may fail it again
        if all(f.ok for f in findings):
            findings.append(Finding("sqlite", str(exc)))
    finally:
        store.close()
    return findings
