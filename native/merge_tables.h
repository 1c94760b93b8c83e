// The merge engine's pair tables: PairIndex (pair -> slot), WordLists (each pair's words, in one
// pool), StepWork (what one merge changed, summed before the pair table sees it) and find_pair
// (a pair's next position in a word, SSE2). Part of the merge engine (see merge_engine.h).
#pragma once

#include "merge_arrays.h"

#include <algorithm>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstring>
#include <stdexcept>
#include <vector>

namespace bpe::merge {

// Open addressing with linear probing over a power-of-two table of 8-byte cells: the slot a pair
// lives in, and 32 bits of its hash as a tag. The key itself is read from the slot (`key_of`)
// only when the tag matches, and a caller about to update that slot reads it anyway, so the
// check costs no extra cache miss. Why not (key, slot) cells: at 16 bytes and load <= 1/2 the
// table was 32 MB of enwiki-100M's ~555 K pairs; this is 8 MB (load <= 3/4).
class PairIndex {
  public:
    PairIndex() { cells_.assign(1 << 16, Cell{0, kNone}); mask_ = cells_.size() - 1; }

    // The slot of `key`, or kNone; key_of(slot) gives a slot's key.
    template <class KeyOf>
    u32 find(u64 key, const KeyOf &key_of) const {
        const u64 h = hash(key);
        const u32 tag = u32(h >> 32);
        size_t i = h & mask_;
        while (true) {
            const Cell &c = cells_[i];
            if (c.slot == kNone) return kNone;
            if (c.tag == tag && key_of(c.slot) == key) return c.slot;
            i = (i + 1) & mask_;
        }
    }

    // The slot of `key`, inserting `fresh` if absent (`inserted` tells which happened). Slots are
    // inserted in order: `fresh` is the number of slots inserted so far (see rehash).
    template <class KeyOf>
    u32 find_or_insert(u64 key, u32 fresh, bool &inserted, const KeyOf &key_of) {
        if ((size_ + 1) * 4 > cells_.size() * 3) rehash(cells_.size() * 2, key_of);  // load <= 3/4
        const u64 h = hash(key);
        const u32 tag = u32(h >> 32);
        size_t i = h & mask_;
        while (true) {
            Cell &c = cells_[i];
            if (c.slot == kNone) {
                c = Cell{tag, fresh};
                ++size_;
                inserted = true;
                return fresh;
            }
            if (c.tag == tag && key_of(c.slot) == key) {
                inserted = false;
                return c.slot;
            }
            i = (i + 1) & mask_;
        }
    }

    // For a caller about to look up many keys: fetch the cell where the search for `key` starts,
    // and (once that cell has arrived) the slot it names, ahead of find().
    void prefetch_cell(u64 key) const { __builtin_prefetch(&cells_[hash(key) & mask_]); }
    u32 first_slot(u64 key) const { return cells_[hash(key) & mask_].slot; }

    // Room for n pairs at load <= 1/4. Why: in a pruned count (merge_prune.cpp) most pairs looked
    // up are not in the table, and such a search ends only at an empty cell (~8 probes at 3/4).
    template <class KeyOf>
    void reserve_sparse(size_t n, const KeyOf &key_of) {
        size_t cap = cells_.size();
        while (cap < 4 * n) cap *= 2;
        if (cap > cells_.size()) rehash(cap, key_of);
    }

    size_t bytes() const { return cells_.capacity() * sizeof(Cell); }
    void clear() { std::vector<Cell>().swap(cells_); size_ = 0; mask_ = 0; }

  private:
    static u64 hash(u64 key) {
        // Fibonacci hashing, folded: the low bits index the table, the high 32 are the tag.
        u64 h = key * 0x9E3779B97F4A7C15ull;
        return h ^ (h >> 29);
    }
    // Every slot 0 .. size_ - 1 is in the table (a slot is inserted once, when it is made), so
    // the larger table is filled from the slots' keys, not from the old cells. Why: the old table
    // is freed first, not held beside the new one (at 50 M words the step from 2^25 to 2^26
    // cells held 0.25 GB more at once), and the slots are read in order.
    template <class KeyOf>
    void rehash(size_t cap, const KeyOf &key_of) {
        std::vector<Cell>().swap(cells_);
        cells_.assign(cap, Cell{0, kNone});
        mask_ = cap - 1;
        for (size_t s = 0; s < size_; ++s) {
            const u64 h = hash(key_of(u32(s)));
            size_t i = h & mask_;
            while (cells_[i].slot != kNone) i = (i + 1) & mask_;
            cells_[i] = Cell{u32(h >> 32), u32(s)};
        }
    }

