"""Work units: the pieces of the inputs counted as a whole (``chunks`` rows), planned from the
inputs (``plan_units``), and read by any thread or process into the blocks of text counting
consumes (``unit_blocks``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence

from ..errors import InputError
from .decompress import _READ, _read_ahead, _reader, open_decompressed
from .fingerprint import utf8_tail
from .input_checks import _valid_utf8
from .inputs import Unit
from .jsonl import _line_of, jsonl_blocks
from .native import _native_utf8_valid
from .parquet import _parquet_blocks
from .pretokenize import (
    cut_context,
    native_scanner,
    native_splitter,
)


def unit_blocks(unit: Unit, special_tokens: Sequence[str], pattern: str, invalid_utf8: str,
                block_size: int, max_pretoken_bytes: int | None = None) -> Iterator[bytes]:
    """The text of ``unit`` as blocks of at most about ``block_size`` bytes of valid UTF-8
    (documents joined by ``DOC_SEP`` when ``unit.has_documents``); ``max_pretoken_bytes`` lets
    a text block be cut inside a giant pre-token (``text_blocks``)."""
    where = unit.path
    if unit.format == "parquet":
        yield from _parquet_blocks(unit, invalid_utf8, block_size)
        return
    if unit.kind == "range":
        with open(unit.path, "rb") as f:
            f.seek(unit.start)
            data = f.read(unit.end - unit.start)
        if len(data) != unit.end - unit.start:
            raise InputError(f"{where}: changed while training (shorter than when the run started)")
        if unit.format == "text":
            yield from text_blocks(io.BytesIO(data).read, special_tokens, pattern, len(data) + 1, where,
                                   invalid_utf8, offset=unit.start, first_line=None, path=unit.path,
                                   max_pretoken_bytes=max_pretoken_bytes)
        else:
            # the unit is in memory already: its lines in one native call, not one per _READ
            for block, _, _ in jsonl_blocks(io.BytesIO(data).read, unit.text_field, block_size, where,
                                            invalid_utf8, first_line=None, path=unit.path, offset=unit.start,
                                            read_size=len(data) + 1):
                yield block
        return
    with open_decompressed(unit.path, unit.compression) as f, \
            _read_ahead(_reader(f, where, unit.compression)) as read:
        if unit.format == "text":
            yield from text_blocks(read, special_tokens, pattern, block_size, where, invalid_utf8,
                                   decompressed=unit.compression != "none", max_pretoken_bytes=max_pretoken_bytes)
        else:
            for block, _, _ in jsonl_blocks(read, unit.text_field, block_size, where, invalid_utf8):
                yield block


def _checked_utf8(piece: bytes, invalid_utf8: str, where: str, offset: int, line_at: Callable[[], int],
                  decompressed: bool) -> bytes:
    """``piece`` as valid UTF-8: refused (saying where) or decoded with U+FFFD, per the policy."""
    try:
        if _native_utf8_valid is None:  # a source tree without the native core
            return piece.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict").encode("utf-8")
        return _valid_utf8(piece, invalid_utf8)
    except UnicodeDecodeError as exc:
        line = line_at() + piece[:exc.start].count(b"\n")
        of = " of the decompressed text" if decompressed else ""
        raise InputError(f"{where}: invalid UTF-8 at byte {offset + exc.start}{of} (line {line}): "
                         f"{exc.reason}; fix the file or pass --invalid-utf8 replace") from None


def text_blocks(read: Callable[[int], bytes], special_tokens: Sequence[str], pattern: str, block_size: int,
                where: str, invalid_utf8: str, *, offset: int = 0, first_line: int | None = 1,
                path: str | None = None, decompressed: bool = False,
                ends: list[int] | None = None, max_pretoken_bytes: int | None = None) -> Iterator[bytes]:
    """Blocks of the text read by ``read``, cut where ``count.plan_chunks`` would cut a file (the
    one splitter's safe cuts: at a special token, or by the pattern's local rule), so cutting
    never changes a count. A line with
    no such point (one pre-token of hundreds of megabytes) is cut, for a pattern with a native scanner, where
    ``max_pretoken_bytes`` splits it anyway (found by a scan from the block's start), so memory
    stays bounded by about twice ``block_size`` + ``max_pretoken_bytes``. Without any cut rule
    (a user's own pattern and no special tokens) the text is one block. ``ends``, when given,
    receives each block's end offset (for streams)."""

    scanned = native_scanner(pattern) != ""  # a scan from a block start can find a cut
    splitter = native_splitter(special_tokens, pattern)
    cuttable = splitter is not None and (bool(special_tokens) or splitter.has_local_rule)
    back = cut_context(splitter) + 1 if cuttable else 1
    scan_at = block_size + (max_pretoken_bytes or 0) + _READ  # buffer size that tries a scan cut
    buf = bytearray()
    base = offset          # offset of buf[0]
    newlines = 0           # newlines between `offset` and buf[0] (for error messages)
    search_from = block_size
    eof = False

    def emit(n: int) -> bytes:
        nonlocal base, newlines
        piece = bytes(buf[:n])
        del buf[:n]
        at = base
        base += n
        lines_before = newlines
        out = _checked_utf8(piece, invalid_utf8, where, at,
                            lambda: _line_of(path, offset, first_line) + lines_before, decompressed)
        if invalid_utf8 == "strict":
            newlines += piece.count(b"\n")
        if ends is not None:
            ends.append(base)
        return out

    def scan_cut() -> int | None:
        """A cut inside one giant pre-token (buf[0] is a chunk start); None if none yet."""
        nonlocal scan_at
        data = bytes(buf)
        if not eof:
            data = data[: len(data) - utf8_tail(data)]
        q = -1
        if _native_utf8_valid is not None and _native_utf8_valid(data):  # see count._cut_in_scan
            q = splitter.scan_cut(data, block_size, max_pretoken_bytes or 0, 0 if eof else back + 16)
        if q <= 0:
            scan_at = 2 * len(buf)  # try again once the buffer has doubled: linear overall
            return None
        scan_at = block_size + (max_pretoken_bytes or 0) + _READ
        return q

    while not eof:
        data = read(_READ if cuttable else max(_READ, block_size))
        eof = not data
        buf += data
        while buf and (eof or (cuttable and len(buf) > search_from + back)):
            if eof and len(buf) <= block_size:
                yield emit(len(buf))
                break
            cut = None
            if cuttable:
                lo = min(search_from, len(buf))
                s0 = max(lo - back, 0)  # a special token may start a little before `lo`
                window = bytes(buf[s0:])
                q = splitter.first_cut(window, lo - s0, len(window) if eof else len(window) - back)
                cut = None if q < 0 else s0 + q
                if cut is None and scanned and len(buf) >= scan_at:
                    cut = scan_cut()
            if cut is None:
                if eof:
                    yield emit(len(buf))
                    break
                search_from = max(len(buf) - back, block_size)  # next time, search only new data
                break
            search_from = block_size
            yield emit(cut)
