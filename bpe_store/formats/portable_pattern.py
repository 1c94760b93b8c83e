"""A pre-tokenization pattern rewritten so that other regex engines read it as ``regex`` does.

bpe_store splits text with the ``regex`` module; its exports are read by engines with other
rules: HuggingFace ``tokenizers`` uses Oniguruma (Ruby syntax), tiktoken uses Rust's
``fancy-regex``. The same pattern text means different things to them:

* ``X{1,3}+`` is possessive in ``regex``, but "``X{1,3}``, repeated" in Oniguruma's Ruby syntax,
  so GPT-4's ``\\p{N}{1,3}+`` splits ``1000`` as ``1|000`` instead of ``100|0``;
* ``$`` is the end of the text or before a final newline in ``regex``, the end of any *line* in
  Oniguruma, the end of the text only in Rust;
* ``\\p{L}``, ``\\p{N}``, ``\\s``... follow each engine's own Unicode tables (``regex`` knows
  letters that Oniguruma and Rust do not yet);
* ``(?i:...)`` folds case by each engine's tables.

``portable_pattern`` parses a ``regex`` pattern (version 0 syntax) and writes one that leaves
nothing to an engine's defaults: every character class, escape, literal under ``(?i)`` and
``.`` becomes an explicit class of code points computed *by ``regex`` itself* over all of
Unicode (so the classes are those of the installed ``regex``); possessive quantifiers become
atomic groups; anchors become ``\\A``, ``\\z`` or lookarounds; groups become non-capturing. The
result reads the same in ``regex``, Oniguruma and ``fancy-regex`` (each supports ``(?>...)``,
``(?=...)``, ``(?<!...)`` with a fixed width, ``\\x{...}`` and lazy quantifiers alike).

What it cannot say exactly it refuses (``PatternTranslationError`` naming the construct):
capturing groups (bpe_store's ``findall`` yields their text, not the match), backreferences,
conditionals, recursion, word boundaries, fuzzy matching, version 1 syntax and flags other
than ``i``, ``m``, ``s``, ``a``, ``u``; a lookbehind whose width is not fixed; and
a pattern that can match the empty string (engines differ in where they resume after one).
After translating, the result is checked against the original with ``regex`` on probe texts
drawn from the pattern's own classes, so a translation is only returned when both agree.

>>> print(portable_pattern(r"[a-c]{1,3}+|'(?i:s)| $", ascii_probe=True).replace(chr(0x10FFFF), "<max>"))
(?>[a-c]{1,3})|\\u0027(?:[Ss\\u017F])|\\u0020(?![^\\u000A]|\\u000A[\\u0000-<max>])
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

import regex

from ..errors import InputError


class PatternTranslationError(InputError):
    """The pattern uses something that cannot be written for other engines with the same meaning."""


@lru_cache(maxsize=1)
def _all_chars() -> str:
    """Every code point a Python ``str`` from valid UTF-8 can hold (surrogates cannot be encoded).
    Made on first use, not at import: ~0.1 s of CPU that every ``bpe-store`` command paid, since
    the CLI imports the exports for their format names."""
    return "".join(map(chr, range(0xD800))) + "".join(map(chr, range(0xE000, 0x110000)))


def __getattr__(name: str) -> str:
    if name == "_ALL_CHARS":  # the tests' name for it
        return _all_chars()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_MAX = 0x10FFFF
#: Flags whose meaning the class computation carries over (passed to ``regex`` with each atom).
_CLASS_FLAGS = set("iasu")
_ANY = "[\\u0000-\U0010FFFF]"  # any character: "no character follows" is the end of the text
#: Single-character escapes ``regex`` reads as a class or a literal (computed, never copied).
_CLASS_ESCAPES = set("dDwWsStnrfvae")
#: A quantifier as ``regex`` reads one (a ``{`` that forms none is a literal): ``*``, ``+``,
#: ``?``, ``{n}``, ``{n,}``, ``{n,m}``, ``{,m}``, ``{,}``, then ``?`` (lazy) or ``+`` (possessive).
_QUANTIFIER = regex.compile(r"(?:(?P<sym>[*+?])|\{(?=[\d,])(?P<lo>\d*)(?:(?P<comma>,)(?P<hi>\d*))?\})(?P<mode>[?+]?)")


def _cp(c: int) -> str:
    """A code point written the way all three engines read it: ASCII letters and digits as
    themselves, the rest of the BMP as ``\\uHHHH``, the other planes as the character itself
    (no escape for them is common to ``regex``, Oniguruma and fancy-regex; none is a metacharacter).
    """
    ch = chr(c)
    if ch.isascii() and ch.isalnum() or c > 0xFFFF:
        return ch
    return f"\\u{c:04X}"


@lru_cache(maxsize=256)
def char_set(atom: str, flags: str = "") -> tuple[tuple[int, int], ...]:
    """The code points one single-character ``atom`` (a class, an escape, a literal, ``.``)
    matches in ``regex`` under inline ``flags``, as sorted inclusive ranges ``((lo, hi), ...)``.

    >>> char_set("(?:[a-c])")
    ((97, 99),)
    >>> char_set("s", "i")   # LATIN SMALL LETTER LONG S folds to s
    ((83, 83), (115, 115), (383, 383))
    """
    try:
        compiled = regex.compile(f"(?{flags}){atom}" if flags else atom)
    except regex.error as exc:
        raise PatternTranslationError(f"{atom!r} does not compile alone: {exc}") from None
    ranges: list[list[int]] = []
    for m in compiled.finditer(_all_chars()):
        c = ord(m.group())
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1][1] = c
        else:
            ranges.append([c, c])
    return tuple((lo, hi) for lo, hi in ranges)


def _emit_set(ranges: tuple[tuple[int, int], ...]) -> str:
    """A class for ``ranges``: one literal, ``[...]``, or ``[^...]`` when the complement is shorter."""
    if not ranges:
        raise PatternTranslationError("a character class that matches no character")
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return _cp(ranges[0][0])
    complement: list[tuple[int, int]] = []
    nxt = 0
    for lo, hi in ranges:
        if lo > nxt:
            complement.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= _MAX:
        complement.append((nxt, _MAX))
    # the surrogates never occur in text: leaving them out of the complement changes nothing
    complement = [r for r in complement if not (r[0] >= 0xD800 and r[1] <= 0xDFFF)]
    if not complement:
        return _ANY
    negate = len(complement) < len(ranges)
    body = "".join(_cp(lo) if lo == hi else f"{_cp(lo)}-{_cp(hi)}" for lo, hi in (complement if negate else ranges))
    return f"[^{body}]" if negate else f"[{body}]"


@dataclass
class _Piece:
    """A translated sub-pattern: its text, its least width in characters, and its width when
    every match has the same one (None otherwise) — a lookbehind needs a fixed width."""

    text: str
    least: int
    fixed: int | None


class _Translator:
    """Recursive descent over ``regex`` version 0 syntax, writing the portable form as it goes."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0
        self.flags: set[str] = set()
        self.sets: set[tuple[tuple[int, int], ...]] = set()  # every class emitted (for probes)

    def fail(self, what: str) -> PatternTranslationError:
        return PatternTranslationError(f"{what} (at offset {self.i} of the pattern)")

    def peek(self, n: int = 1) -> str:
        return self.p[self.i:self.i + n]

    # -- structure ---------------------------------------------------------------------------

    def translate(self) -> _Piece:
        self._leading_flags()
        piece = self.alternation()
        if self.i != len(self.p):
            raise self.fail("an unbalanced ')'")
        return piece

    def _leading_flags(self) -> None:
        """``(?flags)`` at the very start applies to the whole pattern (anywhere else: refused)."""
        m = regex.match(r"\(\?([a-zA-Z0-9]+)\)", self.p)
        if m:
            self.flags = self._check_flags(m.group(1))
            self.i = m.end()

    def _check_flags(self, letters: str) -> set[str]:
        bad = sorted(set(letters) - _CLASS_FLAGS - set("ms"))
        if bad:
            raise self.fail(f"the flag(s) {''.join(bad)!r} (only i, m, s, a and u can be translated)")
        return set(letters)

    def alternation(self) -> _Piece:
        alts = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            alts.append(self.sequence())
        widths = {a.fixed for a in alts}
        return _Piece("|".join(a.text for a in alts), min(a.least for a in alts),
                      widths.pop() if len(widths) == 1 else None)

    def sequence(self) -> _Piece:
        parts: list[_Piece] = []
        while self.i < len(self.p) and self.peek() not in "|)":
            atom = self.atom()
            if atom is None:
                continue  # a comment
            parts.append(self.quantified(atom))
        fixed = None if any(p.fixed is None for p in parts) else sum(p.fixed for p in parts)  # type: ignore[misc]
        return _Piece("".join(p.text for p in parts), sum(p.least for p in parts), fixed)

    def quantified(self, atom: _Piece) -> _Piece:
        m = _QUANTIFIER.match(self.p, pos=self.i)
        if not m:
            return atom
        self.i = m.end()
        if _QUANTIFIER.match(self.p, pos=self.i):
            raise self.fail("a quantifier on a quantifier")
        sym, lo_s, comma, hi_s, mode = m.group("sym", "lo", "comma", "hi", "mode")
        if sym:
            lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[sym]
        else:
            lo = int(lo_s) if lo_s else 0
            hi = (int(hi_s) if hi_s else None) if comma else lo
        if hi is not None and hi < lo:
            raise self.fail("a quantifier whose maximum is below its minimum")
        if sym:
            q = sym
        elif hi == lo:
            q = f"{{{lo}}}"
            mode = "" if mode == "?" else mode  # lazy {n} is {n}; Ruby syntax reads {n}? as optional
        else:
            q = f"{{{lo},{'' if hi is None else hi}}}"
        body = atom.text if _is_single(atom.text) else f"(?:{atom.text})"
        fixed = atom.fixed * lo if atom.fixed is not None and hi == lo else None
        least = atom.least * lo
        if mode == "+":  # possessive: an atomic group says it in every engine
            return _Piece(f"(?>{body}{q})", least, fixed)
        return _Piece(f"{body}{q}{mode}", least, fixed)

    # -- atoms ---------------------------------------------------------------------------------

    def atom(self) -> _Piece | None:
        c = self.peek()
        if c == "(":
            return self.group()
        if c == "[":
            return self.char_class(self.class_extent())
        if c == "\\":
            return self.escape()
        if c == ".":
            self.i += 1
            return self.char_class(".")
        if c == "^":
            self.i += 1
            return _Piece("(?<![^\\u000A])" if "m" in self.flags else r"\A", 0, 0)
        if c == "$":
            self.i += 1
            # regex: the end of the text or before a final newline (any newline with (?m))
            text = "(?![^\\u000A])" if "m" in self.flags else f"(?![^\\u000A]|\\u000A{_ANY})"
            return _Piece(text, 0, 0)
        if _QUANTIFIER.match(self.p, pos=self.i):
            raise self.fail(f"a quantifier {c!r} with nothing to repeat")
        self.i += 1
        if "x" in self.flags:  # pragma: no cover - refused in _check_flags
            raise self.fail("verbose mode")
        return self.char_class(regex.escape(c))

    def char_class(self, atom: str) -> _Piece:
        ranges = char_set(atom, "".join(sorted(self.flags & _CLASS_FLAGS)))
        self.sets.add(ranges)
        return _Piece(_emit_set(ranges), 1, 1)

    def class_extent(self) -> str:
        """The text of a ``[...]`` class (version 0: no nested sets, ``]`` first is literal)."""
        start = self.i
        j = self.i + 1
        if j < len(self.p) and self.p[j] == "^":
            j += 1
        if j < len(self.p) and self.p[j] == "]":
            j += 1
        while j < len(self.p) and self.p[j] != "]":
            if self.p[j] == "\\":
                m = regex.match(r"\\[pPNxuU]\{[^}]*\}|\\.", self.p, pos=j, flags=regex.S)
                j = m.end() if m else j + 2
            elif self.p.startswith("[:", j):
                end = self.p.find(":]", j + 2)
                if end < 0:
                    raise self.fail("an unterminated POSIX class")
                j = end + 2
            else:
                j += 1
        if j >= len(self.p):
            raise self.fail("an unterminated character class")
        self.i = j + 1
        return self.p[start:self.i]

    def escape(self) -> _Piece:
        m = regex.match(r"\\(?:[pP]\{[^}]*\}|[pP][A-Za-z]|N\{[^}]*\}|x\{[0-9A-Fa-f]+\}|x[0-9A-Fa-f]{2}"
                        r"|u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|.)", self.p, pos=self.i, flags=regex.S)
        if not m:
            raise self.fail("a pattern that ends in a backslash")
        text = m.group()
        c = text[1]
        if c == "A":
            self.i = m.end()
            return _Piece(r"\A", 0, 0)
        if c == "Z":  # regex's \Z is the very end of the text (Oniguruma's \Z is not)
            self.i = m.end()
            return _Piece(r"\z", 0, 0)
        if c.isalnum() and len(text) == 2 and c not in _CLASS_ESCAPES:
            raise self.fail(f"the escape {text!r} (backreferences, word boundaries, \\G, \\X and the like "
                            "cannot be translated)")
        self.i = m.end()
        return self.char_class(text)

    def group(self) -> _Piece | None:
        self.i += 1  # '('
        saved = set(self.flags)
        kind = ""
        m = regex.match(r"\?(?:(#)[^)]*\)|(:|=|!|<=|<!|>)|([a-zA-Z]*)(?:-([a-zA-Z]+))?(:))",
                        self.p, pos=self.i)
        if self.peek() == "?":
            if not m:
                raise self.fail("this kind of group (a named group or backreference, a conditional, "
                                "recursion, a branch reset, or flags set after the start)")
            self.i = m.end()
            if m.group(1):
                return None  # (?#comment)
            kind = m.group(2) or ""
            if m.group(5):  # (?on-off:...)
                self.flags |= self._check_flags(m.group(3) or "")
                self.flags -= self._check_flags(m.group(4) or "")
                kind = ":"
        inner = self.alternation()
        if self.peek() != ")":
            raise self.fail("an unterminated group")
        self.i += 1
        self.flags = saved
        if kind in ("<=", "<!") and inner.fixed is None:
            raise self.fail("a lookbehind whose matches differ in width (Oniguruma and fancy-regex "
                            "need a fixed width)")
        if kind in ("=", "!", "<=", "<!"):
            return _Piece(f"(?{kind}{inner.text})", 0, 0)
        if kind == ">":
            return _Piece(f"(?>{inner.text})", inner.least, inner.fixed)
        return _Piece(f"(?:{inner.text})", inner.least, inner.fixed)


