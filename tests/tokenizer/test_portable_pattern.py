"""``portable_pattern``: every named pattern, rewritten, splits text in Oniguruma (HuggingFace
``tokenizers``) and fancy-regex (tiktoken) exactly as the original does in ``regex``.

The proof has three parts: (1) every character class of a rewritten pattern holds the same code
points in all three engines, checked on all of Unicode; (2) the structure around the classes
(possessives, anchors, alternation) reads alike, checked on targeted and generated text; (3) the
exports built on it give bpe_store's ids (tests/tokenizer/test_export_patterns.py). A user's own pattern
is rewritten when it can be, and refused with the construct named when it cannot.
"""

from __future__ import annotations

import hashlib

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from test_patterns import tiktoken_pieces

from bpe_store.formats.portable_pattern import _ALL_CHARS, PatternTranslationError, portable_pattern
from bpe_store.text.pretokenize import PATTERNS

tokenizers = pytest.importorskip("tokenizers")
tiktoken = pytest.importorskip("tiktoken")

#: One name for each distinct regex of PATTERNS (names added later are tested too).
NAMED = list({regex: name for name, regex in reversed(PATTERNS.items())}.values())


def onig_pieces(text: str, pattern: str) -> list[str]:
    """Oniguruma's matches of ``pattern`` in ``text``, as the hf export's Split keeps them."""
    split = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), "removed", invert=True)
    return [p for p, _ in split.pre_tokenize_str(text)]


#: Characters a Split reads at once in the exhaustive class test: ``pre_tokenize_str`` on all
#: 1.1 M characters took ~1.25 CPU s whatever the class, in pieces of this size ~0.4 (its cost
#: grows faster than the text); the joined matches of runs are the same either way.
_ONIG_PIECE = 16_384


def onig_class_members(text: str, runs: str) -> str:
    """The characters of ``text`` that Oniguruma's ``runs`` (a class, ``+``) matches, in order."""
    return "".join("".join(onig_pieces(text[i:i + _ONIG_PIECE], runs)) for i in range(0, len(text), _ONIG_PIECE))


def regex_pieces(text: str, pattern: str) -> list[str]:
    return regex.findall(pattern, text)


# -- (1) classes: the same code points in every engine ---------------------------------------------

def _classes(pattern: str) -> set[str]:
    """The ``[...]`` classes of a rewritten pattern (their members are escapes or plain characters)."""
    return set(regex.findall(r"\[\^?(?:\\u[0-9A-F]{4}|[^\]\\])+\]", pattern))


def _rewritten_classes() -> list[str]:
    """Every class of every named pattern's rewrite, shortest first."""
    return sorted(set().union(*(_classes(portable_pattern(PATTERNS[n])) for n in NAMED)), key=len)


def test_classes_agree_at_every_range_edge():
    """A class is a union of ranges: every engine must place each edge where ``regex`` does. The
    characters at, just inside and just outside each edge (of the class and of its complement),
    and a middle one, are matched alike in the three engines (the fast half of the exhaustive
    test below)."""
    byte_ranks = {bytes([b]): b for b in range(256)}
    classes = _rewritten_classes()
    assert len(classes) >= 10
    for cls in classes:
        members = set()
        for m in regex.finditer(r"\\u([0-9A-F]{4})|([^\\\[\]^-])", cls):
            members.add(int(m.group(1), 16) if m.group(1) else ord(m.group(2)))
        probe = sorted({c + d for c in members for d in (-1, 0, 1)} | {(a + b) // 2 for a, b in zip(
            sorted(members), sorted(members)[1:])})
        text = "".join(chr(c) for c in probe if 0 <= c <= 0x10FFFF and not 0xD800 <= c < 0xE000)
        want = regex.findall(cls, text)
        assert onig_pieces(text, cls) == want, cls[:60]
        enc = tiktoken.Encoding("cls", pat_str=cls, mergeable_ranks=byte_ranks, special_tokens={})
        assert enc.decode(enc.encode_ordinary(text)) == "".join(want), cls[:60]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


