"""Inputs: what an input is (a text, jsonl or parquet file, maybe compressed, or a stream) and
how its work units are read into the blocks of text that counting consumes.

Kinds. The format comes from the extension (``.jsonl``/``.ndjson``/``.json`` -> jsonl,
``.parquet``/``.pq`` -> parquet, anything else -> text) unless one is given; a compression
suffix (``.gz``, ``.zst``, ``.bz2``, ``.xz``) is looked at first (``a.jsonl.gz`` is gzipped
jsonl). A text file is one document. In jsonl each line is a JSON object whose ``text_field``
is a document; in parquet each row's ``text_field`` column is. Compressed files are
decompressed as a stream, never to disk or whole into memory.

Documents are hard boundaries. Blocks of a jsonl or parquet unit hold UTF-8 documents joined
by ``DOC_SEP`` (the byte 0xFF, which valid UTF-8 never contains); counting splits at it as at
a special token, so no pre-token (and hence no merge) crosses a document boundary, whether or
not the run has special tokens: the words are those of the documents counted one by one.

Work units (rows of the ``chunks`` table; see ``plan_units``): a byte range of an
uncompressed text file (cut at points no pre-token spans, ``count.plan_chunks``), a
line-aligned byte range of an uncompressed jsonl file, a parquet row group, a whole compressed
file. A ``Unit`` is a small picklable description any thread or process can read by itself
(``unit_blocks``). Streams (stdin, a Python iterable: ``Stream``) are read once, in order, and
counted as they come; see ``Stream.blocks`` for how a killed stream run resumes.

Every reading problem is an ``InputError`` (exit 2) naming the file, the line / row group and
the problem.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import queue
import sys
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError, ResumeMismatch
from .sources import Source

try:  # the jsonl text-field extractor (native/jsonl.cpp); without it jsonl is read by parse_lines
    from .._core import jsonl_texts as _native_jsonl_texts
except ImportError:  # pragma: no cover - a source tree without the native core
    _native_jsonl_texts = None

#: Separates documents inside a block: never part of valid UTF-8, so no text can contain it.
DOC_SEP = b"\xff"
FORMATS = ("text", "jsonl", "parquet")
COMPRESSIONS = {".gz": "gz", ".zst": "zst", ".bz2": "bz2", ".xz": "xz"}
_FORMAT_OF_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet",
                     ".pq": "parquet"}
DEFAULT_TEXT_FIELD = "text"
#: ``Source.path`` of standard input and of a Python iterable.
STDIN = "-"
ITERABLE = "<iterable>"
#: How much a reader asks a (decompressing) file for at once.
_READ = 1 << 20
_PIP = {"parquet": "pip install 'bpe-store[parquet]'  (pyarrow)",
        "zst": "pip install 'bpe-store[zstd]'  (zstandard)"}


# -- what an input is ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FileInput:
    """A file to train on and how to read it."""

    path: Path
    format: str = "text"
    compression: str = "none"
    text_field: str | None = None


def file_input(path: str | os.PathLike, format: str | None = None,
               text_field: str = DEFAULT_TEXT_FIELD) -> FileInput:
    """``path``'s kind: ``format`` if given, else from the extension; compression from the suffix."""
    p = Path(path)
    suffixes = [s.lower() for s in p.suffixes]
    compression = COMPRESSIONS.get(suffixes[-1], "none") if suffixes else "none"
    if compression != "none":
        suffixes = suffixes[:-1]
    if format is None:
        format = _FORMAT_OF_SUFFIX.get(suffixes[-1], "text") if suffixes else "text"
    if format not in FORMATS:
        raise InputError(f"unknown input format {format!r}: use one of {', '.join(FORMATS)}")
    if format == "parquet" and compression != "none":
        raise InputError(f"{p}: a compressed parquet file cannot be read by row group; parquet "
                         "compresses its pages itself: give the .parquet file")
    if not text_field:
        raise InputError("the text field name must not be empty")
    return FileInput(p, format, compression, None if format == "text" else text_field)


