// PairTally: the count of every pair of a merge engine's words, in a plain hash table: what a
// pruned engine reads when asked for every pair's count (merge_prune.cpp: live_pairs). Part of the
// merge engine (see merge_engine.h).
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

}  // namespace bpe::merge
