// Characters as the scanners see them: a code point decoded from UTF-8 (the one decoder of the
// scanners and the splitter), its GPT-2 class or its tiktoken flags from the generated two-stage
// tables (unicode_tables.h), and the ends of runs of one class, ASCII 16 bytes at a time.
// Part of the scanners (scanner_impl.h says why they look the way they do).
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__SSE2__) && (defined(__GNUC__) || defined(__clang__))
#include <emmintrin.h>
#define BPE_SCANNER_SSE2 1
#endif

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

// A decoded code point and its length in bytes (1..4).
struct Cp {
    uint32_t cp;
    uint8_t len;
};
constexpr uint32_t kBadCp = 0x110000;  // past Unicode: every table gives it class "other", no flags

// The code point at p (p < end). Any byte that does not start a well-formed UTF-8 sequence
// (stray continuation, overlong form, surrogate, > U+10FFFF, truncated at `end`) is one
// character kBadCp: callers validate first, this only keeps the scanners total and in bounds on
// any input. The one UTF-8 decoder of the scanners and the splitter.
inline Cp decode_cp(const uint8_t *p, const uint8_t *end) {
    const uint8_t b0 = p[0];
    if (b0 < 0x80) return {b0, 1};
    const size_t avail = size_t(end - p);
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        if (avail >= 2 && is_cont(p[1])) return {(uint32_t(b0 & 0x1F) << 6) | (p[1] & 0x3F), 2};
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        if (avail >= 3 && is_cont(p[1]) && is_cont(p[2])) {
            const uint8_t lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;
            if (p[1] >= lo && p[1] <= hi)
                return {(uint32_t(b0 & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F), 3};
        }
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        if (avail >= 4 && is_cont(p[1]) && is_cont(p[2]) && is_cont(p[3])) {
            const uint8_t lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;
            if (p[1] >= lo && p[1] <= hi)
                return {(uint32_t(b0 & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) |
                            (p[3] & 0x3F),
                        4};
        }
    }
    return {kBadCp, 1};
}

// The GPT-2 class and length of the character at p (p < end); see decode_cp.
inline Char decode(const uint8_t *p, const uint8_t *end) {
    const Cp c = decode_cp(p, end);
    return {class_of(c.cp), c.len};
}

// The first offset >= k of s[0, n) whose byte b fails (b | fold) - base <= top (as unsigned
// bytes): the end of a run of ASCII letters (fold 0x20, 'a', 25), lowercase letters (0, 'a', 25),
// uppercase letters (0, 'A', 25) or digits (0, '0', 9). No byte >= 0x80 passes, so a non-ASCII
// character ends the run too. Why 16 bytes at a time: a byte loop pays a mispredicted branch
// where each run ends, about once per pre-token; here a run shorter than 16 bytes (most words)
// ends with one compare, one mask and a count of trailing zeros.
inline size_t ascii_range_end(const uint8_t *s, size_t k, size_t n, uint8_t fold, uint8_t base, uint8_t top) {
#ifdef BPE_SCANNER_SSE2
    const __m128i vfold = _mm_set1_epi8(char(fold));
    const __m128i vbase = _mm_set1_epi8(char(base));
    const __m128i vtop = _mm_set1_epi8(char(top));
    while (k + 16 <= n) {
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + k));
        const __m128i t = _mm_sub_epi8(_mm_or_si128(x, vfold), vbase);
        const __m128i in = _mm_cmpeq_epi8(_mm_min_epu8(t, vtop), t);
        const unsigned out = ~unsigned(_mm_movemask_epi8(in)) & 0xFFFFu;
        if (out != 0) return k + size_t(__builtin_ctz(out));
        k += 16;
    }
#endif
    while (k < n && uint8_t(uint8_t(s[k] | fold) - base) <= top) ++k;
    return k;
}

