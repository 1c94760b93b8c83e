"""Read-only questions to a store: ``status``, ``show``, ``why`` and ``sql``.

Every function here opens the store read-only (``Store.open(readonly=True)``: a write is refused
by SQLite itself; a read-only file, directory or mount works too) and asks all its questions
inside one read transaction, so the answers are one consistent snapshot even while a training
run writes to the same file (WAL mode: a reader sees the last committed checkpoint, never half
of one). Results are plain dicts and lists; the CLI formats them. Token bytes stay ``bytes``
here; ``token_text`` turns them into text. Each takes ``timeout=`` (seconds: a query still
running then is stopped with a StoreError), and Ctrl-C stops any query.

``sql`` runs a person's statement under an authorizer that allows reading only (no write, no
ATTACH or VACUUM INTO, no PRAGMA that sets anything, no extension loading), with a cap on the
size of any value, so it can neither change nor create a file nor take unbounded memory.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import sqlite3
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..bpe import word_splitter
from ..errors import InputError, StoreError
from ..interrupts import sqlite_call
from ..store import evaluation_rows, migrate
from ..store.base_rows import base_row
from ..store.check import history_problems
from ..store.files import wal_state
from ..store.store import Store
from ..text.inputs import ITERABLE, STDIN
from ..text.pretokenize import describe_pattern, is_gpt2
from ..training.options import DEFERRED_COUNT_WORDS, DEFERRED_WAL_BYTES

#: ``show`` tables: what each lists, in which order (ties broken as the trainer breaks them).
SHOW_QUERIES = {
    "merges": 'SELECT m.rank, l.bytes AS "left", r.bytes AS "right", CAST(l.bytes || r.bytes AS BLOB) AS token,'
              ' m.count, m.token AS token_id FROM merges m JOIN vocab l ON l.id = m."left"'
              ' JOIN vocab r ON r.id = m."right" ORDER BY m.rank LIMIT ? OFFSET ?',
    # n_tokens is added by ``show``: a word's split under every merge the store holds
    "words": "SELECT bytes AS word, count, length(bytes) AS n_bytes"
             " FROM words ORDER BY count DESC, bytes LIMIT ? OFFSET ?",
    "pairs": 'SELECT l.bytes AS "left", r.bytes AS "right", p.count FROM pair_counts p'
             ' JOIN vocab l ON l.id = p."left" JOIN vocab r ON r.id = p."right"'
             " ORDER BY p.count DESC, l.bytes DESC, r.bytes DESC LIMIT ? OFFSET ?",
    "vocab": "SELECT id, bytes AS token, kind, length(bytes) AS n_bytes FROM vocab ORDER BY id LIMIT ? OFFSET ?",
    # held-out measurements (bpe-store eval, train --eval): this store's own first, by size
    "evals": "SELECT tokenizer, vocab_size, grp, bytes_per_token, chars_per_token, tokens_per_word,"
             " renyi_efficiency, vocab_used, tokens_unused, parity, heldout, created_at FROM eval_curve"
             " ORDER BY tokenizer != 'self', tokenizer, heldout_digest, grp != 'all', grp, vocab_size"
             " LIMIT ? OFFSET ?",
}
#: Checkpoints an ETA's speed is measured over (the newest ones).
ETA_CHECKPOINTS = 10

Row = dict[str, Any]


def token_text(b: bytes) -> str:
    """Token bytes as text: UTF-8, with any invalid byte shown as ``\\xNN``."""
    return b.decode("utf-8", "backslashreplace")


def _text_factory(b: bytes) -> str:
    # CAST(blob AS TEXT) in a user's query can give invalid UTF-8: keep each bad byte as a lone
    # surrogate (bpe_store.inspection.display shows it as \xNN), do not fail
    return b.decode("utf-8", "surrogateescape")


@contextmanager
def reading(path: str | os.PathLike, *, allow_old: bool = False, timeout: float | None = None) -> Iterator[Store]:
    """A read-only store whose queries all see one snapshot; closed (and released) on exit.

    ``timeout``: seconds after which a query is stopped (StoreError); Ctrl-C always stops one."""
    store = Store.open(path, readonly=True, allow_old=allow_old)
    try:
        store.db.text_factory = _text_factory
        store.db.execute("PRAGMA query_only = ON")
        with store.time_limit(timeout), store.snapshot():
            yield store
    finally:
        store.close()


# -- status ------------------------------------------------------------------------------------


def _age_s(at: str | None) -> float | None:
    if not at:
        return None
    then = _dt.datetime.fromisoformat(at)
    return max((_dt.datetime.now(_dt.timezone.utc) - then).total_seconds(), 0.0)


def _input_state(path: str, size: int, mtime_ns: int) -> str:
    """``ok``, ``missing``, ``unreadable``, ``changed`` (other size) or ``touched`` (same size, other mtime)."""
    try:
        st = os.stat(path)
    except PermissionError:
        return "unreadable"  # e.g. a user who may read the store but not the run's inputs
    except OSError:
        return "missing"
    if not stat.S_ISREG(st.st_mode):
        return "missing"
    if st.st_size != size:
        return "changed"
    return "ok" if st.st_mtime_ns == mtime_ns else "touched"


def _inputs(store: Store) -> list[Row]:
    """The run's inputs: path, size, fingerprint (``digest`` by ``hash``), kind, and ``state``
    (``_input_state``, or ``stream`` for standard input and an iterable, whose ``size``, ``digest``
    and ``documents`` say how much of the stream has been counted: a resume skips that much of the
    stream given again)."""
    out = []
    for r in store.sql("SELECT * FROM sources ORDER BY id").mappings():
        stream = r["path"] in (STDIN, ITERABLE)
        # r.get: a store older than v0_3_0_input_kinds has neither kinds nor document counts, one older
        # than v0_3_0_source_digest a column sha256 and no hash
        out.append({"path": r["path"], "size": r["size"], "digest": r.get("digest", r.get("sha256")),
                    "hash": r.get("hash", "sha256"),
                    "format": r.get("format", "text"), "compression": r.get("compression", "none"),
                    "text_field": r.get("text_field"), "documents": r.get("documents"),
                    "state": "stream" if stream else _input_state(r["path"], r["size"], r["mtime_ns"])})
    return out


def _counting(store: Store) -> Row:
    r = store.sql('SELECT count(*), coalesce(sum(counted), 0), coalesce(sum("end" - start), 0),'
                  ' coalesce(sum(CASE WHEN counted = 1 THEN "end" - start ELSE 0 END), 0) FROM chunks').one()
    return {"chunks_total": r[0], "chunks_done": r[1], "bytes_total": r[2], "bytes_done": r[3]}


def _words(store: Store) -> int:
    """The number of distinct words. Why ``max(id)``, not ``count(*)``: bpe_store gives words the
    ids 1, 2, 3, ... and never deletes one (``Store.add_word_counts``), so the largest id is the
    count, read at the end of the B-tree, while ``count(*)`` walked all ~7 M rows of an
    OpenWebText store (seconds from a cold cache; bench/RESULTS-scale.md)."""
    return store.sql("SELECT coalesce(max(id), 0) FROM words").scalar()


def _speed(store: Store, phase: str, counting: Row) -> float | None:
    """Units per second of training time: bytes while counting, merges while merging."""
    if phase == "counting":
        el = store.sql("SELECT max(elapsed_s) FROM checkpoints WHERE phase = 'counting'").scalar()
        # None, not 0, before a unit is done (a stream's only unit is done when the stream ends):
        # a speed of 0 would make the ETA a division by zero
        return counting["bytes_done"] / el if el and counting["bytes_done"] else None
    rows = store.sql("SELECT merges_done, elapsed_s FROM checkpoints WHERE phase IN ('merging', 'done')"
                     " ORDER BY id DESC LIMIT ?", (ETA_CHECKPOINTS,)).fetchall()
    if len(rows) < 2:
        return None
    (m1, e1), (m0, e0) = rows[0], rows[-1]
    return (m1 - m0) / (e1 - e0) if e1 > e0 and m1 > m0 else None


def _eta(phase: str, speed: float | None, counting: Row, merges_done: int, target: int) -> float | None:
    if phase == "done":
        return 0.0
    if speed is None:
        return None
    if phase == "counting":
        return (counting["bytes_total"] - counting["bytes_done"]) / speed  # merging not known yet
    return max(target - merges_done, 0) / speed


def _sessions(store: Store, limit: int = 10) -> list[Row]:
    if not store.sql("SELECT 1 FROM sqlite_master WHERE name = 'sessions'").first():
        return []
    rows = store.sql("SELECT id, pid, host, argv, bpe_store_version, started_at, ended_at, outcome,"
                     " merges_start, merges_end FROM sessions ORDER BY id DESC LIMIT ?", (limit,)).mappings()
    out = []
    for r in rows:
        d = dict(r)
        d["argv"] = json.loads(d["argv"]) if d["argv"] else None
        out.append(d)
    return out[::-1]


def _holder(held: bool, sessions: list[Row]) -> Row | None:
    """The session training in the store now: the newest one still open, if the store is held.

    Also sets each session's ``state``: its outcome, ``running`` for the holder, or ``ended
    abruptly`` for an open row nobody holds (killed, or stopped at once by a second Ctrl-C)."""
    open_ = [s for s in sessions if s["ended_at"] is None]
    holder = open_[-1] if held and open_ else None
    for s in sessions:
        s["state"] = s["outcome"] or ("running" if s is holder else "ended abruptly")
    if held and holder is None:
        return {"pid": None, "host": None, "started_at": None, "argv": None}
    return holder


def _db_bytes(path: Path) -> int:
    """The store's bytes, its WAL's included. A file gone meanwhile counts 0: a run that closes
    removes its WAL, maybe between a look and a stat."""
    total = 0
    for p in (path, Path(f"{path}-wal")):
        try:
            total += p.stat().st_size
        except FileNotFoundError:
            pass
    return total


def _reader_budgets(store: Store) -> Row:
    """The newest session's reader budgets (``train --reader-memory-words``, ``--reader-wal-bytes``):
    ``recorded`` False when it recorded none (an older schema or bpe_store), the defaults then."""
    cols = {r[1] for r in store.sql("PRAGMA table_info(sessions)")}
    row = None
    if "reader_wal_bytes" in cols:
        row = store.sql("SELECT reader_memory_words, reader_wal_bytes FROM sessions ORDER BY id DESC LIMIT 1").first()
    words, wal = row if row is not None else (None, None)
    recorded = isinstance(words, int) and isinstance(wal, int)
    return {"memory_words": words if recorded else DEFERRED_COUNT_WORDS,
            "wal_bytes": wal if recorded else DEFERRED_WAL_BYTES, "recorded": recorded}


def _reader_budgets_default() -> Row:
    return {"memory_words": DEFERRED_COUNT_WORDS, "wal_bytes": DEFERRED_WAL_BYTES, "recorded": False}


def reader_budgets_text(b: Row) -> str:
    """The budgets as status says them."""
    wal = b["wal_bytes"]
    size = f"{wal >> 30} GiB" if wal >= 1 << 30 and wal % (1 << 30) == 0 else f"{wal:,} bytes"
    whose = "the run's" if b["recorded"] else "the defaults of"
    return (f"up to {b['memory_words']:,} words of counts in memory, then into the WAL while it is under "
            f"{size} ({whose} --reader-memory-words, --reader-wal-bytes)")


def _wal_note(wal: Row, last_write_deferred: bool, budgets: Row) -> str | None:
    notes = []
    if wal["wal_blocked"]:
        notes.append(f"{wal['wal_frames_pending']} WAL frames not yet copied into the store: a reader holds an "
                     "old snapshot (or a checkpoint is being copied right now), so the WAL cannot be emptied; "
                     "meanwhile a trainer writes only its merge logs and defers full checkpoints and counting "
                     f"flushes: {reader_budgets_text(budgets)}")
    if last_write_deferred:
        notes.append("the run finished while a reader held an old snapshot, so its last checkpoint only logged "
                     "the merges: the result is complete, and the same train command drops the working state "
                     "(pair counts, words' tokens) a finished run does not keep")
    return "; ".join(notes) or None


def status(path: str | os.PathLike, *, timeout: float | None = None) -> Row:
    """Everything ``bpe-store status`` shows, as one dict (the ``--json`` output)."""
    p = Path(path)
    held = Store.is_locked(p) if p.is_file() else False
    with reading(p, allow_old=True, timeout=timeout) as store:
        run = store.run_row()
        # damaged history rows (checkpoints, sessions: nothing a resume or an export reads) are
        # named, and what depends on them (speed, ETA, sessions) is left out: train, export and
        # from_store use such a store too, so status shows it rather than refuse it
        problems = history_problems(store)
        rev = store.revision
        specials = json.loads(run["special_tokens"])
        target = run["vocab_size"] - 256 - len(specials)
        merges_done = store.sql("SELECT count(*) FROM merges").scalar()
        counting = _counting(store)
        speed = None if problems else _speed(store, run["phase"], counting)
        last = None if problems else store.sql("SELECT at, phase, merges_done, elapsed_s FROM checkpoints"
                                               " ORDER BY id DESC LIMIT 1").mappings().first()
        sessions = [] if problems else _sessions(store)
        budgets = _reader_budgets(store) if not problems else _reader_budgets_default()
        pairs = pairs_state(store)
        if pairs["next"] is not None:  # text, for --json
            pairs["next"] = {**pairs["next"], "left": token_text(pairs["next"]["left"]),
                             "right": token_text(pairs["next"]["right"])}
        info = {
            "path": str(p), "schema": rev, "schema_is_current": rev == migrate.head_revision(),
            "phase": run["phase"], "stop_reason": run["stop_reason"],
            "vocab_size": run["vocab_size"], "special_tokens": specials, "pattern": run["pattern"],
            "pattern_is_gpt2": is_gpt2(run["pattern"]),
            "pattern_name": describe_pattern(run["pattern"]),
            # run.get: a store older than v0_3_0_trainer_options has neither column (the defaults)
            "min_frequency": run.get("min_frequency", 1), "max_token_length": run.get("max_token_length"),
            "invalid_utf8": run["invalid_utf8"], "inputs": _inputs(store), "counting": counting,
            "merges_done": merges_done, "merges_target": target, "pairs": pairs,
            "words": _words(store),
            "elapsed_s": float(last["elapsed_s"]) if last else 0.0,
            "speed": speed, "speed_unit": "bytes/s" if run["phase"] == "counting" else "merges/s",
            "eta_s": _eta(run["phase"], speed, counting, merges_done, target),
            "last_checkpoint": ({**dict(last), "age_s": _age_s(last["at"])} if last else None),
            "created_at": run["created_at"], "updated_at": run["updated_at"],
            "bpe_store_version": run["bpe_store_version"],
            "superword": _superword(run, merges_done),
            "base": base_row(store),  # the tokenizer the run extends (None: none)
            "eval": evaluation_rows.latest(store) if evaluation_rows.has_table(store) else None,
        }
        if info["superword"] is not None:
            info["pattern_name"] = "SuperBPE stage 2 (docs/superword.md)"
        # a finished run that kept its working state: its last checkpoint was deferred (wal_watch)
        last_write_deferred = (run["phase"] == "done" and run.get("state_merges") is not None
                               and run["state_merges"] < merges_done)
    info["history_problems"] = problems
    info["db_bytes"] = _db_bytes(p)
    info.update(wal_state(p))
    info["reader_budgets"] = budgets
    info["wal_note"] = _wal_note(info, last_write_deferred, budgets)
    info["held"] = held
    info["holder"] = _holder(held, sessions)
    info["sessions"] = sessions
    return info


def _superword(run: Row, merges_done: int) -> Row | None:
    """A superword store's stage 2 (docs/superword.md): the transition point, stage 1's pattern,
    the word limit and the superword merges so far; None for any other store."""
    t = run.get("superword_from")
    if t is None:
        return None
    return {"from": t, "stage1_pattern": describe_pattern(run["stage1_pattern"]),
            "max_words": run["superword_max_words"], "superword_merges": max(merges_done - t, 0)}


# -- pair counts -------------------------------------------------------------------------------


def pairs_state(store: Store) -> Row:
    """What the store's ``pair_counts`` hold: ``{"held", "pairs_merges", "merges_done", "top_only",
    "stage2", "next", "note"}``. ``held``: whether it holds pair counts at all; ``pairs_merges``: the
    merges they follow (``Store.pairs_merges``); ``top_only``: a finished run keeps only its most
    frequent pairs, and so does a superword store while stage 2 merges (``stage2``); ``next``: the
    first row of ``top_pairs`` (``{"left", "right", "count"}``, the next merge when the counts follow
    every merge), or None; ``note``: one line for people when
    the counts are absent or lag behind the merge log, else None."""
    run = store.run_row()
    done = store.sql("SELECT count(*) FROM merges").scalar()
    follows = run.get("pairs_merges")  # absent before v0_3_0_next_pairs (status reads old stores)
    if "pairs_merges" not in run and run["phase"] == "merging":
        follows = run.get("state_merges", done)
    top = store.sql('SELECT l.bytes, r.bytes, p.count FROM pair_counts p JOIN vocab l ON l.id = p."left"'
                    ' JOIN vocab r ON r.id = p."right" ORDER BY p.count DESC, l.bytes DESC, r.bytes DESC'
                    ' LIMIT 1').first()
    stage2 = run.get("superword_from") is not None and run["phase"] == "merging"
    state: Row = {"held": follows is not None, "pairs_merges": follows, "merges_done": done,
                  "top_only": (run["phase"] == "done" or stage2) and follows is not None, "stage2": stage2,
                  "next": None if top is None else {"left": top[0], "right": top[1], "count": top[2]},
                  "note": None}
    if follows is None:
        if run["phase"] == "counting":
            state["note"] = ("no pair counts yet: the store is still counting (pairs are counted when "
                             "counting is over)")
        elif stage2:
            state["note"] = ("no pair counts yet: stage 2 writes its most frequent pairs once its engine is "
                             "built, and again at each checkpoint")
        elif run["phase"] == "merging" or run.get("state_merges") is not None:
            state["note"] = ("no pair counts yet: merging began while a reader held an old snapshot, so "
                             "they were left to the first full checkpoint")
        else:
            state["note"] = ("this store holds no pair counts: an older bpe_store finished it and kept "
                             "none (continuing it to a larger --vocab-size keeps them)")
    elif top is None and run["phase"] == "done":
        state["note"] = "no pair is left to merge: continuing this store would learn nothing more"
    elif stage2 and follows < done:
        state["note"] = (f"stage 2's most frequent pairs after the first {follows} of {done} merges (they are "
                         "written at each checkpoint, the merge log more often)")
    elif follows < done:
        state["note"] = (f"pair counts after the first {follows} of {done} merges (they are written at "
                         "full checkpoints, the merge log more often)")
    return state


def pairs_note(path: str | os.PathLike, *, timeout: float | None = None) -> str | None:
    """``pairs_state``'s note for the store at ``path`` (None: its pair counts follow every merge)."""
    with reading(path, timeout=timeout) as store:
        return pairs_state(store)["note"]


