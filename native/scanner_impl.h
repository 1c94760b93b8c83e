// The GPT-2 scanner and word-counting pieces, free of Python so they can be tested alone
// (tests/test_scanner.py builds them under AddressSanitizer/UBSan); the one splitter
// (splitter.h) builds on `scan`, and the counter (scanner.cpp) and the encoder (encoder.cpp) use
// both. Header-only so that `scan` and the table's `add` inline into the callers' loops.
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
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "unicode_tables.h"

namespace bpe::detail {

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

// a[0, n) == b[0, n) for the short keys of the word table. Why not memcmp: a libc call per
// probe hit costs more than the whole comparison for words of a few bytes (it showed up as ~19%
// of the counting profile); word-sized loads, overlapping at the tail, need no byte loop.
inline bool equal_bytes(const uint8_t *a, const uint8_t *b, size_t n) {
    uint64_t x, y;
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8) {
            std::memcpy(&x, a + i, 8);
            std::memcpy(&y, b + i, 8);
            if (x != y) return false;
        }
        std::memcpy(&x, a + n - 8, 8);
        std::memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t p, q, r, t;
        std::memcpy(&p, a, 4);
        std::memcpy(&q, b, 4);
        std::memcpy(&r, a + n - 4, 4);
        std::memcpy(&t, b + n - 4, 4);
        return p == q && r == t;
    }
    for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return false;
    return true;
}

class ByteArena;

// Word -> count map for one chunk, laid out like CPython's compact dict: a sparse index of
// 8-byte slots (32-bit hash tag, 32-bit entry number; linear probing) over a dense array of
// entries in first-seen order. Why: a lookup's cache misses were the largest single cost of
// counting. The index for a typical 8 MB chunk is 2 MB (L2-sized), and the entries of frequent
// words, seen first, sit together at the front of the dense array. Why not std::unordered_map:
// one allocation per node and a pointer chase per lookup.
class WordTable {
  public:
    struct Entry {
        const uint8_t *ptr;  // a view into the caller's input, which outlives the table
        uint64_t len;        // 64-bit: a chunk (so one whitespace run) may exceed 4 GiB
        uint64_t count;
    };

    // `expected_words`: a guess of the distinct words to come, so that a typical chunk never
    // rehashes (each doubling re-inserts everything and faults in fresh pages).
    explicit WordTable(size_t expected_words) {
        size_t cap = size_t(1) << 12;
        while (cap < 2 * expected_words && cap < (size_t(1) << 20)) cap <<= 1;  // index <= 8 MB up front
        index_.assign(cap, 0);
        mask_ = cap - 1;
        entries_.reserve(cap / 2);
    }

    // Adds `k` occurrences of the word p[0, n) and returns its entry number (0-based, in
    // first-seen order). A new word's entry keeps the view `p` unless `arena` is given, which
    // then receives a copy (for tables that outlive their input).
    size_t add(const uint8_t *p, size_t n, uint64_t k = 1, ByteArena *arena = nullptr);

    // Distinct words with their counts, in first-seen order.
    const std::vector<Entry> &entries() const { return entries_; }

  private:
    static constexpr size_t kMaxEntries = 0xFFFFFFFEu;

    void grow() {
        index_.assign(index_.size() * 2, 0);
        mask_ = index_.size() - 1;
        for (size_t k = 0; k < entries_.size(); ++k) {
            const uint64_t h = hash_bytes(entries_[k].ptr, entries_[k].len);
            size_t i = size_t(h) & mask_;
            while (index_[i] != 0) i = (i + 1) & mask_;
            index_[i] = ((h >> 32) << 32) | uint64_t(k + 1);
        }
    }

    std::vector<uint64_t> index_;
    std::vector<Entry> entries_;
    size_t mask_ = 0;
};

// Stable storage for the bytes of words that must outlive the chunk they came from: 1 MiB
// blocks, never moved, so views into them stay valid; long words get a block of their own.
class ByteArena {
  public:
    ByteArena() = default;
    ByteArena(const ByteArena &) = delete;  // explicit: vector<unique_ptr> claims to be copyable
    ByteArena &operator=(const ByteArena &) = delete;
    ByteArena(ByteArena &&) = default;
    ByteArena &operator=(ByteArena &&) = default;

    const uint8_t *copy(const uint8_t *p, size_t n) {
        if (n > kBlock / 8) {  // rare (long whitespace runs): do not waste the current block
            blocks_.emplace_back(new uint8_t[n ? n : 1]);
            std::memcpy(blocks_.back().get(), p, n);
            return blocks_.back().get();
        }
        if (used_ + n > kBlock) {
            blocks_.emplace_back(new uint8_t[kBlock]);
            current_ = blocks_.back().get();
            used_ = 0;
        }
        uint8_t *out = current_ + used_;
        std::memcpy(out, p, n);
        used_ += n;
        return out;
    }

  private:
    static constexpr size_t kBlock = size_t(1) << 20;
    std::vector<std::unique_ptr<uint8_t[]>> blocks_;
    uint8_t *current_ = nullptr;
    size_t used_ = kBlock;
};

inline size_t WordTable::add(const uint8_t *p, size_t n, uint64_t k, ByteArena *arena) {
    const uint64_t h = hash_bytes(p, n);
    const uint64_t tag = h >> 32;
    size_t i = size_t(h) & mask_;
    for (;;) {
        const uint64_t slot = index_[i];
        if (slot == 0) {  // new word
            if (entries_.size() >= kMaxEntries) throw std::length_error("more than 2^32-2 distinct words");
            entries_.push_back({arena != nullptr ? arena->copy(p, n) : p, n, k});
            index_[i] = (tag << 32) | uint64_t(entries_.size());  // entry number + 1: 0 means empty
            if (entries_.size() * 2 > index_.size()) grow();      // load <= 1/2 keeps probes short
            return entries_.size() - 1;
        }
        if ((slot >> 32) == tag) {  // most other words fail here, without touching their bytes
            Entry &e = entries_[uint32_t(slot) - 1];
            if (e.len == n && equal_bytes(e.ptr, p, n)) {
                e.count += k;
                return uint32_t(slot) - 1;
            }
        }
        i = (i + 1) & mask_;
    }
}

// Whether s[0, n) is well-formed UTF-8 (the strict decoder's rule: no overlongs, surrogates or
// code points above U+10FFFF). Eight ASCII bytes at a time: most text is mostly ASCII.
inline bool valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            std::memcpy(&w, s + i, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        }
        if (s[i] < 0x80) {
            ++i;
            continue;
        }
        // decode() maps every ill-formed byte to a 1-byte "other"; a well-formed multi-byte
        // sequence is the only way to get a length above 1 from a byte >= 0x80.
        const Char c = decode(s + i, s + n);
        if (c.len == 1) return false;
        i += c.len;
    }
    return true;
}

}  // namespace bpe::detail
