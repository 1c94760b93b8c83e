"""Planning a superword store (SuperBPE's stage 2, docs/superword.md): where its stage 1 comes
from, the parameters it is stored with, and the checks of both, before anything is written.

A superword store is an ordinary store whose pattern is stage 2's (``STAGE2_PATTERN``), whose
first t merges (and their vocabulary rows) are copied from a finished store of the stage-1
pattern (its *base*) when it is created, and whose merges from rank t on obey the superword rule.
Everything else (counting, merging, checkpoints, logs, resume, ``db check``) is a store's: the
engine applies the copied merges to the pieces as a resume applies logged merges.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError, ResumeMismatch, StoreError
from ..store.params import RunParams
from ..store.result import result_check
from ..store.run_rows import StageOne
from ..store.store import Store
from ..text.pretokenize import describe_pattern
from ..text.streams import Stream
from .job import Job


def stage1_path(db: Path) -> Path:
    """Where ``train(..., superword_from=t)`` without a base trains stage 1: beside ``db``,
    ``<name>.stage1<suffix>`` (``super.db`` -> ``super.stage1.db``)."""
    return db.with_name(f"{db.stem}.stage1{db.suffix}")


def check_superword_inputs(job: Job, base: str | None) -> None:
    """Refuse what a superword run cannot do: stage 1 in the same run reads the inputs again for
    stage 2, which a stream (standard input, an iterable) cannot give."""
    if base is None and any(isinstance(p, Stream) for p in job.paths):
        raise InputError("superword training from a stream needs superword_base (--superword-base STORE): "
                         "stage 2 reads the text again, which a stream cannot give")


def stage1_done(path: Path, t: int) -> bool:
    """Whether the store at ``path`` is finished with at least ``t`` merges (or all it could learn):
    stage 1 then needs no training."""
    if not path.exists():
        return False
    store = Store.open(path, readonly=True)
    try:
        run = store.run_row()
        return run["phase"] == "done" and (store.count_merges() >= t or run["stop_reason"] == "no_pairs")
    finally:
        store.close()


def read_stage1(base: Path, params: RunParams, t: int) -> StageOne:
    """The first ``t`` merges of the finished store ``base`` and their vocabulary rows, checked
    against the run's stage-1 ``params`` (InputError: another pattern, other special tokens, too
    few merges, unfinished; StoreError: damaged)."""
    if not base.is_file():
        raise InputError(f"{base}: no such store (the superword base)")
    try:
        store = Store.open(base, readonly=True)
    except StoreError as exc:
        raise InputError(f"{base}: not a store to take stage 1 from ({exc})") from None
    try:
        old = store.params()
        where = f"{base} (the superword base)"
        if old.pattern != params.pattern:
            raise InputError(f"{where} was trained with another pattern ({_short(old.pattern)}), not this run's "
                             f"({_short(params.pattern)}): give its --pattern")
        if old.special_tokens != params.special_tokens:
            raise InputError(f"{where} has the special tokens {list(old.special_tokens)}, not "
                             f"{list(params.special_tokens)}")
        if old.superword_from is not None and t > old.superword_from:
            raise InputError(f"{where} is a superword store whose stage 1 ends at merge {old.superword_from}; "
                             f"a transition at {t} would take superword merges as stage 1")
        merges = store.load_merges()
        vocab = store.load_vocab()
        result_check(store, old.special_tokens, vocab, merges)
        if len(merges) < t:
            raise InputError(f"{where} holds {len(merges)} merges, fewer than the transition point {t}"
                             + ("" if store.run_row()["phase"] == "done" else " (its training is not finished)"))
        first = len(old.special_tokens) + 256
        return merges[:t], [(i, b) for i, b, _ in vocab[first:first + t]]
    finally:
        store.close()


def check_same_stage1(store: Store, stage1: StageOne) -> None:
    """Refuse (ResumeMismatch) resuming a superword store from a base whose first merges are not
    the ones it was made with."""
    merges = stage1[0]
    if [tuple(m) for m in store.load_merges()[:len(merges)]] != [tuple(m) for m in merges]:
        raise ResumeMismatch(f"{store.path} was started from another stage 1: the base's first {len(merges)} "
                             "merges are not the store's. Use the same base, or --restart to start over")


def _short(pattern: str) -> str:
    return describe_pattern(pattern)[:80]
