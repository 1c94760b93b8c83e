// The piece cache's table of short pieces (2-15 bytes, the pieces of nearly all English, code and
// Russian text): a piece's bytes and length packed into one 128-bit key, two 32-byte entries to a
// 64-byte bucket, up to 4 ids inline.
//
// Why it looks the way it does (docs/performance.md, "The fourth pass"; the fast peers, gigatoken
// and fastokens, key their caches the same way):
// * A hit is one 16-byte load of the piece, a mask, two multiplies and a 128-bit compare per entry:
//   no byte-by-byte hash, no length and hash compare before a memcmp (the 64-byte cache's path).
// * An entry is 32 bytes, not 64: the same memory holds twice the pieces, so a first pass over a
//   long text misses less, and a bucket of two entries is one cache line (2-way: a piece that
//   collides with a frequent one no longer evicts it each time; the newer one goes first).
// * A piece of more than 4 ids (rare: ~0.5 % of short pieces) keeps its ids in the 64-byte cache;
//   its entry here says so (count 0), so a miss here never probes that one too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "huge_pages.h"

namespace bpe::enc {

using u128 = unsigned __int128;

class ShortTable {
  public:
    static constexpr size_t kMaxLen = 15, kMaxIds = 4;
    // The key: bytes 0..n-1 the piece, byte 15 its length (low 4 bits) and, in a stored entry, its
    // number of ids (bits 4-6; 0: in the 64-byte cache). Never 0: an empty entry is all zero.
    static inline u128 pack(const uint8_t *p, size_t n, const uint8_t *end) {
        u128 k;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        if (end - p >= 16) {  // one unaligned load, the bytes past the piece masked off
            std::memcpy(&k, p, 16);
            k &= (u128(1) << (8 * n)) - 1;
            return k | (u128(n) << 120);
        }
#endif
        (void)end;
        uint8_t b[16] = {};
        std::memcpy(b, p, n);
        b[15] = uint8_t(n);
        std::memcpy(&k, b, 16);
        return k;
    }
    // The bucket comes from the top bits of the sum of two products: each depends on every bit of
    // its half of the key.
    static inline uint64_t hash(u128 k) {
        return uint64_t(k) * 0x9E3779B97F4A7C15ull + uint64_t(k >> 64) * 0xC2B2AE3D27D4EB4Full;
    }

    ShortTable(size_t buckets, bool huge) : n_(buckets), huge_(huge && buckets * sizeof(Bucket) >= kHugePage) {
        shift_ = 64;
        for (size_t b = buckets; b > 1; b >>= 1) --shift_;
        void *m = huge_ ? huge_alloc(n_ * sizeof(Bucket)) : std::calloc(n_ * sizeof(Bucket) + 64, 1);
        if (!m) throw std::bad_alloc();
        mem_ = m;
        b_ = reinterpret_cast<Bucket *>((reinterpret_cast<uintptr_t>(m) + 63) & ~uintptr_t(63));
    }
    ~ShortTable() {
        if (huge_) huge_free(mem_, n_ * sizeof(Bucket));
        else std::free(mem_);
    }
    ShortTable(const ShortTable &) = delete;
    ShortTable &operator=(const ShortTable &) = delete;

    size_t buckets() const { return n_; }
    bool huge() const { return huge_; }
    void clear() { std::memset(static_cast<void *>(b_), 0, n_ * sizeof(Bucket)); }
    inline void prefetch(uint64_t h) const { __builtin_prefetch(b_ + (h >> shift_)); }

    // The ids of the piece keyed k (hash h), and their number in `nids` (0: look in the 64-byte
    // cache), or nullptr.
    inline const uint32_t *get(u128 k, uint64_t h, uint8_t &nids) const {
        const Bucket &b = b_[h >> shift_];
        for (const Entry &e : b.e) {
            if (((e.key ^ k) & kKeyBits) == 0) {
                nids = uint8_t(uint64_t(e.key >> 124) & 7);
                return e.ids;
            }
        }
        return nullptr;
    }
    // Keep the piece's ids (nids > kMaxIds: only the mark that the 64-byte cache has them).
    inline void put(u128 k, uint64_t h, const uint32_t *ids, size_t nids) {
        Bucket &b = b_[h >> shift_];
        b.e[1] = b.e[0];
        Entry &e = b.e[0];
        const size_t keep = nids <= kMaxIds ? nids : 0;
        e.key = k | (u128(keep) << 124);
        std::memcpy(e.ids, ids, keep * sizeof(uint32_t));
    }

  private:
    static constexpr u128 kKeyBits = ~(u128(0xF0) << 120);  // all but the number of ids
    struct Entry {
        u128 key;
        uint32_t ids[kMaxIds];
    };
    struct alignas(64) Bucket {
        Entry e[2];
    };
    static_assert(sizeof(Bucket) == 64, "a bucket is one cache line");
    size_t n_;
    bool huge_;
    unsigned shift_;
    void *mem_;
    Bucket *b_;
};

}  // namespace bpe::enc
