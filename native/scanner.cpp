// The GPT-2 pre-tokenizer and word counter: the hot loop of the counting phase.
//
// `gpt2_split` splits special-free UTF-8 text exactly as
//     regex.finditer(r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""", text)
// does, with the character classes generated from the `regex` module (unicode_tables.h).
// `count_words` splits a chunk at special tokens, splits each piece with the same scanner and
// counts the pieces in a hash table keyed by views into the input, so no word is copied until
// the result is handed to Python.
//
// Performance notes (why the code looks the way it does):
// * The pattern is a fixed alternation, so instead of a backtracking regex engine we run a
//   hand-written scanner over code points: each match is decided by the class of at most two
//   characters (an optional leading space and the first character of a run), then a run of one
//   class is consumed. The only backtracking in the pattern, `\s+(?!\S)`, becomes "a whitespace
//   run followed by a non-space character gives back its last character".
// * Classes come from a two-stage table (about 36 KB); ASCII, which dominates most corpora,
//   is looked up without decoding.
// * Counting keys are (pointer, length) views into the caller's bytes: the input stays alive
//   for the whole call, so hashing and comparing touch only the bytes already in cache.
// * Everything between reading the arguments and building the result runs with the GIL
//   released, so Python threads can count different chunks at the same time.
#include "scanner.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include "unicode_tables.h"

namespace nb = nanobind;

namespace bpe {
namespace {

// Character classes of the GPT-2 pattern; the numbers are those of tools/gen_unicode_tables.py.
enum CharClass : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

inline uint8_t class_of(uint32_t cp) {
    if (cp >= 0x110000) return kOther;
    return tables::kClassStage2[(uint32_t(tables::kClassStage1[cp >> tables::kClassShift]) << tables::kClassShift) |
                                (cp & tables::kClassMask)];
}

// One decoded character: its class and its length in bytes (1..4).
struct Char {
    uint8_t cls;
    uint8_t len;
};

inline bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

// The character at p (p < end). Any byte that does not start a well-formed UTF-8 sequence
// (stray continuation, overlong form, surrogate, > U+10FFFF, truncated at `end`) is one
// character of class "other": callers validate first, this only keeps the scanner total and
// in bounds on any input.
inline Char decode(const uint8_t *p, const uint8_t *end) {
    const uint8_t b0 = p[0];
    if (b0 < 0x80) return {tables::kClassStage2[b0], 1};  // block 0 of stage 2 is U+0000..U+007F
    const size_t avail = size_t(end - p);
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        if (avail >= 2 && is_cont(p[1])) return {class_of((uint32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F)), 2};
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        if (avail >= 3 && is_cont(p[1]) && is_cont(p[2])) {
            const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
            if (p[1] >= lo && p[1] <= hi)
                return {class_of((uint32_t(b0 & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F)), 3};
        }
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        if (avail >= 4 && is_cont(p[1]) && is_cont(p[2]) && is_cont(p[3])) {
            const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
            if (p[1] >= lo && p[1] <= hi)
                return {class_of((uint32_t(b0 & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) |
                                 (uint32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F)),
                        4};
        }
    }
    return {kOther, 1};
}

// Calls emit(start, end) for each GPT-2 pre-token of s[0, n), in order. A template so the
// counter's emit inlines into the loop (no per-piece indirect call, no vector of offsets).
template <class Emit>
inline void scan(const uint8_t *s, size_t n, Emit &&emit) {
    const uint8_t *const end = s + n;
    size_t i = 0;
    while (i < n) {
        const size_t start = i;
        const uint8_t b = s[i];
        // 1. '(?:[sdmt]|ll|ve|re): ASCII and case-sensitive, tried first at every match start.
        if (b == '\'' && i + 1 < n) {
            const uint8_t b1 = s[i + 1];
            if (b1 == 's' || b1 == 'd' || b1 == 'm' || b1 == 't') {
                emit(start, i + 2);
                i += 2;
                continue;
            }
            if (i + 2 < n) {
                const uint8_t b2 = s[i + 2];
                if ((b1 == 'l' && b2 == 'l') || (b1 == 'v' && b2 == 'e') || (b1 == 'r' && b2 == 'e')) {
                    emit(start, i + 3);
                    i += 3;
                    continue;
                }
            }
        }
        Char c = decode(s + i, end);
        size_t run = i;  // where the run of one class starts (after an optional leading space)
        // 2-4. ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: only U+0020 may lead, and only when
        // a non-space follows it; the three classes are disjoint, so the first character's class
        // picks the alternative and the run is greedy within that class.
        if (b == ' ' && i + 1 < n) {
            const Char c1 = decode(s + i + 1, end);
            if (c1.cls != kSpace) {
                c = c1;
                run = i + 1;
            }
        }
        if (c.cls != kSpace) {
            size_t k = run + c.len;
            const uint8_t cls = c.cls;
            while (k < n) {
                // ASCII fast path: no decoding, one table load per byte.
                const uint8_t bk = s[k];
                if (bk < 0x80) {
                    if (tables::kClassStage2[bk] != cls) break;
                    ++k;
                    continue;
                }
                const Char d = decode(s + k, end);
                if (d.cls != cls) break;
                k += d.len;
            }
            emit(start, k);
            i = k;
            continue;
        }
        // 5-6. `\s+(?!\S)|\s+`: the whole whitespace run if it ends the text; otherwise the run
        // minus its last character (which then leads the next token, or stands alone), unless
        // the run is that single character.
        size_t last = i;  // start of the run's last character
        size_t k = i + c.len;
        while (k < n) {
            const Char d = decode(s + k, end);
            if (d.cls != kSpace) break;
            last = k;
            k += d.len;
        }
        if (k < n && last > i) k = last;
        emit(start, k);
        i = k;
    }
}

// ---- counting -------------------------------------------------------------------------------

// A fast 64-bit hash for short byte strings (most words are under 8 bytes): word-sized loads and
// a 64x64->128 multiply fold per 8 bytes. Not cryptographic; collisions only cost a compare.
inline uint64_t fold(uint64_t a, uint64_t b) {
#ifdef __SIZEOF_INT128__
    const unsigned __int128 r = (unsigned __int128)a * b;
    return uint64_t(r) ^ uint64_t(r >> 64);
#else
    const uint64_t r = a * b;
    return r ^ (r >> 29) ^ (a >> 32) * b;
#endif
}

inline uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t(n) * 0xA0761D6478BD642Full);
    while (n >= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        h = fold(h ^ w, 0xE7037ED1A0B428DBull);
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    if (n >= 4) {  // two overlapping 4-byte loads cover 4..7 bytes without a byte loop
        uint32_t a, b;
        std::memcpy(&a, p, 4);
        std::memcpy(&b, p + n - 4, 4);
        w = (uint64_t(a) << 32) | b;
    } else if (n > 0) {
        w = (uint64_t(p[0]) << 16) | (uint64_t(p[n >> 1]) << 8) | p[n - 1];
    }
    return fold(h ^ w, 0x8EBC6AF09C88C6E3ull);
}

// Open-addressing (linear probing) map from a view into the input to a 64-bit count. Why not
// std::unordered_map: one allocation per node and a pointer chase per lookup; here a lookup is
// one cache line in the common case and growth is a single rehash.
class WordTable {
  public:
    struct Slot {
        const uint8_t *ptr = nullptr;  // nullptr: empty
        uint32_t len = 0;
        uint32_t tag = 0;  // high bits of the hash: most mismatches fail without a memcmp
        uint64_t count = 0;
    };

