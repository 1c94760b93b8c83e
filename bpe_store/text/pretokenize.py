"""Pre-tokenization: split text at special tokens, then into pre-tokens by a pattern.

This is the Python (``regex``) path and the specification the native scanner must match.
Special tokens split the text first; no pre-token ever crosses one and they are never counted.
A pattern is a regex or one of the names in ``PATTERNS`` (``resolve_pattern``). Every named
pattern has a native scanner (``NATIVE_SCANNERS``; native/scanner_impl.h), tested to split exactly
as ``regex`` does; a user's own regex goes through ``regex``.

>>> list(pretokenize("Hi there<|endoftext|>it's", ["<|endoftext|>"]))
['Hi', ' there', 'it', "'s"]
"""

from __future__ import annotations

import difflib
import re as _re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..errors import PatternError
from .superword_split import STAGE2_PATTERN

TYPE_CHECKING = False  # not typing's (its import costs more than this module)
if TYPE_CHECKING:
    import regex

#: Separates documents inside a block: never part of valid UTF-8, so no text can contain it. Counting
#: splits at it as at a special token, so no pre-token crosses a document boundary.
DOC_SEP = b"\xff"
#: The GPT-2 pre-tokenization pattern, exactly as CS336 and tiktoken's r50k use it.
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
#: GPT-4's pattern: tiktoken's ``cl100k_base`` (tiktoken_ext/openai_public.py), verbatim.
CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
                  r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
#: GPT-4o's pattern: tiktoken's ``o200k_base`` (tiktoken_ext/openai_public.py), verbatim.
O200K_PATTERN = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
#: Llama 3's pattern: the Split pre-tokenizer of meta-llama/Meta-Llama-3-8B's tokenizer.json (and
#: ``pat_str`` of the tokenizer.py in Meta's llama3 repository), verbatim. cl100k's alternatives
#: without the possessive marks and without ``\s++$``.
LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
#: Qwen2's pattern: ``PRETOKENIZE_REGEX`` of transformers' models/qwen2/tokenization_qwen2.py (also
#: the Split pre-tokenizer of Qwen/Qwen2-7B's tokenizer.json), verbatim: Llama 3's, one digit a
#: pre-token.
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


@dataclass(frozen=True)
class PatternSpec:
    """A named pattern: the one entry everything about it is derived from (``PATTERNS``, the names
    ``describe_pattern`` shows, ``NATIVE_SCANNERS``, the ``--pattern`` help and completion, and so
    docs/cli.md). An export rewrites any pattern for other regex engines (``portable_pattern``),
    so a named one needs nothing more there.

    ``name``: what ``--pattern`` and ``pattern=`` accept (and ``aliases`` too: tiktoken's encoding
    names); ``regex``: the pattern, verbatim from its source; ``scanner``: its hand-written native
    scanner (a name in the native core's table, ``_core.SCANNERS``, from native/scanner_impl.h's
    ``BPE_NATIVE_PATTERNS``; "" for none: ``regex`` splits it);
    ``label``: how a store's status shows it (default ``name``); ``note``: its words in the
    ``--pattern`` help ("the default"); ``listed`` False: a pattern bpe_store applies itself
    (SuperBPE's stage 2), with a native scanner but no name a user gives: not in ``PATTERNS``,
    the help or the completion."""

    name: str
    regex: str
    scanner: str = ""
    aliases: tuple[str, ...] = ()
    label: str = ""
    note: str = ""
    listed: bool = True


#: The named patterns, in the order the help lists them.
PATTERN_SPECS: list[PatternSpec] = []
#: ``{name: regex}``: the names ``--pattern`` / ``pattern=`` accept instead of a regex. The
#: tiktoken encoding names are aliases. A name always wins over reading it as a regex (a regex
#: that is literally ``gpt2`` can be written ``(?:gpt2)``).
PATTERNS: dict[str, str] = {}
#: The name shown for each known regex (status, messages).
_NAME_OF: dict[str, str] = {}
#: ``{regex: scanner name}``: the patterns the native core scans itself (``bpe_store._core``'s
#: ``pattern`` arguments), each proved equal to ``regex`` by tests/text/test_scanner.py. The one place
#: that decides whether a pattern runs natively: counting, the planner's and the streams' cuts,
#: and the encoder all ask ``native_scanner``.
NATIVE_SCANNERS: dict[str, str] = {}


