// Where a word that is still its bytes may be cut without changing its replay (merge_replay.cpp):
// at a point no token of the log spans, no merge can ever join across, so the parts replay alone
// and their tokens, side by side, are the word's. The replay then keeps each part's tokens in a
// cache (as an encoder caches its pre-tokens), and a part seen before costs one lookup.
//
// Two tests, the second only where the first finds no cut:
// * bytes: between bytes x and y that no token holds side by side (SuperBPE's stage-2 pieces are
//   whole phrases, cut between a word and the space before the next: stage-1 words again);
// * characters: between two whole UTF-8 characters c1 c2 that no token holds side by side as
//   whole characters, where no token holds x y with a part of a character on either side. Why:
//   in Chinese nearly every (last byte, first byte) pair of two Han characters is in some
//   multi-character token, so the byte test cut nothing, and a Han run (zhwiki's words, which
//   nearly never repeat) replayed whole; far fewer pairs of characters are in a token, and the
//   parts between the others (a character or a word of a few) repeat from word to word.
//
// Why the character test is exact: say a token T occurs in the word across the point between c1
// and c2 (both whole in the word, as the test asks). Read as UTF-8 units (a byte that opens a
// sequence and all its continuation bytes, else one byte alone), T's units that begin at a byte
// opening a sequence are the word's own, since where a unit ends depends only on its bytes;
// so in T either both c1 and c2 are whole units side by side (a pair of `whole_`), or T begins
// inside c1 or ends inside c2, and then a part of one holds x and the next unit begins with y
// (a pair of `partial_`). Either way the test finds no cut.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bpe::merge {

class ReplayCuts {
  public:
    // log: (left, right, token) id triples; tb: every id's bytes
    ReplayCuts(const std::vector<uint32_t> &log, const std::vector<std::string> &tb)
        : inner_(256 * 256, 0), partial_(256 * 256, 0) {
        for (size_t k = 2; k < log.size(); k += 3) add_token(tb[log[k]]);
    }

    // Whether the word's bytes w[0, n) may be cut between w[i - 1] and w[i] (0 < i < n).
    bool cut(const uint8_t *w, size_t n, size_t i) const {
        const uint8_t x = w[i - 1], y = w[i];
        if (!inner_[x * 256 + y]) return true;
        if (partial_[x * 256 + y] || is_cont(y)) return false;
        const size_t l2 = unit_len(w + i, n - i);
        size_t j = i - 1;  // c1 begins at j: at most 3 continuation bytes back
        while (j > 0 && i - j < 4 && is_cont(w[j])) --j;
        if (l2 == 0 || is_cont(w[j]) || unit_len(w + j, n - j) != i - j) return false;
        return !has_whole(pack(w + j, i - j) << 32 | pack(w + i, l2));
    }

  private:
    static bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }
    // The length of the whole UTF-8 unit at p (its first byte's length, its continuation bytes
    // all there), or 0 when p[0] opens none (a continuation byte, 0xF8..0xFF) or it is cut short.
    static size_t unit_len(const uint8_t *p, size_t avail) {
        const uint8_t b = p[0];
        const size_t len = b < 0x80 ? 1 : b < 0xC0 ? 0 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : b < 0xF8 ? 4 : 0;
        if (len == 0 || len > avail) return 0;
        for (size_t k = 1; k < len; ++k)
            if (!is_cont(p[k])) return 0;
        return len;
    }
    static uint64_t pack(const uint8_t *p, size_t len) {  // a unit's 1-4 bytes, one u32
        uint32_t v = 0;
        for (size_t k = 0; k < len; ++k) v = v << 8 | p[k];
        return v;
    }

    // A token's pairs of bytes (inner_), and of its units side by side: both whole (whole_) or
    // not (partial_, by the two bytes where they meet).
    void add_token(const std::string &t) {
        const auto *s = reinterpret_cast<const uint8_t *>(t.data());
        const size_t n = t.size();
        size_t prev_at = 0, prev_len = 0;  // the unit before, as (start, whole length or 0)
        for (size_t i = 0; i < n;) {
            const size_t len = unit_len(s + i, n - i);
            const size_t step = len ? len : 1;
            if (i > 0) {
                const size_t xy = s[i - 1] * 256 + s[i];
                inner_[xy] = 1;
                if (prev_len && len)
                    add_whole(pack(s + prev_at, prev_len) << 32 | pack(s + i, len));
                else
                    partial_[xy] = 1;
            }
            for (size_t k = i + 1; k < i + step; ++k) inner_[s[k - 1] * 256 + s[k]] = 1;
            prev_at = i;
            prev_len = len;
            i += step;
        }
    }

    // whole_: a set of two units packed as u64, open addressing; the empty slot is ~0, which no
    // pair packs to (a unit packs below 0xF8000000)
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    static size_t hash(uint64_t k) { return size_t((k * 0x9E3779B97F4A7C15ull) >> 29); }
    void add_whole(uint64_t k) {
        if ((n_whole_ + 1) * 4 > whole_.size() * 3) grow();
        size_t h = hash(k) & (whole_.size() - 1);
        while (whole_[h] != kEmpty && whole_[h] != k) h = (h + 1) & (whole_.size() - 1);
        if (whole_[h] == kEmpty) {
            whole_[h] = k;
            ++n_whole_;
        }
    }
    bool has_whole(uint64_t k) const {
        if (whole_.empty()) return false;
        size_t h = hash(k) & (whole_.size() - 1);
        while (whole_[h] != kEmpty) {
            if (whole_[h] == k) return true;
            h = (h + 1) & (whole_.size() - 1);
        }
        return false;
    }
    void grow() {
        std::vector<uint64_t> old(whole_.empty() ? 1024 : whole_.size() * 2, kEmpty);
        old.swap(whole_);
        n_whole_ = 0;
        for (uint64_t k : old)
            if (k != kEmpty) add_whole(k);
    }

    std::vector<uint8_t> inner_, partial_;  // 256 x 256, by (x, y)
    std::vector<uint64_t> whole_;           // open addressing, load <= 3/4
    size_t n_whole_ = 0;
};

}  // namespace bpe::merge