def _is_single(text: str) -> bool:
    """Whether ``text`` is one atom a quantifier applies to as a whole (a literal, a class, or a
    group that spans all of it)."""
    if regex.fullmatch(r"[A-Za-z0-9\U00010000-\U0010FFFF]|\\u[0-9A-F]{4}", text):
        return True
    if text.startswith("[") and text.endswith("]"):
        return _closing(text, 0) == len(text) - 1
    if text.startswith("(") and text.endswith(")"):
        return _closing(text, 0) == len(text) - 1
    return False


def _closing(text: str, start: int) -> int:
    """The index of the bracket closing the one at ``start`` in text this module wrote (its
    classes hold no brackets, only ``\\uHHHH`` escapes and characters that are no metacharacter)."""
    opening = text[start]
    if opening == "[":
        return text.index("]", start)
    depth = 0
    j = start
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 6 if text.startswith("\\u", j) else 2
            continue
        if ch == "[":
            j = text.index("]", j) + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    raise ValueError(f"unbalanced {text!r}")


#: Characters every probe alphabet holds: the line breaks, spaces and marks where the known
#: patterns and engines differ.
_PROBE_BASE = "\n\r\t \x0b\x0c\x85\xa0\u2028\u3000'sSlLdDmMtTvVeErR1234567890aZé中١٢\u0301\u200d🙃.,-/!"


