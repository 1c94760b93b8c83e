"""Reading a compressed input as a stream (gzip, zstd, bz2, xz; never to disk or whole into
memory), read ahead on a thread of its own, with decompression errors as ``InputError``s.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import os
import queue
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import BinaryIO

from ..errors import InputError

#: How much a reader asks a (decompressing) file for at once.
READ = 1 << 20
_PIP = {"parquet": "pip install 'bpe-store[parquet]'  (pyarrow)",
        "zst": "pip install 'bpe-store[zstd]'  (zstandard)"}


def need(module: str, extra: str):
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
        return _ZstdReader(open(path, "rb"), need("zstandard", "zst"))
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
            data = self._raw.read(READ // 4)  # ~1 MB decompressed: most reads return it whole
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


def checked_reader(f: BinaryIO, where: str, compression: str) -> Callable[[int], bytes]:
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
def read_ahead(read: Callable[[int], bytes], depth: int = 4) -> Iterator[Callable[[int], bytes]]:
    """``read`` run ahead on its own thread: the reader given gets the next piece already read
    (of ``READ`` bytes, whatever size it asks for; empty at the end; an error where ``read``
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
                data = read(READ)
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
