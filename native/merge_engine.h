// bpe_store._core.MergeEngine: the class and the notes that hold for all its files.
//
// The incremental BPE merge loop, the native twin of the Python
// engine in bpe_store/training/merge.py (which stays the portable fallback and the readable spec).
//
// Semantics (docs/design.md, section Semantics): pair counts are weighted by word count, overlapping
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
// Memory per distinct word: what a word costs the engine (50 M synthetic words -> 64K merges,
// `bench/bench_merge_words.py`; bench/RESULTS-scale.md has the runs), and why that size:
//   tokens           39 B  u32 ids (~9.8 a word): a 64K vocabulary does not fit 16 bits
//   word header      16 B  length, stamp, 32-bit count (escape for 4 G+), store id (see ar_)
//   pair -> words    35 B when built, ~11 B at the end (resident): exact-size blocks at first,
//                          freed large blocks' pages given back at once (WordLists)
//   pair slots       35 B  34 B per pair ever seen, ~1 pair per word (Slot)
//   pair index       11 B  8-byte cells at load <= 3/4 (PairIndex)
//   heap             16 B  12-byte entries, ~1.4 per word with the stale ones (HeapEntry)
//   changed          8 B   words and pairs changed since the last checkpoint (none taken here)
// The process's peak (reading the rows, building, merging) is ~140 B a word (was 168 with
// 24-byte headers and power-of-two first lists, 177 before slots and heap entries were packed).
//
// Native code never prints; errors surface as Python exceptions.
//
// The files, by what they do:
//   merge_arrays.h   the plain arrays (PodVec, BigArray) and the engine's integer types
//   merge_tables.h   the pair index, the pair -> words lists, one step's pair changes
//   merge_build.cpp  loading words (Python rows, packed counts, the store's rows), first pair count
//   merge_replay.cpp catching words up with merges the store logged after their tokens
//   replay_cuts.h    where a word may be cut so that its parts replay alone (and are cached)
//   merge_prune.cpp  after a replay (SuperBPE's stage 2, a base): the arena packed, rare pairs left out
//   merge_sorted_pairs.cpp  the pruned pair count, by sorting the pairs' occurrences
//   merge_words_file.cpp  the words saved to a file after a replay, and an engine built from it
//   merge_loop.cpp   the merge loop: the heap, applying a merge to its words
//   merge_rows.cpp   the changes since the last take: checkpoint rows, changed words and pairs
//   merge_engine.cpp inspection, and the Python face (register_merge_engine)
#pragma once

#include <nanobind/nanobind.h>

#include "merge_tables.h"
#include "pair_tally.h"
#include "store_db.h"

#include <atomic>
#include <string>
#include <unordered_map>
#include <vector>

namespace bpe::merge {

namespace nb = nanobind;

// The digest the resume check compares with the same SQL aggregate over `pair_counts`
// (see bpe_store/store/merging_rows.py: pair_counts_digest). Every term is reduced below the prime, so the sums
// stay exact in 64-bit signed integers on both sides for any realistic number of rows.
constexpr i64 kDigestP1 = 2147483647;  // 2^31 - 1
constexpr i64 kDigestP2 = 1000000007;

// Packed (12 bytes, not 16 with the padding): the heap holds about one entry per pair ever seen,
// ~1 per distinct word on large corpora (50 M words: ~1 GB of entries, a quarter of it padding).
// x86-64 and AArch64 read the unaligned count at full speed.
struct __attribute__((packed)) HeapEntry {
    i64 count;
    u32 slot;
};
static_assert(sizeof(HeapEntry) == 12, "HeapEntry is packed");

// A pair's occurrence in the sorted pair count (merge_sorted_pairs.cpp): its key inside its part
// ((left - lo) * width + right), the word's arena offset, the word's count (kNone: in big_counts_).
struct Occurrence {
    u64 key;
    u32 word;
    u32 count;
};

// One part's result in the sorted pair count: the pairs kept (key, count, how many words hold
// it), and their words, list after list.
struct SortedPart {
    std::vector<u64> keys;
    std::vector<i64> counts;
    std::vector<u32> lens, words;
};

struct MergeOut {
    i64 rank;
    u32 left, right, token;
    i64 count;
};

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

