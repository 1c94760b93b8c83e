"""The native core's counting functions (``bpe_store._core``), imported once: None where the
core is not built (a source tree without the extension: every pattern then goes through ``regex``).
"""

from __future__ import annotations

try:
    from .. import _core
except ImportError:  # pragma: no cover - a source tree without the built extension
    _core = None
if _core is not None:
    # Why not these imports inside the `try`: a core built from older sources (a stale editable
    # build) lacks some of these names, and every native counting path would then fall back to
    # `regex` silently, ~10x slower. A core that is there must have them all: ImportError here.
    from .._core import ChunkCounts, WordCounter
    from .._core import add_counts as _native_add_counts
    from .._core import count_chunk as _native_count_chunk
    from .._core import count_file_range as _native_count_file_range
    from .._core import count_strings as _native_count_strings
    from .._core import count_words as _native_count_words
    from .._core import pack_counts as _native_pack_counts
    from .._core import release_chunk_memory as _native_release_chunk_memory
    from .._core import utf8_valid as _native_utf8_valid
else:  # pragma: no cover - a source tree without the built extension: every pattern goes through `regex`
    ChunkCounts = WordCounter = None  # type: ignore[assignment,misc]
    _native_add_counts = _native_count_chunk = _native_count_words = _native_utf8_valid = _native_count_strings = None
    _native_pack_counts = _native_count_file_range = _native_release_chunk_memory = None


try:  # the jsonl text-field extractor (native/jsonl.cpp); without it jsonl is read by parse_lines
    from .._core import jsonl_texts as _native_jsonl_texts
except ImportError:  # pragma: no cover - a source tree without the native core
    _native_jsonl_texts = None

