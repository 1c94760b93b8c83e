// tiktoken's patterns: cl100k (GPT-4), o200k (GPT-4o), and their kin (Llama 3's, Qwen2's):
// `scan_cl100k` and `scan_o200k`. Part of the scanners (scanner_impl.h).
//
// Same approach as `scan`: each alternative of the pattern is decided by the flags of one or two
// characters, then runs are consumed greedily; the few places where the regex backtracks are
// written out below with the reason they give the regex's answer. Flags come from the second
// generated table (one load per ASCII byte, two stages otherwise), since o200k's classes overlap.
#pragma once

#include <cstddef>
#include <cstdint>

#include "char_classes.h"

namespace bpe::detail {

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

}  // namespace bpe::detail
