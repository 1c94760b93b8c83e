"""CLI commands that use a trained store as a tokenizer: ``encode`` and ``export``."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the ``bpe-store`` app."""