    nb::object next();  // the next row as a Python tuple (merge_rows.cpp)
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
    // max_words: 0, or SuperBPE's stage 2: the superword rule with that many words (too_long).
    MergeEngine(nb::list rows, nb::list token_bytes, u32 n_specials, u32 first_merge_id, i64 next_rank,
                i64 min_count, u64 max_token_length, nb::bytes replay, u32 max_words = 0);
    // The same from packed counts (``WordCounter.pack``: a first counting flush's words, every
    // one still single bytes, ids first_id, first_id + 1, ... in their order); replay: a base's
    // merges, applied to them first (a run extending a base).
    MergeEngine(nb::bytes packed, i64 first_id, nb::list token_bytes, u32 n_specials, u32 first_merge_id,
                i64 next_rank, i64 min_count, u64 max_token_length, u32 max_words, nb::bytes replay);
    // The same from the store's rows read by the native connection (StoreDb.read_word_rows),
    // which it empties once their words are loaded.
    MergeEngine(WordRows &rows, nb::list token_bytes, u32 n_specials, u32 first_merge_id, i64 next_rank,
                i64 min_count, u64 max_token_length, nb::bytes replay, u32 max_words = 0);

    // The same from a words file (save_words, named `tag`), then `replay`: the merges logged
    // since the words it holds (merge_words_file.cpp).
    MergeEngine(const std::string &path, u64 tag, nb::list token_bytes, u32 n_specials, u32 first_merge_id,
                i64 next_rank, u64 max_token_length, u32 max_words, nb::bytes replay);
    void save_words(const std::string &path, u64 tag, u64 merges);

    // ---- catching up with logged merges (merge_replay.cpp) ----------------------------------
    void build(u32 n_specials, nb::bytes replay, bool from_file = false);
    void forget_stored_pairs();
    void replay_words(const std::vector<u32> &log, u32 base);

    // ---- the merge loop (merge_loop.cpp) ----------------------------------------------------
    nb::list step(i64 max_merges);
    nb::list next_pairs(size_t k);
    void forget_stored_pairs_now();
    void compact_lists_now();
    void finish();

    // ---- changes since the last take, for checkpoints (merge_rows.cpp) ----------------------
    nb::tuple take_checkpoint_rows();
    RowStream word_rows_of(const std::vector<u32> &words) const;
    RowStream top_word_rows(size_t k);
    RowStream top_pair_rows(size_t k);
    nb::tuple take_changes();

    // ---- inspection (merge_engine.cpp) ------------------------------------------------------
    nb::dict pair_counts();
    nb::tuple pair_digest();
    nb::list word_tokens(u32 w);
    nb::bytes token_bytes(u32 id);
    bool exhausted() const { return exhausted_; }
    // True until the next take_checkpoint_rows: the store's pair counts must all be replaced.
    bool rewrite_pairs() const { return rewrite_pairs_; }
    i64 next_rank() const { return next_rank_; }
    u32 first_merge_id() const { return first_merge_id_; }
    i64 bad_word() const { return bad_word_; }
    size_t num_words() const { return n_words_; }
    size_t pair_slots() const { return slots_.size(); }
    size_t heap_size() const { return heap_.size(); }
    nb::dict memory() const;
    size_t index_entries() const;

  private:
    // Refuses a second call while one runs with the GIL released (another Python thread).
    struct Busy {
        MergeEngine *e;
        explicit Busy(MergeEngine *engine) : e(engine) {
            if (e->busy_.exchange(true)) throw std::runtime_error("MergeEngine is in use by another thread");
        }
        ~Busy() { e->busy_.store(false); }
    };