#: ``{digest of a class's text: digest of regex's matches of class+ over all characters, joined}``
#: for the large classes of the rewritten named patterns (1,000 to 9,300 characters of ranges):
#: ``regex`` read each in ~3 CPU s, half of the exhaustive test's time, and its reading of a given
#: class text does not change. A class not here (another ``regex`` rewrites the patterns otherwise)
#: is read by ``regex`` again; ``regex`` still meets the others at every range edge above.
#: ``PYTHONPATH=tests:tests/text python tests/tokenizer/test_portable_pattern.py`` prints it again.
REGEX_MEMBERS: dict[str, str] = {
    "08afad0331a78dfd2811d4deb39d7f8f2f280848d14beb984a4732bc3538b520":
        "5b992413af14b58ab57a93220408541b7caefe09d792495cc34de953d546ea8c",
    "f7349bbe1450b5f36f4082202fa336c0d7d03cb6700e993bb82da42b42ae7822":
        "179fd1efa4ae1682e56ffe6693c85000b906b39ebeea951f9a3b85d77f5f11d7",
    "f3d9ae5df894a1ce3cde94e1d79034cd7d208eeb85cb6111799ed0b1a5882fa6":
        "4043738587b765cc08e1f31f367dd3c6a6fcbc5a708d5b6ca9094f9ffc1e08f7",
    "0ccadcdc108cb2b29e7746d810855448e42d43481700953fff01fbe8c0e032c3":
        "3e3abb1b1a41e245a3f94a3e87612f7e0987e775115b29c1153ff172e992da16",
    "ae0d898eb4310fc3aeaf8e3e0e133733809f9e378a36290700aff3ad9254a7dc":
        "272458f93d81376ecee5ce9391d1310dbb25f128dcd1659b1df0f906344f5366",
    "032efb7928bdf737770036e308790bafca6d831b72a179b372e062fee14d677f":
        "a287587f3878e9980f51f5ebe63f3205a7f9ee719ab4091d750e9da4a409fd0a",
}


def _regex_members(cls: str) -> str:
    """The digest of the characters ``regex`` matches with ``cls``, read now."""
    return _digest("".join(regex.findall(cls + "+", _ALL_CHARS)))


def regex_members_digest(cls: str) -> str:
    """The digest of the characters ``regex`` matches with ``cls`` (stored or read)."""
    stored = REGEX_MEMBERS.get(_digest(cls))
    return stored if stored is not None else _regex_members(cls)


@pytest.mark.slow
def test_classes_hold_the_same_code_points_in_every_engine():
    """Each engine's matches of ``class+`` over all characters, joined, are the characters the class
    holds (tiktoken drops what its pattern does not match, so with byte ranks its encoding decodes
    to them; runs rather than single characters keep the piece lists short); compared as digests."""
    byte_ranks = {bytes([b]): b for b in range(256)}
    for cls in _rewritten_classes():
        runs = cls + "+"
        want = regex_members_digest(cls)
        assert _digest(onig_class_members(_ALL_CHARS, runs)) == want, cls[:60]
        enc = tiktoken.Encoding("cls", pat_str=runs, mergeable_ranks=byte_ranks, special_tokens={})
        assert _digest(enc.decode(enc.encode_ordinary(_ALL_CHARS))) == want, cls[:60]


@pytest.mark.parametrize("name", NAMED)
def test_named_patterns_need_no_engine_default(name):
    """No \\p{..}, \\s, (?i) or bare $ is left for an engine to read its own way."""
    out = portable_pattern(PATTERNS[name])
    assert not regex.search(r"\\[pPsSdDwW]|\(\?[imsx]|\$|\+\+|\?\+|\*\+|\}\+", out)


# -- (2) structure: targeted and generated text --------------------------------------------------

def _digit_runs() -> list[str]:
    """Runs of 1 to 12 digits alone, after a space, among letters and beside other scripts' digits."""
    runs = [("1234567890" * 2)[:n] for n in range(1, 13)]
    return [t for d in runs for t in (d, " " + d, "x" + d + "y", d + " " + d, d + "١٢٣", "٤" + d + "ab")] \
        + ["١٢٣٤", "١٢٣٤٥٦٧", "a١٢٣٤b", "12٣٤56", "①②③④", "x²³¹y", "1,000,000", "3.14159"]


#: Text where the engines' defaults differ: digit runs, trailing whitespace, CRLF, tabs,
#: contractions in both cases, combining marks, emoji with ZWJ, letters of new Unicode versions.
TARGETED = _digit_runs() + [
    "a \n", "a\n  ", "x\n\n", "end \n", "end\n", "  ", "\n", " \n \n", "a\r\nb\r\n", "\r\n\r\n", "x\r",
    "\tx\t\ty\t", "a \t\n", "it'S they'LL we'VE I'M he'D", "IT'S", "don'T", "'s", "x's'", "ſ 's 'ſ",
    "e\u0301\u0301x \u0301", "Ǆemo ǅx", "👨\u200d👩\u200d👧 ok 🙃🙃", "a\u200db", "\u00a0x\u3000y\u2028z\u0085",
    "\U000107bb\U00010940x \U00011de0\U00011de1\U00011de2\U00011de3",
    "a\U000107bbb x\U00010940 \U00011de1\U00011de2 7\U00011de3 \n", "ʕ•ᴥ•ʔ", "Привет, мир! 123", "中文字符１２３４",
]


