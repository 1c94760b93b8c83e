// GPT-2's pre-tokenizer, `scan`: its pattern's alternatives, each decided by the class of one or
// two characters (char_classes.h). Part of the scanners (scanner_impl.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "char_classes.h"

namespace bpe::detail {

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

}  // namespace bpe::detail
