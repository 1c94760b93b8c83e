"""A trained store as a tokenizer, and the files made from it.

Owns encoding and decoding and every output format. ``tokenizer`` (``Tokenizer``: encode, decode,
encode_iterable, encode_files) reads a store's merges, over ``tables`` (its merge tables, made
lazily), ``special_guard`` (tiktoken's allowed / disallowed special tokens) and ``raw_bytes``
(bytes that are not UTF-8); ``export`` writes HF tokenizer.json, GPT-2
vocab.json + merges.txt and tiktoken ranks (``export_store``, ``FORMATS``); ``token_files`` encodes
corpora into token files (.npy); ``outfiles`` makes output files and folders safely. The file
formats themselves (GPT-2's files, tiktoken's ranks, tokenizer.json read, the pattern rewritten for
other regex engines: ``portable_pattern``) are ``bpe_store.formats``, below.

A new export format: its writer in ``export`` and one ``export.Exporter`` entry in ``EXPORTERS``
(its name, writer, whether it writes transformers' files, whether its loader compiles the pattern,
its refusals): ``FORMATS``, ``export_store`` and the CLI's ``--format`` choices follow it; then
docs/cli.md (``python tools/gen_cli_docs.py``) and docs/tokenizer.md.
Stands beside training (neither imports the other); uses the file formats, the store, the text
wing, the merge rule (``bpe_store.bpe``) and the native core's face.
"""
