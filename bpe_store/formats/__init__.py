"""Tokenizer files: the formats a vocabulary and its merges are read from and written to.

Owns the file formats that training and the tokenizer both read, so that neither imports the other
for them: ``bases`` any of them (or a store, at any merge) as the ``Base`` a run extends
(``train(..., extend=...)``); ``tiktoken_files`` ``.tiktoken`` ranks files (read, written,
checked); ``hf_files`` a byte-level BPE ``tokenizer.json`` read; ``openai_ranks`` OpenAI's
encodings found by name offline, their files read natively; ``gpt2_files`` GPT-2's ``vocab.json`` +
``merges.txt`` and their byte <-> unicode map; ``portable_pattern`` a pattern rewritten so that
other regex engines (tokenizers' Oniguruma, tiktoken's fancy-regex) split as ``regex`` does.

A new file format a tokenizer is read from: a module here (and its line in the ``formats`` contract
of pyproject.toml's ``[tool.importlinter]``); writing it as an export is then an entry in
``tokenizer/export.py``; a new kind of base, a branch in ``bases.load_base``. Uses the store (its
bounds, ``store.params``; a store read as a base), the text wing's patterns, the native core's face
and the basics.
"""
