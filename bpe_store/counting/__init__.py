"""Counting: the map step, from inputs to word counts (no store, no UI).

Owns what a corpus is and how its words are counted. From the top:

- ``ray_count`` runs the map step on a Ray cluster; ``parallel`` on threads;
- ``count`` counts the words of one chunk or unit (native or ``regex``); ``planning`` checks and
  fingerprints the inputs and cuts them into work units;
- the input readers: ``streams`` (stdin, iterables), ``units`` (a unit read into text blocks),
  ``jsonl`` and ``parquet`` (the document formats), ``decompress`` (compressed files);
- ``inputs`` what an input and a unit are (kinds, formats, compressions); ``chunks`` where a text
  may be cut; ``fingerprint`` a source file checked and fingerprinted;
- ``pretokenize`` the patterns (``PATTERNS``, ``GPT2_PATTERN``), the splitter and ``DOC_SEP``;
  ``sources`` names a counted piece; ``native`` the native core's counting functions.

A new input kind: its format in ``inputs`` (``FORMATS``, the suffixes), a reader module beside
``jsonl`` and ``parquet``, and its case in ``units.unit_blocks`` and ``planning.plan_units``.
A new pattern: ``pretokenize.PATTERNS`` (and a native scanner in native/ to count it fast).
"""
