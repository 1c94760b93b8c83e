// bpe_store._core.MergeEngine: the incremental BPE merge loop, the native twin of the Python
// engine in bpe_store/training/merge.py (which stays the portable fallback and the readable spec).
//
// Semantics (DESIGN.md, section Semantics): pair counts are weighted by word count, overlapping
// pairs counted ("aaa" holds (a,a) twice); a merge rewrites words left to right without overlap;
// the pair with the highest count wins, ties to the lexicographically greater
// (bytes_left, bytes_right) compared as a pair of byte strings; tokens are identified by their
// bytes (a merge spelling bytes that already have an id reuses the lowest such id).
// Two trainer options (bpe_store/training/reference.py is their spec): words counted fewer than
// `min_count` times are left out (not loaded: they take part in no pair), and with
// `max_token_length` a pair whose two tokens together spell more bytes is never counted at all.
//
// Performance notes (why the code looks the way it does):
// * Words live in ONE flat uint32 arena, each a small header (length, stamp, count, id) followed
//   by its tokens, and are known by their offset. Merging only ever shortens a word, so it is
//   rewritten in place; no per-word allocation, one cache miss per visited word, and the arena is
//   mapped with huge pages (BigArray).
// * Pairs are "slots" found through an open-addressing hash table keyed by (left << 32 | right);
//   a slot holds the 64-bit count, the count the store last saw, and the words holding the pair.
//   std::unordered_map costs a node allocation and a pointer chase per pair; this does not.
// * The pair -> words index is a superset: a word is appended when a pair appears in it and is
//   never removed when the pair leaves it (the list is dropped when the pair's count reaches 0).
//   A stale entry costs one scan of a short word, far less than keeping exact sets.
// * Each merge updates only the pairs around the merged positions (the other pairs of the word
//   are unchanged), and adds their changes up in a small per-step table (StepWork) first: the
//   large pair table sees each pair a step touched once, not once per occurrence (a frequent
//   merge makes the same few pairs in thousands of words), with its cells and slots prefetched.
//   A word is rewritten in one pass, with an SSE2 scan for the pair (Chinese pre-tokens are
//   hundreds of tokens long). On enwiki-100M -> 32K this took the merge loop from ~0.8 to ~0.6
//   CPU s, zhwiki-20M -> 10K from ~4.0 to ~2.7 (bench/RESULTS-merge.md).
// * The max-heap is lazily invalidated: a decrease leaves the old entry (too high) in place, an
//   increase pushes a fresh one once per merge step. When an entry surfaces its count is checked
//   against the slot: equal means it is the true maximum, otherwise it is re-pushed or dropped.
// * Memory is laid out for the cache: one header per word and one record per pair slot (the
//   fields a visit reads together), hash cells holding key and value side by side, and upcoming
//   words prefetched while the current one is merged. This took the merge
//   loop on enwiki-100M -> 32K from 1.4 to 1.0 CPU s (bench/RESULTS-merge.md).
// * max_token_length filters pairs where they would enter the table (build_pairs, and the new
//   pairs of a merge), so a pair too long has no slot, no heap entry and no store row: it can
//   never surface at the top of the heap and cost a pop. Without a limit the check is one
//   predictable branch.
// * step() runs with the GIL released; only building the returned Python objects holds it.
// * Checkpoint rows are produced here directly as the tuples sqlite3's executemany binds, sorted
//   by key for B-tree locality, and pairs whose count is back to what the store holds are
//   skipped, so Python never loops over hundreds of thousands of rows itself.
//
// Native code never prints; errors surface as Python exceptions.
#include <nanobind/nanobind.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "scanner.h"
#include "store_db.h"

#include <algorithm>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace {

// Gives the free memory malloc keeps back to the OS, and from the first call on has blocks of
// 1 MiB or more mapped on their own. Why: glibc raises its mmap threshold (up to 32 MiB) each
// time a large block is freed, so later large blocks (a counter's tables, the engine's arrays as
// they grow) come from the heap, where they stay resident once freed, and realloc must copy
// them: on enwiki-100M -> 32K, 75 MB of the process's RSS was free heap when merging began, and
// the peak fell from 215 to 151 MB with the threshold fixed. Cheap: a walk over the free lists.
void release_free_memory() {
#if defined(__GLIBC__)
    static const bool fixed = mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1;
    (void)fixed;
    malloc_trim(0);
#endif
}

using u8 = uint8_t;
using u32 = uint32_t;
using u64 = uint64_t;
using i64 = int64_t;

constexpr u32 kNone = 0xFFFFFFFFu;

// The digest the resume check compares with the same SQL aggregate over `pair_counts`
// (see bpe_store/store/store.py: pair_counts_digest). Every term is reduced below the prime, so the sums
// stay exact in 64-bit signed integers on both sides for any realistic number of rows.
constexpr i64 kDigestP1 = 2147483647;  // 2^31 - 1
constexpr i64 kDigestP2 = 1000000007;

inline u64 pair_key(u32 a, u32 b) { return (u64(a) << 32) | b; }

// A growable array of trivially copyable T on malloc/realloc. Why not std::vector for the arrays
// that grow while merging (pair slots, heap): a vector grows by copying into a new buffer while
// the old one is still held, which made the peak of a run (22 MB of slots copied at once on
// enwiki-100M); realloc moves a large block by remapping its pages (glibc mremap), and capacity
// not yet written is not resident.
template <class T>
class PodVec {
    static_assert(std::is_trivially_copyable_v<T>, "PodVec moves elements with realloc");

  public:
    PodVec() = default;
    PodVec(const PodVec &) = delete;
    PodVec &operator=(const PodVec &) = delete;
    ~PodVec() { std::free(p_); }

    size_t size() const { return n_; }
    size_t capacity() const { return cap_; }
    bool empty() const { return n_ == 0; }
    T &operator[](size_t i) { return p_[i]; }
    const T &operator[](size_t i) const { return p_[i]; }
    T *begin() { return p_; }
    T *end() { return p_ + n_; }
    const T *begin() const { return p_; }
    const T *end() const { return p_ + n_; }
    T &back() { return p_[n_ - 1]; }
    void pop_back() { --n_; }
    void push_back(const T &v) {
        if (n_ == cap_) reserve(cap_ + cap_ / 2 + 1024);
        p_[n_++] = v;
    }
    void reserve(size_t cap) {
        if (cap <= cap_) return;
        T *q = static_cast<T *>(std::realloc(p_, cap * sizeof(T)));
        if (q == nullptr) throw std::bad_alloc();
        p_ = q;
        cap_ = cap;
    }
    void release() {
        std::free(p_);
        p_ = nullptr;
        n_ = cap_ = 0;
    }

  private:
    T *p_ = nullptr;
    size_t n_ = 0, cap_ = 0;
};

// A fixed-size, zero-filled array of trivially copyable T for the engine's largest arrays (the
// words' records and tokens), sized once when the words are loaded. Why not std::vector: these
// arrays are read at random by every merge (a frequent pair's holders are scattered over all
// words), and with 4 KiB pages nearly every visit also misses the TLB; on a VM (nested paging)
// a TLB miss costs a two-level page walk. An array of 4 MiB or more is mapped on 2 MiB
// boundaries with MADV_HUGEPAGE (Linux's THP in "madvise" mode, the common default), so one TLB
// entry covers 2 MiB instead of 4 KiB. Elsewhere, or if the kernel refuses, it is plain memory.
template <class T>
class BigArray {
    static_assert(std::is_trivially_copyable_v<T>, "BigArray holds plain records");
    static constexpr size_t kHuge = size_t(2) << 20;

  public:
    BigArray() = default;
    BigArray(const BigArray &) = delete;
    BigArray &operator=(const BigArray &) = delete;
    ~BigArray() { release(); }

