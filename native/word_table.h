// The word table of counting: a fast hash of short byte strings, the word -> count table
// (WordTable, laid out like CPython's compact dict), the arena its owned words live in, and the
// prefetching sink that feeds it from a scanner. Free of Python, header-only so that `add`
// inlines into the scanners' loops (scanner_impl.h's performance notes).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace bpe::detail {

// A fast 64-bit hash for short byte strings (most words are under 8 bytes): word-sized loads and
// a 64x64->128 multiply fold per 8 bytes. Not cryptographic; collisions only cost a compare.
inline uint64_t fold(uint64_t a, uint64_t b) {
#ifdef __SIZEOF_INT128__
    const unsigned __int128 r = (unsigned __int128)a * b;
    return uint64_t(r) ^ uint64_t(r >> 64);
#else
    const uint64_t r = a * b;
    return r ^ (r >> 29) ^ (a >> 32) * b;
#endif
}

// A word's hash and its first bytes, computed together once per pre-token: `head` is the first
// 8 bytes of a word of 8 or more, and for a shorter word its bytes as a little-endian number
// (zero above them), so that most words (English averages ~5 bytes a pre-token) compare equal
// by `len` and `head` alone, read from the table's entry, without touching the bytes of the
// word's first occurrence: that third dependent cache miss per lookup was ~17 % of counting.
struct Key {
    uint64_t hash;
    uint64_t head;
};

constexpr uint64_t kSeed = 0x9E3779B97F4A7C15ull, kLenMul = 0xA0761D6478BD642Full;
constexpr uint64_t kWordMul = 0xE7037ED1A0B428DBull, kLastMul = 0x8EBC6AF09C88C6E3ull;

// The key of a word of more than 8 bytes: 8-byte words folded in, then the rest.
inline Key key_of_long(const uint8_t *p, size_t n) {
    uint64_t h = kSeed ^ (uint64_t(n) * kLenMul), head, w;
    std::memcpy(&head, p, 8);
    while (n >= 8) {
        std::memcpy(&w, p, 8);
        h = fold(h ^ w, kWordMul);
        p += 8;
        n -= 8;
    }
    w = 0;
    if (n >= 4) {  // two overlapping 4-byte loads cover 4..7 bytes without a byte loop
        uint32_t a, b;
        std::memcpy(&a, p, 4);
        std::memcpy(&b, p + n - 4, 4);
        w = (uint64_t(a) << 32) | b;
    } else if (n > 0) {
        w = (uint64_t(p[0]) << 16) | (uint64_t(p[n >> 1]) << 8) | p[n - 1];
    }
    return {fold(h ^ w, kLastMul), head};
}

inline Key key_of(const uint8_t *p, size_t n) {
    if (n > 8) return key_of_long(p, n);
    uint64_t head;
    if (n == 8) {
        std::memcpy(&head, p, 8);
    } else if (n >= 4) {  // two overlapping 4-byte loads cover 4..7 bytes without a byte loop
        uint32_t a, b;
        std::memcpy(&a, p, 4);
        std::memcpy(&b, p + n - 4, 4);
        head = uint64_t(a) | (uint64_t(b) << (8 * (n - 4)));  // the overlap ORs equal bytes
    } else {
        head = n == 0 ? 0 : uint64_t(p[0]) | (uint64_t(p[n >> 1]) << (8 * (n >> 1))) | (uint64_t(p[n - 1]) << (8 * (n - 1)));
    }
    return {fold(kSeed ^ (uint64_t(n) * kLenMul) ^ head, kLastMul), head};
}

// key_of(p, n) for a word with at least 8 readable bytes at p (the scanner's input, away from
// its end). Why: the word's length is a different branch from one pre-token to the next; here a
// word of up to 8 bytes is one load and a mask, no branch on its length.
inline Key key_of_padded(const uint8_t *p, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (n <= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        const uint64_t head = n == 0 ? 0 : w & (~uint64_t(0) >> (64 - 8 * n));  // the bytes past n off
        return {fold(kSeed ^ (uint64_t(n) * kLenMul) ^ head, kLastMul), head};
    }
    return key_of_long(p, n);
#else
    return key_of(p, n);
#endif
}

inline uint64_t hash_bytes(const uint8_t *p, size_t n) { return key_of(p, n).hash; }

// Hints the CPU to start loading `p`'s cache line; a no-op where the compiler has no builtin.
inline void prefetch(const void *p) {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(p);
#else
    (void)p;
#endif
}

// a[0, n) == b[0, n) for the short keys of the word table. Why not memcmp: a libc call per
// probe hit costs more than the whole comparison for words of a few bytes (it showed up as ~19%
// of the counting profile); word-sized loads, overlapping at the tail, need no byte loop.
inline bool equal_bytes(const uint8_t *a, const uint8_t *b, size_t n) {
    uint64_t x, y;
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8) {
            std::memcpy(&x, a + i, 8);
            std::memcpy(&y, b + i, 8);
            if (x != y) return false;
        }
        std::memcpy(&x, a + n - 8, 8);
        std::memcpy(&y, b + n - 8, 8);
        return x == y;
    }
    if (n >= 4) {
        uint32_t p, q, r, t;
        std::memcpy(&p, a, 4);
        std::memcpy(&q, b, 4);
        std::memcpy(&r, a + n - 4, 4);
        std::memcpy(&t, b + n - 4, 4);
        return p == q && r == t;
    }
    for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i]) return false;
    return true;
}