def register_pattern(spec: PatternSpec) -> None:
    """Add a named pattern (``bpe_store.text`` says what else a new one takes); its names must be new."""
    taken = [n for n in (spec.name, *spec.aliases) if n in PATTERNS]
    if taken:
        raise ValueError(f"pattern name(s) already registered: {', '.join(taken)}")
    PATTERN_SPECS.append(spec)
    if spec.listed:
        for name in (spec.name, *spec.aliases):
            PATTERNS[name] = spec.regex
        _NAME_OF.setdefault(spec.regex, spec.label or spec.name)
    if spec.scanner:
        NATIVE_SCANNERS.setdefault(spec.regex, spec.scanner)


for _spec in (PatternSpec("gpt2", GPT2_PATTERN, "gpt2", ("r50k_base",), note="the default"),
              PatternSpec("gpt4", CL100K_PATTERN, "cl100k", ("cl100k", "cl100k_base"), "gpt4 (cl100k)", "= cl100k"),
              PatternSpec("o200k", O200K_PATTERN, "o200k", ("o200k_base",)),
              PatternSpec("llama3", LLAMA3_PATTERN, "llama3"),
              PatternSpec("qwen2", QWEN2_PATTERN, "qwen2"),
              PatternSpec("superword", STAGE2_PATTERN, "superword", listed=False)):
    register_pattern(_spec)


@dataclass(frozen=True)
class PretokenSpec:
    """How a run's text becomes pre-tokens, as one value: its special tokens (they cut the text
    first and are never counted), its pattern (a regex, as ``resolve_pattern`` gives it), its
    invalid-UTF-8 policy ("strict" refuses, "replace" decodes as U+FFFD) and its piece bound (a
    pre-token longer than ``max_pretoken_bytes`` counts as pieces, ``split_long_pretoken``; None:
    no bound). Frozen and picklable: a counting task carries it to a thread or a Ray node whole."""

    special_tokens: tuple[str, ...]
    pattern: str = GPT2_PATTERN
    invalid_utf8: str = "strict"
    max_pretoken_bytes: int | None = None


def pattern_names_help() -> str:
    """The named patterns as the ``--pattern`` help lists them.

    >>> pattern_names_help()
    'gpt2 (the default), gpt4 (= cl100k), o200k, llama3, qwen2'
    """
    return ", ".join(f"{s.name} ({s.note})" if s.note else s.name for s in PATTERN_SPECS if s.listed)


def resolve_pattern(pattern: str | None) -> str:
    """The regex of ``pattern``: a name in ``PATTERNS`` gives its regex; a word that is no name
    (no regex syntax: ``gpt-2``) is refused (PatternError naming the closest names); anything else
    is taken as a regex itself (``compile_pattern`` or the run's check compiles it); None means
    GPT-2's.

    >>> resolve_pattern("gpt4") == CL100K_PATTERN and resolve_pattern(None) == GPT2_PATTERN
    True
    """
    if pattern is None:
        return GPT2_PATTERN
    regex = PATTERNS.get(pattern)
    if regex is not None:
        return regex
    if _LOOKS_LIKE_A_NAME.fullmatch(pattern):
        raise PatternError(unknown_pattern_message(pattern))
    return pattern


#: A pattern that holds no regex syntax (only ASCII letters, digits, ``_`` and ``-``): meant as a
#: name, never as a regex (as one it would match only that literal text and drop all the rest).
_LOOKS_LIKE_A_NAME = _re.compile(r"[A-Za-z0-9_-]+")


def unknown_pattern_message(name: str) -> str:
    """Why ``name`` is refused as a pattern, naming the closest known name (``difflib``), or all.

    >>> unknown_pattern_message("gpt-2")
    "'gpt-2' is not a known pattern name (did you mean gpt2?); a regex that is only a word can be written (?:gpt-2)"
    """
    close = difflib.get_close_matches(name.lower(), list(PATTERNS), n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}?" if close else f"known names: {', '.join(PATTERNS)}"
    return (f"{name!r} is not a known pattern name ({hint}); a regex that is only a word can be "
            f"written (?:{name})")


