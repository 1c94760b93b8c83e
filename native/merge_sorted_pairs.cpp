// The merge engine's pruned pair count by sorting, after a replay (SuperBPE's stage 2, a base;
// merge_prune.cpp says why pruned and why exact): every occurrence of a pair becomes a record (pair, word, count), the
// records are radix-sorted by pair, and each run of one pair gives its count and, when that is at
// least the floor, its slot and its list of words, in word order. See merge_engine.h for the whole.
//
// Why sorting and not a hash table: the count it replaces tallied every occurrence into a hash
// table of every pair (16 bytes a cell at load <= 1/2), then looked each occurrence of a kept pair
// up again, counted it into its slot and wrote it into its list: four to six cache misses per
// occurrence at random places in tables of hundreds of MB, which were ~half of building stage 2's
// engine (a perf sample of 200 MB of OWT-like text: build_pairs with its list fill 26 %,
// word_pair_slots 10 %, tally_pairs 9 %; ~42 M occurrences). A radix sort reads and writes its
// records in order (2,048 buckets a pass, which the cache holds), and the runs are read in order.
//
// Why in parts by the left token: the records are 16 bytes an occurrence (1 GB of OWT-like text:
// ~215 M occurrences, 3.4 GB, twice that with the sort's buffer); a part holds the pairs whose left
// token lies in a range of ids, at most kPartOccurrences occurrences (a single id may hold more),
// and each part re-reads the words (the arena, in order: a fraction of a part's sort). Two threads
// take the parts in turn; each part's output lands in its own place and the slots are made from
// them in part order, so the result does not depend on the threads.
#include "merge_engine.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <thread>

