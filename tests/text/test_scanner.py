"""The native scanner and counter (bpe_store._core) against the `regex` specification.

The contract (docs/design.md, Semantics): native pre-tokens == ``regex.finditer(GPT2_PATTERN, text)``
on every valid UTF-8 input, native word counts == ``pretokenize.count_words``, and training gives
the same merges whatever the thread count or chunk size.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
from collections import Counter
from pathlib import Path

import pytest
import regex
from conftest import CS336, EN, RU, ZH, corpus_slice, fixture_text
from hypothesis import example, given
from hypothesis import strategies as st

from bpe_store import _core
from bpe_store.counting.count import RangeTask, add_counts, count_chunk, native_counts
from bpe_store.counting.parallel import count_chunks_threaded
from bpe_store.errors import InputError, Interrupted
from bpe_store.text.pretokenize import GPT2_PATTERN, PretokenSpec, count_words
from bpe_store.training.train import train

GPT2 = regex.compile(GPT2_PATTERN)
OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3


def regex_pieces(text: str) -> list[bytes]:
    return [m.encode("utf-8") for m in GPT2.findall(text)]


def assert_same_split(text: str) -> None:
    native = _core.pretokenize(text.encode("utf-8"))
    expected = regex_pieces(text)
    if native != expected:  # show the first difference, not two huge lists
        i = next((i for i, (a, b) in enumerate(zip(native, expected)) if a != b), min(len(native), len(expected)))
        pytest.fail(f"first difference at piece {i}: native {native[i:i + 3]!r} vs regex {expected[i:i + 3]!r}")


# -- character classes ------------------------------------------------------------------------

def test_every_code_point_is_classified_as_regex_does() -> None:
    every = "".join(map(chr, range(0x110000)))
    expected = bytearray(0x110000)
    for code, pattern in ((LETTER, r"\p{L}"), (NUMBER, r"\p{N}"), (SPACE, r"\s")):
        for m in regex.finditer(pattern, every):
            expected[m.start()] = code
    native = bytes(map(_core.char_class, range(0x110000)))
    if native != bytes(expected):
        bad = [cp for cp in range(0x110000) if native[cp] != expected[cp]][:10]
        pytest.fail("classes differ from regex at " + ", ".join(
            f"U+{cp:04X} (native {native[cp]}, regex {expected[cp]})" for cp in bad))


@pytest.mark.parametrize(("cp", "cls"), [
    (0x20, SPACE), (0x09, SPACE), (0x0B, SPACE), (0x0C, SPACE), (0x85, SPACE), (0xA0, SPACE),
    (0x2028, SPACE), (0x3000, SPACE),
    # not \s in `regex` (str.isspace() says yes for \x1c-\x1f: the scanner must not follow it)
    (0x1C, OTHER), (0x1F, OTHER), (0x180E, OTHER), (0x200B, OTHER), (0xFEFF, OTHER), (0x00, OTHER),
    (0x0661, NUMBER), (0x2160, NUMBER), (0xB2, NUMBER), (ord("中"), LETTER), (ord("ß"), LETTER),
])
def test_classes_of_tricky_code_points(cp: int, cls: int) -> None:
    assert _core.char_class(cp) == cls


def test_char_class_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        _core.char_class(0x110000)


# -- pre-tokens --------------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "", " ", "  ", "a", " a", "  a", "\na", " \na", "a  ", "a \n", "\n\n", "\r\n\r\nx", "x\r\n",
    "it's", "IT'S", "they'll", "THEY'LL", "'s", "''s", " 's", "'", "'x", "we've'", "i'm'd're't",
    "Hi there  you're 123 中文!! \t\x0b\x0c\x1c\x1d word",
    "x\u3000\u3000y", "x\xa0y", "x \xa0y", "a\u2028 b", "\x85\x85a", "\ufeffHello", "\x00\x01 \x00",
    "١٢٣ 四 ⅷ ²", " !!", "  !!", "a1b2", "e\u0301", " \u200b ",
])
def test_known_splits(text: str) -> None:
    assert_same_split(text)


WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x85",
              "\xa0", "\u1680", "\u2000", "\u2028", "\u2029", "\u202f", "\u3000", "\u200b", "\u180e", "\ufeff"]
FRAGMENTS = ["'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", "'", "''", "'x", "don't", "I'M",
             "\x00", "\x01", "\x7f", "!", "...", "--", "€", "🙂", "e\u0301", "\u0345",
             "0", "42", "١٢٣", "४", "〇", "Ⅻ", "½", "²",
             "Hello", "мир", "中文", "日本語", "한국어", "ελληνικά", "עברית", "عربي", "ไทย"]
fragment = st.one_of(st.sampled_from(WHITESPACE), st.sampled_from(FRAGMENTS),
                     st.text(st.characters(codec="utf-8"), max_size=4))
mixed_text = st.lists(fragment, max_size=40).map("".join)


@given(st.text())
@example("a \u3000 b")
def test_random_text_splits_as_regex(text: str) -> None:
    assert_same_split(text)


@given(st.text(st.characters(codec="utf-8", categories=("L", "N", "Z", "P", "S", "C", "M"))))
def test_random_text_every_category(text: str) -> None:
    assert_same_split(text)


@given(mixed_text)
def test_mixed_scripts_spaces_and_contractions(text: str) -> None:
    assert_same_split(text)


@given(st.binary(max_size=64) | mixed_text.map(lambda t: t.encode("utf-8")[1:]))
def test_invalid_utf8_never_breaks_the_scanner(data: bytes) -> None:
    pieces = _core.pretokenize(data)
    assert b"".join(pieces) == data and all(pieces)
    counts, total = _core.count_words(data, [b"<|x|>"])
    assert total == sum(counts.values())
    try:
        data.decode("utf-8")
        valid = True
    except UnicodeDecodeError:
        valid = False
    assert _core.utf8_valid(data) == valid


@pytest.mark.parametrize(("name", "offsets"), [
    ("enwiki-100M.txt", (0, 37_000_000, 90_000_000)),
    ("tinystories-ru-20M.txt", (0, 9_000_000, 17_000_000)),
    ("zhwiki-20M.txt", (0, 9_000_000, 17_000_000)),
])
def test_corpus_slices_split_as_regex(name: str, offsets: tuple[int, ...]) -> None:
    for offset in offsets:
        text = corpus_slice(name, 2 << 20, offset)
        # start at a whole character: corpus_slice drops a cut-off head, but be explicit
        assert_same_split(text)


# -- counting ----------------------------------------------------------------------------------

SPECIALS = ["<|endoftext|>", "<|a|>", "<|a|><|b|>", "<|b|>", "中"]
special_piece = st.sampled_from(SPECIALS + ["<|a|", "<|", "|>", "<|a|><|", "<|endoftext|"])
text_with_specials = st.lists(st.one_of(fragment, special_piece), max_size=40).map("".join)


def test_ascii_letters_and_digits_are_the_classes_the_scanner_skips_16_at_a_time() -> None:
    """The scanner skips runs of ASCII letters and digits 16 bytes at a time by range checks
    (native/char_classes.h, ascii_run_end): that is right only if, within ASCII, \\p{L} is exactly
    [A-Za-z] and \\p{N} exactly [0-9]."""
    ascii_chars = "".join(map(chr, range(128)))
    assert "".join(regex.findall(r"\p{L}", ascii_chars)) == "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    assert "".join(regex.findall(r"\p{N}", ascii_chars)) == "0123456789"


@pytest.mark.parametrize("run", ["a", "Z", "7", "!"])
def test_runs_of_every_length_end_where_regex_ends_them(run: str) -> None:
    """A run of 0 to 40 characters of one class, then each ASCII character and a few non-ASCII
    ones (letters, digits, spaces, other), at the end of the text and before more text: every
    place the 16-byte skip can stop, including the last bytes of the buffer."""
    enders = [chr(c) for c in range(128)] + ["\xe9", "\u4e2d", "\u0663", "\u00b2", "\xa0", "\u3000", "\u00d7"]
    for length in range(41):
        for end in enders:
            for text in (run * length + end, " " + run * length + end + "x" * 20):
                assert_same_split(text)


@given(text_with_specials, st.lists(st.sampled_from(SPECIALS), unique=True))
@example("x<|a|><|b|>y<|a|>z<|b|>", ["<|a|>", "<|a|><|b|>"])
@example("<|a|><|a|><|b|><|b|>", ["<|a|><|b|>", "<|a|>", "<|b|>"])
def test_count_words_matches_python(text: str, specials: list[str]) -> None:
    counts, total = _core.count_words(text.encode("utf-8"), [s.encode("utf-8") for s in specials])
    expected = count_words(text, specials)
    assert counts == dict(expected)
    assert total == sum(expected.values())


@given(st.lists(text_with_specials, max_size=6), st.lists(st.sampled_from(SPECIALS), unique=True))
def test_word_counter_sums_chunks_like_python(chunks: list[str], specials: list[str]) -> None:
    acc = _core.WordCounter()
    expected: Counter[bytes] = Counter()
    for text in chunks:
        data = text.encode("utf-8")
        chunk = _core.count_chunk(data, [s.encode("utf-8") for s in specials])
        py = count_words(text, specials)
        assert chunk.to_dict() == dict(py) and chunk.total == sum(py.values()) and len(chunk) == len(py)
        acc.add(chunk)
        expected.update(py)
    assert dict(acc.items()) == dict(expected) and len(acc) == len(expected)


def test_counts_keep_first_seen_order_and_tell_words_with_one_head_apart() -> None:
    """Words are compared by length and first 8 bytes (their head) before their other bytes, and
    counted a few tokens behind the scanner (prefetching): words of 1 to 24 bytes sharing heads and
    tails must stay apart, and the table's order must be the order words are first seen, in a
    chunk and across the chunks a WordCounter adds."""
    words = []
    for n in range(1, 25):
        base = "abcdefghijklmnopqrstuvwxyz"[:n]
        words += [base, base[:-1] + "Z", "Z" + base[1:], base.upper()]
    rng = __import__("random").Random(5)
    chunks = [" ".join(rng.choice(words) for _ in range(3000)) for _ in range(3)]
    acc, order, total = _core.WordCounter(), [], Counter()
    for text in chunks:
        chunk = _core.count_chunk(text.encode(), [])
        pieces = regex_pieces(text)
        assert list(chunk.to_dict().items()) == list(Counter(pieces).items())  # Counter: first-seen order
        acc.add(chunk)
        order += [w for w in dict.fromkeys(pieces) if w not in total]
        total.update(pieces)
    assert acc.items() == [(w, total[w]) for w in order]


def test_word_counter_owns_its_words() -> None:
    """Words outlive the chunks they were counted in (long ones get their own arena block)."""
    acc = _core.WordCounter()
    long_run = " " * 300_000
    for i in range(3):
        data = f"word{'abc'[i]} shared{long_run}".encode()
        acc.add(_core.count_chunk(data, []))
        del data
    for _ in range(3):
        acc.add(_core.count_chunk(b"x" * 2000, []))
    items = dict(acc.items())
    assert items[b" shared"] == 3 and items[long_run.encode()] == 3 and items[b"x" * 2000] == 3
    assert items[b"worda"] == items[b"wordc"] == 1


def test_count_words_rejects_empty_special() -> None:
    with pytest.raises(ValueError):
        _core.count_words(b"abc", [b""])


def test_count_chunk_native_equals_regex_path(tmp_path: Path) -> None:
    text = fixture_text(RU, 300_000, 1000) + "<|endoftext|>" + fixture_text(ZH, 300_000, 5000)
    path = tmp_path / "c.txt"
    # invalid bytes in the middle: "replace" must give the same U+FFFD words on both paths
    path.write_bytes(text.encode("utf-8") + b"\xff\xfe ab\xc3" + text.encode("utf-8")[:5000])
    size = path.stat().st_size
    same_pattern = f"(?:{GPT2_PATTERN})"  # same matches, but forces the regex path
    assert native_counts(GPT2_PATTERN) and not native_counts(same_pattern)
    for specials in ([], ["<|endoftext|>"]):
        native = count_chunk(str(path), 0, size, specials, GPT2_PATTERN, "replace")
        python = count_chunk(str(path), 0, size, specials, same_pattern, "replace")
        assert native == python
    # strict: the file's first invalid byte, as planning used to say it
    with pytest.raises(InputError, match=rf"c.txt: invalid UTF-8 at byte {len(text.encode())} \(line \d+\)"):
        count_chunk(str(path), 0, size, [], GPT2_PATTERN, "strict")


def _ranges_counted_natively(path: Path, ranges: list[tuple[int, int]], specials: list[bytes],
                             max_bytes: int = 0) -> list:
    with open(path, "rb") as f:
        return [_core.count_file_range(f.fileno(), a, b - a, specials, max_bytes) for a, b in ranges]


def test_file_ranges_count_as_their_bytes_in_reused_memory(tmp_path: Path) -> None:
    """count_file_range reads a range natively into memory reused from chunk to chunk (bytes and
    table): every range counts as count_chunk of its bytes, while earlier results are still
    alive (their memory is not handed out again) and after they are freed (it is, to ranges
    larger and smaller, with more words than a table's first guess)."""
    rng = __import__("random").Random(7)
    text = (fixture_text(RU, 200_000, 0) + "<|endoftext|>" + fixture_text(ZH, 200_000, 0) + " "
            + " ".join(f"w{rng.randrange(10**9)}" for _ in range(60_000))).encode("utf-8")
    path = tmp_path / "c.txt"
    path.write_bytes(text)
    def char_start(i: int) -> int:  # a cut between characters: the range is valid UTF-8
        while i < len(text) and (text[i] & 0xC0) == 0x80:
            i += 1
        return i

    cuts = sorted({0, len(text)} | {char_start(rng.randrange(len(text))) for _ in range(12)})
    small = (char_start(10), char_start(5000))
    ranges = list(zip(cuts, cuts[1:])) + [(0, len(text)), small, (0, len(text))]
    specials = [b"<|endoftext|>"]

    def expected(a: int, b: int, max_bytes: int = 0):
        c = _core.count_chunk(text[a:b], specials, max_bytes)
        return c.to_dict(), c.total

    kept = _ranges_counted_natively(path, ranges, specials)  # all alive at once
    for _ in range(2):  # then freed one by one, their memory counting the next ones
        for (a, b), counts in zip(ranges, kept):
            assert (counts.to_dict(), counts.total) == expected(a, b), (a, b)
        kept = [c for r in ranges for c in _ranges_counted_natively(path, [r], specials)]
    acc = _core.WordCounter()
    for counts in _ranges_counted_natively(path, ranges, specials, 7):
        acc.add(counts)
    want: Counter[bytes] = Counter()
    for a, b in ranges:
        want.update(expected(a, b, 7)[0])
    assert dict(acc.items()) == dict(want)
    _core.release_chunk_memory()
    assert _ranges_counted_natively(path, [small], specials)[0].to_dict() == expected(*small)[0]


def test_file_range_past_the_end_or_not_utf8_is_left_to_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_bytes(b"hello world \xc3( tail")
    got = _ranges_counted_natively(path, [(0, 12), (0, 13), (13, 19), (13, 20), (30, 31)], [])
    assert [c if c is None else c.to_dict() for c in got] == \
        [{b"hello": 1, b" world": 1, b" ": 1}, None, {b"(": 1, b" tail": 1}, None, None]
    with pytest.raises(OSError):
        _core.count_file_range(-1, 0, 5, [])
    with open(path, "rb") as f, pytest.raises(ValueError):
        _core.count_file_range(f.fileno(), 0, 5, [b""])


def test_dict_counts_read_alike_by_pack_counts_and_word_ids() -> None:
    """pack_counts and WordIds.add read a {bytes: count} dict with one walk (for_each_dict_count
    in native/scanner.cpp): the same words and counts in the dict's order, the same refusals."""
    counts = {b"a": 1, "é中".encode(): 2**64 - 1, b"": 0, b" the": 7, b"x" * 300: 3}
    acc = _core.WordCounter()
    acc.add_packed(_core.pack_counts(counts))
    assert acc.items() == list(counts.items())
    fresh, deltas = _core.WordIds().add(counts)
    assert fresh == [(i + 1, bytearray(w), c) for i, (w, c) in enumerate(counts.items())] and deltas == []
    for bad, error in (({"a": 1}, TypeError), ({b"a": -1}, OverflowError), ({b"a": 2**64}, OverflowError),
                       ({b"a": "1"}, TypeError)):
        with pytest.raises(error):
            _core.pack_counts(bad)
        with pytest.raises(error):
            _core.WordIds().add(bad)


def test_add_counts_is_a_counter_update() -> None:
    total = Counter({b"a": 1, b"b": 2**62})
    add_counts(total, {b"b": 2**62, b"c": 3})
    assert total == Counter({b"a": 1, b"b": 2**63, b"c": 3})


def test_threaded_counting_stops_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text("hello world " * 10_000, encoding="utf-8")
    tasks = [RangeTask(i, str(path), i * 1200, (i + 1) * 1200, PretokenSpec((), GPT2_PATTERN)) for i in range(100)]
    results = count_chunks_threaded(tasks, 2)
    first = next(results)
    results.close()  # the consumer stops early: queued chunks are cancelled, threads end
    assert first[2] > 0
    assert not [t for t in threading.enumerate() if t.name.startswith("bpe-count")]
    counted = sorted(cid for cid, *_ in count_chunks_threaded(tasks, 2))
    assert counted == list(range(100))


def test_train_same_merges_for_any_threads_and_chunk_size(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    body = (CS336 / "tinystories_sample.txt").read_text(encoding="utf-8") if CS336.exists() else ""
    corpus.write_text(body + fixture_text(RU, 200_000, 300_000) + "<|endoftext|>"
                      + fixture_text(ZH, 100_000, 400_000), encoding="utf-8")
    results = []
    for i, (workers, chunk_size) in enumerate([(1, 1 << 30), (2, 4096), (2, 50_000), (1, 777)]):
        r = train([corpus], tmp_path / f"run{i}.db", 400, ["<|endoftext|>"], workers=workers,
                  chunk_size=chunk_size)
        results.append((r.vocab, r.merges, r.merge_counts))
    assert all(r == results[0] for r in results[1:])


def test_stop_while_counting_on_threads_then_resume(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(fixture_text(EN, 400_000, 500_000), encoding="utf-8")
    full = train([corpus], tmp_path / "full.db", 300, workers=2, chunk_size=8192)
    stop = threading.Event()
    seen: list[dict] = []

    def progress(event: dict) -> None:
        seen.append(event)
        if event["stage"] == "counting" and event["done"] > 0:
            stop.set()

    db = tmp_path / "run.db"
    with pytest.raises(Interrupted):
        train([corpus], db, 300, workers=2, chunk_size=8192, progress=progress, stop=stop)
    assert not [t for t in threading.enumerate() if t.name.startswith("bpe-count")]
    checkpoint = [e for e in seen if e["stage"] == "checkpoint"]
    assert checkpoint and checkpoint[-1]["phase"] == "counting" and checkpoint[-1]["done"] < checkpoint[-1]["total"]
    resumed = train([corpus], db, 300, workers=2, chunk_size=8192)
    assert (resumed.merges, resumed.merge_counts) == (full.merges, full.merge_counts)


# -- memory safety -----------------------------------------------------------------------------

SANITIZER_HARNESS = r"""
#include <cstdio>
#include <memory>
#include <random>
#include "splitter.h"
#include "utf8.h"

// Random byte strings, biased to UTF-8 edge bytes, each in a heap block of exactly its size so
// that AddressSanitizer reports any read past the end; pieces must tile the input.
int main() {
    using namespace bpe::detail;
    const unsigned char edge[] = {0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4,
                                  0xF5, 0xFF, ' ', '\n', '\'', 's', 'l', 'a', '1', '<', '|', '>'};
    std::mt19937_64 rng(12345);
    const SpecialSplitter splitter({"<|a|>", "<|a|><|b|>", "\xe4\xb8\xad"});
    WordTable total(16);  // outlives every buffer: its words must live in the arena
    ByteArena arena;
    for (int iter = 0; iter < 200000; ++iter) {
        const Pattern pattern = Pattern(1 + iter % 5);  // every native scanner in turn
        const auto scan = [&](const uint8_t *s, size_t len, auto &&emit) { scan_pattern(pattern, s, len, emit); };
        const size_t n = rng() % 48;
        std::unique_ptr<uint8_t[]> buf(new uint8_t[n ? n : 1]);
        for (size_t i = 0; i < n; ++i) buf[i] = rng() % 3 ? edge[rng() % sizeof(edge)] : uint8_t(rng());
        size_t prev = 0;
        bool ok = true;
        scan(buf.get(), n, [&](size_t a, size_t b) { ok = ok && a == prev && b > a && b <= n; prev = b; });
        if (!ok || prev != n) { std::printf("bad split at iteration %d\n", iter); return 1; }
        WordTable table(n / 64);
        splitter.split(buf.get(), n, [&](size_t a, size_t b) {
            scan(buf.get() + a, b - a, [&](size_t x, size_t y) { table.add(buf.get() + a + x, y - x); });
        });
        for (const auto &e : table.entries()) total.add(e.ptr, e.len, e.count, &arena);
        // the prefetching sink makes the same table as adding token by token
        WordTable sunk(n / 64);
        CountSink sink(sunk);
        splitter.split(buf.get(), n, [&](size_t a, size_t b) {
            scan(buf.get() + a, b - a, [&](size_t x, size_t y) { sink.add(buf.get() + a + x, y - x); });
        });
        sink.finish();
        ok = sunk.entries().size() == table.entries().size();
        for (size_t k = 0; ok && k < sunk.entries().size(); ++k) {
            const auto &x = sunk.entries()[k], &y = table.entries()[k];
            ok = x.ptr == y.ptr && x.len == y.len && x.count == y.count;
        }
        if (!ok) { std::printf("sink differs at iteration %d\n", iter); return 1; }
        // a word keyed through the 8-byte load (8 readable bytes at it) gets the key of the
        // exact reads: the same word must find itself whichever way it is keyed
        for (size_t x = 0; x + 8 <= n; ++x)
            for (size_t y = x; y <= n && y <= x + 20; ++y) {
                const Key a = key_of(buf.get() + x, y - x), b = key_of_padded(buf.get() + x, y - x);
                if (a.hash != b.hash || a.head != b.head) {
                    std::printf("keys differ at iteration %d\n", iter);
                    return 1;
                }
            }
        (void)bpe::utf8_invalid_at(buf.get(), n);
        // long pre-tokens: pieces of at most m bytes tile each pre-token, even on invalid UTF-8
        const size_t m = 4 + rng() % 6;
        prev = 0;
        scan(buf.get(), n, [&](size_t a, size_t b) {
            split_long(buf.get(), a, b, m, [&](size_t x, size_t y) {
                ok = ok && x == prev && y > x && y - x <= m && y <= b;
                prev = y;
            });
        });
        const size_t target = n ? rng() % (n + 1) : 0;
        const size_t cut = plan_cut(pattern, buf.get(), n, splitter, target, rng() % 2 ? m : 0, rng() % 8);
        // the cut points without a scan: in range, never before a continuation byte
        const Pattern rule = Pattern(iter % 6);  // kNone: special tokens only
        const Cutter cutter(splitter, rule);
        const size_t lo = n ? rng() % n : 0, hi = n ? rng() % (n + 1) : 0;
        const size_t first = cutter.first(buf.get(), n, lo, hi), last = cutter.last(buf.get(), n, lo, hi);
        for (size_t q : {first, last})
            ok = ok && (q == SIZE_MAX || (q >= lo && q < hi && q > 0 && (rule == Pattern::kNone || !is_cont(buf[q]))));
        if (!ok || prev != n || (cut != SIZE_MAX && (cut < target || cut > n))) {
            std::printf("bad long split or cut at iteration %d\n", iter);
            return 1;
        }
    }
    uint64_t sum = 0;
    for (const auto &e : total.entries()) sum += e.count + (e.len ? e.ptr[e.len - 1] : 0);
    std::printf("%s\n", sum > 0 ? "ok" : "empty");
    return 0;
}
"""


@pytest.mark.slow
def test_scanner_is_memory_safe_on_any_bytes(tmp_path: Path) -> None:
    """Build the scanner alone under AddressSanitizer + UBSan and run it on random bytes."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    native = Path(__file__).resolve().parents[2] / "native"
    src = tmp_path / "harness.cpp"
    src.write_text(SANITIZER_HARNESS)
    exe = tmp_path / "harness"
    # -Og: every access and check kept, a faster build than -O1 (2.2 vs 4.7 CPU s), the same run
    build = subprocess.run([cxx, "-std=c++17", "-Og", "-g", "-fsanitize=address,undefined",
                            "-fno-sanitize-recover=all", "-I", str(native), str(src), "-o", str(exe)],
                           capture_output=True, text=True)
    if build.returncode != 0 and "sanitize" in build.stderr:
        pytest.skip(f"the compiler has no sanitizers: {build.stderr[:200]}")
    assert build.returncode == 0, build.stderr
    # the run takes ~15 CPU s; 120 s of wall timed out at load 10
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr
