// The one splitter: every rule about where text may be cut, for counting, planning and
// encoding. Python reaches it through `bpe_store._core.Splitter` (splitter.cpp); the counter
// (scanner.cpp) and the encoder (encoder.cpp) call it directly. bpe_store/training/reference.py is the
// only other, independent, statement of these rules (tests compare the two).
//
// It owns
//  * special tokens: leftmost occurrence, the longest at one position (SpecialSplitter);
//  * the pattern scan: the hand-written scanners of GPT-2's, tiktoken's cl100k and o200k, Llama
//    3's and Qwen2's patterns (scanner_impl.h, `scan_pattern`);
//  * the maximum pre-token length: a longer pre-token counts as pieces (`split_long`);
//  * safe cut points, where text may be cut without changing any pre-token:
//      - the start of a special token that no other occurrence overlaps from the left;
//      - for GPT-2's pattern, `gpt2_local_cut`: decided by the two characters around the point,
//        so it needs no scan from a known start (any window of a file will do); for the
//        tiktoken family (cl100k, o200k, Llama 3, Qwen2), `tiktoken_local_cut`, a narrower rule
//        of the same kind;
//      - `plan_cut`: a scan from a known chunk start, for text with no such point nearby (one
//        pre-token of hundreds of megabytes, cut where the maximum length splits it anyway).
// Header-only, free of Python, so tests/text/test_scanner.py builds it alone under ASan/UBSan.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "scanner_impl.h"

namespace bpe::detail {

// Special tokens, longest first. At one position the longest matching special wins; the
// leftmost position wins overall: the same split as the `regex` alternation in pretokenize.py.
//
// Why the first-byte search looks the way it does: candidate positions are found with memchr,
// one stream per distinct first byte (up to kMemchr of them), the nearest one next. With one
// special (or all starting with '<') that is one memchr; with the document separator 0xFF
// beside `<|endoftext|>` it is two, instead of a table lookup per byte (~10 % of counting).
class SpecialSplitter {
  public:
    static constexpr size_t kNone = SIZE_MAX;

    // `specials` in the caller's order; `index` in the callbacks below refers to that order.
    explicit SpecialSplitter(std::vector<std::string> specials) {
        std::vector<size_t> order(specials.size());
        for (size_t k = 0; k < order.size(); ++k) order[k] = k;
        std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            const std::string &x = specials[a], &y = specials[b];
            return x.size() != y.size() ? x.size() > y.size() : (x != y ? x < y : a < b);
        });
        for (size_t k : order) {
            if (specials[k].empty()) continue;  // callers refuse empty specials; never matches
            if (!tokens_.empty() && tokens_.back() == specials[k]) continue;  // a repeat: first index wins
            tokens_.push_back(specials[k]);
            index_.push_back(k);
            max_len_ = std::max(max_len_, specials[k].size());
            const uint8_t b = uint8_t(specials[k][0]);
            if (!first_[b]) firsts_.push_back(b);
            first_[b] = true;
        }
    }

    bool empty() const { return tokens_.empty(); }
    size_t max_len() const { return max_len_; }

    // The caller's index of the longest special starting at s[i] (i < n), or kNone.
    size_t match_at(const uint8_t *s, size_t n, size_t i) const {
        if (!first_[s[i]]) return kNone;
        for (size_t k = 0; k < tokens_.size(); ++k) {
            const std::string &t = tokens_[k];
            if (t.size() <= n - i && std::memcmp(s + i, t.data(), t.size()) == 0) return index_[k];
        }
        return kNone;
    }

    size_t length_of(size_t index) const {
        for (size_t k = 0; k < index_.size(); ++k)
            if (index_[k] == index) return tokens_[k].size();
        return 0;
    }

    // Whether some occurrence of a special token starts before q and ends after it (looking
    // only inside s[0, n)). A point no occurrence spans is outside every special the full
    // left-to-right split finds, whatever came before the window.
    bool spans(const uint8_t *s, size_t n, size_t q) const {
        if (max_len_ < 2 || q == 0) return false;
        for (size_t p = q > max_len_ - 1 ? q - (max_len_ - 1) : 0; p < q; ++p) {
            if (!first_[s[p]]) continue;
            for (const std::string &t : tokens_)
                if (p + t.size() > q && t.size() <= n - p && std::memcmp(s + p, t.data(), t.size()) == 0)
                    return true;
        }
        return false;
    }

    // Calls text(start, end) for each special-free piece of s[0, n) (empty pieces included) and,
    // between them, special(start, length, index) for each special found.
    template <class Text, class Special>
    void split(const uint8_t *s, size_t n, Text &&text, Special &&special) const {
        if (tokens_.empty()) {
            text(size_t(0), n);
            return;
        }
        const size_t streams = firsts_.size() <= kMemchr ? firsts_.size() : 0;
        size_t at[kMemchr];  // next occurrence of each first byte at or after i (n: none)
        auto find = [&](size_t k, size_t i) {
            const void *hit = std::memchr(s + i, firsts_[k], n - i);
            at[k] = hit == nullptr ? n : size_t(static_cast<const uint8_t *>(hit) - s);
        };
        for (size_t k = 0; k < streams; ++k) find(k, 0);
        size_t from = 0, i = 0;
        while (i < n) {
            if (streams != 0) {
                size_t c = n;
                for (size_t k = 0; k < streams; ++k) {
                    if (at[k] < i) find(k, i);
                    c = std::min(c, at[k]);
                }
                if (c >= n) break;
                i = c;
            } else if (!first_[s[i]]) {
                ++i;
                continue;
            }
            const size_t k = match_at(s, n, i);
            if (k == kNone) {
                ++i;
                continue;
            }
            const size_t len = length_of(k);
            text(from, i);
            special(i, len, k);
            i += len;
            from = i;
        }
        text(from, n);
    }

    // Calls piece(start, end) for each special-free piece of s[0, n) (empty pieces included).
    template <class Piece>
    void split(const uint8_t *s, size_t n, Piece &&piece) const {
        split(s, n, piece, [](size_t, size_t, size_t) {});
    }

  private:
    static constexpr size_t kMemchr = 4;
    std::vector<std::string> tokens_;  // longest first
    std::vector<size_t> index_;        // the caller's index of each of tokens_
    std::vector<uint8_t> firsts_;      // distinct first bytes
    bool first_[256] = {};
    size_t max_len_ = 0;
};

