"""Counting on a Ray cluster: a counting tree whose driver receives each distinct word once per flush.

``train(..., count_engine="ray")`` (``bpe-store train --ray [ADDRESS]``) counts the units the
local planner made (``store.chunks()``: byte ranges of the inputs) on a Ray cluster. The tree::

    units ──▶ NodeCounter (one actor per node, its CPUs as threads: counts units and sums them)
                 │ take(P): the node's sum, in P parts by hash of the word (P = number of nodes)
                 ▼
              sum_packed task j (one per part: part j of every node, summed)     [several nodes]
                 │ P packed buffers with disjoint words
                 ▼
              driver: the parts, as they are ──▶ Store.add_word_counts (one transaction)

* **The driver's work** is per distinct word of a flush window, not per unit: on one node, the
  node counter's sum arrives as one buffer; on several, each word arrives in exactly one part.
  It sends units (a small description each: ids, path, byte range, parameters; never bytes) and
  receives ``(unit id, pre-tokens)`` acknowledgements. Why: when every unit's counts went to the
  driver, adding them and flushing them cost it 9.5-20 CPU s per GB (bench/RESULTS-ray.md), the
  cap of the whole cluster.
* **What is durable, and when.** A unit is marked counted only by the flush that adds its
  counts (one transaction, as for local counting). ``take`` hands over a node's counts together
  with the marks of exactly the units they hold (one lock in ``ray_node.NodeCounter``). A node
  counter that dies (its process, or its node) loses the units it counted since its last
  ``take``, and those still in flight to it: the driver counts them again on the nodes left (a
  new counter is started on the node if it is still alive); a failure while the parts are
  summed puts back every unit of that take. So the result is the same for any number of nodes,
  workers and units, whichever node is lost, and a killed driver resumes from its last flush.
  A unit whose own reading fails (the file changed or became unreadable) stops the run with its
  own one-line message, the store keeps its last flush.
* **Backpressure.** At most ``IN_FLIGHT_PER_CPU`` units per CPU are sent to a node and not yet
  acknowledged; a node's memory is the distinct words of its window, the driver's those of a
  flush (as for local counting).
* **Locality.** Every node must see the inputs at the same path (a shared or replicated file
  system): a node counter reads its units itself.

Ray is an optional dependency (``pip install 'bpe-store[ray]'``); this module imports it only
when a Ray run starts. A local cluster this process starts is tied to its lifetime by
``ray_reaper`` (kill -9 included).
"""

from __future__ import annotations

import collections
import logging
import socket
import time
from collections.abc import Sequence

from ..errors import BpeStoreError, InputError
from ..native import WordCounter
from . import ray_reaper
from .count import CountTask, PackedCounts
from .ray_node import NodeCounter, sum_packed

#: How to get Ray, in the one-line error when it is missing.
RAY_HINT = "counting on Ray needs the ray package: pip install 'bpe-store[ray]' (or: pip install ray)"
#: Times a unit may be lost with its node counter while it was being counted before the run stops
#: (a unit that kills the process counting it must not be sent round the cluster for ever).
MAX_LOSSES = 4
#: Units sent to a node and not yet acknowledged, per CPU of the node: two keep every core busy
#: while the driver sends the next; more would only hold more work at a node that may be lost.
IN_FLIGHT_PER_CPU = 2
#: Seconds between refreshes of the cluster's nodes (a request to Ray's control store).
_STATUS_EVERY_S = 2.0
#: The loggers whose warnings ``quiet`` silences (Ray's notice that a local cluster turned on
#: token authentication: noise for a single-machine run that asked for no output).
_QUIET_LOGGERS = ("ray._private.authentication.authentication_token_setup",)


def quiet() -> None:
    """No warnings from Ray's start-up notices (``bpe-store train --ray -q``)."""
    for name in _QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


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


