"""The counting tree's inner nodes on a Ray cluster: one node counter per machine, and the part sums.

``NodeCounter`` runs as one Ray actor per node of the cluster (``bpe_store.counting.ray_count``
places it, with the node's CPUs). The driver sends it work units, several at once; each call
counts one unit on a thread of the actor (the native scanner releases the GIL, so the node's
cores count in parallel) and adds the counts into the node's ``FlushBuffer``, with the unit's
mark (its id and pre-tokens) under the same lock. ``take`` swaps both out at once: the counts of
exactly the units it names, packed in ``parts`` parts by a hash of the word
(``WordCounter.pack_parts``). ``sum_packed`` (a Ray task) adds part j of every node into one
buffer, so the parts the driver receives hold disjoint words: each distinct word reaches the
driver once per flush, not once per unit (nor once per node).

What a node counter holds is not durable: units it counted since its last ``take`` are lost
with it (its process or its node dies), and the driver counts them again elsewhere; the store
marks a unit counted only in the flush that adds its counts.

No Ray import here: these are plain classes and functions, made remote by ``ray_count``.
"""

from __future__ import annotations

import os

from ..native import WordCounter
from .count import FlushBuffer, count_unit_counts


class NodeCounter:
    """One node's counter: ``count`` units on its threads, ``take`` their sum and their marks."""

    def __init__(self) -> None:
        self._buffer = FlushBuffer(True)

    def ready(self) -> tuple[str, int]:
        """``(host name, pid)``: the actor has started (and where)."""
        return os.uname().nodename, os.getpid()

    def count(self, task: tuple) -> tuple[int, int]:
        """Count one unit (a ``count.count_unit_packed`` task tuple) into this node's buffer, with
        its fingerprint when it has one (a byte range of a text file); ``(unit id, pre-tokens)``
        once its counts are in."""
        cid, counts, n, digest = count_unit_counts(task)
        self._buffer.add(cid, counts, n, digest)
        return cid, n

    def take(self, parts: int) -> list:
        """``[marks, part 0, ..., part parts-1]``: the units counted since the last take,
        ``[(unit id, pre-tokens, fingerprint or None)]``, then their summed counts as ``parts`` packed buffers (word w
        in part fnv1a64(w) % parts), each a Ray return value of its own (``num_returns``), so a
        part goes to the task that sums it without passing through the driver. The buffer is
        left empty."""
        counts, marks = self._buffer.take()
        return [marks, *([counts.pack()] if parts == 1 else counts.pack_parts(parts))]


def sum_packed(*parts: bytes) -> bytes:
    """Packed counts summed into one packed buffer (part j of every node counter)."""
    total = WordCounter()
    for p in parts:
        total.add_packed(p)
    return total.pack()
