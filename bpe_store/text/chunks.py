"""Where a text may be cut into chunks without changing its words: ``plan_chunks`` cuts a file at
points no pre-token spans (the native splitter; ``pretokenize.cut_context`` is how much text
around a point it must see).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..native import (
    native_utf8_valid,
)
from .fingerprint import utf8_tail
from .input_checks import open_regular
from .pretokenize import (
    GPT2_PATTERN,
    cut_context,
    native_scanner,
    native_splitter,
)

#: Default chunk size: large enough that per-chunk overhead vanishes, small enough that a kill
#: loses little counting and every core gets work.
DEFAULT_CHUNK_SIZE = 8 << 20


_SEARCH_WINDOW = 1 << 20
_FIRST_LOOK = 4 << 10


def _cut_in_scan(f, start: int, target: int, size: int, splitter,
                 max_pretoken_bytes: int | None) -> int | None:
    """A chunk start at or after ``target`` found by scanning from the previous chunk start
    ``start`` (``Splitter.scan_cut``); None if there is none nearby.

    The fallback when no local cut point lies within a window after ``target``: one pre-token of
    hundreds of megabytes. It cuts inside a pre-token longer than ``max_pretoken_bytes`` at one
    of its split points (see plan_cut in native/splitter.h), so such input is still chunked, and
    memory stays bounded by chunk size + window + the maximum pre-token length. Reads at most that much.
    """
    ctx = cut_context(splitter)
    end = min(size, target + _SEARCH_WINDOW + (max_pretoken_bytes or 0) + ctx + 64)
    f.seek(start)
    data = f.read(end - start)
    if len(data) != end - start:
        return None
    if end < size:
        data = data[: len(data) - utf8_tail(data)]  # a character cut off by the read
    # Why valid UTF-8 only: with --invalid-utf8 replace, counting sees U+FFFD where the file
    # has invalid bytes, so offsets inside such stretches would not mean the same thing.
    if not native_utf8_valid(data):
        return None
    margin = 0 if end == size else ctx + 16  # what the read may have cut off at its end
    q = splitter.scan_cut(data, target - start, max_pretoken_bytes or 0, margin)
    return None if q < 0 else start + q


def _first_cut_near(f, splitter, base: int, pos: int, size: int, ctx: int) -> int | None:
    """The first cut point in ``[pos, pos + _FIRST_LOOK)`` (read from ``base``), or None.

    Why: English has a cut point within a few bytes of any position, so reading the whole
    ``_SEARCH_WINDOW`` (1 MiB) at every chunk boundary copied an eighth of each input for
    nothing (OWT 1 GB: 128 MB). The cut found is the one the full window finds first: the rules
    look ``ctx`` bytes around a point, and the range searched keeps that much after it."""
    f.seek(base)
    data = f.read(_FIRST_LOOK + 2 * ctx)
    hi = min(pos + _FIRST_LOOK, size, base + len(data) - (0 if base + len(data) >= size else ctx))
    q = splitter.first_cut(data, pos - base, hi - base) if hi > pos else -1
    return base + q if q >= 0 else None


def plan_chunks(path: str | os.PathLike, size: int, special_tokens: Sequence[str],
                pattern: str = GPT2_PATTERN, chunk_size: int = DEFAULT_CHUNK_SIZE,
                max_pretoken_bytes: int | None = None) -> list[tuple[int, int]]:
    """Split a file of ``size`` bytes into ``[(start, end)]`` chunks of about ``chunk_size``.

    For a pattern with a native scanner a chunk is at most about ``chunk_size`` + the search
    window + ``max_pretoken_bytes`` long whatever the text, by the fallback ``_cut_in_scan``. Without
    the native core, or for a user's own pattern without special tokens, the file is one chunk."""
    splitter = native_splitter(special_tokens, pattern)
    scanned = native_scanner(pattern) != ""  # a scan from a chunk start can find a cut
    if splitter is None or (not special_tokens and not splitter.has_local_rule):
        return [(0, size)]
    ctx = cut_context(splitter)
    bounds = [0]
    target = chunk_size
    with open_regular(path) as f:
        while target < size:
            found = None
            pos = target
            while found is None and pos < size:
                base = max(pos - ctx, 0)
                if pos == target:  # most windows have a cut in their first bytes: look there first
                    found = _first_cut_near(f, splitter, base, pos, size, ctx)
                    if found is not None:
                        break
                f.seek(base)
                data = f.read(_SEARCH_WINDOW + 2 * ctx)
                # this window's own range; bytes after it are context for the cut rules
                hi = min(pos + _SEARCH_WINDOW, size, base + len(data) - (0 if base + len(data) >= size else ctx))
                q = splitter.first_cut(data, pos - base, hi - base)
                if q >= 0:
                    found = base + q
                elif scanned and pos == target:
                    found = _cut_in_scan(f, bounds[-1], target, size, splitter, max_pretoken_bytes)
                pos += _SEARCH_WINDOW
            if found is None or found >= size:
                break
            bounds.append(found)
            target = found + chunk_size
    bounds.append(size)
    return list(zip(bounds, bounds[1:]))
