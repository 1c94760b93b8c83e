// Each encoding thread's piece cache: a direct-mapped table of short pieces -> their ids, and the
// buffers the long-piece merge reuses.
//
// Why: most pre-tokens are frequent words; a hit is a hash, one 64-byte slot and a compare. The
// slots hold their key and ids inline (pieces <= 22 bytes, <= 8 ids): no pointer to follow, no
// allocation, no lock (one cache per thread), bounded memory (4 MiB by default). A miss
// overwrites the slot. Pieces that are one whole token (tiktoken's rule) are cached too: most
// English pieces are, and the token index costs two misses (its slot, then the token's bytes)
// where a hit here costs one. Sizes: docs/performance.md.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "huge_pages.h"
#include "pair_table.h"
#include "word_table.h"

namespace bpe::enc {

// A heap entry of the long-piece merge: (rank << 32 | position) and the pair it was made for, so a
// stale entry is seen by comparing two ids instead of looking the pair up again.
struct HeapItem {
    uint64_t key;
    uint32_t left, right;
};

// A thread's buffers for the long-piece merge, kept in its piece cache.
struct HeapScratch {
    std::vector<uint32_t> id, nxt, prv, merged;
    std::vector<HeapItem> heap;  // a min-heap on key
};

// The hash of a piece: the counter's word hash (word_table.h: 8-byte loads and a 128-bit
// multiply fold). Why not a byte-at-a-time FNV: with OpenAI's 100 K-200 K tokens nearly every
// piece is a cache hit or one whole-token probe, so hashing and comparing are most of its cost.
inline uint64_t piece_hash(const uint8_t *p, size_t n) { return bpe::detail::key_of(p, n).hash; }

// A thread's memo of recent pair lookups: a direct-mapped 128 KiB table in front of the pair table
// (4-16 MiB). Why: the pairs that merges make follow the words' frequencies, so a few thousand hot
// ones answer most lookups from L2 instead of a miss into the large table.
class PairMemo {
  public:
    static constexpr size_t kSlots = 8192;
    void clear() { std::fill(std::begin(slots_), std::end(slots_), Slot{kEmpty, {kNone, kNone}}); }
    template <class Find>
    inline Rank get(uint32_t a, uint32_t b, const Find &find) {
        const uint64_t k = (uint64_t(a) << 32) | b;
        Slot &s = slots_[(k * 0x9E3779B97F4A7C15ull) >> 51];
        if (s.key != k) s = Slot{k, find(a, b)};
        return s.rank;
    }

  private:
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    struct Slot {
        uint64_t key;
        Rank rank;
    };
    Slot slots_[kSlots] = {};
};

class PieceCache {
  public:
    HeapScratch scratch;
    PairMemo pairs;
    static constexpr size_t kMaxLen = 22, kMaxIds = 8;
    // huge_alloc: zero pages handed out lazily (a short call touches only the slots it uses), on
    // 2 MiB pages where the OS gives them (huge_pages.h: a slot read is then no TLB miss), starting
    // on a page; a table under 2 MiB is operator new's, zeroed, with 64 bytes more to start it on a
    // 64-byte line (a slot is one line, not two halves)
    PieceCache()
        : n_slots_(slots_wanted()), mem_(static_cast<char *>(huge_alloc(bytes_for(n_slots_))), Free{bytes_for(n_slots_)}) {
        slots_ = reinterpret_cast<Slot *>((reinterpret_cast<uintptr_t>(mem_.get()) + 63) & ~uintptr_t(63));
        if (bytes_for(n_slots_) < kHugePage) std::memset(mem_.get(), 0, bytes_for(n_slots_));
        pairs.clear();
    }
    // How many slots (64 bytes each): BPE_STORE_PIECE_CACHE_SLOTS, a power of two from 2^10 to 2^22,
    // else 2^16 (4 MiB). Why a knob: a hit costs a load from this table, so a smaller one that stays
    // in L2 can beat a larger one that hits more often; docs/performance.md has the measurements.
    static size_t slots_wanted() {
        const char *v = std::getenv("BPE_STORE_PIECE_CACHE_SLOTS");
        size_t n = v ? size_t(std::strtoull(v, nullptr, 10)) : 0;
        return n >= (1u << 10) && n <= (1u << 22) && (n & (n - 1)) == 0 ? n : size_t(1) << 16;
    }
    void clear() {
        std::memset(slots_, 0, n_slots_ * sizeof(Slot));
        pairs.clear();
    }
    // Starts loading the slot of hash h: the piece loop asks for a piece's slot a few pieces ahead,
    // so the loads of several slots overlap instead of each waiting its turn (a slot is usually a
    // miss to L3 or memory on a first pass; the hit path is otherwise a few dozen instructions).
    inline void prefetch(uint64_t h) const { __builtin_prefetch(slots_ + (h & (n_slots_ - 1))); }
    inline const uint32_t *get(const uint8_t *p, size_t n, uint64_t h, uint8_t &nids) const {
        const Slot &s = slots_[h & (n_slots_ - 1)];
        if (s.len == n + 1 && s.hash == h && bpe::detail::equal_bytes(reinterpret_cast<const uint8_t *>(s.key), p, n)) {
            nids = s.nids;
            return s.ids;
        }
        return nullptr;
    }
    inline void put(const uint8_t *p, size_t n, uint64_t h, const uint32_t *ids, size_t nids) {
        if (n > kMaxLen || nids > kMaxIds) return;
        Slot &s = slots_[h & (n_slots_ - 1)];
        s.hash = h;
        s.len = uint8_t(n + 1);
        std::memcpy(s.key, p, n);
        s.nids = uint8_t(nids);
        std::memcpy(s.ids, ids, nids * sizeof(uint32_t));
    }

  private:
    static size_t bytes_for(size_t slots) {
        const size_t b = slots * sizeof(Slot);
        return b >= kHugePage ? b : b + 64;
    }
    struct Slot {
        uint64_t hash;
        uint8_t len;  // key length + 1; 0 = empty
        uint8_t nids;
        char key[kMaxLen];
        uint32_t ids[kMaxIds];
    };
    struct Free {
        size_t bytes;
        void operator()(char *p) const { huge_free(p, bytes); }
    };
    size_t n_slots_;
    std::unique_ptr<char[], Free> mem_;
    Slot *slots_;
};

// The calling thread's cache, emptied when it last served another encoder: one encoder's ids
// never leak into another's, and repeated small calls (CS336-style encode per line) reuse it.
inline PieceCache &thread_cache(uint64_t owner) {
    thread_local std::unique_ptr<PieceCache> cache;
    thread_local uint64_t served = 0;
    if (!cache) cache.reset(new PieceCache());
    if (served != owner) {
        if (served != 0) cache->clear();
        served = owner;
    }
    return *cache;
}

}  // namespace bpe::enc
