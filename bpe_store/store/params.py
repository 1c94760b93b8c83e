"""A run's parameters and the checks of a ``run`` row: what defines a run's result, the bounds its
values must keep (the one statement of each: ``training.options`` checks a new run's options
against the same), and the refusal of a row or pattern bpe_store could not have written.

Below the store: options and callers import ``RunParams`` without importing the store itself.
A new run parameter is a field here, a column (a migration in migrations/versions) and a check in
``check_run``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import StoreError

if TYPE_CHECKING:
    from ..text.pretokenize import PretokenSpec

#: Most special tokens a run may have (a store with more is refused as damaged or hostile: each
#: becomes an alternative of the special-token regex, and 200 K of them took minutes to compile).
MAX_SPECIAL_TOKENS = 10_000
#: Token ids are uint32 (the merge engine and ``words.tokens`` hold them so) and 0xFFFFFFFF marks
#: "no token" in the engine, so the largest vocabulary has ids 0 .. 2^32 - 2.
MAX_VOCAB_SIZE = (1 << 32) - 1
#: The policies for bytes that are not UTF-8: refuse them, or decode them as U+FFFD.
INVALID_UTF8_POLICIES = ("strict", "replace")
#: ``min_frequency``: word counts are 64-bit.
MAX_MIN_FREQUENCY = (1 << 63) - 1
#: ``max_token_length``: a merge joins two tokens of at least one byte each; a token id's bytes
#: are at most 4 GiB.
MIN_MAX_TOKEN_LENGTH, MAX_MAX_TOKEN_LENGTH = 2, 1 << 32
#: ``max_pretoken_bytes``: one character (4 bytes) must fit a piece; above 64 MiB a word's token
#: blob (4 bytes per byte) nears SQLite's 1 GB default limit on a value.
MIN_MAX_PRETOKEN_BYTES, MAX_MAX_PRETOKEN_BYTES = 4, 1 << 26
#: Longest pre-tokenization pattern a store may hold (characters).
MAX_PATTERN_CHARS = 10_000
#: A store's pattern must scan these probes within ``PATTERN_PROBE_SECONDS``: a pattern with
#: catastrophic backtracking, such as ``(a|aa)+$``, is refused instead of hanging every encode.
PATTERN_PROBES = ("a" * 40 + "!", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n!", " " * 40 + "!", "1" * 40 + "!",
                  "ab " * 20 + "\u00e9\u4e2d!")
PATTERN_PROBE_SECONDS = 1.0


@dataclass(frozen=True)
class RunParams:
    """What defines a run's result. A resume must give the same (vocab_size may grow)."""

    pattern: str
    special_tokens: tuple[str, ...]
    vocab_size: int
    invalid_utf8: str = "strict"
    #: words counted fewer times take part in no pair (1: every word, CS336's semantics)
    min_frequency: int = 1
    #: no merge makes a token longer than this many bytes (None: no limit)
    max_token_length: int | None = None
    #: pre-tokens longer than this count as pieces (pretokenize.split_long_pretoken); None: no
    #: limit (stores from before the limit existed)
    max_pretoken_bytes: int | None = None
    #: a superword store (SuperBPE's stage 2, docs/superword.md): its first ``superword_from``
    #: merges are stage 1's, of a store of ``stage1_pattern``; its merges from there on obey the
    #: superword rule with ``superword_max_words``. All three None in any other store.
    superword_from: int | None = None
    stage1_pattern: str | None = None
    superword_max_words: int | None = None

    @property
    def num_merges(self) -> int:
        return self.vocab_size - 256 - len(self.special_tokens)

    @property
    def pretoken_spec(self) -> PretokenSpec:
        """How this run's text becomes pre-tokens, as the one value counting's tasks and streams take."""
        from ..text.pretokenize import PretokenSpec

        return PretokenSpec(tuple(self.special_tokens), self.pattern, self.invalid_utf8, self.max_pretoken_bytes)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_pattern(pattern: str, where: str) -> None:
    """Refuse a stored pre-tokenization pattern that a run could not have written (StoreError
    naming ``where``)."""
    problem = pattern_problem(pattern)
    if problem:
        raise StoreError(f"{where}: its pattern {problem}")


def pattern_problem(pattern: str) -> str | None:
    """Why a store may not hold ``pattern`` (too long, does not compile, backtracks
    catastrophically), or None: said once, for the store's check and a new run's
    (``training.options``). The shipped patterns are not compiled again (the tests compile each:
    compiling GPT-2's costs ~30 ms)."""
    from ..text.pretokenize import PATTERNS

    if pattern in PATTERNS.values():
        return None
    problem = pattern_length_problem(pattern)
    if problem:
        return problem
    import regex

    try:
        compiled = regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError) as exc:
        return f"does not compile: {exc}"
    return pattern_probe_problem(pattern, compiled)


