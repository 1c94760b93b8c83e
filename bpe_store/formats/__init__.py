"""Tokenizer files: the formats a vocabulary and its merges are read from and written to.

Owns the file formats that training and the tokenizer both read, so that neither imports the other
for them: ``tiktoken_files`` ``.tiktoken`` ranks files (read, written, checked); ``openai_ranks``
OpenAI's encodings found by name offline, their files read natively; ``gpt2_files`` GPT-2's
``vocab.json`` + ``merges.txt`` and their byte <-> unicode map.

A new file format a tokenizer is read from: a module here (and its line in the ``formats`` contract
of pyproject.toml's ``[tool.importlinter]``); writing it as an export is then an entry in
``tokenizer/export.py``. Uses the store's bounds (``store.params``), the native core's face and the
basics.
"""
