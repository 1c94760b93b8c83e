// The pre-tokenizers (GPT-2's `scan`, and `scan_cl100k` / `scan_o200k` for the tiktoken family,
// chosen by `scan_pattern`) and the word-counting pieces, free of Python so they can be tested
// alone (tests/text/test_scanner.py builds them under AddressSanitizer/UBSan); the one splitter
// (splitter.h) builds on the scanners, and the counter (scanner.cpp) and the encoder
// (encoder.cpp) use both. Header-only so that the scanners and the table's `add` inline into the
// callers' loops.
//
// Performance notes (why the code looks the way it does):
// * Each pattern is a fixed alternation, so instead of a backtracking regex engine we run a
//   hand-written scanner over code points: each match is decided by the class of at most two
//   characters (an optional leading character and the first character of a run), then a run of
//   one class is consumed. Where the regex backtracks (GPT-2's `\s+(?!\S)`: "a whitespace run
//   followed by a non-space character gives back its last character"; o200k's case runs) the
//   scanner computes the end the backtracking reaches, with the reason beside it.
// * Classes come from two-stage tables (GPT-2's classes ~36 KB, tiktoken's flags ~40 KB); ASCII,
//   which dominates most corpora, is looked up without decoding.
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

// GPT-2's alternative 1, '(?:[sdmt]|ll|ve|re), at s[i] == '\'': ASCII and case-sensitive, tried
// first at every match start. The contraction's end, or 0 when none starts at i.
inline size_t gpt2_contraction_end(const uint8_t *s, size_t i, size_t n) {
    if (i + 1 >= n) return 0;
    const uint8_t b1 = s[i + 1];
    if (b1 == 's' || b1 == 'd' || b1 == 'm' || b1 == 't') return i + 2;
    if (i + 2 < n) {
        const uint8_t b2 = s[i + 2];
        if ((b1 == 'l' && b2 == 'l') || (b1 == 'v' && b2 == 'e') || (b1 == 'r' && b2 == 'e')) return i + 3;
    }
    return 0;
}

// GPT-2's alternatives 2-4 (` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`) after the optional
// space: the end of the run of c's class whose first character c starts at `run` (greedy).
inline size_t gpt2_class_run_end(const uint8_t *s, size_t run, size_t n, Char c) {
    const uint8_t *const end = s + n;
    size_t k = run + c.len;
    const uint8_t cls = c.cls;
    while (k < n) {
        const uint8_t bk = s[k];
        if (bk < 0x80) {  // ASCII fast path: no decoding
            k = ascii_run_end(s, k, n, cls);
            if (k >= n || s[k] < 0x80) break;  // an ASCII character of another class
            continue;
        }
        const Char d = decode(s + k, end);
        if (d.cls != cls) break;
        k += d.len;
    }
    return k;
}

// GPT-2's alternatives 5-6, `\s+(?!\S)|\s+`, for the whitespace character c at s[i]: the whole
// whitespace run if it ends the text; otherwise the run minus its last character (which then
// leads the next token, or stands alone), unless the run is that single character.
inline size_t gpt2_space_run_end(const uint8_t *s, size_t i, size_t n, Char c) {
    const uint8_t *const end = s + n;
    size_t last = i;  // start of the run's last character
    size_t k = i + c.len;
    while (k < n) {
        const Char d = s[k] < 0x80 ? Char{tables::kClassStage2[s[k]], 1} : decode(s + k, end);
        if (d.cls != kSpace) break;
        last = k;
        k += d.len;
    }
    if (k < n && last > i) k = last;
    return k;
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
        if (b == '\'') {  // 1. a contraction
            const size_t k = gpt2_contraction_end(s, i, n);
            if (k != 0) {
                emit(start, k);
                i = k;
                continue;
            }
        }
        // ASCII classified in line: decode() is too big to inline, and a call per pre-token
        // start was ~10 % of the scan
        Char c = b < 0x80 ? Char{tables::kClassStage2[b], 1} : decode(s + i, end);
        size_t run = i;  // where the run of one class starts (after an optional leading space)
        // 2-4: only U+0020 may lead, and only when a non-space follows it; the three classes are
        // disjoint, so the first character's class picks the alternative.
        if (b == ' ' && i + 1 < n) {
            const uint8_t b1 = s[i + 1];
            const Char c1 = b1 < 0x80 ? Char{tables::kClassStage2[b1], 1} : decode(s + i + 1, end);
            if (c1.cls != kSpace) {
                c = c1;
                run = i + 1;
            }
        }
        const size_t k = c.cls != kSpace ? gpt2_class_run_end(s, run, n, c) : gpt2_space_run_end(s, i, n, c);  // 5-6
        emit(start, k);
        i = k;
    }
}