# -- show --------------------------------------------------------------------------------------


def show(path: str | os.PathLike, what: str, limit: int = 20, offset: int = 0, *,
         timeout: float | None = None) -> tuple[list[str], list[tuple]]:
    """``(columns, rows)`` of one of ``SHOW_QUERIES``; token columns hold bytes."""
    if what not in SHOW_QUERIES:
        raise InputError(f"cannot show {what!r}: choose one of {', '.join(SHOW_QUERIES)}")
    if limit < 0 or offset < 0:
        raise InputError("--limit and --offset must not be negative")
    with reading(path, timeout=timeout) as store:
        if what == "evals" and not evaluation_rows.has_table(store):
            raise StoreError(f"{path}: its schema predates evaluations; upgrade it with: bpe-store db upgrade {path}")
        res = store.sql(SHOW_QUERIES[what], (limit, offset))
        columns, rows = list(res.keys()), [tuple(r) for r in res]
        if what == "words":
            split = splitter(store)
            columns, rows = columns + ["n_tokens"], [r + (len(split(r[0])),) for r in rows]
        return columns, rows


def splitter(store: Store) -> Callable[[bytes], list[int]]:
    """A word's token ids under every merge ``store`` holds (``bpe.word_splitter``): exact at
    any time, where ``words.tokens`` lags behind the merge log while merging and is not kept
    once the run is done."""
    n_special = store.sql("SELECT count(*) FROM vocab WHERE kind = 'special'").scalar()
    return word_splitter([(a, b, t) for _r, a, b, t, _c in store.load_merges()], n_special)


