"""Inputs: what an input is (a text, jsonl or parquet file, maybe compressed, or a stream) and
what a work unit of one is (``Unit``). How they are read lives beside this module: ``planning``
(check, fingerprint, cut into units), ``units`` (a unit read into the blocks of text counting
consumes), ``jsonl``, ``parquet``, ``decompress`` and ``streams``.

Kinds. The format comes from the extension (``.jsonl``/``.ndjson``/``.json`` -> jsonl,
``.parquet``/``.pq`` -> parquet, anything else -> text) unless one is given; a compression
suffix (``.gz``, ``.zst``, ``.bz2``, ``.xz``) is looked at first (``a.jsonl.gz`` is gzipped
jsonl). A text file is one document. In jsonl each line is a JSON object whose ``text_field``
is a document; in parquet each row's ``text_field`` column is. Compressed files are
decompressed as a stream, never to disk or whole into memory.

Documents are hard boundaries. Blocks of a jsonl or parquet unit hold UTF-8 documents joined
by ``pretokenize.DOC_SEP`` (the byte 0xFF, which valid UTF-8 never contains); counting splits at it as at
a special token, so no pre-token (and hence no merge) crosses a document boundary, whether or
not the run has special tokens: the words are those of the documents counted one by one.

Work units (rows of the ``chunks`` table; see ``plan_units``): a byte range of an
uncompressed text file (cut at points no pre-token spans, ``chunks.plan_chunks``), a
line-aligned byte range of an uncompressed jsonl file, a parquet row group, a whole compressed
file. A ``Unit`` is a small picklable description any thread or process can read by itself
(``unit_blocks``). Streams (stdin, a Python iterable: ``Stream``) are read once, in order, and
counted as they come; see ``Stream.blocks`` for how a killed stream run resumes.

Every reading problem is an ``InputError`` (exit 2) naming the file, the line / row group and
the problem.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .sources import Source

FORMATS = ("text", "jsonl", "parquet")
COMPRESSIONS = {".gz": "gz", ".zst": "zst", ".bz2": "bz2", ".xz": "xz"}
_FORMAT_OF_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".parquet": "parquet",
                     ".pq": "parquet"}
DEFAULT_TEXT_FIELD = "text"
#: ``Source.path`` of standard input and of a Python iterable.
STDIN = "-"
ITERABLE = "<iterable>"


@dataclass(frozen=True)
class FileInput:
    """A file to train on and how to read it."""

    path: Path
    format: str = "text"
    compression: str = "none"
    text_field: str | None = None


def file_input(path: str | os.PathLike, format: str | None = None,
               text_field: str = DEFAULT_TEXT_FIELD) -> FileInput:
    """``path``'s kind: ``format`` if given, else from the extension; compression from the suffix."""
    p = Path(path)
    suffixes = [s.lower() for s in p.suffixes]
    compression = COMPRESSIONS.get(suffixes[-1], "none") if suffixes else "none"
    if compression != "none":
        suffixes = suffixes[:-1]
    if format is None:
        format = _FORMAT_OF_SUFFIX.get(suffixes[-1], "text") if suffixes else "text"
    if format not in FORMATS:
        raise InputError(f"unknown input format {format!r}: use one of {', '.join(FORMATS)}")
    if format == "parquet" and compression != "none":
        raise InputError(f"{p}: a compressed parquet file cannot be read by row group; parquet "
                         "compresses its pages itself: give the .parquet file")
    if not text_field:
        raise InputError("the text field name must not be empty")
    return FileInput(p, format, compression, None if format == "text" else text_field)


@dataclass(frozen=True)
class Unit:
    """One work unit, described so that any thread or process can read it (``unit_blocks``):
    ``kind`` range (bytes ``[start, end)``), row_group (``part``) or file (the whole file)."""

    path: str
    format: str
    compression: str
    text_field: str | None
    kind: str
    start: int
    end: int
    part: int | None = None

    @property
    def has_documents(self) -> bool:
        """Whether its blocks hold several documents joined by ``DOC_SEP``."""
        return self.format != "text"


def unit_of(source: Source, kind: str, start: int, end: int, part: int | None) -> Unit:
    return Unit(source.path, source.format, source.compression, source.text_field, kind, start, end, part)
