"""The errors bpe_store raises on bad input, each with the exit code the CLI uses for it.

Every message is one line a person can act on; the CLI prints it without a traceback.
"""

from __future__ import annotations


class BpeStoreError(Exception):
    """Base class: something the user can fix. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class InputError(BpeStoreError):
    """A corpus file is missing, unreadable, empty, or not valid UTF-8; a parameter is invalid."""

    exit_code = 2


class ResumeMismatch(BpeStoreError):
    """The store was started with other parameters or inputs than this command gives."""

    exit_code = 3


class StoreError(BpeStoreError):
    """The database is not a bpe_store store, is corrupt, too old or too new, or cannot be written."""

    exit_code = 4
