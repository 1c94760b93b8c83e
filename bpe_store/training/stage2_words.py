"""Stage 2's words file (SuperBPE, docs/superword.md): the native merge engine's words as its
build's replay left them (every piece as stage 1's tokens), saved once beside a superword store,
so that a resume after a kill starts from it plus the merges logged since, instead of reading
every piece from the store and replaying stage 1's merges on it again (native/merge_words_file.cpp).

The file is ``<store>.stage2-words`` (``super.db`` -> ``super.db.stage2-words``), about a byte per
input byte, written as ``<name>.<pid>.part`` and renamed when whole. It is a cache, never the
truth: its tag names the words (the digest the store recorded when counting ended), the merges
they reflect (their triples) and the rule (the word limit, the token length limit); a file that
is missing, stale, damaged or named otherwise is not used (the engine is built from the store,
and the file written again). The move to merging and the end of the run remove it.
"""

from __future__ import annotations

import array
import hashlib
import itertools
import os
import struct
import sys
from collections.abc import Sequence
from pathlib import Path

from ..store import words_digest
from ..store.params import RunParams
from ..store.store import Store
from .merge import Engine, NativeMergeEngine

SUFFIX = ".stage2-words"
#: The file's header: nine u64 in host order (native/merge_words_file.cpp); the 8th is how many
#: merges its words reflect.
_HEADER = struct.Struct("=9Q")


def path_of(db: Path | str) -> Path:
    """The words file of the store at ``db``."""
    db = Path(db)
    return db.with_name(db.name + SUFFIX)


def remove(db: Path | str) -> None:
    """Remove the words file of ``db`` and any part a killed writer left."""
    path = path_of(db)
    for p in [path, *path.parent.glob(f"{path.name}.*.part")]:
        p.unlink(missing_ok=True)


def _tag(digest: str, merges: Sequence[tuple[int, int, int]], params: RunParams) -> int:
    """The 64-bit name of words counted as ``digest`` says, with ``merges`` replayed, under
    ``params``' rule."""
    h = hashlib.sha256(f"{digest}|{len(merges)}|{params.superword_max_words}|{params.max_token_length}".encode())
    packed = array.array("I", itertools.chain.from_iterable(merges))
    if sys.byteorder == "big":  # pragma: no cover
        packed.byteswap()
    h.update(packed.tobytes())
    return int.from_bytes(h.digest()[:8], "little")


def load(store: Store, params: RunParams, token_bytes: list[bytes | None], merges: list[tuple[int, int, int]],
         n_specials: int, first: int) -> Engine | None:
    """The stage-2 engine from ``store``'s words file and the merges logged after its words
    (``merges``: the store's ``(left, right, token)`` in rank order); None when there is no usable
    file (missing, stale, damaged: the caller builds from the store)."""
    path = path_of(store.path)
    digest = words_digest.recorded(store)
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER.size)
    except OSError:
        return None
    if digest is None or len(head) != _HEADER.size or not 0 <= _HEADER.unpack(head)[7] <= len(merges):
        return None
    done = _HEADER.unpack(head)[7]
    try:
        return NativeMergeEngine.from_words_file(path, _tag(digest, merges[:done], params), token_bytes, n_specials,
                                                 first, len(merges), params.max_token_length,
                                                 params.superword_max_words or 0, merges[done:])
    except ValueError:
        return None


def save(store: Store, params: RunParams, merger: Engine, merges: list[tuple[int, int, int]]) -> None:
    """Write ``merger``'s words, which reflect ``merges``, to ``store``'s words file. A file that
    cannot be written (a full disk) is left out: it only saves time."""
    digest = words_digest.recorded(store)
    if digest is None or not hasattr(merger, "save_words"):
        return
    path = path_of(store.path)
    part = path.with_name(f"{path.name}.{os.getpid()}.part")
    try:
        merger.save_words(part, _tag(digest, merges, params), len(merges))
        os.replace(part, path)
    except (OSError, RuntimeError):
        part.unlink(missing_ok=True)