def pattern_length_problem(pattern: str) -> str | None:
    """Why ``pattern`` is too long for a store (``MAX_PATTERN_CHARS``), or None: said once, for
    the store's check and a new run's (``training.options``)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"is {len(pattern)} characters long (at most {MAX_PATTERN_CHARS})"
    return None


def pattern_probe_problem(pattern: str, compiled: Any) -> str | None:
    """Why ``pattern`` (``compiled``) backtracks catastrophically on ``PATTERN_PROBES``, or None:
    said once, for the store's check and a new run's (``training.options``)."""
    try:
        for probe in PATTERN_PROBES:
            for _ in compiled.finditer(probe, timeout=PATTERN_PROBE_SECONDS):
                pass
    except TimeoutError:
        return (f"{pattern[:60]!r} takes more than {PATTERN_PROBE_SECONDS:g} s on a 41-character probe "
                "(catastrophic backtracking); refusing it")
    return None


def check_run(p: Path, row: dict[str, Any]) -> None:
    """Refuse (StoreError) a ``run`` row that bpe_store could not have written."""
    where = f"{p}: the store's run row is damaged"
    try:
        specials = json.loads(row["special_tokens"]) if isinstance(row["special_tokens"], str) else None
    except (ValueError, RecursionError):
        specials = None
    if not isinstance(specials, list) or not all(isinstance(s, str) and s for s in specials):
        raise StoreError(f"{where} (special_tokens is not a JSON list of non-empty strings)")
    if len(specials) > MAX_SPECIAL_TOKENS:
        raise StoreError(f"{where} ({len(specials)} special tokens; at most {MAX_SPECIAL_TOKENS})")
    if len(set(specials)) != len(specials):
        raise StoreError(f"{where} (a special token is listed twice)")
    for col in ("vocab_size", "chunk_size"):
        if not _is_int(row[col]) or row[col] < 1:
            raise StoreError(f"{where} ({col} is {row[col]!r}, not a positive integer)")
    if not 256 + len(specials) <= row["vocab_size"] <= MAX_VOCAB_SIZE:
        raise StoreError(f"{where} (vocab_size {row['vocab_size']} is out of range)")
    if row["phase"] not in ("counting", "merging", "done"):
        raise StoreError(f"{where} (phase {row['phase']!r})")
    if row["stop_reason"] not in (None, "vocab_size", "no_pairs"):
        raise StoreError(f"{where} (stop_reason {row['stop_reason']!r})")
    if row["invalid_utf8"] not in INVALID_UTF8_POLICIES:
        raise StoreError(f"{where} (invalid_utf8 {row['invalid_utf8']!r})")
    # the trainer options (absent before v0_3_0_trainer_options, which status still reads)
    if "min_frequency" in row and not (
            _is_int(row["min_frequency"]) and 1 <= row["min_frequency"] <= MAX_MIN_FREQUENCY):
        raise StoreError(f"{where} (min_frequency {row['min_frequency']!r})")
    if row.get("max_token_length") is not None and not (
            _is_int(row["max_token_length"])
            and MIN_MAX_TOKEN_LENGTH <= row["max_token_length"] <= MAX_MAX_TOKEN_LENGTH):
        raise StoreError(f"{where} (max_token_length {row['max_token_length']!r})")
    for col in ("state_merges", "pairs_merges"):  # NULL: not kept (absent in older revisions)
        if row.get(col) is not None and not (_is_int(row[col]) and 0 <= row[col] < 1 << 32):
            raise StoreError(f"{where} ({col} {row[col]!r})")
    limit = row.get("max_pretoken_bytes")  # NULL: no limit (stores from before v0_3_0)
    if limit is not None and (not _is_int(limit) or not MIN_MAX_PRETOKEN_BYTES <= limit <= MAX_MAX_PRETOKEN_BYTES):
        raise StoreError(f"{where} (max_pretoken_bytes {limit!r} is not an integer in "
                         f"{MIN_MAX_PRETOKEN_BYTES}..{MAX_MAX_PRETOKEN_BYTES})")
    if not isinstance(row["pattern"], str):
        raise StoreError(f"{where} (pattern is not text)")
    check_pattern(row["pattern"], str(p))
    _check_superword(p, where, row)


def _check_superword(p: Path, where: str, row: dict[str, Any]) -> None:
    """Refuse a superword store's columns (``RunParams.superword_from``...) that a run could not
    have written: all three or none, a transition point within the merges, a positive word limit."""
    cols = [row.get(c) for c in ("superword_from", "stage1_pattern", "superword_max_words")]
    if all(c is None for c in cols):
        return
    t, pattern, words = cols
    if not (_is_int(t) and 0 <= t <= row["vocab_size"]) or not (_is_int(words) and 1 <= words < 1 << 31):
        raise StoreError(f"{where} (superword_from {t!r}, superword_max_words {words!r})")
    if not isinstance(pattern, str):
        raise StoreError(f"{where} (stage1_pattern is not text)")
    check_pattern(pattern, str(p))