# -- why ---------------------------------------------------------------------------------------


def _find_token(store: Store, token: str | int) -> int:
    """The vocabulary id of ``token`` (text: the first id spelling its UTF-8 bytes)."""
    if isinstance(token, int):
        if not store.sql("SELECT 1 FROM vocab WHERE id = ?", (token,)).first():
            n = store.sql("SELECT count(*) FROM vocab").scalar()
            raise InputError(f"no token with id {token} (the vocabulary has ids 0..{n - 1})")
        return token
    found = store.sql("SELECT min(id) FROM vocab WHERE bytes = ?", (token.encode("utf-8"),)).scalar()
    if found is None:
        raise InputError(f"{token!r} is not a token of this vocabulary; "
                         "try `bpe-store show DB vocab` or a shorter piece of it")
    return found


def _tree(store: Store, tid: int, first: int, vocab: dict[int, tuple[bytes, str]]) -> Row:
    """How token ``tid`` was built: ``{"id", "bytes", "kind", "rank", "count", "parts"}``."""
    b, kind = vocab[tid]
    node: Row = {"id": tid, "bytes": b, "kind": kind, "rank": None, "count": None, "parts": []}
    if kind == "merge":
        row = store.sql('SELECT rank, "left", "right", count FROM merges WHERE rank = ?', (tid - first,)).one()
        node["rank"], node["count"] = row[0], row[3]
        node["parts"] = [_tree(store, row[1], first, vocab), _tree(store, row[2], first, vocab)]
    return node


