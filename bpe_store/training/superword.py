"""SuperBPE's stage 2 on the merge engines: a store's first t merges, then superword merges.

Stage 2's words are the distinct pieces of the text under ``superword_split.STAGE2_PATTERN``,
with their counts (the aggregate the engines already take: a piece that occurs a million times is
one word). Each starts as its bytes; the stage-1 merges are the engine's ``replay`` (each applied
in rank order, as a resume applies logged merges, which is BPE's encoding of the piece); merging
then goes on from rank t under the superword rule (``max_words``). ``superword_reference`` is the
spec; ``stage2_merges`` is what the tests hold both engines to it with, and what the store's
stage 2 runs (``training.train``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..text.superword_split import MAX_WORDS
from .merge import Merge, new_engine

#: A stage-1 merge as the engines log it: ``(left id, right id, token id)``.
LoggedMerge = tuple[int, int, int]


def stage2_merges(pieces: Mapping[bytes, int], token_bytes: Sequence[bytes | None], n_specials: int,
                  stage1: Sequence[LoggedMerge], num_merges: int, engine: str = "auto",
                  max_words: int = MAX_WORDS) -> list[Merge]:
    """Stage 2's merges (ranks from ``len(stage1)``) over ``{piece: count}``.

    ``token_bytes[id]``: the bytes of every id of the store after stage 1 (None for specials);
    ``stage1``: its merges in rank order. At most ``num_merges`` merges, fewer when no pair the
    superword rule allows is left."""
    rows = [(i + 1, piece, count, None) for i, (piece, count) in enumerate(pieces.items())]
    eng = new_engine(rows, list(token_bytes), n_specials, n_specials + 256, len(stage1), engine,
                     replay=list(stage1), max_words=max_words)
    out: list[Merge] = []
    while len(out) < num_merges and not eng.exhausted:
        out.extend(eng.step(num_merges - len(out)))
    return out