class ByteArena;

// Word -> count map for one chunk, laid out like CPython's compact dict: a sparse index of
// 8-byte slots (32-bit hash tag, 32-bit entry number; linear probing) over a dense array of
// entries in first-seen order. Why: a lookup's cache misses were the largest single cost of
// counting. The index for a typical 8 MB chunk is 2 MB (L2-sized), and the entries of frequent
// words, seen first, sit together at the front of the dense array. Why not std::unordered_map:
// one allocation per node and a pointer chase per lookup.
class WordTable {
  public:
    struct Entry {
        const uint8_t *ptr;  // a view into the caller's input, which outlives the table
        uint64_t len;        // 64-bit: a chunk (so one whitespace run) may exceed 4 GiB
        uint64_t count;
        uint64_t head;       // Key::head: equal words compare equal here without reading `ptr`
    };

    // `expected_words`: a guess of the distinct words to come, so that a typical chunk never
    // rehashes (each doubling re-inserts everything and faults in fresh pages).
    explicit WordTable(size_t expected_words) : WordTable(expected_words, Storage{}) {}

    // The memory of a table: what `release` gives back and a new table may start from.
    struct Storage {
        std::vector<uint64_t> index;
        std::vector<Entry> entries;
    };

    // The same, built in `storage`'s vectors (their contents are dropped, their capacity kept).
    // Why: a chunk's table is ~2 MB of index and ~3 MB of entries; fresh memory for every chunk
    // was ~1300 page faults and as many zeroed pages (scanner.cpp: ChunkMemory).
    WordTable(size_t expected_words, Storage storage)
        : index_(std::move(storage.index)), entries_(std::move(storage.entries)) {
        size_t cap = size_t(1) << 12;
        while (cap < 2 * expected_words && cap < (size_t(1) << 20)) cap <<= 1;  // index <= 8 MB up front
        index_.assign(cap, 0);
        mask_ = cap - 1;
        entries_.clear();
        entries_.reserve(cap / 2);
    }

    // This table's vectors, for another table to reuse; leaves this one empty and unusable.
    Storage release() { return Storage{std::move(index_), std::move(entries_)}; }

    // Adds `k` occurrences of the word p[0, n) and returns its entry number (0-based, in
    // first-seen order). A new word's entry keeps the view `p` unless `arena` is given, which
    // then receives a copy (for tables that outlive their input).
    size_t add(const uint8_t *p, size_t n, uint64_t k = 1, ByteArena *arena = nullptr) {
        return add(p, n, key_of(p, n), k, arena);
    }
    // The same with the word's key already computed (key_of(p, n)).
    size_t add(const uint8_t *p, size_t n, const Key &key, uint64_t k = 1, ByteArena *arena = nullptr);

    // Start loading the index slot where `key`'s probe begins (see CountSink).
    void prefetch_slot(const Key &key) const { prefetch(&index_[size_t(key.hash) & mask_]); }
    // Start loading the entry the slot of `key` points to, if its tag matches: the slot has
    // usually arrived since prefetch_slot. A guess only: add() probes again.
    void prefetch_entry(const Key &key) const {
        const uint64_t slot = index_[size_t(key.hash) & mask_];
        if (slot != 0 && (slot >> 32) == (key.hash >> 32)) prefetch(&entries_[uint32_t(slot) - 1]);
    }

    // Distinct words with their counts, in first-seen order.
    const std::vector<Entry> &entries() const { return entries_; }

  private:
    static constexpr size_t kMaxEntries = 0xFFFFFFFEu;

    void grow() {
        index_.assign(index_.size() * 2, 0);
        mask_ = index_.size() - 1;
        for (size_t k = 0; k < entries_.size(); ++k) {
            const uint64_t h = hash_bytes(entries_[k].ptr, entries_[k].len);
            size_t i = size_t(h) & mask_;
            while (index_[i] != 0) i = (i + 1) & mask_;
            index_[i] = ((h >> 32) << 32) | uint64_t(k + 1);
        }
    }

    std::vector<uint64_t> index_;
    std::vector<Entry> entries_;
    size_t mask_ = 0;
};

// Stable storage for the bytes of words that must outlive the chunk they came from: 1 MiB
// blocks, never moved, so views into them stay valid; long words get a block of their own.
class ByteArena {
  public:
    ByteArena() = default;
    ByteArena(const ByteArena &) = delete;  // explicit: vector<unique_ptr> claims to be copyable
    ByteArena &operator=(const ByteArena &) = delete;
    ByteArena(ByteArena &&) = default;
    ByteArena &operator=(ByteArena &&) = default;

