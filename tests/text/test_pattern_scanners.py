"""The native scanners of the tiktoken family (cl100k = GPT-4, o200k, Llama 3's, Qwen2's) and GPT-2's
against their specification, ``regex.finditer(PATTERN, text)``.

For every pattern in ``pretokenize.NATIVE_SCANNERS``: the generated flag table equals ``regex``'s
classes at every code point; the pre-tokens equal ``regex``'s on hypothesis text drawn from every
Unicode general category and on runs of the characters the patterns tell apart; on the corpora;
native counts equal ``count_words``; every cut the planner finds by a scan (inside long pre-tokens
too) changes no count; and training and encoding give the same result natively as through
``regex``, whatever the chunk size and thread count.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import regex
from conftest import EN, RU, ZH, corpus_slice, fixture_text
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bpe_store import _core
from bpe_store.counting.count import count_chunk_native, native_counts
from bpe_store.text.chunks import plan_chunks
from bpe_store.text.pretokenize import NATIVE_SCANNERS, PATTERNS, count_words, native_scanner, native_splitter
from bpe_store.text.superword_split import STAGE2_PATTERN
from bpe_store.tokenizer.tokenizer import Tokenizer
from bpe_store.training.train import train, train_bpe

ROOT = Path(__file__).resolve().parents[2]
NAMES = list(NATIVE_SCANNERS.values())  # gpt2, cl100k, o200k, llama3, qwen2, superword
REGEX = {name: pattern for pattern, name in NATIVE_SCANNERS.items()}
COMPILED = {name: regex.compile(pattern) for name, pattern in REGEX.items()}
EOT = "<|endoftext|>"


def assert_same_split(text: str, name: str) -> None:
    native = _core.pretokenize(text.encode("utf-8"), name)
    expected = [m.encode("utf-8") for m in COMPILED[name].findall(text)]
    if native != expected:  # show the first difference, not two huge lists
        i = next((i for i, (a, b) in enumerate(zip(native, expected)) if a != b), min(len(native), len(expected)))
        pytest.fail(f"{name}: first difference at piece {i}: native {native[i:i + 3]!r} vs regex {expected[i:i + 3]!r}")


# -- the tables ----------------------------------------------------------------------------------

FLAG_CLASSES = [(1, r"\p{L}"), (2, r"\p{N}"), (4, r"\s"), (8, r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"),
                (16, r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"), (32, r"[\r\n]")]


def test_every_code_point_has_the_flags_regex_gives_it() -> None:
    every = "".join(map(chr, range(0x110000)))
    expected = bytearray(0x110000)
    for bit, pattern in FLAG_CLASSES:
        for m in regex.finditer(pattern, every):
            expected[m.start()] |= bit
    native = bytes(map(_core.char_flags, range(0x110000)))
    if native != bytes(expected):
        bad = [cp for cp in range(0x110000) if native[cp] != expected[cp]][:10]
        pytest.fail("flags differ from regex at " + ", ".join(
            f"U+{cp:04X} (native {native[cp]}, regex {expected[cp]})" for cp in bad))


def test_the_tables_are_generated_from_the_installed_regex_and_name_its_unicode_version() -> None:
    """The header is what tools/gen_unicode_tables.py makes from the installed ``regex`` (a
    release with the same tables passes too), so its classes follow the Unicode version of that
    ``regex``; this says which version that is (the one its package names, checked against the
    number of characters its tables assign)."""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_unicode_tables.py"), "--check"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_unicode_tables as gen
    finally:
        sys.path.pop(0)
    version = gen.unicode_version()
    header = (ROOT / "native" / "unicode_tables.h").read_text()
    assert f" (Unicode {version}); do not edit." in header.splitlines()[0]
    print(f"regex {regex.__version__}: Unicode {version}, {gen.assigned_characters()} assigned characters")
    assert tuple(map(int, version.split("."))) >= (15, 0, 0)
    # what the scanners assume of the contraction letters: beside ASCII, only U+017F folds (to 's')
    assert gen.case_folds() == [(0x17F, "s")]


def test_the_ascii_skips_match_the_flags() -> None:
    """The scanners skip ASCII runs 16 bytes at a time by range checks (ascii_set_end): right
    only if, within ASCII, \\p{L} is [A-Za-z], the o200k sets are [A-Z] and [a-z], \\p{N} is
    [0-9], and no ASCII character is in both o200k sets."""
    ascii_chars = "".join(map(chr, range(128)))
    found = {bit: "".join(regex.findall(p, ascii_chars)) for bit, p in FLAG_CLASSES}
    assert found[1] == "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    assert found[8] == "ABCDEFGHIJKLMNOPQRSTUVWXYZ" and found[16] == "abcdefghijklmnopqrstuvwxyz"
    assert found[2] == "0123456789"


# -- pre-tokens ----------------------------------------------------------------------------------

KNOWN = [
    "", " ", "  ", "a", " a", "  a", "\na", " \na", "a  ", "a \n", "a \n ", "\n\n", "\r\n\r\nx", "x\r\n", "x\r\n ",
    "it's", "IT'S", "they'll", "THEY'LL", "'s", "''s", " 's", "'", "'x", "we've'", "i'm'd're't", "'ſ", "Xſ'ſ",
    "1000", "12345678", "1,000,000", "١٢٣٤٥", "𝟎𝟏𝟐𝟑", "a1b22c333d4444", " 1234 ", "Ⅻ½²",
    "Hello WORLD's CamelCase don'T 12345 a/b\r\n\n x", "HeLLo WoRLD", "ǅungla ǅUNGLA", "ʰaʰAʰ", "AB中cd",
    "\u0301ABC", "x\u0301ABC", "!\u0301abc", " \u0301", "\u0301\u0301", "e\u0301\u0301X", "ÀÉÎõü",
    ".\n/", "!!\n//x", " /", "//\n\n/", "?\n", "a.\r\n/b", "\t\tfoo", "\tfoo", " \tfoo", "\u00a0foo", "\u3000中",
    "x\u3000\u3000y", "a\u2028 b", "\x85\x85a", "\ufeffHello", "\x00\x01 \x00", "\x1c\x1dx", "  !!", " !!x",
    "a\u200dz 👨\u200d👩\u200d👧 e\u0301", "🙂🙂 x", "中文字符。测试，好", "Привет, мир! Это тест.",
    "trailing  ", "trailing \n", "trailing\n\n", "trailing \t\n \n  ", "  \n  \n  x",
]


@pytest.mark.parametrize("name", NAMES)
def test_known_splits(name: str) -> None:
    for text in KNOWN:
        assert_same_split(text, name)


WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\r\n\r\n", "\x0b", "\x0c", "\x85", "\xa0",
              "\u1680", "\u2000", "\u2028", "\u2029", "\u202f", "\u3000", "\x1c", "\x1f", "\u200b", "\ufeff"]
FRAGMENTS = ["'s", "'S", "'ll", "'LL", "'Ll", "'ve", "'VE", "'re", "'RE", "'d", "'D", "'m", "'M", "'t", "'T",
             "'", "''", "'x", "'ſ", "don't", "I'M", "ſ", "!", "...", "--", "/", "//", "€", "$", "_",
             "0", "4", "42", "1000", "12345", "١٢٣٤", "४", "〇", "Ⅻ", "½", "²", "𝟎",
             "e\u0301", "\u0301", "\u0903", "\u20dd", "\u0345", "ǅ", "ʰ", "ª", "Ab", "AB", "aB", "ABc", "𝐀𝐛",
             "🙂", "👨\u200d👩\u200d👧", "\u200d", "\ufe0f",
             "Hello", "мир", "МИР", "中文", "日本語", "한국어", "ελληνικά", "עברית", "عربي", "ไทย"]
fragment = st.one_of(st.sampled_from(WHITESPACE), st.sampled_from(FRAGMENTS),
                     st.text(st.characters(codec="utf-8"), max_size=4))
mixed_text = st.lists(fragment, max_size=40).map("".join)
#: every Unicode general category, each drawn alone and mixed
every_category = st.text(st.characters(codec="utf-8", categories=("L", "M", "N", "P", "S", "Z", "C")))


@settings(max_examples=300, deadline=None)
@given(text=mixed_text, name=st.sampled_from(NAMES))
@example(text="a1000 \n", name="cl100k")
@example(text="x\u0301ABC'S  ", name="o200k")
def test_mixed_text_splits_as_regex(text: str, name: str) -> None:
    assert_same_split(text, name)
    assert_same_split(text + " \n ", name)  # ending in whitespace: \s++$ and \s+(?!\S) at the end


@settings(max_examples=300, deadline=None)
@given(text=every_category, name=st.sampled_from(NAMES))
def test_text_of_every_category_splits_as_regex(text: str, name: str) -> None:
    assert_same_split(text, name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("run", ["a", "Z", "7", "!", " ", "\n", "中", "\u0301"])
def test_runs_of_every_length_end_where_regex_ends_them(name: str, run: str) -> None:
    """A run of 0 to 40 characters of one class, then each ASCII character and a few non-ASCII
    ones, at the end of the text and before more text: every place a 16-byte skip can stop."""
    enders = [chr(c) for c in range(128)] + ["\xe9", "\u4e2d", "\u0663", "\u00b2", "\xa0", "\u3000", "\u00d7",
                                             "\u0301", "ǅ", "ʰ", "ſ"]
    for length in range(0, 41, 3):
        for end in enders:
            for text in (run * length + end, " " + run * length + end + "x" * 20):
                assert_same_split(text, name)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("fixture", [EN, RU, ZH])
def test_corpus_fixtures_split_as_regex(name: str, fixture: str) -> None:
    assert_same_split(fixture_text(fixture, 599_000), name)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("corpus", "offsets"), [
    ("enwiki-100M.txt", (0, 37_000_000, 90_000_000)),
    ("tinystories-ru-20M.txt", (0, 17_000_000)),
    ("zhwiki-20M.txt", (0, 17_000_000)),
])
def test_corpus_slices_split_as_regex(name: str, corpus: str, offsets: tuple[int, ...]) -> None:
    for offset in offsets:
        assert_same_split(corpus_slice(corpus, 1 << 20, offset), name)


def test_every_named_pattern_has_a_native_scanner() -> None:
    # and one pattern bpe_store applies itself, with a scanner but no name (SuperBPE's stage 2)
    assert {PATTERNS[n] for n in PATTERNS} | {STAGE2_PATTERN} == set(NATIVE_SCANNERS)
    assert all(native_counts(p) for p in PATTERNS.values())
    assert native_scanner(r"\w+|\s+") == "" and not native_counts(r"\w+|\s+")
    with pytest.raises(ValueError):
        _core.pretokenize(b"abc", "")  # a scanner is needed: '' is "none"
    with pytest.raises(ValueError):
        _core.pretokenize(b"abc", "cl100k_base")  # names of scanners, not of patterns


# -- counting and cutting ------------------------------------------------------------------------

SPECIALS = [EOT, "<|a|>", "<|a|><|b|>", "中"]
special_piece = st.sampled_from(SPECIALS + ["<|a|", "<|", "|>", "<|endoftext|"])
text_with_specials = st.lists(st.one_of(fragment, special_piece), max_size=40).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=text_with_specials, specials=st.lists(st.sampled_from(SPECIALS), unique=True),
       name=st.sampled_from(NAMES), max_bytes=st.sampled_from([0, 4, 7]))
def test_native_counts_equal_count_words(text: str, specials: list[str], name: str, max_bytes: int) -> None:
    counts, total = _core.count_words(text.encode("utf-8"), [s.encode() for s in specials], max_bytes, name)
    expected = count_words(text, specials, REGEX[name], max_bytes or None)
    assert counts == dict(expected) and total == sum(expected.values())


# long runs of every class, so that the scan cut inside a pre-token longer than the maximum is tried
long_piece = st.sampled_from(["a" * 40, "A" * 40, "aB" * 20, "中" * 30, "1" * 40, "𝟎" * 12, "!" * 40,
                              "!\u0301" * 15, " " * 40, "\n" * 30, " \n" * 20, "\u0301" * 20, "ǅ" * 20,
                              "中A" * 10, "!\u0301!!!!!!" * 3, "!" + "\n" * 20, "\r\n\r\n   \r\n\n\n\n\n",
                              "ʰa" * 10, "x\u0301" * 10])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(st.one_of(fragment, long_piece, special_piece), max_size=25),
       name=st.sampled_from(NAMES), max_bytes=st.sampled_from([0, 4, 5, 9, 16]), data=st.data())
# a newline tail of punctuation, cut short, gives its whitespace to the next pre-token
@example(parts=["'", "\n" * 30, " "], name="cl100k", max_bytes=4, data=None)
# a run of spaces and newlines cut short ends at its last newline
@example(parts=["\r\n\r\n   \r\n\n\n\n\n", "ab"], name="o200k", max_bytes=5, data=None)
# o200k's upper run cut short ends after its last \p{Lo}: "中A|中中中" would split "中A"
@example(parts=["中A中中中中中"], name="o200k", max_bytes=4, data=None)
def test_every_scan_cut_changes_no_count(parts: list[str], name: str, max_bytes: int, data) -> None:
    """``Splitter.scan_cut`` (plan_cut in splitter.h) from the start of a text: counting the two
    sides of the cut it finds gives the counts of the whole, for every target."""
    text = "".join(parts)
    raw = text.encode("utf-8")
    specials = [EOT, "<|a|>"]
    splitter = native_splitter(specials, REGEX[name])
    whole = count_words(text, specials, REGEX[name], max_bytes or None)
    targets = (data.draw(st.lists(st.integers(0, len(raw)), min_size=1, max_size=6)) if data is not None
               else range(len(raw) + 1))
    for target in targets:
        q = splitter.scan_cut(raw, target, max_bytes, 0)
        if q < 0:
            continue
        assert target <= q <= len(raw)
        left, right = raw[:q].decode(), raw[q:].decode()
        both = count_words(left, specials, REGEX[name], max_bytes or None)
        both.update(count_words(right, specials, REGEX[name], max_bytes or None))
        assert both == whole, (name, text, q)


@settings(max_examples=100, deadline=None)
@given(parts=st.lists(st.one_of(fragment, long_piece, special_piece), max_size=30),
       name=st.sampled_from(NAMES))
def test_every_local_cut_changes_no_count(parts: list[str], name: str) -> None:
    """Every cut the splitter's local rule reports (what streams and file windows are cut at)."""
    text = "".join(parts)
    raw = text.encode("utf-8")
    specials = [EOT, "<|a|>", "<|a|><|b|>"]
    splitter = native_splitter(specials, REGEX[name])
    whole = count_words(text, specials, REGEX[name])
    for q in (q for q in range(len(raw)) if splitter.first_cut(raw, q, q + 1) == q):
        both = count_words(raw[:q].decode(), specials, REGEX[name])
        both.update(count_words(raw[q:].decode(), specials, REGEX[name]))
        assert both == whole, (name, text, q)


