// The merge engine after a replay (merge_replay.cpp's build): SuperBPE's stage 2 (docs/superword.md),
// whose words are phrases (the text between digit groups and punctuation runs), nearly one word
// per occurrence, with the stage-1 merges replayed on them; a run extending a base, whose words
// get the base's merges; a store continued past its end or resumed with merges logged since its
// words' tokens. Two things are done differently there, both exact:
//
// * The arena is packed after the replay (compact_arena): it was sized for the words as bytes,
//   4 bytes a byte, and the replay leaves about three quarters of it as padding (1 GB of
//   OWT-like text: 3.9 GB of arena for ~1 GB of tokens).
// * Rare pairs get no slot (pruned counts): every pair is counted first, by sorting their
//   occurrences (merge_sorted_pairs.cpp), and only those counted at least kSuperwordPruneBelow
//   times get a slot, a word list and a heap entry. On 200 MB of OWT-like text 75 % of stage 2's 11.9 M pairs are counted
//   once and 90 % fewer than 4 times; a slot, its index cell, heap entry and list cost ~60 bytes.
//
// Why pruning keeps the merges exact: a pair of two tokens that existed when the pairs were
// counted can only lose occurrences (a merge consumes tokens and makes its own new one), so a
// pruned pair stays below the floor, and while the best pair with a slot is at or above the
// floor it is the best of all pairs (a tie is impossible: the pruned ones are strictly below).
// Pairs of a token made since then were counted whole by the merge that made the token. Two
// cases remain, and each triggers an exact recount from the words (rebuild_pairs):
//   - the best pair with a slot falls below the floor (or none is left): every pair is counted
//     again, none pruned (step());
//   - a merge reuses the id of a token older than the count (its bytes were already a token,
//     docs/design.md) and so adds occurrences to pairs that may have been pruned with a count
//     the table does not hold (slot_gained): the pairs are counted again after that merge.
// Whatever reads pair counts (pair_counts, pair_digest, top_pair_rows, checkpoint rows) reads
// them exactly: from a fresh tally, or after a recount with none pruned.
#include "merge_engine.h"
#include "pair_tally.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <unordered_map>

namespace bpe::merge {

// Moves every word down over the padding before it and gives the arena's tail back; the changed
// words (a replay marks them all) are listed again at their new offsets.
void MergeEngine::compact_arena() {
    std::unordered_map<u32, i64> big;
    changed_words_.release();
    size_t to = 0;
    for (size_t o = 0; o < ar_.size();) {
        const size_t next = next_word(o);  // read before the move overwrites anything
        const u32 len = ar_[o + kLen];
        if (ar_[o + kCount] == kNone) big.emplace(u32(to), big_counts_.at(u32(o)));
        if (to != o) std::memmove(&ar_[to], &ar_[o], (size_t(kHdr) + len) * sizeof(u32));
        if (ar_[to + kStamp] & kChangedBit) changed_words_.push_back(u32(to));
        to += kHdr + len;
        o = next;
    }
    big_counts_.swap(big);
    ar_.shrink(to);
}

// Every pair of every word, weighted by the word's count (pairs too long left out).
void MergeEngine::tally_pairs(PairTally &tally) const {
    for (size_t o = 0; o < ar_.size(); o = next_word(o)) {
        const u32 *p = &ar_[o + kHdr];
        const u32 n = ar_[o + kLen];
        const i64 c = count_at(o);
        for (u32 i = 0; i + 1 < n; ++i)
            if (!too_long(p[i], p[i + 1])) tally.add(pair_key(p[i], p[i + 1]), c);
    }
}

// Counts every pair again from the words as they are, pruning below `floor` (1: none), as a
// fresh engine does; the store's pair counts are forgotten (rewrite_pairs_: the next checkpoint
// writes them all).
void MergeEngine::rebuild_pairs(i64 floor) {
    changed_pairs_.release();
    slots_.release();
    index_ = PairIndex();
    lists_.clear();
    heap_.release();
    prune_below_ = floor;
    need_rebuild_ = false;
    build_pairs(n_specials_);
    forget_stored_pairs();
}

// Every pair gets a slot again (before anything that reads or writes them all).
void MergeEngine::unprune() {
    if (prune_below_ <= 1) return;
    if (finished_) throw std::runtime_error("MergeEngine: pruned pair counts after finish()");
    rebuild_pairs(1);
}

// The slot of pair (x, y), which a merge just made in some word: made if new. A pair of two
// tokens older than the last count may have been pruned: its count is then not what the table
// will say, and the pairs are counted again once the merge is over (need_rebuild_).
u32 MergeEngine::slot_gained(u32 x, u32 y, u64 key) {
    if (x < pruned_upto_ && y < pruned_upto_) {
        const u32 s = index_.find(key, KeyOf{&slots_});
        if (s != kNone) return s;
        need_rebuild_ = true;
    }
    return slot_of(x, y);
}

// (pair key, count) of every live pair, exact: from the slots, or a fresh tally when pruned;
// top != 0: at least the `top` most frequent, with every pair as frequent as the top-th (from the
// slots when that count is at or above the floor: the pairs without a slot are all below it).
std::vector<std::pair<u64, i64>> MergeEngine::live_pairs(size_t top) const {
    std::vector<std::pair<u64, i64>> out;
    if (prune_below_ > 1 && top != 0) {
        std::vector<i64> counts;
        for (const Slot &s : slots_)
            if (s.count > 0) counts.push_back(s.count);
        if (counts.size() >= top) {
            std::nth_element(counts.begin(), counts.begin() + (top - 1), counts.end(), std::greater<i64>());
            if (counts[top - 1] >= prune_below_) {
                for (const Slot &s : slots_)
                    if (s.count > 0) out.emplace_back(pair_key(s.left, s.right), s.count);
                return out;
            }
        }
    }
    if (prune_below_ > 1) {
        PairTally tally;
        tally_pairs(tally);
        out.reserve(tally.size());
        tally.each([&out](u64 key, i64 c) { out.emplace_back(key, c); });
        return out;
    }
    for (const Slot &s : slots_)
        if (s.count > 0) out.emplace_back(pair_key(s.left, s.right), s.count);
    return out;
}

}  // namespace bpe::merge
