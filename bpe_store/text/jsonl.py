"""JSONL inputs: each line a JSON object whose ``text_field`` is a document; lines parsed natively
(``_core.jsonl_texts``) or by ``json``, documents joined by ``DOC_SEP`` into blocks.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

from ..errors import InputError
from ..native import (
    native_jsonl_texts,
)
from .decompress import READ
from .pretokenize import (
    DOC_SEP,
)


def _record_text(obj, field: str, where: str, line: int) -> str:
    if not isinstance(obj, dict):
        raise InputError(f"{where}: line {line}: not a JSON object but {json_type(obj)}")
    if field not in obj:
        keys = ", ".join(list(obj)[:8]) or "none"
        raise InputError(f"{where}: line {line}: no field {field!r} (fields: {keys}); see --text-field")
    text = obj[field]
    if not isinstance(text, str):
        raise InputError(f"{where}: line {line}: field {field!r} is {json_type(text)}, not a string")
    return text


def json_type(v) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(v), type(v).__name__)


def _encode_doc(text: str, invalid_utf8: str, where: str, line: int) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800-style escape
        if invalid_utf8 != "replace":
            raise InputError(f"{where}: line {line}: the text holds a lone surrogate (an invalid \\u "
                             "escape); fix the file or pass --invalid-utf8 replace") from None
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def parse_lines(lines: list[bytes], field: str, where: str, first_line: int, invalid_utf8: str) -> list[bytes]:
    """The documents (UTF-8) of jsonl ``lines`` (line ``first_line`` first); blank lines skipped.

    The reference reading of jsonl, one ``json.loads`` per line: what the native extractor
    (``_core.jsonl_texts``) must equal, and what reads a block it is not sure of, naming the first
    bad line or applying ``--invalid-utf8 replace``. (Why not one ``json.loads`` of the lines
    joined into an array, as before: lines that are broken alone can join into valid JSON, e.g. a
    line ending inside a string, closed on the next one.)"""
    docs = []
    for i, ln in enumerate(lines):
        line = first_line + i
        if not ln.strip():
            continue
        try:
            raw = ln.decode("utf-8", "replace" if invalid_utf8 == "replace" else "strict")
        except UnicodeDecodeError as exc:
            raise InputError(f"{where}: line {line}: invalid UTF-8 at column {exc.start + 1}: {exc.reason}; "
                             "fix the file or pass --invalid-utf8 replace") from None
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            hint = ("; jsonl holds one JSON object per line, not a JSON array or a pretty-printed "
                    "document" if line == 1 and raw.lstrip()[:1] in ("[", "{") and raw.strip() in ("[", "{")
                    else "")
            raise InputError(f"{where}: line {line}: broken JSON ({exc}){hint}") from None
        except RecursionError:  # json recurses per level (the native extractor gives up at 200)
            raise InputError(f"{where}: line {line}: the JSON is nested too deeply to read (a jsonl record "
                             "is one object whose text field is a string)") from None
        docs.append(_encode_doc(_record_text(obj, field, where, line), invalid_utf8, where, line))
    return docs


def _native_field(field: str) -> bytes | None:
    """``field`` as the native extractor takes it (UTF-8), or None to read in Python (no native
    core, or a name no JSON key can equal natively: one with a lone surrogate)."""
    if native_jsonl_texts is None:
        return None
    try:
        return field.encode("utf-8")
    except UnicodeEncodeError:
        return None


def jsonl_lines_documents(content: bytes, field: str, where: str, first_line: int | Callable[[], int],
                          invalid_utf8: str, native_field: bytes | None = None) -> tuple[bytes, int, int]:
    """``(documents joined by DOC_SEP, documents, lines)`` of ``content``, complete jsonl lines
    (split at LF; the last may lack it). Natively when ``native_field`` is given and the
    extractor is sure of every line, else by ``parse_lines``; the same bytes either way.
    ``first_line``: the number of the first line, or a function finding it (called only when a
    line is bad)."""
    if native_field is not None:
        got = native_jsonl_texts(content, native_field)
        if got is not None:
            return got
    lines = content.split(b"\n")
    if callable(first_line):
        try:
            docs = parse_lines(lines, field, where, 0, invalid_utf8)
        except InputError:  # find the line number, then report with it
            docs = parse_lines(lines, field, where, first_line(), invalid_utf8)
    else:
        docs = parse_lines(lines, field, where, first_line, invalid_utf8)
    return DOC_SEP.join(docs), len(docs), len(lines)


def jsonl_blocks(read: Callable[[int], bytes], field: str | None, block_size: int, where: str,
                 invalid_utf8: str, *, first_line: int | None = 1, path: str | None = None,
                 offset: int = 0, read_size: int = READ) -> Iterator[tuple[bytes, int, int]]:
    """``(block, end, documents)``: documents of the jsonl read by ``read`` joined by ``DOC_SEP``
    into blocks of about ``block_size``, each with the byte offset after its last line and the
    documents so far. ``first_line`` None: found from ``path`` and ``offset`` if an error needs it.

    Reads ``read_size`` bytes at a time and hands the complete lines among them to
    ``jsonl_lines_documents`` (the native extractor, GIL released); memory: one read, the line it
    cut, and one block."""
    assert field is not None
    native_field = _native_field(field)
    parts: list[bytes] = []     # the start of a line cut by the last read
    lines_seen = 0
    consumed = offset
    pieces: list[bytes] = []    # runs of documents joined by DOC_SEP, not yet in a block
    n_docs = 0
    size = 0
    eof = False
    while not eof:
        data = read(read_size)
        eof = not data
        if eof:
            if not parts:
                break
            content, parts = b"".join(parts), []
        else:
            nl = data.rfind(b"\n")
            if nl < 0:
                parts.append(data)
                continue
            parts.append(data[:nl])
            content = b"".join(parts)
            parts = [data[nl + 1:]] if nl + 1 < len(data) else []
        line: int | Callable[[], int] = (
            first_line + lines_seen if first_line is not None
            else lambda seen=lines_seen: line_of(path, offset, None) + seen)
        joined, n, n_lines = jsonl_lines_documents(content, field, where, line, invalid_utf8, native_field)
        lines_seen += n_lines
        consumed += len(content) + (0 if eof else 1)
        del content  # not held while a block waits to be counted (a whole range unit's lines)
        if n:
            pieces.append(joined)
            n_docs += n
            size += len(joined) + 1
        if size >= block_size or (eof and pieces):
            block, pieces, size = DOC_SEP.join(pieces), [], 0  # the pieces are not held while it is counted
            yield block, consumed, n_docs
    if pieces:
        yield DOC_SEP.join(pieces), consumed, n_docs


def line_of(path: str | None, offset: int, first_line: int | None) -> int:
    """The 1-based line number at byte ``offset`` of ``path`` (read only when an error needs it)."""
    if first_line is not None or path is None:
        return first_line or 1
    n = 1
    with open(path, "rb") as f:
        left = offset
        while left > 0:
            data = f.read(min(left, 1 << 20))
            if not data:
                break
            n += data.count(b"\n")
            left -= len(data)
    return n