@pytest.mark.parametrize("name", ["cl100k", "o200k", "qwen2"])
def test_a_file_counts_the_same_in_any_chunks(tmp_path: Path, name: str) -> None:
    """Planned chunks of a file (small, so that the planner cuts often, also by scanning inside a
    long pre-token) count natively to the counts of the whole text through ``regex``."""
    text = (fixture_text(EN, 60_000) + EOT + "x" * 5000 + " " + "1" * 3000 + fixture_text(ZH, 30_000)
            + "\n" * 500 + EOT + fixture_text(RU, 30_000))
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    for chunk_size, max_bytes in ((4096, None), (1000, 64)):
        chunks = plan_chunks(path, path.stat().st_size, [EOT], REGEX[name], chunk_size, max_bytes)
        assert len(chunks) > 20
        total: Counter[bytes] = Counter()
        for a, b in chunks:
            total.update(count_chunk_native(str(path), a, b, [EOT], "strict", max_bytes, REGEX[name]).to_dict())
        assert total == count_words(text, [EOT], REGEX[name], max_bytes)


# -- training and encoding -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cl100k", "o200k", "llama3", "superword"])
def test_training_equals_the_reference_for_any_threads_and_chunk_size(tmp_path: Path, name: str) -> None:
    text = fixture_text(EN, 30_000) + EOT + fixture_text(RU, 10_000) + EOT + fixture_text(ZH, 10_000)
    path = tmp_path / "corpus.txt"
    path.write_text(text, encoding="utf-8")
    # the spec: the same pattern in a group, which no native scanner is for, so that ``regex`` finds
    # the pre-tokens (the pure-Python reference trainer took 4.5-7 CPU s a pattern; the merge
    # engines are compared with it in tests/training)
    through_regex = "(?:" + REGEX[name] + ")"
    assert native_scanner(through_regex) == ""
    ref = train([path], tmp_path / "regex.db", 500, [EOT], pattern=through_regex, workers=1)
    for i, (threads, chunk) in enumerate(((1, 1 << 20), (2, 2048))):
        result = train([path], tmp_path / f"{i}.db", 500, [EOT], pattern=REGEX[name], workers=threads,
                       chunk_size=chunk)
        assert result.merges == ref.merges and result.vocab == ref.vocab, (name, threads, chunk)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, tuple[dict[int, bytes], list[tuple[bytes, bytes]]]]:
    """A small vocabulary per pattern, for the encoders (any vocabulary serves: bpe_store's trainer
    makes the six in 0.3 CPU s, the pure-Python reference took 6.7)."""
    path = tmp_path_factory.mktemp("trained") / "corpus.txt"
    path.write_text(fixture_text(EN, 20_000) + EOT + fixture_text(ZH, 6_000), encoding="utf-8")
    return {name: train_bpe(path, 350, [EOT], pattern=REGEX[name]) for name in NAMES}


