"""Counting: the map step, from inputs to word counts (no store, no UI).

Owns what a corpus is and how its words are counted. ``inputs`` reads every input kind (files,
compressed, JSONL, parquet, iterables, stdin) into text blocks; ``sources`` names a counted piece;
``pretokenize`` holds the patterns (``GPT2_PATTERN``) and the splitter; ``count`` plans chunks and
counts words in them (native, parallel); ``ray_count`` runs the same map step on a Ray cluster.
A new input kind goes in ``inputs``, a new pattern in ``pretokenize``.
"""
