"""Tokenizers measured on held-out text: ``bpe-store eval`` and ``train --eval``.

A store holds every vocabulary size at once (any prefix of its merge log is a tokenizer), so one
store gives a whole curve: the metrics at each size, beside other tokenizers as points. For each
tokenizer and size, on held-out text read as ``train`` reads it:

* ``bytes_per_token`` and ``chars_per_token`` (UTF-8 bytes, Unicode characters);
* ``tokens_per_word``: tokens per word, a word being a run of non-whitespace characters (``\\s``);
* ``renyi_efficiency``: the Rényi entropy of order α (2.5 by default) of the token distribution
  over log2 of the number of distinct tokens produced: exactly what ``tokenization-scorer``
  (``metric="renyi"``, ``power=α``) gives for the same token sequence (Zouhar et al., 2023);
* ``vocab_used``: the share of the vocabulary produced at least once; ``tokens_unused``: how many
  tokens were never produced;
* by group (``--by script`` or ``--by file``), the same per group and ``parity``: the group's
  bytes per token over the best group's (1.0 for the best).

Every number is a sum over the tokens of one encoding: a token's bytes, the characters and words
that start in it, and its group (the script of the first letter it starts; a token that starts
none belongs to the letter before it). So groups add up to the whole, and the metrics need one
encode per tokenizer and size. Special tokens in the held-out text are encoded as special tokens
by every tokenizer that has them.

How sizes are cheap: a store's result is read once, and each size's tokenizer is built from a
prefix of it in memory (no store read per size); each held-out file's byte classes are computed
once and shared by every encoding.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from ..store.evaluation_rows import Measurement
from .candidates import Candidate, merge_log_candidate
from .heldout import NO_LETTERS, SCRIPTS, HeldOut, TextIndex

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from ..store.store import Store

#: Rényi efficiency's order by default (TokEval, Zouhar et al.: 2.5 correlates best with quality).
DEFAULT_ALPHA = 2.5
#: ``--by`` values: one row per tokenizer and size; or also one per script; or per input file.
GROUPINGS = ("none", "script", "file")


# -- measuring one encoding -------------------------------------------------------------------

def renyi_efficiency(counts: np.ndarray, alpha: float = DEFAULT_ALPHA) -> float | None:
    """Rényi efficiency of token counts (any order; zeros ignored): H_α(p) / log2(distinct tokens),
    H_α = log2(Σ p^α) / (1 - α), Shannon's at α = 1: tokenization-scorer's ``renyi``. None when
    fewer than two distinct tokens make log2 of their number 0."""
    import numpy as np

    c = counts[counts > 0].astype(np.float64)
    if len(c) < 2:
        return None
    p = c / c.sum()
    h = float(-np.sum(p * np.log2(p))) if alpha == 1 else float(np.log2(np.sum(p ** alpha)) / (1 - alpha))
    return h / math.log2(len(c))


@dataclass
class _Tally:
    """Sums over the tokens of one group: the metrics are ratios of these (``metrics``)."""

    tokens: int
    bytes: int
    chars: int
    words: int
    counts: np.ndarray  # tokens produced, by id

    def __add__(self, other: _Tally) -> _Tally:
        import numpy as np

        n = max(len(self.counts), len(other.counts))
        counts = np.zeros(n, dtype=np.int64)
        counts[:len(self.counts)] += self.counts
        counts[:len(other.counts)] += other.counts
        return _Tally(self.tokens + other.tokens, self.bytes + other.bytes, self.chars + other.chars,
                      self.words + other.words, counts)

    def metrics(self, vocab_size: int, alpha: float) -> dict[str, float | None]:
        import numpy as np

        n, used = self.tokens, int(np.count_nonzero(self.counts))
        return {
            "bytes_per_token": self.bytes / n if n else None,
            "chars_per_token": self.chars / n if n else None,
            "tokens_per_word": n / self.words if self.words else None,
            "renyi_efficiency": renyi_efficiency(self.counts, alpha),
            "renyi_alpha": alpha,
            "vocab_used": used / vocab_size,
            "tokens_unused": max(vocab_size - used, 0),
            "tokens": n,
            "bytes": self.bytes,
        }


def _tally(ids: np.ndarray, lengths: np.ndarray, chars: np.ndarray, words: np.ndarray) -> _Tally:
    import numpy as np

    return _Tally(len(ids), int(lengths.sum()), int(chars.sum()), int(words.sum()), np.bincount(ids))


def _token_groups(ids_len: np.ndarray, pos: np.ndarray, index: TextIndex) -> np.ndarray:
    """Each token's script group (an index in ``SCRIPTS``; ``len(SCRIPTS)``: no letter anywhere):
    the first letter it starts, else the previous token's, else (at the start) the next one's."""
    import numpy as np

    n, letter = index.n, index.per_byte()[0]
    where = np.where(letter >= 0, np.arange(n), n)
    nxt = np.append(np.minimum.accumulate(where[::-1])[::-1], n)  # next letter start at or after
    j = nxt[pos]
    own = np.where(j < pos + ids_len, np.append(letter, -1)[j], -1).astype(np.int64)
    valid = np.where(own >= 0, np.arange(len(own)), -1)
    if not (valid >= 0).any():
        return np.full(len(own), len(SCRIPTS))
    prev = np.maximum.accumulate(valid)
    first = int(valid[valid >= 0][0])
    return own[np.where(prev >= 0, prev, first)]


def tally(ids: np.ndarray, token_lengths: np.ndarray, index: TextIndex, by_script: bool) -> dict[str, _Tally]:
    """``{group: sums}`` of one encoding ``ids`` of one held-out file: ``all``, and with
    ``by_script`` each script that holds tokens. ``token_lengths``: each id's length in bytes."""
    import numpy as np

    ids = np.asarray(ids, dtype=np.int64)
    lengths = token_lengths[ids]
    if int(lengths.sum()) != index.n:
        raise InputError(f"the tokens spell {int(lengths.sum())} bytes of a {index.n}-byte text: the "
                         "tokenizer is not byte-level, or changes the text (normalizes it)")
    if len(ids) == 0:
        return {"all": _Tally(0, 0, 0, 0, np.zeros(0, dtype=np.int64))}
    out = {"all": _Tally(len(ids), index.n, index.chars, index.words, np.bincount(ids))}
    if by_script:  # each token's characters and words, for its group: the per-byte index
        _letter, char_start, word_start = index.per_byte()
        pos = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        chars = np.add.reduceat(char_start.astype(np.int64), pos)
        words = np.add.reduceat(word_start.astype(np.int64), pos)
        groups = _token_groups(lengths, pos, index)
        for g, name in enumerate((*SCRIPTS, NO_LETTERS)):
            m = groups == g
            if m.any():
                out[name] = _tally(ids[m], lengths[m], chars[m], words[m])
    return out


