"""The store's file on disk, outside SQLite: the training lock (one byte, OFD), atomic creation
(a build under a temporary name, then linked into place), removing a store's files, and the WAL's
state as a reader sees it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from pathlib import Path
from typing import Any

from ..errors import StoreError

#: The training lock: an open-file-description (OFD) write lock on this one byte of the store
#: file. Why a byte lock and not flock: ``status`` can *ask* who holds it (F_OFD_GETLK) without
#: taking any lock, so a probe can never make a trainer starting at that instant fail. The byte
#: is far beyond any offset SQLite locks (its lock bytes sit at 1 GiB) or any file size.
LOCK_OFFSET = 1 << 62


def _flock_struct(kind: int) -> bytes:
    # struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
    return struct.pack("hhqqi4x", kind, os.SEEK_SET, LOCK_OFFSET, 1, 0)


def set_lock(fd: int) -> None:
    """Take the training lock on ``fd`` (open for writing); OSError EAGAIN if someone holds it."""
    if hasattr(fcntl, "F_OFD_SETLK"):
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _flock_struct(fcntl.F_WRLCK))
    else:  # pragma: no cover - not Linux: flock (a status probe may then collide with a start)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def lock_held(fd: int) -> bool:
    if hasattr(fcntl, "F_OFD_GETLK"):
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _flock_struct(fcntl.F_WRLCK))
        return struct.unpack("hhqqi4x", got)[0] != fcntl.F_UNLCK
    try:  # pragma: no cover - not Linux
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True


def remove_files(db: Path) -> None:
    """``db`` and the files SQLite keeps beside it."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        try:
            os.unlink(f"{db}{suffix}")
        except FileNotFoundError:
            pass


def publish_file(tmp: Path, p: Path, durable: bool = True) -> None:
    """Put the finished ``tmp`` in place as ``p`` (never over a non-empty file) and sync the
    directory, so the new name survives power loss."""
    try:
        os.link(tmp, p)  # atomic, and fails if p exists: two creators cannot overwrite each other
        os.unlink(tmp)  # at once: a second name of the live store must not outlive this call
    except FileExistsError:
        if p.stat().st_size > 0:
            raise StoreError(f"{p}: already exists (created by another process just now)") from None
        os.replace(tmp, p)  # an empty file holds nothing
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK):
            raise
        os.replace(tmp, p)  # a filesystem without hard links
    if not durable:
        return
    fd = os.open(p.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def wal_state(path: Path) -> dict[str, Any]:
    """The store's WAL as a reader sees it, without opening SQLite: ``wal_bytes`` (the -wal
    file's size), ``wal_frames_pending`` (committed frames not yet copied into the store, from
    the -shm header: mxFrame - nBackfill) and ``wal_blocked`` (some are pending: after each
    write the trainer copies and truncates the WAL, unless a reader holds an old snapshot)."""
    wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
    size = wal.stat().st_size if wal.exists() else 0
    pending = 0
    if size and shm.exists():
        try:
            with open(shm, "rb") as f:
                head = f.read(136)
            if len(head) >= 100:
                # WalIndexHdr (48 bytes, twice): mxFrame at offset 16; WalCkptInfo.nBackfill at 96
                mx_frame, = struct.unpack_from("=I", head, 16)
                backfill, = struct.unpack_from("=I", head, 96)
                pending = max(mx_frame - backfill, 0)
        except OSError:
            pass
    return {"wal_bytes": size, "wal_frames_pending": pending, "wal_blocked": pending > 0}