    const uint8_t *copy(const uint8_t *p, size_t n) {
        if (n > kBlock / 8) {  // rare (long whitespace runs): do not waste the current block
            blocks_.emplace_back(new uint8_t[n ? n : 1]);
            std::memcpy(blocks_.back().get(), p, n);
            return blocks_.back().get();
        }
        if (used_ + n > kBlock) {
            blocks_.emplace_back(new uint8_t[kBlock]);
            current_ = blocks_.back().get();
            used_ = 0;
        }
        uint8_t *out = current_ + used_;
        std::memcpy(out, p, n);
        used_ += n;
        return out;
    }

  private:
    static constexpr size_t kBlock = size_t(1) << 20;
    std::vector<std::unique_ptr<uint8_t[]>> blocks_;
    uint8_t *current_ = nullptr;
    size_t used_ = kBlock;
};

inline size_t WordTable::add(const uint8_t *p, size_t n, const Key &key, uint64_t k, ByteArena *arena) {
    const uint64_t h = key.hash;
    const uint64_t tag = h >> 32;
    size_t i = size_t(h) & mask_;
    for (;;) {
        const uint64_t slot = index_[i];
        if (slot == 0) {  // new word
            if (entries_.size() >= kMaxEntries) throw std::length_error("more than 2^32-2 distinct words");
            entries_.push_back({arena != nullptr ? arena->copy(p, n) : p, n, k, key.head});
            index_[i] = (tag << 32) | uint64_t(entries_.size());  // entry number + 1: 0 means empty
            if (entries_.size() * 2 > index_.size()) grow();      // load <= 1/2 keeps probes short
            return entries_.size() - 1;
        }
        if ((slot >> 32) == tag) {  // most other words fail here, without touching their bytes
            Entry &e = entries_[uint32_t(slot) - 1];
            if (e.len == n && e.head == key.head && (n <= 8 || equal_bytes(e.ptr + 8, p + 8, n - 8))) {
                e.count += k;
                return uint32_t(slot) - 1;
            }
        }
        i = (i + 1) & mask_;
    }
}

// Counts pre-tokens into a WordTable kDepth tokens behind the scanner. Why: a lookup is a chain
// of dependent cache misses (the index slot, then the entry), which stalled the scanner for most
// of the table's time; here each token's slot is prefetched when it is scanned, its entry
// kEntryAt tokens later, and it is added kDepth tokens later, when both have arrived. Tokens
// are still added in their order, so the table is exactly what adding them one by one makes.
// Call finish() after the last token.
class CountSink {
  public:
    // `arena`: as for WordTable::add (copies of new words, for a table that outlives its input).
    // `readable_end`: the end of the input the words lie in, if they all do (then a word with 8
    // bytes before it is keyed with key_of_padded).
    explicit CountSink(WordTable &table, ByteArena *arena = nullptr, const uint8_t *readable_end = nullptr)
        : table_(table), arena_(arena), end_(readable_end) {}

    // Adds `k` occurrences of the word p[0, n), which must stay readable until finish().
    void add(const uint8_t *p, size_t n, uint64_t k = 1) {
        const Key key = end_ != nullptr && end_ - p >= 8 ? key_of_padded(p, n) : key_of(p, n);
        table_.prefetch_slot(key);
        if (filled_ >= kEntryAt) table_.prefetch_entry(ring_[(pos_ - kEntryAt) & kMask].key);
        Pending &slot = ring_[pos_];  // the oldest token once the ring is full
        if (filled_ == kDepth)
            table_.add(slot.p, slot.n, slot.key, slot.k, arena_);
        else
            ++filled_;
        slot = {p, n, k, key};
        pos_ = (pos_ + 1) & kMask;
    }

    // Adds the tokens still waiting, oldest first.
    void finish() {
        const size_t start = (pos_ - filled_) & kMask;
        for (size_t i = 0; i < filled_; ++i) {
            const Pending &t = ring_[(start + i) & kMask];
            table_.add(t.p, t.n, t.key, t.k, arena_);
        }
        filled_ = 0;
    }

  private:
    // Distances in tokens, measured on enwiki (8 and 32 did no better): far enough for a slot
    // to arrive from L3 before its entry is looked up, near enough to stay in L1.
    static constexpr size_t kDepth = 16, kMask = kDepth - 1;  // a power of two
    static constexpr size_t kEntryAt = 6;
    struct Pending {
        const uint8_t *p;
        size_t n;
        uint64_t k;
        Key key;
    };
    WordTable &table_;
    ByteArena *arena_;
    const uint8_t *end_;
    Pending ring_[kDepth];
    size_t pos_ = 0, filled_ = 0;
};

// Adds every entry of `from` into `to` (copying new words into `arena`), prefetched as CountSink
// does: the reduce of counting, ~1 M lookups per 100 MB of English into a table of ~0.5 M words.
inline void add_table(WordTable &to, const WordTable &from, ByteArena *arena) {
    CountSink sink(to, arena);
    for (const auto &e : from.entries()) sink.add(e.ptr, e.len, e.count);
    sink.finish();
}

}  // namespace bpe::detail
