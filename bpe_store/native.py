"""The native core's one face: ``bpe_store._core`` (C++ through nanobind, sources in native/),
imported here and nowhere else, under one policy:

* **Not built** (a source tree without the extension): ``core`` is None and ``BUILT`` False, and
  every caller takes its Python twin (``regex`` pre-tokenization, the Python merge engine and
  tokenizer, the ``executemany`` store writes).
* **Built but not current** (an editable build from older sources that lacks a name these sources
  use): importing this module raises ImportError that names what is missing and how to rebuild.
  Never a silent fallback: every path would then take its Python twin, ~10x slower, and say nothing.

Whether a native path can run *here* beyond being built (the SQLite library the bulk writes need,
``store/native_connection.py``; ``BPE_STORE_NATIVE_DB=0``) is each path's own concern, not this module's.
``tests/layout``'s architecture test holds that no other module imports ``_core``.
"""

from __future__ import annotations

from types import ModuleType

try:
    from . import _core
except ImportError:  # pragma: no cover - a source tree without the built extension
    _core = None

#: Every name of ``_core`` the package uses: a built core lacking one is stale (rebuild it).
NAMES = ("ChunkCounts", "Encoder", "MergeEngine", "Splitter", "SqliteError", "StoreDb", "WordCounter", "WordIds",
         "WordRows", "add_counts", "count_chunk", "count_file_range", "count_strings", "count_words",
         "jsonl_texts", "pack_counts", "release_chunk_memory", "release_free_memory", "store_db_load",
         "TiktokenRanks", "tiktoken_base_merges", "tiktoken_merge_splits", "utf8_valid", "words_digest",
         "words_digest_packed", "write_query",
         "MergeLog", "read_merge_log")

#: The core, or None where it is not built.
core: ModuleType | None = _core
#: Whether the core is built into this installation (and current: else this module does not import).
BUILT = core is not None

if core is not None:
    _missing = [name for name in NAMES if not hasattr(core, name)]
    if _missing:
        raise ImportError(f"bpe_store._core is older than its sources (it lacks {', '.join(_missing)}): "
                          "rebuild it with pip install -e .")
    from ._core import ChunkCounts, WordCounter
    from ._core import add_counts as native_add_counts
    from ._core import count_chunk as native_count_chunk
    from ._core import count_file_range as native_count_file_range
    from ._core import count_strings as native_count_strings
    from ._core import count_words as native_count_words
    from ._core import jsonl_texts as native_jsonl_texts
    from ._core import pack_counts as native_pack_counts
    from ._core import release_chunk_memory as native_release_chunk_memory
    from ._core import utf8_valid as native_utf8_valid
else:  # pragma: no cover - a source tree without the built extension: every pattern goes through `regex`
    ChunkCounts = WordCounter = None  # type: ignore[assignment,misc]
    native_add_counts = native_count_chunk = native_count_words = native_utf8_valid = native_count_strings = None
    native_pack_counts = native_count_file_range = native_release_chunk_memory = native_jsonl_texts = None
