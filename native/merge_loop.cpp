// The merge engine, merging: step() pops the best pair off the lazily invalidated heap and
// apply() rewrites every word holding it, adding the step's pair changes into the pair table
// once per pair. See merge_engine.h for the whole (and its performance notes).
#include "merge_engine.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_set>

namespace bpe::merge {

namespace {

// A pair (x, y) of word w, weighted c, that a merge removed (c < 0) or made (c > 0). The
// merged pair itself is left out: apply() zeroes it.
void change_pair(StepWork &work, u32 x, u32 y, i64 c, u32 w, u64 merged) {
    const u64 key = pair_key(x, y);
    if (key != merged) work.change(key, c, w);
}

}  // namespace

nb::list MergeEngine::step(i64 max_merges) {
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
            const bool found = pop_best(slot, count);
            if (prune_below_ > 1 && (!found || count < prune_below_)) {
                rebuild_pairs(1);  // a pruned pair may be the best now: count them all (merge_prune.cpp)
                continue;
            }
            if (!found) {
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
                tmeta_.resize(size_t(token) + 1, 0);
            }
            if (!tb_ok_[token]) {
                tb_[token] = std::move(bytes);
                tb_ok_[token] = 1;
                tlen_[token] = u32(tb_[token].size());
                tmeta_[token] = token_meta(tb_[token]);
            }
            apply(slot, a, b, token);
            if (need_rebuild_) rebuild_pairs(prune_below_);  // see slot_gained
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

void MergeEngine::forget_stored_pairs_now() {
    Busy busy(this);
    forget_stored_pairs();
}

void MergeEngine::compact_lists_now() {
    Busy busy(this);
    compact_lists();
}

// Merging is over: frees what only merging needs (the pair -> words lists, the heap, the pair
// index, ~55 MB for enwiki-100M -> 32K) before the final checkpoint is written, which is
// then the peak of a run. Checkpoint rows, digests and inspection still work; step() refuses.
void MergeEngine::finish() {
    Busy busy(this);
    finished_ = true;
    for (Slot &s : slots_) s.where = WordLists::List{};
    lists_.clear();
    heap_.release();
    index_.clear();
    work_.release();
    release_free_memory();
}

// Only between merges: apply() holds a list outside its slot while it runs.
// Why counted first: the ids are reserved at their exact number (a vector doubling as it grows
// held up to 4 times their bytes at once, at the moment of the pool's largest).
void MergeEngine::compact_lists() {
    size_t n = 0;
    for (const Slot &s : slots_) n += s.where.has_block();
    std::vector<u32> ids;
    ids.reserve(n);
    for (u32 s = 0; s < slots_.size(); ++s)
        if (slots_[s].where.has_block()) ids.push_back(s);
    lists_.compact(ids, [this](u32 s) -> WordLists::List & { return slots_[s].where; });
}

void MergeEngine::heap_push(i64 count, u32 slot) {
    heap_.push_back({count, slot});
    std::push_heap(heap_.begin(), heap_.end(), HeapLess{this});
}

bool MergeEngine::pop_best(u32 &slot, i64 &count) {
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

// The k best live pairs, as step() would take them if each merge changed nothing else:
// [(left, right, count)], best first. SuperBPE's stage 2 writes them at its checkpoints, which
// log merges only (merge_step.py), so that status and SQL show the next superword pairs.
// Why from the heap, not every slot: the heap's top holds them, and taking k entries off it and
// putting them back costs O(k log n) (a scan of a 1 GB stage 2's slots is millions of reads).
// Stale entries met on the way are requeued with their true count, as pop_best does; a slot
// met twice with its true count (two entries of the same count) keeps one: merges are unchanged,
// since equal entries of one slot are interchangeable. When pairs are pruned, the list stops
// below the floor: a pair without a slot may stand there (merge_prune.cpp).
nb::list MergeEngine::next_pairs(size_t k) {
    Busy busy(this);
    std::vector<HeapEntry> taken;
    if (!finished_) {
        nb::gil_scoped_release unlocked;
        HeapLess less{this};
        std::unordered_set<u32> seen;
        while (taken.size() < k && !heap_.empty()) {
            std::pop_heap(heap_.begin(), heap_.end(), less);
            const HeapEntry e = heap_.back();
            heap_.pop_back();
            const i64 cur = slots_[e.slot].count;
            if (cur != e.count || cur <= 0) {
                if (cur > 0) heap_push(cur, e.slot);  // stale: requeue with the true count
                continue;
            }
            if (cur < prune_below_) {  // below the floor of a pruned count: not exact from here
                heap_push(cur, e.slot);
                break;
            }
            if (seen.insert(e.slot).second) taken.push_back(e);
        }
        for (const HeapEntry &e : taken) heap_push(e.count, e.slot);
    }
    nb::list out;
    for (const HeapEntry &e : taken) {
        const u32 left = slots_[e.slot].left, right = slots_[e.slot].right;
        const i64 count = e.count;
        out.append(nb::make_tuple(left, right, count));
    }
    return out;
}

// Merges (a, b) -> t in every word holding it, updating pair counts, the index and the heap.
void MergeEngine::apply(u32 slot, u32 a, u32 b, u32 t) {
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
void MergeEngine::rewrite(StepWork &work, const u32 *ws, size_t n, u32 a, u32 b, u32 t) {
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
void MergeEngine::add_changes(StepWork &work) {
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
        d.slot = d.head != kNone ? slot_gained(x, y, d.key) : index_.find(d.key, KeyOf{&slots_});
        if (d.slot == kNone) continue;  // a pruned pair (merge_prune.cpp); else a pair a word lost was counted
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

// Rewrites word w in place, merging (a, b) -> t left to right without overlap, and records
// the pairs that changed. Per match at old position i, written at new position m: the old
// pair on its left (old[i-1], a) is gone unless the previous match consumed old[i-1] (it is
// then that match's right pair), and the new (new[m-1], t) appears; on its right, (b,
// old[i+2]) is gone and (t, old[i+2]) appears unless old[i+2] starts the next match (its
// left pair (t, t) is then counted by that match). Every other pair maps one to one between
// the old and new word and keeps its count. One pass, no copy of the word: the tokens between
// matches move down (memmove), and writes never overtake reads.
void MergeEngine::merge_word(StepWork &work, u32 w, u32 a, u32 b, u32 t) {
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
    shorten(w, m);
    if (!(ar_[w + kStamp] & kChangedBit)) {
        ar_[w + kStamp] |= kChangedBit;
        work.changed.push_back(w);
    }
}

}  // namespace bpe::merge