    struct Cell {
        u32 tag;
        u32 slot;  // kNone: empty
    };
    std::vector<Cell> cells_;
    size_t mask_ = 0;
    size_t size_ = 0;
};

// The pair -> words lists of all slots in ONE pool of u32, in blocks of 2^k entries recycled
// through a free list per size, or in exact-size blocks (see place_exact). Why not a std::vector
// per slot: 24 bytes of header in every slot plus a heap allocation (16 more bytes and a pointer
// chase) per pair; enwiki-100M has ~555 K pairs and 3.2 M list entries, zhwiki-20M 2.65 M pairs
// and 13.5 M entries.
class WordLists {
  public:
    static constexpr u8 kExact = 0xFF;  // List::cls of an exact-size block: it holds len entries
    // Packed (9 bytes): it sits in every pair slot (see MergeEngine::Slot).
    struct __attribute__((packed)) List {
        u32 off = 0;   // first entry in the pool
        u32 len = 0;   // entries in use
        u8 cls = 0;    // capacity 2^cls entries, or len (kExact); 0 with len 0: no block
        bool has_block() const { return len != 0 || cls != 0; }
        // An exact block is always full: nothing is appended to it without moving it first.
        bool full() const { return cls == kExact || len == (u32(1) << cls); }
    };

    WordLists() = default;
    WordLists(const WordLists &) = delete;
    WordLists &operator=(const WordLists &) = delete;
    ~WordLists() { std::free(pool_); }

    const u32 *data(const List &l) const { return pool_ + l.off; }

    // Appends w (without reading the last entry: the caller knows it is not w, or accepts a
    // repeat, which apply() skips by the word's stamp). Why: the last entries of the lists are
    // scattered over tens of MB, so reading one is a cache miss, and a load that misses stalls
    // where a store does not (half of the first pair count, a third of adding a merge's changes).
    void append(List &l, u32 w) {
        if (!l.has_block() || l.full()) grow(l);
        pool_[l.off + l.len++] = w;
    }

    // Gives the empty list l a block of exactly n entries at the end of the pool, filled by
    // fill() (n times) before anything else touches the pool. Why exact: the first pair count
    // lists every word under each pair it holds (~9 entries a word), and in power-of-two blocks
    // that was 1.5 times the entries (50 M words: 2.7 GB of blocks for 1.8 GB of entries), the
    // largest part of the engine when merging starts. Moved to a power-of-two block (its old
    // block left a hole, reclaimed by compact) when it grows, which the lists of pairs that
    // are merged away never do.
    void place_exact(List &l, u32 n) {
        if (size_ + n > kNone) throw std::overflow_error("more than 2^32 - 1 pair -> word entries");
        if (size_ + n > cap_) reserve(std::max(size_ + n, cap_ + cap_ / 2 + 1024));
        l = List{u32(size_), 0, kExact};
        size_ += n;
        in_use_ += n;
    }
    void fill(List &l, u32 w) { pool_[l.off + l.len++] = w; }
    // Room for n more entries, allocated at once (before a run of place_exact).
    void reserve_more(size_t n) {
        if (size_ + n > kNone) throw std::overflow_error("more than 2^32 - 1 pair -> word entries");
        if (size_ + n > cap_) reserve(size_ + n);
    }

    // Gives the list's block back (the list is empty after).
    void release(List &l) {
        if (l.has_block()) give_back(l);
        l = List{};
    }

    // Whether the pool is worth packing: the freed blocks that kept their pages hold more than
    // half the entries in use (freed blocks are only reused by lists of their own size, so
    // merging leaves many behind), or the pool spans four times them (holes whose pages were
    // given back cost address space only). Why not twice the entries in use, counting holes:
    // at 50 M words that packed 47 M lists (3.4 CPU s) late in the run for holes that held no
    // memory.
    bool fragmented() const {
        return size_ > (size_t(1) << 20) && (2 * kept_ > in_use_ || size_ > 4 * in_use_);
    }