// ---- tiktoken's patterns: cl100k (GPT-4), o200k (GPT-4o), and their kin -------------------
//
// Same approach as `scan`: each alternative of the pattern is decided by the flags of one or two
// characters, then runs are consumed greedily; the few places where the regex backtracks are
// written out below with the reason they give the regex's answer. Flags come from the second
// generated table (one load per ASCII byte, two stages otherwise), since o200k's classes overlap.

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

// The letter of a contraction at s[k] (k < n), lowercased ('S' -> 's'; U+017F, which `regex`
// folds to 's', too: tables::kContractionFolds), with its length in `len`; 0 for anything else.
inline char contraction_letter(const uint8_t *s, size_t k, size_t n, size_t &len) {
    const uint8_t b = s[k];
    len = 1;
    if (b < 0x80) return char(b >= 'A' && b <= 'Z' ? b | 0x20 : b);
    const Cp c = decode_cp(s + k, s + n);
    for (const auto &f : tables::kContractionFolds) {
        if (f.cp == c.cp) {
            len = c.len;
            return f.letter;
        }
    }
    return 0;
}

// The end of the contraction '(?i:[sdmt]|ll|ve|re) at s[i] == '\'', or 0 if there is none there.
// (o200k's suffix (?i:'s|'t|'re|'ve|'m|'ll|'d) is the same set of strings.)
inline size_t contraction_end(const uint8_t *s, size_t i, size_t n) {
    if (i + 1 >= n) return 0;
    size_t l1, l2;
    const char a = contraction_letter(s, i + 1, n, l1);
    if (a == 's' || a == 'd' || a == 'm' || a == 't') return i + 1 + l1;
    if ((a != 'l' && a != 'v' && a != 'r') || i + 1 + l1 >= n) return 0;
    const char b = contraction_letter(s, i + 1 + l1, n, l2);
    return (a == 'l' && b == 'l') || ((a == 'v' || a == 'r') && b == 'e') ? i + 1 + l1 + l2 : 0;
}

// The end of the whitespace pre-token at s[i] (a \s character) when no earlier alternative took
// it: the last three alternatives of every tiktoken pattern. With `end_rule` (cl100k's \s++$) a
// run that reaches the end of the text is one pre-token; otherwise \s*[\r\n] (or \s*[\r\n]+: the
// same here) ends after the run's last newline (\s* backtracks to it, and nothing after the last
// one is [\r\n]); otherwise \s+(?!\S) gives back the run's last character when a non-space
// follows, unless that is the only one (then \s takes it); at the end of the text the whole run.
inline size_t space_end(const uint8_t *s, size_t i, size_t n, bool end_rule) {
    const uint8_t *const end = s + n;
    FChar c = fchar(s, i, end);
    size_t k = i + c.len, last = i, newline = c.f & kFCrLf ? k : 0;
    while (k < n) {
        const FChar d = fchar(s, k, end);
        if (!(d.f & kFS)) break;
        last = k;
        k += d.len;
        if (d.f & kFCrLf) newline = k;
    }
    if (end_rule && k == n) return n;
    if (newline != 0) return newline;
    return k < n && last > i ? last : k;
}

// The end of ` ?[^\s\p{L}\p{N}]++` + the tail at s[i], or 0 when it does not match there: the
// punctuation run after an optional space, then any of `tail` (\r, \n, and for o200k also /).
inline size_t punct_end(const uint8_t *s, size_t i, size_t n, FChar c, bool slash) {
    size_t p = i;
    if (c.f & kFPunct) {  // not a punctuation character: only a space followed by one will do
        if (s[i] != ' ' || i + 1 >= n || (fchar(s, i + 1, s + n).f & kFPunct)) return 0;
        p = i + 1;
    }
    size_t k = flag_run_end<false, kFPunct, AsciiSet::kNone>(s, p, n);
    while (k < n && (s[k] == '\r' || s[k] == '\n' || (slash && s[k] == '/'))) ++k;
    return k;
}

