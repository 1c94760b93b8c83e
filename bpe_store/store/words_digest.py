"""The words' digest in the store: computed from ``words`` when counting ends, recorded by every
checkpoint from then on (``checkpoints.words_digest``), and compared with the words a resume, a
grow or ``db check --deep`` reads (``check``). The digest itself is ``digest.words_digest``.

Why only from the end of counting: until then every flush adds to the counts, and a resume of
counting reads no word (it counts the units not yet counted and adds them); from then on every
merge depends on the words, and nothing but a hand edit changes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import native
from ..errors import StoreError
from . import digest
from .schemas import REVISIONS

#: A ``bpe_store.store.store.Store`` (not imported: this module sits below it, as its rows do)
Store = Any

#: The first schema revision whose checkpoints record the words' digest.
WORDS_DIGEST_SINCE = "v0_4_0_words_digest"
#: Words digested per native read. Why in parts: the digest is a sum, and a whole 12 GB store's
#: words read at once (7 M rows, ~250 MB) would sit beside the merge engine being built.
_PART = 1 << 20


def of_rows(rows: Any) -> tuple[int, int, int]:
    """``(rows, sum 1, sum 2)`` of words as the merge engine is built from them: a native
    ``WordRows``, or tuples ``(id, bytes, count, ...)``."""
    if native.BUILT and isinstance(rows, native.core.WordRows):
        return native.core.words_digest(rows)
    return digest.add_words((0, 0, 0), ((r[0], r[1], r[2]) for r in rows))


def _checked(store: Store, rows: Sequence[tuple]) -> list[tuple[int, bytes, int]]:
    """``rows`` ``(id, bytes, count)`` read by the driver; StoreError for a value of the wrong type."""
    for r in rows:
        if type(r[0]) is not int or not isinstance(r[1], bytes) or type(r[2]) is not int:
            raise StoreError(f"{store.path}: the store's words are damaged (word {r[0]!r} is not an id, "
                             "bytes and a count); start over with --restart")
    return rows  # type: ignore[return-value]


def of_counter(counter: Any) -> str | None:
    """The digest of the words of a native ``WordCounter`` as a first counting flush writes them (ids
    1, 2, ... in its order: ``Store.take_fresh_word_rows``' counter), or None without the native
    core. Why: the store then holds exactly these words, and reading 515 K of them back to digest
    them (``of_table``) took ~0.2 CPU s of a 16 K store extended on zhwiki-20M."""
    if not native.BUILT or not hasattr(counter, "pack"):
        return None
    return digest.words_digest_text(native.core.words_digest_packed(counter.pack(), 1))


def of_table(store: Store) -> str:
    """The digest of every row of ``words``, read in parts of ``_PART`` ids (natively where the
    store has a native connection)."""
    low, high = store.sql("SELECT coalesce(min(id), 1), coalesce(max(id), 0) FROM words").one()
    total = (0, 0, 0)
    ndb = store._native()
    for lo in range(low - 1, high, _PART):
        where = f"WHERE id > {lo} AND id <= {lo + _PART}"
        if ndb is not None:
            part = store.read_native_words(ndb, f"SELECT id, bytes, count, NULL FROM words {where} ORDER BY id")
            n, s1, s2 = native.core.words_digest(part)
            total = (total[0] + n, (total[1] + s1) % digest.WORDS_P1, (total[2] + s2) % digest.WORDS_P2)
        else:
            total = digest.add_words(total, _checked(store, store.sql(f"SELECT id, bytes, count FROM words {where}")
                                                     .fetchall()))
    return digest.words_digest_text(total)


def recorded(store: Store) -> str | None:
    """The words' digest the newest checkpoint recorded (None: none recorded)."""
    return store.sql("SELECT words_digest FROM checkpoints ORDER BY id DESC LIMIT 1").scalar()


def check(store: Store, rows: Any) -> None:
    """Refuse (StoreError) words that are not those the newest checkpoint recorded: the rows the
    merge engine is about to be built from (``of_rows``). A store whose schema predates the
    digest, or still counting, has none to compare with."""
    revision = getattr(store, "revision", None) or REVISIONS[-1]
    if REVISIONS.index(revision) < REVISIONS.index(WORDS_DIGEST_SINCE):
        return
    want = recorded(store)
    if want is None:
        raise StoreError(f"{store.path}: the store's newest checkpoint has no digest of its words; "
                         "refusing to use them: start over with --restart")
    if not (native.BUILT and isinstance(rows, native.core.WordRows)):
        _checked(store, rows)  # a value of the wrong type: damaged, as the engine would say
    got = digest.words_digest_text(of_rows(rows))
    if got != want:
        n = got.split(":")[0]
        what = (f"it holds {n} words, its newest checkpoint recorded {want.split(':')[0]}"
                if n != want.split(":")[0] else "a word or its count differs from those its newest checkpoint recorded")
        raise StoreError(f"{store.path}: the store's words were changed after counting ({what}); "
                         "refusing to use them: start over with --restart")