def _need(module: str, extra: str):
    """Import an optional dependency, or say which extra installs it (exit 2)."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        raise InputError(f"reading {extra} input needs an optional dependency: {_PIP[extra]}") from None


def open_decompressed(path: str | os.PathLike, compression: str) -> BinaryIO:
    """A binary file object giving the decompressed bytes of ``path``, as a stream."""
    if compression == "none":
        return open(path, "rb")
    if compression == "gz":
        return _open_gzip(path)
    if compression == "bz2":
        return bz2.open(path, "rb")
    if compression == "xz":
        return lzma.open(path, "rb")
    if compression == "zst":
        return _ZstdReader(open(path, "rb"), _need("zstandard", "zst"))
    raise InputError(f"{path}: unknown compression {compression!r}")


def _open_gzip(path: str | os.PathLike) -> BinaryIO:
    """A gzip file (one or several members) as a stream: through ISA-L's igzip (``isal``, the
    ``gzip`` extra) when it is installed, else through the standard library.

    Why: igzip inflates ~3x faster than zlib (bench/RESULTS-inputs.md), and inflating is most of
    what a .gz adds to counting. Both give the same bytes and fail the same ways (EOFError when
    truncated, gzip.BadGzipFile on a bad CRC or length; a corrupt deflate stream is isal's
    IsalError where zlib says zlib.error: see ``_decompress_error``). A file that does not start
    as gzip is left to the standard library, which names its first bytes (igzip would call it
    truncated)."""
    try:
        from isal import igzip
    except ImportError:
        return gzip.open(path, "rb")
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic and magic != b"\x1f\x8b":
        return gzip.open(path, "rb")
    return igzip.open(path, "rb")


class _ZstdReader(io.RawIOBase):
    """Zstandard frames (one or several, concatenated) as a stream. Why not
    ``ZstdDecompressor.stream_reader``: it ends quietly at a truncated frame; this says so
    (EOFError, as gzip does), so a cut-off file is an error, not a shorter corpus.

    Why the offset into ``_out``: a read returns a slice of what one decompress call gave, so
    each byte is copied once; slicing off the rest at every read copied it again and again."""

    def __init__(self, raw: BinaryIO, zstd):
        self._raw = raw
        self._zstd = zstd
        self._dec = zstd.ZstdDecompressor().decompressobj()
        self._fed = False   # bytes given to the current frame's decompressor
        self._out = b""     # decompressed, returned up to _at
        self._at = 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        while self._at == len(self._out):
            data = self._raw.read(_READ // 4)  # ~1 MB decompressed: most reads return it whole
            if not data:
                if self._fed and not self._dec.eof:
                    raise EOFError("the file ends inside a zstd frame (truncated)")
                return b""
            parts = []
            while data:
                self._fed = True
                parts.append(self._dec.decompress(data))
                data = b""
                if self._dec.eof:  # a frame ended: the rest starts the next one
                    data = self._dec.unused_data
                    self._dec = self._zstd.ZstdDecompressor().decompressobj()
                    self._fed = False
            self._out, self._at = b"".join(parts), 0  # one part: no copy
        k = len(self._out) - self._at if n is None or n < 0 else min(n, len(self._out) - self._at)
        if self._at == 0 and k == len(self._out):
            out = self._out
        else:
            out = self._out[self._at:self._at + k]
        self._at += k
        return out

    def close(self) -> None:
        self._raw.close()
        super().close()


def _decompress_error(exc: BaseException, compression: str) -> bool:
    """Whether ``exc`` is a decompressor's complaint about its input (truncated or corrupt)."""
    if isinstance(exc, (EOFError, zlib.error, gzip.BadGzipFile, lzma.LZMAError)):
        return True
    if compression == "zst":
        zstd = sys.modules.get("zstandard")
        return zstd is not None and isinstance(exc, zstd.ZstdError)
    if compression == "gz":  # ISA-L's name for a corrupt deflate stream (see _open_gzip)
        isal_zlib = sys.modules.get("isal.isal_zlib")
        return isal_zlib is not None and isinstance(exc, isal_zlib.error)
    return compression == "bz2" and isinstance(exc, OSError) and "data stream" in str(exc)


def _reader(f: BinaryIO, where: str, compression: str) -> Callable[[int], bytes]:
    """``f.read`` that turns decompression and I/O failures into one-line InputErrors."""
    done = [0]

    def read(n: int) -> bytes:
        try:
            data = f.read(n)
        except Exception as exc:  # noqa: BLE001 - classified below; anything else is a bug
            if _decompress_error(exc, compression):
                raise InputError(f"{where}: truncated or corrupt {compression} data after {done[0]} "
                                 f"decompressed bytes ({exc})") from None
            if isinstance(exc, OSError):
                raise InputError(f"{where}: cannot read ({exc.strerror or exc})") from None
            raise
        done[0] += len(data)
        return data

    return read


