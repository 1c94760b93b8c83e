"""Streams: stdin or a Python iterable, read once, in order, and counted as they come; a killed
stream run resumes by skipping what the store counted (see ``Stream.blocks``).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import BinaryIO

from ..errors import InputError, ResumeMismatch
from .decompress import READ
from .inputs import DEFAULT_TEXT_FIELD, FORMATS, ITERABLE, STDIN
from .jsonl import json_type, jsonl_blocks
from .pretokenize import DOC_SEP, PretokenSpec
from .sources import Source
from .units import text_blocks


@dataclass(frozen=True)
class StreamPosition:
    """How much of a stream a block ends at: raw bytes (stdin) or documents, and the SHA-256 of
    that prefix."""

    bytes: int
    documents: int
    sha256: str


class Stream:
    """An input read once, in order: standard input (text or jsonl) or a Python iterable of
    documents. Its counts are committed as it goes, with the position and the SHA-256 of what
    was read. A killed stream run resumes when given the same stream again: the part already
    counted is read, checked against the recorded SHA-256 (a different stream is refused,
    exit 3) and skipped; counting goes on from there."""

    def __init__(self, name: str, format: str, text_field: str | None,
                 open_bytes: Callable[[], BinaryIO] | None = None,
                 documents: Callable[[], Iterable] | None = None):
        self.name = name
        self.path = name
        self.format = format
        self.compression = "none"
        self.text_field = text_field
        self._open_bytes = open_bytes
        self._documents = documents

    @classmethod
    def stdin(cls, format: str | None = None, text_field: str = DEFAULT_TEXT_FIELD) -> Stream:
        format = format or "text"
        if format == "parquet":
            raise InputError("parquet cannot be read from standard input (it needs to seek); give the file")
        if format not in FORMATS:
            raise InputError(f"unknown input format {format!r}: use one of {', '.join(FORMATS)}")
        return cls(STDIN, format, text_field if format == "jsonl" else None, open_bytes=lambda: sys.stdin.buffer)

    @classmethod
    def of_iterable(cls, items: Iterable, text_column: str = DEFAULT_TEXT_FIELD) -> Stream:
        """Documents from ``items``: strings, mappings with ``text_column`` (rows), or an HF
        ``datasets.Dataset`` / ``IterableDataset`` (read in batches of its column; duck-typed,
        so ``datasets`` is not needed)."""
        if isinstance(items, (str, bytes)):
            raise InputError("train_from_iterator takes an iterable of documents, not one string")

        def documents() -> Iterator:
            batched = getattr(items, "iter", None)
            if callable(batched) and hasattr(items, "column_names"):
                names = items.column_names
                if names is not None and text_column not in names:
                    raise InputError(f"the dataset has no column {text_column!r} (columns: "
                                     f"{', '.join(names[:8])})")
                for batch in batched(batch_size=1000):
                    if text_column not in batch:  # an IterableDataset may not know its columns
                        raise InputError(f"the dataset has no column {text_column!r} (columns: "
                                         f"{', '.join(map(str, list(batch)[:8]))})")
                    yield from batch[text_column]
                return
            for item in items:
                if isinstance(item, Mapping):
                    if text_column not in item:
                        raise InputError(f"a row of the iterable has no {text_column!r} "
                                         f"(keys: {', '.join(map(str, list(item)[:8]))})")
                    yield item[text_column]
                else:
                    yield item

        return cls(ITERABLE, "iterable", text_column, documents=documents)

    def source(self) -> Source:
        """The ``sources`` row of a stream not read yet."""
        return Source(self.name, 0, 0, hashlib.sha256().hexdigest(), self.format, "none", self.text_field, 0, "sha256")

    def blocks(self, resume: Source, spec: PretokenSpec, block_size: int) -> Iterator[tuple[bytes, StreamPosition]]:
        """``(block, position after it)`` for the part of the stream not counted yet, read as
        ``spec`` says (its invalid-UTF-8 policy; text cut where its pre-tokens allow); first reads
        and checks the part that ``resume`` (the store's row) says was counted."""
        invalid_utf8 = spec.invalid_utf8
        if self._documents is not None:
            yield from self._iterable_blocks(resume, invalid_utf8, block_size)
            return
        sha = hashlib.sha256()
        f = self._open_bytes()
        skip = resume.size
        while skip > 0:  # the counted prefix: read, hash, compare
            data = f.read(min(skip, READ))
            if not data:
                break
            sha.update(data)
            skip -= len(data)
        if skip > 0 or sha.hexdigest() != resume.digest:
            raise ResumeMismatch(
                f"the stream given is not the one this store was counting: its first {resume.size} bytes "
                f"differ from those counted ({resume.documents or 0} documents); give the same stream "
                "again, or --restart to start over")
        pending = bytearray()   # read, not yet hashed (hashed once a block is cut there)
        hashed = resume.size

        # read1: what the pipe has (up to n), not a wait until n bytes came
        read1 = getattr(f, "read1", f.read)

        def read(n: int) -> bytes:
            data = read1(n)
            pending.extend(data)
            return data

        def position(end: int, documents: int) -> StreamPosition:
            nonlocal hashed
            sha.update(pending[: end - hashed])
            del pending[: end - hashed]
            hashed = end
            return StreamPosition(end, documents, sha.hexdigest())

        where = "standard input"
        if self.format == "text":
            ends: list[int] = []
            for block in text_blocks(read, spec, block_size, where, offset=resume.size,
                                     first_line=1 if resume.size == 0 else None, ends=ends):
                yield block, position(ends.pop(0), 1)
        else:
            first = resume.documents or 0
            for block, end, docs in jsonl_blocks(read, self.text_field, block_size, where, invalid_utf8,
                                                 first_line=None, offset=resume.size):
                yield block, position(end, first + docs)

    def _iterable_blocks(self, resume: Source, invalid_utf8: str,
                         block_size: int) -> Iterator[tuple[bytes, StreamPosition]]:
        sha = hashlib.sha256()
        skip = resume.documents or 0
        n = 0
        nbytes = 0
        docs: list[bytes] = []
        size = 0
        mismatch = False
        for doc in self._documents():
            b = _document_bytes(doc, n + 1, invalid_utf8)
            n += 1
            sha.update(len(b).to_bytes(8, "little"))
            sha.update(b)
            nbytes += len(b)
            if n <= skip:
                if n == skip and sha.hexdigest() != resume.digest:
                    mismatch = True
                    break
                continue
            docs.append(b)
            size += len(b) + 1
            if size >= block_size:
                yield DOC_SEP.join(docs), StreamPosition(nbytes, n, sha.hexdigest())
                docs, size = [], 0
        if n < skip or mismatch:
            raise ResumeMismatch(
                f"the iterable given is not the one this store was counting: its first {skip} documents "
                "differ from those counted; give the same documents again, or restart=True to start over")
        if docs:
            yield DOC_SEP.join(docs), StreamPosition(nbytes, n, sha.hexdigest())


def _document_bytes(doc, number: int, invalid_utf8: str) -> bytes:
    """One document of an iterable as UTF-8: a str, or bytes that must be UTF-8."""
    if isinstance(doc, str):
        try:
            return doc.encode("utf-8")
        except UnicodeEncodeError:
            if invalid_utf8 != "replace":
                raise InputError(f"the iterable: document {number} holds a lone surrogate; pass "
                                 "invalid_utf8='replace' to decode it as U+FFFD") from None
            return doc.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")
    if isinstance(doc, (bytes, bytearray, memoryview)):
        b = bytes(doc)
        try:
            b.decode("utf-8")
            return b
        except UnicodeDecodeError as exc:
            if invalid_utf8 != "replace":
                raise InputError(f"the iterable: document {number} is not valid UTF-8 (byte {exc.start}); "
                                 "pass invalid_utf8='replace'") from None
            return b.decode("utf-8", "replace").encode("utf-8")
    raise InputError(f"the iterable: document {number} is {json_type(doc)}, not a string")