@settings(max_examples=60, deadline=None)
@given(text=text_with_specials, name=st.sampled_from(NAMES))
def test_the_native_encoder_equals_the_spec(trained, text: str, name: str) -> None:
    vocab, merges = trained[name]
    native = Tokenizer(vocab, merges, [EOT], pattern=REGEX[name])
    spec = Tokenizer(vocab, merges, [EOT], pattern=REGEX[name], native=False)
    assert native._core is not None and native._core.native_split
    ids = spec.encode(text)
    assert native.encode(text) == ids
    assert native.encode_to_array(text).tolist() == ids
    assert native.encode_batch([text, text[::-1]]) == [ids, spec.encode(text[::-1])]
    assert list(native.encode_iterable([text[:7], text[7:]])) == ids
    assert native.decode(ids) == text


@pytest.mark.parametrize("name", ["cl100k", "o200k"])
def test_encoding_a_long_document_on_threads_equals_the_spec(trained, name: str) -> None:
    vocab, merges = trained[name]
    text = (fixture_text(EN, 300_000) + EOT + fixture_text(ZH, 200_000) + fixture_text(RU, 200_000)) * 2
    native = Tokenizer(vocab, merges, [EOT], pattern=REGEX[name])
    spec = Tokenizer(vocab, merges, [EOT], pattern=REGEX[name], native=False)
    ids = spec.encode(text)
    for threads in (1, 2, 3):
        assert native.encode_to_array(text, threads).tolist() == ids
    assert re.sub(r"\s", "", native.decode(ids)) == re.sub(r"\s", "", text)


