// BPE of one pre-token ("piece"): the merge rule of bpe_store/bpe.py (the spec, tested equal) and
// tiktoken's, with the thread's piece cache in front.
//
// * Merge by rank (trained stores): repeatedly find the adjacent pair with the lowest merge rank and
//   merge every occurrence of it, left to right (a round), until no pair of the table is left.
// * tiktoken's rules (`Tokenizer.from_tiktoken`): a piece that is a token is that token (one probe
//   of the token index, after the piece cache), else one merge at a time of the leftmost pair whose
//   merged token has the lowest id. A pair made by a merge competes at once, so a pair that ranks
//   below the merge that made it (possible in tiktoken's ranks) goes first, as in tiktoken.
//
// Why it looks the way it does:
// * Every adjacent pair's (rank, merged id) is kept beside the ids: a step finds the lowest by a
//   scan of that small array, without hashing, and looks up only the pairs beside the tokens it
//   made. A piece's first n - 1 pairs are pairs of bytes, read from the pair table's dense byte
//   table (pair_table.h) without a probe.
// * Pieces up to kShort bytes are merged in stack arrays (a scan per step costs less than a heap
//   at that size); longer ones (CJK runs, long numbers and whitespace) take a heap over (rank,
//   position) and a linked list, O(n log n): rescanning a 300-byte piece once per merge is what
//   made Chinese text slow. A heap entry carries its pair's two ids, so a stale entry is seen by
//   comparing them, not by looking the pair up again.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <climits>
#include <cstring>
#include <tuple>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

#include "pair_table.h"
#include "piece_cache.h"
#include "token_index.h"

namespace bpe::enc {

class PieceBpe {
  public:
    static constexpr size_t kShort = 128;  // longer pieces take the heap path (at most 255: uint8 links)

    void build(const std::vector<uint32_t> &byte_ids, const std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> &merges) {
        std::copy(byte_ids.begin(), byte_ids.end(), byte_id_);
        table_.build(merges);
        table_.build_bytes(byte_id_);
        merged_by_rank_.resize(merges.size());
        for (size_t r = 0; r < merges.size(); ++r) merged_by_rank_[r] = std::get<2>(merges[r]);
    }
    // tiktoken's rules from now on, with `whole` the tokens' index
    void use_tiktoken(bool on) { tiktoken_ = on; }
    TokenIndex &whole() { return whole_; }

    // A piece's cache keys, computed (and its cache line asked for) a few pieces before the piece is
    // encoded (Encoder::encode_plain): `k` its short table key (2-15 bytes; else 0), `h` that key's
    // hash, or for 16-22 bytes the 64-byte cache's hash (piece_hash).
    struct Ask {
        u128 k;
        uint64_t h;
    };
    // The piece p[0..n) of a text that ends at `end` (the short key may read up to 16 bytes from p).
    static inline Ask ask(const uint8_t *p, size_t n, const uint8_t *end, const PieceCache &cache) {
        if (n >= 2 && n <= ShortTable::kMaxLen) {
            const u128 k = ShortTable::pack(p, n, end);
            const uint64_t h = ShortTable::hash(k);
            cache.shorts().prefetch(h);
            return {k, h};
        }
        if (n > ShortTable::kMaxLen && n <= PieceCache::kMaxLen) {
            const uint64_t h = piece_hash(p, n);
            cache.prefetch(h);
            return {0, h};
        }
        return {0, 0};
    }

