// The merge engine, catching up: a store whose words' tokens predate some logged merges (a
// checkpoint wrote the merges, not yet the words) has them applied to its words when the engine
// is built, before any pair is counted. See merge_engine.h for the whole.
#include "merge_engine.h"
#include "piece_cache.h"
#include "replay_cuts.h"

#include <algorithm>
#include <functional>
#include <thread>

namespace bpe::merge {

namespace {

// The logged merges of a replay, looked up by pair. A pair may come back under a later rank (a
// merge whose bytes are an existing token reuses that id), so each pair keeps its ranks in a
// chain, lowest first.
class ReplayLog {
  public:
    // log: (left, right, token) triples in rank order; base: the id of byte 0.
    ReplayLog(const std::vector<u32> &log, u32 base) : log_(log), base_(base), dense_(kSide * kSide, kNone) {
        const u32 n = u32(log.size() / 3);
        for (u32 i = n; i-- > 0;) {
            const u32 da = log[3 * i] - base, db = log[3 * i + 1] - base;  // wraps for ids below base
            if (da < kSide && db < kSide) dense_[da * kSide + db] = i;  // the first rank wins
        }
        while (cap_ < size_t(n) + size_t(n) / 3 + 1) cap_ <<= 1;
        table_.assign(cap_, Entry{kEmpty, kNone});
        next_.assign(n, kNone);
        std::vector<u32> last(cap_, kNone);
        for (u32 i = 0; i < n; ++i) {
            const u64 key = pair_key(log[3 * i], log[3 * i + 1]);
            const size_t h = find(key);
            if (table_[h].key == kEmpty)
                table_[h] = Entry{key, i};
            else
                next_[last[h]] = i;
            last[h] = i;
        }
    }

    // The lowest rank of pair (x, y), or kNone.
    u32 first_rank(u32 x, u32 y) const {
        const u32 da = x - base_, db = y - base_;
        return da < kSide && db < kSide ? dense_[da * kSide + db] : rank_of(x, y, kNone);
    }

    // The lowest rank of pair (x, y) above `after` (kNone: above none), or kNone.
    u32 rank_of(u32 x, u32 y, u32 after) const {
        const Entry &e = table_[find(pair_key(x, y))];
        u32 i = e.first;  // kNone for an empty slot
        while (i != kNone && after != kNone && i <= after) i = next_[i];
        return i;
    }

    // The token the merge of rank `rank` makes.
    u32 token(u32 rank) const { return log_[3 * rank + 2]; }

  private:
    // Why a dense table for pairs of two bytes (ids base .. base + 255): words still their
    // bytes (a store whose merging wrote no checkpoint yet) look up every pair once, and those
    // are the most lookups of a replay; as in build_pairs, 256 KiB that stay in cache.
    static constexpr u32 kSide = 256;
    static constexpr u64 kEmpty = ~u64(0);  // no pair has both ids kNone
    // pair -> its first rank in the log, open addressing at load <= 3/4; one 16-byte entry
    // per slot, so a probe reads one cache line (key and rank together)
    struct Entry {
        u64 key;
        u32 first;
    };

    size_t find(u64 key) const {
        size_t h = size_t((key * 0x9E3779B97F4A7C15ull) >> 40) & (cap_ - 1);
        while (table_[h].key != kEmpty && table_[h].key != key) h = (h + 1) & (cap_ - 1);
        return h;
    }