// Calls emit(start, end) for each pre-token of s[0, n) under cl100k's pattern
//     '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+
//     |\s++$|\s*[\r\n]|\s+(?!\S)|\s
// (kEndRule true, kDigits 3) or a pattern of the same family: Llama 3's (no \s++$, kEndRule
// false; its other alternatives are cl100k's without the possessive marks, which change nothing
// here: nothing after them could take back what they matched) and Qwen2's (also \p{N}: kDigits 1).
template <bool kEndRule, unsigned kDigits, class Emit>
inline void scan_cl100k(const uint8_t *s, size_t n, Emit &&emit) {
    const uint8_t *const end = s + n;
    size_t i = 0;
    while (i < n) {
        const size_t start = i;
        if (s[i] == '\'') {
            const size_t k = contraction_end(s, i, n);
            if (k != 0) {
                emit(start, k);
                i = k;
                continue;
            }
        }
        const FChar c = fchar(s, i, end);
        // [^\r\n\p{L}\p{N}]?+\p{L}++: a letter run, after one character that is no letter,
        // number, \r or \n (a space, a tab, punctuation, a mark) when a letter follows it.
        size_t run = SIZE_MAX;
        if (c.f & kFL) {
            run = i;
        } else if (!(c.f & (kFN | kFCrLf)) && i + c.len < n && (fchar(s, i + c.len, end).f & kFL)) {
            run = i + c.len;
        }
        size_t k;
        if (run != SIZE_MAX) {
            k = flag_run_end<true, kFL, AsciiSet::kLetters>(s, run, n);
        } else if (c.f & kFN) {  // \p{N}{1,3}+: groups of up to kDigits from the left
            k = i + c.len;
            for (unsigned d = 1; d < kDigits && k < n; ++d) {
                const FChar e = fchar(s, k, end);
                if (!(e.f & kFN)) break;
                k += e.len;
            }
        } else if ((k = punct_end(s, i, n, c, false)) == 0) {
            k = space_end(s, i, n, kEndRule);  // c is \s: nothing else is left
        }
        emit(start, k);
        i = k;
    }
}

// o200k's first two alternatives after the optional prefix, from j:
//     [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+        (the "upper" run U, then "lower" L)
// and its end, or SIZE_MAX where it does not match. The greedy U run is taken whole; if a
// character of L follows it, L+ runs from there (first success of the backtracking: U* gave up
// nothing). Otherwise U* gives back characters one by one until L+ can start: at the run's last
// character in both sets (\p{Lm}, \p{Lo}, \p{M}), and L+ then ends right after it, since what
// follows in the run is in U only (or is where the run ended). No such character: no match.
inline size_t o200k_cased(const uint8_t *s, size_t j, size_t n) {
    const uint8_t *const end = s + n;
    size_t e = j, both_end = SIZE_MAX;
    while (e < n) {
        if (s[e] < 0x80) {  // ASCII: only A-Z is in U, and no ASCII character is in both sets
            e = ascii_set_end<AsciiSet::kUpper>(s, e, n);
            if (e >= n || s[e] < 0x80) break;
        }
        const FChar d = fchar(s, e, end);
        if (!(d.f & kFUp)) break;
        e += d.len;
        if (d.f & kFLo) both_end = e;
    }
    if (e < n && (fchar(s, e, end).f & kFLo)) return flag_run_end<true, kFLo, AsciiSet::kLower>(s, e, n);
    return both_end;
}

