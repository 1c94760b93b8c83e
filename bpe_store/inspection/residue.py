"""Residue tokens (LiteToken, arXiv 2602.04706): tokens a merge made that the training data itself
almost never yields as a final token, because later merges absorb them.

For each token a merge made, two counts from the store alone: ``merge_count``, how often its pair
occurred when it was merged (``merges.count``: its uses as an intermediate step), and
``final_count``, how often it is a token of the final encoding of the store's words (each word
encoded with every merge, weighted by its count). Their ratio is LiteToken's final-to-intermediate
frequency; a token whose ratio is under ``RESIDUE_RATIO`` is a residue. ``bpe-store eval
--residues`` writes the counts to the table ``token_use``, whose view ``residue_tokens`` lists
them, lowest ratio first; the report computes and lists them (reading only). Analysis only: no
token is removed.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ..store.store import Store

#: A token whose final uses are fewer than this share of its merge count is a residue.
RESIDUE_RATIO = 0.01
#: Words are encoded this many at a time (memory stays at a few times their bytes).
_WORD_BATCH = 1 << 20

#: ``[(token id, merge count, final count)]`` of every merge's token, by id
TokenUse = list[tuple[int, int, int]]


def _final_counts(store: Store, tok: object, token_lengths: np.ndarray, n: int) -> np.ndarray:
    """Count-weighted occurrences of each id in the final encoding of every word of ``store``.

    Why one native call per batch: ``encode_pieces`` gives the batch's ids back to back; each
    id's word is found from byte offsets (a word's tokens spell exactly its bytes), so no Python
    call is made per word."""
    import numpy as np

    out = np.zeros(n, dtype=np.int64)
    rows = iter(store.sql("SELECT bytes, count FROM words ORDER BY id"))
    while True:
        batch = list(itertools.islice(rows, _WORD_BATCH))
        if not batch:
            return out
        words = [bytes(w) for w, _ in batch]
        counts = np.fromiter((c for _, c in batch), dtype=np.int64, count=len(batch))
        core = getattr(tok, "_core", None)
        if core is not None:
            ids = np.asarray(core.encode_pieces(words), dtype=np.int64)
        else:  # no native core: the Python encoder, word by word
            ids = np.fromiter((i for w in words for i in tok._encode_piece(w)), dtype=np.int64)  # type: ignore[attr-defined]
        ends = np.cumsum([len(w) for w in words])
        starts = np.cumsum(token_lengths[ids]) - token_lengths[ids]
        np.add.at(out, ids, counts[np.searchsorted(ends, starts, side="right")])


def token_use(db: str | Path) -> tuple[TokenUse, int]:
    """``(token use, merges)`` of the store ``db``: each merge's token with its merge count and
    final count (``_final_counts``), for the merge log of ``merges`` merges it holds now."""

    from ..tokenizer.tokenizer import Tokenizer, load_store
    from .answers import reading
    from .compare import lengths_of

    vocab, merges, specials, pattern = load_store(db)
    tok = Tokenizer(vocab, merges, specials, pattern=pattern)
    lengths = lengths_of(vocab)
    with reading(db) as store:
        log = store.load_merges()  # (rank, left, right, token, count)
        finals = _final_counts(store, tok, lengths, len(lengths))
        n_special = len(json.loads(store.run_row()["special_tokens"]))
    first = n_special + 256
    # a merge whose bytes an earlier merge made reuses that token: its merge count is their sum
    made: dict[int, int] = {}
    for _r, _a, _b, t, c in log:
        made[t] = made.get(t, 0) + c
    return [(t, c, int(finals[t])) for t, c in sorted(made.items()) if t >= first], len(log)


def record_token_use(db: str | Path, rows: TokenUse, n_merges: int) -> str | None:
    """Write ``token_use(db)``'s result into the store (replacing what it held); None when
    written, else why not (a store that is training, read-only, or older than the table)."""
    from ..errors import StoreError
    from ..store import evaluation_rows
    from ..store.store import Store

    try:
        with Store.open(db) as store:
            if not evaluation_rows.has_table(store):
                return f"{db}: its schema predates token_use; run `bpe-store db upgrade {db}` to record it"
            with store.transaction():
                store.sql("DELETE FROM token_use")
                store.executemany("INSERT INTO token_use (token, merge_count, final_count, merges) VALUES (?, ?, ?, ?)",
                                  [(t, m, f, n_merges) for t, m, f in rows])
    except StoreError as exc:
        return str(exc)
    return None


def residues(rows: TokenUse, ratio: float = RESIDUE_RATIO) -> TokenUse:
    """The residue tokens among ``rows``, lowest final-to-merge ratio first."""
    out = [r for r in rows if r[1] > 0 and r[2] / r[1] < ratio]
    return sorted(out, key=lambda r: (r[2] / r[1], r[0]))
