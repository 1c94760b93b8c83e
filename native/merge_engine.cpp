// The merge engine's Python face: inspection (pair counts, digests, a word's tokens, memory) and
// register_merge_engine, which puts MergeEngine, RowStream and release_free_memory into
// bpe_store._core. What the engine is and how its files divide: merge_engine.h.
#include "merge_engine.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <nanobind/stl/string.h>

#include <string>

namespace bpe::merge {

void release_free_memory() {
#if defined(__GLIBC__)
    static const bool fixed = mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1;
    (void)fixed;
    malloc_trim(0);
#endif
}

nb::dict MergeEngine::pair_counts() {
    Busy busy(this);
    nb::dict d;
    for (const auto &[key, c] : live_pairs()) d[nb::make_tuple(u32(key >> 32), u32(key))] = nb::int_(c);
    return d;
}

// (number of live pairs, digest 1, digest 2): see kDigestP1.
nb::tuple MergeEngine::pair_digest() {
    Busy busy(this);
    i64 n = 0, h1 = 0, h2 = 0;
    for (const auto &[key, c] : live_pairs()) {
        const i64 l = i64(key >> 32), r = i64(u32(key));
        ++n;
        h1 += ((l * 65599 + r) % kDigestP1) * (c % kDigestP1) % kDigestP1;
        h2 += ((l * 1000003 + r * 7 + 11) % kDigestP2) * (c % kDigestP2) % kDigestP2;
    }
    return nb::make_tuple(n, h1, h2);
}

nb::list MergeEngine::word_tokens(u32 w) {
    Busy busy(this);
    if (w >= n_words_) throw nb::index_error("no such word");
    size_t o = 0;
    for (u32 k = 0; k < w; ++k) o = next_word(o);
    nb::list toks;
    for (u32 i = 0; i < ar_[o + kLen]; ++i) toks.append(ar_[o + kHdr + i]);
    return toks;
}

nb::bytes MergeEngine::token_bytes(u32 id) {
    Busy busy(this);
    if (id >= tb_.size() || !tb_ok_[id]) throw nb::key_error(std::to_string(id).c_str());
    return nb::bytes(tb_[id].data(), tb_[id].size());
}

// Bytes held by each part of the engine (capacity, not size: what the process pays for).
nb::dict MergeEngine::memory() const {
    nb::dict d;
    d["tokens"] = (ar_.capacity() - n_words_ * kHdr) * sizeof(u32);
    d["words"] = n_words_ * kHdr * sizeof(u32);  // the words' headers in the arena
    d["slots"] = slots_.capacity() * sizeof(Slot);
    d["word_lists"] = lists_.bytes();
    d["pair_index"] = index_.bytes();
    d["heap"] = heap_.capacity() * sizeof(HeapEntry);
    d["changed"] = (changed_words_.capacity() + changed_pairs_.capacity()) * sizeof(u32);
    return d;
}

size_t MergeEngine::index_entries() const {
    size_t n = 0;
    for (const Slot &s : slots_) n += s.where.len;
    return n;
}

}  // namespace bpe::merge

namespace nb = nanobind;

static void bind_inspection(nb::class_<bpe::merge::MergeEngine> &engine);
static void bind_words_file(nb::class_<bpe::merge::MergeEngine> &engine);

