"""GPT-2's byte-to-unicode mapping, to read the CS336 fixtures (which are written in it)."""

from __future__ import annotations

import json
from pathlib import Path


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table: printable bytes map to themselves, the others to code points from 256 up."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_DECODE = {c: b for b, c in bytes_to_unicode().items()}


def decode_token(s: str) -> bytes:
    return bytes(_DECODE[c] for c in s)


def read_merges(path: Path) -> list[tuple[bytes, bytes]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#version"):
            continue
        left, right = line.split(" ")
        out.append((decode_token(left), decode_token(right)))
    return out


def read_vocab(path: Path) -> dict[int, bytes]:
    return {i: decode_token(s) for s, i in json.loads(path.read_text(encoding="utf-8")).items()}