    // BPE of one piece, appended to `out`.
    void bpe(const uint8_t *p, size_t n, PieceCache &cache, std::vector<uint32_t> &out) const {
        bpe(p, n, ask(p, n, p + n, cache), cache, out);
    }
    // bpe() of a piece asked for (ask)
    void bpe(const uint8_t *p, size_t n, Ask a, PieceCache &cache, std::vector<uint32_t> &out) const {
        if (n == 1) {
            out.push_back(byte_id_[p[0]]);
            return;
        }
        uint64_t h = a.h;  // the 64-byte cache's hash, where it is asked
        if (a.k) {
            uint8_t k;
            if (const uint32_t *hit = cache.shorts().get(a.k, a.h, k)) {
                if (k) {
                    // why not out.insert(range): a call to memmove per piece for 1-4 ids
                    for (uint8_t j = 0; j < k; ++j) out.push_back(hit[j]);
                    return;
                }
                h = piece_hash(p, n);  // more than 4 ids: in the 64-byte cache
                if (const uint32_t *more = cache.get(p, n, h, k)) {
                    for (uint8_t j = 0; j < k; ++j) out.push_back(more[j]);
                    return;
                }
            } else {
                h = 0;
            }
        } else if (n <= PieceCache::kMaxLen) {
            uint8_t k;
            if (const uint32_t *hit = cache.get(p, n, h, k)) {
                for (uint8_t j = 0; j < k; ++j) out.push_back(hit[j]);
                return;
            }
        }
        if (tiktoken_) {  // tiktoken: a piece that is a token is that token
            uint32_t whole = whole_.find(p, n, h ? h : piece_hash(p, n));
            if (whole != kNone) {
                if (a.k) cache.shorts().put(a.k, a.h, &whole, 1);
                else if (n <= PieceCache::kMaxLen) cache.put(p, n, h, &whole, 1);
                out.push_back(whole);
                return;
            }
        }
        if (n > kShort) {
            bpe_long(p, n, cache.scratch, out);
            return;
        }
        uint32_t ids[kShort];
        size_t m = !tiktoken_ ? merge_short_rounds(p, n, ids, cache.pairs)
                   : kAvx2 && n > 16 ? merge_short_tiktoken<true>(p, n, ids, cache.pairs)
                                     : merge_short_tiktoken<false>(p, n, ids, cache.pairs);
        keep(p, n, a, h, ids, m, cache);
        for (size_t j = 0; j < m; ++j) out.push_back(ids[j]);
    }

  private:
    // Put a piece's ids in the piece cache: a short piece's in the short table (more than 4: in the
    // 64-byte cache, marked there); one of 16-22 bytes in the 64-byte cache. `h`: its piece_hash, or 0.
    static void keep(const uint8_t *p, size_t n, Ask a, uint64_t h, const uint32_t *ids, size_t m, PieceCache &cache) {
        if (a.k) {
            cache.shorts().put(a.k, a.h, ids, m);
            if (m > ShortTable::kMaxIds) cache.put(p, n, h ? h : piece_hash(p, n), ids, m);
        } else if (n <= PieceCache::kMaxLen) {
            cache.put(p, n, h, ids, m);
        }
    }

    // Merge by rank, rounds, on a short piece: ids written to `ids`; returns their number. A round
    // merges every pair of the lowest rank left to right (a rank is one pair); then only the pairs
    // beside a new token are looked up, the others keep their (rank, merged id).
    size_t merge_short_rounds(const uint8_t *p, size_t n, uint32_t *ids, PairMemo &memo) const {
        Rank rk[kShort];
        for (size_t i = 0; i < n; ++i) ids[i] = byte_id_[p[i]];
        for (size_t i = 0; i + 1 < n; ++i) rk[i] = table_.find_bytes(p[i], p[i + 1]);
        size_t m = n;
        while (m > 1) {
            uint32_t best = kNone;
            for (size_t i = 0; i + 1 < m; ++i) best = std::min(best, rk[i].rank);
            if (best == kNone) break;
            size_t w = 0, left_at = 0;  // left_at: where the last written token was read from
            bool left_new = false;
            for (size_t i = 0; i < m;) {
                const bool merge = i + 1 < m && rk[i].rank == best;
                const uint32_t id = merge ? rk[i].merged : ids[i];
                if (w > 0) rk[w - 1] = left_new || merge ? pair(ids[w - 1], id, memo) : rk[left_at];
                ids[w++] = id;
                left_new = merge;
                left_at = i;
                i += merge ? 2 : 1;
            }
            m = w;
        }
        return m;
    }

    // tiktoken's rule on a short piece: each adjacent pair's merged id (its rank) is kept in `rk`
    // at the position of its left token; a step merges the leftmost lowest and looks up only the two
    // pairs beside it, as tiktoken does. Positions stay put (a merged-away one holds kDead and is
    // skipped by the links), so a step moves no memory, and its scan for the lowest rank is a
    // branch-free min over a fixed array the compiler vectorizes: ranks are stored with the sign bit
    // flipped, an unsigned order as a signed one (SSE2 has a signed compare, no unsigned min).
    template <bool Avx2>
    size_t merge_short_tiktoken(const uint8_t *p, size_t n, uint32_t *ids, PairMemo &memo) const {
        constexpr int32_t kDead = INT32_MAX;  // kNone, flipped
        auto flip = [](uint32_t r) { return int32_t(r ^ 0x80000000u); };
        int32_t rk[kShort];
        uint8_t nxt[kShort + 1], prv[kShort];
        for (size_t i = 0; i < n; ++i) {
            ids[i] = byte_id_[p[i]];
            nxt[i] = uint8_t(i + 1);
            prv[i] = uint8_t(i - 1);  // 255 for the first: never read
        }
        for (size_t i = 0; i + 1 < n; ++i) rk[i] = flip(table_.find_bytes(p[i], p[i + 1]).merged);
        for (size_t i = n - 1; i < ((n + 15) & ~size_t(15)); ++i) rk[i] = kDead;  // first_at reads 16 at a time
        for (size_t m = n; m > 1; --m) {
            const int32_t best = Avx2 ? lowest_avx2(rk, n) : lowest(rk, n);
            if (best == kDead) break;
            const size_t at = first_at(rk, best);
            const size_t j = nxt[at];
            ids[at] = uint32_t(best) ^ 0x80000000u;  // the merged token, whose id is its rank
            rk[j] = kDead;
            nxt[at] = nxt[j];
            if (nxt[at] < n) {
                prv[nxt[at]] = uint8_t(at);
                rk[at] = flip(pair(ids[at], ids[nxt[at]], memo).merged);
            } else {
                rk[at] = kDead;
            }
            if (at > 0) rk[prv[at]] = flip(pair(ids[prv[at]], ids[at], memo).merged);
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i = nxt[i]) ids[m++] = ids[i];
        return m;
    }