def with_parity(groups: dict[str, dict[str, float | None]]) -> dict[str, dict[str, float | None]]:
    """Each group but ``all`` gets ``parity``: its bytes per token over the best group's."""
    best = max((m["bytes_per_token"] or 0.0 for g, m in groups.items() if g != "all"), default=0.0)
    for g, m in groups.items():
        m["parity"] = None if g == "all" or not best or m["bytes_per_token"] is None else m["bytes_per_token"] / best
    return groups


def counts_at_sizes(counts: np.ndarray, parts: tuple[np.ndarray, np.ndarray, int], sizes: Sequence[int]
                    ) -> dict[int, np.ndarray]:
    """Token counts of a text at smaller vocabulary sizes, from its encoding at the largest.

    Merge-order BPE with the first k merges is the full encoding with every token of rank k or
    more split back into its two parts, recursively: ``counts`` (by id) is unmerged from the last
    merge down, and a copy taken as each size is reached. Why: one encode and one pass over the
    merge log give every size, instead of an encode per size.

    >>> import numpy as np
    >>> a, b = 97, 98  # merges: (a, b) -> 256, (256, 256) -> 257; "abab" encodes to [257]
    >>> c = np.zeros(258, dtype=np.int64); c[257] = 1
    >>> at = counts_at_sizes(c, (np.array([a, 256]), np.array([b, 256]), 256), [256, 257, 258])
    >>> {k: int(v.sum()) for k, v in at.items()}
    {258: 1, 257: 2, 256: 4}
    """
    import numpy as np

    lefts, rights, first = parts
    c = np.zeros(max(len(counts), first + len(lefts)), dtype=np.int64)
    c[:len(counts)] = counts
    out: dict[int, np.ndarray] = {}
    r = int(np.flatnonzero(c[first:]).max()) if c[first:].any() else -1  # the last merge produced
    for size in sorted(set(sizes), reverse=True):
        while r >= size - first:
            n = c[first + r]
            if n:
                c[lefts[r]] += n
                c[rights[r]] += n
                c[first + r] = 0
            r -= 1
        out[size] = c[:size].copy()
    return out