# -- a user's own regex: matched by `regex`, counted natively -------------------------------------

USER_PATTERNS = [REGEX["cl100k"] + "|(?:zzzz)", r"\w+|\s+|[^\w\s]+", r"\w*", r"(?i:ab)+|.", r"\p{L}+|\p{N}|\s+|."]


@settings(max_examples=120, deadline=None)
@given(text=text_with_specials, specials=st.lists(st.sampled_from(SPECIALS), unique=True),
       pattern=st.sampled_from(USER_PATTERNS), max_bytes=st.sampled_from([None, 4, 9]))
@example(text="", specials=[], pattern=r"\w*", max_bytes=None)
def test_a_users_regex_counts_as_count_words(text: str, specials: list[str], pattern: str, max_bytes) -> None:
    """``regex_count_words`` (``regex`` matches, ``count_strings`` counts) equals the spec, also
    for a pattern that matches the empty string (not a word) and across its count batches."""
    from bpe_store.counting import count

    assert native_scanner(pattern) == ""
    expected = count_words(text, specials, pattern, max_bytes)
    assert count.regex_count_words(text, specials, pattern, max_bytes) == expected
    with pytest.MonkeyPatch.context() as m:
        m.setattr(count, "_REGEX_COUNT_BATCH", 3)
        assert count.regex_count_words(text, specials, pattern, max_bytes) == expected


def test_count_strings_takes_only_str() -> None:
    counts = _core.count_strings(["a", "", "中文", "a"])
    assert counts.to_dict() == {b"a": 2, "中文".encode(): 1} and counts.total == 3
    with pytest.raises(TypeError):
        _core.count_strings([b"bytes"])
    with pytest.raises(UnicodeEncodeError):
        _core.count_strings(["\ud800"])  # a lone surrogate has no UTF-8