    WordTable() : slots_(1 << 12), mask_(slots_.size() - 1) {}

    void add(const uint8_t *p, size_t n) {
        const uint64_t h = hash_bytes(p, n);
        const uint32_t tag = uint32_t(h >> 32);
        size_t i = size_t(h) & mask_;
        for (;;) {
            Slot &s = slots_[i];
            if (s.ptr == nullptr) {
                s.ptr = p;
                s.len = uint32_t(n);
                s.tag = tag;
                s.count = 1;
                if (++used_ * 2 > slots_.size()) grow();  // load factor <= 1/2 keeps probes short
                return;
            }
            if (s.tag == tag && s.len == n && std::memcmp(s.ptr, p, n) == 0) {
                ++s.count;
                return;
            }
            i = (i + 1) & mask_;
        }
    }

    const std::vector<Slot> &slots() const { return slots_; }
    size_t size() const { return used_; }

  private:
    void grow() {
        std::vector<Slot> old(slots_.size() * 2);
        old.swap(slots_);
        mask_ = slots_.size() - 1;
        for (const Slot &s : old) {
            if (s.ptr == nullptr) continue;
            size_t i = size_t(hash_bytes(s.ptr, s.len)) & mask_;
            while (slots_[i].ptr != nullptr) i = (i + 1) & mask_;
            slots_[i] = s;
        }
    }

    std::vector<Slot> slots_;
    size_t mask_;
    size_t used_ = 0;
};

// Special tokens, longest first, with a table of their first bytes so most positions are
// rejected by one load. At one position the longest matching special wins; the leftmost
// position wins overall: the same split as the `regex` alternation in pretokenize.py.
class SpecialSplitter {
  public:
    explicit SpecialSplitter(std::vector<std::string> specials) : specials_(std::move(specials)) {
        std::sort(specials_.begin(), specials_.end(), [](const std::string &a, const std::string &b) {
            return a.size() != b.size() ? a.size() > b.size() : a < b;
        });
        for (const std::string &t : specials_) first_[uint8_t(t[0])] = true;
        single_first_ = !specials_.empty() &&
                        std::all_of(specials_.begin(), specials_.end(),
                                    [&](const std::string &t) { return t[0] == specials_[0][0]; });
    }

    // Calls piece(start, end) for each special-free piece of s[0, n) (empty pieces included).
    template <class Piece>
    void split(const uint8_t *s, size_t n, Piece &&piece) const {
        if (specials_.empty()) {
            piece(size_t(0), n);
            return;
        }
        size_t from = 0, i = 0;
        while (i < n) {
            if (single_first_) {  // the usual case (one special, or all start with '<'): memchr
                const void *hit = std::memchr(s + i, specials_[0][0], n - i);
                if (hit == nullptr) break;
                i = size_t(static_cast<const uint8_t *>(hit) - s);
            } else if (!first_[s[i]]) {
                ++i;
                continue;
            }
            size_t matched = 0;
            for (const std::string &t : specials_) {
                if (t.size() <= n - i && std::memcmp(s + i, t.data(), t.size()) == 0) {
                    matched = t.size();
                    break;
                }
            }
            if (matched == 0) {
                ++i;
                continue;
            }
            piece(from, i);
            i += matched;
            from = i;
        }
        piece(from, n);
    }

  private:
    std::vector<std::string> specials_;
    bool first_[256] = {};
    bool single_first_ = false;
};

}  // namespace

void gpt2_split(std::string_view text, std::vector<size_t> &ends) {
    scan(reinterpret_cast<const uint8_t *>(text.data()), text.size(),
         [&](size_t, size_t e) { ends.push_back(e); });
}

}  // namespace bpe

// ---- Python API -----------------------------------------------------------------------------

namespace {

// bytes(view) for the result; raises (via nanobind) on allocation failure.
nb::object py_bytes(const uint8_t *p, size_t n) {
    return nb::steal(PyBytes_FromStringAndSize(reinterpret_cast<const char *>(p), Py_ssize_t(n)));
}

nb::list py_pretokenize(nb::bytes data) {
    const auto *s = static_cast<const uint8_t *>(data.data());
    const size_t n = data.size();
    std::vector<size_t> ends;
    {
        nb::gil_scoped_release release;
        ends.reserve(n / 4 + 1);
        bpe::gpt2_split(std::string_view(reinterpret_cast<const char *>(s), n), ends);
    }
    nb::list out;
    size_t prev = 0;
    for (size_t e : ends) {
        out.append(py_bytes(s + prev, e - prev));
        prev = e;
    }
    return out;
}

nb::tuple py_count_words(nb::bytes data, const std::vector<nb::bytes> &specials) {
    std::vector<std::string> toks;
    toks.reserve(specials.size());
    for (const nb::bytes &t : specials) {
        if (t.size() == 0) throw nb::value_error("special tokens must be non-empty");
        toks.emplace_back(t.c_str(), t.size());
    }
    const auto *s = static_cast<const uint8_t *>(data.data());
    const size_t n = data.size();
    bpe::WordTable table;
    uint64_t total = 0;
    {
        // `data` is immutable and referenced by the caller's frame, so it outlives this block.
        nb::gil_scoped_release release;
        const bpe::SpecialSplitter splitter(std::move(toks));
        splitter.split(s, n, [&](size_t a, size_t b) {
            bpe::scan(s + a, b - a, [&](size_t x, size_t y) {
                table.add(s + a + x, y - x);
                ++total;
            });
        });
    }
    // dict[bytes, int] built with the C API: nb::dict's operator[] would go through two extra
    // temporaries per word, and this loop runs once per distinct word with the GIL held.
    nb::object counts = nb::steal(PyDict_New());
    if (!counts.is_valid()) throw nb::python_error();
    for (const auto &slot : table.slots()) {
        if (slot.ptr == nullptr) continue;
        nb::object key = py_bytes(slot.ptr, slot.len);
        nb::object value = nb::steal(PyLong_FromUnsignedLongLong(slot.count));
        if (!key.is_valid() || !value.is_valid() || PyDict_SetItem(counts.ptr(), key.ptr(), value.ptr()) != 0)
            throw nb::python_error();
    }
    return nb::make_tuple(counts, nb::steal(PyLong_FromUnsignedLongLong(total)));
}

int py_char_class(int64_t cp) {
    if (cp < 0 || cp >= 0x110000) throw nb::value_error("code point out of range 0..0x10FFFF");
    return bpe::class_of(uint32_t(cp));
}

}  // namespace

void register_scanner(nb::module_ &m) {
    m.def("pretokenize", &py_pretokenize, nb::arg("data"),
          "GPT-2 pre-tokens of special-free UTF-8 ``data``, as ``regex.finditer(GPT2_PATTERN)`` "
          "splits it: list[bytes]. Releases the GIL while scanning.");
    m.def("count_words", &py_count_words, nb::arg("data"), nb::arg("specials"),
          "``({word bytes: count}, pre-tokens)`` of UTF-8 ``data`` split at ``specials`` (leftmost, "
          "longest at one position; never counted), then by the GPT-2 pattern. Releases the GIL.");
    m.def("char_class", &py_char_class, nb::arg("cp"),
          "GPT-2 class of a code point: 0 other, 1 \\p{L}, 2 \\p{N}, 3 \\s (as `regex` defines them).");
}
