"""Rows as people and programs read them: an aligned text table (streamed: widths from the first
rows), CSV, JSON or JSON lines (``--format``), and token bytes shown as text.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from enum import Enum
from typing import IO, Any

import typer

from ..inspection import display


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    jsonl = "jsonl"


def show_token(b: bytes) -> str:
    """Token bytes for a table or tree: quoted, in the one escaped form (``bpe_store.inspection.display``)."""
    return display.quote(b)


def _cell(v: Any) -> str:
    """A value as a table shows it: bytes always quoted; text as is, unless it has to be escaped or
    begins or ends with a space: then quoted and escaped like bytes (``'\\n'``, ``' '``, ``'\\xe2'``)."""
    if type(v) is int:  # the common case first: this runs for every cell of a large table
        return str(v)
    if v is None:
        return ""
    if isinstance(v, bytes):
        return display.quote(v)
    if isinstance(v, str):
        shown = display.escape(v)
        return f"'{shown}'" if shown is not v or display.needs_quotes(v) else v
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def plain(v: Any) -> Any:
    """A value for CSV/JSON: token bytes become text (a byte that is not UTF-8: ``\\xNN``)."""
    return display.plain(v) if isinstance(v, (bytes, str)) else v


#: A table's column widths are measured on its first rows only, so ``sql`` can stream the rest:
#: a later, wider value is printed whole and shifts its line (never cut).
TABLE_WIDTH_ROWS = 1000
#: Rows formatted per write: one ``write`` per row costs more than formatting it.
_WRITE_BATCH = 1000


def _batched(lines: Iterable[str], out: IO[str]) -> None:
    for batch in iter(lambda: list(itertools.islice(lines, _WRITE_BATCH)), []):
        out.write("".join(batch))


def write_rows(out: IO[str], columns: Sequence[str], rows: Iterable[Sequence[Any]], fmt: Format) -> int:
    """Write rows to ``out`` as they come (an aligned table, CSV, a JSON list or JSON lines);
    returns how many. Memory stays flat however many rows: nothing but the table's first
    ``TABLE_WIDTH_ROWS`` rows and one batch of lines is held."""
    count = itertools.count(1)
    counted = (r for r, _ in zip(rows, count))
    if fmt in (Format.json, Format.jsonl):
        encode = json.JSONEncoder(ensure_ascii=False).encode  # json.dumps(..., ensure_ascii=False) makes one per call
        objs = (encode({c: plain(v) for c, v in zip(columns, r)}) for r in counted)
        if fmt == Format.jsonl:
            _batched((o + "\n" for o in objs), out)
        else:
            first = next(objs, None)
            out.write("[]\n" if first is None else "[\n " + first)
            _batched((",\n " + o for o in objs), out)
            if first is not None:
                out.write("\n]\n")
    elif fmt == Format.csv:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")

        def csv_line(vals: Sequence[Any]) -> str:
            buf.seek(0)
            buf.truncate()
            w.writerow(vals)
            return buf.getvalue()

        out.write(csv_line(columns))
        _batched((csv_line([plain(v) for v in r]) for r in counted), out)
    else:
        _write_table(out, columns, counted)
    return next(count) - 1


def _write_table(out: IO[str], columns: Sequence[str], rows: Iterator[Sequence[Any]]) -> None:
    k = len(columns)
    head = [[_cell(v) for v in r] + [isinstance(v, (int, float)) or v is None for v in r]
            for r in itertools.islice(rows, TABLE_WIDTH_ROWS)]
    numeric = [all(r[k + i] for r in head) for i in range(k)]
    # widths in terminal cells: a CJK character takes two (display.width)
    widths = [max([display.width(c)] + [display.width(r[i]) for r in head]) for i, c in enumerate(columns)]

    cols = list(zip(widths, numeric))

    def line(vals: Sequence[str]) -> str:
        # inlined padding (display.ljust/rjust): this runs for every cell of a large table
        parts = []
        for v, (w, num) in zip(vals, cols):
            gap = w - (len(v) if v.isascii() else display.width(v))
            parts.append(v if gap <= 0 else (" " * gap + v if num else v + " " * gap))
        return "  ".join(parts).rstrip() + "\n"

    out.write(line(columns) + line(["-" * w for w in widths]))
    _batched((line(r[:k]) for r in head), out)
    _batched((line([_cell(v) for v in r]) for r in rows), out)


def render(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: Format) -> str:
    """Rows as an aligned text table, CSV, a JSON list of objects or JSON lines (``write_rows``)."""
    buf = io.StringIO()
    write_rows(buf, columns, rows, fmt)
    return buf.getvalue().rstrip("\n")


def write_stdout(columns: Sequence[str], rows: Iterable[Sequence[Any]], fmt: Format) -> None:
    """``write_rows`` to stdout; a reader that goes away (``| head``) ends it quietly."""
    try:
        write_rows(sys.stdout, columns, rows, fmt)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()


def stdout_gone() -> None:
    """A reader that went away (``| head``): end quietly, exit 0."""
    # Python would complain again when it flushes stdout at exit: point it at /dev/null
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise typer.Exit(0) from None
