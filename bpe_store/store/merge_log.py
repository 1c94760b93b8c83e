"""A store's merge log read natively: ``read_checked`` gives the merges, the vocabulary, the model
ids and the newest checkpoint as flat arrays (``_core.MergeLog``, native/merge_log_reader.cpp),
read in one read transaction and checked as ``result.result_check`` and ``base_rows.model_ids``
check them, the merge digest included.

Why: reading the rows through the ``sqlite3`` driver (a tuple per row) and checking them in Python
was most of loading a tokenizer from a store (a 32K store 0.39 CPU s, an extended o200k_base
store 3.6). Who uses it: ``Tokenizer.from_store`` (the encoder's tables come from the arrays) and
any reader of a whole merge log that wants its rows without a Python object each (``MergeLog``:
``merge_rows`` int64 (rank, left, right, token, count), ``token_blob`` / ``token_offsets``,
``model_ids``, ``encoder_tables``, ``vocab``, ``merge_pairs``).

It never judges a damaged store: where anything is off (a row of the wrong type, a check that
fails, a value over ``MAX_VALUE_BYTES``, the native path unavailable) it gives None, and the caller
reads the store through Python, whose checks say what is wrong in the words they always used.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import native
from . import digest, native_connection

if TYPE_CHECKING:  # pragma: no cover
    from .result import TrainResult

#: The longest value the native read takes (SQLite refuses a longer one: then the Python path
#: reads the store and its checks say which row is too long). A token this long is no token
#: bpe_store trains; a tampered one is never read whole.
MAX_VALUE_BYTES = 1 << 20


def read_checked(store: Any, specials: Sequence[str]) -> Any | None:
    """The merge log of the open ``store`` (a ``Store``), read natively and checked, or None
    (see the module's docstring). ``specials``: the run's special tokens."""
    if sys.byteorder != "little" or not native_connection.available():
        return None
    core = native.core
    try:
        log = core.read_merge_log(str(store.path), MAX_VALUE_BYTES)
    except (core.SqliteError, RuntimeError, MemoryError):
        return None
    if not log.check([s.encode("utf-8") for s in specials]) or not _digest_ok(store, log):
        return None
    return log


def read_result(store: Any, vocab_size: int | None = None) -> TrainResult | None:
    """``result.read_result`` of the open ``store`` from its merge log read natively and checked
    (``read_checked``), or None where that gives None (the caller reads it through Python). Why:
    the end of ``train`` returns the whole vocabulary and merge list; through the driver, o200k_base
    extended took ~1 CPU s of the run (~0.4 natively)."""
    from .result import TrainResult

    run = store.run_row()
    specials = json.loads(run["special_tokens"])
    log = read_checked(store, specials)
    if log is None:
        return None
    n_merges, n_rows = log.n_merges, log.n_vocab
    if vocab_size is not None:  # a prefix, as read_result cuts it
        n_merges = min(n_merges, max(vocab_size - 256 - len(specials), 0))
        n_rows = len(specials) + 256 + n_merges
    counts = memoryview(log.merge_rows).cast("B").cast("q")[4:5 * n_merges:5].tolist()
    return TrainResult(log.vocab(n_rows), log.merge_pairs(n_merges), counts, run["phase"], run["stop_reason"])


def _digest_ok(store: Any, log: Any) -> bool:
    """``result.check_merge_digest``'s test, on the checkpoint read with the log."""
    from .schemas import HEAD, REVISIONS

    revision = getattr(store, "revision", None) or HEAD
    if REVISIONS.index(revision) < REVISIONS.index(digest.DIGEST_SINCE):
        return True
    done, recorded = log.checkpoint if log.checkpoint is not None else (0, digest.EMPTY)
    return done == log.n_merges and recorded is not None and recorded == digest.merge_digest((), log.merge_rows)