// ---- cut points without a scan (GPT-2's pattern) --------------------------------------------

// The character ending at q (q > 0) if it is whole (well-formed UTF-8), else nullopt-like
// {kOther, 0}: no rule cuts after a broken character.
inline Char char_before(const uint8_t *s, size_t q) {
    size_t k = q - 1;
    while (k > 0 && q - k < 4 && is_cont(s[k])) --k;
    const Char c = decode(s + k, s + q);
    return k + c.len == q ? c : Char{kOther, 0};
}

// Whether GPT-2's pre-tokens of special-free text s[0, n) are unchanged by cutting it at q
// (0 < q < n), judged from the two characters c1 (ending at q) and c2 (starting at q):
// c1 is not whitespace, not an apostrophe, and c2 is whitespace or of another class than c1.
// Why that is safe: the pre-token holding c1 is a contraction ('s ...) or a run of c1's class
// after an optional space; it ends at q either way, as the run stops at c2 (another class, or
// whitespace) and a contraction is fixed-length; matching it looked at most at c2, which ends
// it as the end of the text does. Matching resumes at q in the whole text too, and matching
// never looks back. An apostrophe is excluded because "'s" is one pre-token across classes.
// ASCII and CJK text both have such points every few characters (CJK at its punctuation),
// unlike "printable ASCII before a space or newline", the rule before this one.
inline bool gpt2_local_cut(const uint8_t *s, size_t n, size_t q) {
    if (q == 0 || q >= n || is_cont(s[q])) return false;
    const uint8_t b1 = s[q - 1], b2 = s[q];
    if (b1 < 0x80 && b2 < 0x80) {  // ASCII on both sides: two table loads
        const uint8_t k1 = tables::kClassStage2[b1], k2 = tables::kClassStage2[b2];
        return k1 != kSpace && b1 != '\'' && (k2 == kSpace || k2 != k1);
    }
    const Char c1 = char_before(s, q);
    if (c1.len == 0 || c1.cls == kSpace || b1 == '\'') return false;
    const Char c2 = decode(s + q, s + n);
    return c2.cls == kSpace || c2.cls != c1.cls;
}

// The rule for tiktoken's cl100k (GPT-4) and o200k patterns, the one bpe_store has streamed them
// with since they were added (tests/text/test_patterns.py): cut before a space that follows a
// non-whitespace character, or between a newline that follows a non-whitespace character and a
// non-whitespace character (for o200k, not "/": its punctuation pre-token takes the newlines
// and slashes after it, so ".\n/" is one pre-token). No pre-token of either pattern spans such
// a point (letter, number and punctuation runs stop at whitespace; a newline after a
// non-whitespace character ends the run it joins), and matching before it looks at most at the
// next character, which is whitespace, or non-whitespace, on both sides of the cut.
inline bool tiktoken_local_cut(const uint8_t *s, size_t n, size_t q, bool o200k) {
    if (q == 0 || q >= n) return false;
    if (s[q] == ' ') {
        const Char c1 = char_before(s, q);
        return c1.len != 0 && c1.cls != kSpace;
    }
    if (s[q - 1] != '\n' || q < 2 || is_cont(s[q]) || (o200k && s[q] == '/')) return false;
    const Char c0 = char_before(s, q - 1);
    return c0.len != 0 && c0.cls != kSpace && decode(s + q, s + n).cls != kSpace;
}