    const std::vector<u32> &log_;
    u32 base_;
    std::vector<u32> dense_;
    size_t cap_ = 16;
    std::vector<Entry> table_;
    std::vector<u32> next_;  // the next rank of the same pair, or kNone
};

constexpr u32 kStale = kNone - 1;  // a pair next to a token just made: look it up again

// Merges every pair ranked `best` in p[0, len) in place; returns the new length. rk[i] is the
// lowest rank of pair (p[i], p[i + 1]) still to come, kept up to date.
u32 merge_rank(const ReplayLog &log, u32 *p, u32 len, std::vector<u32> &rk, u32 best) {
    const u32 t = log.token(best);
    // Rewrite in place, left to right: a pair ranked `best` is (a, b) (a rank is
    // one pair's) and its a was not taken by a match just before (i skips it).
    // The other pairs keep their rank: it is above `best`, so still the next one.
    u32 w = 0;
    for (u32 i = 0; i < len; ++w) {
        if (i + 1 < len && rk[i] == best) {
            p[w] = t;
            if (w > 0) rk[w - 1] = kStale;
            rk[w] = kStale;
            i += 2;
        } else {
            p[w] = p[i];
            rk[w] = rk[i];
            ++i;
        }
    }
    len = w;
    for (u32 i = 0; i + 1 < len; ++i)
        if (rk[i] == kStale) rk[i] = log.rank_of(p[i], p[i + 1], best);
    return len;
}

// Scratch of replay_long, reused from word to word.
struct LongScratch {
    std::vector<u32> rk, nxt, prv;
    std::vector<u64> heap;  // (rank << 32 | position), a min-heap through std::greater
};

// replay_word for a long word: the same merges, found through a heap of (rank, position) over a
// linked list of the tokens instead of a scan of the word per merge. Why: a word is scanned once
// per merge it takes, so the scan is quadratic in its length; stage 2 of SuperBPE
// (docs/superword.md) replays stage 1 on pieces of hundreds or thousands of bytes, where that
// scan was nearly all of building the engine. Equivalent: the lowest rank is taken first, and
// of one rank the leftmost pair (positions keep the words' order: a merge keeps its left
// position); a pair made next to a new token gets its lowest rank above the merge just applied.
u32 replay_long(const ReplayLog &log, u32 *p, u32 len, LongScratch &s) {
    s.rk.assign(len, kNone);
    s.nxt.resize(len);
    s.prv.resize(len);
    s.heap.clear();
    for (u32 i = 0; i < len; ++i) {
        s.nxt[i] = i + 1 < len ? i + 1 : kNone;
        s.prv[i] = i > 0 ? i - 1 : kNone;
        if (i + 1 < len && (s.rk[i] = log.first_rank(p[i], p[i + 1])) != kNone)
            s.heap.push_back(u64(s.rk[i]) << 32 | i);
    }
    auto later = std::greater<u64>();
    std::make_heap(s.heap.begin(), s.heap.end(), later);
    bool any = false;
    while (!s.heap.empty()) {
        std::pop_heap(s.heap.begin(), s.heap.end(), later);
        const u64 top = s.heap.back();
        s.heap.pop_back();
        const u32 r = u32(top >> 32), i = u32(top);
        if (s.rk[i] != r) continue;  // stale: the pair at i was merged or changed
        const u32 j = s.nxt[i];
        p[i] = log.token(r);
        s.rk[j] = kNone;  // j is gone
        s.nxt[i] = s.nxt[j];
        if (s.nxt[i] != kNone) s.prv[s.nxt[i]] = i;
        any = true;
        for (u32 k : {s.prv[i], i}) {  // the pairs either side of the new token
            if (k == kNone) continue;
            s.rk[k] = s.nxt[k] == kNone ? kNone : log.rank_of(p[k], p[s.nxt[k]], r);
            if (s.rk[k] != kNone) {
                s.heap.push_back(u64(s.rk[k]) << 32 | k);
                std::push_heap(s.heap.begin(), s.heap.end(), later);
            }
        }
    }
    if (!any) return kNone;
    u32 w = 0;
    for (u32 i = 0; i != kNone; i = s.nxt[i]) p[w++] = p[i];
    return w;
}

// Words at least this long are replayed through the heap (replay_long); shorter ones by scans,
// which cost less there (no heap, no list).
constexpr u32 kLongWord = 48;
// Words at least this long are replayed part by part (replay_parts): a Han run of three
// characters may already hold a cut; a shorter word costs less replayed than tested for cuts.
constexpr u32 kPartsWord = 8;

// A thread's cache of replayed parts: the encoder's piece cache (piece_cache.h: direct-mapped,
// keys and ids inline, parts up to 22 bytes and 8 tokens), and the word's bytes. Why not a hash
// map of strings: a lookup there was a chain of misses (bucket, node, key, tokens) and a miss
// allocated twice; on zhwiki's words (16 K merges) those lookups were most of the replay.
struct ReplayCache {
    enc::PieceCache parts;
    std::string bytes;
};

// A word's replay, part by part (ReplayCuts): each part's tokens from the cache, or replayed by
// `one` and kept; the parts' tokens are written back in place, left to right (a part never
// grows). Its new length, or kNone when nothing merged. A word not all bytes (a store whose words
// took merges before) or with no cut is replayed whole (a word is met once: nothing to keep).
template <class One>
u32 replay_parts(const ReplayCuts &cuts, ReplayCache &cache, u32 *p, u32 len, u32 base, One &one) {
    std::string &b = cache.bytes;
    b.resize(len);
    for (u32 i = 0; i < len; ++i) {
        if (p[i] - base >= 256) return one(p, len);
        b[i] = char(p[i] - base);
    }
    const u8 *w8 = reinterpret_cast<const u8 *>(b.data());
    u32 w = 0, start = 0;
    bool any = false;
    for (u32 i = 1; i <= len; ++i) {
        if (i < len && !cuts.cut(w8, len, i)) continue;
        if (start == 0 && i == len) return one(p, len);
        const u32 n = i - start;
        const u8 *key = w8 + start;
        const u64 h = n > 1 && n <= enc::PieceCache::kMaxLen ? enc::piece_hash(key, n) : 0;
        u8 k = 0;
        if (n == 1) {
            p[w++] = p[start];
        } else if (const u32 *hit = h ? cache.parts.get(key, n, h, k) : nullptr) {
            any |= k != n;
            for (u32 j = 0; j < k; ++j) p[w + j] = hit[j];
            w += k;
        } else {
            const u32 m = one(p + start, n);
            const u32 got = m == kNone ? n : m;
            if (h) cache.parts.put(key, n, h, p + start, got);
            any |= m != kNone;
            for (u32 j = 0; j < got; ++j) p[w + j] = p[start + j];
            w += got;
        }
        start = i;
    }
    return any ? w : kNone;
}

// Applies the logged merges to one word's tokens p[0, len) (len >= 2) in place: its new length,
// or kNone when no logged merge has a pair in it. rk: scratch, reused from word to word.
u32 replay_word(const ReplayLog &log, u32 *p, u32 len, std::vector<u32> &rk) {
    rk.resize(len);
    for (u32 i = 0; i + 1 < len; ++i) rk[i] = log.first_rank(p[i], p[i + 1]);
    u32 done = kNone;
    while (len >= 2) {
        u32 best = kNone;
        for (u32 i = 0; i + 1 < len; ++i) best = rk[i] < best ? rk[i] : best;
        if (best == kNone) break;
        len = merge_rank(log, p, len, rk, best);
        done = best;
    }
    return done == kNone ? kNone : len;
}

}  // namespace

// The loaded words, caught up with `replay` if it holds merges, then their pairs counted.
// from_file: the words came from a words file (merge_words_file.cpp), which a replay made: they
// are packed and their pairs counted pruned even when nothing is replayed now.
void MergeEngine::build(u32 n_specials, nb::bytes replay, bool from_file) {
    const size_t n = replay.size() / 12;
    if (replay.size() % 12 != 0) throw nb::value_error("replay must hold (left, right, token) u32 triples");
    if (n == 0 && !from_file) {
        build_pairs(n_specials);
        return;
    }
    std::vector<u32> log(3 * n);
    const u8 *src = reinterpret_cast<const u8 *>(replay.c_str());
    for (size_t k = 0; k < 3 * n; ++k)
        log[k] = u32(src[4 * k]) | u32(src[4 * k + 1]) << 8 | u32(src[4 * k + 2]) << 16 |
                 u32(src[4 * k + 3]) << 24;  // little-endian, whatever the host
    for (size_t i = 0; i < n; ++i) {  // Why check: a damaged log must be an error, not wrong words
        const u32 a = log[3 * i], b = log[3 * i + 1], t = log[3 * i + 2];
        const size_t top = tb_.size();
        if (a >= top || b >= top || t >= top || !tb_ok_[a] || !tb_ok_[b] || !tb_ok_[t] ||
            tb_[t] != tb_[a] + tb_[b])
            throw nb::value_error("a logged merge does not match the vocabulary");
    }
    {
        nb::gil_scoped_release unlocked;
        if (n != 0) replay_words(log, n_specials);
        // After any replay, as in SuperBPE's stage 2 (merge_prune.cpp, exact): the arena packed
        // and the rare pairs given no slot. Why every replay: a run extending a base, or a store
        // continued past its end, replays thousands of merges on words that were bytes, so the
        // arena is mostly padding and most pairs are rare: zhwiki-20M's 515 K words after a 16 K
        // store's merges hold 1.34 M distinct pairs, 167 K of them counted 4 times or more, and
        // the slots, lists and heap of the others were ~0.35 of the engine's ~1.3 CPU s. What it
        // costs: a full checkpoint (after checkpoint_seconds of merging) counts the pairs again,
        // unpruned, before writing them all; a short run never reaches one.
        compact_arena();
        prune_below_ = kSuperwordPruneBelow;
        build_pairs(n_specials);
    }
    forget_stored_pairs();  // the store's are those of the words before the replay
}

// The store holds no pair counts of these words (a replay, or a finished run's store): the
// next checkpoint empties its table and writes every live pair (rewrite_pairs).
void MergeEngine::forget_stored_pairs() {
    for (u32 s = 0; s < slots_.size(); ++s) {
        slots_[s].stored = 0;
        if (slots_[s].count > 0) mark_changed_pair(s);
    }
    rewrite_pairs_ = true;
}

// Applies the logged merges `log` (rank order) to every word, marking the words it changes.
// A word's tokens after merges r0..r1 are found by applying, again and again, the lowest-ranked
// logged merge above the last one applied whose pair the word holds: merges in between have no
// pair in the word, so this is exactly what merging every word rank by rank makes. A pair may
// come back under a later rank (a merge whose bytes are an existing token reuses that id), so
// each pair keeps its ranks in a chain. Why here, not apply() per merge: no pair counts, lists
// or heap are kept up to date through the replay, and words are independent, so two threads
// take half the arena each (they write only their own words).
void MergeEngine::replay_words(const std::vector<u32> &log, u32 base) {
    const ReplayLog ranks(log, base);
    const ReplayCuts cuts(log, tb_);
    auto run = [&](size_t from, size_t to, std::vector<u32> &changed) {
        std::vector<u32> rk;  // rk[i]: the lowest rank of pair (p[i], p[i + 1]) still to come
        LongScratch long_scratch;
        ReplayCache cache;
        auto one = [&](u32 *p, u32 len) {
            if (len < 2) return kNone;
            return len >= kLongWord ? replay_long(ranks, p, len, long_scratch) : replay_word(ranks, p, len, rk);
        };
        for (size_t o = from; o < to; o = next_word(o)) {
            const u32 len = ar_[o + kLen];
            if (len < 2) continue;
            const u32 merged = len >= kPartsWord ? replay_parts(cuts, cache, &ar_[o + kHdr], len, base, one)
                                                : one(&ar_[o + kHdr], len);
            if (merged == kNone) continue;
            shorten(o, merged);
            ar_[o + kStamp] |= kChangedBit;
            changed.push_back(u32(o));
        }
    };
    // split at the first word past half the arena: the halves hold about as many tokens
    size_t mid = 0;
    while (mid < ar_.size() && mid < ar_.size() / 2) mid = next_word(mid);
    std::vector<u32> first, second;
    const bool two = n_words_ >= 100000 && std::thread::hardware_concurrency() > 1;
    std::thread other;
    if (two) other = std::thread([&] { run(mid, ar_.size(), second); });
    run(0, two ? mid : ar_.size(), first);
    if (two) other.join();
    changed_words_.reserve(changed_words_.size() + first.size() + second.size());
    for (u32 o : first) changed_words_.push_back(o);
    for (u32 o : second) changed_words_.push_back(o);
}

}  // namespace bpe::merge

