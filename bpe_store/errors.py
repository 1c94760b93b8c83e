"""The errors bpe_store raises on bad input, each with the exit code the CLI uses for it.

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


class ResumeMismatch(BpeStoreError):
    """The store was started with other parameters or inputs than this command gives."""

    exit_code = EXIT_RESUME_REFUSED


class StoreError(BpeStoreError):
    """The database is not a bpe_store store, is corrupt, too old or too new, or cannot be written."""

    exit_code = EXIT_STORE


class Interrupted(BpeStoreError):
    """Training stopped on request after writing a checkpoint."""

    exit_code = EXIT_SIGINT

