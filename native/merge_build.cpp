// The merge engine, building: a MergeEngine's three constructors load the vocabulary and the words
// (Python rows, packed counts, or the store's rows read natively) into the arena, and
// build_pairs counts every pair of every word. See merge_engine.h for the whole.
#include "merge_engine.h"
#include "scanner.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

namespace bpe::merge {

namespace {

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

// A word's store id, kept in 32 bits (in its header in the arena).
u32 store_id(i64 id, size_t row) {
    if (id < 0 || id > i64(kNone)) bad_row(row, "word ids must be 0 to 2^32 - 1");
    return u32(id);
}

}  // namespace

MergeEngine::MergeEngine(nb::list rows, nb::list token_bytes, u32 n_specials, u32 first_merge_id, i64 next_rank,
            i64 min_count, u64 max_token_length, nb::bytes replay, u32 max_words)
    : first_merge_id_(first_merge_id), next_rank_(next_rank), min_count_(min_count),
      max_len_(max_token_length), max_words_(max_words) {
    check_limits(next_rank, min_count);
    load_vocab(token_bytes);
    load_words(rows, n_specials);
    build(n_specials, replay);
}

// The same from packed counts (``WordCounter.pack``: a first counting flush's words, every
// one still single bytes, ids first_id, first_id + 1, ... in their order). Why: as Python
// rows, enwiki-100M's 445 K words cost ~90 MB, which the process kept after freeing them.
// replay: a run extending a base replays the base's merges on them (see build).
MergeEngine::MergeEngine(nb::bytes packed, i64 first_id, nb::list token_bytes, u32 n_specials, u32 first_merge_id,
            i64 next_rank, i64 min_count, u64 max_token_length, u32 max_words, nb::bytes replay)
    : first_merge_id_(first_merge_id), next_rank_(next_rank), min_count_(min_count),
      max_len_(max_token_length), max_words_(max_words) {
    check_limits(next_rank, min_count);
    load_vocab(token_bytes);
    const u8 *data = static_cast<const u8 *>(packed.data());
    const size_t size = packed.size();
    // pure C++ from here (errors are C++ exceptions, raised once the GIL is back). Why:
    // train._pairs builds the engine while the last counting flush, which needs the GIL for
    // its rows, is written on another thread
    {
        nb::gil_scoped_release unlocked;
        load_packed(data, size, first_id, n_specials);
        if (replay.size() == 0) {
            build_pairs(n_specials);
            return;
        }
    }
    build(n_specials, replay);  // checks the log with the GIL, then releases it to replay and count
}

// The same from the store's rows read by the native connection (StoreDb.read_word_rows): a
// resume builds the engine without a Python tuple per word (see store_db.h's WordRows). The
// rows are emptied once loaded. Why: the words are then in the arena, and the buffer (34 bytes
// a word at 50 M words, 1.7 GB) would otherwise stay alive through the pair count until the
// caller dropped it, on top of the lists that count makes.
MergeEngine::MergeEngine(WordRows &rows, nb::list token_bytes, u32 n_specials, u32 first_merge_id, i64 next_rank,
            i64 min_count, u64 max_token_length, nb::bytes replay, u32 max_words)
    : first_merge_id_(first_merge_id), next_rank_(next_rank), min_count_(min_count),
      max_len_(max_token_length), max_words_(max_words) {
    check_limits(next_rank, min_count);
    load_vocab(token_bytes);
    load_rows(BufferRows{rows}, n_specials);
    std::vector<uint8_t>().swap(rows.data);
    rows.n = 0;
    build(n_specials, replay);
}

void MergeEngine::load_vocab(nb::list token_bytes) {
    size_t n = nb::len(token_bytes);
    if (n >= kNone) throw nb::value_error("too many tokens");
    tb_.resize(n);
    tb_ok_.assign(n, 0);
    tlen_.assign(n, 0);
    tmeta_.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
        PyObject *o = PyList_GET_ITEM(token_bytes.ptr(), Py_ssize_t(i));
        if (o == Py_None) continue;
        if (!PyBytes_Check(o)) throw nb::type_error("token_bytes must hold bytes or None");
        tb_[i].assign(PyBytes_AS_STRING(o), size_t(PyBytes_GET_SIZE(o)));
        tlen_[i] = u32(std::min<size_t>(tb_[i].size(), kNone));
        tmeta_[i] = token_meta(tb_[i]);
        tb_ok_[i] = 1;
        id_of_.emplace(tb_[i], u32(i));  // ascending ids: the lowest id of some bytes wins
    }
}

void MergeEngine::load_packed(const u8 *data, size_t size, i64 first_id, u32 n_specials) {
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

void MergeEngine::load_words(nb::list rows, u32 n_specials) {
    load_rows(TupleRows{PySequence_Fast_ITEMS(rows.ptr()), size_t(nb::len(rows))}, n_specials);
}

// Rows are read twice, in order: the first pass checks them and sizes the flat array exactly,
// so it is allocated once.
template <class Rows>
void MergeEngine::load_rows(const Rows &rows, u32 n_specials) {
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
                shorten(pos, 0);  // the caller refuses the store; keep the engine memory-safe
            }
        }
        pos += kHdr + cap;
    }
}

// The arena for `words` words holding `total` u32 (headers and tokens). Why the limit: the
// pair -> words lists and the changed words hold a word's arena offset in 32 bits.
void MergeEngine::alloc_arena(size_t total, size_t words) {
    if (total >= kNone) throw std::overflow_error("more than 2^32 - 1 word tokens and headers");
    ar_.assign_zero(total);
    n_words_ = words;
}