# -- evaluating -------------------------------------------------------------------------------

@dataclass
class Evaluation:
    """The measurements of one ``evaluate`` call, in the order they were taken."""

    heldout: HeldOut
    rows: list[Measurement] = field(default_factory=list)


def evaluate(candidates: Sequence[Candidate], heldout: HeldOut, *, alpha: float = DEFAULT_ALPHA,
             by: str = "none", progress: Callable[[dict], None] | None = None) -> Evaluation:
    """Measure each candidate at each of its sizes on ``heldout``: rows for ``all`` and, with
    ``by="script"`` or ``by="file"``, for each group (``parity`` among the groups)."""
    if by not in GROUPINGS:
        raise InputError(f"--by must be one of {', '.join(GROUPINGS)}, not {by!r}")
    if not alpha > 0:
        raise InputError(f"--alpha must be positive, not {alpha}")
    indexes = heldout.indexes()
    out = Evaluation(heldout)
    for cand in candidates:
        for size, per_file in _tallies(cand, heldout, indexes, by == "script"):
            sums: dict[str, _Tally] = {}
            for part in per_file:
                for grp, t in part.items():
                    sums[grp] = sums[grp] + t if grp in sums else t
            if by == "file":
                sums.update({f"file:{f.label}": part["all"] for f, part in zip(heldout.files, per_file)})
            groups = {grp: t.metrics(size, alpha) for grp, t in sums.items()}
            for grp, metrics in with_parity(groups).items():
                out.rows.append(Measurement(cand.label, cand.kind, cand.source, size, heldout.name,
                                            heldout.digest, grp, metrics))
            if progress is not None:
                progress({"stage": "eval", "tokenizer": cand.label, "vocab_size": size})
    return out


def _tallies(cand: Candidate, heldout: HeldOut, indexes: list[TextIndex], by_script: bool
             ) -> Iterator[tuple[int, list[dict[str, _Tally]]]]:
    """``(size, [{group: sums} per held-out file])`` for each size of ``cand``: a store without
    script groups is encoded once, at its largest size (``counts_at_sizes``); else once per size."""
    sizes = cand.sizes
    if cand.parts is None or by_script or len(sizes) == 1:
        for size, encode in cand.encoders():
            yield size, [tally(encode(f.text), cand.token_lengths, ix, by_script)
                         for f, ix in zip(heldout.files, indexes)]
        return
    encode = cand.make(max(sizes))
    full = [tally(encode(f.text), cand.token_lengths, ix, False)["all"] for f, ix in zip(heldout.files, indexes)]
    at = [counts_at_sizes(t.counts, cand.parts, sizes) for t in full]
    for size in sizes:
        yield size, [{"all": dataclasses.replace(t, tokens=int(a[size].sum()), counts=a[size])}
                     for t, a in zip(full, at)]


