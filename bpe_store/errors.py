"""The errors bpe_store raises on bad input, each with the exit code the CLI uses for it.

The library's API checks its arguments with ``path_argument`` and ``text_argument``: a wrong type
is an ``ArgumentTypeError``, text that is not UTF-8 an ``ArgumentValueError`` (both InputErrors).
Every message is one line a person can act on; the CLI prints it without a traceback
(``bpe-store --verbose ...`` shows one). The exit codes are part of the CLI's contract:

====  ===========================================================================
code  meaning
====  ===========================================================================
0     success
1     failed: an unexpected error (a bug, or the system let us down)
2     usage: a bad option or argument, a missing or unreadable input, a bad parameter
3     resume refused: the store was started with other parameters or inputs
4     store problem: not a store, corrupt or damaged, schema too old or too new, held by another run
130   interrupted by SIGINT (Ctrl-C); the store is at its last checkpoint (encode: no partial output)
143   interrupted by SIGTERM; the store is at its last checkpoint (encode: no partial output)
====  ===========================================================================
"""

from __future__ import annotations

import os

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_RESUME_REFUSED = 3
EXIT_STORE = 4
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

#: ``{code: meaning}``, the table above, for ``--help`` and the docs' test.
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILED: "failed (unexpected error)",
    EXIT_USAGE: "usage: bad option, argument, input file or parameter",
    EXIT_RESUME_REFUSED: "resume refused: parameters or inputs differ from the store's",
    EXIT_STORE: "store problem: not a store, corrupt or damaged, schema too old/new, or held by another run",
    EXIT_SIGINT: "interrupted by SIGINT (Ctrl-C) after a checkpoint (encode: partial output removed)",
    EXIT_SIGTERM: "interrupted by SIGTERM after a checkpoint (encode: partial output removed)",
}


class BpeStoreError(Exception):
    """Base class: something the user can fix. ``exit_code`` is what the CLI exits with."""

    exit_code = EXIT_FAILED


class InputError(BpeStoreError):
    """A corpus file is missing, unreadable, empty, or not valid UTF-8; a parameter is invalid."""

    exit_code = EXIT_USAGE


class ArgumentTypeError(InputError, TypeError):
    """An argument of the library's API has the wrong type (a number where a path belongs, bytes
    where text belongs): an InputError, and a TypeError for code that expects one."""


class ArgumentValueError(InputError, ValueError):
    """An argument of the library's API has a value it cannot take (text holding a lone surrogate,
    which is not UTF-8): an InputError, and a ValueError for code that expects one."""


class PatternError(ArgumentValueError):
    """A pre-tokenization pattern that is neither a known name nor a regex that compiles (a
    misspelled name such as ``gpt-2``, with the closest names; or ``regex``'s message): an
    InputError, and a ValueError for code that expects one."""


def path_argument(value: object, what: str) -> str | os.PathLike:
    """``value`` if it is a path (str or os.PathLike), else ArgumentTypeError naming ``what``."""
    if isinstance(value, (str, os.PathLike)):
        return value
    raise ArgumentTypeError(f"{what} must be a path (str or os.PathLike), not {_kind(value)}")


def text_argument(value: object, what: str) -> str:
    """``value`` if it is a str that is UTF-8 text (no lone surrogate), else ArgumentTypeError or
    ArgumentValueError naming ``what`` (and where the surrogate is)."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{what} must be a str, not {_kind(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ArgumentValueError(f"{what} holds a lone surrogate (U+{ord(value[exc.start]):04X} at index "
                                 f"{exc.start}), which is not UTF-8 text") from None
    return value


def _kind(value: object) -> str:
    """``value`` as a message names it: its type, and itself when short."""
    shown = repr(value)
    return type(value).__name__ + (f" {shown}" if len(shown) <= 40 else "")


class ResumeMismatch(BpeStoreError):
    """The store was started with other parameters or inputs than this command gives."""

    exit_code = EXIT_RESUME_REFUSED


class StoreError(BpeStoreError):
    """The database is not a bpe_store store, is corrupt, too old or too new, or cannot be written."""

    exit_code = EXIT_STORE


class Interrupted(BpeStoreError):
    """Training stopped on request after writing a checkpoint."""

    exit_code = EXIT_SIGINT

