"""How ``train`` and ``encode`` name their inputs: files, directories (``--glob``), quoted globs and
``-``, expanded in order; the input options both commands take (``--format``, ``--text-field``,
``--glob``, ``--invalid-utf8``), declared once with training's defaults.
"""

from __future__ import annotations

import glob as _glob
from collections.abc import Sequence
from enum import Enum
from pathlib import Path

import typer

from ..errors import InputError
from ..store.params import INVALID_UTF8_POLICIES
from ..text.inputs import FORMATS as INPUT_FORMATS
from ..training.options import TrainOptions

#: ``--invalid-utf8``'s choices (``store.params.INVALID_UTF8_POLICIES``), listed by ``--help``
InvalidUtf8 = Enum("InvalidUtf8", {p: p for p in INVALID_UTF8_POLICIES}, type=str)
#: ``--format``'s choices for inputs (``text.inputs.FORMATS``), listed by ``--help``
InputFormat = Enum("InputFormat", {f: f for f in INPUT_FORMATS}, type=str)


def format_option(help: str):
    """``--format``: how to read the inputs (None: by extension)."""
    return typer.Option(None, "--format", help=help)


def text_field_option():
    """``--text-field``: the jsonl field / parquet column, defaulting as a run does."""
    return typer.Option(TrainOptions.text_field, "--text-field", metavar="NAME",
                        help="The jsonl field / parquet column holding the text.")


def glob_option(example: str):
    """``--glob``: which files of a directory input are read; ``example`` shows one in the help."""
    return typer.Option("*", "--glob", metavar="PATTERN",
                        help=f"Files to take from directory inputs, e.g. {example!r}.")


def invalid_utf8_option():
    """``--invalid-utf8``: refuse or replace invalid UTF-8, defaulting as a run does."""
    return typer.Option(InvalidUtf8(TrainOptions.invalid_utf8), "--invalid-utf8",
                        help="strict: refuse invalid UTF-8; replace: decode it as U+FFFD.")


def _is_glob(arg: str) -> bool:
    return any(ch in arg for ch in "*?[")


def _skip(p: Path, root: Path, db: Path) -> bool:
    """Hidden files and the store's own files are never inputs."""
    if any(part.startswith(".") for part in p.relative_to(root).parts):
        return True
    return p.resolve() in {Path(f"{db.resolve()}{s}") for s in ("", "-wal", "-shm", "-journal")}


def expand_inputs(args: Sequence[str], pattern: str, db: Path) -> list[Path]:
    """Files to train on, in a stable order: a file as given, a directory's files matching
    ``pattern`` (sorted), a quoted glob's matches (sorted); duplicates dropped."""
    out: list[Path] = []
    for arg in args:
        p = Path(arg)
        if p.is_dir():
            found = sorted(f for f in p.glob(pattern) if f.is_file() and not _skip(f, p, db))
            if not found:
                raise InputError(f"{arg}: no file matching {pattern!r} in this directory (see --glob)")
        elif _is_glob(arg) and not p.exists():
            found = sorted(Path(f) for f in _glob.glob(arg, recursive=True) if Path(f).is_file())
            if not found:
                raise InputError(f"{arg}: no file matches this pattern")
        elif not p.exists():
            raise InputError(f"{p}: no such file")  # before any progress line: one line, as for every error
        else:
            found = [p]
        out.extend(found)
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def complete_pattern(incomplete: str) -> list[tuple[str, str]]:
    """Shell completion of ``--pattern``: the pattern names (a regex of one's own is typed)."""
    from ..text.pretokenize import PATTERNS, describe_pattern

    return [(name, f"{describe_pattern(regex)}'s pattern") for name, regex in PATTERNS.items()
            if name.startswith(incomplete)]


def resolve_inputs(args: Sequence[str], glob: str, db: Path, fmt: str | None, text_field: str) -> list:
    """The inputs ``args`` name, for ``train`` and ``encode`` alike: standard input alone (``-``),
    read as ``fmt``; else the files ``expand_inputs`` finds."""
    from ..text.inputs import STDIN

    if STDIN in args:
        if len(args) > 1:
            raise InputError("- (standard input) must be the only input")
        from ..text.streams import Stream

        return [Stream.stdin(fmt, text_field)]
    return expand_inputs(args, glob, db)