def checked_pattern(pattern: str | None) -> str:
    """``resolve_pattern``, and a regex that is no name compiled once to refuse it early
    (PatternError with ``regex``'s message) rather than at the first text; the named patterns are
    not compiled (the tests compile each)."""
    resolved = resolve_pattern(pattern)
    if resolved not in _NAME_OF:
        compile_pattern(resolved)
    return resolved


def compile_pattern(pattern: str):
    """``pattern`` (a regex, not a name) compiled by ``regex``; PatternError with ``regex``'s
    message if it does not compile."""
    import regex

    try:
        return regex.compile(pattern)
    except (regex.error, RecursionError, OverflowError) as exc:
        raise PatternError(f"the pattern {describe_pattern(pattern)} does not compile: {exc}") from None


def native_scanner(pattern: str) -> str:
    """The native scanner of a regex (``NATIVE_SCANNERS``), or "" for one without (a user's own).

    >>> native_scanner(O200K_PATTERN), native_scanner(r"\\w+")
    ('o200k', '')
    """
    return NATIVE_SCANNERS.get(pattern, "")


def describe_pattern(pattern: str) -> str:
    """A short name for a known regex (``o200k``), else the regex in quotes as the user typed it
    (backslashes not doubled; line breaks escaped, so a message stays one line)."""
    name = _NAME_OF.get(pattern)
    if name is not None:
        return name
    return "'" + "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in pattern) + "'"


def special_splitter(special_tokens: Sequence[str], keep: bool = False) -> regex.Pattern | None:
    """A pattern matching any special token, longest first (so a token that is a prefix of
    another never wins over it): the one statement of that rule in Python (native/splitter.h
    states it for the native splitter). ``keep``: one capturing group, so that ``split`` keeps the
    specials. None when there are no special tokens."""
    if not special_tokens:
        return None
    import regex  # Why imported here: a run on the native scanner never loads `regex` (cold start)

    alternatives = "|".join(regex.escape(s) for s in sorted(set(special_tokens), key=lambda s: (-len(s), s)))
    return regex.compile(f"({alternatives})" if keep else alternatives)


def cut_context(splitter) -> int:
    """Bytes of context a safe cut needs after it (and before it): a special token, or a UTF-8
    character, may go on that far. Said once, for counting's chunks and the tokenizer's streams."""
    return max(splitter.max_len, 4)


def is_gpt2(pattern: str) -> bool:
    """Whether ``pattern`` is GPT-2's (CS336's and tiktoken's r50k): the pattern whose pre-tokens
    a GPT-2 tokenizer (transformers' byte-level pre-tokenizer, vocab.json + merges.txt) makes."""
    return pattern == GPT2_PATTERN


def split_at_specials(text: str, special_tokens: Sequence[str]) -> list[str]:
    """The pieces of ``text`` between special tokens (the specials themselves dropped)."""
    splitter = special_splitter(special_tokens)
    return [text] if splitter is None else splitter.split(text)


def pretokenize(
    text: str, special_tokens: Sequence[str] = (), pattern: str = GPT2_PATTERN
) -> Iterator[str]:
    """Yield the pre-tokens of ``text``: the pattern's matches inside each special-free piece."""
    import regex

    compiled = regex.compile(pattern)
    for piece in split_at_specials(text, special_tokens):
        for m in compiled.finditer(piece):
            yield m.group()


