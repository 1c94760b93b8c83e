"""A source file checked before counting: a regular file, non-empty, its size and fingerprint
(``fingerprint.digest_file``, which also checks UTF-8 in the same read), unchanged while read.
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path

from ..errors import InputError
from ..native import (
    native_utf8_valid,
)
from .fingerprint import DEFAULT_HASH, digest_file
from .sources import Source

_READ_BLOCK = 16 << 20


_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(p: Path, mode: int) -> InputError:
    if stat.S_ISDIR(mode):
        return InputError(f"{p}: is a directory; give the files to train on")
    what = next((name for test, name in _FILE_KINDS if test(mode)), "a special file")
    return InputError(f"{p}: is {what}, not a regular file; inputs must be regular files")


def open_regular(path: str | os.PathLike):
    """``open(path, "rb")`` for a regular file only; InputError for anything else.

    Why not plain ``open``: opening a FIFO blocks until a writer comes (and swallows the first
    Ctrl-C), and a device such as /dev/zero has size 0 but never ends. The file is stat'ed before
    it is opened, opened with O_NONBLOCK (which cannot block on a FIFO swapped in meanwhile) and
    checked again on the descriptor, so what is read is what was checked.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{p}: no such file") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(p, st.st_mode)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(p, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def scan_source(path: str | os.PathLike, invalid_utf8: str = "strict", hash: str = DEFAULT_HASH) -> Source:
    """Check one input (exists, a readable non-empty regular file, valid UTF-8 unless
    ``invalid_utf8`` is "replace") and fingerprint it with ``hash`` in the same read
    (``fingerprint.digest_file``). Raises InputError saying where the problem is.

    A file written to while it is read (still being downloaded or appended to) would get a
    fingerprint of neither its old nor its new content: its size and modification time are
    compared after the read with those before, and a change is refused (``_unchanged_while_read``)."""
    p = Path(path)
    with open_regular(p) as f:
        st = os.fstat(f.fileno())
        if st.st_size == 0:
            raise InputError(f"{p}: is empty")
        digest = digest_file(p, f.fileno(), st.st_size, hash, check_utf8=invalid_utf8 == "strict")
    if digest is None:
        raise_invalid_utf8(p)
    return _unchanged_while_read(p, st, Source(str(p.resolve()), st.st_size, st.st_mtime_ns, digest, hash=hash))


def _unchanged_while_read(p: Path, before: os.stat_result, source: Source) -> Source:
    try:
        after = os.stat(p)
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
    if (after.st_size, after.st_mtime_ns, after.st_ino) != (before.st_size, before.st_mtime_ns, before.st_ino):
        raise InputError(f"{p}: changed while it was being read ({before.st_size} -> {after.st_size} bytes): "
                         "is it still being written? Train once it is complete")
    return source


def raise_invalid_utf8(p: Path) -> None:
    """Find where ``p`` stops being UTF-8 (the fingerprint's check said it does) and say so."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0
    lines = 1
    with open_regular(p) as f:
        while True:
            try:
                block = f.read(_READ_BLOCK)
            except OSError as exc:
                raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
            final = not block
            pending = len(decoder.getstate()[0])
            try:
                decoder.decode(block, final)
            except UnicodeDecodeError as exc:
                at = offset - pending + exc.start
                line = lines + (block[: max(exc.start - pending, 0)].count(b"\n"))
                raise InputError(
                    f"{p}: invalid UTF-8 at byte {at} (line {line}): {exc.reason}; "
                    "fix the file or pass --invalid-utf8 replace") from None
            lines += block.count(b"\n")
            offset += len(block)
            if final:
                raise InputError(f"{p}: changed while it was read (it is UTF-8 now)")


def valid_utf8(data: bytes, invalid_utf8: str) -> bytes:
    """``data`` as the native counter needs it: valid UTF-8, as the regex path decodes it."""
    # Checking natively keeps the GIL free (a Python decode of 8 MB holds it ~10 ms). On bad
    # input the strict decode raises the same UnicodeDecodeError as the regex path, and
    # "replace" goes through str and back so both paths see the same U+FFFD substitutions.
    if native_utf8_valid(data):
        return data
    return data.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict").encode("utf-8")
