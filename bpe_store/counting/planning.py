"""Planning the inputs: each input checked (``plan_source``; ``scan_input`` also reads and
fingerprints it), compared with a store's on a resume (``same_kind_diffs``), and cut into work
units (``plan_units``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from ..errors import InputError
from ..text.chunks import plan_chunks
from ..text.fingerprint import UNITS_HASH, UNITS_NONE
from ..text.input_checks import open_regular, scan_source
from ..text.inputs import FileInput
from ..text.parquet import parquet_column_type, parquet_file
from ..text.pretokenize import PretokenSpec
from ..text.sources import Source
from ..text.streams import Stream


def plan_source(item: FileInput, invalid_utf8: str = "strict") -> Source:
    """One input as a new store records it, reading as little of it as planning needs.

    Uncompressed text is not read here at all: it is checked to be a non-empty regular file, and
    its fingerprint (``fingerprint.UNITS_HASH``) and UTF-8 check are taken unit by unit in the
    read that counts it; its size and modification time, taken now, are what counting checks
    before each flush (a change after this is caught there). Other inputs: ``scan_input``.

    Why: a separate read of the whole input before counting cost ~3 % of counting it (1 GB of
    text, bench/RESULTS-plan.md), and it was a second pass over every byte."""
    if item.format != "text" or item.compression != "none":
        return scan_input(item, invalid_utf8)
    with open_regular(item.path) as f:
        st = os.fstat(f.fileno())
    if st.st_size == 0:
        raise InputError(f"{item.path}: is empty")
    return Source(str(item.path.resolve()), st.st_size, st.st_mtime_ns, UNITS_NONE, format=item.format,
                  compression=item.compression, text_field=item.text_field, hash=UNITS_HASH)


def scan_input(item: FileInput, invalid_utf8: str = "strict") -> Source:
    """Check one input file and fingerprint it (``input_checks.scan_source``), recording its kind.

    Uncompressed text and jsonl are checked to be UTF-8 here (saying where they are not);
    compressed text is checked as it is counted, parquet strings as each batch is read. A
    parquet file must have ``text_field`` as a string column."""

    plain = item.compression == "none" and item.format != "parquet"
    src = scan_source(item.path, invalid_utf8 if plain else "replace")
    if item.format == "parquet":
        parquet_column_type(str(item.path), item.text_field)
    return replace(src, format=item.format, compression=item.compression, text_field=item.text_field)


def same_kind_diffs(old: Sequence[Source], new: Sequence[Source | Stream]) -> list[str]:
    """How the inputs' kinds differ between a store and a command (paths already match)."""
    def what(x: Source | Stream) -> str:
        return x.format + (f" (field {x.text_field!r})" if x.text_field else "")

    diffs = []
    for s, n in zip(old, new):
        if s.format != n.format or s.text_field != n.text_field:
            diffs.append(f"{s.path} read as {what(s)} -> {what(n)}")
        elif s.compression != n.compression:
            diffs.append(f"{s.path} compression {s.compression} -> {n.compression}")
    return diffs


def plan_units(source: Source, spec: PretokenSpec, chunk_size: int) -> list[tuple[int, int, str, int | None]]:
    """``[(start, end, kind, part)]``: the work units of one input file (see the module doc), a
    text file's cut where ``spec``'s pre-tokens allow (``plan_chunks``)."""

    if source.compression != "none":
        return [(0, source.size, "file", None)]
    if source.format == "text":
        return [(a, b, "range", None) for a, b in
                plan_chunks(source.path, source.size, spec.special_tokens, spec.pattern, chunk_size,
                            spec.max_pretoken_bytes)]
    if source.format == "jsonl":
        return [(a, b, "range", None) for a, b in _plan_lines(source.path, source.size, chunk_size)]
    pf = parquet_file(source.path)
    units = []
    at = 0
    for g in range(pf.metadata.num_row_groups):
        rg = pf.metadata.row_group(g)
        size = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
        units.append((at, at + size, "row_group", g))  # start/end: progress in compressed bytes
        at += size
    return units


def _plan_lines(path: str, size: int, chunk_size: int) -> list[tuple[int, int]]:
    """Byte ranges of about ``chunk_size`` that end just after a newline (or at the end)."""
    bounds = [0]
    with open(path, "rb") as f:
        target = chunk_size
        while target < size:
            f.seek(target)
            nl = -1
            pos = target
            while nl < 0 and pos < size:
                data = f.read(1 << 16)
                nl = data.find(b"\n")
                if nl < 0:
                    pos += len(data)
                    if not data:
                        break
            if nl < 0 or pos + nl + 1 >= size:
                break
            bounds.append(pos + nl + 1)
            target = bounds[-1] + chunk_size
    bounds.append(size)
    return list(zip(bounds, bounds[1:]))