    // ---- loading words (merge_build.cpp) ----------------------------------------------------
    void load_vocab(nb::list token_bytes);
    void load_packed(const u8 *data, size_t size, i64 first_id, u32 n_specials);
    // Words whose count is below min_count_ are skipped: word w is the w-th row kept, and
    // bad_word_ is an index into `rows`.
    template <class Rows>
    void load_rows(const Rows &rows, u32 n_specials);
    void load_words(nb::list rows, u32 n_specials);
    void load_words_file(const std::string &path, u64 tag);
    void alloc_arena(size_t total, size_t words);
    void build_pairs(u32 n_specials);
    static constexpr u32 kDenseSide = 256;  // build_pairs' dense table: pairs of two byte tokens
    void word_pair_slots(size_t o, u32 base, std::vector<u32> &dense, std::vector<u32> &occ);
    void list_pairs(u32 n_specials);

    // ---- After a replay (SuperBPE's stage 2, a base's merges): packing the arena, pruned pair
    // counts (merge_prune.cpp). Pairs counted fewer than this many times when the pairs are
    // counted get no slot (merge_prune.cpp: 3 pairs in 4 of stage 2's are counted once; 7 in 8 of
    // zhwiki's after a 16 K store's merges fewer than 4 times); 1: every pair has one.
    static constexpr i64 kSuperwordPruneBelow = 4;
    void compact_arena();
    void tally_pairs(PairTally &tally) const;
    void rebuild_pairs(i64 floor);
    void unprune();
    u32 slot_gained(u32 x, u32 y, u64 key);
    // ---- the pruned pair count by sorting (merge_sorted_pairs.cpp) --------------------------
    std::vector<u32> sorted_parts(size_t budget, std::vector<size_t> &sizes) const;
    void count_part(u32 lo, u32 hi, size_t size, std::vector<Occurrence> &a, std::vector<Occurrence> &b,
                    SortedPart &out) const;
    void count_pairs_sorted();
    std::vector<std::pair<u64, i64>> live_pairs(size_t top = 0) const;

    // Writes the header of the word at offset o (its tokens follow; its stamp starts at 0).
    void start_word(size_t o, u32 len, i64 count, u32 id) {
        ar_[o + kLen] = len;
        ar_[o + kId] = id;
        if (u64(count) < kNone) {
            ar_[o + kCount] = u32(count);
        } else {  // rare (a word counted 4 G times): see big_counts_
            ar_[o + kCount] = kNone;
            big_counts_.emplace(u32(o), count);
        }
    }
    i64 count_at(size_t o) const {
        const u32 c = ar_[o + kCount];
        return c != kNone ? i64(c) : big_counts_.at(u32(o));
    }
    // Shortens the word at offset o to `len` tokens: the freed tail becomes padding. Why the
    // first cell apart: a merge mostly frees one cell, and compilers turn the loop into a call
    // of memset, which cost ~20 % of the merge loop when made for every rewritten word.
    void shorten(size_t o, u32 len) {
        u32 *t = &ar_[o + kHdr];
        const u32 old = ar_[o + kLen];
        ar_[o + kLen] = len;
        if (len >= old) return;
        t[len] = kPad;
        for (u32 k = len + 1; k < old; ++k) t[k] = kPad;
    }
    // The offset of the word after the one at o (ar_.size() after the last): past its tokens
    // and the padding its merges left (no token, and no word's first cell, is kPad).
    size_t next_word(size_t o) const {
        size_t p = o + kHdr + ar_[o + kLen];
        while (p < ar_.size() && ar_[p] == kPad) ++p;
        return p;
    }