def count_words(
    text: str, special_tokens: Sequence[str] = (), pattern: str = GPT2_PATTERN,
    max_pretoken_bytes: int | None = None,
) -> Counter[bytes]:
    """Word counts of ``text``: ``{pre-token as UTF-8 bytes: occurrences}``; a pre-token longer than
    ``max_pretoken_bytes`` counts as its pieces (``split_long_pretoken``).

    Empty matches (a pattern such as ``\\w*`` matches the empty string between words) are not
    pre-tokens: they hold no bytes to merge, so they are not counted.
    """
    import regex

    compiled = regex.compile(pattern)
    counts: Counter[str] = Counter()
    for piece in split_at_specials(text, special_tokens):
        # findall + Counter.update run in C; this is the fast pure-Python path. concurrent=True:
        # `regex` releases the GIL while matching, so counting threads run in parallel.
        counts.update(compiled.findall(piece, concurrent=True))
    counts.pop("", None)
    return split_long_words(Counter({w.encode("utf-8"): c for w, c in counts.items()}), max_pretoken_bytes)


def check_covered(pattern: str, piece: str, found: Sequence[str], compiled) -> None:
    """Refuse (PatternError) a pattern whose matches ``found`` in ``piece`` (text between special
    tokens) do not cover it: what no pre-token holds would be lost, silently, to training (never
    counted) and to encoding (no id spells it). Matches never overlap, so they cover ``piece``
    exactly when their lengths add up to its length: a sum, not a second match.
    """
    if sum(map(len, found)) == len(piece):
        return
    at = 0
    for m in compiled.finditer(piece):
        if m.start() > at:
            break
        at = max(at, m.end())
    ch = piece[at]
    raise PatternError(
        f"the pattern {describe_pattern(pattern)} leaves {ch!r} (U+{ord(ch):04X}, character {at} of a "
        f"{len(piece)}-character text) outside every pre-token: its matches must cover all the text outside "
        "special tokens, or what it skips is lost to training and encoding; add an alternative such as "
        "|\\s+|. to it")


def split_long_words(words: Counter[bytes], max_pretoken_bytes: int | None) -> Counter[bytes]:
    """``words`` with each pre-token longer than ``max_pretoken_bytes`` counted as its pieces
    (``split_long_pretoken``), in place; None or 0 means no limit."""
    if max_pretoken_bytes:
        for w in [w for w in words if len(w) > max_pretoken_bytes]:
            c = words.pop(w)
            for piece in split_long_pretoken(w, max_pretoken_bytes):
                words[piece] += c
    return words


def native_splitter(special_tokens: Sequence[str | bytes], pattern: str):
    """The one native splitter (``bpe_store._core.Splitter``, rules in native/splitter.h) for text
    split at ``special_tokens`` (str, or bytes such as the document separator 0xFF) and
    pre-tokenized by ``pattern``: where such text may be cut without changing a count or an id.
    The patterns with a native scanner have local rules (points decided by the neighbouring
    characters; GPT-2's finds points in CJK text too) and a scan from a known start finds points
    inside a pre-token longer than the maximum length; a user's own regex is cut only at
    special tokens, the one cut that is safe for any pattern. None without the native core."""
    from ..native import core

    if core is None:  # pragma: no cover - a source tree without the built extension
        return None
    specials = [s.encode("utf-8") if isinstance(s, str) else bytes(s) for s in special_tokens]
    return core.Splitter(specials, native_scanner(pattern))


def split_long_pretoken(word: bytes, max_bytes: int | None) -> list[bytes]:
    """The pieces a pre-token is counted as: itself, or, when it is longer than ``max_bytes``
    bytes, pieces of at most ``max_bytes``, each cut at the last UTF-8 character start that fits.

    Cut greedily from the pre-token's own start, so the pieces depend only on the pre-token (not
    on where it is in the input or how the input was chunked). ``max_bytes`` is at least 4 (one
    character always fits); None or 0 means no limit.

    >>> split_long_pretoken(b"abcdefg", 3)
    [b'abc', b'def', b'g']
    >>> split_long_pretoken("aébc".encode(), 3)  # é is 2 bytes: "aé" fits, "aéb" does not
    [b'a\\xc3\\xa9', b'bc']
    """
    if not max_bytes or len(word) <= max_bytes:
        return [word]
    pieces = []
    start = 0
    while len(word) - start > max_bytes:
        cut = start + max_bytes
        while cut > start + 1 and word[cut] & 0xC0 == 0x80:  # a continuation byte: back to the start
            cut -= 1
        pieces.append(word[start:cut])
        start = cut
    pieces.append(word[start:])
    return pieces
