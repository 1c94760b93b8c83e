"""Text: a corpus read into text and pre-tokens, the bottom wing every other one reads through.

Owns what an input is and how its text is read, cut and split (no counting, no store, no UI). From
the top:

- ``whole_inputs`` an input read whole (the tokenizer's ``encode``); ``streams`` stdin and Python
  iterables; ``units`` a work unit read into text blocks;
- ``jsonl`` and ``parquet`` the document formats; ``decompress`` compressed files; ``inputs``
  what an input and a unit are (kinds, formats, compressions); ``chunks`` where a text file may be
  cut; ``input_checks`` a source file opened and checked;
- ``fingerprint`` a file's fingerprint, its UTF-8 checked in the same read;
- ``pretokenize`` the patterns (``PATTERNS``, ``GPT2_PATTERN``), special tokens, the splitter and
  ``DOC_SEP``; ``sources`` a counted piece of input; ``superword_split`` superword stage 2's pieces
  (``STAGE2_PATTERN``) and its rule of which merges may join words.

A new input kind: its format in ``inputs`` (``FORMATS``, the suffixes), a reader module beside
``jsonl`` and ``parquet`` (and its line in the ``text`` contract of pyproject.toml's
``[tool.importlinter]``), its case in ``units.unit_blocks`` and ``counting.planning.plan_units``,
the CLI's ``InputFormat`` (cli/input_args.py) and docs/cli.md (``python tools/gen_cli_docs.py``).
A new named pattern: one ``pretokenize.PatternSpec`` registered beside the others (its name,
aliases, regex, native scanner, label and help note): ``PATTERNS``, the status label, the
``--pattern`` help and completion derive from it, and an export's rewrite for other regex engines
needs nothing (``formats.portable_pattern`` rewrites any pattern). If it has a native scanner: a
row of ``BPE_NATIVE_PATTERNS`` (native/scanner_impl.h: the enum, the names ``pattern_of`` reads and
``_core.SCANNERS`` come from it), the scanner's code (a scan_*.h beside scan_gpt2.h), its case in
``scan_pattern`` and in splitter.h's cut rules (``pattern_local_cut``, ``same_class_at``), then a
rebuild (``pip install -e .``); tests/text/test_pattern_registry.py holds the registry and the
native table equal, and tests/text/test_pattern_scanners.py tests every scanner against ``regex``.
Then its name in training/options.py's docstring (checked by the same registry test) and docs/cli.md
regenerated (``python tools/gen_cli_docs.py``).
Uses only the native core's face (``bpe_store.native``) and the basics.
"""
