// PairTally: the count of every pair of a merge engine's words, in a plain hash table, for the
// engine's pruned pair count (merge_prune.cpp): every pair is counted, only the frequent ones get
// a slot; KeyFilter: which pairs may have one. Part of the merge engine (see merge_engine.h).
#pragma once

#include "merge_arrays.h"

#include <vector>

namespace bpe::merge {

// Open addressing with linear probing over 16-byte cells (key + 1, count), load <= 1/2; a zero
// key is an empty cell, so the table starts as fresh zero pages (BigArray: not resident until
// written). Why not the engine's PairIndex and slots: a slot is 34 bytes and a heap entry 12 more,
// and on SuperBPE's stage 2 three pairs in four are counted once; this is 32 bytes a pair, and
// freed once the frequent pairs are taken out.
class PairTally {
  public:
    struct Cell {
        u64 key1;  // pair_key + 1; 0: empty (no pair key is ~0)
        i64 count;
    };

    PairTally() { grow(size_t(1) << 20); }

    void add(u64 key, i64 c) {
        if ((size_ + 1) * 2 > cap_) grow(cap_ * 2);
        Cell &cell = cells_[find(key + 1)];
        if (cell.key1 == 0) {
            cell.key1 = key + 1;
            ++size_;
        }
        cell.count += c;
    }

    // f(key, count) for every pair counted, in table order.
    template <class F>
    void each(F &&f) const {
        for (size_t i = 0; i < cap_; ++i)
            if (cells_[i].key1 != 0) f(cells_[i].key1 - 1, cells_[i].count);
    }

    size_t size() const { return size_; }

    // Once counting is over: the count of every pair counted at least `floor` times becomes
    // slot_of(key) + kSlotMark, so that looking the pair up gives its slot (slot()).
    static constexpr i64 kSlotMark = i64(1) << 62;
    template <class SlotOf>
    void mark_slots(i64 floor, SlotOf &&slot_of) {
        for (size_t i = 0; i < cap_; ++i)
            if (cells_[i].key1 != 0 && cells_[i].count >= floor)
                cells_[i].count = kSlotMark + i64(slot_of(cells_[i].key1 - 1, cells_[i].count));
    }
    // The slot mark_slots gave the pair, or kNone (a pair pruned or not counted). Why here and
    // not the pair index: one cache miss (the cell holds key and slot) where the index took two
    // (its cell, then the slot's key), and those were 77 % of building stage 2's engine at 1 GB.
    u32 slot(u64 key) const {
        const Cell &c = cells_[find(key + 1)];
        return c.key1 != 0 && c.count >= kSlotMark ? u32(c.count - kSlotMark) : kNone;
    }

  private:
    size_t find(u64 key1) const {
        u64 h = key1 * 0x9E3779B97F4A7C15ull;
        size_t i = size_t(h ^ (h >> 29)) & (cap_ - 1);
        while (cells_[i].key1 != 0 && cells_[i].key1 != key1) i = (i + 1) & (cap_ - 1);
        return i;
    }

    void grow(size_t cap) {
        BigArray<Cell> old;
        old.swap(cells_);
        const size_t old_cap = cap_;
        cells_.assign_zero(cap);
        cap_ = cap;
        size_ = 0;
        for (size_t i = 0; i < old_cap; ++i) {
            if (old[i].key1 == 0) continue;
            cells_[find(old[i].key1)] = old[i];
            ++size_;
        }
    }

    BigArray<Cell> cells_;
    size_t cap_ = 0, size_ = 0;
};

// A one-hash bit filter over pair keys, 16 bits a key (a false "may" for ~1 key in 16 absent):
// whether a pair may have a slot in a pruned count. Why: nine pairs in ten looked up then have
// none, and the pair index of a 1 GB stage 2 (tens of MB) answered each with a cache miss; this
// is 2 bytes a kept pair and stays in cache far better.
class KeyFilter {
  public:
    void reset(size_t keys) {
        size_t bits = 64;
        while (bits < 16 * keys) bits *= 2;
        words_.assign(keys == 0 ? 0 : bits / 64, 0);
        mask_ = keys == 0 ? 0 : bits - 1;
    }
    void add(u64 key) {
        const u64 b = bit(key);
        words_[b >> 6] |= u64(1) << (b & 63);
    }
    bool may_hold(u64 key) const {
        const u64 b = bit(key);
        return words_.empty() || (words_[b >> 6] >> (b & 63) & 1);
    }

  private:
    u64 bit(u64 key) const {
        const u64 h = key * 0xD6E8FEB86659FD93ull;
        return (h ^ (h >> 32)) & mask_;
    }
    std::vector<u64> words_;
    u64 mask_ = 0;
};

}  // namespace bpe::merge
