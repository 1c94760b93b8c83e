"""Fingerprints of input files: taken in the read that counts a text file, unit by unit, or in
one read before counting that checks a file is UTF-8 and digests it, on every core.

A store records each input's fingerprint (``sources.digest``) and the hash that made it
(``sources.hash``); a resume whose input's modification time changed digests the file again
with that hash and refuses it if the digest differs.

Hashes:

* ``xxh3_128_units`` (new stores, uncompressed text): taken in the read that counts the file, not
  before it. Each work unit ``[start, end)`` (a ``chunks`` row) gets ``u`` = XXH3-128 of its bytes,
  computed natively as the unit is read to be counted (``count_file_range``), and
  ``h`` = XXH3-128 of ``u`` + ``start`` + ``end`` (8 bytes each, little-endian) as a 128-bit
  big-endian number. ``sources.digest`` is the sum of ``h`` over the file's counted units (mod
  2**128, 32 hex digits), added to in the flush that marks the units counted (one transaction);
  once every unit is counted it is the whole file's fingerprint. Why a sum: units are counted in
  any order, by any thread or Ray node, and each flush adds its own. Why no separate pass: reading
  1 GB from the page cache to fingerprint it before counting cost ~3 % of counting it
  (bench/RESULTS-plan.md). The UTF-8 check is then counting's own (``count_file_range``).
* ``xxh3_128_8MiB`` (stores made before it, and other inputs: jsonl, compressed files, parquet):
  the file is cut into blocks of ``BLOCK`` (8 MiB), read and checked when planned; each block's
  XXH3-128 digest (16 bytes), in file order, then the file's size (8 bytes, little-endian) are
  digested again with XXH3-128; the hex of that is the fingerprint. Blocks are read and digested
  on several threads (``os.preadv`` and XXH3 release the GIL), so a file is fingerprinted at
  about the speed it is read.
* ``sha256`` (stores made before it, and streams): SHA-256 of the whole file, in one thread.

Why XXH3 (measured on the 2-core AMD EPYC these were written on, 1 GB of OWT-like text from the
page cache, CPU s per GB): reading 0.12, checking UTF-8 0.15, XXH3-128 0.01, BLAKE3 0.10,
SHA-256 0.54 (with the CPU's SHA extensions; 2.5-4.5 without). A fingerprint only has to notice
an edited input, not resist an adversary: a 128-bit non-cryptographic hash does that.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import xxhash

from ..errors import InputError
from ..native import native_utf8_valid
from .sources import Source

#: The hash of new stores' uncompressed text inputs: taken unit by unit as they are counted.
UNITS_HASH = "xxh3_128_units"
#: The hash of new stores' other inputs (jsonl, compressed, parquet): the whole file, when planned.
DEFAULT_HASH = "xxh3_128_8MiB"
#: Every hash a store may name, newest first.
HASHES = (UNITS_HASH, DEFAULT_HASH, "sha256")
#: ``sources.digest`` of a ``UNITS_HASH`` input none of whose units is counted yet.
UNITS_NONE = "0" * 32
#: Bytes per block of ``xxh3_128_8MiB``: part of the hash's definition (a store's digests stay
#: comparable only with the same block size). Also the read size of every hash.
BLOCK = 8 << 20
#: Threads that read and digest a big file's blocks.
THREADS = max(1, min(4, os.cpu_count() or 1))

_local = threading.local()


def _buffer(n: int) -> memoryview:
    """A buffer of ``n`` bytes reused by this thread. Why: a fresh bytes object per block is
    fresh memory the kernel faults in and zeroes (~0.1 s per 100 MB); reusing one stays in cache."""
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) < n:
        buf = _local.buf = bytearray(max(n, 1 << 16))
    return memoryview(buf)[:n]


def utf8_tail(block: bytes | memoryview) -> int:
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


def _utf8_head(block: memoryview) -> int:
    """How many continuation bytes (at most 3) start ``block``: the end of a character that the
    previous block began."""
    k = 0
    while k < min(3, len(block)) and 0x80 <= block[k] < 0xC0:
        k += 1
    return k


def _python_utf8_valid(data: memoryview) -> bool:
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _validator() -> Callable[[memoryview | bytes], bool]:
    return _python_utf8_valid if native_utf8_valid is None else native_utf8_valid


def _read_block(fd: int, start: int, n: int, path: Path) -> memoryview:
    """``n`` bytes of ``fd`` from ``start`` into this thread's buffer."""
    view = _buffer(n)
    got = 0
    while got < n:
        try:
            k = os.preadv(fd, [view[got:]], start + got)
        except OSError as exc:
            raise InputError(f"{path}: cannot read ({exc.strerror})") from exc
        if k == 0:
            raise InputError(f"{path}: changed while it was read (shorter than its size)")
        got += k
    return view