@contextmanager
def _read_ahead(read: Callable[[int], bytes], depth: int = 4) -> Iterator[Callable[[int], bytes]]:
    """``read`` run ahead on its own thread: the reader given gets the next piece already read
    (of ``_READ`` bytes, whatever size it asks for; empty at the end; an error where ``read``
    raised it, re-raised here). At most ``depth`` pieces wait.

    Why: a compressed file is one work unit, read by one thread; inflating (zlib, ISA-L, zstd,
    bz2 and lzma all release the GIL) then overlaps parsing its JSON or cutting its text on
    that thread, instead of taking turns with it, so one big .jsonl.gz does not leave counting
    threads waiting on a reader that does both. Leaving the ``with`` early (an error, a closed
    generator) stops the thread and waits for it, so it never reads a closed file."""
    pieces: queue.Queue[tuple[bytes, BaseException | None]] = queue.Queue(depth)
    stop = threading.Event()

    def run() -> None:
        try:
            while not stop.is_set():
                data = read(_READ)
                pieces.put((data, None))
                if not data:
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
            pieces.put((b"", exc))

    thread = threading.Thread(target=run, name="bpe-read-ahead", daemon=True)
    thread.start()
    ended = False

    def next_piece(n: int) -> bytes:
        nonlocal ended
        if ended:
            return b""
        data, exc = pieces.get()
        if exc is not None:
            ended = True
            raise exc
        ended = not data
        return data

    try:
        yield next_piece
    finally:
        stop.set()
        while thread.is_alive():  # free a put blocked on a full queue; the thread then sees `stop`
            try:
                pieces.get_nowait()
            except queue.Empty:
                thread.join(0.01)


def scan_input(item: FileInput, invalid_utf8: str = "strict") -> Source:
    """Check one input file and fingerprint it (``count.scan_source``), recording its kind.

    Uncompressed text and jsonl are checked to be UTF-8 here (saying where they are not);
    compressed text is checked as it is counted, parquet strings as each batch is read. A
    parquet file must have ``text_field`` as a string column."""
    from .count import scan_source

    plain = item.compression == "none" and item.format != "parquet"
    src = scan_source(item.path, invalid_utf8 if plain else "replace")
    if item.format == "parquet":
        _parquet_column_type(str(item.path), item.text_field)
    return replace(src, format=item.format, compression=item.compression, text_field=item.text_field)


def same_kind_diffs(old: Sequence[Source], new: Sequence[Source | Stream]) -> list[str]:
    """How the inputs' kinds differ between a store and a command (paths already match)."""
    def what(x: Source | Stream) -> str:
        return x.format + (f" (field {x.text_field!r})" if x.text_field else "")

    diffs = []
    for s, n in zip(old, new):
        if s.format != n.format or s.text_field != n.text_field:
            diffs.append(f"{s.path} read as {what(s)} -> {what(n)}")
        elif s.compression != n.compression:
            diffs.append(f"{s.path} compression {s.compression} -> {n.compression}")
    return diffs