// Calls emit(start, end) for each pre-token of s[0, n) under o200k's pattern
//     [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//     |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//     |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <class Emit>
inline void scan_o200k(const uint8_t *s, size_t n, Emit &&emit) {
    const uint8_t *const end = s + n;
    size_t i = 0;
    while (i < n) {
        const size_t start = i;
        const FChar c = fchar(s, i, end);
        size_t k = SIZE_MAX;
        if (c.f & kFL) {  // no prefix (a letter is not [^\r\n\p{L}\p{N}]): the first alternative, else the second
            k = o200k_cased(s, i, n);
            if (k == SIZE_MAX) k = flag_run_end<true, kFUp, AsciiSet::kUpper>(s, i, n);  // U+, and L* takes nothing
        } else if (!(c.f & (kFN | kFCrLf))) {
            // With the prefix c, then, the first alternative without it (only a mark can start
            // it: a mark is in both sets, so it always matches), then the second with it (U+ after
            // c; L* takes nothing, or the first alternative would have matched).
            const size_t j = i + c.len;
            if (j < n) k = o200k_cased(s, j, n);
            if (k == SIZE_MAX && (c.f & kFLo)) k = o200k_cased(s, i, n);
            if (k == SIZE_MAX && j < n && (fchar(s, j, end).f & kFUp))
                k = flag_run_end<true, kFUp, AsciiSet::kUpper>(s, j, n);
        }
        if (k != SIZE_MAX) {
            if (k < n && s[k] == '\'') {  // the optional contraction suffix
                const size_t e = contraction_end(s, k, n);
                if (e != 0) k = e;
            }
        } else if (c.f & kFN) {  // \p{N}{1,3}
            k = i + c.len;
            for (unsigned d = 1; d < 3 && k < n; ++d) {
                const FChar e = fchar(s, k, end);
                if (!(e.f & kFN)) break;
                k += e.len;
            }
        } else if ((k = punct_end(s, i, n, c, true)) == 0) {
            k = space_end(s, i, n, false);
        }
        emit(start, k);
        i = k;
    }
}

// The patterns with a native scanner (pretokenize.NATIVE_SCANNERS names them); kNone: a user's
// own regex, which only special tokens may cut and which Python scans with `regex`.
enum class Pattern : uint8_t { kNone, kGpt2, kCl100k, kO200k, kLlama3, kQwen2 };

