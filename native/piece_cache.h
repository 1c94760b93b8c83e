// Each encoding thread's piece cache: a table of short pieces (2-15 bytes, short_cache.h: a packed
// 128-bit key, 32-byte entries), a direct-mapped table of longer ones (up to 22 bytes) -> their ids,
// and the buffers the long-piece merge reuses.
//
// Why: most pre-tokens are frequent words; a hit is a key, one 64-byte bucket and a compare. The
// entries hold their key and ids inline: no pointer to follow, no allocation, no lock (one cache
// per thread), bounded memory (4 MiB by default). A miss overwrites an entry. Pieces that are one
// whole token (tiktoken's rule) are cached too: most English pieces are, and the token index costs
// two misses (its slot, then the token's bytes) where a hit here costs one. Sizes:
// docs/performance.md.
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
#include "short_cache.h"
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
    // The cache a pass over `text_bytes` of text wants: its short table's buckets (64 bytes each,
    // two pieces), the 64-byte table's slots and whether they are on 2 MiB pages. Buckets:
    // BPE_STORE_PIECE_CACHE_SLOTS, a power of two from 2^10 to 2^22, where set; else 2^16 (4 MiB),
    // 2^18 (16 MiB) from kLargeText on (2^19 from kHugeCacheText): a long text has more distinct pieces than 2^16 slots
    // keep (8 MB of enwiki: 93 K), and a first pass over 32 MB of enwiki ran 3-6 % faster with 2^18
    // (a 2-way cache of 2^16 did not help). The 64-byte table keeps only pieces of 16-22 bytes and
    // short ones of more than 4 ids: an eighth of that. Huge pages from kHugeText on: a slot read
    // is then no TLB miss (huge_pages.h), but the first touch of a 2 MiB page zeroes all of it,
    // which cost a first short encode 3-8 ms instead of 0.15; docs/performance.md.
    static constexpr size_t kLargeText = size_t(8) << 20, kHugeText = size_t(1) << 20;
    // 2^19 buckets (32 MiB, a million pieces) from 64 MiB of text: the whole of enwiki-100M ran
    // 3 % faster than with 2^18 (2^20: 5 %, at 64 MiB a thread)
    static constexpr size_t kHugeCacheText = size_t(64) << 20;
    struct Shape {
        size_t slots;
        bool huge;
        size_t short_buckets;  // 0: no short table (merge_replay.cpp's cache of replayed parts)
    };
    static Shape shape_for(size_t text_bytes) {
        static const size_t forced = [] {
            const char *v = std::getenv("BPE_STORE_PIECE_CACHE_SLOTS");
            size_t n = v ? size_t(std::strtoull(v, nullptr, 10)) : 0;
            return n >= (1u << 10) && n <= (1u << 22) && (n & (n - 1)) == 0 ? n : size_t(0);
        }();
        const size_t buckets = forced                       ? forced
                               : text_bytes >= kHugeCacheText ? size_t(1) << 19
                               : text_bytes >= kLargeText     ? size_t(1) << 18
                                                              : size_t(1) << 16;
        const size_t slots = std::max<size_t>(buckets / 8, 1024);
        return {slots, text_bytes >= kHugeText && buckets * 64 >= kHugePage, buckets};  // 64: a bucket
    }
    // Zero pages handed out lazily (a short call touches only the slots it uses): calloc's, with 64
    // bytes more to start the table on a 64-byte line (a slot is one line, not two halves), or a
    // mapping of huge pages (which starts on a page).
    explicit PieceCache(Shape shape = Shape{size_t(1) << 16, false, 0})
        : n_slots_(shape.slots), mem_(allocate(shape), Free{shape}),
          short_(shape.short_buckets ? new ShortTable(shape.short_buckets, shape.huge) : nullptr) {
        if (!mem_) throw std::bad_alloc();
        slots_ = reinterpret_cast<Slot *>((reinterpret_cast<uintptr_t>(mem_.get()) + 63) & ~uintptr_t(63));
        pairs.clear();
    }
    // whether this cache serves a pass that wants `want`
    bool fits(Shape want) const {
        const bool huge = short_ ? short_->huge() : mem_.get_deleter().shape.huge;
        return n_slots_ >= want.slots && (huge || !want.huge) &&
               (short_ ? short_->buckets() : 0) >= want.short_buckets;
    }
    void clear() {
        std::memset(slots_, 0, n_slots_ * sizeof(Slot));
        if (short_) short_->clear();
        pairs.clear();
    }
    // The short table (every cache thread_cache gives has one).
    ShortTable &shorts() const { return *short_; }
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
    static char *allocate(Shape shape) {
        const size_t bytes = shape.slots * sizeof(Slot);
        return static_cast<char *>(shape.huge && bytes >= kHugePage ? huge_alloc(bytes) : std::calloc(bytes + 64, 1));
    }
    struct Slot {
        uint64_t hash;
        uint8_t len;  // key length + 1; 0 = empty
        uint8_t nids;
        char key[kMaxLen];
        uint32_t ids[kMaxIds];
    };
    struct Free {
        Shape shape;
        void operator()(char *p) const {
            if (shape.huge && shape.slots * sizeof(Slot) >= kHugePage) huge_free(p, shape.slots * sizeof(Slot));
            else std::free(p);
        }
    };
    size_t n_slots_;
    std::unique_ptr<char[], Free> mem_;
    std::unique_ptr<ShortTable> short_;
    Slot *slots_;
};

// The calling thread's cache, emptied when it last served another encoder: one encoder's ids
// never leak into another's, and repeated small calls (CS336-style encode per line) reuse it.
// `text_bytes`: the length of the whole pass (all threads'), which sets the cache's shape (a cache
// that does not fit it is replaced, empty: PieceCache::shape_for).
inline PieceCache &thread_cache(uint64_t owner, size_t text_bytes = 0) {
    thread_local std::unique_ptr<PieceCache> cache;
    thread_local uint64_t served = 0;
    const PieceCache::Shape want = PieceCache::shape_for(text_bytes);
    if (!cache || !cache->fits(want)) {
        cache.reset();  // the old one's memory first
        cache.reset(new PieceCache(want));
        served = owner;
    }
    if (served != owner) {
        if (served != 0) cache->clear();
        served = owner;
    }
    return *cache;
}

}  // namespace bpe::enc
