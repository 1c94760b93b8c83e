// The merge engine, reporting: what changed since the last take, as the rows a checkpoint writes
// (RowStreams, or flat arrays for the store's native path: checkpoint_rows_view) or as Python
// dicts (take_changes). See merge_engine.h for the whole.
#include "merge_engine.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <utility>

namespace bpe::merge {

namespace {

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

}  // namespace

nb::object RowStream::next() {
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

// (word rows [(token blob, word id)], pair deletes [(left, right)],
// pair inserts [(left, right, count)], pair updates [(count, left, right)]):
// exactly the parameters of the four executemany statements of a checkpoint, as RowStreams
// (iterables with a length) that make each tuple only when executemany asks for it.
// Why streams: the final checkpoint of enwiki-100M / 32000 holds 442 K words and 433 K pairs;
// as lists of tuples they were ~120 MB alive at once, the process's peak (402 MB).
nb::tuple MergeEngine::take_checkpoint_rows() {
    Busy busy(this);
    unprune();  // every live pair is written: each needs its slot
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
RowStream MergeEngine::word_rows_of(const std::vector<u32> &words) const {
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
RowStream MergeEngine::top_word_rows(size_t k) {
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

// ({word index: [token ids]}, {(left, right): count, 0 when gone}), as the Python engine gives.
nb::tuple MergeEngine::take_changes() {
    Busy busy(this);
    unprune();
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
        pairs[nb::make_tuple(u32(slots_[s].left), u32(slots_[s].right))] = nb::int_(i64(slots_[s].count));
        slots_[s].stored = slots_[s].count;
    }
    return nb::make_tuple(words, pairs);
}

// The changed words' offsets in arena order (= store id order: B-tree friendly), flags cleared.
std::vector<u32> MergeEngine::take_changed_words() {
    std::vector<u32> out(changed_words_.begin(), changed_words_.end());
    changed_words_.release();
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
std::vector<u32> MergeEngine::take_changed_pairs(bool skip_unchanged) {
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
    changed_pairs_.release();
    std::sort(keyed.begin(), keyed.end());
    std::vector<u32> out;
    out.reserve(keyed.size());
    for (const auto &k : keyed) {
        out.push_back(k.second);
        slots_[k.second].mark &= u8(~kChanged);
    }
    return out;
}

// The pair rows [(left, right, count)] of the live pairs at least as frequent as the k-th most
// frequent one (all of them when there are at most k), sorted by (left, right): what a finished
// run keeps of its pair counts, to say which merges would come next. Why no tie-break: as for
// top_word_rows, the counts alone decide. Works after finish(), which keeps the slots.
RowStream MergeEngine::top_pair_rows(size_t k) {
    Busy busy(this);
    std::vector<std::pair<u64, i64>> live = live_pairs(k);  // exact when pruned too
    std::vector<i64> counts;
    counts.reserve(live.size());
    for (const auto &e : live) counts.push_back(e.second);
    i64 floor = 1;  // keep counts at or above it
    if (k == 0) floor = std::numeric_limits<i64>::max();
    else if (counts.size() > k) {
        std::nth_element(counts.begin(), counts.begin() + (k - 1), counts.end(), std::greater<i64>());
        floor = counts[k - 1];
    }
    std::vector<std::pair<u64, i64>> keyed;
    for (const auto &e : live)
        if (e.second >= floor) keyed.push_back(e);
    std::sort(keyed.begin(), keyed.end());
    RowStream rows(RowStream::kInserts);
    for (const auto &e : keyed) {
        rows.a.push_back(u32(e.first >> 32));
        rows.b.push_back(u32(e.first));
        rows.c.push_back(e.second);
    }
    return rows;
}

}  // namespace bpe::merge

namespace nb = nanobind;

// The store's native bulk path (store_db.cpp) binds a stream's arrays directly: see store_db.h.
bool checkpoint_rows_view(nb::handle obj, CheckpointRowsView &out) {
    using bpe::merge::RowStream;
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