// Calls emit(start, end) for each pre-token of s[0, n) under `pattern` (not kNone). Why a switch
// per call and not per pre-token: callers scan whole special-free pieces, so the dispatch costs
// once per piece and each scanner's loop inlines `emit`.
template <class Emit>
inline void scan_pattern(Pattern pattern, const uint8_t *s, size_t n, Emit &&emit) {
    switch (pattern) {
        case Pattern::kCl100k: return scan_cl100k<true, 3>(s, n, emit);
        case Pattern::kLlama3: return scan_cl100k<false, 3>(s, n, emit);
        case Pattern::kQwen2: return scan_cl100k<false, 1>(s, n, emit);
        case Pattern::kO200k: return scan_o200k(s, n, emit);
        default: return scan(s, n, emit);
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

// A word's hash and its first bytes, computed together once per pre-token: `head` is the first
// 8 bytes of a word of 8 or more, and for a shorter word its bytes as a little-endian number
// (zero above them), so that most words (English averages ~5 bytes a pre-token) compare equal
// by `len` and `head` alone, read from the table's entry, without touching the bytes of the
// word's first occurrence: that third dependent cache miss per lookup was ~17 % of counting.
struct Key {
    uint64_t hash;
    uint64_t head;
};

constexpr uint64_t kSeed = 0x9E3779B97F4A7C15ull, kLenMul = 0xA0761D6478BD642Full;
constexpr uint64_t kWordMul = 0xE7037ED1A0B428DBull, kLastMul = 0x8EBC6AF09C88C6E3ull;

// The key of a word of more than 8 bytes: 8-byte words folded in, then the rest.
inline Key key_of_long(const uint8_t *p, size_t n) {
    uint64_t h = kSeed ^ (uint64_t(n) * kLenMul), head, w;
    std::memcpy(&head, p, 8);
    while (n >= 8) {
        std::memcpy(&w, p, 8);
        h = fold(h ^ w, kWordMul);
        p += 8;
        n -= 8;
    }
    w = 0;
    if (n >= 4) {  // two overlapping 4-byte loads cover 4..7 bytes without a byte loop
        uint32_t a, b;
        std::memcpy(&a, p, 4);
        std::memcpy(&b, p + n - 4, 4);
        w = (uint64_t(a) << 32) | b;
    } else if (n > 0) {
        w = (uint64_t(p[0]) << 16) | (uint64_t(p[n >> 1]) << 8) | p[n - 1];
    }
    return {fold(h ^ w, kLastMul), head};
}

inline Key key_of(const uint8_t *p, size_t n) {
    if (n > 8) return key_of_long(p, n);
    uint64_t head;
    if (n == 8) {
        std::memcpy(&head, p, 8);
    } else if (n >= 4) {  // two overlapping 4-byte loads cover 4..7 bytes without a byte loop
        uint32_t a, b;
        std::memcpy(&a, p, 4);
        std::memcpy(&b, p + n - 4, 4);
        head = uint64_t(a) | (uint64_t(b) << (8 * (n - 4)));  // the overlap ORs equal bytes
    } else {
        head = n == 0 ? 0 : uint64_t(p[0]) | (uint64_t(p[n >> 1]) << (8 * (n >> 1))) | (uint64_t(p[n - 1]) << (8 * (n - 1)));
    }
    return {fold(kSeed ^ (uint64_t(n) * kLenMul) ^ head, kLastMul), head};
}

// key_of(p, n) for a word with at least 8 readable bytes at p (the scanner's input, away from
// its end). Why: the word's length is a different branch from one pre-token to the next; here a
// word of up to 8 bytes is one load and a mask, no branch on its length.
inline Key key_of_padded(const uint8_t *p, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n <= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        const uint64_t head = n == 0 ? 0 : w & (~uint64_t(0) >> (64 - 8 * n));  // the bytes past n off
        return {fold(kSeed ^ (uint64_t(n) * kLenMul) ^ head, kLastMul), head};
    }
    return key_of_long(p, n);
#else
    return key_of(p, n);
#endif
}

inline uint64_t hash_bytes(const uint8_t *p, size_t n) { return key_of(p, n).hash; }

// Hints the CPU to start loading `p`'s cache line; a no-op where the compiler has no builtin.
inline void prefetch(const void *p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p);
#else
    (void)p;
#endif
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
        uint64_t head;       // Key::head: equal words compare equal here without reading `ptr`
    };

    // `expected_words`: a guess of the distinct words to come, so that a typical chunk never
    // rehashes (each doubling re-inserts everything and faults in fresh pages).
    explicit WordTable(size_t expected_words) : WordTable(expected_words, Storage{}) {}

    // The memory of a table: what `release` gives back and a new table may start from.
    struct Storage {
        std::vector<uint64_t> index;
        std::vector<Entry> entries;
    };

    // The same, built in `storage`'s vectors (their contents are dropped, their capacity kept).
    // Why: a chunk's table is ~2 MB of index and ~3 MB of entries; fresh memory for every chunk
    // was ~1300 page faults and as many zeroed pages (scanner.cpp: ChunkMemory).
    WordTable(size_t expected_words, Storage storage)
        : index_(std::move(storage.index)), entries_(std::move(storage.entries)) {
        size_t cap = size_t(1) << 12;
        while (cap < 2 * expected_words && cap < (size_t(1) << 20)) cap <<= 1;  // index <= 8 MB up front
        index_.assign(cap, 0);
        mask_ = cap - 1;
        entries_.clear();
        entries_.reserve(cap / 2);
    }

    // This table's vectors, for another table to reuse; leaves this one empty and unusable.
    Storage release() { return Storage{std::move(index_), std::move(entries_)}; }

    // Adds `k` occurrences of the word p[0, n) and returns its entry number (0-based, in
    // first-seen order). A new word's entry keeps the view `p` unless `arena` is given, which
    // then receives a copy (for tables that outlive their input).
    size_t add(const uint8_t *p, size_t n, uint64_t k = 1, ByteArena *arena = nullptr) {
        return add(p, n, key_of(p, n), k, arena);
    }
    // The same with the word's key already computed (key_of(p, n)).
    size_t add(const uint8_t *p, size_t n, const Key &key, uint64_t k = 1, ByteArena *arena = nullptr);

    // Start loading the index slot where `key`'s probe begins (see CountSink).
    void prefetch_slot(const Key &key) const { prefetch(&index_[size_t(key.hash) & mask_]); }
    // Start loading the entry the slot of `key` points to, if its tag matches: the slot has
    // usually arrived since prefetch_slot. A guess only: add() probes again.
    void prefetch_entry(const Key &key) const {
        const uint64_t slot = index_[size_t(key.hash) & mask_];
        if (slot != 0 && (slot >> 32) == (key.hash >> 32)) prefetch(&entries_[uint32_t(slot) - 1]);
    }

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