// The first offset >= k of s[0, n) that is not an ASCII character of GPT-2 class `cls` (s[k] is
// ASCII). Letters and digits skip 16 bytes at a time (ascii_range_end); other classes, rarer and
// shorter, take one table load per byte.
inline size_t ascii_run_end(const uint8_t *s, size_t k, size_t n, uint8_t cls) {
    if (cls == kLetter) return ascii_range_end(s, k, n, 0x20, 'a', 25);
    if (cls == kNumber) return ascii_range_end(s, k, n, 0, '0', 9);
    while (k < n && s[k] < 0x80 && tables::kClassStage2[s[k]] == cls) ++k;
    return k;
}

// Flag bits of tables::kFlagStage2 (tools/gen_unicode_tables.py, FLAGS).
enum Flag : uint8_t {
    kFL = 1,      // \p{L}
    kFN = 2,      // \p{N}
    kFS = 4,      // \s
    kFUp = 8,     // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]: o200k's first letter set
    kFLo = 16,    // [\p{Ll}\p{Lm}\p{Lo}\p{M}]: o200k's second letter set
    kFCrLf = 32,  // [\r\n]
};
constexpr uint8_t kFPunct = kFL | kFN | kFS;  // [^\s\p{L}\p{N}] is "none of these"

inline uint8_t flags_of(uint32_t cp) {
    if (cp >= 0x110000) return 0;
    return tables::kFlagStage2[(uint32_t(tables::kFlagStage1[cp >> tables::kFlagShift]) << tables::kFlagShift) |
                               (cp & tables::kFlagMask)];
}

// One decoded character: its flags and its length in bytes (1..4).
struct FChar {
    uint8_t f;
    uint8_t len;
};

// The character at s[i] (i < n, end = s + n); ASCII without a call (block 0 of stage 2 is ASCII).
inline FChar fchar(const uint8_t *s, size_t i, const uint8_t *end) {
    const uint8_t b = s[i];
    if (b < 0x80) return {tables::kFlagStage2[b], 1};
    const Cp c = decode_cp(s + i, end);
    return {flags_of(c.cp), c.len};
}

// ASCII members of a flag set, for the 16-byte skip: which range test they are (kFL: letters,
// kFLo: a-z, kFUp: A-Z, kFN: digits), or none (then one table load per byte).
enum class AsciiSet : uint8_t { kNone, kLetters, kLower, kUpper, kDigits };

template <AsciiSet kSet>
inline size_t ascii_set_end(const uint8_t *s, size_t k, size_t n) {
    if constexpr (kSet == AsciiSet::kLetters) return ascii_range_end(s, k, n, 0x20, 'a', 25);
    if constexpr (kSet == AsciiSet::kLower) return ascii_range_end(s, k, n, 0, 'a', 25);
    if constexpr (kSet == AsciiSet::kUpper) return ascii_range_end(s, k, n, 0, 'A', 25);
    if constexpr (kSet == AsciiSet::kDigits) return ascii_range_end(s, k, n, 0, '0', 9);
    return k;
}

// The end of the run from k of characters with some flag of `kAny` (kWant true) or with none of
// them (kWant false). `kAscii` must be the run's ASCII members exactly, or kNone. Template
// parameters, not arguments: each call site compiles to its own loop, with no switch per run.
template <bool kWant, uint8_t kAny, AsciiSet kAscii>
inline size_t flag_run_end(const uint8_t *s, size_t k, size_t n) {
    const uint8_t *const end = s + n;
    while (k < n) {
        const uint8_t b = s[k];
        if (b < 0x80) {
            if constexpr (kAscii != AsciiSet::kNone) {
                k = ascii_set_end<kAscii>(s, k, n);
                if (k >= n || s[k] < 0x80) break;  // an ASCII character outside the set
                continue;
            }
            if (((tables::kFlagStage2[b] & kAny) != 0) != kWant) break;
            ++k;
            continue;
        }
        const FChar d = fchar(s, k, end);
        if (((d.f & kAny) != 0) != kWant) break;
        k += d.len;
    }
    return k;
}

}  // namespace bpe::detail