    // The lowest of rk[0..n), read 4 at a time (rk holds kDead up to a multiple of 16). Why by
    // hand: SSE2, the baseline, has no 32-bit min, and the compiler's loop for it ran one compare
    // and one branch per rank: a quarter of the instructions of encoding Chinese (callgrind).
    static inline int32_t lowest(const int32_t *rk, size_t n) {
#if defined(__SSE2__)
        auto min4 = [](__m128i a, __m128i b) {
            const __m128i gt = _mm_cmpgt_epi32(a, b);
            return _mm_or_si128(_mm_and_si128(gt, b), _mm_andnot_si128(gt, a));
        };
        auto at = [&](size_t i) { return _mm_loadu_si128(reinterpret_cast<const __m128i *>(rk + i)); };
        __m128i m = at(0);
        for (size_t i = 4; i < n; i += 4) m = min4(m, at(i));
        m = min4(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
        m = min4(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
        return _mm_cvtsi128_si32(m);
#else
        int32_t best = rk[0];
        for (size_t i = 1; i < n; ++i) best = std::min(best, rk[i]);
        return best;
#endif
    }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    // lowest() 8 at a time with AVX2's 32-bit min, where the CPU has it (a call per merge: a
    // function of another target is not inlined). Why: the scan for the lowest rank was 40 % of the
    // instructions of encoding Chinese with o200k_base (callgrind), whose pieces merge ~35 times.
    inline static const bool kAvx2 = __builtin_cpu_supports("avx2");
    __attribute__((target("avx2"), noinline)) static int32_t lowest_avx2(const int32_t *rk, size_t n) {
        const auto *v = reinterpret_cast<const __m256i *>(rk);
        __m256i m = _mm256_loadu_si256(v);
        for (size_t i = 1; i * 8 < n; ++i) m = _mm256_min_epi32(m, _mm256_loadu_si256(v + i));
        __m128i h = _mm_min_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
        h = _mm_min_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
        h = _mm_min_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(2, 3, 0, 1)));
        return _mm_cvtsi128_si32(h);
    }
#else
    static constexpr bool kAvx2 = false;
    static int32_t lowest_avx2(const int32_t *rk, size_t n) { return lowest(rk, n); }
#endif

    // The first i with rk[i] == v, where one i < kShort has it and rk is readable up to the group
    // of 16 that holds it. Why: a scalar scan for the lowest rank's place was 14 % of encoding
    // Chinese (pieces of ~37 bytes, a mispredicted exit per merge); SSE2 compares 16 at a time.
    static inline size_t first_at(const int32_t *rk, int32_t v) {
#if defined(__SSE2__)
        const __m128i x = _mm_set1_epi32(v);
        for (size_t i = 0;; i += 16) {
            auto eq = [&](size_t j) {
                const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i *>(rk + i + j));
                return unsigned(_mm_movemask_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(y, x))));
            };
            const unsigned m = eq(0) | eq(4) << 4 | eq(8) << 8 | eq(12) << 12;
            if (m) return i + size_t(__builtin_ctz(m));
        }
#else
        size_t at = 0;
        while (rk[at] != v) ++at;
        return at;