    // Packs the blocks of the lists `ids` names (list_of(id): the list; every list with a block,
    // each exactly once, none being iterated) to the front of the pool, each in an exact-size
    // block, and gives the rest of the pool back to the OS. In place: blocks only move down, in
    // pool order. Why ids sorted in place, not pointers or a sorted copy: at 50 M words there
    // are tens of millions of lists, and 4 bytes each is what this costs at a run's peak.
    // Why exact blocks, not the smallest power of two that holds each: most lists get no entry
    // after a compaction (their pairs are merged away or stop changing), and power-of-two blocks
    // made the pool ~1.4 times its entries again right after it was packed.
    // Why the pages past the packed size are given back as the packing passes them: the blocks
    // written below refill pages that were given back (holes), and without this the pool was
    // resident twice over until the end (at 5 M words, 8 B a word more at the run's peak).
    template <class ListOf>
    void compact(std::vector<u32> &ids, const ListOf &list_of) {
        std::sort(ids.begin(), ids.end(), [&](u32 x, u32 y) { return list_of(x).off < list_of(y).off; });
        size_t total = 0;
        for (u32 id : ids) total += list_of(id).len;
        size_t at = 0, released = total;  // pool_[total, released) is given back
        for (u32 id : ids) {
            List &l = list_of(id);
            const size_t end = size_t(l.off) + l.len;
            if (l.len != 0) std::memmove(pool_ + at, pool_ + l.off, size_t(l.len) * sizeof(u32));
            l = l.len == 0 ? List{} : List{u32(at), l.len, kExact};  // an empty block (none are made): none
            at += l.len;
            if (end >= released + (size_t(1) << 18)) {  // 1 MiB more read past the packed size
                release_pages(pool_ + released, (end - released) * sizeof(u32));
                released = end;
            }
        }
        for (auto &f : free_) std::vector<u32>().swap(f);
        size_ = in_use_ = at;
        kept_ = 0;
        reserve(std::max<size_t>(size_ + size_ / 4, 1024));  // shrinks: the tail pages are unmapped
    }

    void clear() {
        std::free(pool_);
        pool_ = nullptr;
        size_ = cap_ = in_use_ = kept_ = 0;
        for (auto &f : free_) std::vector<u32>().swap(f);
    }

    // The pool's resident bytes, about: the blocks in use and the freed blocks whose pages were
    // kept (see give_back), and the free lists.
    size_t bytes() const {
        size_t n = (in_use_ + kept_) * sizeof(u32);
        for (const auto &f : free_) n += f.capacity() * sizeof(u32);
        return n;
    }
    size_t pool_bytes() const { return size_ * sizeof(u32); }  // all blocks, freed or not

  private:
    static constexpr u8 kMaxClass = 31;
    void grow(List &l) {
        // first block: 2 entries (cls 1; cls 0 with len 0 means "no block"); then doubling; an
        // exact block moves to the smallest power of two with room for one more entry
        u8 cls = 1;
        if (l.cls == kExact) {
            while ((size_t(1) << cls) <= l.len) ++cls;
        } else if (l.has_block()) {
            cls = u8(l.cls + 1);
        }
        if (cls > kMaxClass) throw std::overflow_error("a pair held by more than 2^31 words");
        u32 off;
        if (!free_[cls].empty()) {
            off = free_[cls].back();
            free_[cls].pop_back();
            kept_ -= size_t(1) << cls;  // a free power-of-two block kept its pages
        } else {
            const size_t size = size_t(1) << cls;
            if (size_ + size > kNone) throw std::overflow_error("more than 2^32 - 1 pair -> word entries");
            if (size_ + size > cap_) reserve(std::max(size_ + size, cap_ + cap_ / 2 + 1024));
            off = u32(size_);
            size_ += size;
        }
        if (l.len != 0) std::memcpy(&pool_[off], &pool_[l.off], size_t(l.len) * sizeof(u32));
        if (l.has_block()) give_back(l);
        l.off = off;
        l.cls = cls;
        in_use_ += size_t(1) << cls;
    }

    // A freed power-of-two block goes to the free list of its size; an exact block becomes a hole
    // until the next compact (only power-of-two blocks are reused), and a hole of
    // 2^kReleaseClass entries or more has its pages given back to the OS at once. Why: the
    // first merges free the lists of the pairs they merge, the largest of all (exact blocks of
    // millions of words: the first pair count's), and without this the pool stayed resident at
    // its largest until a compaction (50 M words: ~36 B a word when about half was free). Why
    // not the power-of-two blocks too: they are reused by lists growing to their size, whose
    // pages then had to be mapped again (at 50 M words ~8 % more merging CPU, no lower peak).
    void give_back(const List &l) {
        const size_t n = l.cls == kExact ? l.len : size_t(1) << l.cls;
        in_use_ -= n;
        if (l.cls != kExact) free_[l.cls].push_back(l.off);
        if (l.cls == kExact && n >= (size_t(1) << kReleaseClass)) release_pages(pool_ + l.off, n * sizeof(u32));
        else kept_ += n;
    }

    // Why malloc/realloc and not a std::vector: the pool is tens of MB, and realloc moves a large
    // block by remapping its pages (glibc mremap), while a vector copies it into a new buffer,
    // holding both at once; capacity not yet written is not resident either way.
    void reserve(size_t cap) {
        u32 *p = static_cast<u32 *>(std::realloc(pool_, cap * sizeof(u32)));
        if (p == nullptr) throw std::bad_alloc();
        pool_ = p;
        cap_ = cap;

    }

