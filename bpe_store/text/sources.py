"""A run's inputs as planning records them: ``Source``, one input as it was when the run started.

Its own module so that counting and input reading (which make Sources) need not import the
store (which keeps them in its ``sources`` table): counting is a pure map step.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    """One input as it was when the run started, and how it is read (``bpe_store.text.inputs``).

    ``digest`` is its fingerprint by ``hash`` (``bpe_store.text.fingerprint``). For a stream
    (stdin, a Python iterable) ``size``, ``digest`` (SHA-256) and ``documents`` describe what has
    been counted so far: a resume skips that much of the stream given again."""

    path: str
    size: int
    mtime_ns: int
    digest: str
    format: str = "text"
    compression: str = "none"
    text_field: str | None = None
    documents: int | None = None
    hash: str = "sha256"