    // Whether merging (a, b) is barred: it would make a token longer than max_token_length, or
    // break the superword rule (max_words_ != 0: SuperBPE's stage 2, bpe_store/counting/
    // superword_split.py: no ": ", at most max_words_ words). Such a pair is never counted.
    // Token bytes never change, so a pair is barred always or never.
    // Why tlen_ and tmeta_: 4 bytes per token each (a 32K vocabulary fits in L2) instead of
    // reading a std::string's bytes.
    bool too_long(u32 a, u32 b) const {
        if (max_len_ != 0 && u64(tlen_[a]) + tlen_[b] > max_len_) return true;
        return max_words_ != 0 && superword_barred(tmeta_[a], tmeta_[b]);
    }
    // A token's superword facts, packed: its words (non-empty parts between spaces) in the low
    // 28 bits, then whether it begins with a space, ends with a space, ends with ':', holds ": ".
    static constexpr u32 kWordsMask = (1u << 28) - 1, kFirstSpace = 1u << 28, kLastSpace = 1u << 29,
                         kLastColon = 1u << 30, kColonSpace = 1u << 31;
    static u32 token_meta(const std::string &t) {
        u32 words = 0, m = 0;
        bool in_word = false;
        for (size_t i = 0; i < t.size(); ++i) {
            const bool space = t[i] == ' ';
            if (!space && !in_word && words < kWordsMask) ++words;
            in_word = !space;
            if (space && i > 0 && t[i - 1] == ':') m |= kColonSpace;
        }
        if (!t.empty()) {
            if (t.front() == ' ') m |= kFirstSpace;
            if (t.back() == ' ') m |= kLastSpace;
            if (t.back() == ':') m |= kLastColon;
        }
        return m | words;
    }
    bool superword_barred(u32 x, u32 y) const {
        if ((x | y) & kColonSpace) return true;
        if ((x & kLastColon) && (y & kFirstSpace)) return true;
        // the last word of x and the first of y join unless a space is between them
        const u32 joined = !(x & kLastSpace) && !(y & kFirstSpace) ? 1 : 0;
        return u64(x & kWordsMask) + (y & kWordsMask) - joined > max_words_;
    }