class _Node:
    """The driver's view of one node counter: the units it holds (sent and not yet taken back)."""

    def __init__(self, node_id: str, cpus: int, actor) -> None:
        self.node_id, self.cpus, self.actor = node_id, cpus, actor
        self.in_flight: dict = {}  # ObjectRef of a count call -> unit id
        self.owned: set[int] = set()  # units sent here and not in a take yet (in flight or counted)
        self.acked: set[int] = set()  # of those, the ones it acknowledged (counted into its buffer)


class RayCounter:
    """The counting tree on Ray: iterate it for ``(unit id, None, pre-tokens)`` as units are
    counted on their nodes (``(unit id, None, -1)``: a unit acknowledged before was lost with its
    node and will be counted again), and flush ``buffer`` (``take``: the counts and marks of
    every unit counted so far, summed in the cluster).

    ``tasks``: the tasks ``count.count_unit_packed`` takes (``count.CountTask``). ``address``: a running cluster
    (``host:port``, ``ray://host:port`` or ``auto``) to connect to; None starts a local cluster
    with ``workers`` CPUs, shut down again by ``close()`` (and by ``ray_reaper`` if this process
    dies). If this process is already connected (``ray.init`` was called), that connection is
    used and left open.
    """

    def __init__(self, tasks: Sequence[CountTask], address: str | None, workers: int):
        ray = import_ray()
        self._ray = ray
        self._started = False
        self._reaper = None
        if not ray.is_initialized():
            kwargs = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
            try:
                if address:
                    _probe(address)
                    ray.init(address=address, **kwargs)
                else:
                    # "local": a new cluster even where `ray start` left one running; its
                    # processes die with this one (ray_reaper), kill -9 included
                    self._reaper = ray_reaper.start()
                    self._started = True
                    ray.init(address="local", num_cpus=workers, **kwargs)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                self.close()
                where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
                raise InputError(f"cannot connect to {where}: {str(exc).splitlines()[0]}") from None
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._affinity = NodeAffinitySchedulingStrategy
        # Why by reference: NodeCounter and sum_packed pickle as "bpe_store.counting.ray_node.*",
        # so nodes run the installed package (the same version must be installed on every node).
        # the "take" group: a take runs at once, never queued behind the node's counting calls
        self._actor_class = ray.remote(concurrency_groups={"take": 1})(NodeCounter)
        self._sum = ray.remote(num_cpus=0)(sum_packed)  # short, and the node counters hold the CPUs
        self._tasks: dict[int, CountTask] = {t.id: t for t in tasks}
        self._queue: collections.deque[int] = collections.deque(self._tasks)
        self._losses: collections.Counter[int] = collections.Counter()
        self._lost: list[int] = []  # units reported counted, then lost: to report as lost
        self._reported: set[int] = set()  # units whose acknowledgement was reported (and not lost)
        self._recounted = 0  # units put back after a loss, so far
        self._nodes: dict[str, _Node] = {}
        self._refs: dict = {}  # ObjectRef of a count call -> its _Node
        self._ready: collections.deque = collections.deque()  # acknowledged refs not yet handled
        self._pending = PackedCounts()  # counts taken from the nodes, not yet handed to a flush
        self._pending_marks: list[tuple[int, int, bytes | None]] = []
        self._status: dict[str, int] = {}
        self._status_at = 0.0
        self._closed = False
        self.buffer = _TreeBuffer(self)
        try:
            self._refresh_nodes()
        except BaseException:
            self.close()
            raise

    # -- the cluster's nodes ---------------------------------------------------------------------

    def _refresh_nodes(self) -> None:
        """Start a node counter on every alive node with CPUs that has none; forget dead nodes'."""
        ray = self._ray
        alive = {n["NodeID"]: int(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")}
        for node_id in [k for k in self._nodes if k not in alive]:
            self._lose(self._nodes[node_id])
        for node_id, cpus in alive.items():
            if cpus > 0 and node_id not in self._nodes:
                actor = self._actor_class.options(
                    num_cpus=cpus, max_concurrency=cpus, max_restarts=0,
                    max_task_retries=0, scheduling_strategy=self._affinity(node_id, soft=False)).remote()
                self._nodes[node_id] = _Node(node_id, cpus, actor)
        self._status = {"workers": sum(n.cpus for n in self._nodes.values()), "nodes": len(alive)}
        self._status_at = time.monotonic()

    def _lose(self, node: _Node) -> None:
        """A node counter died (or its node): every unit it holds is counted again elsewhere."""
        if self._nodes.get(node.node_id) is not node:
            return
        del self._nodes[node.node_id]
        for ref in node.in_flight:
            self._refs.pop(ref, None)
        try:
            self._ray.kill(node.actor)  # a counter that only seemed dead must not hand anything over later
        except Exception:  # noqa: BLE001 - already gone
            pass
        self._requeue(sorted(node.owned), blamed=node.owned - node.acked)

    def _requeue(self, ids: Sequence[int], blamed: set[int] = frozenset()) -> None:
        """Units whose counts were lost: counted again first; their progress reported back.
        ``blamed``: those not yet counted when their counter died (one of them may have killed
        it); a unit blamed more than ``MAX_LOSSES`` times stops the run."""
        for cid in ids:
            if cid in blamed:
                self._losses[cid] += 1
                if self._losses[cid] > MAX_LOSSES:
                    raise InputError(f"counting on Ray: unit {cid} was being counted by {self._losses[cid]} "
                                     "node counters that died; it may be what kills them")
            self._queue.appendleft(cid)
            self._recounted += 1
            if cid in self._reported:
                self._reported.discard(cid)
                self._lost.append(cid)

    def status(self) -> dict[str, int]:
        """``{"in_flight": units sent and not acknowledged, "workers": the node counters' CPUs,
        "nodes": alive nodes, "recounted": units lost with a node counter and sent again}``."""
        if time.monotonic() - self._status_at >= _STATUS_EVERY_S:
            self._refresh_nodes()
        return {"in_flight": len(self._refs), **self._status, "recounted": self._recounted}

    def _is_loss(self, exc: BaseException) -> bool:
        """Whether ``exc`` says a node counter (or what it made) is gone, not that a unit failed."""
        ray = self._ray
        return isinstance(exc, ray.exceptions.RayError) and not isinstance(exc, ray.exceptions.RayTaskError)

    # -- counting --------------------------------------------------------------------------------

    def _submit(self) -> None:
        for node in list(self._nodes.values()):
            while self._queue and len(node.in_flight) < IN_FLIGHT_PER_CPU * node.cpus:
                cid = self._queue.popleft()
                ref = node.actor.count.remote(self._tasks[cid])
                node.in_flight[ref] = cid
                node.owned.add(cid)
                self._refs[ref] = node

    def __iter__(self) -> RayCounter:
        return self

    def __next__(self) -> tuple[int, None, int]:
        ray = self._ray
        while True:
            if self._lost:
                return self._lost.pop(), None, -1
            if self._closed:
                raise StopIteration
            if time.monotonic() - self._status_at >= _STATUS_EVERY_S:
                self._refresh_nodes()
            self._submit()
            if not self._refs:
                if self._queue:  # no node to count on (all lost): wait for the cluster to have one
                    time.sleep(0.5)
                    self._refresh_nodes()
                    continue
                # every unit counted: take it all in before the end, since a node lost now
                # still loses what it holds (then its units are counted again first)
                self._take()
                if self._queue or self._lost:
                    continue
                raise StopIteration
            if not self._ready:
                refs = list(self._refs)
                first, rest = ray.wait(refs, num_returns=1, timeout=_STATUS_EVERY_S)
                if not first:
                    continue
                # every other acknowledgement already in, at once: one wait per batch, not per
                # unit (a wait scans all the refs in flight: 2 per CPU of the cluster)
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0) if rest else ([], [])
                self._ready.extend(first + more)
            ref = self._ready.popleft()
            if ref not in self._refs:  # its node was lost meanwhile: the unit is queued again
                continue
            node = self._refs.pop(ref)
            cid = node.in_flight.pop(ref)
            try:
                _, n = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - sorted below: a unit's own error, or a loss
                if self._is_loss(exc):
                    self._lose(node)
                    continue
                cause = _cause(exc)
                if cause is not None:
                    raise cause from None
                raise
            if cid in node.owned:  # else already taken back (an acknowledgement may come late)
                node.acked.add(cid)
            if cid in self._reported:  # a late acknowledgement of an attempt lost before
                continue
            self._reported.add(cid)
            return cid, None, n

    def _take(self) -> None:
        """Take every node's counts into the driver's pending counts, with the marks of exactly
        the units they hold; units of a node lost meanwhile are put back."""
        ray = self._ray
        nodes = list(self._nodes.values())
        if not nodes:
            return
        parts = len(nodes)
        taken = []  # (node, refs [marks, part 0, ...]) of every node asked
        for node in nodes:
            call = node.actor.take.options(num_returns=parts + 1, concurrency_group="take")
            taken.append((node, call.remote(parts)))
        got = []  # (node, marks, part refs)
        for node, refs in taken:
            try:
                got.append((node, ray.get(refs[0]), refs[1:]))
            except Exception as exc:  # noqa: BLE001
                if not self._is_loss(exc):
                    raise
                self._lose(node)
        if not got:
            return
        try:
            if parts == 1:
                packed = [ray.get(got[0][2][0])]
            else:
                # part j of every node summed by one task: disjoint words come back
                sums = [self._sum.remote(*[p[j] for _, _, p in got]) for j in range(parts)]
                packed = ray.get(sums)
        except Exception as exc:  # noqa: BLE001
            if not self._is_loss(exc):
                raise
            # a part was lost with its node: the units of this take are counted again
            for node, marks, _ in got:
                ids = [m[0] for m in marks]
                node.owned.difference_update(ids)
                node.acked.difference_update(ids)
                self._requeue(ids)
            return
        # Why kept packed: the store adds them straight into its word map (WordIds.add_packed);
        # the parts of one take hold disjoint words, so each distinct word is hashed once
        self._pending.parts.extend(packed)
        for node, marks, _ in got:
            ids = {m[0] for m in marks}
            node.owned -= ids
            node.acked -= ids
            self._pending_marks.extend(marks)

    def take(self) -> tuple[PackedCounts, list[tuple[int, int, bytes | None]]]:
        """Everything counted so far and not yet handed over: ``(counts, [(unit id, pre-tokens,
        fingerprint or None)])``."""
        self._take()
        out = self._pending, self._pending_marks
        self._pending, self._pending_marks = PackedCounts(), []
        return out

    def has_counts(self) -> bool:
        return bool(self._pending_marks) or any(n.acked for n in self._nodes.values())

    def close(self) -> None:
        """Stop the node counters and shut down the cluster if this object started it."""
        self._closed = True
        ray = self._ray
        for node in getattr(self, "_nodes", {}).values():
            try:
                ray.kill(node.actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        if getattr(self, "_nodes", None):
            self._nodes.clear()
            self._refs.clear()
        if self._started:
            self._started = False
            ray.shutdown()
        if self._reaper is not None:
            ray_reaper.stop(self._reaper)
            self._reaper = None


class _TreeBuffer:
    """``FlushBuffer``'s face over a ``RayCounter``: what ``count_step._count_reduce`` flushes."""

    def __init__(self, counter: RayCounter):
        self._counter = counter

    def take(self) -> tuple[PackedCounts, list[tuple[int, int, bytes | None]]]:
        return self._counter.take()

    def __bool__(self) -> bool:
        return self._counter.has_counts()
