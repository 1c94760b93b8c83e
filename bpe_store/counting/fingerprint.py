"""A source file checked and fingerprinted: a regular file, its size and SHA-256 (and, for text,
its UTF-8 validity), read once.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import stat
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..errors import InputError
from .native import (
    _native_utf8_valid,
)
from .sources import Source

_READ_BLOCK = 16 << 20
_FINGERPRINT_BLOCK = 2 << 20


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


def scan_source(path: str | os.PathLike, invalid_utf8: str = "strict") -> Source:
    """Check one input (exists, a readable non-empty regular file, valid UTF-8 unless
    ``invalid_utf8`` is "replace") and fingerprint it. Raises InputError saying where the problem is.

    A file written to while it is read (still being downloaded or appended to) would get a SHA-256
    of neither its old nor its new content: its size and modification time are compared after
    the read with those before, and a change is refused (``_unchanged_while_read``)."""
    p = Path(path)
    f = open_regular(p)
    st = os.fstat(f.fileno())
    return _unchanged_while_read(p, st, _scan_open(p, f, st, invalid_utf8))


def _unchanged_while_read(p: Path, before: os.stat_result, source: Source) -> Source:
    try:
        after = os.stat(p)
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
    if (after.st_size, after.st_mtime_ns, after.st_ino) != (before.st_size, before.st_mtime_ns, before.st_ino):
        raise InputError(f"{p}: changed while it was being read ({before.st_size} -> {after.st_size} bytes): "
                         "is it still being written? Train once it is complete")
    return source


def _scan_open(p: Path, f, st: os.stat_result, invalid_utf8: str) -> Source:
    """``scan_source``'s read of the open file ``f`` (``st``: its stat when opened)."""
    if st.st_size == 0:
        f.close()
        raise InputError(f"{p}: is empty")
    if invalid_utf8 == "strict" and _native_utf8_valid is not None:
        with f:
            digest = _fingerprint_native(p, f)
            if digest is not None:
                return Source(str(p.resolve()), st.st_size, st.st_mtime_ns, digest)
            f = open_regular(p)  # invalid UTF-8: the slow path below finds and reports where
    sha = hashlib.sha256()
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0
    lines = 1
    with f:
        while True:
            try:
                block = f.read(_READ_BLOCK)
            except OSError as exc:
                raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
            final = not block
            sha.update(block)
            if invalid_utf8 == "strict":
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
                break
    return Source(str(p.resolve()), st.st_size, st.st_mtime_ns, sha.hexdigest())


def _utf8_tail(block: bytes) -> int:
    """How many bytes at the end of ``block`` begin a UTF-8 sequence that the block cuts short
    (0 to 3); an invalid tail counts 0, so the validator sees and rejects it."""
    for k in range(1, min(3, len(block)) + 1):
        b = block[-k]
        if b < 0x80:
            return 0
        if b >= 0xC0:
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return k if k < need else 0
    return 0


def _fingerprint_native(p: Path, f, block_size: int = 0) -> str | None:
    """SHA-256 of ``f`` while checking it is UTF-8 natively; None if it is not (the caller then
    finds where). Why: the incremental decoder built a str of the whole input only to drop it
    (enwiki-100M: scan_source 0.52 s); the native check takes 0.02 s, and hashing a block runs
    in a second thread (hashlib releases the GIL) while the next block is read and checked.

    Why two buffers read into, not a bytes object per block: each new 16 MB block was fresh
    memory (malloc maps blocks over 1 MiB on their own, see merge.release_free_memory), so
    reading enwiki-100M page-faulted and zeroed 100 MB (~27 K faults, ~0.1 s of kernel time);
    two reused buffers of ``_FINGERPRINT_BLOCK`` fault once and stay in cache between the read,
    the check and the hash. A buffer is read into again only once its hash is done."""
    block_size = block_size or min(_READ_BLOCK, _FINGERPRINT_BLOCK)
    sha = hashlib.sha256()
    carry = b""  # the start of a character cut by the previous block's end (a copy)
    bufs = [bytearray(block_size), bytearray(block_size)]
    with ThreadPoolExecutor(1) as pool:
        pending: Future | None = None
        turn = 0
        while True:
            view = memoryview(bufs[turn])
            turn ^= 1
            try:
                got = f.readinto(view)  # this buffer's hash finished before the last block was read
            except OSError as exc:
                raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
            if pending is not None:
                pending.result()
                pending = None
            if not got:
                break
            block = view[:got]
            pending = pool.submit(sha.update, block)
            start = 0
            if carry:  # complete the cut character and check it alone
                b0 = carry[0]
                start = (2 if b0 < 0xE0 else 3 if b0 < 0xF0 else 4) - len(carry)
                if got < start:  # a tiny block inside that character
                    carry += bytes(block)
                    continue
                if not _native_utf8_valid(carry + bytes(block[:start])):
                    return None
            # characters are checked whole: cutting before a character's first byte keeps the
            # verdict of checking the file in one piece
            end = got - _utf8_tail(block)
            carry = bytes(block[end:])
            if start < end and not _native_utf8_valid(block[start:end]):
                return None
        if pending is not None:
            pending.result()
    if carry:  # a character cut off by the end of the file
        return None
    return sha.hexdigest()


def _valid_utf8(data: bytes, invalid_utf8: str) -> bytes:
    """``data`` as the native counter needs it: valid UTF-8, as the regex path decodes it."""
    # Checking natively keeps the GIL free (a Python decode of 8 MB holds it ~10 ms). On bad
    # input the strict decode raises the same UnicodeDecodeError as the regex path, and
    # "replace" goes through str and back so both paths see the same U+FFFD substitutions.
    if _native_utf8_valid(data):
        return data
    return data.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict").encode("utf-8")