    u32 slot_of(u32 a, u32 b) {
        bool inserted;
        // slots are 32-bit (kNone marks "none"): checked before u32(slots_.size()) could wrap
        if (slots_.size() >= kNone) throw std::overflow_error("more than 2^32 - 1 distinct pairs");
        u32 s = index_.find_or_insert(pair_key(a, b), u32(slots_.size()), inserted, KeyOf{&slots_});
        if (inserted) slots_.push_back(Slot{a, b, 0, 0, {}, 0});
        return s;
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

    void mark_changed_pair(u32 s) {
        if (!(slots_[s].mark & kChanged)) {
            slots_[s].mark |= kChanged;
            changed_pairs_.push_back(s);
        }
    }

    // ---- the merge loop (merge_loop.cpp) ----------------------------------------------------
    void compact_lists();
    void heap_push(i64 count, u32 slot);
    bool pop_best(u32 &slot, i64 &count);
    void apply(u32 slot, u32 a, u32 b, u32 t);
    void rewrite(StepWork &work, const u32 *ws, size_t n, u32 a, u32 b, u32 t);
    void add_changes(StepWork &work);
    void merge_word(StepWork &work, u32 w, u32 a, u32 b, u32 t);

    // ---- changes since the last take (merge_rows.cpp) ---------------------------------------
    std::vector<u32> take_changed_words();
    std::vector<u32> take_changed_pairs(bool skip_unchanged = false);

    static constexpr u8 kChanged = 1;

    // vocabulary: bytes per id (tb_ok_ = 0 for specials and unused ids), and bytes -> lowest id
    std::vector<std::string> tb_;
    std::vector<u8> tb_ok_;
    std::vector<u32> tlen_;  // tb_[id].size(), for the max_token_length check
    std::vector<u32> tmeta_;  // token_meta(tb_[id]), for the superword rule (max_words_ != 0)
    std::unordered_map<std::string, u32> id_of_;
    u32 first_merge_id_;
    i64 next_rank_;
    i64 min_count_;  // words counted fewer times are not loaded
    u64 max_len_;    // the longest token a merge may make, in bytes; 0 = no limit
    u32 max_words_ = 0;  // the superword rule's most words a token may span; 0 = no rule
    bool exhausted_ = false;
    bool finished_ = false;  // finish() was called: no more merging
    i64 bad_word_ = -1;
    bool rewrite_pairs_ = false;  // see build()
    // Pruned pair counts (merge_prune.cpp): pairs of tokens below pruned_upto_ counted fewer than
    // prune_below_ times when the pairs were last counted have no slot; 1 and 0: none pruned.
    i64 prune_below_ = 1;
    u32 pruned_upto_ = 0;
    bool need_rebuild_ = false;  // a merge made a pair that may have been pruned: count again
    u32 n_specials_ = 0;  // build_pairs' base, for a recount

    // words: ONE arena of u32, each word a header then its tokens, in store id order; a word is
    // known by its offset (the pair -> words lists and the changed words hold offsets). Header
    // (16 bytes): current length, stamp (the merge that last visited it; kChangedBit: listed in
    // changed_words_), count, store id. Merging only shortens a word, and the tokens it frees are
    // overwritten with kPad, which is how a walk finds the next word.
    // Why headers inline, not records in an array beside the tokens: a merge visits its words at
    // random, and a record pointing to the tokens made two dependent cache misses per word (the
    // record, then the tokens); here it is one, and one prefetch covers it (as gigabpe's arena).
    // Why 16 bytes, not 24: the header is paid for every distinct word (50 M words: 0.8 GB at
    // 16). The count is 32-bit with an escape (kNone: the count is in big_counts_), since only a
    // handful of words are ever counted 4 G times, and the word's capacity (its length when
    // loaded) is not kept: padding marks the end instead, and only walks over the whole arena
    // (checkpoints, the stamps' wrap) read it, never a merge.
    static constexpr u32 kLen = 0, kStamp = 1, kCount = 2, kId = 3, kHdr = 4;
    static constexpr u32 kPad = kNone;  // a freed token; ids and lengths are below kNone
    static constexpr u32 kChangedBit = 0x80000000u;
    std::unordered_map<u32, i64> big_counts_;  // arena offset -> count, for counts >= kNone
    BigArray<u32> ar_;
    size_t n_words_ = 0;
    // Why PodVecs (changed_words_, changed_pairs_): between checkpoints they grow to about one
    // entry per word and per pair (50 M words: ~0.2 GB each); a vector doubled into a copy,
    // holding three times that at once.
    PodVec<u32> changed_words_;
    u32 stamp_ = 0;

    // pairs, by slot. Why one struct: a pair update reads count, mark and word list together,
    // so keeping them in one place costs one cache miss instead of one per array.
    // Packed (34 bytes, not 40): there is a slot for every pair ever seen, ~1 per distinct word on
    // large corpora (50 M words: 1.7 GB of slots at 34 bytes); a slot is read whole on a visit
    // either way (one or two cache lines), and unaligned loads cost nothing on x86-64 and AArch64.
    struct __attribute__((packed)) Slot {
        u32 left, right;
        i64 count;   // weighted by word counts; 0 = no word holds the pair
        i64 stored;  // the count the store holds (as of the last take)
        WordLists::List where;  // words holding the pair (a superset, see the notes on top)
        u8 mark;     // kChanged: listed in changed_pairs_
    };
    static_assert(sizeof(Slot) == 34, "Slot is packed");
    struct KeyOf {
        const PodVec<Slot> *slots;
        u64 operator()(u32 s) const { return pair_key((*slots)[s].left, (*slots)[s].right); }
    };
    WordLists lists_;
    PairIndex index_;
    PodVec<Slot> slots_;
    PodVec<u32> changed_pairs_;
    PodVec<HeapEntry> heap_;

    StepWork work_;  // the merge being applied: its pair changes (see apply())

    std::atomic<bool> busy_{false};
};

}  // namespace bpe::merge
