"""Writing what bpe_store hands to users (encoded ids, exported tokenizers) so that it is
either complete or absent.

* ``new_files([a, b])``: each file is written through a temporary file created exclusively
  beside it (``temporaries.new_file``: ``O_CREAT|O_EXCL``, so a planted symlink is never followed),
  flushed to disk, then renamed over its final name; on any failure (an exception, Ctrl-C) the
  temporary files are removed and the final names are untouched.
* ``export_dir(out, force=..., keep=[store])``: a directory of files written in a temporary
  staging directory, then moved into place: a new ``out`` is one rename; an existing one (with
  ``force``) gets only the files the format writes, each replaced by a rename, and anything
  else in it is left alone. An ``out`` that is a file, the store, or a directory holding the
  store is refused. A symlink to a directory is followed: its target receives the files.

A full disk (ENOSPC, EDQUOT) is ``DiskFull``, exit 4 like the store's own disk problems.
A kill -9 can leave only a hidden ``.NAME.PID-START-RANDOM.part`` temporary, never a truncated
file under the final name; the next write of the same name removes it once its writer is gone
(``temporaries.remove_stale``), never a live writer's.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import BinaryIO

from ..errors import InputError, StoreError
from ..pauses import pause_for_tests
from ..temporaries import new_dir, new_file, remove_stale

#: errno values meaning "no room left" (the file system or the user's quota).
_FULL = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(StoreError):
    """No space left while writing an output (exit 4); nothing was put under its final name."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _FULL


def disk_full(out: Path, exc: OSError) -> DiskFull:
    return DiskFull(f"{out}: no space left on the device ({exc.strerror}); nothing was written "
                    "under that name")


def _mode(base: int) -> int:
    """``base`` less the process umask: the mode ``open()`` would have given (``new_file`` makes it 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    return base & ~mask


def _fsync_dir(d: Path) -> None:
    """Make a rename in ``d`` durable (best effort: some file systems refuse directory fsync)."""
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _cannot_create(where: Path, exc: OSError) -> Exception:
    if is_disk_full(exc):
        return disk_full(where, exc)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return InputError(f"{where}: cannot write there ({exc.strerror})")
    return exc


@contextmanager
def new_files(paths: Sequence[Path]) -> Iterator[list[BinaryIO]]:
    """Open one binary file per path for writing; on success all are renamed into place.

    Each is a fresh ``.NAME.PID-START-RANDOM.part`` made exclusively in the target's directory
    (and flocked while written), removed on any failure, so a final name never holds a
    half-written file and a symlink planted at a predictable name is never followed. Those a
    killed writer of the same name left are removed first.
    """
    temps: list[Path] = []
    try:
        with ExitStack() as stack:
            files: list[BinaryIO] = []
            for p in paths:
                remove_stale(p.parent, f".{p.name}.", ".part")
                try:
                    fd, tmp = new_file(p.parent, f".{p.name}.", ".part")
                except OSError as exc:
                    raise _cannot_create(p, exc) from None
                temps.append(Path(tmp))
                os.fchmod(fd, _mode(0o666))
                files.append(stack.enter_context(os.fdopen(fd, "wb")))
            yield files
            for f in files:
                f.flush()
                os.fsync(f.fileno())  # why: the data is on disk before the name says "finished"
        for tmp, p in zip(temps, paths):
            os.replace(tmp, p)
        for d in {p.parent for p in paths}:
            _fsync_dir(d)
    except BaseException as exc:
        for tmp in temps:
            tmp.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise disk_full(paths[0] if len(paths) == 1 else paths[0].parent, exc) from None
        raise


def _is_within(inner: Path, outer: Path) -> bool:
    return inner == outer or outer in inner.parents


def check_export_target(out: Path, force: bool, keep: Sequence[Path] = ()) -> None:
    """Refuse an output directory that must not be written to (exit 2): a file, a dangling
    symlink, an existing directory without ``force``, the store itself or a directory that
    holds it (``keep``), a missing parent."""
    if out.is_symlink() and not out.exists():
        raise InputError(f"{out}: is a symlink to nothing; give a directory")
    if out.exists() and not out.is_dir():
        raise InputError(f"{out}: is a file; -o names the directory to write the files into")
    target = out.resolve()
    for k in keep:
        kr = Path(k).resolve()
        if _is_within(kr, target):
            what = "is the store" if kr == target else f"holds the store {k}"
            raise InputError(f"{out}: {what}; export into a directory of its own")
    if out.exists() and not force:
        remove_stale(out.parent, f".{out.name}.", ".part")  # a killed export's, even when this one is refused
        raise InputError(f"{out}: already exists; pass --force to replace the files the export writes")
    if not out.exists() and not out.parent.is_dir():
        raise InputError(f"{out}: the directory {out.parent} does not exist")


@contextmanager
def export_dir(out: Path, *, force: bool = False, keep: Sequence[Path] = ()) -> Iterator[Path]:
    """A staging directory to write an export's files into; moved into ``out`` on success.

    ``out`` new: the staging directory (a hidden sibling) is renamed to ``out``, in one step.
    ``out`` existing (``force``): each staged file replaces its namesake in ``out`` (following a
    symlinked ``out`` to its directory); nothing else in ``out`` is touched. On failure the
    staging directory is removed and ``out`` is as it was.
    """
    check_export_target(out, force, keep)
    existing = out.exists()
    # why inside `out` when it exists: a sibling may sit on another file system than the
    # directory a symlinked `out` points to, and a rename cannot cross file systems
    where = out if existing else out.parent
    remove_stale(out.parent, f".{out.name}.", ".part")  # those killed exports left, in either place
    if existing:
        remove_stale(out, f".{out.name}.", ".part")
    try:
        lock_fd, staging = new_dir(where, f".{out.name}.", ".part")  # flocked while we write
    except OSError as exc:
        raise _cannot_create(out, exc) from None
    try:
        yield staging
        pause_for_tests("export:staged")  # tests: kill with the files staged, before the move
        names = sorted(p.name for p in staging.iterdir())
        for name in names:
            with open(staging / name, "rb+") as f:
                os.fsync(f.fileno())
        if existing:
            for name in names:
                dest = out / name
                if dest.is_dir() and not dest.is_symlink():
                    raise InputError(f"{dest}: is a directory; the export would replace it with a file")
            for name in names:
                os.replace(staging / name, out / name)
            staging.rmdir()
            _fsync_dir(out)
        else:
            os.chmod(staging, _mode(0o777))
            os.rename(staging, out)
            _fsync_dir(out.parent)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if is_disk_full(exc):
            raise disk_full(out, exc) from None
        raise
    finally:
        os.close(lock_fd)
