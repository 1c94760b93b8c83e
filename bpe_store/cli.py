"""The ``bpe-store`` command line: a Typer app (also ``python -m bpe_store`` and ``python cli.py``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .errors import BpeStoreError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Byte-level BPE training whose whole state lives in one SQLite file.")


@app.callback()
def _root() -> None:
    """Byte-level BPE training whose whole state lives in one SQLite file."""


@app.command()
def train(
    inputs: list[Path] = typer.Argument(..., help="Corpus files (UTF-8 text)."),
    db: Path = typer.Option(..., "--db", help="The store (SQLite file); created, or resumed if it exists."),
    vocab_size: int = typer.Option(..., "--vocab-size", help="Target vocabulary size (specials + 256 + merges)."),
    special: list[str] = typer.Option([], "--special", help="A special token (repeat for several)."),
    pattern: Optional[str] = typer.Option(None, "--pattern", help="Pre-tokenization regex (default GPT-2's)."),
    workers: Optional[int] = typer.Option(None, "--workers", "--threads", help="Counting workers (default: all cores)."),
    chunk_size: int = typer.Option(8 << 20, "--chunk-size", help="Bytes per counting chunk."),
    checkpoint_merges: int = typer.Option(2000, "--checkpoint-merges", help="Merges per checkpoint."),
    checkpoint_seconds: float = typer.Option(30.0, "--checkpoint-seconds", help="Seconds of merging per checkpoint."),
    invalid_utf8: str = typer.Option("strict", "--invalid-utf8", help="'strict' (refuse) or 'replace' (U+FFFD)."),
    restart: bool = typer.Option(False, "--restart", help="Discard the store's progress and start over."),
) -> None:
    """Train a BPE into a store, or resume it: run the same command again after a stop.

    Example: bpe-store train corpus.txt --db run.db --vocab-size 32000 --special '<|endoftext|>'
    """
    from .pretokenize import GPT2_PATTERN
    from .train import train as run_train

    result = run_train(inputs, db, vocab_size, special, pattern=pattern or GPT2_PATTERN, workers=workers,
                       chunk_size=chunk_size, checkpoint_merges=checkpoint_merges,
                       checkpoint_seconds=checkpoint_seconds, invalid_utf8=invalid_utf8, restart=restart)
    reason = {"vocab_size": "reached the vocabulary size", "no_pairs": "no pair left to merge"}
    typer.echo(f"{db}: {len(result.merges)} merges, vocab {len(result.vocab)} "
               f"({reason.get(result.stop_reason or '', result.phase)})", err=True)


from . import cli_tokenize  # noqa: E402  (commands defined in their own module)

cli_tokenize.register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; a BpeStoreError is one line on stderr and its exit code."""
    try:
        app(args=argv, standalone_mode=False)
    except BpeStoreError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        typer.echo("interrupted; the store is at its last checkpoint", err=True)
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.exit(130)
        raise
