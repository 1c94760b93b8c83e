"""What a store holds once it has merges: the CS336 ``(vocab, merges)`` with their counts, read
and checked (``read_result``): a store's merge log and vocabulary are refused unless bpe_store
could have written them (``result_check``).

Beside the store, below everyone who reads a result: the trainer returns it, the tokenizer and
exports load from it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import StoreError
from .store import Store


@dataclass
class TrainResult:
    """What a finished (or stopped) run holds: CS336 ``vocab`` and ``merges``, plus the counts."""

    vocab: dict[int, bytes]
    merges: list[tuple[bytes, bytes]]
    merge_counts: list[int]
    phase: str
    stop_reason: str | None


def result_check(store: Store, n_special: int,
                 vocab: list[tuple[int, bytes, str]] | None = None,
                 merges: list[tuple[int, int, int, int, int]] | None = None) -> None:
    """Refuse (StoreError) a merge log and vocabulary that bpe_store could not have written:
    ranks and ids not 0..n-1, a merge of ids it does not yet have, kinds out of place, a count
    that is not a positive integer."""
    vocab = store.load_vocab() if vocab is None else vocab
    merges = store.load_merges() if merges is None else merges
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
    for rank, left, right, token, count in merges:
        limit = first + rank
        if not (type(left) is type(right) is type(token) is type(count) is int
                and 0 <= left < limit and 0 <= right < limit and 0 <= token <= limit and count >= 0):
            raise bad(f"merge {rank} is ({left!r}, {right!r}) -> {token!r} with count {count!r}")


def read_result(store: Store, vocab_size: int | None = None) -> TrainResult:
    """The CS336 ``(vocab, merges)`` in a store, optionally for a smaller ``vocab_size`` (a prefix)."""
    run = store.run_row()
    n_special = len(json.loads(run["special_tokens"]))
    vocab_rows = store.load_vocab()
    merges = store.load_merges()
    result_check(store, n_special, vocab_rows, merges)
    if vocab_size is not None:
        keep = max(vocab_size - 256 - n_special, 0)
        merges = merges[:keep]
        vocab_rows = vocab_rows[: n_special + 256 + len(merges)]
    by_id = {i: b for i, b, _ in vocab_rows}
    return TrainResult(
        vocab=by_id,
        merges=[(by_id[left], by_id[right]) for _, left, right, _, _ in merges],
        merge_counts=[c for *_, c in merges],
        phase=run["phase"],
        stop_reason=run["stop_reason"],
    )
