"""The command line: the ``bpe-store`` Typer app (also ``python -m bpe_store``, ``python cli.py``)."""
