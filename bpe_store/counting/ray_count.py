"""Counting on a Ray cluster: the map step of counting as Ray tasks, the reduce into the same store.

``train(..., count_engine="ray")`` (``bpe-store train --ray [ADDRESS]``) counts the units the
local planner made (``store.chunks()``: byte ranges of the inputs) as Ray tasks instead of local
threads. Everything else is unchanged: ``train._count_reduce`` adds each result into one native
``WordCounter`` and flushes it into the store, one transaction that also marks the units
counted, so a killed driver resumes without recounting finished units.

One task = one unit: ``count.count_unit_packed`` receives the unit's small description (ids,
path, byte range, parameters; never its bytes), reads the unit itself on the worker's node (so
every node must see the inputs at the same path: a shared or replicated file system), counts it
with the native scanner and returns the counts packed into one bytes object (~8 bytes per
distinct word, a single buffer for the object store instead of a pickled dict per word).

* **Failures.** A unit whose worker process or node dies is run again by Ray (``MAX_RETRIES``);
  its counts reach the driver once, from the attempt that finished, so the result does not
  change. An error raised by the unit itself (the file changed or became unreadable) is not
  retried: it stops the run with its own one-line message, the store keeps its last flush.
* **Backpressure.** At most ``IN_FLIGHT_PER_CPU`` units per cluster CPU are submitted and not
  yet consumed (``ray.wait``), so the object store holds a bounded number of results whatever
  the corpus size; the driver fetches one result at a time, adds it into the ``WordCounter`` and
  drops it, so its memory is the flush's distinct words, as for local counting.
* **Reduce.** The driver adds every unit's packed counts itself (natively, GIL released): about
  0.1-0.2 s of one core per 100 MB of English text (bench/RESULTS-ray.md), so one driver keeps
  up with tens of workers. Beyond that, the design is a tree of combiner tasks (each adds k
  packed results into one, ``WordCounter.add_packed`` + ``pack``, and returns the ids of the units
  it holds, which the driver marks when it flushes the combined counts); see docs/ray.md for where
  the limit is and why it is not built yet.

Ray is an optional dependency (``pip install 'bpe-store[ray]'``); this module imports it only
when a Ray run starts.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator, Sequence

from ..errors import BpeStoreError, InputError
from .count import WordCounter, count_unit_packed

#: How to get Ray, in the one-line error when it is missing.
RAY_HINT = "counting on Ray needs the ray package: pip install 'bpe-store[ray]' (or: pip install ray)"
#: Times Ray reruns a unit whose worker process or node died (Ray's own default is also 3).
MAX_RETRIES = 3
#: Units submitted and not yet consumed, per cluster CPU: two keep every worker busy while the
#: driver adds a result; more would only hold more results in the object store.
IN_FLIGHT_PER_CPU = 2
#: Seconds between refreshes of the cluster's size (a request to Ray's control store).
_STATUS_EVERY_S = 2.0


def import_ray():
    """The ``ray`` module, or InputError (exit 2) saying how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError(RAY_HINT) from None
    if WordCounter is None:  # pragma: no cover - a source tree without the built extension
        raise InputError("counting on Ray needs the native core (bpe_store._core); reinstall bpe-store")
    return ray


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a ``host:port`` nobody listens on (Ray itself retries for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or "://" in address or not port.isdigit():
        return  # "auto", "ray://...": Ray resolves these itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(f"{host}:{port} does not answer ({exc.strerror or exc})") from None


def _cause(exc: BaseException) -> BaseException | None:
    """The user-facing error a failed unit raised on its worker (to re-raise as is), else None."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, (BpeStoreError, UnicodeDecodeError)) else None


class RayCounter:
    """``(unit id, packed counts, pre-tokens)`` of each task tuple, counted on Ray, in completion order.

    ``tasks``: the tuples ``count.count_chunk_task`` takes. ``address``: a running cluster
    (``host:port``, ``ray://host:port`` or ``auto``) to connect to; None starts a local cluster
    with ``workers`` CPUs, shut down again by ``close()``. If this process is already connected
    (``ray.init`` was called), that connection is used and left open.
    """

    def __init__(self, tasks: Sequence[tuple], address: str | None, workers: int):
        ray = import_ray()
        self._ray = ray
        self._started = False
        if not ray.is_initialized():
            kwargs = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
            try:
                if address:
                    _probe(address)
                    ray.init(address=address, **kwargs)
                else:
                    # "local": a new cluster even where `ray start` left one running
                    ray.init(address="local", num_cpus=workers, **kwargs)
                    self._started = True
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
                raise InputError(f"cannot connect to {where}: {str(exc).splitlines()[0]}") from None
        # Why count_unit_packed by reference: it pickles as "bpe_store.counting.count.count_unit_packed",
        # so workers run the installed package (the same version must be installed on every node).
        self._remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)(count_unit_packed)
        self._queue: Iterator[tuple] = iter(tasks)
        self._more = True
        self._running: dict = {}  # ObjectRef -> unit id
        self._status: dict[str, int] = {}
        self._status_at = 0.0
        self._refresh_status()
        self.max_in_flight = max(1, IN_FLIGHT_PER_CPU * self._status["workers"])

    def _refresh_status(self) -> None:
        ray = self._ray
        self._status = {"workers": int(ray.cluster_resources().get("CPU", 0)),
                        "nodes": sum(1 for n in ray.nodes() if n.get("Alive"))}
        self._status_at = time.monotonic()

    def status(self) -> dict[str, int]:
        """``{"in_flight": units submitted and not consumed, "workers": cluster CPUs, "nodes": alive nodes}``."""
        if time.monotonic() - self._status_at >= _STATUS_EVERY_S:
            self._refresh_status()
        return {"in_flight": len(self._running), **self._status}

    def __iter__(self) -> RayCounter:
        return self

    def __next__(self) -> tuple[int, bytes, int]:
        ray = self._ray
        while self._more and len(self._running) < self.max_in_flight:
            task = next(self._queue, None)
            if task is None:
                self._more = False
                break
            self._running[self._remote.remote(task)] = task[0]
        if not self._running:
            self.close()
            raise StopIteration
        ready, _ = ray.wait(list(self._running), num_returns=1)
        ref = ready[0]
        del self._running[ref]
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            cause = _cause(exc)
            if cause is not None:
                raise cause from None
            raise

    def close(self) -> None:
        """Cancel the units not yet consumed and shut down the cluster if this object started it."""
        ray = self._ray
        for ref in self._running:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or its node is gone: nothing to cancel
                pass
        self._running.clear()
        self._more = False
        if self._started:
            self._started = False
            ray.shutdown()

