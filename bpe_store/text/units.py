"""Work units: the pieces of the inputs counted as a whole (``chunks`` rows), planned from the
inputs (``plan_units``), and read by any thread or process into the blocks of text counting
consumes (``unit_blocks``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

from ..errors import InputError
from ..native import native_utf8_valid
from .decompress import READ, checked_reader, open_decompressed, read_ahead
from .fingerprint import utf8_tail
from .input_checks import valid_utf8
from .inputs import Unit
from .jsonl import jsonl_blocks, line_of
from .parquet import parquet_blocks
from .pretokenize import (
    PretokenSpec,
    cut_context,
    native_scanner,
    native_splitter,
)


def unit_blocks(unit: Unit, spec: PretokenSpec, block_size: int) -> Iterator[bytes]:
    """The text of ``unit`` as blocks of at most about ``block_size`` bytes of valid UTF-8
    (documents joined by ``DOC_SEP`` when ``unit.has_documents``), read by ``spec``'s
    invalid-UTF-8 policy; a text block is cut where ``spec`` says it may be (``text_blocks``)."""
    where, invalid_utf8 = unit.path, spec.invalid_utf8
    if unit.format == "parquet":
        yield from parquet_blocks(unit, invalid_utf8, block_size)
        return
    if unit.kind == "range":
        with open(unit.path, "rb") as f:
            f.seek(unit.start)
            data = f.read(unit.end - unit.start)
        if len(data) != unit.end - unit.start:
            raise InputError(f"{where}: changed while training (shorter than when the run started)")
        if unit.format == "text":
            yield from text_blocks(io.BytesIO(data).read, spec, len(data) + 1, where, offset=unit.start,
                                   first_line=None, path=unit.path)
        else:
            # the unit is in memory already: its lines in one native call, not one per READ
            for block, _, _ in jsonl_blocks(io.BytesIO(data).read, unit.text_field, block_size, where,
                                            invalid_utf8, first_line=None, path=unit.path, offset=unit.start,
                                            read_size=len(data) + 1):
                yield block
        return
    with open_decompressed(unit.path, unit.compression) as f, \
            read_ahead(checked_reader(f, where, unit.compression)) as read:
        if unit.format == "text":
            yield from text_blocks(read, spec, block_size, where, decompressed=unit.compression != "none")
        else:
            for block, _, _ in jsonl_blocks(read, unit.text_field, block_size, where, invalid_utf8):
                yield block


def _checked_utf8(piece: bytes, invalid_utf8: str, where: str, offset: int, line_at: Callable[[], int],
                  decompressed: bool) -> bytes:
    """``piece`` as valid UTF-8: refused (saying where) or decoded with U+FFFD, per the policy."""
    try:
        if native_utf8_valid is None:  # a source tree without the native core
            return piece.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict").encode("utf-8")
        return valid_utf8(piece, invalid_utf8)
    except UnicodeDecodeError as exc:
        line = line_at() + piece[:exc.start].count(b"\n")
        of = " of the decompressed text" if decompressed else ""
        raise InputError(f"{where}: invalid UTF-8 at byte {offset + exc.start}{of} (line {line}): "
                         f"{exc.reason}; fix the file or pass --invalid-utf8 replace") from None


def text_blocks(read: Callable[[int], bytes], spec: PretokenSpec, block_size: int, where: str, *,
                offset: int = 0, first_line: int | None = 1, path: str | None = None, decompressed: bool = False,
                ends: list[int] | None = None) -> Iterator[bytes]:
    """Blocks of the text read by ``read``, checked by ``spec``'s invalid-UTF-8 policy and cut
    where ``chunks.plan_chunks`` would cut a file (the one splitter's safe cuts: at one of
    ``spec``'s special tokens, or by its pattern's local rule), so cutting never changes a count.
    A line with no such point (one pre-token of hundreds of megabytes) is cut, for a pattern with a
    native scanner, where ``spec.max_pretoken_bytes`` splits it anyway (found by a scan from the
    block's start), so memory stays bounded by about twice ``block_size`` + that bound. Without
    any cut rule (a user's own pattern and no special tokens) the text is one block. ``ends``,
    when given, receives each block's end offset (for streams)."""
    yield from _TextBlocks(spec, block_size, where, offset, first_line, path, decompressed, ends).blocks(read)


class _TextBlocks:
    """``text_blocks``' state: the text read but not yet emitted (``buf``, starting at offset
    ``base``), where to look for the next cut, and the newlines before ``buf`` (for messages)."""

    def __init__(self, spec: PretokenSpec, block_size: int, where: str, offset: int, first_line: int | None,
                 path: str | None, decompressed: bool, ends: list[int] | None) -> None:
        special_tokens, pattern, invalid_utf8, max_pretoken_bytes = (
            spec.special_tokens, spec.pattern, spec.invalid_utf8, spec.max_pretoken_bytes)
        self.scanned = native_scanner(pattern) != ""  # a scan from a block start can find a cut
        self.splitter = native_splitter(special_tokens, pattern)
        self.cuttable = self.splitter is not None and (bool(special_tokens) or self.splitter.has_local_rule)
        self.back = cut_context(self.splitter) + 1 if self.cuttable else 1
        self.block_size, self.max_pretoken_bytes = block_size, max_pretoken_bytes
        self.scan_at = block_size + (max_pretoken_bytes or 0) + READ  # buffer size that tries a scan cut
        self.where, self.invalid_utf8, self.decompressed, self.ends = where, invalid_utf8, decompressed, ends
        self.offset, self.first_line, self.path = offset, first_line, path
        self.buf = bytearray()
        self.base = offset          # offset of buf[0]
        self.newlines = 0           # newlines between `offset` and buf[0] (for error messages)
        self.search_from = block_size
        self.eof = False

    def blocks(self, read: Callable[[int], bytes]) -> Iterator[bytes]:
        while not self.eof:
            data = read(READ if self.cuttable else max(READ, self.block_size))
            self.eof = not data
            self.buf += data
            yield from self._cut()

    def _cut(self) -> Iterator[bytes]:
        """The blocks the buffer holds now: cut at safe points, all of it at the end."""
        buf = self.buf
        while buf and (self.eof or (self.cuttable and len(buf) > self.search_from + self.back)):
            if self.eof and len(buf) <= self.block_size:
                yield self._emit(len(buf))
                return
            cut = self._next_cut() if self.cuttable else None
            if cut is None:
                if self.eof:
                    yield self._emit(len(buf))
                    return
                self.search_from = max(len(buf) - self.back, self.block_size)  # next time, search only new data
                return
            self.search_from = self.block_size
            yield self._emit(cut)

    def _next_cut(self) -> int | None:
        """The first safe cut from ``search_from`` on (a scan inside one giant pre-token once the
        buffer is large); None if none yet."""
        buf = self.buf
        lo = min(self.search_from, len(buf))
        s0 = max(lo - self.back, 0)  # a special token may start a little before `lo`
        window = bytes(buf[s0:])
        q = self.splitter.first_cut(window, lo - s0, len(window) if self.eof else len(window) - self.back)
        cut = None if q < 0 else s0 + q
        if cut is None and self.scanned and len(buf) >= self.scan_at:
            cut = self._scan_cut()
        return cut

    def _emit(self, n: int) -> bytes:
        piece = bytes(self.buf[:n])
        del self.buf[:n]
        at = self.base
        self.base += n
        lines_before = self.newlines
        out = _checked_utf8(piece, self.invalid_utf8, self.where, at,
                            lambda: line_of(self.path, self.offset, self.first_line) + lines_before,
                            self.decompressed)
        if self.invalid_utf8 == "strict":
            self.newlines += piece.count(b"\n")
        if self.ends is not None:
            self.ends.append(self.base)
        return out

    def _scan_cut(self) -> int | None:
        """A cut inside one giant pre-token (buf[0] is a chunk start); None if none yet."""
        data = bytes(self.buf)
        if not self.eof:
            data = data[: len(data) - utf8_tail(data)]
        q = -1
        if native_utf8_valid is not None and native_utf8_valid(data):  # see chunks._cut_in_scan
            q = self.splitter.scan_cut(data, self.block_size, self.max_pretoken_bytes or 0,
                                       0 if self.eof else self.back + 16)
        if q <= 0:
            self.scan_at = 2 * len(self.buf)  # try again once the buffer has doubled: linear overall
            return None
        self.scan_at = self.block_size + (self.max_pretoken_bytes or 0) + READ
        return q
