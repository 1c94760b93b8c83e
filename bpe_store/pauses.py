"""Pause points for the tests: places where a process may be held still, to be killed there.

The crash and signal tests (a store half created, a kill -9 inside a transaction, an encode or an
export killed with its files begun, a signal during a checkpoint) need the process stopped at an
exact point. ``pause_for_tests(point)`` is such a point; it does nothing unless the environment
names it, which only the tests do.
"""

from __future__ import annotations

import os
import sys
import time

#: How long a test pause sleeps when ``BPE_STORE_TEST_PAUSE_SECONDS`` does not say: long enough for
#: the test to kill the process.
_PAUSE_SECONDS = 120


def pause_for_tests(point: str) -> None:
    """Tests only: when ``BPE_STORE_TEST_PAUSE`` names ``point``, say so on stderr and sleep, for a
    kill -9 just there. Points: ``create`` (a store half built), ``published`` (a new store under
    its name, not yet opened), ``flush:N`` / ``checkpoint:N`` / ``merge_log:N`` (inside the N-th
    such transaction, its rows written), ``encode:written`` (an encode's outputs begun),
    ``export:staged`` (an export's files written in its staging folder), ``engine:rows`` (a merge
engine about to be built from the store's words, not a stage-2 words file), ``upgrade:REVISION`` (``db
    upgrade``: that migration applied, inside the upgrade's one transaction). The pause lasts
    ``BPE_STORE_TEST_PAUSE_SECONDS`` (default 120): a short one holds a run still for a signal."""
    if os.environ.get("BPE_STORE_TEST_PAUSE") == point:
        print(f"bpe_store: paused at {point}", file=sys.stderr, flush=True)
        time.sleep(float(os.environ.get("BPE_STORE_TEST_PAUSE_SECONDS", _PAUSE_SECONDS)))
