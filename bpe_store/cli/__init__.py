"""The command line: the ``bpe-store`` Typer app (also ``python -m bpe_store``, ``python cli.py``).

Owns every command, its options and help, and how errors and signals become exit codes.
``cli`` defines the app (train, status, sql, show, why, report, db ...) and ``main``;
``cli_tokenize`` adds the commands that use a trained store (encode, export).
A new command goes here, as a thin layer over the wings below; nothing below imports the CLI.
"""