class _Block:
    """What one block gives: its digest (XXH3 only), whether the characters wholly inside it are
    UTF-8, and the bytes of the characters cut by its start (``head``) and its end (``tail``),
    which are checked joined to the neighbouring block's."""

    __slots__ = ("digest", "ok", "head", "tail", "whole")

    def __init__(self, view: memoryview, check: bool, valid: Callable, digest: bytes = b""):
        self.digest = digest
        self.ok = True
        self.head = self.tail = b""
        self.whole = False  # all of it is head: the character it continues goes on past it
        if check:
            a = _utf8_head(view)
            b = len(view) - utf8_tail(view)  # >= a: a tail starts at a lead byte, a head has none
            self.ok = a >= b or bool(valid(view[a:b]))
            self.head, self.tail = bytes(view[:a]), bytes(view[b:])
            self.whole = a == len(view)


def _joins_valid(blocks: list[_Block], valid: Callable) -> bool:
    """Whether every character cut by block boundaries (or by the file's start or end) is UTF-8:
    a tail joined to the heads after it, across blocks that are all head (tiny blocks)."""
    carry = b""
    for blk in blocks:
        carry += blk.head
        if blk.whole:
            continue
        if carry and not valid(carry):
            return False
        carry = blk.tail
    return not carry or bool(valid(carry))


def digest_file(path: str | os.PathLike, fd: int, size: int, hash: str = DEFAULT_HASH,
                check_utf8: bool = False, block: int = BLOCK, threads: int = THREADS) -> str | None:
    """The fingerprint of the ``size`` bytes of the open file ``fd`` with ``hash`` (hex); None if
    ``check_utf8`` and they are not UTF-8 (the caller then finds where). ``block`` and
    ``threads`` other than the defaults are for tests (a ``block`` other than ``BLOCK`` is another
    hash for ``xxh3_128_8MiB``)."""
    p = Path(path)
    valid = _validator()
    if hash == "sha256":
        return _sha256(p, fd, size, check_utf8, valid, block)
    if hash != DEFAULT_HASH:
        raise ValueError(f"unknown input hash {hash!r}")

    def one(i: int) -> _Block:
        start = i * block
        view = _read_block(fd, start, min(block, size - start), p)
        return _Block(view, check_utf8, valid, xxhash.xxh3_128_digest(view))

    count = (size + block - 1) // block
    if count <= 1 or threads <= 1:
        # Why no pool for a small file: planning 10,000 shards paid a pool (and its buffers) each
        blocks = [one(i) for i in range(count)]
    else:
        with ThreadPoolExecutor(min(threads, count), thread_name_prefix="bpe-fingerprint") as pool:
            blocks = list(pool.map(one, range(count)))
    if check_utf8 and not (all(b.ok for b in blocks) and _joins_valid(blocks, valid)):
        return None
    return xxhash.xxh3_128_hexdigest(b"".join(b.digest for b in blocks) + size.to_bytes(8, "little"))


def _sha256(p: Path, fd: int, size: int, check_utf8: bool, valid: Callable, block: int) -> str | None:
    """SHA-256 of the file, block by block in order (hashlib releases the GIL, so the blocks of
    another file's fingerprint may go on meanwhile)."""
    sha = hashlib.sha256()
    blocks = []
    for start in range(0, size, block):
        view = _read_block(fd, start, min(block, size - start), p)
        sha.update(view)
        blk = _Block(view, check_utf8, valid)
        if not blk.ok:
            return None
        blocks.append(blk)
    if check_utf8 and not _joins_valid(blocks, valid):
        return None
    return sha.hexdigest()


def changed_since_planned(source: Source) -> str | None:
    """How the input file ``source`` differs now from when the store recorded it (its size or
    modification time), or None. Counting calls it before a flush commits units read from it:
    any write to the file while (or after) they were read moves its modification time, so counts
    of an input that changed under a running count are never committed."""
    try:
        st = os.stat(source.path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if st.st_size != source.size:
        return f"its size changed ({source.size} -> {st.st_size} bytes)"
    if st.st_mtime_ns != source.mtime_ns:
        return "it was modified"
    return None


def unit_term(digest: bytes, start: int, end: int) -> int:
    """A counted unit's share of a ``UNITS_HASH`` fingerprint: XXH3-128 of its bytes' XXH3-128
    ``digest`` (16 bytes) and its place (``start``, ``end``), as a number."""
    return xxhash.xxh3_128_intdigest(digest + start.to_bytes(8, "little") + end.to_bytes(8, "little"))


def add_units(fingerprint: str, terms: int) -> str:
    """``fingerprint`` (``sources.digest`` of a ``UNITS_HASH`` input) with ``terms`` (a sum of
    ``unit_term``) added."""
    return f"{(int(fingerprint, 16) + terms) % (1 << 128):032x}"


def digest_units(path: str | os.PathLike, units: list[tuple[int, int]]) -> str:
    """The ``UNITS_HASH`` fingerprint of the units ``[(start, end)]`` of the file ``path`` as it is
    now (a resume checks the counted units of an input whose modification time moved)."""
    p = Path(path)
    total = 0
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(f"{p}: cannot read ({exc.strerror})") from exc
    try:
        for start, end in units:
            h = xxhash.xxh3_128()
            for at in range(start, end, BLOCK):
                n = min(BLOCK, end - at)
                view = _read_block(fd, at, n, p)
                h.update(view)
            total += unit_term(h.digest(), start, end)
    finally:
        os.close(fd)
    return add_units(UNITS_NONE, total)