def why(path: str | os.PathLike, token: str | int, limit: int = 10, *, timeout: float | None = None) -> Row:
    """How ``token`` was built (its merge tree with counts at merge time) and the most frequent
    words that contain its bytes, each with its current split."""
    with reading(path, timeout=timeout) as store:
        vocab = {i: (b, k) for i, b, k in store.load_vocab()}
        n_special = sum(1 for b, k in vocab.values() if k == "special")
        tid = _find_token(store, token)
        tbytes = vocab[tid][0]
        first = store.sql("SELECT min(id) FROM vocab WHERE bytes = ?", (tbytes,)).scalar()
        tree = _tree(store, tid, n_special + 256, vocab)
        rows = store.sql("SELECT bytes, count FROM words WHERE instr(bytes, ?) > 0"
                         " ORDER BY count DESC, bytes LIMIT ?", (tbytes, limit)).fetchall()
        total = store.sql("SELECT count(*), coalesce(sum(count), 0) FROM words WHERE instr(bytes, ?) > 0",
                          (tbytes,)).one()
        words = []
        split_of = splitter(store)
        for w, c in rows:
            split = split_of(w)
            words.append({"word": w, "count": c, "split": [vocab[t][0] for t in split], "uses": first in split})
    info = {"token": tree, "first_id": first, "words": words,
            "words_containing": total[0], "occurrences": total[1]}
    info["answer"] = why_answer(info, tid)
    return info