@pytest.mark.parametrize("name", NAMED)
def test_targeted_text_splits_alike(name):
    pattern = PATTERNS[name]
    out = portable_pattern(pattern)
    for text in TARGETED:
        want = regex_pieces(text, pattern)
        assert onig_pieces(text, out) == want, text
        assert tiktoken_pieces(text, out) == [w.encode() for w in want], text


def test_the_raw_pattern_is_what_went_wrong():
    """Why the rewrite exists: Oniguruma reads GPT-4's {1,3}+ as a repeated group (any run)."""
    assert onig_pieces("1000", PATTERNS["gpt4"]) == ["1000"]
    assert regex_pieces("1000", PATTERNS["gpt4"]) == ["100", "0"]
    assert onig_pieces("1000", portable_pattern(PATTERNS["gpt4"])) == ["100", "0"]


_categories = st.characters(codec="utf-8")  # every general category, surrogates aside
_tricky = st.sampled_from(list("0123456789١٢३\u0301\u200d 🙃'sSlLtT\t\r\n\x0b\x0c\x85\xa0\u3000\u2028.,!ǅʰ中"))
generated = st.lists(st.one_of(_categories, _tricky, st.sampled_from([" ", "\n", "\r\n", "  \n", "'S", "'ll",
                                                                      "1234", "\t"])),
                     max_size=30).map("".join)


@settings(max_examples=150)
@given(text=generated)
@pytest.mark.parametrize("name", NAMED)
def test_generated_text_splits_alike(name, text):
    pattern = PATTERNS[name]
    out = portable_pattern(pattern)
    want = regex_pieces(text, pattern)
    assert onig_pieces(text, out) == want
    assert tiktoken_pieces(text, out) == [w.encode() for w in want]


# -- a user's own pattern ------------------------------------------------------------------------

USER_PATTERNS = [
    r"\w+|[^\w\s]+|\s+",
    r"(?i:the|a)|\p{L}+|\d{2,4}+|\s+$|\s+|.",
    r"(?<![a-z])[A-Z]+|[a-z]+|\S|\s",
    r"(?m)^\s+|\s+$|\S+|\s",
    r"[[:alpha:]]+|[^[:alpha:]\s]+|\s+(?!\S)|\s",
    r"(?:\p{Lu}?\p{Ll}+)|\p{N}{1,3}?|\p{N}|[\s\S]",
    r"\x41+|\u00e9{2}|\N{EM DASH}|\U0001F643|(?s:.)",
]


@settings(max_examples=60)
@given(text=generated)
@pytest.mark.parametrize("pattern", USER_PATTERNS)
def test_user_patterns_split_alike(pattern, text):
    out = portable_pattern(pattern)
    want = regex_pieces(text, pattern)
    assert onig_pieces(text, out) == want
    assert tiktoken_pieces(text, out) == [w.encode() for w in want]


@pytest.mark.parametrize("pattern,reason", [
    (r"(a)\1|.", "capturing groups"),
    (r"(?P<word>\w+)|.", "capturing groups"),
    (r"(?:a)(?P=x)|.", "group"),
    (r"\bx\b|.", "word boundaries"),
    (r"(?<=a+)b|.", "lookbehind"),
    (r"a*", "empty string"),
    (r"(?x) a | b", "flag"),
    (r"(?V1)[[a-z]--[aeiou]]", "flag"),
    (r"a(?i)b|.", "group"),
    (r"(?(1)a|b)|.", "group"),
    (r"a{1,2}{3}|.", "does not compile"),
    (r"(?e)(?:cat){e<=1}|.", "flag"),
    (r"(", "does not compile"),
])
def test_what_cannot_be_rewritten_is_refused(pattern, reason):
    with pytest.raises(PatternTranslationError, match=reason):
        portable_pattern(pattern)


if __name__ == "__main__":  # REGEX_MEMBERS computed again: PYTHONPATH=tests:tests/text python <this file>
    print({_digest(c): _regex_members(c) for c in _rewritten_classes() if len(c) > 1000})
