"""The command line: the ``bpe-store`` Typer app (also ``python -m bpe_store``, ``python cli.py``).

Owns every command, its options and help, and how errors and signals become exit codes. From the top:

- ``main``: ``main``, the entry point; it imports the command modules, in the order ``--help`` lists
  their commands;
- one module per command group, each attaching its commands to the one app with ``@app.command()``:
  ``train_cmd`` (train), ``inspect_cmds`` (status, sql, show, why, report), ``tokenize_cmds``
  (encode, export), ``db_cmds`` (db upgrade);
- ``running`` (progress display and signal handling of a long command), ``input_args`` (how train
  and encode name their inputs) and ``output`` (rows as tables, CSV, JSON);
- ``app``: the Typer app and the ``db`` sub-app, help formatting, error -> exit code, shared options.

A new command: a function decorated with ``@app.command()`` in the module of its group (or a new
``*_cmds`` module, imported in ``main``), as a thin layer over the wings below; nothing below imports
the CLI.
"""
