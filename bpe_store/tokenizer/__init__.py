"""A trained store as a tokenizer, and the files made from it.

Owns encoding and decoding and every output format. ``tokenizer`` (``Tokenizer``: encode, decode,
encode_iterable, encode_files) reads a store's merges; ``export`` writes HF tokenizer.json, GPT-2
vocab.json + merges.txt and tiktoken ranks (``export_store``, ``FORMATS``); ``token_files`` encodes
corpora into token files (.npy); ``gpt2_files`` reads and writes GPT-2's byte-to-unicode files and
``tiktoken_files`` OpenAI's .tiktoken ranks;
``outfiles`` makes output files and folders safely;
``portable_pattern`` rewrites a pattern so that other regex engines split as
``regex`` does. A new export format goes in ``export``.
"""