    // n zero-filled elements (the old ones are dropped).
    void assign_zero(size_t n) {
        release();
        if (n == 0) return;
        if (n > (SIZE_MAX - 2 * kHuge) / sizeof(T)) throw std::bad_alloc();
        const size_t bytes = n * sizeof(T);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (bytes >= 2 * kHuge) {
            const size_t len = (bytes + kHuge - 1) / kHuge * kHuge + kHuge;  // room to align
            void *m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) throw std::bad_alloc();
            const uintptr_t at = (uintptr_t(m) + kHuge - 1) & ~uintptr_t(kHuge - 1);
            madvise(reinterpret_cast<void *>(at), len - (at - uintptr_t(m)), MADV_HUGEPAGE);  // a hint
            map_ = m;
            map_len_ = len;
            p_ = reinterpret_cast<T *>(at);  // fresh anonymous pages are zero
            n_ = n;
            return;
        }
#endif
        p_ = static_cast<T *>(std::calloc(n, sizeof(T)));
        if (p_ == nullptr) throw std::bad_alloc();
        n_ = n;
    }
    void release() {
#if defined(__linux__)
        if (map_ != nullptr) munmap(map_, map_len_);
        else std::free(p_);
#else
        std::free(p_);
#endif
        map_ = nullptr;
        map_len_ = 0;
        p_ = nullptr;
        n_ = 0;
    }

    size_t size() const { return n_; }
    size_t capacity() const { return n_; }
    T &operator[](size_t i) { return p_[i]; }
    const T &operator[](size_t i) const { return p_[i]; }
    T *data() { return p_; }

  private:
    T *p_ = nullptr;
    size_t n_ = 0;
    void *map_ = nullptr;  // the mapping p_ lies in, when mapped
    size_t map_len_ = 0;
};

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

    // The slot of `key`, inserting `fresh` if absent (`inserted` tells which happened).
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

    size_t bytes() const { return cells_.capacity() * sizeof(Cell); }
    void clear() { std::vector<Cell>().swap(cells_); size_ = 0; mask_ = 0; }

  private:
    static u64 hash(u64 key) {
        // Fibonacci hashing, folded: the low bits index the table, the high 32 are the tag.
        u64 h = key * 0x9E3779B97F4A7C15ull;
        return h ^ (h >> 29);
    }
    template <class KeyOf>
    void rehash(size_t cap, const KeyOf &key_of) {
        std::vector<Cell> old;
        old.swap(cells_);
        cells_.assign(cap, Cell{0, kNone});
        mask_ = cap - 1;
        for (const Cell &c : old) {
            if (c.slot == kNone) continue;
            size_t i = hash(key_of(c.slot)) & mask_;
            while (cells_[i].slot != kNone) i = (i + 1) & mask_;
            cells_[i] = c;
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
// through a free list per size. Why not a std::vector per slot: 24 bytes of header in every slot
// plus a heap allocation (16 more bytes and a pointer chase) per pair; enwiki-100M has ~555 K
// pairs and 3.2 M list entries, zhwiki-20M 2.65 M pairs and 13.5 M entries.
class WordLists {
  public:
    struct List {
        u32 off = 0;   // first entry in the pool
        u32 len = 0;   // entries in use
        u8 cls = 0;    // capacity 2^cls entries; 0 with len 0: no block
        bool has_block() const { return len != 0 || cls != 0; }
    };

    WordLists() = default;
    WordLists(const WordLists &) = delete;
    WordLists &operator=(const WordLists &) = delete;
    ~WordLists() { std::free(pool_); }

    const u32 *data(const List &l) const { return pool_ + l.off; }

    // Appends w unless it is already the last entry (a word adding several pairs in one visit).
    void add(List &l, u32 w) {
        if (l.len != 0 && pool_[l.off + l.len - 1] == w) return;
        append(l, w);
    }

    // Appends w without reading the last entry: the caller knows it is not w, or accepts a repeat
    // (apply() skips a word listed twice by its stamp). Why: the last entries of the lists are
    // scattered over tens of MB, so reading one is a cache miss, and a load that misses stalls
    // where a store does not (half of the first pair count, a third of adding a merge's changes).
    void append(List &l, u32 w) {
        if (!l.has_block() || l.len == (u32(1) << l.cls)) grow(l);
        pool_[l.off + l.len++] = w;
    }

    // Gives the list's block back (the list is empty after).
    void release(List &l) {
        if (l.has_block()) give_back(l);
        l = List{};
    }

    // Whether the pool holds more than twice the entries of the blocks in use (freed blocks are
    // only reused by lists of their own size, so merging leaves many behind).
    bool fragmented() const { return size_ > (size_t(1) << 20) && size_ > 2 * in_use_; }

    // Packs the blocks of `lists` (every list with a block, each exactly once, none being
    // iterated) to the front of the pool, each in the smallest block that holds it, and gives
    // the rest of the pool back to the OS. In place: blocks only move down, in pool order.
    void compact(const std::vector<List *> &lists) {
        std::vector<List *> order(lists);
        std::sort(order.begin(), order.end(), [](const List *x, const List *y) { return x->off < y->off; });
        size_t at = 0;
        for (List *l : order) {
            u8 cls = 1;
            while ((u32(1) << cls) < l->len) ++cls;
            if (l->len != 0) std::memmove(pool_ + at, pool_ + l->off, size_t(l->len) * sizeof(u32));
            l->off = u32(at);
            l->cls = cls;
            at += size_t(1) << cls;
        }
        for (auto &f : free_) std::vector<u32>().swap(f);
        size_ = in_use_ = at;
        reserve(std::max<size_t>(size_ + size_ / 4, 1024));  // shrinks: the tail pages are unmapped
    }

    void clear() {
        std::free(pool_);
        pool_ = nullptr;
        size_ = cap_ = in_use_ = 0;
        for (auto &f : free_) std::vector<u32>().swap(f);
    }

    size_t bytes() const {
        size_t n = size_ * sizeof(u32);
        for (const auto &f : free_) n += f.capacity() * sizeof(u32);
        return n;
    }

  private:
    static constexpr u8 kMaxClass = 31;
    void grow(List &l) {
        // first block: 2 entries (cls 1; cls 0 with len 0 means "no block"); then doubling
        const u8 cls = l.has_block() ? u8(l.cls + 1) : u8(1);
        if (cls > kMaxClass) throw std::overflow_error("a pair held by more than 2^31 words");
        u32 off;
        if (!free_[cls].empty()) {
            off = free_[cls].back();
            free_[cls].pop_back();
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

    void give_back(const List &l) {
        free_[l.cls].push_back(l.off);
        in_use_ -= size_t(1) << l.cls;
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

    u32 *pool_ = nullptr;
    size_t size_ = 0, cap_ = 0;
    size_t in_use_ = 0;  // entries in blocks that lists hold (size_ - in_use_ are in free_)
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

struct HeapEntry {
    i64 count;
    u32 slot;
};

struct MergeOut {
    i64 rank;
    u32 left, right, token;
    i64 count;
};

// Raises ValueError/TypeError from inside the constructor with a message naming the row.
// A token blob is bytes (read from the store) or bytearray (a checkpoint's own rows).
size_t blob_size(PyObject *o) {
    return size_t(PyBytes_Check(o) ? PyBytes_GET_SIZE(o) : PyByteArray_GET_SIZE(o));
}
const u8 *blob_data(PyObject *o) {
    return reinterpret_cast<const u8 *>(PyBytes_Check(o) ? PyBytes_AS_STRING(o) : PyByteArray_AS_STRING(o));
}

[[noreturn]] void bad_row(size_t i, const char *what) {
    throw nb::value_error(("word row " + std::to_string(i) + ": " + what).c_str());
}

// A new tuple of the given new references (stolen, even on failure); NULL if any is NULL.
// Why not Py_BuildValue: it parses its format string for every one of ~900 K checkpoint rows.
template <class... Items>
PyObject *tuple_of(Items... items) {
    PyObject *all[] = {items...};
    PyObject *t = PyTuple_New(Py_ssize_t(sizeof...(items)));
    bool ok = t != nullptr;
    for (size_t k = 0; k < sizeof...(items); ++k) {
        ok = ok && all[k] != nullptr;
        if (t != nullptr) PyTuple_SET_ITEM(t, Py_ssize_t(k), all[k]);  // a NULL item is fine in a freed tuple
        else Py_XDECREF(all[k]);
    }
    if (!ok) Py_XDECREF(t);
    return ok ? t : nullptr;
}

// The rows of one checkpoint statement, kept as flat C++ arrays; iterating makes one Python tuple
// at a time, so executemany binds and frees each row before the next exists.
struct RowStream {
    enum Kind { kWords, kDeletes, kInserts, kUpdates };
    explicit RowStream(Kind k) : kind(k) {}
    Kind kind;
    // words: toks[a[i] .. a[i+1]) are row i's tokens, c[i] its word id;
    // pairs: (a[i], b[i]) the pair, c[i] its count. a is 64-bit: a checkpoint may hold more
    // than 2^32 tokens (the offsets used to wrap before a check after the fact).
    std::vector<u32> toks, b;
    std::vector<u64> a;
    std::vector<i64> c;
    size_t pos = 0;

    size_t size() const { return kind == kWords ? c.size() : a.size(); }

    nb::object next() {
        if (pos >= size()) throw nb::stop_iteration();
        size_t i = pos++;
        PyObject *row;
        if (kind == kWords) {
            // Why bytearray: Python's sqlite3 binds an exact bytearray as a blob directly, while
            // a bytes object goes through the adapter lookup (a tuple key, two failed attribute
            // lookups): py-spy showed ~0.25 s of pysqlite_microprotocols_adapt on enwiki-100M.
            // The stored blob is the same little-endian uint32 ids.
            size_t lo = a[i], hi = a[i + 1];
            PyObject *blob = PyByteArray_FromStringAndSize(nullptr, Py_ssize_t((hi - lo) * 4));
            if (blob == nullptr) throw nb::python_error();
            u8 *out = reinterpret_cast<u8 *>(PyByteArray_AS_STRING(blob));
            for (size_t k = lo; k < hi; ++k) {
                u32 t = toks[k];
                *out++ = u8(t);
                *out++ = u8(t >> 8);
                *out++ = u8(t >> 16);
                *out++ = u8(t >> 24);
            }
            row = tuple_of(blob, PyLong_FromLongLong((long long)c[i]));
        } else if (kind == kDeletes) {
            row = tuple_of(PyLong_FromUnsignedLong((unsigned long)a[i]), PyLong_FromUnsignedLong((unsigned long)b[i]));
        } else if (kind == kInserts) {
            row = tuple_of(PyLong_FromUnsignedLong((unsigned long)a[i]), PyLong_FromUnsignedLong((unsigned long)b[i]),
                           PyLong_FromLongLong((long long)c[i]));
        } else {
            row = tuple_of(PyLong_FromLongLong((long long)c[i]), PyLong_FromUnsignedLong((unsigned long)a[i]),
                           PyLong_FromUnsignedLong((unsigned long)b[i]));
        }
        if (row == nullptr) throw nb::python_error();
        return nb::steal(row);
    }
};

class MergeEngine {
    // the constructors' shared argument checks
    static void check_limits(i64 next_rank, i64 min_count) {
        if (next_rank < 0) throw nb::value_error("next_rank must be >= 0");
        if (min_count < 1) throw nb::value_error("min_count must be >= 1");
    }

  public:
    // rows: [(word id, word bytes, count, token blob or None)] as the store returns them;
    // token_bytes[id]: the bytes of vocab id `id`, None for special tokens (never in words).
    // min_count: rows whose count is below it are skipped; max_token_length: 0 = no limit.
    // replay: the merges the store logged after its words' tokens were written, as (left, right,
    // token) little-endian u32 triples in rank order (see replay_words); empty: none.
    MergeEngine(nb::list rows, nb::list token_bytes, u32 n_specials, u32 first_merge_id, i64 next_rank,
                i64 min_count, u64 max_token_length, nb::bytes replay)
        : first_merge_id_(first_merge_id), next_rank_(next_rank), min_count_(min_count),
          max_len_(max_token_length) {
        check_limits(next_rank, min_count);
        load_vocab(token_bytes);
        load_words(rows, n_specials);
        build(n_specials, replay);
    }

    // The same from packed counts (``WordCounter.pack``: a first counting flush's words, every
    // one still single bytes, ids first_id, first_id + 1, ... in their order). Why: as Python
    // rows, enwiki-100M's 445 K words cost ~90 MB, which the process kept after freeing them.
    MergeEngine(nb::bytes packed, i64 first_id, nb::list token_bytes, u32 n_specials, u32 first_merge_id,
                i64 next_rank, i64 min_count, u64 max_token_length)
        : first_merge_id_(first_merge_id), next_rank_(next_rank), min_count_(min_count),
          max_len_(max_token_length) {
        check_limits(next_rank, min_count);
        load_vocab(token_bytes);
        const u8 *data = static_cast<const u8 *>(packed.data());
        const size_t size = packed.size();
        // pure C++ from here (errors are C++ exceptions, raised once the GIL is back). Why:
        // train._pairs builds the engine while the last counting flush, which needs the GIL for
        // its rows, is written on another thread
        nb::gil_scoped_release unlocked;
        load_packed(data, size, first_id, n_specials);
        build_pairs(n_specials);
    }

    // The same from the store's rows read by the native connection (StoreDb.read_word_rows): a
    // resume builds the engine without a Python tuple per word (see store_db.h's WordRows).
    MergeEngine(const WordRows &rows, nb::list token_bytes, u32 n_specials, u32 first_merge_id, i64 next_rank,
                i64 min_count, u64 max_token_length, nb::bytes replay)
        : first_merge_id_(first_merge_id), next_rank_(next_rank), min_count_(min_count),
          max_len_(max_token_length) {
        check_limits(next_rank, min_count);
        load_vocab(token_bytes);
        load_rows(BufferRows{rows}, n_specials);
        build(n_specials, replay);
    }

    // The loaded words, caught up with `replay` if it holds merges, then their pairs counted.
    void build(u32 n_specials, nb::bytes replay) {
        const size_t n = replay.size() / 12;
        if (replay.size() % 12 != 0) throw nb::value_error("replay must hold (left, right, token) u32 triples");
        if (n == 0) {
            build_pairs(n_specials);
            return;
        }
        std::vector<u32> log(3 * n);
        const u8 *src = reinterpret_cast<const u8 *>(replay.c_str());
        for (size_t k = 0; k < 3 * n; ++k)
            log[k] = u32(src[4 * k]) | u32(src[4 * k + 1]) << 8 | u32(src[4 * k + 2]) << 16 |
                     u32(src[4 * k + 3]) << 24;  // little-endian, whatever the host
        for (size_t i = 0; i < n; ++i) {  // Why check: a damaged log must be an error, not wrong words
            const u32 a = log[3 * i], b = log[3 * i + 1], t = log[3 * i + 2];
            const size_t top = tb_.size();
            if (a >= top || b >= top || t >= top || !tb_ok_[a] || !tb_ok_[b] || !tb_ok_[t] ||
                tb_[t] != tb_[a] + tb_[b])
                throw nb::value_error("a logged merge does not match the vocabulary");
        }
        {
            nb::gil_scoped_release unlocked;
            replay_words(log, n_specials);
            build_pairs(n_specials);
        }
        forget_stored_pairs();  // the store's are those of the words before the replay
    }

    // The store holds no pair counts of these words (a replay, or a finished run's store): the
    // next checkpoint empties its table and writes every live pair (rewrite_pairs).
    void forget_stored_pairs() {
        for (u32 s = 0; s < slots_.size(); ++s) {
            slots_[s].stored = 0;
            if (slots_[s].count > 0) mark_changed_pair(s);
        }
        rewrite_pairs_ = true;
    }

    // Applies the logged merges `log` (rank order) to every word, marking the words it changes.
    // A word's tokens after merges r0..r1 are found by applying, again and again, the lowest-ranked
    // logged merge above the last one applied whose pair the word holds: merges in between have no
    // pair in the word, so this is exactly what merging every word rank by rank makes. A pair may
    // come back under a later rank (a merge whose bytes are an existing token reuses that id), so
    // each pair keeps its ranks in a chain. Why here, not apply() per merge: no pair counts, lists
    // or heap are kept up to date through the replay, and words are independent, so two threads
    // take half the arena each (they write only their own words).
    void replay_words(const std::vector<u32> &log, u32 base) {
        const u32 n = u32(log.size() / 3);
        // Why a dense table for pairs of two bytes (ids base .. base + 255): words still their
        // bytes (a store whose merging wrote no checkpoint yet) look up every pair once, and those
        // are the most lookups of a replay; as in build_pairs, 256 KiB that stay in cache.
        constexpr u32 kSide = 256;
        std::vector<u32> dense(kSide * kSide, kNone);
        for (u32 i = n; i-- > 0;) {
            const u32 da = log[3 * i] - base, db = log[3 * i + 1] - base;  // wraps for ids below base
            if (da < kSide && db < kSide) dense[da * kSide + db] = i;  // the first rank wins
        }
        size_t cap = 16;
        while (cap < size_t(n) + size_t(n) / 3 + 1) cap <<= 1;
        // pair -> its first rank in the log, open addressing at load <= 3/4; one 16-byte entry
        // per slot, so a probe reads one cache line (key and rank together)
        struct Entry {
            u64 key;
            u32 first;
        };
        const u64 kEmpty = ~u64(0);  // no pair has both ids kNone
        std::vector<Entry> table(cap, Entry{kEmpty, kNone});
        std::vector<u32> next(n, kNone), last(cap, kNone);
        auto find = [&](u64 key) {
            size_t h = size_t((key * 0x9E3779B97F4A7C15ull) >> 40) & (cap - 1);
            while (table[h].key != kEmpty && table[h].key != key) h = (h + 1) & (cap - 1);
            return h;
        };
        for (u32 i = 0; i < n; ++i) {
            const u64 key = pair_key(log[3 * i], log[3 * i + 1]);
            const size_t h = find(key);
            if (table[h].key == kEmpty)
                table[h] = Entry{key, i};
            else
                next[last[h]] = i;
            last[h] = i;
        }
        // the lowest rank of pair (x, y) above `after` (kNone: above none), or kNone
        auto rank_of = [&](u32 x, u32 y, u32 after) {
            const Entry &e = table[find(pair_key(x, y))];
            u32 i = e.first;  // kNone for an empty slot
            while (i != kNone && after != kNone && i <= after) i = next[i];
            return i;
        };
        constexpr u32 kStale = kNone - 1;  // a pair next to a token just made: look it up again
        auto run = [&](size_t from, size_t to, std::vector<u32> &changed) {
            std::vector<u32> rk;  // rk[i]: the lowest rank of pair (p[i], p[i + 1]) still to come
            for (size_t o = from; o < to; o = next_word(o)) {
                u32 *p = &ar_[o + kHdr];
                u32 len = ar_[o + kLen], done = kNone;
                if (len < 2) continue;
                rk.resize(len);
                for (u32 i = 0; i + 1 < len; ++i) {
                    const u32 da = p[i] - base, db = p[i + 1] - base;
                    rk[i] = da < kSide && db < kSide ? dense[da * kSide + db] : rank_of(p[i], p[i + 1], kNone);
                }
                while (len >= 2) {
                    u32 best = kNone;
                    for (u32 i = 0; i + 1 < len; ++i) best = rk[i] < best ? rk[i] : best;
                    if (best == kNone) break;
                    const u32 t = log[3 * best + 2];
                    // Rewrite in place, left to right: a pair ranked `best` is (a, b) (a rank is
                    // one pair's) and its a was not taken by a match just before (i skips it).
                    // The other pairs keep their rank: it is above `best`, so still the next one.
                    u32 w = 0;
                    for (u32 i = 0; i < len; ++w) {
                        if (i + 1 < len && rk[i] == best) {
                            p[w] = t;
                            if (w > 0) rk[w - 1] = kStale;
                            rk[w] = kStale;
                            i += 2;
                        } else {
                            p[w] = p[i];
                            rk[w] = rk[i];
                            ++i;
                        }
                    }
                    len = w;
                    for (u32 i = 0; i + 1 < len; ++i)
                        if (rk[i] == kStale) rk[i] = rank_of(p[i], p[i + 1], best);
                    done = best;
                }
                if (done != kNone) {
                    ar_[o + kLen] = len;
                    ar_[o + kStamp] |= kChangedBit;
                    changed.push_back(u32(o));
                }
            }
        };
        // split at the first word past half the arena: the halves hold about as many tokens
        size_t mid = 0;
        while (mid < ar_.size() && mid < ar_.size() / 2) mid = next_word(mid);
        std::vector<u32> second;
        const bool two = n_words_ >= 100000 && std::thread::hardware_concurrency() > 1;
        std::thread other;
        if (two) other = std::thread([&] { run(mid, ar_.size(), second); });
        run(0, two ? mid : ar_.size(), changed_words_);
        if (two) other.join();
        changed_words_.insert(changed_words_.end(), second.begin(), second.end());
    }

    // ---- the merge loop --------------------------------------------------------------------

    nb::list step(i64 max_merges) {
        Busy busy(this);
        if (finished_) throw std::runtime_error("MergeEngine.step after finish()");
        std::vector<MergeOut> out;
        {
            nb::gil_scoped_release unlocked;  // pure C++ from here: no Python object is touched
            while (i64(out.size()) < max_merges) {
                u64 vocab_id = u64(first_merge_id_) + u64(next_rank_);
                if (vocab_id >= kNone) {
                    // checked before anything changes, so the merges learned so far are returned
                    if (out.empty()) throw std::overflow_error("token ids would exceed 32 bits");
                    break;
                }
                u32 slot;
                i64 count;
                if (!pop_best(slot, count)) {
                    exhausted_ = true;
                    break;
                }
                u32 a = slots_[slot].left, b = slots_[slot].right;
                std::string bytes = tb_[a] + tb_[b];
                auto it = id_of_.emplace(bytes, u32(vocab_id)).first;
                u32 token = it->second;
                if (token >= tb_.size()) {
                    tb_.resize(size_t(token) + 1);
                    tb_ok_.resize(size_t(token) + 1, 0);
                    tlen_.resize(size_t(token) + 1, 0);
                }
                if (!tb_ok_[token]) {
                    tb_[token] = std::move(bytes);
                    tb_ok_[token] = 1;
                    tlen_[token] = u32(tb_[token].size());
                }
                apply(slot, a, b, token);
                if (lists_.fragmented()) compact_lists();
                out.push_back({next_rank_, a, b, token, count});
                ++next_rank_;
            }
        }
        nb::list result;
        for (const MergeOut &m : out)
            result.append(nb::make_tuple(m.rank, m.left, m.right, m.token, m.count));
        return result;
    }

    void forget_stored_pairs_now() {
        Busy busy(this);
        forget_stored_pairs();
    }

    void compact_lists_now() {
        Busy busy(this);
        compact_lists();
    }

    // Merging is over: frees what only merging needs (the pair -> words lists, the heap, the pair
    // index, ~55 MB for enwiki-100M -> 32K) before the final checkpoint is written, which is
    // then the peak of a run. Checkpoint rows, digests and inspection still work; step() refuses.
    void finish() {
        Busy busy(this);
        finished_ = true;
        for (Slot &s : slots_) s.where = WordLists::List{};
        lists_.clear();
        heap_.release();
        index_.clear();
        work_.release();
        release_free_memory();
    }

    // ---- changes since the last take, for checkpoints --------------------------------------

    // (word rows [(token blob, word id)], pair deletes [(left, right)],
    // pair inserts [(left, right, count)], pair updates [(count, left, right)]):
    // exactly the parameters of the four executemany statements of a checkpoint, as RowStreams
    // (iterables with a length) that make each tuple only when executemany asks for it.
    // Why streams: the final checkpoint of enwiki-100M / 32000 holds 442 K words and 433 K pairs;
    // as lists of tuples they were ~120 MB alive at once, the process's peak (402 MB).
    nb::tuple take_checkpoint_rows() {
        Busy busy(this);
        std::vector<u32> words = take_changed_words();
        rewrite_pairs_ = false;
        RowStream word_rows = word_rows_of(words), deletes(RowStream::kDeletes), inserts(RowStream::kInserts),
            updates(RowStream::kUpdates);
        for (u32 s : take_changed_pairs(/*skip_unchanged=*/true)) {
            i64 cur = slots_[s].count, old = slots_[s].stored;
            RowStream &to = old == 0 ? inserts : cur == 0 ? deletes : updates;
            to.a.push_back(slots_[s].left);
            to.b.push_back(slots_[s].right);
            to.c.push_back(cur);
            slots_[s].stored = cur;
        }
        return nb::make_tuple(std::move(word_rows), std::move(deletes), std::move(inserts), std::move(updates));
    }

    // The word rows [(token blob, word id)] of the words at arena offsets `words` (in order).
    RowStream word_rows_of(const std::vector<u32> &words) const {
        RowStream rows(RowStream::kWords);
        size_t ntok = 0;
        for (u32 o : words) ntok += ar_[o + kLen];
        rows.toks.reserve(ntok);
        rows.a.reserve(words.size() + 1);
        rows.c.reserve(words.size());
        rows.a.push_back(0);
        for (u32 o : words) {
            const u32 *t = &ar_[o + kHdr];
            rows.toks.insert(rows.toks.end(), t, t + ar_[o + kLen]);
            rows.a.push_back(rows.toks.size());  // end offset
            rows.c.push_back(ar_[o + kId]);
        }
        return rows;
    }

    // The word rows [(token blob, word id)] of the words more frequent than the (k+1)-th most
    // frequent one (all of them when there are at most k), in id order: what a finished run keeps
    // of its words' tokens. Why no tie-break: word ids follow the order counting met the words,
    // which threads and chunk sizes change; the counts alone decide, so the same words are kept.
    // Why a heap of k + 1 counts: one pass over the words' headers, no sort of 7 M words.
    RowStream top_word_rows(size_t k) {
        Busy busy(this);
        std::vector<u32> offsets;
        i64 floor = 0;  // keep counts above it
        if (n_words_ > k) {
            std::vector<i64> heap;  // the k + 1 largest counts, smallest on top
            heap.reserve(k + 1);
            const auto greater = std::greater<i64>();
            for (size_t o = 0; o < ar_.size(); o = next_word(o)) {
                const i64 c = count_at(o);
                if (heap.size() < k + 1) {
                    heap.push_back(c);
                    std::push_heap(heap.begin(), heap.end(), greater);
                } else if (c > heap.front()) {
                    std::pop_heap(heap.begin(), heap.end(), greater);
                    heap.back() = c;
                    std::push_heap(heap.begin(), heap.end(), greater);
                }
            }
            floor = heap.front();
        }
        for (size_t o = 0; o < ar_.size(); o = next_word(o))
            if (count_at(o) > floor) offsets.push_back(u32(o));  // arena order = id order
        return word_rows_of(offsets);
    }

    // The pair rows [(left, right, count)] of the live pairs at least as frequent as the k-th most
    // frequent one (all of them when there are at most k), sorted by (left, right): what a finished
    // run keeps of its pair counts, to say which merges would come next. Why no tie-break: as for
    // top_word_rows, the counts alone decide. Works after finish(), which keeps the slots.
    RowStream top_pair_rows(size_t k) {
        Busy busy(this);
        std::vector<i64> counts;
        for (const Slot &s : slots_)
            if (s.count > 0) counts.push_back(s.count);
        i64 floor = 1;  // keep counts at or above it
        if (k == 0) floor = std::numeric_limits<i64>::max();
        else if (counts.size() > k) {
            std::nth_element(counts.begin(), counts.begin() + (k - 1), counts.end(), std::greater<i64>());
            floor = counts[k - 1];
        }
        std::vector<std::pair<u64, u32>> keyed;
        for (u32 s = 0; s < slots_.size(); ++s)
            if (slots_[s].count >= floor) keyed.emplace_back(pair_key(slots_[s].left, slots_[s].right), s);
        std::sort(keyed.begin(), keyed.end());
        RowStream rows(RowStream::kInserts);
        for (const auto &e : keyed) {
            rows.a.push_back(slots_[e.second].left);
            rows.b.push_back(slots_[e.second].right);
            rows.c.push_back(slots_[e.second].count);
        }
        return rows;
    }

    // ({word index: [token ids]}, {(left, right): count, 0 when gone}), as the Python engine gives.
    nb::tuple take_changes() {
        Busy busy(this);
        nb::dict words, pairs;
        const std::vector<u32> changed = take_changed_words();  // arena order = word order
        size_t i = 0;
        for (size_t o = 0, w = 0; o < ar_.size() && i < changed.size(); o = next_word(o), ++w) {
            if (o != changed[i]) continue;
            ++i;
            nb::list toks;
            for (u32 k = 0; k < ar_[o + kLen]; ++k) toks.append(ar_[o + kHdr + k]);
            words[nb::int_(w)] = toks;
        }
        for (u32 s : take_changed_pairs()) {
            pairs[nb::make_tuple(slots_[s].left, slots_[s].right)] = nb::int_(slots_[s].count);
            slots_[s].stored = slots_[s].count;
        }
        return nb::make_tuple(words, pairs);
    }

    // ---- inspection --------------------------------------------------------------------------

    nb::dict pair_counts() {
        Busy busy(this);
        nb::dict d;
        for (u32 s = 0; s < slots_.size(); ++s)
            if (slots_[s].count > 0) d[nb::make_tuple(slots_[s].left, slots_[s].right)] = nb::int_(slots_[s].count);
        return d;
    }

    // (number of live pairs, digest 1, digest 2): see kDigestP1.
    nb::tuple pair_digest() {
        Busy busy(this);
        i64 n = 0, h1 = 0, h2 = 0;
        for (u32 s = 0; s < slots_.size(); ++s) {
            i64 c = slots_[s].count;
            if (c <= 0) continue;
            i64 l = slots_[s].left, r = slots_[s].right;
            ++n;
            h1 += ((l * 65599 + r) % kDigestP1) * (c % kDigestP1) % kDigestP1;
            h2 += ((l * 1000003 + r * 7 + 11) % kDigestP2) * (c % kDigestP2) % kDigestP2;
        }
        return nb::make_tuple(n, h1, h2);
    }

    nb::list word_tokens(u32 w) {
        Busy busy(this);
        if (w >= n_words_) throw nb::index_error("no such word");
        size_t o = 0;
        for (u32 k = 0; k < w; ++k) o = next_word(o);
        nb::list toks;
        for (u32 i = 0; i < ar_[o + kLen]; ++i) toks.append(ar_[o + kHdr + i]);
        return toks;
    }

    nb::bytes token_bytes(u32 id) {
        Busy busy(this);
        if (id >= tb_.size() || !tb_ok_[id]) throw nb::key_error(std::to_string(id).c_str());
        return nb::bytes(tb_[id].data(), tb_[id].size());
    }

    bool exhausted() const { return exhausted_; }
    // True until the next take_checkpoint_rows: the store's pair counts must all be replaced.
    bool rewrite_pairs() const { return rewrite_pairs_; }
    i64 next_rank() const { return next_rank_; }
    u32 first_merge_id() const { return first_merge_id_; }
    i64 bad_word() const { return bad_word_; }
    size_t num_words() const { return n_words_; }
    size_t pair_slots() const { return slots_.size(); }
    size_t heap_size() const { return heap_.size(); }
    // Bytes held by each part of the engine (capacity, not size: what the process pays for).
    nb::dict memory() const {
        nb::dict d;
        d["tokens"] = (ar_.capacity() - n_words_ * kHdr) * sizeof(u32);
        d["words"] = n_words_ * kHdr * sizeof(u32);  // the words' headers in the arena
        d["slots"] = slots_.capacity() * sizeof(Slot);
        d["word_lists"] = lists_.bytes();
        d["pair_index"] = index_.bytes();
        d["heap"] = heap_.capacity() * sizeof(HeapEntry);
        return d;
    }
    size_t index_entries() const {
        size_t n = 0;
        for (const Slot &s : slots_) n += s.where.len;
        return n;
    }

  private:
    // Refuses a second call while one runs with the GIL released (another Python thread).
    struct Busy {
        MergeEngine *e;
        explicit Busy(MergeEngine *engine) : e(engine) {
            if (e->busy_.exchange(true)) throw std::runtime_error("MergeEngine is in use by another thread");
        }
        ~Busy() { e->busy_.store(false); }
    };

    static nb::object steal_checked(PyObject *o) {
        if (!o) throw nb::python_error();
        return nb::steal(o);
    }

    void load_vocab(nb::list token_bytes) {
        size_t n = nb::len(token_bytes);
        if (n >= kNone) throw nb::value_error("too many tokens");
        tb_.resize(n);
        tb_ok_.assign(n, 0);
        tlen_.assign(n, 0);
        for (size_t i = 0; i < n; ++i) {
            PyObject *o = PyList_GET_ITEM(token_bytes.ptr(), Py_ssize_t(i));
            if (o == Py_None) continue;
            if (!PyBytes_Check(o)) throw nb::type_error("token_bytes must hold bytes or None");
            tb_[i].assign(PyBytes_AS_STRING(o), size_t(PyBytes_GET_SIZE(o)));
            tlen_[i] = u32(std::min<size_t>(tb_[i].size(), kNone));
            tb_ok_[i] = 1;
            id_of_.emplace(tb_[i], u32(i));  // ascending ids: the lowest id of some bytes wins
        }
    }

    void load_packed(const u8 *data, size_t size, i64 first_id, u32 n_specials) {
        if (n_specials + 256 > tb_.size()) throw nb::value_error("the vocabulary lacks the 256 bytes");
        size_t total = 0, kept = 0, n = 0;
        auto check = [&](const u8 *, size_t len, uint64_t count) {
            if (len >= kNone) bad_row(n, "a word of 4 GiB or more");  // lengths are 32-bit
            if (count < 1 || count > uint64_t(INT64_MAX)) bad_row(n, "word counts must be positive 64-bit");
            ++n;
            if (i64(count) < min_count_) return;
            ++kept;
            total += kHdr + len;
        };
        try {
            bpe::unpack_counts(data, size, check);
        } catch (const std::invalid_argument &e) {
            throw nb::value_error(e.what());
        }
        if (n >= kNone) throw nb::value_error("too many words");
        alloc_arena(total, kept);
        size_t pos = 0, i = 0;
        bpe::unpack_counts(data, size, [&](const u8 *bytes, size_t len, uint64_t count) {
            const i64 id = first_id + i64(i++);
            if (i64(count) < min_count_) return;
            start_word(pos, u32(len), i64(count), store_id(id, i - 1));
            for (size_t k = 0; k < len; ++k) ar_[pos + kHdr + k] = n_specials + bytes[k];
            pos += kHdr + len;
        });
    }

    // A word's store id, kept in 32 bits (in its header in the arena).
    static u32 store_id(i64 id, size_t row) {
        if (id < 0 || id > i64(kNone)) bad_row(row, "word ids must be 0 to 2^32 - 1");
        return u32(id);
    }

    // Words whose count is below min_count_ are skipped: word w is the w-th row kept, and
    // bad_word_ is an index into `rows`.
    // One word row as load_rows reads it: tokens == nullptr means the word is still its single
    // bytes (NULL in the store, or a counting flush's (id, bytes, count) row).
    struct RowIn {
        i64 id = 0, count = 0;
        const u8 *bytes = nullptr, *tokens = nullptr;
        size_t nbytes = 0, ntokbytes = 0;
    };

    // Python rows [(id, bytes, count, tokens or None)] or (id, bytes, count), as load_rows reads them.
    struct TupleRows {
        PyObject *const *items;
        size_t n;
        size_t size() const { return n; }
        void read(size_t i, RowIn &r) const {
            PyObject *row = items[i];
            if (!PyTuple_Check(row) || (PyTuple_GET_SIZE(row) != 4 && PyTuple_GET_SIZE(row) != 3))
                throw nb::type_error("word rows must be (id, bytes, count, tokens) tuples");
            PyObject *wb = PyTuple_GET_ITEM(row, 1);
            if (!PyBytes_Check(wb) && !PyByteArray_Check(wb)) bad_row(i, "word bytes must be bytes");
            r.bytes = blob_data(wb);
            r.nbytes = blob_size(wb);
            r.count = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 2));
            if (r.count == -1 && PyErr_Occurred()) throw nb::python_error();
            r.id = PyLong_AsLongLong(PyTuple_GET_ITEM(row, 0));
            if (r.id == -1 && PyErr_Occurred()) throw nb::python_error();
            PyObject *blob = PyTuple_GET_SIZE(row) == 4 ? PyTuple_GET_ITEM(row, 3) : Py_None;
            r.tokens = nullptr;
            r.ntokbytes = 0;
            if (blob == Py_None) return;
            if (!PyBytes_Check(blob) && !PyByteArray_Check(blob)) bad_row(i, "tokens must be bytes or None");
            r.tokens = blob_data(blob);
            r.ntokbytes = blob_size(blob);
        }
    };

    // Rows read from the store by the native connection (store_db.h's WordRows), in order.
    struct BufferRows {
        const WordRows &rows;
        size_t size() const { return rows.n; }
        void read(size_t i, RowIn &r) const {
            WordRows::Row row = rows.row(i);
            r.id = row.id;
            r.count = row.count;
            r.bytes = row.bytes;
            r.nbytes = row.nbytes;
            r.tokens = row.tokens;
            r.ntokbytes = row.ntokbytes;
        }
    };

    void load_words(nb::list rows, u32 n_specials) {
        load_rows(TupleRows{PySequence_Fast_ITEMS(rows.ptr()), size_t(nb::len(rows))}, n_specials);
    }

    // Rows are read twice, in order: the first pass checks them and sizes the flat array exactly,
    // so it is allocated once.
    template <class Rows>
    void load_rows(const Rows &rows, u32 n_specials) {
        const size_t n = rows.size();
        if (n >= kNone) throw nb::value_error("too many words");
        size_t total = 0, kept = 0;
        RowIn r;
        for (size_t i = 0; i < n; ++i) {
            rows.read(i, r);
            if (r.nbytes >= kNone) bad_row(i, "a word of 4 GiB or more");  // lengths are 32-bit
            if (r.count < 1) bad_row(i, "word counts must be positive");
            if (r.count < min_count_) continue;
            ++kept;
            total += kHdr + (r.tokens == nullptr ? r.nbytes : r.ntokbytes / 4);
        }
        alloc_arena(total, kept);
        size_t pos = 0;
        for (size_t i = 0; i < n; ++i) {
            rows.read(i, r);
            if (r.count < min_count_) continue;
            const u8 *bytes = r.bytes;
            size_t nbytes = r.nbytes;
            const size_t cap = r.tokens == nullptr ? nbytes : r.ntokbytes / 4;  // as sized above
            start_word(pos, u32(cap), r.count, store_id(r.id, i));
            u32 *tok = &ar_[pos + kHdr];
            if (r.tokens == nullptr) {
                if (n_specials + 256 > tb_.size()) bad_row(i, "the vocabulary lacks the 256 bytes");
                for (size_t k = 0; k < nbytes; ++k) tok[k] = n_specials + bytes[k];
            } else {
                size_t nb_ = r.ntokbytes;
                size_t ntok = nb_ / 4;
                const u8 *src = r.tokens;
                // Why check: the ids index token_bytes; a corrupt blob must be a clean error.
                bool ok = nb_ % 4 == 0;
                size_t at = 0;
                for (size_t k = 0; ok && k < ntok; ++k) {
                    u32 t = u32(src[4 * k]) | u32(src[4 * k + 1]) << 8 | u32(src[4 * k + 2]) << 16 |
                            u32(src[4 * k + 3]) << 24;  // little-endian, whatever the host
                    if (t >= tb_.size() || !tb_ok_[t]) {
                        ok = false;
                        break;
                    }
                    const std::string &s = tb_[t];
                    if (s.empty() || at + s.size() > nbytes || std::memcmp(bytes + at, s.data(), s.size()) != 0)
                        ok = false;
                    at += s.size();
                    tok[k] = t;
                }
                if (!ok || at != nbytes) {
                    if (bad_word_ < 0) bad_word_ = i64(i);
                    ar_[pos + kLen] = 0;  // the caller refuses the store; keep the engine memory-safe
                }
            }
            pos += kHdr + cap;
        }
    }

    // The arena for `words` words holding `total` u32 (headers and tokens). Why the limit: the
    // pair -> words lists and the changed words hold a word's arena offset in 32 bits.
    void alloc_arena(size_t total, size_t words) {
        if (total >= kNone) throw std::overflow_error("more than 2^32 - 1 word tokens and headers");
        ar_.assign_zero(total);
        n_words_ = words;
    }

    // Writes the header of the word at offset o (its tokens follow; its stamp starts at 0).
    void start_word(size_t o, u32 len, i64 count, u32 id) {
        ar_[o + kLen] = len;
        ar_[o + kCap] = len;
        std::memcpy(&ar_[o + kCount], &count, sizeof count);
        ar_[o + kId] = id;
    }
    i64 count_at(size_t o) const {
        i64 c;
        std::memcpy(&c, &ar_[o + kCount], sizeof c);
        return c;
    }
    size_t next_word(size_t o) const { return o + kHdr + ar_[o + kCap]; }

    // Whether merging (a, b) would make a token longer than max_token_length: such a pair is
    // never counted. Token bytes never change, so a pair is too long always or never.
    // Why tlen_: 4 bytes per token (a 32K vocabulary fits in L2) instead of a std::string's 32.
    bool too_long(u32 a, u32 b) const {
        return max_len_ != 0 && u64(tlen_[a]) + tlen_[b] > max_len_;
    }

    // Counts every pair of every word, and lists each word once under each pair it holds.
    // Why a dense table for pairs of two bytes: when counting is just over (and on a resume before
    // the first merge checkpoint) every word is still its bytes, and the pair index's hash probe
    // and tag check were a third of this loop (a 2 GB corpus: 2.65 M words, 13 M pairs); the
    // table (256 KiB) stays in cache. Slots are still made in first-seen order, as before. Why
    // the seen-slots list: a word lists itself under a pair once; checking the list's last entry
    // instead (WordLists::add) was half of this loop in cache misses.
    void build_pairs(u32 n_specials) {
        constexpr u32 kDenseSide = 256, kLocal = 32;
        const u32 base = n_specials;
        std::vector<u32> dense(kDenseSide * kDenseSide, kNone);
        u32 seen[kLocal];
        for (size_t o = 0; o < ar_.size(); o = next_word(o)) {
            const u32 w = u32(o);  // a word is known by its offset in the arena
            const u32 *p = &ar_[o + kHdr];
            const i64 c = count_at(o);
            const u32 n = ar_[o + kLen];
            u32 nseen = 0;
            for (u32 i = 0; i + 1 < n; ++i) {
                const u32 x = p[i], y = p[i + 1];
                if (too_long(x, y)) continue;
                u32 s;
                const u32 dx = x - base, dy = y - base;  // wraps to large for ids below base
                if (dx < kDenseSide && dy < kDenseSide) {
                    u32 &d = dense[dx * kDenseSide + dy];
                    if (d == kNone) d = slot_of(x, y);
                    s = d;
                } else {
                    s = slot_of(x, y);
                }
                slots_[s].count += c;
                if (n - 1 > kLocal) {
                    add_where(s, w);
                    continue;
                }
                bool listed = false;
                for (u32 k = 0; k < nseen; ++k) listed |= seen[k] == s;
                if (listed) continue;
                seen[nseen++] = s;
                lists_.append(slots_[s].where, w);
            }
        }
        heap_.reserve(slots_.size());
        for (u32 s = 0; s < slots_.size(); ++s) {
            slots_[s].stored = slots_[s].count;  // a new engine mirrors the store it was loaded from
            if (slots_[s].count > 0) heap_.push_back({slots_[s].count, s});
        }
        std::make_heap(heap_.begin(), heap_.end(), HeapLess{this});
        if (lists_.fragmented()) compact_lists();
    }

    u32 slot_of(u32 a, u32 b) {
        bool inserted;
        // slots are 32-bit (kNone marks "none"): checked before u32(slots_.size()) could wrap
        if (slots_.size() >= kNone) throw std::overflow_error("more than 2^32 - 1 distinct pairs");
        u32 s = index_.find_or_insert(pair_key(a, b), u32(slots_.size()), inserted, KeyOf{&slots_});
        if (inserted) slots_.push_back(Slot{a, b, 0, 0, {}, 0});
        return s;
    }

    void add_where(u32 s, u32 w) { lists_.add(slots_[s].where, w); }

    // Only between merges: apply() holds a list outside its slot while it runs.
    void compact_lists() {
        std::vector<WordLists::List *> lists;
        for (Slot &s : slots_)
            if (s.where.has_block()) lists.push_back(&s.where);
        lists_.compact(lists);
    }

    // Heap order: count, then (bytes_left, bytes_right) compared as a pair (CS336 tie-break).
    struct HeapLess {
        const MergeEngine *e;
        bool operator()(const HeapEntry &x, const HeapEntry &y) const {
            if (x.count != y.count) return x.count < y.count;
            if (x.slot == y.slot) return false;
            const std::string &xl = e->tb_[e->slots_[x.slot].left], &yl = e->tb_[e->slots_[y.slot].left];
            int c = xl.compare(yl);
            if (c != 0) return c < 0;
            return e->tb_[e->slots_[x.slot].right] < e->tb_[e->slots_[y.slot].right];
        }
    };

    void heap_push(i64 count, u32 slot) {
        heap_.push_back({count, slot});
        std::push_heap(heap_.begin(), heap_.end(), HeapLess{this});
    }

    bool pop_best(u32 &slot, i64 &count) {
        HeapLess less{this};
        while (!heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), less);
            HeapEntry e = heap_.back();
            heap_.pop_back();
            i64 cur = slots_[e.slot].count;
            if (cur == e.count && cur > 0) {
                slot = e.slot;
                count = cur;
                return true;
            }
            if (cur > 0) heap_push(cur, e.slot);  // stale: requeue with the true count
        }
        return false;
    }

    void mark_changed_pair(u32 s) {
        if (!(slots_[s].mark & kChanged)) {
            slots_[s].mark |= kChanged;
            changed_pairs_.push_back(s);
        }
    }

    // Merges (a, b) -> t in every word holding it, updating pair counts, the index and the heap.
    void apply(u32 slot, u32 a, u32 b, u32 t) {
        // The list is taken out of the slot, and its block given back only at the end. Rewriting
        // adds nothing to the pool (the words that gain a pair wait in the StepWork), so the
        // list stays where it is while the words are rewritten.
        const WordLists::List where = slots_[slot].where;
        slots_[slot].where = WordLists::List{};
        // The index may list a word more than once (a pair that left and came back); the stamp
        // skips repeats, which matter for long words (Chinese text has pre-tokens of 100s of bytes).
        if (++stamp_ == kChangedBit) {  // 2^31 merges: start the stamps again (keeping the flags)
            for (size_t o = 0; o < ar_.size(); o = next_word(o)) ar_[o + kStamp] &= kChangedBit;
            stamp_ = 1;
        }
        const u32 *ws = lists_.data(where);
        const size_t nw = where.len;
        work_.clear();
        rewrite(work_, ws, nw, a, b, t);
        WordLists::List done = where;
        lists_.release(done);
        add_changes(work_);
        for (u32 w : work_.changed) changed_words_.push_back(w);
        slots_[slot].count = 0;  // every holder was visited, so no word holds (a, b) any more
        mark_changed_pair(slot);
    }

    // Rewrites the words at arena offsets ws[0 .. n) into `work`.
    void rewrite(StepWork &work, const u32 *ws, size_t n, u32 a, u32 b, u32 t) {
        // Why prefetch: the holders of a frequent pair are scattered over the arena, and each
        // visit starts with a cache miss (its header and first tokens, which share a line or two);
        // fetching both lines 12 words ahead overlaps those misses.
        for (size_t k = 0; k < n; ++k) {
            if (k + 12 < n) {
                const char *ahead = reinterpret_cast<const char *>(&ar_[ws[k + 12]]);
                __builtin_prefetch(ahead);
                __builtin_prefetch(ahead + 64);
            }
            const u32 o = ws[k];
            u32 &stamp = ar_[o + kStamp];
            if ((stamp & ~kChangedBit) == stamp_) continue;
            stamp = (stamp & kChangedBit) | stamp_;
            merge_word(work, o, a, b, t);
        }
    }

    // Adds a merge's pair changes into the pair table: each pair's net change once, and the
    // words that gained it to its list (a pair made by this merge gets its slot here). Why the
    // prefetches: the step's pairs are scattered over the table, a cache miss for the index cell
    // and another for the slot; fetching the cell 16 entries ahead and the slot it names 8 ahead
    // overlaps them.
    void add_changes(StepWork &work) {
        StepWork::Entry *e = work.begin();
        const size_t n = work.size();
        for (size_t k = 0; k < n; ++k) {
            if (k + 16 < n) index_.prefetch_cell(e[k + 16].key);
            if (k + 8 < n) {
                const u32 ahead = index_.first_slot(e[k + 8].key);
                if (ahead != kNone) __builtin_prefetch(&slots_[ahead]);
            }
            StepWork::Entry &d = e[k];
            const u32 x = u32(d.key >> 32), y = u32(d.key);
            if (too_long(x, y)) continue;  // never counted (d.slot stays kNone)
            d.slot = d.head != kNone ? slot_of(x, y) : index_.find(d.key, KeyOf{&slots_});
            if (d.slot == kNone) continue;  // cannot happen: a pair a word lost was counted
            Slot &s = slots_[d.slot];
            s.count += d.delta;
            mark_changed_pair(d.slot);
            // append, not add: the list's last entry is rarely this word, and reading it is a
            // cache miss per pair (a word listed twice is skipped by its stamp in apply)
            for (u32 i = d.head; i != kNone; i = work.add(i).next) lists_.append(s.where, work.add(i).word);
            // one heap push per pair that grew keeps "every live pair has an entry >= its count";
            // the list of a pair no word holds is all stale
            if (d.delta > 0 && s.count > 0) heap_push(s.count, d.slot);
            else if (s.count == 0) lists_.release(s.where);
        }
    }

    // A pair (x, y) of word w, weighted c, that a merge removed (c < 0) or made (c > 0). The
    // merged pair itself is left out: apply() zeroes it.
    static void change_pair(StepWork &work, u32 x, u32 y, i64 c, u32 w, u64 merged) {
        const u64 key = pair_key(x, y);
        if (key != merged) work.change(key, c, w);
    }

    // Rewrites word w in place, merging (a, b) -> t left to right without overlap, and records
    // the pairs that changed. Per match at old position i, written at new position m: the old
    // pair on its left (old[i-1], a) is gone unless the previous match consumed old[i-1] (it is
    // then that match's right pair), and the new (new[m-1], t) appears; on its right, (b,
    // old[i+2]) is gone and (t, old[i+2]) appears unless old[i+2] starts the next match (its
    // left pair (t, t) is then counted by that match). Every other pair maps one to one between
    // the old and new word and keeps its count. One pass, no copy of the word: the tokens between
    // matches move down (memmove), and writes never overtake reads.
    void merge_word(StepWork &work, u32 w, u32 a, u32 b, u32 t) {
        u32 *p = &ar_[w + kHdr];
        const u32 n = ar_[w + kLen];
        u32 i = find_pair(p, 0, n, a, b);
        if (i >= n) return;  // a stale index entry: the pair left this word earlier
        const u64 merged = pair_key(a, b);
        const i64 c = count_at(w);
        u32 m = i;  // tokens before the first match are unchanged
        bool after_match = false;
        while (true) {  // a match at i
            if (m > 0) {
                if (!after_match) change_pair(work, p[m - 1], a, -c, w, merged);
                change_pair(work, p[m - 1], t, c, w, merged);
            }
            p[m++] = t;
            const u32 next = find_pair(p, i + 2, n, a, b);
            if (i + 2 < n) {
                const u32 y = p[i + 2];
                change_pair(work, b, y, -c, w, merged);
                if (next != i + 2) change_pair(work, t, y, c, w, merged);
            }
            const u32 from = std::min(i + 2, n), to = std::min(next, n);
            if (to > from) std::memmove(p + m, p + from, size_t(to - from) * sizeof(u32));
            m += to - from;
            after_match = to == from;
            if (next >= n) break;
            i = next;
        }
        ar_[w + kLen] = m;
        if (!(ar_[w + kStamp] & kChangedBit)) {
            ar_[w + kStamp] |= kChangedBit;
            work.changed.push_back(w);
        }
    }

    // The changed words' offsets in arena order (= store id order: B-tree friendly), flags cleared.
    std::vector<u32> take_changed_words() {
        std::vector<u32> out;
        out.swap(changed_words_);
        if (out.size() >= n_words_ / 8) {
            // Why a walk: when many words changed (the final checkpoint: nearly all of them),
            // one pass over the arena in order reads it sequentially, where sorting the offsets
            // (2.65 M on a 2 GB corpus) took ~4 % of a resume's engine time.
            size_t i = 0;
            for (size_t o = 0; o < ar_.size(); o = next_word(o)) {
                if (!(ar_[o + kStamp] & kChangedBit)) continue;
                ar_[o + kStamp] &= ~kChangedBit;
                out[i++] = u32(o);
            }
            return out;  // i == out.size(): each flagged word is listed once
        }
        std::sort(out.begin(), out.end());
        for (u32 o : out) ar_[o + kStamp] &= ~kChangedBit;
        return out;
    }

    // The changed pairs' slots in key order, flags cleared; skip_unchanged: without the pairs whose
    // count is back to what the store holds (or that were born and gone since the last take),
    // which a checkpoint does not write, so they are not sorted either.
    std::vector<u32> take_changed_pairs(bool skip_unchanged = false) {
        // Why sort (key, slot) pairs rather than slots by a comparator that looks up their keys:
        // each comparison then reads two adjacent values instead of two random slots; the final
        // checkpoint of enwiki-100M / 32000 sorts 433 K pairs (take_checkpoint_rows 0.11 -> 0.075 s).
        std::vector<std::pair<u64, u32>> keyed;
        keyed.reserve(changed_pairs_.size());
        for (u32 s : changed_pairs_) {
            if (skip_unchanged && slots_[s].count == slots_[s].stored) {
                slots_[s].mark &= u8(~kChanged);
                continue;
            }
            keyed.emplace_back(pair_key(slots_[s].left, slots_[s].right), s);
        }
        std::vector<u32>().swap(changed_pairs_);
        std::sort(keyed.begin(), keyed.end());
        std::vector<u32> out;
        out.reserve(keyed.size());
        for (const auto &k : keyed) {
            out.push_back(k.second);
            slots_[k.second].mark &= u8(~kChanged);
        }
        return out;
    }

    static constexpr u8 kChanged = 1;

    // vocabulary: bytes per id (tb_ok_ = 0 for specials and unused ids), and bytes -> lowest id
    std::vector<std::string> tb_;
    std::vector<u8> tb_ok_;
    std::vector<u32> tlen_;  // tb_[id].size(), for the max_token_length check
    std::unordered_map<std::string, u32> id_of_;
    u32 first_merge_id_;
    i64 next_rank_;
    i64 min_count_;  // words counted fewer times are not loaded
    u64 max_len_;    // the longest token a merge may make, in bytes; 0 = no limit
    bool exhausted_ = false;
    bool finished_ = false;  // finish() was called: no more merging
    i64 bad_word_ = -1;
    bool rewrite_pairs_ = false;  // see build()

    // words: ONE arena of u32, each word a header then its tokens, in store id order; a word is
    // known by its offset (the pair -> words lists and the changed words hold offsets). Header:
    // current length, stamp (the merge that last visited it; kChangedBit: listed in
    // changed_words_), count (64-bit, two halves), store id, capacity (its length when loaded:
    // words only shrink, so the next word starts kHdr + capacity on).
    // Why headers inline, not records in an array beside the tokens: a merge visits its words at
    // random, and a record pointing to the tokens made two dependent cache misses per word (the
    // record, then the tokens); here it is one, and one prefetch covers it (as gigabpe's arena).
    static constexpr u32 kLen = 0, kStamp = 1, kCount = 2, kId = 4, kCap = 5, kHdr = 6;
    static constexpr u32 kChangedBit = 0x80000000u;
    BigArray<u32> ar_;
    size_t n_words_ = 0;
    std::vector<u32> changed_words_;
    u32 stamp_ = 0;

    // pairs, by slot. Why one struct: a pair update reads count, mark and word list together,
    // so keeping them in one place costs one cache miss instead of one per array.
    struct Slot {
        u32 left, right;
        i64 count;   // weighted by word counts; 0 = no word holds the pair
        i64 stored;  // the count the store holds (as of the last take)
        WordLists::List where;  // words holding the pair (a superset, see the notes on top)
        u8 mark;     // kChanged: listed in changed_pairs_
    };
    struct KeyOf {
        const PodVec<Slot> *slots;
        u64 operator()(u32 s) const { return pair_key((*slots)[s].left, (*slots)[s].right); }
    };
    WordLists lists_;
    PairIndex index_;
    PodVec<Slot> slots_;
    std::vector<u32> changed_pairs_;
    PodVec<HeapEntry> heap_;

    StepWork work_;  // the merge being applied: its pair changes (see apply())

    std::atomic<bool> busy_{false};
};

}  // namespace

// The store's native bulk path (store_db.cpp) binds a stream's arrays directly: see store_db.h.
bool checkpoint_rows_view(nb::handle obj, CheckpointRowsView &out) {
    RowStream *s = nullptr;
    if (!nb::try_cast<RowStream *>(obj, s) || s == nullptr || s->pos != 0) return false;
    static_assert(int(CheckpointRowsView::kUpdates) == int(RowStream::kUpdates), "the same kinds");
    out.kind = CheckpointRowsView::Kind(int(s->kind));
    out.n = s->size();
    out.toks = s->toks.data();
    out.a = s->a.data();
    out.b = s->b.data();
    out.c = s->c.data();
    s->pos = s->size();  // written once, as iterating would
    return true;
}

void register_merge_engine(nb::module_ &m) {
    m.def("release_free_memory", &release_free_memory,
          "Give the free memory malloc keeps back to the OS; from the first call on, blocks of 1 MiB "
          "or more are mapped on their own (glibc: malloc_trim, M_MMAP_THRESHOLD; elsewhere nothing).");
    nb::class_<RowStream>(m, "RowStream", "One checkpoint statement's rows, made as they are iterated (once).")
        .def("__len__", &RowStream::size)
        .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
        .def("__next__", &RowStream::next);
    nb::class_<MergeEngine>(m, "MergeEngine",
                            "The incremental BPE merge loop (see bpe_store.training.merge for the contract).")
        .def(nb::init<nb::list, nb::list, u32, u32, i64, i64, u64, nb::bytes>(), nb::arg("rows"),
             nb::arg("token_bytes"), nb::arg("n_specials"), nb::arg("first_merge_id"), nb::arg("next_rank"),
             nb::arg("min_count") = 1, nb::arg("max_token_length") = 0, nb::arg("replay") = nb::bytes("", 0),
             "rows: [(word id, bytes, count, packed tokens or None)]; token_bytes[id]: bytes or None; "
             "rows counted fewer than min_count times are left out; no merge makes a token longer than "
             "max_token_length bytes (0: no limit); replay: merges logged since the words' tokens, "
             "(left, right, token) uint32 triples, applied to the words first.")
        .def(nb::init<nb::bytes, i64, nb::list, u32, u32, i64, i64, u64>(), nb::arg("packed"), nb::arg("first_id"),
             nb::arg("token_bytes"), nb::arg("n_specials"), nb::arg("first_merge_id"), nb::arg("next_rank"),
             nb::arg("min_count") = 1, nb::arg("max_token_length") = 0,
             "The same from packed counts (WordCounter.pack): words still single bytes, ids from first_id.")
        .def(nb::init<const WordRows &, nb::list, u32, u32, i64, i64, u64, nb::bytes>(), nb::arg("rows"),
             nb::arg("token_bytes"), nb::arg("n_specials"), nb::arg("first_merge_id"), nb::arg("next_rank"),
             nb::arg("min_count") = 1, nb::arg("max_token_length") = 0, nb::arg("replay") = nb::bytes("", 0),
             "The same from the store's rows read natively (StoreDb.read_word_rows).")
        .def("step", &MergeEngine::step, nb::arg("max_merges"),
             "Learn up to max_merges merges: [(rank, left, right, token, count)]; fewer only when exhausted.")
        .def("take_checkpoint_rows", &MergeEngine::take_checkpoint_rows,
             "Changes since the last take as executemany rows: (words [(blob, id)], pair deletes "
             "[(l, r)], pair inserts [(l, r, count)], pair updates [(count, l, r)]).")
        .def("forget_stored_pairs", &MergeEngine::forget_stored_pairs_now,
             "The store holds no pair counts of these words: the next checkpoint rewrites them all.")
        .def("top_word_rows", &MergeEngine::top_word_rows, nb::arg("k"),
             "Word rows [(blob, id)] of the words more frequent than the (k+1)-th most frequent (all "
             "when at most k), in id order.")
        .def("top_pair_rows", &MergeEngine::top_pair_rows, nb::arg("k"),
             "Pair rows [(l, r, count)] of the live pairs at least as frequent as the k-th most frequent "
             "(all when at most k), in (l, r) order.")
        .def("compact_lists", &MergeEngine::compact_lists_now,
             "Pack the pair -> words lists (done on its own when the pool is mostly free blocks).")
        .def("finish", &MergeEngine::finish,
             "Merging is over: free the structures only merging needs (step() refuses after).")
        .def("take_changes", &MergeEngine::take_changes,
             "Changes since the last take: ({word index: tokens}, {(left, right): count, 0 if gone}).")
        .def("pair_counts", &MergeEngine::pair_counts, "{(left, right): count} of every live pair.")
        .def("pair_digest", &MergeEngine::pair_digest, "(live pairs, digest 1, digest 2) of the pair counts.")
        .def("word_tokens", &MergeEngine::word_tokens, nb::arg("word"))
        .def("token_bytes", &MergeEngine::token_bytes, nb::arg("id"))
        .def_prop_ro("exhausted", &MergeEngine::exhausted)
        .def_prop_ro("rewrite_pairs", &MergeEngine::rewrite_pairs,
                     "The store's pair counts predate a replay: the next checkpoint replaces them all.")
        .def_prop_ro("next_rank", &MergeEngine::next_rank)
        .def_prop_ro("first_merge_id", &MergeEngine::first_merge_id)
        .def_prop_ro("bad_word", &MergeEngine::bad_word,
                     "Index of the first word whose tokens do not spell its bytes, or -1.")
        .def_prop_ro("num_words", &MergeEngine::num_words)
        .def_prop_ro("pair_slots", &MergeEngine::pair_slots, "Pairs ever seen (live or not): memory use.")
        .def_prop_ro("heap_size", &MergeEngine::heap_size, "Heap entries, stale ones included.")
        .def_prop_ro("index_entries", &MergeEngine::index_entries, "Entries of the pair -> words lists.")
        .def_prop_ro("memory", &MergeEngine::memory, "{part: bytes} of the engine's large arrays.");
}