inline size_t WordTable::add(const uint8_t *p, size_t n, const Key &key, uint64_t k, ByteArena *arena) {
    const uint64_t h = key.hash;
    const uint64_t tag = h >> 32;
    size_t i = size_t(h) & mask_;
    for (;;) {
        const uint64_t slot = index_[i];
        if (slot == 0) {  // new word
            if (entries_.size() >= kMaxEntries) throw std::length_error("more than 2^32-2 distinct words");
            entries_.push_back({arena != nullptr ? arena->copy(p, n) : p, n, k, key.head});
            index_[i] = (tag << 32) | uint64_t(entries_.size());  // entry number + 1: 0 means empty
            if (entries_.size() * 2 > index_.size()) grow();      // load <= 1/2 keeps probes short
            return entries_.size() - 1;
        }
        if ((slot >> 32) == tag) {  // most other words fail here, without touching their bytes
            Entry &e = entries_[uint32_t(slot) - 1];
            if (e.len == n && e.head == key.head && (n <= 8 || equal_bytes(e.ptr + 8, p + 8, n - 8))) {
                e.count += k;
                return uint32_t(slot) - 1;
            }
        }
        i = (i + 1) & mask_;
    }
}

// Counts pre-tokens into a WordTable kDepth tokens behind the scanner. Why: a lookup is a chain
// of dependent cache misses (the index slot, then the entry), which stalled the scanner for most
// of the table's time; here each token's slot is prefetched when it is scanned, its entry
// kEntryAt tokens later, and it is added kDepth tokens later, when both have arrived. Tokens
// are still added in their order, so the table is exactly what adding them one by one makes.
// Call finish() after the last token.
class CountSink {
  public:
    // `arena`: as for WordTable::add (copies of new words, for a table that outlives its input).
    // `readable_end`: the end of the input the words lie in, if they all do (then a word with 8
    // bytes before it is keyed with key_of_padded).
    explicit CountSink(WordTable &table, ByteArena *arena = nullptr, const uint8_t *readable_end = nullptr)
        : table_(table), arena_(arena), end_(readable_end) {}

    // Adds `k` occurrences of the word p[0, n), which must stay readable until finish().
    void add(const uint8_t *p, size_t n, uint64_t k = 1) {
        const Key key = end_ != nullptr && end_ - p >= 8 ? key_of_padded(p, n) : key_of(p, n);
        table_.prefetch_slot(key);
        if (filled_ >= kEntryAt) table_.prefetch_entry(ring_[(pos_ - kEntryAt) & kMask].key);
        Pending &slot = ring_[pos_];  // the oldest token once the ring is full
        if (filled_ == kDepth)
            table_.add(slot.p, slot.n, slot.key, slot.k, arena_);
        else
            ++filled_;
        slot = {p, n, k, key};
        pos_ = (pos_ + 1) & kMask;
    }

    // Adds the tokens still waiting, oldest first.
    void finish() {
        const size_t start = (pos_ - filled_) & kMask;
        for (size_t i = 0; i < filled_; ++i) {
            const Pending &t = ring_[(start + i) & kMask];
            table_.add(t.p, t.n, t.key, t.k, arena_);
        }
        filled_ = 0;
    }

  private:
    // Distances in tokens, measured on enwiki (8 and 32 did no better): far enough for a slot
    // to arrive from L3 before its entry is looked up, near enough to stay in L1.
    static constexpr size_t kDepth = 16, kMask = kDepth - 1;  // a power of two
    static constexpr size_t kEntryAt = 6;
    struct Pending {
        const uint8_t *p;
        size_t n;
        uint64_t k;
        Key key;
    };
    WordTable &table_;
    ByteArena *arena_;
    const uint8_t *end_;
    Pending ring_[kDepth];
    size_t pos_ = 0, filled_ = 0;
};

// Adds every entry of `from` into `to` (copying new words into `arena`), prefetched as CountSink
// does: the reduce of counting, ~1 M lookups per 100 MB of English into a table of ~0.5 M words.
inline void add_table(WordTable &to, const WordTable &from, ByteArena *arena) {
    CountSink sink(to, arena);
    for (const auto &e : from.entries()) sink.add(e.ptr, e.len, e.count);
    sink.finish();
}

}  // namespace bpe::detail
