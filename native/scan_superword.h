// SuperBPE's stage-2 pre-tokenizer, `scan_superword`: bpe_store/text/superword_split.py's
// STAGE2_PATTERN, the authors' Split regex
//     \p{N}{1,3} | ?[^\s\p{L}\p{N}]{2,}[\r\n/]*| +(?!\S)
// with "isolated" behaviour: each match is a piece, and so is each maximal stretch of text at none
// of whose characters a match starts. Part of the scanners (scanner_impl.h).
//
// Why native: stage 2 counts every piece of the whole corpus, and `regex` ran the pattern at
// ~9.5 MB/s a core on English (bench/RESULTS-superword.md: 398 s of 1 GB's stage 2). Each match is
// decided by the flags of at most three characters, as in the other scanners; the one place the
// regex backtracks (` +(?!\S)` before a non-space) is written out below with its reason.
#pragma once

#include <cstddef>
#include <cstdint>

#include "char_classes.h"

namespace bpe::detail {

inline bool is_punct(uint8_t f) { return (f & kFPunct) == 0; }  // [^\s\p{L}\p{N}]

// The end of the match of the split regex that starts at s[i] (i < n), or 0 when none starts
// there. The alternatives in the regex's order; each fails or matches from its first characters.
inline size_t superword_match_end(const uint8_t *s, size_t i, size_t n) {
    const uint8_t *const end = s + n;
    const FChar c = fchar(s, i, end);
    if (c.f & kFN) {  // \p{N}{1,3}: greedy, at most three
        size_t k = i + c.len;
        for (int more = 0; more < 2 && k < n; ++more) {
            const FChar d = fchar(s, k, end);
            if (!(d.f & kFN)) break;
            k += d.len;
        }
        return k;
    }
    const bool space = s[i] == ' ';
    // ` ?[^\s\p{L}\p{N}]{2,}[\r\n/]*`: ` ?` is tried with the space first, and without it the
    // run would start at a space, which is not punctuation; so the run starts after the space.
    const size_t p = space ? i + 1 : i;
    if (p < n) {
        const FChar p1 = p == i ? c : fchar(s, p, end);
        if (is_punct(p1.f) && p + p1.len < n && is_punct(fchar(s, p + p1.len, end).f)) {
            size_t k = flag_run_end<false, kFPunct, AsciiSet::kNone>(s, p + p1.len, n);
            while (k < n && (s[k] == '\r' || s[k] == '\n' || s[k] == '/')) ++k;
            return k;
        }
    }
    if (space) {  // ` +(?!\S)`
        size_t k = i + 1;
        while (k < n && s[k] == ' ') ++k;
        if (k == n || (fchar(s, k, end).f & kFS)) return k;  // the run, then whitespace or the end
        // A non-space follows: ` +` gives back its last space, which is whitespace, so the
        // lookahead holds after one space fewer; a single space has none to give back.
        return k - i >= 2 ? k - 1 : 0;
    }
    return 0;
}

// Calls emit(start, end) for each stage-2 piece of s[0, n), in order.
template <class Emit>
inline void scan_superword(const uint8_t *s, size_t n, Emit &&emit) {
    const uint8_t *const end = s + n;
    size_t i = 0;
    while (i < n) {
        const size_t m = superword_match_end(s, i, n);
        if (m != 0) {
            emit(i, m);
            i = m;
            continue;
        }
        // A stretch between matches: no match starts at a letter, at a space before a letter or
        // at a punctuation mark not followed by another (the regex's shortcuts in STAGE2_PATTERN),
        // so letters are skipped as runs and only the other characters are tried.
        size_t k = i + fchar(s, i, end).len;
        while (k < n) {
            const uint8_t b = s[k];
            if (b < 0x80 && uint8_t(uint8_t(b | 0x20) - 'a') <= 25) {
                k = ascii_range_end(s, k, n, 0x20, 'a', 25);
                continue;
            }
            const FChar d = fchar(s, k, end);
            if ((d.f & kFL) || (b == ' ' && k + 1 < n && (fchar(s, k + 1, end).f & kFL))) {
                k += d.len;
                continue;
            }
            if (superword_match_end(s, k, n) != 0) break;
            k += d.len;
        }
        emit(i, k);
        i = k;
    }
}

}  // namespace bpe::detail