// Whether `pattern`'s local rule cuts special-free text s[0, n) at q (kNone: never).
inline bool pattern_local_cut(Pattern pattern, const uint8_t *s, size_t n, size_t q) {
    switch (pattern) {
        case Pattern::kGpt2: return gpt2_local_cut(s, n, q);
        case Pattern::kCl100k:
        case Pattern::kLlama3:
        case Pattern::kQwen2: return tiktoken_local_cut(s, n, q, false);
        case Pattern::kO200k: return tiktoken_local_cut(s, n, q, true);
        default: return false;
    }
}

// Safe cut points of text whose start need not be known (a window of a file, a buffer):
// the start of a special token, or a local cut of the pattern, in either case spanned by no occurrence
// of a special token. `margin` bytes at the end are context only (a special or a character
// may go on past them).
class Cutter {
  public:
    // `pattern`: whose local rule applies (kNone: only special tokens cut).
    Cutter(const SpecialSplitter &specials, Pattern pattern) : specials_(specials), pattern_(pattern) {}

    bool has_local_rule() const { return pattern_ != Pattern::kNone; }

    bool local_cut(const uint8_t *s, size_t n, size_t q) const { return pattern_local_cut(pattern_, s, n, q); }

    bool is_cut(const uint8_t *s, size_t n, size_t q) const {
        const bool candidate = (!specials_.empty() && specials_.match_at(s, n, q) != SpecialSplitter::kNone) ||
                               local_cut(s, n, q);
        return candidate && !specials_.spans(s, n, q);
    }

    // The first safe cut q with lo <= q < hi (q >= 1, hi <= n), or SIZE_MAX.
    size_t first(const uint8_t *s, size_t n, size_t lo, size_t hi) const {
        for (size_t q = std::max<size_t>(lo, 1); q < std::min(hi, n); ++q)
            if (is_cut(s, n, q)) return q;
        return SIZE_MAX;
    }

    // The last safe cut q with lo <= q < hi (q >= 1, hi <= n), or SIZE_MAX.
    size_t last(const uint8_t *s, size_t n, size_t lo, size_t hi) const {
        lo = std::max<size_t>(lo, 1);
        for (size_t q = std::min(hi, n); q-- > lo;)
            if (is_cut(s, n, q)) return q;
        return SIZE_MAX;
    }

  private:
    const SpecialSplitter &specials_;
    const Pattern pattern_;
};

// ---- long pre-tokens and chunk cuts ---------------------------------------------------------

// Where the piece of a long pre-token that starts at `x` ends: the last character start at or
// before x + max_bytes (and after x). On valid UTF-8 at most 3 steps back, since a character is
// at most 4 bytes and max_bytes >= 4; on anything else still after x, so splitting always ends.
// The caller guarantees x + max_bytes < n (the pre-token goes on past it).
inline size_t long_cut(const uint8_t *s, size_t x, size_t max_bytes) {
    size_t c = x + max_bytes;
    while (c > x + 1 && is_cont(s[c])) --c;
    return c;
}

// Calls emit(start, end) for the pieces that the pre-token s[x, y) is counted as: itself, or when
// it is longer than max_bytes (0 = no limit), pieces of at most max_bytes, each cut at the last
// character start that fits (pretokenize.split_long_pretoken is the spec). Why greedy from the
// pre-token's start: the pieces depend only on the pre-token, never on where a chunk began, and a
// chunk may begin at any cut point (see plan_cut).
template <class Emit>
inline void split_long(const uint8_t *s, size_t x, size_t y, size_t max_bytes, Emit &&emit) {
    if (max_bytes != 0) {
        while (y - x > max_bytes) {
            const size_t c = long_cut(s, x, max_bytes);
            emit(x, c);
            x = c;
        }
    }
    emit(x, y);
}

// Whether the last character of s[x, y) (y > x) is whitespace.
inline bool ends_in_space(const uint8_t *s, size_t x, size_t y) {
    size_t k = y - 1;
    while (k > x && is_cont(s[k])) --k;
    return decode(s + k, s + y).cls == kSpace;
}