def why_answer(info: Row, tid: int) -> str:
    """The last line of ``why``: what the words say about the token, whatever they are (none, none
    listed, none using it). ``tid``: the id asked about (``info["first_id"]`` is the first id of
    its bytes, the one words use)."""
    node = info["token"]
    if node["kind"] == "special":
        return "a special token: never inside a word (it splits the text and is never counted)"
    if tid != info["first_id"]:
        dup = f"id {tid} spells the same bytes as id {info['first_id']}, which words use instead; "
    else:
        dup = ""
    if not info["words_containing"]:
        return dup + "no word the store counted holds these bytes, so no training text used this token"
    words = info["words"]
    if not words:
        return dup + f"{info['words_containing']:,} words hold these bytes (none listed: --limit 0)"
    using = sum(1 for w in words if w["uses"])
    if using == len(words):
        return dup + f"all {len(words)} listed words use it"
    if using:
        return dup + (f"{using} of the {len(words)} listed words {'uses' if using == 1 else 'use'} it; in the "
                      "others (no *) its bytes are inside a longer token or across two")
    return dup + (f"none of the {len(words)} listed words uses it: their splits put its bytes inside longer "
                  "tokens or across two")


# -- sql ---------------------------------------------------------------------------------------


#: The largest value (text or blob, in bytes) a ``sql`` statement may make or return; a bigger
#: one fails cleanly ("string or blob too big") instead of taking gigabytes
#: (``SELECT randomblob(900000000)``).
SQL_MAX_VALUE_BYTES = 128 << 20