def record_evaluation(db: Path, rows: Sequence[Measurement], recorded_by: str = "eval") -> str | None:
    """Write ``rows`` into the store ``db``; None when written, else why not (a store that is
    training, read-only, or older than the table: the measurements are still printed)."""
    from ..errors import StoreError
    from ..store import evaluation_rows
    from ..store.store import Store

    try:
        with Store.open(db) as store:
            if not evaluation_rows.has_table(store):
                return f"{db}: its schema predates evaluations; run `bpe-store db upgrade {db}` to record them"
            evaluation_rows.record(store, rows, recorded_by)
    except StoreError as exc:
        return str(exc)
    return None


class EvalSeries:
    """``train(on_checkpoint=EvalSeries(heldout, every))`` (``train --eval FILE --eval-every N``):
    the run's merge log measured on ``heldout`` every ``every`` merges and at its end, recorded in
    the store (``recorded_by = 'train'``) as training goes.

    After each write of merges the sizes due and not yet recorded are measured from one encode
    (``counts_at_sizes``); a resume finds what the store recorded and catches up the rest, so a
    kill loses no point. Another held-out text is another series (rows carry its digest): a resume
    with a new ``--eval`` starts one beside the old, which stays.
    """

    def __init__(self, heldout: HeldOut, every: int, alpha: float = DEFAULT_ALPHA, threads: int = 0):
        if every < 1:
            raise InputError(f"--eval-every must be at least 1, not {every}")
        if not alpha > 0:
            raise InputError(f"--alpha must be positive, not {alpha}")
        self.heldout, self.every, self.alpha, self.threads = heldout, every, alpha, threads
        self._recorded: set[int] | None = None
        self._bytes: dict[int, bytes] = {}
        self._merges: list[tuple[bytes, bytes]] = []
        self._rows: list[tuple[int, int, int]] = []  # the same merges' ids: (left, right, token)

    def __call__(self, store: Store, merges_done: int, final: bool) -> None:
        import json

        from ..store import evaluation_rows

        if not evaluation_rows.has_table(store):
            return
        run = store.run_row()
        specials = json.loads(run["special_tokens"])
        least = 256 + len(specials)
        if self._recorded is None:
            self._recorded = evaluation_rows.sizes_recorded(store, self.heldout.digest)
        due = [least + m for m in range(self.every, merges_done + 1, self.every)]
        if final and merges_done and least + merges_done not in due:
            due.append(least + merges_done)
        due = [s for s in due if s not in self._recorded]
        if not due:
            return
        vocab = self._read(store, merges_done, least)
        cand = merge_log_candidate(vocab, self._merges[:max(due) - least], specials, run["pattern"], due,
                                   self.threads, store.path, self._rows[:max(due) - least])
        rows = evaluate([cand], self.heldout, alpha=self.alpha).rows
        evaluation_rows.record(store, rows, "train")
        self._recorded.update(due)

    def _read(self, store: Store, merges_done: int, least: int) -> dict[int, bytes]:
        """The store's vocabulary up to ``merges_done`` merges; what was read before is kept, so
        each call reads only the merges logged since the last."""
        start = len(self._merges)
        for i, b in store.sql("SELECT id, bytes FROM vocab WHERE id >= ? AND id < ? ORDER BY id",
                              (least + start if start else 0, least + merges_done)):
            self._bytes[i] = bytes(b)
        for left, right, token in store.sql('SELECT "left", "right", token FROM merges WHERE rank >= ? AND rank < ?'
                                            " ORDER BY rank", (start, merges_done)):
            self._merges.append((self._bytes[left], self._bytes[right]))
            self._rows.append((left, right, token))
        return {i: b for i, b in self._bytes.items() if i < least + merges_done}