#endif
    }

    // A long piece. Positions below are 32-bit (kNone marks "none"): a piece of 4 GiB or more (no
    // trained store holds one: training splits pre-tokens at max_pretoken_bytes) is encoded in
    // parts of at most 2 GiB cut at character starts, instead of overflowing them.
    void bpe_long(const uint8_t *p, size_t n, HeapScratch &scratch, std::vector<uint32_t> &out) const {
        if (n >= kNone) {
            for (size_t at = 0; at < n;) {
                size_t end = std::min(n, at + (size_t(1) << 31));
                while (end < n && end > at + 1 && (p[end] & 0xC0) == 0x80) --end;
                bpe_heap(p + at, end - at, scratch, out);
                at = end;
            }
            return;
        }
        bpe_heap(p, n, scratch, out);
    }

    // table_.find through the thread's memo
    inline Rank pair(uint32_t a, uint32_t b, PairMemo &memo) const {
        return memo.get(a, b, [this](uint32_t x, uint32_t y) { return table_.find(x, y); });
    }

    // the rank a heap orders by: tiktoken's is the merged token's id
    inline uint32_t order_of(Rank r) const { return tiktoken_ ? r.merged : r.rank; }

    // bpe_long of a piece shorter than 4 GiB: the heap over (rank, position) and a linked list.
    // The thread's scratch is reached through its piece cache: no allocation per piece once the
    // buffers have grown, and no thread_local lookup per piece (in a shared library each one is a
    // __tls_get_addr call: 4.5 % of encoding Chinese, whose long pieces all come here).
    void bpe_heap(const uint8_t *p, size_t n, HeapScratch &s, std::vector<uint32_t> &out) const {
        std::vector<uint32_t> &id = s.id, &nxt = s.nxt, &prv = s.prv;
        s.heap.clear();
        id.resize(n);
        nxt.resize(n);
        prv.resize(n);
        for (size_t i = 0; i < n; ++i) {
            id[i] = byte_id_[p[i]];
            nxt[i] = uint32_t(i + 1);  // n = none
            prv[i] = i ? uint32_t(i - 1) : kNone;
        }
        for (size_t i = 0; i + 1 < n; ++i) {
            Rank r = table_.find_bytes(p[i], p[i + 1]);
            if (r.rank != kNone) s.heap.push_back({uint64_t(order_of(r)) << 32 | i, id[i], id[i + 1]});
        }
        std::make_heap(s.heap.begin(), s.heap.end(), later);
        heap_rounds(s, uint32_t(n));
        for (uint32_t i = 0; i < n; i = nxt[i]) out.push_back(id[i]);
    }

    // the heap's order, a type (not a function pointer, which std::push_heap would call indirectly
    // at every comparison)
    struct Later {
        bool operator()(const HeapItem &a, const HeapItem &b) const { return a.key > b.key; }
    };
    static constexpr Later later{};

    // The merges of bpe_heap: rounds of one rank, each entry in position order (the heap's tie order).
    void heap_rounds(HeapScratch &s, uint32_t n) const {
        std::vector<uint32_t> &id = s.id, &nxt = s.nxt, &prv = s.prv, &merged = s.merged;
        auto &heap = s.heap;
        auto look = [&](uint32_t i) {  // queue the pair at i, if it merges
            if (i == kNone || nxt[i] >= n) return;
            Rank r = table_.find(id[i], id[nxt[i]]);
            if (r.rank == kNone) return;
            heap.push_back({uint64_t(order_of(r)) << 32 | i, id[i], id[nxt[i]]});
            std::push_heap(heap.begin(), heap.end(), later);
        };
        while (!heap.empty()) {
            const uint32_t r = uint32_t(heap.front().key >> 32);
            merged.clear();
            while (!heap.empty() && uint32_t(heap.front().key >> 32) == r) {
                const HeapItem top = heap.front();
                std::pop_heap(heap.begin(), heap.end(), later);
                heap.pop_back();
                const uint32_t i = uint32_t(top.key), j = nxt[i];
                if (id[i] != top.left || j >= n || id[j] != top.right) continue;  // stale
                id[i] = tiktoken_ ? r : merged_by_rank_[r];
                id[j] = kNone;
                nxt[i] = nxt[j];
                if (nxt[j] < n) prv[nxt[j]] = i;
                if (tiktoken_) {  // tiktoken: the new pairs compete at once
                    look(prv[i]);
                    look(i);
                } else {
                    merged.push_back(i);
                }
            }
            for (uint32_t i : merged) {  // the round's new pairs enter only now, as in the spec's rescan
                if (id[i] == kNone) continue;
                look(prv[i]);
                look(i);
            }
        }
    }

    uint32_t byte_id_[256];
    PairTable table_;
    std::vector<uint32_t> merged_by_rank_;  // merge by rank: a rank's merged id
    bool tiktoken_ = false;
    TokenIndex whole_;  // tiktoken: the tokens, for a piece that is one
};

}  // namespace bpe::enc