    static constexpr u8 kReleaseClass = 14;  // 64 KiB: 16 pages, a system call is cheap beside them
    u32 *pool_ = nullptr;
    size_t size_ = 0, cap_ = 0;
    size_t in_use_ = 0;  // entries in blocks that lists hold (the rest are free blocks and holes)
    size_t kept_ = 0;    // entries in free blocks and holes whose pages were kept (small ones)
    std::vector<u32> free_[kMaxClass + 1];
};

// The first j >= i with p[j] == a and p[j + 1] == b, or n if there is none. Why SIMD: a word is
// scanned whole on every visit, and Chinese pre-tokens run to hundreds of tokens (zhwiki-20M:
// the scan was a third of the merge loop); SSE2 (every x86-64) tests four positions at once.
inline u32 find_pair(const u32 *p, u32 i, u32 n, u32 a, u32 b) {
#if defined(__SSE2__)
    const __m128i va = _mm_set1_epi32(int(a)), vb = _mm_set1_epi32(int(b));
    for (; i + 4 < n; i += 4) {  // p[i .. i + 4] are tokens
        const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + i));
        const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + i + 1));
        const int hit = _mm_movemask_ps(_mm_castsi128_ps(_mm_and_si128(_mm_cmpeq_epi32(x, va), _mm_cmpeq_epi32(y, vb))));
        if (hit != 0) return i + u32(__builtin_ctz(unsigned(hit)));
    }
#endif
    for (; i + 1 < n; ++i)
        if (p[i] == a && p[i + 1] == b) return i;
    return n;
}

// What rewriting a merge's words changed: pair key -> (net count change, the words that
// gained the pair), and the words changed for the first time since the last take. A small
// open-addressing table (a step touches thousands of pairs, not hundreds of thousands), so it
// stays in cache while the words are rewritten; cleared by resetting only the cells it used.
// Why the pair table is not touched while rewriting: a frequent merge makes and removes the
// same few pairs in thousands of words (" t" + "h" -> " th": (" th", "e")), and each slot
// lookup in the large table is a cache miss or two (see apply()).
class StepWork {
  public:
    struct Entry {
        u64 key;
        i64 delta;      // net change of the pair's count
        u32 head, tail; // the words that gained the pair: a list through adds, kNone if none
        u32 last_word;  // the last word added (a word gaining a pair twice is listed once)
        u32 cell;       // where the entry sits in cells_
        u32 slot;       // set when the entry is added into the pair table; kNone: too long
    };
    struct Add {
        u32 word, next;
    };

    // Adds c to the count of pair `key` of word w (c > 0: w gained it).
    void change(u64 key, i64 c, u32 w) {
        Entry &d = get(key);
        d.delta += c;
        if (c > 0 && d.last_word != w) {
            d.last_word = w;
            adds_.push_back(Add{w, kNone});
            const u32 at = u32(adds_.size() - 1);
            if (d.head == kNone) d.head = at;
            else adds_[d.tail].next = at;
            d.tail = at;
        }
    }

    void clear() {
        for (const Entry &e : entries_) cells_[e.cell] = 0;
        entries_.clear();
        adds_.clear();
        changed.clear();
    }
    void release() {
        std::vector<Entry>().swap(entries_);
        std::vector<u32>().swap(cells_);
        std::vector<Add>().swap(adds_);
        std::vector<u32>().swap(changed);
        mask_ = 0;
    }
    Entry *begin() { return entries_.data(); }
    Entry *end() { return entries_.data() + entries_.size(); }
    size_t size() const { return entries_.size(); }
    const Add &add(u32 i) const { return adds_[i]; }

    std::vector<u32> changed;  // words this merge changed first since the last take

  private:
    Entry &get(u64 key) {
        if ((entries_.size() + 1) * 2 > cells_.size()) grow();
        size_t i = hash(key) & mask_;
        while (true) {
            const u32 e = cells_[i];
            if (e == 0) break;
            if (entries_[e - 1].key == key) return entries_[e - 1];
            i = (i + 1) & mask_;
        }
        entries_.push_back(Entry{key, 0, kNone, kNone, kNone, u32(i), kNone});
        cells_[i] = u32(entries_.size());
        return entries_.back();
    }
    static size_t hash(u64 key) {
        u64 h = key * 0x9E3779B97F4A7C15ull;
        return size_t(h ^ (h >> 32));
    }
    void grow() {
        const size_t cap = std::max<size_t>(cells_.size() * 2, 1024);
        cells_.assign(cap, 0);
        mask_ = cap - 1;
        for (size_t k = 0; k < entries_.size(); ++k) {
            size_t i = hash(entries_[k].key) & mask_;
            while (cells_[i] != 0) i = (i + 1) & mask_;
            cells_[i] = u32(k + 1);
            entries_[k].cell = u32(i);
        }
    }

    std::vector<u32> cells_;  // 1 + index into entries_; 0: empty
    std::vector<Entry> entries_;
    std::vector<Add> adds_;
    size_t mask_ = 0;
};

}  // namespace bpe::merge
