"""Temporary files and folders that say who writes them, and the cleaning of those whose writer is gone.

Every temporary bpe_store writes (a store being created, ``encode``'s ``.out.npy.*.part``,
``export``'s ``.NAME.*.part`` staging folder, ``train_bpe``'s scratch folder) is named
``PREFIX + "PID-START-RANDOM" + SUFFIX``: the writer's process id, its start time (clock ticks
since boot, ``/proc/PID/stat`` field 22; 0 where there is no ``/proc``) and 8 random hex digits.
The writer also holds an exclusive ``flock`` on it while it writes (``new_file``, ``new_dir``).

A kill -9 leaves the temporary behind. The next run of the same command calls ``remove_stale``
for the same PREFIX and SUFFIX before it makes its own, and removes a temporary only when both:

* its writer is gone: no process has that pid, or the process that has it started at another
  time (the pid was reused; a start time of 0 is never taken as a match or a mismatch); and
* no one holds its ``flock`` (a live writer the pid cannot see, e.g. in another pid namespace
  on the same file system, still holds it).

So a live writer's temporary is never touched, whoever else runs the same command at the same
time. Names of the old form (no pid) are left alone: nothing says whether their writer lives.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
from pathlib import Path


def proc_stat(pid: int) -> tuple[bytes, int, int] | None:
    """``(state, parent pid, start time in clock ticks since boot)`` of process ``pid``
    (``/proc/PID/stat`` fields 3, 4 and 22; the start time tells it from a later process given
    the same pid); None when it cannot be read (no such process, no ``/proc``, hidden by the
    mount's ``hidepid``)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces or ')': split after the last
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return fields[0], int(fields[1]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _start_time(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot, or None (see ``proc_stat``)."""
    st = proc_stat(pid)
    return None if st is None else st[2]


#: This process's (pid, start time) and the middle of its temporaries' names; recomputed after a fork.
_OWNER: tuple[int, str] | None = None


def owner_tag() -> str:
    """``"PID-START"`` of this process (START 0 when unknown)."""
    global _OWNER
    pid = os.getpid()
    if _OWNER is None or _OWNER[0] != pid:
        _OWNER = (pid, f"{pid}-{_start_time(pid) or 0}")
    return _OWNER[1]


def temp_name(prefix: str, suffix: str = "") -> str:
    """A fresh temporary name: ``PREFIX + "PID-START-RANDOM" + SUFFIX``."""
    return f"{prefix}{owner_tag()}-{os.urandom(4).hex()}{suffix}"


def _lock(fd: int) -> None:
    """Hold an exclusive flock on ``fd`` (waits the moment a ``remove_stale`` probe holds it)."""
    fcntl.flock(fd, fcntl.LOCK_EX)


def new_file(directory: Path, prefix: str, suffix: str, mode: int = 0o600) -> tuple[int, Path]:
    """Create a new temporary file in ``directory`` (``O_EXCL``: a planted symlink is never
    followed) and hold its flock: ``(fd open for reading and writing, path)``. The flock lasts
    as long as the descriptor."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        path = directory / temp_name(prefix, suffix)
        try:
            fd = os.open(path, flags, mode)
            break
        except FileExistsError:  # 32 random bits taken: draw again
            continue
    try:
        _lock(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return fd, path


def new_dir(directory: Path, prefix: str, suffix: str = "") -> tuple[int, Path]:
    """Create a new temporary folder (mode 0700) in ``directory`` and hold its flock:
    ``(fd of the folder, path)``; close the fd once the folder is moved or removed."""
    while True:
        path = directory / temp_name(prefix, suffix)
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except BaseException:
        os.rmdir(path)
        raise
    try:
        _lock(fd)
    except BaseException:
        os.close(fd)
        shutil.rmtree(path, ignore_errors=True)
        raise
    return fd, path


def writer_alive(pid: int, start: int | None) -> bool:
    """Whether the process that wrote a temporary named with ``pid`` and ``start`` may still run."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: it exists
    now = _start_time(pid)
    # a known start time other than the name's: the pid was reused by a process started later
    return not (start and now is not None and now != start)


def _locked_by_someone(path: Path) -> bool:
    """Whether another open file description holds ``path``'s flock (probed without waiting)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False  # gone, or not ours to open: nothing can hold it through us
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)  # drops the probe's flock, if it took it


def remove_stale(directory: Path, prefix: str, suffix: str = "", tails: tuple[str, ...] = ("",)) -> list[Path]:
    """Remove the temporaries ``PREFIX + "PID[-START]-RANDOM" + SUFFIX + TAIL`` in ``directory``
    (files or folders) whose writer is gone and whose flock no one holds (see the module's
    docstring); returns what was removed. Anything it cannot read or remove is left as it is."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)(?:-(\d+))?-[0-9a-f]+" + re.escape(suffix)
                         + "(?:" + "|".join(map(re.escape, tails)) + ")")
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        m = pattern.fullmatch(name)
        if m is None:
            continue
        path = directory / name
        if writer_alive(int(m[1]), int(m[2]) if m[2] else None) or _locked_by_someone(path):
            continue
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
        except OSError:
            continue
        removed.append(path)
    return removed

