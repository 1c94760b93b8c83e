"""What a store holds once it has merges: the CS336 ``(vocab, merges)`` with their counts, read
and checked (``read_result``): a store's merge log and vocabulary are refused unless bpe_store
could have written them (``result_check``).

Beside the store, below everyone who reads a result: the trainer returns it, the tokenizer and
exports load from it.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

from ..errors import InputError, StoreError
from . import digest
from .base_rows import model_ids, renumber
from .digest import DIGEST_SINCE  # noqa: F401  (the first revision whose checkpoints record the digest)
from .schemas import HEAD, REVISIONS
from .store import Store


@dataclass
class TrainResult:
    """What a finished (or stopped) run holds: CS336 ``vocab`` and ``merges``, plus the counts."""

    vocab: dict[int, bytes]
    merges: list[tuple[bytes, bytes]]
    merge_counts: list[int]
    phase: str
    stop_reason: str | None


def result_check(store: Store, specials: Sequence[str],
                 vocab: list[tuple[int, bytes, str]] | None = None,
                 merges: list[tuple[int, int, int, int, int]] | None = None, *, digest_check: bool = True) -> None:
    """Refuse (StoreError) a merge log and vocabulary that bpe_store could not have written:
    ranks and ids not 0..n-1, a merge of ids it does not yet have, kinds out of place, a count
    that is not a positive integer; a vocabulary row that is not what made it (a special token's
    text, a byte, or the two parts of its merge joined); a merge whose parts or token are not the
    lowest id of their bytes (the ids training uses); and, with ``digest_check``, a merge log that
    does not match the digest its newest checkpoint recorded (``check_merge_digest``).
    ``specials``: the run's special tokens (the store's ``run.special_tokens``)."""
    vocab = store.load_vocab() if vocab is None else vocab
    merges = store.load_merges() if merges is None else merges
    n_special = len(specials)
    first = n_special + 256

    def bad(what: str) -> StoreError:
        return StoreError(f"{store.path}: the store is inconsistent ({what}); start over with --restart")

    if [r[0] for r in vocab] != list(range(len(vocab))) or len(vocab) != first + len(merges):
        raise bad("merges and vocab disagree")
    if [r[0] for r in merges] != list(range(len(merges))):
        raise bad("merge ranks are not 0, 1, 2, ...")
    # Why whole-list comparisons and `type(...) is int` chains rather than a generator per row:
    # this runs at the end of every training and on every load (enwiki's 31.7 K merges: ~0.09 CPU s
    # -> ~0.02). SQLite hands back exactly int, float, str, bytes or None, never a subclass.
    kinds = ["special"] * n_special + ["byte"] * 256 + ["merge"] * len(merges)
    if [k for _, _, k in vocab] != kinds or any(type(b) is not bytes for _, b, _ in vocab):
        i, _, _ = next(r for r, k in zip(vocab, kinds) if r[2] != k or type(r[1]) is not bytes)
        raise bad(f"vocab id {i} is not a {kinds[i]} token")
    table = _as_table(merges)  # every value a 64-bit integer, or None
    if table is None or not _ids_in_range(table, first):
        for rank, left, right, token, count in merges:  # says which merge is wrong
            limit = first + rank
            if not (type(left) is type(right) is type(token) is type(count) is int
                    and 0 <= left < limit and 0 <= right < limit and 0 <= token <= limit and count >= 0):
                raise bad(f"merge {rank} is ({left!r}, {right!r}) -> {token!r} with count {count!r}")
    tb = [b for _, b, _ in vocab]
    want = [s.encode("utf-8") for s in specials] + [bytes([b]) for b in range(256)]
    if tb[:first] != want:
        i = next(i for i in range(first) if tb[i] != want[i])
        raise bad(f"vocab id {i} holds {_show(tb[i])}, not the {kinds[i]} token {_show(want[i])}")
    # each merge's token is its two parts joined (a swapped pair, a grown or emptied token fail here)
    if [tb[left] + tb[right] for _, left, right, _, _ in merges] != tb[first:]:
        rank, left, right, _, _ = next(m for m in merges if tb[m[1]] + tb[m[2]] != tb[first + m[0]])
        raise bad(f"merge {rank} joins {_show(tb[left])} and {_show(tb[right])}, but vocab id {first + rank} "
                  f"holds {_show(tb[first + rank])}")
    # training names a token by the lowest id of its bytes (a merge spelling an existing token reuses it)
    lowest = {b: i for i, b in zip(range(len(tb) - 1, n_special - 1, -1), reversed(tb[n_special:]))}
    if table is None or not _lowest_ids(table, [lowest.get(b, -1) for b in tb], first):
        for rank, left, right, token, _ in merges:  # says which merge is wrong
            if lowest[tb[left]] != left or lowest[tb[right]] != right or lowest[tb[first + rank]] != token:
                raise bad(f"merge {rank} is ({left}, {right}) -> {token}, not the ids of its tokens' bytes")
    if digest_check:
        check_merge_digest(store, merges, None if table is None else table.tobytes())


#: From this many merges on, ``result_check`` tests the merges' ids as whole arrays (numpy), and
#: only where one fails, merge by merge to say which. Why: a loop over o200k_base extended (216 K
#: merges) took ~0.35 CPU s of loading it; below, importing numpy would cost more than it saves.
_ARRAY_CHECK = 20_000


def _as_table(merges: list[tuple[int, int, int, int, int]]):
    """``merges`` as an (n, 5) int64 numpy array when they are many (``_ARRAY_CHECK``) and every
    value is a 64-bit integer (SQLite's integers; a float, text or blob is refused by ``array``),
    else None (the check goes merge by merge)."""
    if len(merges) < _ARRAY_CHECK:
        return None
    import numpy as np

    try:
        flat = array("q", chain.from_iterable(merges))
    except (TypeError, OverflowError):
        return None
    return np.frombuffer(flat, dtype=np.int64).reshape(len(merges), 5)


def _ids_in_range(table, first: int) -> bool:
    """Whether every merge of ``table`` (``_as_table``) joins ids it already has into one at most its
    own, with a count >= 0: the merge-by-merge test of ``result_check``, on whole columns."""
    import numpy as np

    limit = first + np.arange(len(table), dtype=np.int64)
    left, right, token, count = table[:, 1], table[:, 2], table[:, 3], table[:, 4]
    return bool(((left >= 0) & (left < limit) & (right >= 0) & (right < limit) & (token >= 0) & (token <= limit)
                 & (count >= 0)).all())


def _lowest_ids(table, lowest: list[int], first: int) -> bool:
    """Whether every merge of ``table`` names its parts and its token by the lowest id of their bytes
    (``lowest[id]``: that id, -1 for a special token), on whole columns."""
    import numpy as np

    low = np.array(lowest, dtype=np.int64)
    left, right, token = table[:, 1], table[:, 2], table[:, 3]
    made = low[first + np.arange(len(table))]
    return bool(((low[left] == left) & (low[right] == right) & (made == token)).all())


def check_merge_digest(store: Store, merges: list[tuple[int, int, int, int, int]], packed: bytes | None = None) -> None:
    """Refuse (StoreError) a merge log that is not the one the store's newest checkpoint recorded:
    another number of merges, no digest, or another digest (``bpe_store.store.digest``). A store
    made before digests existed (schema revision older than ``DIGEST_SINCE``, opened to be read or
    upgraded) has none, and is accepted without. ``packed``: the merges as native int64s
    (``_as_table``), hashed as they are instead of being packed again."""
    revision = getattr(store, "revision", None) or HEAD
    if REVISIONS.index(revision) < REVISIONS.index(DIGEST_SINCE):
        return
    row = store.sql("SELECT merges_done, merge_digest FROM checkpoints ORDER BY id DESC LIMIT 1").first()
    done, recorded = row if row is not None else (0, digest.EMPTY)

    def bad(what: str) -> StoreError:
        return StoreError(f"{store.path}: the store's merge log was changed after it was written ({what}); "
                          "refusing to use it: start over with --restart")

    if done != len(merges):
        raise bad(f"it holds {len(merges)} merges, its newest checkpoint recorded {done!r}")
    if recorded is None:
        raise bad("its newest checkpoint has no digest of it")
    if recorded != digest.merge_digest(merges, packed):
        raise bad("a merge differs from those its newest checkpoint's digest recorded")


def _show(b: bytes) -> str:
    """A token for a message: its text, shortened."""
    text = b[:16].decode("utf-8", "backslashreplace")
    return repr(text) + (f" (+{len(b) - 16} bytes)" if len(b) > 16 else "")


def read_result(store: Store, vocab_size: int | None = None, *, checked: bool = False) -> TrainResult:
    """The CS336 ``(vocab, merges)`` in a store, optionally for a smaller ``vocab_size`` (a prefix).
    ``checked``: the caller has held the store since ``result_check`` passed and wrote every merge
    after (the end of ``train``: a resume checks the store before it writes), so it is not checked
    again (o200k_base extended: ~0.6 CPU s of a whole run's ~10)."""
    return read_result_ids(store, vocab_size, checked=checked, ids=False)[0]


def read_result_ids(store: Store, vocab_size: int | None = None, *, checked: bool = False, ids: bool = True
                    ) -> tuple[TrainResult, list[tuple[int, int, int]]]:
    """``read_result`` and its merges as ``[(left, right, token)]`` model ids in rank order, each the
    first (lowest) id of its bytes among the tokens, as the store's merge log names them: what a
    tokenizer's encoder is built from without a dict lookup per merge (``Tables._from_result``);
    ``ids`` False: ``[]`` instead (``read_result``)."""
    run = store.run_row()
    specials = json.loads(run["special_tokens"])
    n_special = len(specials)
    vocab_rows = store.load_vocab(check_lengths=not checked)  # the length check's join: 0.4 CPU s at o200k
    merges = store.load_merges()
    if not checked:
        result_check(store, specials, vocab_rows, merges)
    if vocab_size is not None:
        keep = max(vocab_size - 256 - n_special, 0)
        merges = merges[:keep]
        vocab_rows = vocab_rows[: n_special + 256 + len(merges)]
    by_id = {i: b for i, b, _ in vocab_rows}
    model = model_ids(store, len(by_id))  # a based store's tokens keep the base's ids
    if not ids:
        triples = []
    elif model is None:
        triples = [(left, right, token) for _, left, right, token, _ in merges]
    else:
        triples = [(model[left], model[right], model[token]) for _, left, right, token, _ in merges]
    return TrainResult(
        vocab=renumber(by_id, model),
        merges=[(by_id[left], by_id[right]) for _, left, right, _, _ in merges],
        merge_counts=[c for *_, c in merges],
        phase=run["phase"],
        stop_reason=run["stop_reason"],
    ), triples


def store_tokenizer(db_path: str | os.PathLike, at: int | None = None,
                    read: Callable[[Store, int | None], TrainResult | None] | None = None
                    ) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]], list[str], str]:
    """``(vocab {model id: bytes}, merges, special tokens, pattern)`` of a store with merges,
    its first ``at`` merges when given; InputError / StoreError for a store without them.
    ``read``: a faster reader of the result tried first (``merge_log.read_result``, which sits
    above this module), read_result where it gives None."""
    p = Path(db_path)
    if not p.exists():
        raise StoreError(f"{p}: no such store")
    with Store.open(p, readonly=True) as store:
        run = store.run_row()
        specials: list[str] = json.loads(run["special_tokens"])
        if run["phase"] == "counting":
            raise StoreError(f"{p}: the store is still counting (no merges yet); finish training with "
                             f"`bpe-store train ... --db {p}` first")
        if at is not None and at > (held := store.count_merges()):  # the result is read (and checked) once
            raise InputError(f"{p} holds {held} merges, not {at}")
        size = None if at is None else len(specials) + 256 + at
        result = (read is not None and read(store, size)) or read_result(store, size)
        return result.vocab, result.merges, specials, run["pattern"]
