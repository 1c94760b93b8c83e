"""The ``bpe-store`` command line: a Typer app (also ``python -m bpe_store`` and ``python cli.py``).

Commands: ``train`` (resumable; progress bars or JSON lines; Ctrl-C saves a checkpoint),
``status``, ``sql`` (rows streamed), ``show``, ``why`` (read-only inspection, safe while a run
trains), ``report`` (an HTML page, ``bpe_store.inspection.report``), ``encode``/``export`` and
``db upgrade`` (schema migrations). Help reads like other Unix tools' (``app.UnixCommand``).

This module is the entry point: it loads the command modules, each of which attaches its
commands to the one app (``app.app``), in the order ``--help`` lists them.

Errors a user can make are one line on stderr and a documented exit code (see
``bpe_store.errors``); ``--verbose`` adds the traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

# the command modules, imported for the commands they attach to the app, in the order --help lists them
# isort: off
from . import train_cmd  # noqa: F401  (train)
from . import inspect_cmds  # noqa: F401  (status, sql, show, why, report)
from . import tokenize_cmds  # noqa: F401  (encode, export)
from . import eval_cmd  # noqa: F401  (eval)
from . import db_cmds  # noqa: F401  (db upgrade)
# isort: on
from .app import app


def _prog_name() -> str:
    """How this process was started, for usage lines and the resume command."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("bpe-store")
    if argv0.name == "__main__.py":
        return "python -m bpe_store"
    if argv0.suffix == ".py":
        return f"python {sys.argv[0]}"
    return "bpe-store"


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``bpe-store``, ``python -m bpe_store`` and ``python cli.py``."""
    app(args=argv, prog_name=_prog_name())