# -- work units ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    """One work unit, described so that any thread or process can read it (``unit_blocks``):
    ``kind`` range (bytes ``[start, end)``), row_group (``part``) or file (the whole file)."""

    path: str
    format: str
    compression: str
    text_field: str | None
    kind: str
    start: int
    end: int
    part: int | None = None

    @property
    def has_documents(self) -> bool:
        """Whether its blocks hold several documents joined by ``DOC_SEP``."""
        return self.format != "text"


def unit_of(source: Source, kind: str, start: int, end: int, part: int | None) -> Unit:
    return Unit(source.path, source.format, source.compression, source.text_field, kind, start, end, part)


def plan_units(source: Source, special_tokens: Sequence[str], pattern: str,
               chunk_size: int, max_pretoken_bytes: int | None = None) -> list[tuple[int, int, str, int | None]]:
    """``[(start, end, kind, part)]``: the work units of one input file (see the module doc)."""
    from .count import plan_chunks

    if source.compression != "none":
        return [(0, source.size, "file", None)]
    if source.format == "text":
        return [(a, b, "range", None) for a, b in
                plan_chunks(source.path, source.size, special_tokens, pattern, chunk_size, max_pretoken_bytes)]
    if source.format == "jsonl":
        return [(a, b, "range", None) for a, b in _plan_lines(source.path, source.size, chunk_size)]
    pf = _parquet_file(source.path)
    units = []
    at = 0
    for g in range(pf.metadata.num_row_groups):
        rg = pf.metadata.row_group(g)
        size = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        units.append((at, at + size, "row_group", g))  # start/end: progress in compressed bytes
        at += size
    return units


def _plan_lines(path: str, size: int, chunk_size: int) -> list[tuple[int, int]]:
    """Byte ranges of about ``chunk_size`` that end just after a newline (or at the end)."""
    bounds = [0]
    with open(path, "rb") as f:
        target = chunk_size
        while target < size:
            f.seek(target)
            nl = -1
            pos = target
            while nl < 0 and pos < size:
                data = f.read(1 << 16)
                nl = data.find(b"\n")
                if nl < 0:
                    pos += len(data)
                    if not data:
                        break
            if nl < 0 or pos + nl + 1 >= size:
                break
            bounds.append(pos + nl + 1)
            target = bounds[-1] + chunk_size
    bounds.append(size)
    return list(zip(bounds, bounds[1:]))


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


def input_blocks(item: FileInput | Stream, special_tokens: Sequence[str], pattern: str, invalid_utf8: str,
                 block_size: int) -> Iterator[bytes]:
    """The whole text of one input, in order, as blocks of valid UTF-8, documents joined by
    ``DOC_SEP`` when it holds several (``has_documents``): the readers counting uses
    (``unit_blocks``, ``Stream.blocks``), over the whole input rather than one work unit. What
    ``bpe-store encode`` reads, so that it reads every input kind exactly as training does."""
    if isinstance(item, Stream):
        for block, _ in item.blocks(item.source(), special_tokens, pattern, invalid_utf8, block_size):
            yield block
        return
    path = str(item.path)
    if item.format == "parquet":
        _parquet_column_type(path, item.text_field)  # the column's type, checked as training does
        groups = _parquet_file(path).metadata.num_row_groups
        units = [Unit(path, "parquet", "none", item.text_field, "row_group", 0, 0, g) for g in range(groups)]
    else:
        units = [Unit(path, item.format, item.compression, item.text_field, "file", 0, os.path.getsize(path))]
    for unit in units:
        yield from unit_blocks(unit, special_tokens, pattern, invalid_utf8, block_size)


def has_documents(item: FileInput | Stream) -> bool:
    """Whether ``input_blocks(item)`` joins several documents by ``DOC_SEP`` (else the whole input is
    one document: a text file, text on standard input)."""
    return item.format != "text"


# -- text ----------------------------------------------------------------------------------------


def _line_of(path: str | None, offset: int, first_line: int | None) -> int:
    """The 1-based line number at byte ``offset`` of ``path`` (read only when an error needs it)."""
    if first_line is not None or path is None:
        return first_line or 1
    n = 1
    with open(path, "rb") as f:
        left = offset
        while left > 0:
            data = f.read(min(left, 1 << 20))
            if not data:
                break
            n += data.count(b"\n")
            left -= len(data)
    return n


def _checked_utf8(piece: bytes, invalid_utf8: str, where: str, offset: int, line_at: Callable[[], int],
                  decompressed: bool) -> bytes:
    """``piece`` as valid UTF-8: refused (saying where) or decoded with U+FFFD, per the policy."""
    from . import count

    try:
        if count._native_utf8_valid is None:  # a source tree without the native core
            return piece.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict").encode("utf-8")
        return count._valid_utf8(piece, invalid_utf8)
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
    from .count import _native_utf8_valid, cut_context
    from .fingerprint import utf8_tail
    from .pretokenize import native_scanner, native_splitter

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


# -- jsonl ---------------------------------------------------------------------------------------


def _record_text(obj, field: str, where: str, line: int) -> str:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: line {line}: not a JSON object but {_json_type(obj)}")
    if field not in obj:
        keys = ", ".join(list(obj)[:8]) or "none"
        raise InputError(f"{where}: line {line}: no field {field!r} (fields: {keys}); see --text-field")
    text = obj[field]
    if not isinstance(text, str):
        raise InputError(f"{where}: line {line}: field {field!r} is {_json_type(text)}, not a string")
    return text


def _json_type(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _encode_doc(text: str, invalid_utf8: str, where: str, line: int) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800-style escape
        if invalid_utf8 != "replace":
            raise InputError(f"{where}: line {line}: the text holds a lone surrogate (an invalid \\u "
                             "escape); fix the file or pass --invalid-utf8 replace") from None
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def parse_lines(lines: list[bytes], field: str, where: str, first_line: int, invalid_utf8: str) -> list[bytes]:
    """The documents (UTF-8) of jsonl ``lines`` (line ``first_line`` first); blank lines skipped.

    The reference reading of jsonl, one ``json.loads`` per line: what the native extractor
    (``_core.jsonl_texts``) must equal, and what reads a block it is not sure of, naming the first
    bad line or applying ``--invalid-utf8 replace``. (Why not one ``json.loads`` of the lines
    joined into an array, as before: lines that are broken alone can join into valid JSON, e.g. a
    line ending inside a string, closed on the next one.)"""
    docs = []
    for i, ln in enumerate(lines):
        line = first_line + i
        if not ln.strip():
            continue
        try:
            raw = ln.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict")
        except UnicodeDecodeError as exc:
            raise InputError(f"{where}: line {line}: invalid UTF-8 at column {exc.start + 1}: {exc.reason}; "
                             "fix the file or pass --invalid-utf8 replace") from None
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            hint = ("; jsonl holds one JSON object per line, not a JSON array or a pretty-printed "
                    "document" if line == 1 and raw.lstrip()[:1] in ("[", "{") and raw.strip() in ("[", "{")
                    else "")
            raise InputError(f"{where}: line {line}: broken JSON ({exc}){hint}") from None
        docs.append(_encode_doc(_record_text(obj, field, where, line), invalid_utf8, where, line))
    return docs


def _native_field(field: str) -> bytes | None:
    """``field`` as the native extractor takes it (UTF-8), or None to read in Python (no native
    core, or a name no JSON key can equal natively: one with a lone surrogate)."""
    if _native_jsonl_texts is None:
        return None
    try:
        return field.encode("utf-8")
    except UnicodeEncodeError:
        return None


def jsonl_lines_documents(content: bytes, field: str, where: str, first_line: int | Callable[[], int],
                          invalid_utf8: str, native_field: bytes | None = None) -> tuple[bytes, int, int]:
    """``(documents joined by DOC_SEP, documents, lines)`` of ``content``, complete jsonl lines
    (split at LF; the last may lack it). Natively when ``native_field`` is given and the
    extractor is sure of every line, else by ``parse_lines``; the same bytes either way.
    ``first_line``: the number of the first line, or a function finding it (called only when a
    line is bad)."""
    if native_field is not None:
        got = _native_jsonl_texts(content, native_field)
        if got is not None:
            return got
    lines = content.split(b"\n")
    if callable(first_line):
        try:
            docs = parse_lines(lines, field, where, 0, invalid_utf8)
        except InputError:  # find the line number, then report with it
            docs = parse_lines(lines, field, where, first_line(), invalid_utf8)
    else:
        docs = parse_lines(lines, field, where, first_line, invalid_utf8)
    return DOC_SEP.join(docs), len(docs), len(lines)


def jsonl_blocks(read: Callable[[int], bytes], field: str | None, block_size: int, where: str,
                 invalid_utf8: str, *, first_line: int | None = 1, path: str | None = None,
                 offset: int = 0, read_size: int = _READ) -> Iterator[tuple[bytes, int, int]]:
    """``(block, end, documents)``: documents of the jsonl read by ``read`` joined by ``DOC_SEP``
    into blocks of about ``block_size``, each with the byte offset after its last line and the
    documents so far. ``first_line`` None: found from ``path`` and ``offset`` if an error needs it.

    Reads ``read_size`` bytes at a time and hands the complete lines among them to
    ``jsonl_lines_documents`` (the native extractor, GIL released); memory: one read, the line it
    cut, and one block."""
    assert field is not None
    native_field = _native_field(field)
    parts: list[bytes] = []     # the start of a line cut by the last read
    lines_seen = 0
    consumed = offset
    pieces: list[bytes] = []    # runs of documents joined by DOC_SEP, not yet in a block
    n_docs = 0
    size = 0
    eof = False
    while not eof:
        data = read(read_size)
        eof = not data
        if eof:
            if not parts:
                break
            content, parts = b"".join(parts), []
        else:
            nl = data.rfind(b"\n")
            if nl < 0:
                parts.append(data)
                continue
            parts.append(data[:nl])
            content = b"".join(parts)
            parts = [data[nl + 1:]] if nl + 1 < len(data) else []
        line: int | Callable[[], int] = (
            first_line + lines_seen if first_line is not None
            else lambda seen=lines_seen: _line_of(path, offset, None) + seen)
        joined, n, n_lines = jsonl_lines_documents(content, field, where, line, invalid_utf8, native_field)
        lines_seen += n_lines
        consumed += len(content) + (0 if eof else 1)
        del content  # not held while a block waits to be counted (a whole range unit's lines)
        if n:
            pieces.append(joined)
            n_docs += n
            size += len(joined) + 1
        if size >= block_size or (eof and pieces):
            block, pieces, size = DOC_SEP.join(pieces), [], 0  # the pieces are not held while it is counted
            yield block, consumed, n_docs
    if pieces:
        yield DOC_SEP.join(pieces), consumed, n_docs


# -- parquet -------------------------------------------------------------------------------------


def _parquet_file(path: str):
    pq = _need("pyarrow.parquet", "parquet")
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow's errors for a file it cannot read
        raise InputError(f"{path}: not a readable parquet file ({exc})") from None


def _parquet_column_type(path: str, field: str | None):
    pf = _parquet_file(path)
    schema = pf.schema_arrow
    if field not in schema.names:
        names = ", ".join(schema.names[:8]) or "none"
        raise InputError(f"{path}: no column {field!r} (columns: {names}); see --text-field")
    pa = _need("pyarrow", "parquet")
    t = schema.field(field).type
    if pa.types.is_dictionary(t):
        t = t.value_type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view"):
        raise InputError(f"{path}: column {field!r} holds {t}, not strings")
    return t


def _parquet_blocks(unit: Unit, invalid_utf8: str, block_size: int) -> Iterator[bytes]:
    """Row group ``unit.part``'s documents, in batches of about ``block_size`` bytes (so memory
    stays bounded however big the row group)."""
    pa = _need("pyarrow", "parquet")
    pf = _parquet_file(unit.path)
    where = f"{unit.path}: row group {unit.part}"
    rg = pf.metadata.row_group(unit.part)
    col = pf.schema_arrow.get_field_index(unit.text_field)
    if col < 0:
        raise InputError(f"{unit.path}: no column {unit.text_field!r}; see --text-field")
    leaf = [i for i in range(rg.num_columns) if rg.column(i).path_in_schema == unit.text_field]
    bytes_est = rg.column(leaf[0]).total_uncompressed_size if leaf else rg.total_byte_size
    rows = max(1, int(block_size * max(rg.num_rows, 1) / max(bytes_est, 1)))
    row = 0
    try:
        batches = pf.iter_batches(batch_size=rows, row_groups=[unit.part], columns=[unit.text_field],
                                  use_threads=False)
        for batch in batches:
            block = _parquet_documents(batch.column(0), where, row, unit.text_field, invalid_utf8)
            row += batch.num_rows
            if block:
                yield block
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"{where}: cannot read ({exc})") from None
    except pa.ArrowException as exc:
        raise InputError(f"{where}: cannot read ({exc})") from None


def _parquet_documents(arr, where: str, first_row: int, field: str | None, invalid_utf8: str) -> bytes:
    """The strings of ``arr`` as UTF-8 documents joined by ``DOC_SEP`` (empty when it has no
    rows). ``arr``: an Arrow array or chunked array of ``string``, ``large_string``,
    ``string_view`` or a dictionary of them, whose first row is row ``first_row`` of ``where`` (a
    row group). A null is an error, and so is invalid UTF-8 unless ``invalid_utf8 == "replace"``
    (then U+FFFD, as Python decodes it).

    Why Arrow's own buffers: the strings are one data buffer and an offsets array, so the join
    is ``pyarrow.compute.binary_join`` over one list spanning the array, one C pass with no
    Python object per document (~4x less CPU than ``numpy.insert`` at each offset, which took
    0.08 s per 100 MB); validating is Arrow's (SIMD) UTF-8 check of the whole buffer."""
    pa = _need("pyarrow", "parquet")
    pc = _need("pyarrow.compute", "parquet")
    if isinstance(arr, pa.ChunkedArray):  # each chunk joined where it lies; copied once more if several
        parts, row = [], first_row
        for chunk in arr.chunks:
            if len(chunk):
                parts.append(_parquet_documents(chunk, where, row, field, invalid_utf8))
            row += len(chunk)
        return DOC_SEP.join(parts)
    if not len(arr):
        return b""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        arr = arr.cast(pa.large_string())  # string_view: offsets + data first
    if arr.null_count:
        first = pc.index(arr.is_null(), True).as_py()
        raise InputError(f"{where}, row {first_row + first}: {field!r} is null, not a string")
    try:
        arr.validate(full=True)  # the strings' UTF-8
    except pa.ArrowInvalid:
        return DOC_SEP.join(_parquet_cell_utf8(b, where, first_row + i, invalid_utf8)
                            for i, b in enumerate(arr.cast(pa.large_binary()).to_pylist()))
    values = arr.view(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
    whole = pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)
    return pc.binary_join(whole, pa.scalar(DOC_SEP, values.type))[0].as_py()