namespace bpe::merge {

namespace {

static_assert(sizeof(Occurrence) == 16, "16 bytes a record");

// Records of at most this many occurrences a part (by default): two threads hold two parts with
// their sort buffers, 4 x 16 x 2^24 bytes = 1 GiB at most. BPE_STORE_SORTED_PART sets another
// bound (the tests' way to cut a few words into many parts).
constexpr size_t kPartOccurrences = size_t(1) << 24;

// Sorts `a` by its keys' low `bits` bits, stably (least significant digit first, 11 bits a pass),
// with `b` as the buffer; the result is in `a`. Why every digit's counts in one read first: a pass
// then reads the records once (to move them), not twice; and a digit all keys share moves nothing.
void radix_sort(std::vector<Occurrence> &a, std::vector<Occurrence> &b, unsigned bits) {
    constexpr unsigned kDigit = 11;
    constexpr size_t kBuckets = size_t(1) << kDigit;
    const unsigned passes = (bits + kDigit - 1) / kDigit;
    std::vector<size_t> at(size_t(passes) * kBuckets, 0);
    for (const Occurrence &o : a)
        for (unsigned d = 0; d < passes; ++d) ++at[d * kBuckets + ((o.key >> (d * kDigit)) & (kBuckets - 1))];
    b.resize(a.size());
    for (unsigned d = 0; d < passes; ++d) {
        size_t *pos = &at[d * kBuckets], sum = 0;
        bool moves = true;
        for (size_t k = 0; k < kBuckets; ++k) {
            moves = moves && pos[k] != a.size();
            const size_t n = pos[k];
            pos[k] = sum;
            sum += n;
        }
        if (!moves) continue;  // one bucket holds every key: the order stays
        const unsigned shift = d * kDigit;
        for (const Occurrence &o : a) b[pos[(o.key >> shift) & (kBuckets - 1)]++] = o;
        a.swap(b);
    }
}

}  // namespace

// The first left id of each part, then tb_.size(): parts of at most `budget` occurrences of
// pairs that may be merged (one id alone may hold more); `sizes`: each part's occurrences.
std::vector<u32> MergeEngine::sorted_parts(size_t budget, std::vector<size_t> &sizes) const {
    std::vector<u64> per_left(tb_.size(), 0);
    for (size_t o = 0; o < ar_.size(); o = next_word(o)) {
        const u32 *p = &ar_[o + kHdr];
        const u32 n = ar_[o + kLen];
        for (u32 i = 0; i + 1 < n; ++i) per_left[p[i]] += !too_long(p[i], p[i + 1]);
    }
    std::vector<u32> cuts{0};
    u64 sum = 0;
    for (u32 id = 0; id < per_left.size(); ++id) {
        if (sum > 0 && sum + per_left[id] > budget) {
            cuts.push_back(id);
            sizes.push_back(sum);
            sum = 0;
        }
        sum += per_left[id];
    }
    cuts.push_back(u32(per_left.size()));
    sizes.push_back(sum);
    return cuts;
}

// The pairs whose left token is in [lo, hi): their records sorted, then each pair's count and, for
// those at or above the floor, its key, count and distinct words (in arena order) into `out`.
void MergeEngine::count_part(u32 lo, u32 hi, size_t size, std::vector<Occurrence> &a,
                             std::vector<Occurrence> &b, SortedPart &out) const {
    const u64 width = tb_.size();
    a.clear();
    a.reserve(size);  // exactly: no copy as it grows, no page touched twice
    for (size_t o = 0; o < ar_.size(); o = next_word(o)) {
        const u32 *p = &ar_[o + kHdr];
        const u32 n = ar_[o + kLen], c = ar_[o + kCount];
        for (u32 i = 0; i + 1 < n; ++i) {
            const u32 x = p[i], y = p[i + 1];
            if (x - lo < hi - lo && !too_long(x, y)) a.push_back({u64(x - lo) * width + y, u32(o), c});
        }
    }
    unsigned bits = 1;
    while (bits < 64 && (u64(1) << bits) < u64(hi - lo) * width) ++bits;
    radix_sort(a, b, bits);
    for (size_t i = 0, j; i < a.size(); i = j) {
        const size_t first = out.words.size();
        i64 total = 0;
        for (j = i; j < a.size() && a[j].key == a[i].key; ++j) {
            total += a[j].count != kNone ? i64(a[j].count) : big_counts_.at(a[j].word);
            if (j == i || a[j].word != a[j - 1].word) out.words.push_back(a[j].word);
        }
        if (total < prune_below_) {
            out.words.resize(first);
            continue;
        }
        out.keys.push_back(pair_key(lo + u32(a[i].key / width), u32(a[i].key % width)));
        out.counts.push_back(total);
        out.lens.push_back(u32(out.words.size() - first));
    }
}

// Every pair counted by sorting (see the top of this file); those counted at least prune_below_
// times get a slot with that count and an exact-size list of their words.
void MergeEngine::count_pairs_sorted() {
    const char *bound = std::getenv("BPE_STORE_SORTED_PART");
    const size_t budget = bound ? size_t(std::strtoull(bound, nullptr, 10)) : kPartOccurrences;
    std::vector<size_t> sizes;
    const std::vector<u32> cuts = sorted_parts(std::max<size_t>(budget, 1), sizes);
    const size_t parts = cuts.size() - 1;
    std::vector<SortedPart> out(parts);
    std::atomic<size_t> next{0};
    std::exception_ptr failed[2];
    auto work = [&](int t) {
        try {
            std::vector<Occurrence> a, b;
            for (size_t k; (k = next++) < parts;) count_part(cuts[k], cuts[k + 1], sizes[k], a, b, out[k]);
        } catch (...) {
            failed[t] = std::current_exception();
            next = parts;  // the other thread stops too
        }
    };
    const bool two = parts > 1 && std::thread::hardware_concurrency() > 1;
    std::thread other;
    if (two) other = std::thread(work, 1);
    work(0);
    if (two) other.join();
    for (const std::exception_ptr &e : failed)
        if (e) std::rethrow_exception(e);
    size_t kept = 0, entries = 0;
    for (const SortedPart &p : out) kept += p.keys.size(), entries += p.words.size();
    index_.reserve_sparse(kept, KeyOf{&slots_});
    slots_.reserve(slots_.size() + kept);
    lists_.reserve_more(entries);
    for (SortedPart &p : out) {
        size_t w = 0;
        for (size_t k = 0; k < p.keys.size(); ++k) {
            const u32 s = slot_of(u32(p.keys[k] >> 32), u32(p.keys[k]));
            slots_[s].count = p.counts[k];
            lists_.place_exact(slots_[s].where, p.lens[k]);
            for (u32 e = 0; e < p.lens[k]; ++e) lists_.fill(slots_[s].where, p.words[w++]);
        }
        p = SortedPart();  // freed as it is copied
    }
}

}  // namespace bpe::merge