#: PRAGMAs ``sql`` allows: they only read. State pragmas may not be given a value (that sets it);
#: the introspection ones take a table or index name.
_READ_PRAGMAS = {"application_id", "user_version", "schema_version", "page_size", "page_count",
                 "freelist_count", "journal_mode", "encoding", "auto_vacuum", "data_version",
                 "compile_options", "database_list", "function_list", "pragma_list", "collation_list",
                 "module_list", "table_list", "integrity_check", "quick_check", "foreign_key_check"}
_NAME_PRAGMAS = {"table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
_DENIED_FUNCTIONS = {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"}


class _ReadOnlyAuthorizer:
    """``sqlite3`` authorizer for ``sql``: reading is allowed, everything else is denied, and the
    first denial is remembered for the error message."""

    def __init__(self) -> None:
        self.denied: str | None = None
        #: the tables the statement reads (a view's tables included)
        self.tables: set[str] = set()

    def __call__(self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None) -> int:
        if action == sqlite3.SQLITE_READ:
            self.tables.add(arg1 or "")
            return sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_SELECT, getattr(sqlite3, "SQLITE_RECURSIVE", 33)):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() not in _DENIED_FUNCTIONS:
                return sqlite3.SQLITE_OK
            return self._deny(f"the function {arg2}() is not allowed")
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if (name in _READ_PRAGMAS and arg2 is None) or name in _NAME_PRAGMAS:
                return sqlite3.SQLITE_OK
            return self._deny(f"PRAGMA {arg1}{'' if arg2 is None else ' = ' + str(arg2)} is not allowed")
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master":
            # SQLite asks this while preparing a table-valued pragma (pragma_table_info(...));
            # nothing writes the schema: writable_schema is a denied PRAGMA and the file is read-only
            return sqlite3.SQLITE_OK
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            return self._deny("ATTACH (and VACUUM INTO) would create or open another file")
        if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
            return self._deny("transactions are not needed: the statement reads one snapshot")
        return self._deny("it would change the store")

    def _deny(self, why: str) -> int:
        if self.denied is None:
            self.denied = why
        return sqlite3.SQLITE_DENY


def _sql_error(exc: sqlite3.Error, auth: _ReadOnlyAuthorizer, store: Store) -> BaseException:
    msg = str(exc)
    if isinstance(exc, sqlite3.Warning):  # more than one statement
        return InputError(f"give one SQL statement at a time ({exc})")
    if getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_INTERRUPT or "malformed" in msg:
        return store._error(exc)  # Ctrl-C or the time limit; a damaged store (exit 4, the table named)
    if auth.denied is not None or "not authorized" in msg:
        return InputError(f"bpe-store sql is read-only: {auth.denied or msg}; the store was not changed")
    if "readonly" in msg or "read-only" in msg or "query_only" in msg or "query only" in msg:
        return InputError(f"bpe-store sql is read-only: the store was not changed ({msg})")
    if "too big" in msg:
        return InputError(f"SQL error: {msg} (bpe-store sql makes values of at most "
                          f"{SQL_MAX_VALUE_BYTES >> 20} MiB)")
    return InputError(f"SQL error: {msg}")


@contextmanager
def query(path: str | os.PathLike, statement: str, *, timeout: float | None = None,
          note: Callable[[str], None] | None = None) -> Iterator[tuple[list[str], Iterator[tuple]]]:
    """``with query(db, "SELECT ...") as (columns, rows):`` — one read-only statement, its rows
    streamed from one snapshot while the block runs. Writes, ATTACH, VACUUM INTO, PRAGMAs that
    set something and extension loading are refused (InputError); no value may exceed
    ``SQL_MAX_VALUE_BYTES``; Ctrl-C stops a long query, and so does ``timeout`` (seconds).
    ``note`` is called with one line (``pairs_state``) before the rows when the statement reads
    ``pair_counts`` (``top_pairs`` does) and the store holds none, or they lag behind the merges."""
    with reading(path, timeout=timeout) as store:
        auth = _ReadOnlyAuthorizer()
        db = store.db
        db.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SQL_MAX_VALUE_BYTES)
        db.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        db.set_authorizer(auth)
        try:
            try:
                with sqlite_call():  # Ctrl-C in the authorizer must not become a refusal
                    cur = db.execute(statement)
            except sqlite3.Error as exc:
                raise _sql_error(exc, auth, store) from None
            if note is not None and "pair_counts" in auth.tables:
                said = pairs_state(store)["note"]
                if said:
                    note(said)

            def rows() -> Iterator[tuple]:
                try:
                    while True:
                        with sqlite_call():
                            batch = cur.fetchmany(1000)
                        if not batch:
                            return
                        yield from batch
                except sqlite3.Error as exc:
                    raise _sql_error(exc, auth, store) from None

            yield [d[0] for d in cur.description or ()], rows()
        finally:
            db.set_authorizer(None)