def _parquet_cell_utf8(b: bytes, where: str, row: int, invalid_utf8: str) -> bytes:
    """One cell of a batch Arrow found invalid UTF-8 in (the slow path, one row at a time)."""
    try:
        b.decode("utf-8")
        return b
    except UnicodeDecodeError as exc:
        if invalid_utf8 == "replace":
            return b.decode("utf-8", "replace").encode("utf-8")
        raise InputError(f"{where}, row {row}: invalid UTF-8 at byte {exc.start}: {exc.reason}; "
                         "fix the file or pass --invalid-utf8 replace") from None


# -- streams -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamPosition:
    """How much of a stream a block ends at: raw bytes (stdin) or documents, and the SHA-256 of
    that prefix."""

    bytes: int
    documents: int
    sha256: str


class Stream:
    """An input read once, in order: standard input (text or jsonl) or a Python iterable of
    documents. Its counts are committed as it goes, with the position and the SHA-256 of what
    was read. A killed stream run resumes when given the same stream again: the part already
    counted is read, checked against the recorded SHA-256 (a different stream is refused,
    exit 3) and skipped; counting goes on from there."""

    def __init__(self, name: str, format: str, text_field: str | None,
                 open_bytes: Callable[[], BinaryIO] | None = None,
                 documents: Callable[[], Iterable] | None = None):
        self.name = name
        self.path = name
        self.format = format
        self.compression = "none"
        self.text_field = text_field
        self._open_bytes = open_bytes
        self._documents = documents

    @classmethod
    def stdin(cls, format: str | None = None, text_field: str = DEFAULT_TEXT_FIELD) -> Stream:
        format = format or "text"
        if format == "parquet":
            raise InputError("parquet cannot be read from standard input (it needs to seek); give the file")
        if format not in FORMATS:
            raise InputError(f"unknown input format {format!r}: use one of {', '.join(FORMATS)}")
        return cls(STDIN, format, text_field if format == "jsonl" else None, open_bytes=lambda: sys.stdin.buffer)

    @classmethod
    def of_iterable(cls, items: Iterable, text_column: str = DEFAULT_TEXT_FIELD) -> Stream:
        """Documents from ``items``: strings, mappings with ``text_column`` (rows), or an HF
        ``datasets.Dataset`` / ``IterableDataset`` (read in batches of its column; duck-typed,
        so ``datasets`` is not needed)."""
        if isinstance(items, (str, bytes)):
            raise InputError("train_from_iterator takes an iterable of documents, not one string")

        def documents() -> Iterator:
            batched = getattr(items, "iter", None)
            if callable(batched) and hasattr(items, "column_names"):
                names = items.column_names
                if names is not None and text_column not in names:
                    raise InputError(f"the dataset has no column {text_column!r} (columns: "
                                     f"{', '.join(names[:8])})")
                for batch in batched(batch_size=1000):
                    if text_column not in batch:  # an IterableDataset may not know its columns
                        raise InputError(f"the dataset has no column {text_column!r} (columns: "
                                         f"{', '.join(map(str, list(batch)[:8]))})")
                    yield from batch[text_column]
                return
            for item in items:
                if isinstance(item, Mapping):
                    if text_column not in item:
                        raise InputError(f"a row of the iterable has no {text_column!r} "
                                         f"(keys: {', '.join(map(str, list(item)[:8]))})")
                    yield item[text_column]
                else:
                    yield item

        return cls(ITERABLE, "iterable", text_column, documents=documents)

    def source(self) -> Source:
        """The ``sources`` row of a stream not read yet."""
        return Source(self.name, 0, 0, hashlib.sha256().hexdigest(), self.format, "none", self.text_field, 0, "sha256")

    def blocks(self, resume: Source, special_tokens: Sequence[str], pattern: str, invalid_utf8: str,
               block_size: int, max_pretoken_bytes: int | None = None) -> Iterator[tuple[bytes, StreamPosition]]:
        """``(block, position after it)`` for the part of the stream not counted yet; first
        reads and checks the part that ``resume`` (the store's row) says was counted."""
        if self._documents is not None:
            yield from self._iterable_blocks(resume, invalid_utf8, block_size)
            return
        sha = hashlib.sha256()
        f = self._open_bytes()
        skip = resume.size
        while skip > 0:  # the counted prefix: read, hash, compare
            data = f.read(min(skip, _READ))
            if not data:
                break
            sha.update(data)
            skip -= len(data)
        if skip > 0 or sha.hexdigest() != resume.digest:
            raise ResumeMismatch(
                f"the stream given is not the one this store was counting: its first {resume.size} bytes "
                f"differ from those counted ({resume.documents or 0} documents); give the same stream "
                "again, or --restart to start over")
        pending = bytearray()   # read, not yet hashed (hashed once a block is cut there)
        hashed = resume.size

        # read1: what the pipe has (up to n), not a wait until n bytes came
        read1 = getattr(f, "read1", f.read)

        def read(n: int) -> bytes:
            data = read1(n)
            pending.extend(data)
            return data

        def position(end: int, documents: int) -> StreamPosition:
            nonlocal hashed
            sha.update(pending[: end - hashed])
            del pending[: end - hashed]
            hashed = end
            return StreamPosition(end, documents, sha.hexdigest())

        where = "standard input"
        if self.format == "text":
            ends: list[int] = []
            for block in text_blocks(read, special_tokens, pattern, block_size, where, invalid_utf8,
                                     offset=resume.size, first_line=1 if resume.size == 0 else None,
                                     ends=ends, max_pretoken_bytes=max_pretoken_bytes):
                yield block, position(ends.pop(0), 1)
        else:
            first = resume.documents or 0
            for block, end, docs in jsonl_blocks(read, self.text_field, block_size, where, invalid_utf8,
                                                 first_line=None, offset=resume.size):
                yield block, position(end, first + docs)

    def _iterable_blocks(self, resume: Source, invalid_utf8: str,
                         block_size: int) -> Iterator[tuple[bytes, StreamPosition]]:
        sha = hashlib.sha256()
        skip = resume.documents or 0
        n = 0
        nbytes = 0
        docs: list[bytes] = []
        size = 0
        mismatch = False
        for doc in self._documents():
            b = _document_bytes(doc, n + 1, invalid_utf8)
            n += 1
            sha.update(len(b).to_bytes(8, "little"))
            sha.update(b)
            nbytes += len(b)
            if n <= skip:
                if n == skip and sha.hexdigest() != resume.digest:
                    mismatch = True
                    break
                continue
            docs.append(b)
            size += len(b) + 1
            if size >= block_size:
                yield DOC_SEP.join(docs), StreamPosition(nbytes, n, sha.hexdigest())
                docs, size = [], 0
        if n < skip or mismatch:
            raise ResumeMismatch(
                f"the iterable given is not the one this store was counting: its first {skip} documents "
                "differ from those counted; give the same documents again, or restart=True to start over")
        if docs:
            yield DOC_SEP.join(docs), StreamPosition(nbytes, n, sha.hexdigest())


def _document_bytes(doc, number: int, invalid_utf8: str) -> bytes:
    """One document of an iterable as UTF-8: a str, or bytes that must be UTF-8."""
    if isinstance(doc, str):
        try:
            return doc.encode("utf-8")
        except UnicodeEncodeError:
            if invalid_utf8 != "replace":
                raise InputError(f"the iterable: document {number} holds a lone surrogate; pass "
                                 "invalid_utf8='replace' to decode it as U+FFFD") from None
            return doc.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")
    if isinstance(doc, (bytes, bytearray, memoryview)):
        b = bytes(doc)
        try:
            b.decode("utf-8")
            return b
        except UnicodeDecodeError as exc:
            if invalid_utf8 != "replace":
                raise InputError(f"the iterable: document {number} is not valid UTF-8 (byte {exc.start}); "
                                 "pass invalid_utf8='replace'") from None
            return b.decode("utf-8", "replace").encode("utf-8")
    raise InputError(f"the iterable: document {number} is {_json_type(doc)}, not a string")