def _probes(sets: set[tuple[tuple[int, int], ...]], seed: int = 0, n: int = 3000) -> list[str]:
    """Texts to compare the translation with the original on: random strings over an alphabet of
    a few members of every class the pattern uses (its ends and a middle) and ``_PROBE_BASE``."""
    alphabet = set(_PROBE_BASE)
    for ranges in sets:
        for lo, hi in ranges[:3] + ranges[-3:]:
            alphabet.update({chr(lo), chr(hi), chr((lo + hi) // 2)})
        if len(ranges) > 6:
            alphabet.update(chr(lo) for lo, _ in random.Random(len(ranges)).sample(ranges, 6))
    alphabet = {c for c in alphabet if not 0xD800 <= ord(c) < 0xE000}
    letters = sorted(alphabet)
    rng = random.Random(seed)
    return ["".join(rng.choice(letters) for _ in range(rng.randint(0, 24))) for _ in range(n)]


@lru_cache(maxsize=32)
def portable_pattern(pattern: str, *, ascii_probe: bool = False) -> str:
    """``pattern`` rewritten to mean the same in ``regex``, Oniguruma and fancy-regex (see the
    module docstring), or PatternTranslationError saying what cannot be rewritten.

    ``ascii_probe`` limits the self-check to a few ASCII probes (for doctests only).
    """
    try:
        original = regex.compile(pattern)
    except regex.error as exc:
        raise PatternTranslationError(f"the pattern does not compile with regex: {exc}") from None
    if original.groups:
        # bpe_store pre-tokenizes with findall, which yields a group's text instead of the match
        raise PatternTranslationError("the pattern has capturing groups, so bpe_store's pre-tokens are the "
                                      "groups' text, which no other loader reproduces; write (?:...)")
    t = _Translator(pattern)
    piece = t.translate()
    if piece.least == 0:
        raise PatternTranslationError("the pattern can match the empty string; engines differ in where they "
                                      "resume after an empty match")
    out = piece.text
    translated = regex.compile(out)
    probes = ["1000 \n", "a\n  ", "x"] if ascii_probe else _probes(t.sets)
    for text in probes:
        want = [m.span() for m in original.finditer(text)]
        if [m.span() for m in translated.finditer(text)] != want:
            raise PatternTranslationError(f"the rewritten pattern splits {text!r} differently; it cannot be "
                                          "translated with certainty")
    return out
