// The encoder's pair table: {(left id, right id): (rank, merged id)}, the one lookup every merge of
// a piece makes, and a dense table of the pairs of two single bytes, where every piece starts.
//
// Why it looks the way it does:
// * Open addressing keyed by (left << 32 | right): one multiply, one probe in the common case, no
//   allocation, no pointer chasing. The slot comes from the top bits of the product: the low bits
//   ignore `left`, and using them made every pair with the same right token collide (enwiki
//   encoding went from 15 to 57 MB/s when this was fixed).
// * Key and value in one 16-byte slot: a probe is one cache miss, not two (keys and values were
//   two arrays; the pair lookups of long pieces, Chinese text's, waited on both).
// * Every piece starts as single bytes, so its first n - 1 lookups are pairs of two bytes: the
//   `bytes` table answers them by index (256 x 256 entries of 8 bytes) instead of a probe into a
//   table of 4-16 MiB (cl100k_base's 233 K pairs, o200k_base's 446 K); the pairs a text uses
//   stay in L1/L2.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "huge_pages.h"

namespace bpe::enc {

constexpr uint32_t kNone = 0xFFFFFFFFu;

// (rank, merged id) of a pair; rank kNone = the pair does not merge
struct Rank {
    uint32_t rank, merged;
};

// {(left, right): (rank, merged id)}; rank is the merge's position in the list given.
class PairTable {
  public:
    void build(const std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> &merges) {
        build_lists(merges);
        size_t heavy = 0;
        for (const auto &m : merges) heavy += std::get<0>(m) >= left_.size();
        size_t cap = 16;
        shift_ = 60;
        while (cap < heavy * 2 + 2) cap <<= 1, --shift_;
        mask_ = cap - 1;
        slots_.assign(cap, Slot{kEmpty, kNone, kNone});
        for (size_t r = 0; r < merges.size(); ++r) {
            const auto &[a, b, t] = merges[r];
            if (a < left_.size()) continue;
            uint64_t k = key(a, b);
            size_t i = slot(k);
            while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
            if (slots_[i].key == k) continue;  // a repeated pair keeps its first rank
            slots_[i] = Slot{k, uint32_t(r), t};
        }
    }
    // the pairs of two bytes, by (first byte << 8 | second byte); byte_ids[b] is b's id
    void build_bytes(const uint32_t *byte_ids) {
        bytes_.resize(65536);
        for (size_t x = 0; x < 256; ++x)
            for (size_t y = 0; y < 256; ++y) bytes_[x << 8 | y] = find(byte_ids[x], byte_ids[y]);
    }
    inline Rank find(uint32_t a, uint32_t b) const {
        if (a < left_.size()) {
            const Left l = left_[a];
            const Entry *e = entries_.data() + l.at, *end = e + l.count;
            if (l.count > kScan) {  // a binary search of a left's sorted list: its pairs lie together
                e = std::lower_bound(e, end, b, [](const Entry &x, uint32_t r) { return x.right < r; });
                return e != end && e->right == b ? Rank{e->rank, e->merged} : Rank{kNone, kNone};
            }
            for (; e != end; ++e)
                if (e->right == b) return {e->rank, e->merged};
            return {kNone, kNone};
        }
        uint64_t k = key(a, b);
        for (size_t i = slot(k);; i = (i + 1) & mask_) {
            const Slot &s = slots_[i];
            if (s.key == k) return {s.rank, s.merged};
            if (s.key == kEmpty) return {kNone, kNone};
        }
    }
    // find(byte_ids[x], byte_ids[y])
    inline Rank find_bytes(uint8_t x, uint8_t y) const { return bytes_[size_t(x) << 8 | y]; }

  private:
    // Lefts with at most kScan pairs keep them in a list of their own (entries_, in rank order);
    // the others, and ids past left_, are in the hash.
    static constexpr uint32_t kScan = 8;
    struct Left {
        uint32_t at, count;
    };
    struct Entry {
        uint32_t right, rank, merged;
    };
    // left_ and entries_: a count per left, then each light left's pairs in rank order, a repeated
    // pair once. left_ covers the ids up to twice the number of merges (a stray huge id goes to
    // the hash instead of making this table large).
    void build_lists(const std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> &merges) {
        uint32_t top = 0;
        for (const auto &m : merges) top = std::max(top, std::get<0>(m));
        left_.assign(std::min<size_t>(size_t(top) + 1, 2 * merges.size() + 1024), Left{0, 0});
        for (const auto &m : merges)
            if (std::get<0>(m) < left_.size()) ++left_[std::get<0>(m)].count;
        size_t at = 0;
        for (Left &l : left_) {
            l.at = uint32_t(at);
            at += l.count;
            l.count = 0;
        }
        entries_.resize(at);
        for (size_t r = 0; r < merges.size(); ++r) {
            const auto &[a, b, t] = merges[r];
            if (a < left_.size()) entries_[left_[a].at + left_[a].count++] = Entry{b, uint32_t(r), t};
        }
        for (Left &l : left_) {  // by right, a repeated pair once (its first rank)
            Entry *e = entries_.data() + l.at;
            std::stable_sort(e, e + l.count, [](const Entry &x, const Entry &y) { return x.right < y.right; });
            l.count = uint32_t(std::unique(e, e + l.count, [](const Entry &x, const Entry &y) { return x.right == y.right; }) - e);
        }
    }
    std::vector<Left, HugeAlloc<Left>> left_;  // on huge pages where large (huge_pages.h: why)
    std::vector<Entry, HugeAlloc<Entry>> entries_;
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    static inline uint64_t key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }
    // Fibonacci hashing: the product's top bits depend on every bit of the key
    inline size_t slot(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> shift_); }
    struct Slot {
        uint64_t key;
        uint32_t rank, merged;
    };
    std::vector<Slot, HugeAlloc<Slot>> slots_;
    std::vector<Rank> bytes_;
    size_t mask_ = 0;
    unsigned shift_ = 60;
};

}  // namespace bpe::enc
