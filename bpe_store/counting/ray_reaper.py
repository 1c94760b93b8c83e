"""The reaper of a local Ray cluster: its processes die with the bpe-store process that started them.

``ray.init(address="local")`` starts the cluster's processes (the GCS, the raylet, the dashboard
and runtime-env agents, log monitors, workers) as descendants of the calling process. Ray ties
some of them to it, not all: after a kill -9 of ``bpe-store train --ray``, ``ray::DashboardAgent``
and ``ray::RuntimeEnvAgent`` kept running, for good. So before starting a local cluster the
driver starts this small watcher (``python -m bpe_store.counting.ray_reaper DRIVER_PID
EXCLUDED...``), in a session of its own (a Ctrl-C or a kill of the driver's process group does
not reach it), with a pipe from the driver on its stdin:

* every ``POLL_S`` it records the driver's new descendants (any child of the driver that is not
  in ``EXCLUDED``, i.e. was not there before, and every descendant of one it recorded), each with
  its start time, so a pid reused later by another program is never touched;
* when the pipe closes (the driver exited, however: ``close()`` after ``ray.shutdown()``, an
  exception, kill -9) or the driver is gone, it sends SIGTERM to every recorded process still
  alive, SIGKILL after ``GRACE_S`` to what is left, and exits.

Linux only (it reads ``/proc``); elsewhere ``start`` returns None and Ray's own clean-up is all
there is. It never reads the store and imports nothing but the standard library.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time

from ..temporaries import proc_stat

#: Seconds between two looks at the driver's descendants.
POLL_S = 0.2
#: Seconds between SIGTERM and SIGKILL of what is left.
GRACE_S = 2.0

# (pid, start time in clock ticks since boot): a process, told apart from a later one with its pid
Proc = tuple[int, int]


def _stat(pid: int) -> tuple[int, int] | None:
    """``(parent pid, start time)`` of ``pid`` from /proc, or None when it is gone (or a zombie,
    dead and waiting for its parent to collect it)."""
    st = proc_stat(pid)
    return None if st is None or st[0] == b"Z" else (st[1], st[2])


def _children_map() -> dict[int, list[Proc]]:
    """parent pid -> its children, for every process of /proc."""
    out: dict[int, list[Proc]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                out.setdefault(st[0], []).append((int(name), st[1]))
    return out


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s children now."""
    return [c for c, _ in _children_map().get(pid, [])]


def _alive(proc: Proc) -> bool:
    st = _stat(proc[0])
    return st is not None and st[1] == proc[1]


def _watch(driver: int, excluded: set[int], seen: set[Proc]) -> None:
    """Add the driver's new descendants to ``seen``, and the children of any process recorded
    (also once it was orphaned: a raylet's workers and agents after the raylet died)."""
    kids = _children_map()
    live = {c for cs in kids.values() for c in cs}
    stack = [c for c in kids.get(driver, []) if c[0] not in excluded] + [p for p in seen if p in live]
    while stack:
        proc = stack.pop()
        seen.add(proc)
        stack.extend(c for c in kids.get(proc[0], []) if c not in seen)


def _reap(seen: set[Proc]) -> None:
    """SIGTERM to every recorded process alive, then SIGKILL to what is left after ``GRACE_S``."""
    for sig, wait in ((signal.SIGTERM, GRACE_S), (signal.SIGKILL, 0.0)):
        live = [p for p in seen if _alive(p)]
        for pid, _ in live:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while live and time.monotonic() < deadline:
            time.sleep(0.05)
            live = [p for p in live if _alive(p)]
        if not live:
            return


def main(argv: list[str]) -> int:
    driver = int(argv[0])
    excluded = {int(a) for a in argv[1:]} | {os.getpid()}
    seen: set[Proc] = set()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver's Ctrl-C is the driver's to handle
    stdin = sys.stdin.fileno()
    while True:
        _watch(driver, excluded, seen)
        ready, _, _ = select.select([stdin], [], [], POLL_S)
        if ready and not os.read(stdin, 4096):
            break  # the pipe closed: the driver has exited or let the cluster go
        if _stat(driver) is None:
            break
    _watch(driver, excluded, seen)
    _reap(seen)
    return 0


def start() -> subprocess.Popen | None:
    """Start the reaper of a local cluster this process is about to start (None where there is no
    /proc). Keep the returned process; ``stop`` it once the cluster is shut down."""
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self"):
        return None
    before = [str(c) for c in children(os.getpid())]
    return subprocess.Popen([sys.executable, "-m", __name__, str(os.getpid()), *before],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True)


def stop(reaper: subprocess.Popen | None, timeout: float = GRACE_S + 3.0) -> None:
    """Close the reaper's pipe (it reaps what the cluster left) and wait for it."""
    if reaper is None:
        return
    try:
        reaper.stdin.close()
        reaper.wait(timeout)
    except (OSError, subprocess.TimeoutExpired):
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