void register_merge_engine(nb::module_ &m) {
    using namespace bpe::merge;
    m.def("release_free_memory", &release_free_memory,
          "Give the free memory malloc keeps back to the OS; from the first call on, blocks of 1 MiB "
          "or more are mapped on their own (glibc: malloc_trim, M_MMAP_THRESHOLD; elsewhere nothing).");
    nb::class_<RowStream>(m, "RowStream", "One checkpoint statement's rows, made as they are iterated (once).")
        .def("__len__", &RowStream::size)
        .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
        .def("__next__", &RowStream::next);
    nb::class_<MergeEngine> engine(m, "MergeEngine",
                                   "The incremental BPE merge loop (see bpe_store.training.merge for the contract).");
    engine.def(nb::init<nb::list, nb::list, u32, u32, i64, i64, u64, nb::bytes, u32>(), nb::arg("rows"),
             nb::arg("token_bytes"), nb::arg("n_specials"), nb::arg("first_merge_id"), nb::arg("next_rank"),
             nb::arg("min_count") = 1, nb::arg("max_token_length") = 0, nb::arg("replay") = nb::bytes("", 0),
             nb::arg("max_words") = 0,
             "rows: [(word id, bytes, count, packed tokens or None)]; token_bytes[id]: bytes or None; "
             "rows counted fewer than min_count times are left out; no merge makes a token longer than "
             "max_token_length bytes (0: no limit); replay: merges logged since the words' tokens, "
             "(left, right, token) uint32 triples, applied to the words first; max_words: 0, or "
             "SuperBPE's stage 2: no pair whose token holds ': ' or spans more words is counted.")
        .def(nb::init<nb::bytes, i64, nb::list, u32, u32, i64, i64, u64, u32, nb::bytes>(), nb::arg("packed"),
             nb::arg("first_id"), nb::arg("token_bytes"), nb::arg("n_specials"), nb::arg("first_merge_id"),
             nb::arg("next_rank"), nb::arg("min_count") = 1, nb::arg("max_token_length") = 0,
             nb::arg("max_words") = 0, nb::arg("replay") = nb::bytes("", 0),
             "The same from packed counts (WordCounter.pack): words still single bytes, ids from first_id; "
             "replay: a base's merges, applied to them first.")
        .def(nb::init<WordRows &, nb::list, u32, u32, i64, i64, u64, nb::bytes, u32>(), nb::arg("rows"),
             nb::arg("token_bytes"), nb::arg("n_specials"), nb::arg("first_merge_id"), nb::arg("next_rank"),
             nb::arg("min_count") = 1, nb::arg("max_token_length") = 0, nb::arg("replay") = nb::bytes("", 0),
             nb::arg("max_words") = 0,
             "The same from the store's rows read natively (StoreDb.read_word_rows), emptied once loaded.")
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
        .def("next_pairs", &MergeEngine::next_pairs, nb::arg("k"),
             "The k best live pairs, best first: [(left, right, count)] (fewer when pruned pairs may "
             "stand below them).")
        .def("compact_lists", &MergeEngine::compact_lists_now,
             "Pack the pair -> words lists (done on its own when the pool is mostly free blocks).")
        .def("finish", &MergeEngine::finish,
             "Merging is over: free the structures only merging needs (step() refuses after).")
        .def("take_changes", &MergeEngine::take_changes,
             "Changes since the last take: ({word index: tokens}, {(left, right): count, 0 if gone}).");
    bind_inspection(engine);
    bind_words_file(engine);
}

// Stage 2's words file (merge_words_file.cpp): an engine from it, and the words written to it.
static void bind_words_file(nb::class_<bpe::merge::MergeEngine> &engine) {
    using namespace bpe::merge;
    engine.def(nb::init<const std::string &, u64, nb::list, u32, u32, i64, u64, u32, nb::bytes>(), nb::arg("path"),
               nb::arg("tag"), nb::arg("token_bytes"), nb::arg("n_specials"), nb::arg("first_merge_id"),
               nb::arg("next_rank"), nb::arg("max_token_length"), nb::arg("max_words"), nb::arg("replay"),
               "The same from a words file (save_words) named tag, then replay (the merges logged since its "
               "words); ValueError when the file is not one, damaged, or named otherwise.")
        .def("save_words", &MergeEngine::save_words, nb::arg("path"), nb::arg("tag"), nb::arg("merges"),
             "Write the words as they are (after a replay of that many merges) to path, named tag.");
}

// The engine's read-only views: counts, digests, sizes (for tests, status and memory reports).
static void bind_inspection(nb::class_<bpe::merge::MergeEngine> &engine) {
    using namespace bpe::merge;
    engine.def("pair_counts", &MergeEngine::pair_counts, "{(left, right): count} of every live pair.")
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