#: What ``write_query`` formats natively, and the statements it takes (a read of rows; anything
#: else, such as a PRAGMA or EXPLAIN, goes through ``query``).
_NATIVE_FORMATS = ("csv", "json", "jsonl")
_ROWS_STATEMENT = re.compile(r"\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*(?:SELECT|WITH|VALUES)\b", re.I | re.S)


def _csv_rules() -> tuple[bool, bool]:
    """How this Python's ``csv.writer`` (QUOTE_MINIMAL, lineterminator "\\n") writes two edge
    cases that differ between versions: a field holding "\\r" quoted, a lone empty field as ``""``."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["a\rb"])
    w.writerow([""])
    first, second = buf.getvalue().split("\n")[:2] if "\n" in buf.getvalue() else ("", "")
    return first.startswith('"'), second == '""'


def write_query(path: str | os.PathLike, statement: str, out: Any, fmt: str, limit: int | None = None, *,
                note: Callable[[str], None] | None = None) -> int | None:
    """Write the rows of one read-only statement to the binary file ``out`` (with a ``fileno``) as
    csv, json or jsonl,
    formatted natively (``_core.write_query``): what ``query`` and the CLI's ``write_rows`` make,
    at about the speed of ``sqlite3 -csv``. The statement is checked by ``query``'s authorizer
    first (compiled as ``EXPLAIN``, so nothing runs twice), then runs on a read-only native
    connection of its own. Returns the number of rows, or None when this path does not apply
    (another format, a statement that is not a SELECT/WITH/VALUES, no native core, a store opened
    as immutable): the caller then uses ``query``."""
    from ..store import native_connection

    if fmt not in _NATIVE_FORMATS or not _ROWS_STATEMENT.match(statement) or not native_connection.can_write_query():
        return None
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: an in-memory stream
        return None
    with reading(path) as store:
        if store.immutable:
            return None
        auth = _ReadOnlyAuthorizer()
        db = store.db
        db.set_authorizer(auth)
        try:
            with sqlite_call():
                db.execute("EXPLAIN " + statement).fetchall()
        except sqlite3.Error as exc:
            raise _sql_error(exc, auth, store) from None
        finally:
            db.set_authorizer(None)
        if note is not None and "pair_counts" in auth.tables:
            said = pairs_state(store)["note"]
            if said:
                note(said)
        quote_cr, quote_lone_empty = _csv_rules()
        out.flush()
        try:
            return native_connection.write_query(Path(path), statement, fd, fmt, limit, SQL_MAX_VALUE_BYTES, quote_cr,
                                        quote_lone_empty)
        except sqlite3.Error as exc:
            raise _sql_error(exc, auth, store) from None


def sql(path: str | os.PathLike, statement: str, limit: int | None = None, *,
        timeout: float | None = None) -> tuple[list[str], list[tuple]]:
    """``(columns, rows)`` of one read-only SQL statement (see ``query``). A write is refused."""
    with query(path, statement, timeout=timeout) as (columns, rows):
        out = []
        for r in rows:
            if limit is not None and len(out) >= limit:
                break
            out.append(tuple(r))
        return columns, out