// Whether the characters on both sides of c (x < c < y) are of one GPT-2 class that `pattern`
// matches as one run: c is then inside the run of a pre-token s[x, y), not right after its
// leading space (cut there, the chunk before would end in a lone space, which joins the
// whitespace before it into one pre-token); the chunk before ends in the same pre-token cut
// short, and a scan of the chunk after matches the rest of it.
// GPT-2: any class. The tiktoken family is narrower, since some of its pre-tokens do not survive
// being cut short (tests/text/test_pattern_scanners.py found each of these):
//  * letters, for cl100k and its kin (a letter run, after at most one prefix character); for
//    o200k only between two lowercase-only letters (\p{Ll}): its "lower" run, which ends where
//    it ended from anywhere inside it, while a cut inside an "upper" run can move where o200k's
//    backtracking ends the chunk before's pre-token (after its last \p{Lm}, \p{Lo} or mark);
//  * punctuation, for cl100k and its kin, not for o200k, where a mark (\p{M}) inside a
//    punctuation run starts a letter pre-token when a scan begins next to it;
//  * never whitespace (cut short, a run of spaces and newlines ends at its last newline and
//    leaves the rest a pre-token of its own) nor numbers (groups of at most three).
inline bool same_class_at(Pattern pattern, const uint8_t *s, size_t x, size_t c, size_t y) {
    size_t k = c - 1;
    while (k > x && is_cont(s[k])) --k;
    const uint8_t cls = decode(s + k, s + c).cls;
    if (cls != decode(s + c, s + y).cls) return false;
    switch (pattern) {
        case Pattern::kGpt2: return true;
        case Pattern::kO200k: {
            const auto lower_only = [](uint8_t f) { return (f & (kFLo | kFUp)) == kFLo; };
            return cls == kLetter && lower_only(fchar(s, k, s + c).f) && lower_only(fchar(s, c, s + y).f);
        }
        // SuperBPE's stage 2: letters only. A run of punctuation there is a match of two or more
        // marks, and the rest of it cut short may hold one mark, which no longer matches.
        case Pattern::kSuperword: return cls == kLetter;
        default: return cls == kLetter || cls == kOther;
    }
}

// The first offset q >= target of s[0, n) where a chunk may start, or SIZE_MAX if there is none
// at or before n - margin. s must begin where the whole input's scan starts a pre-token (a chunk
// start), and `margin` must cover what s may have cut off at its end (the longest special token
// plus a few characters; 0 when s ends where the input ends). A cut q is either
//  (a) the start of a pre-token whose previous pre-token (in the same special-free piece) ends in
//      a non-whitespace character: matching that one looked at most at q's character, which
//      ends no run differently from the end of the text, and matching from q does not look
//      back; or
//  (b) a cut point of a pre-token longer than max_bytes (split_long's) with characters of the
//      same class on both sides and at least 8 bytes (2 characters) of the pre-token after q:
//      the chunk before sees the pre-token end at q (still a run of that class after any
//      leading space), so it splits it at the same points up to q; the chunk after starts
//      inside the run, so its first pre-token is the rest of the same pre-token (not a space,
//      not a contraction, as the next character is of the same run), split from q as the
//      whole one is.
// Both kinds are strictly inside a special-free piece, so the special-token split is unchanged.
inline size_t plan_cut(Pattern pattern, const uint8_t *s, size_t n, const SpecialSplitter &splitter, size_t target,
                       size_t max_bytes, size_t margin) {
    constexpr size_t kNoCut = SIZE_MAX;
    if (n < margin || target > n - margin) return kNoCut;
    const size_t limit = n - margin;
    size_t found = kNoCut;
    splitter.split(s, n, [&](size_t a, size_t b) {
        if (found != kNoCut || b <= target || a > limit) return;  // pieces before target: no scan
        bool prev_space = true;  // no previous pre-token in this piece: never a cut of kind (a)
        scan_pattern(pattern, s + a, b - a, [&](size_t x, size_t y) {
            if (found != kNoCut) return;
            x += a;
            y += a;
            if (x > limit) return;
            if (x >= target && !prev_space) {
                found = x;
                return;
            }
            if (max_bytes != 0 && y - x > max_bytes) {
                size_t c = x;
                while (y - c > max_bytes) {
                    c = long_cut(s, c, max_bytes);
                    if (c < target || !same_class_at(pattern, s, x, c, y)) continue;
                    if (c <= limit && y - c >= 8) {
                        found = c;
                        return;
                    }
                    break;
                }
            }
            prev_space = ends_in_space(s, x, y);
        });
    });
    return found;
}

}  // namespace bpe::detail