// The slots of the pairs of the word at offset o, one per pair in order (pairs too long left
// out), into `occ`; makes the slots of pairs not seen before. Why a dense table for pairs of two
// bytes: when counting is just over (and on a resume before the first merge checkpoint) every
// word is still its bytes, and the pair index's hash probe and tag check were a third of the
// first pair count (a 2 GB corpus: 2.65 M words, 13 M pairs); the table (256 KiB) stays in
// cache. Slots are made in first-seen order.
void MergeEngine::word_pair_slots(size_t o, u32 base, std::vector<u32> &dense, std::vector<u32> &occ) {
    const u32 *p = &ar_[o + kHdr];
    const u32 n = ar_[o + kLen];
    occ.clear();
    for (u32 i = 0; i + 1 < n; ++i) {
        const u32 x = p[i], y = p[i + 1];
        if (too_long(x, y)) continue;
        const u32 dx = x - base, dy = y - base;  // wraps to large for ids below base
        if (dx < kDenseSide && dy < kDenseSide) {
            u32 &d = dense[dx * kDenseSide + dy];
            if (d == kNone) d = slot_of(x, y);
            occ.push_back(d);
        } else {
            occ.push_back(slot_of(x, y));
        }
    }
}

namespace {

// Leaves each slot of `occ` once (in any order: a word is listed once under each of its pairs).
// Why a scan for short words: most words hold a handful of pairs, and sorting them cost more.
void distinct_slots(std::vector<u32> &occ) {
    constexpr size_t kShort = 32;
    if (occ.size() > kShort) {
        std::sort(occ.begin(), occ.end());
        occ.erase(std::unique(occ.begin(), occ.end()), occ.end());
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < occ.size(); ++i) {
        bool seen = false;
        for (size_t j = 0; j < k; ++j) seen |= occ[j] == occ[i];
        if (!seen) occ[k++] = occ[i];
    }
    occ.resize(k);
}

}  // namespace

// Counts every pair of every word, lists each word once under each pair it holds and makes the
// heap: with every pair a slot (list_pairs), or, with prune_below_ > 1 (SuperBPE's stage 2,
// merge_prune.cpp), only the pairs counted at least that often, counted by sorting
// (merge_sorted_pairs.cpp).
void MergeEngine::build_pairs(u32 n_specials) {
    n_specials_ = n_specials;
    if (prune_below_ > 1) {
        count_pairs_sorted();
        pruned_upto_ = u32(tb_.size());
    } else {
        list_pairs(n_specials);
        pruned_upto_ = 0;
    }
    heap_.reserve(slots_.size());
    for (u32 s = 0; s < slots_.size(); ++s) {
        slots_[s].stored = slots_[s].count;  // a new engine mirrors the store it was loaded from
        if (slots_[s].count > 0) heap_.push_back({slots_[s].count, s});
    }
    std::make_heap(heap_.begin(), heap_.end(), HeapLess{this});
}

// Every pair of every word gets a slot with its count, and each word is listed once under each
// pair it holds, in two passes over the words: the first counts the pairs and how many words hold
// each (in the list's len, the lists being empty), the second lists the words in blocks of exactly
// that size (WordLists::place_exact says why). A word's offset is its name in the lists. The first
// pass keeps each word's distinct slots while they fit in kKeepSlots (64 MiB), so the second reads
// them instead of looking every pair up again. Why: after a replay nearly every pair is of merged
// tokens, a probe of the pair index and a read of the slot, both misses: those lookups were half
// of building the engine of a 16 K store continued on zhwiki-20M; the bound keeps the peak of a
// large corpus (tens of millions of words) where it was. BPE_STORE_BUILD_KEEP_SLOTS sets another
// bound (the tests' way to take the other path on a few words).
void MergeEngine::list_pairs(u32 n_specials) {
    const char *bound = std::getenv("BPE_STORE_BUILD_KEEP_SLOTS");
    const size_t kKeepSlots = bound ? size_t(std::strtoull(bound, nullptr, 10)) : size_t(1) << 24;
    std::vector<u32> dense(kDenseSide * kDenseSide, kNone), occ, kept;
    bool keep = true;
    for (size_t o = 0; o < ar_.size(); o = next_word(o)) {
        word_pair_slots(o, n_specials, dense, occ);
        const i64 c = count_at(o);
        for (u32 s : occ) slots_[s].count += c;
        distinct_slots(occ);
        for (u32 s : occ) ++slots_[s].where.len;
        if (keep && kept.size() + occ.size() + 1 > kKeepSlots) std::vector<u32>().swap(kept), keep = false;
        if (keep) {
            kept.push_back(u32(occ.size()));
            kept.insert(kept.end(), occ.begin(), occ.end());
        }
    }
    size_t entries = 0;
    for (const Slot &s : slots_) entries += s.where.len;
    lists_.reserve_more(entries);
    for (Slot &s : slots_)
        if (s.where.len != 0) lists_.place_exact(s.where, s.where.len);
    size_t at = 0;
    for (size_t o = 0; o < ar_.size(); o = next_word(o)) {
        if (keep) {
            const u32 n = kept[at++];
            for (u32 k = 0; k < n; ++k) lists_.fill(slots_[kept[at + k]].where, u32(o));
            at += n;
            continue;
        }
        word_pair_slots(o, n_specials, dense, occ);
        distinct_slots(occ);
        for (u32 s : occ) lists_.fill(slots_[s].where, u32(o));
    }
}

}  // namespace bpe::merge
