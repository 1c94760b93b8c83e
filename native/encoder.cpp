// BPE encoding by merge rank: the hot loop of `Tokenizer.encode`, `encode_batch` and
// `bpe-store encode`. Same definition as bpe_store/tokenizer/tokenizer.py (the spec, tested equal):
// per pre-token, repeatedly find the adjacent pair with the lowest merge rank and merge every
// occurrence of it, left to right, until no pair of the merge table is left.
//
// Performance notes (why the code looks the way it does):
// * The merge table is an open-addressing hash keyed by (left << 32 | right): one multiply, one
//   probe in the common case, no allocation, no pointer chasing. Its slot comes from the top
//   bits of the product: the low bits ignore `left`, and using them made every pair with the
//   same right token collide (enwiki encoding went from 15 to 57 MB/s when this was fixed).
// * Most pre-tokens are frequent words. Each thread owns a direct-mapped cache of short pieces
//   (<= 22 bytes, <= 8 ids) stored inline in fixed slots: a hit is a hash and a compare; a miss
//   overwrites the slot. No locks (per thread), no allocation, bounded memory (4 MB).
// * Pieces of up to 16 bytes are merged in a stack buffer; the O(n^2) rescan per merge costs
//   nothing at that size.
// * Special tokens, the pattern's scan and the cut points come from the one splitter (splitter.h),
//   and everything between reading the arguments and building the result runs with the GIL
//   released.
// * Pieces over 16 bytes (CJK runs, long numbers, whitespace) take a heap + linked-list path
//   with the same rounds, O(n log n) instead of O(n^2) rescans.
// * Parallelism: a text is cut at its special tokens and into blocks at points no pre-token
//   crosses (the pattern's local cut; GPT-2's is found every few characters in English and in
//   Chinese alike, so CJK text runs on every thread in bounded blocks too), blocks go to threads through
//   one atomic counter, and each block's ids are concatenated in order, so the result does not
//   depend on the number of threads. The threads are a persistent pool, so their piece caches
//   stay warm from one call (one 16 MB block of a file) to the next.
// * Results go back as a NumPy array owning the C++ buffer (no copy), or as lists built from
//   one cached Python int per id (an INCREF each, no allocation).
// * tiktoken's rules (`use_tiktoken_rules`, for `Tokenizer.from_tiktoken`): a piece that is a
//   token is that token (one probe of a hash over the tokens' bytes, after the piece cache), else
//   one merge at a time of the leftmost pair whose merged token has the lowest id. Short pieces
//   keep each pair's rank and look up only the two pairs beside a merge (merge_short_tiktoken);
//   the heap path is shared, but queues the pairs a merge makes at once instead of after the
//   round, so a pair that ranks below the merge that made it (possible in tiktoken's ranks) goes
//   first, as in tiktoken. The 68K distinct pieces of 5 MB of enwiki take 0.08 s with cl100k_base.
// * Bytes from a file are checked as UTF-8 here, with the GIL released, instead of being
//   decoded to a str in Python (which costs 1-4 bytes a character and a UTF-8 copy back).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "splitter.h"
#include "tiktoken_ranks.h"
#include "utf8.h"

namespace nb = nanobind;

bpe::detail::Pattern pattern_of(const std::string &name);  // splitter.cpp

namespace {

constexpr uint32_t kNone = 0xFFFFFFFFu;

// {(left, right): (rank, merged id)} as open addressing; rank is the merge's position.
class MergeTable {
  public:
    void build(const std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> &merges) {
        size_t cap = 16;
        shift_ = 60;
        while (cap < merges.size() * 2 + 2) cap <<= 1, --shift_;
        mask_ = cap - 1;
        slots_.assign(cap, Slot{kEmpty, kNone, kNone});
        for (size_t r = 0; r < merges.size(); ++r) {
            const auto &[a, b, t] = merges[r];
            uint64_t k = key(a, b);
            size_t i = slot(k);
            while (slots_[i].key != kEmpty && slots_[i].key != k) i = (i + 1) & mask_;
            if (slots_[i].key == k) continue;  // a repeated pair keeps its first rank
            slots_[i] = Slot{k, uint32_t(r), t};
        }
    }
    // (rank, merged id) of the pair, or rank kNone
    inline std::pair<uint32_t, uint32_t> find(uint32_t a, uint32_t b) const {
        uint64_t k = key(a, b);
        for (size_t i = slot(k);; i = (i + 1) & mask_) {
            const Slot &s = slots_[i];
            if (s.key == k) return {s.rank, s.merged};
            if (s.key == kEmpty) return {kNone, kNone};
        }
    }

  private:
    static constexpr uint64_t kEmpty = ~uint64_t(0);
    static inline uint64_t key(uint32_t a, uint32_t b) { return (uint64_t(a) << 32) | b; }
    // Fibonacci hashing: the product's top bits depend on every bit of the key (the low bits
    // would ignore `left`, and all pairs with one right token would collide)
    inline size_t slot(uint64_t k) const { return size_t((k * 0x9E3779B97F4A7C15ull) >> shift_); }
    // key and value in one 16-byte slot: a probe is one cache miss, not two (the keys and the values
    // were two arrays; the pair lookups of long pieces, Chinese text's, waited on both)
    struct Slot {
        uint64_t key;
        uint32_t rank, merged;
    };
    std::vector<Slot> slots_;
    size_t mask_ = 0;
    unsigned shift_ = 60;
};

// A thread's buffers for the heap path (long pieces), kept in its piece cache.
struct HeapScratch {
    std::vector<uint32_t> id, nxt, prv, merged;
    std::vector<uint64_t> heap;  // (rank << 32 | position), a min-heap
};

// A direct-mapped cache of short pieces -> ids, one per thread.
class PieceCache {
  public:
    HeapScratch scratch;
    static constexpr size_t kMaxLen = 22, kMaxIds = 8;
    // calloc: the OS hands out zero pages lazily, so a short call touches only the slots it uses
    PieceCache() : n_slots_(slots_wanted()), slots_(static_cast<Slot *>(std::calloc(n_slots_, sizeof(Slot)))) {
        if (!slots_) throw std::bad_alloc();
    }
    // How many slots (64 bytes each): BPE_STORE_PIECE_CACHE_SLOTS, a power of two from 2^10 to 2^22,
    // else 2^16 (4 MiB). Why a knob: a hit costs a load from this table, so a smaller one that stays
    // in L2 can beat a larger one that hits more often; docs/performance.md has the measurements.
    static size_t slots_wanted() {
        const char *v = std::getenv("BPE_STORE_PIECE_CACHE_SLOTS");
        size_t n = v ? size_t(std::strtoull(v, nullptr, 10)) : 0;
        return n >= (1u << 10) && n <= (1u << 22) && (n & (n - 1)) == 0 ? n : size_t(1) << 16;
    }
    void clear() { std::memset(slots_.get(), 0, n_slots_ * sizeof(Slot)); }
    inline const uint32_t *get(const uint8_t *p, size_t n, uint64_t h, uint8_t &nids) const {
        const Slot &s = slots_[h & (n_slots_ - 1)];
        if (s.len == n + 1 && s.hash == h && bpe::detail::equal_bytes(reinterpret_cast<const uint8_t *>(s.key), p, n)) {
            nids = s.nids;
            return s.ids;
        }
        return nullptr;
    }
    inline void put(const uint8_t *p, size_t n, uint64_t h, const uint32_t *ids, size_t nids) {
        if (n > kMaxLen || nids > kMaxIds) return;
        Slot &s = slots_[h & (n_slots_ - 1)];
        s.hash = h;
        s.len = uint8_t(n + 1);
        std::memcpy(s.key, p, n);
        s.nids = uint8_t(nids);
        std::memcpy(s.ids, ids, nids * sizeof(uint32_t));
    }
    // The counter's word hash (scanner_impl.h: 8-byte loads and a 128-bit multiply fold). Why not
    // a byte-at-a-time FNV: with OpenAI's 100 K-200 K tokens nearly every piece is a cache hit
    // or one whole-token probe, so hashing and comparing are most of a piece's cost.
    static inline uint64_t hash(const uint8_t *p, size_t n) { return bpe::detail::key_of(p, n).hash; }

  private:
    struct Slot {
        uint64_t hash;
        uint8_t len;  // key length + 1; 0 = empty
        uint8_t nids;
        char key[kMaxLen];
        uint32_t ids[kMaxIds];
    };
    struct Free {
        void operator()(Slot *p) const { std::free(p); }
    };
    size_t n_slots_;
    std::unique_ptr<Slot[], Free> slots_;
};

// The calling thread's cache, emptied when it last served another encoder: one encoder's ids
// never leak into another's, and repeated small calls (CS336-style encode per line) reuse it.
PieceCache &thread_cache(uint64_t owner) {
    thread_local std::unique_ptr<PieceCache> cache;
    thread_local uint64_t served = 0;
    if (!cache) cache.reset(new PieceCache());
    if (served != owner) {
        if (served != 0) cache->clear();
        served = owner;
    }
    return *cache;
}

std::atomic<uint64_t> next_encoder_uid{1};

// {token bytes: id}, for tiktoken's rule that a piece which is a token is that token: open
// addressing over (hash, place in one arena of bytes, length, id); no allocation per lookup.
class TokenIndex {
  public:
    void build(const std::vector<std::pair<nb::bytes, uint32_t>> &tokens) {
        std::vector<std::pair<std::string_view, uint32_t>> views;
        views.reserve(tokens.size());
        for (const auto &[b, id] : tokens) views.emplace_back(std::string_view(b.c_str(), b.size()), id);
        build_views(views);
    }
    void build_views(const std::vector<std::pair<std::string_view, uint32_t>> &tokens) {
        size_t cap = 16;
        while (cap < tokens.size() * 2 + 2) cap <<= 1;
        mask_ = cap - 1;
        slots_.assign(cap, Slot{0, 0, 0, kNone});
        arena_.clear();
        size_t total = 0;
        for (const auto &t : tokens) total += t.first.size();
        if (total >= kNone) throw std::invalid_argument("the tokens hold 4 GiB or more");
        for (const auto &[b, id] : tokens) {
            const auto *p = reinterpret_cast<const uint8_t *>(b.data());
            if (id == kNone) throw std::invalid_argument("token id out of range");
            uint64_t h = PieceCache::hash(p, b.size());
            if (find(p, b.size(), h) != kNone) continue;  // a repeated token keeps its first id
            size_t i = h & mask_;
            while (slots_[i].id != kNone) i = (i + 1) & mask_;
            slots_[i] = Slot{uint32_t(h >> 32), uint32_t(arena_.size()), uint32_t(b.size()), id};
            arena_.append(b.data(), b.size());
        }
    }
    void build(const bpe::TiktokenRanks &ranks) {
        std::vector<std::pair<std::string_view, uint32_t>> tokens;
        tokens.reserve(ranks.size());
        for (size_t i = 0; i < ranks.size(); ++i) tokens.emplace_back(ranks.token(i), ranks.id(i));
        build_views(tokens);
    }
    bool empty() const { return arena_.empty(); }
    // the id of the token p[0..n) (h = PieceCache::hash(p, n)), or kNone
    inline uint32_t find(const uint8_t *p, size_t n, uint64_t h) const {
        if (slots_.empty()) return kNone;
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            const Slot &s = slots_[i];
            if (s.id == kNone) return kNone;
            if (s.tag == uint32_t(h >> 32) && s.len == n &&
                bpe::detail::equal_bytes(reinterpret_cast<const uint8_t *>(arena_.data()) + s.at, p, n))
                return s.id;
        }
    }

  private:
    // 16 bytes: cl100k_base's 100 K tokens take 4 MiB of slots instead of 8 (a probe is a cache
    // miss into this table on every piece the piece cache misses); the slot is the hash's low
    // bits, the tag its high ones
    struct Slot {
        uint32_t tag, at, len;
        uint32_t id;  // kNone = empty
    };
    std::vector<Slot> slots_;
    std::string arena_;
    size_t mask_ = 0;
};

// A few worker threads kept for the life of the process. Why not a new std::thread per call:
// each thread owns a piece cache, and a fresh thread starts cold (a cold cache costs about a
// third of the speed on a 16 MB block); kept threads keep theirs warm across the blocks of a
// file. Calls that want threads are serialized (one job at a time); the caller works too.
class Pool {
  public:
    void run(size_t n, std::function<void()> job) {
        std::lock_guard<std::mutex> one_job(run_mutex_);
        std::unique_lock<std::mutex> lk(m_);
        while (workers_.size() + 1 < n) workers_.emplace_back([this, i = workers_.size()] { loop(i); });
        job_ = std::move(job);
        want_ = n - 1;
        active_ = n - 1;
        ++gen_;
        lk.unlock();
        cv_.notify_all();
        std::exception_ptr err;
        try {
            job_();
        } catch (...) {
            err = std::current_exception();
        }
        lk.lock();
        done_.wait(lk, [&] { return active_ == 0; });
        job_ = nullptr;
        if (!err) err = worker_err_;
        worker_err_ = nullptr;
        if (err) std::rethrow_exception(err);
    }

  private:
    void loop(size_t index) {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lk(m_);
        for (;;) {
            cv_.wait(lk, [&] { return gen_ != seen; });
            seen = gen_;
            if (index >= want_) continue;
            lk.unlock();
            std::exception_ptr e;
            try {
                job_();
            } catch (...) {  // e.g. bad_alloc: handed to the caller, never lost in a thread
                e = std::current_exception();
            }
            lk.lock();
            if (e && !worker_err_) worker_err_ = e;
            if (--active_ == 0) done_.notify_one();
        }
    }
    std::mutex run_mutex_, m_;
    std::condition_variable cv_, done_;
    std::vector<std::thread> workers_;
    std::function<void()> job_;
    std::exception_ptr worker_err_;
    uint64_t gen_ = 0;
    size_t want_ = 0, active_ = 0;
};

// The process's pool, made again in a forked child (a child inherits no threads). Never
// destroyed: idle workers block on a condition variable and end with the process.
Pool &pool() {
    static Pool *p = nullptr;
    static pid_t owner = 0;
    static std::mutex m;
    std::lock_guard<std::mutex> lk(m);
    if (p == nullptr || owner != getpid()) {
        p = new Pool();
        owner = getpid();
    }
    return *p;
}

std::vector<std::string> special_strings(const std::vector<std::pair<nb::bytes, uint32_t>> &specials) {
    std::vector<std::string> out;
    for (const auto &[b, id] : specials) {
        if (b.size() == 0) throw std::invalid_argument("special tokens must be non-empty");
        out.emplace_back(b.c_str(), b.size());
    }
    return out;
}

// A unit of parallel work: a special-free byte range, or one special token.
struct Block {
    size_t start, end;
    uint32_t special;  // kNone for text
};

class Encoder {
  public:
    Encoder(const std::vector<uint32_t> &byte_ids,
            const std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> &merges,
            const std::vector<std::pair<nb::bytes, uint32_t>> &specials, const std::string &pattern)
        : pattern_(pattern_of(pattern)), native_split(pattern_ != bpe::detail::Pattern::kNone),
          uid(next_encoder_uid.fetch_add(1)), specials_(special_strings(specials)) {
        for (const auto &sp : specials) special_ids_.push_back(sp.second);
        if (byte_ids.size() != 256) throw std::invalid_argument("byte_ids must hold 256 ids");
        std::copy(byte_ids.begin(), byte_ids.end(), byte_id_);
        table_.build(merges);
        // one Python int per id, made once: building result lists then costs an INCREF per id
        // instead of an allocation (ids above 256 are not in CPython's small-int cache)
        uint32_t top = 0;
        for (uint32_t b : byte_ids) top = std::max(top, b);
        for (const auto &m : merges) top = std::max(top, std::get<2>(m));
        for (const auto &sp : specials) top = std::max(top, sp.second);
        // bounded by the number of ids given, so that one stray huge id (a vocab.json with a gap)
        // cannot make this table take gigabytes; ids past it get a new int in to_list
        size_t given = byte_ids.size() + merges.size() + specials.size();
        size_t n_ints = std::min<size_t>(size_t(top) + 1, 2 * given + 1024);
        ints_.reserve(n_ints);
        for (size_t i = 0; i < n_ints; ++i) ints_.push_back(nb::steal(PyLong_FromSize_t(i)));
    }

  private:
    const bpe::detail::Pattern pattern_;  // the native scanner (kNone: pieces come from Python)

  public:
    const bool native_split;
    uint64_t uid;                         // identifies this encoder (and its rules) to the per-thread caches
    static constexpr size_t kShort = 16;  // longer pieces take the heap path

    // Switch to tiktoken's rules (see the notes on top); `tokens` are the ranks file's (bytes, id).
    // Called once, before any encoding: the new uid empties the per-thread caches of old ids.
    void use_tiktoken_rules(const std::vector<std::pair<nb::bytes, uint32_t>> &tokens) {
        whole_.build(tokens);
        tiktoken_ = true;
        uid = next_encoder_uid.fetch_add(1);
    }

    // tiktoken's rules from ranks read natively (Tokenizer.from_tiktoken): the bytes' ids, the pair
    // table of every split of a token into two, and the tokens, without a Python object per pair.
    static Encoder *from_tiktoken_ranks(const bpe::TiktokenRanks &ranks,
                                        const std::vector<std::pair<nb::bytes, uint32_t>> &specials,
                                        const std::string &pattern) {
        auto *e = new Encoder(ranks.byte_ids(), ranks.pairs(), specials, pattern);
        e->whole_.build(ranks);
        e->tiktoken_ = true;
        return e;
    }

    // (rank, merged id) of the pair (a, b), rank kNone if it does not merge. tiktoken ranks a pair
    // by the token it makes, whose rank is its id, so every split of one token ties.
    inline std::pair<uint32_t, uint32_t> rank(uint32_t a, uint32_t b) const {
        auto found = table_.find(a, b);
        if (tiktoken_) found.first = found.second;
        return found;
    }

    // tiktoken's rule on a short piece, in place; returns the new length. Each adjacent pair's
    // rank (its merged id, kNone if none) is kept in `rk`: a step finds the lowest without hashing,
    // merges that one pair, and looks up only the two pairs beside it (as tiktoken does), instead
    // of every pair again.
    size_t merge_short_tiktoken(uint32_t *ids, size_t m) const {
        uint32_t rk[kShort];
        for (size_t i = 0; i + 1 < m; ++i) rk[i] = table_.find(ids[i], ids[i + 1]).second;
        while (m > 1) {
            uint32_t best = kNone;
            size_t at = 0;
            for (size_t i = 0; i + 1 < m; ++i)
                if (rk[i] < best) best = rk[i], at = i;  // strict: the leftmost of equal ranks
            if (best == kNone) break;
            ids[at] = best;  // the merged token, whose id is its rank
            std::memmove(ids + at + 1, ids + at + 2, (m - at - 2) * sizeof(uint32_t));
            if (at + 2 < m - 1) std::memmove(rk + at + 1, rk + at + 2, (m - at - 3) * sizeof(uint32_t));
            --m;
            if (at + 1 < m) rk[at] = table_.find(ids[at], ids[at + 1]).second;
            if (at > 0) rk[at - 1] = table_.find(ids[at - 1], ids[at]).second;
        }
        return m;
    }

    // BPE of one piece, appended to `out`.
    void bpe(const uint8_t *p, size_t n, PieceCache &cache, std::vector<uint32_t> &out) const {
        if (n == 1) {
            out.push_back(byte_id_[p[0]]);
            return;
        }
        uint64_t h = 0;
        if (n <= PieceCache::kMaxLen) {
            h = PieceCache::hash(p, n);
            uint8_t k;
            if (const uint32_t *hit = cache.get(p, n, h, k)) {
                // why not out.insert(range): a call to memmove per piece for 1-8 ids
                for (uint8_t j = 0; j < k; ++j) out.push_back(hit[j]);
                return;
            }
        }
        if (tiktoken_) {  // tiktoken: a piece that is a token is that token
            uint32_t whole = whole_.find(p, n, n <= PieceCache::kMaxLen ? h : PieceCache::hash(p, n));
            if (whole != kNone) {
                out.push_back(whole);
                return;
            }
        }
        if (n > kShort) {
            bpe_long(p, n, cache.scratch, out);
            return;
        }
        uint32_t stack[kShort];
        uint32_t *ids = stack;
        for (size_t i = 0; i < n; ++i) ids[i] = byte_id_[p[i]];
        size_t m = n;
        if (tiktoken_) m = merge_short_tiktoken(ids, n);
        while (!tiktoken_ && m > 1) {
            uint32_t best = kNone, a = 0, b = 0, t = 0;
            for (size_t i = 0; i + 1 < m; ++i) {
                auto [r, id] = table_.find(ids[i], ids[i + 1]);
                if (r < best) {
                    best = r;
                    a = ids[i];
                    b = ids[i + 1];
                    t = id;
                }
            }
            if (best == kNone) break;
            // merge every occurrence of (a, b), left to right, as the Python spec does
            size_t w = 0;
            for (size_t i = 0; i < m;) {
                if (i + 1 < m && ids[i] == a && ids[i + 1] == b) {
                    ids[w++] = t;
                    i += 2;
                } else {
                    ids[w++] = ids[i++];
                }
            }
            m = w;
        }
        if (n <= PieceCache::kMaxLen) cache.put(p, n, h, ids, m);
        for (size_t j = 0; j < m; ++j) out.push_back(ids[j]);
    }

    // BPE of a long piece (a run of CJK letters, a long number or whitespace run): the same
    // rounds as `bpe` -- the lowest-rank pair, every occurrence left to right, then new pairs --
    // but with a heap over (rank, position) and a linked list of symbols, O(n log n) instead of
    // O(n^2): rescanning a 300-byte piece once per merge is what made Chinese text slow.
    void bpe_long(const uint8_t *p, size_t n, HeapScratch &scratch, std::vector<uint32_t> &out) const {
        // Positions below are 32-bit (kNone marks "none"). A piece of 4 GiB or more (no trained
        // store holds one: training splits pre-tokens at max_pretoken_bytes) is encoded in parts
        // of at most 2 GiB cut at character starts, instead of overflowing them.
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

    // bpe_long of a piece shorter than 4 GiB: the heap over (rank, position), in rounds.
    void bpe_heap(const uint8_t *p, size_t n, HeapScratch &scratch, std::vector<uint32_t> &out) const {
        // the thread's scratch, reached through its piece cache: no allocation per piece once the
        // buffers have grown, and no thread_local lookup per piece (in a shared library each one is
        // a __tls_get_addr call: 4.5 % of encoding Chinese, whose long pieces all come here)
        std::vector<uint32_t> &id = scratch.id, &nxt = scratch.nxt, &prv = scratch.prv, &merged = scratch.merged;
        std::vector<uint64_t> &heap = scratch.heap;
        id.resize(n);
        nxt.resize(n);
        prv.resize(n);
        heap.clear();
        for (size_t i = 0; i < n; ++i) {
            id[i] = byte_id_[p[i]];
            nxt[i] = uint32_t(i + 1);  // n = none
            prv[i] = i ? uint32_t(i - 1) : kNone;
        }
        auto push = [&](uint32_t i) {
            if (i == kNone || nxt[i] >= n) return;
            uint32_t r = rank(id[i], id[nxt[i]]).first;
            if (r == kNone) return;
            heap.push_back((uint64_t(r) << 32) | i);
            std::push_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
        };
        for (uint32_t i = 0; i + 1 < n; ++i) push(i);
        while (!heap.empty()) {
            const uint32_t r = uint32_t(heap.front() >> 32);
            merged.clear();
            // one round: every entry of rank r, in position order (the heap's tie order)
            while (!heap.empty() && uint32_t(heap.front() >> 32) == r) {
                uint32_t i = uint32_t(heap.front());
                std::pop_heap(heap.begin(), heap.end(), std::greater<uint64_t>());
                heap.pop_back();
                if (id[i] == kNone || nxt[i] >= n) continue;  // consumed, or no right neighbour
                auto [now, t] = rank(id[i], id[nxt[i]]);
                if (now != r) continue;  // stale: a neighbour changed since this entry
                uint32_t j = nxt[i];
                id[i] = t;
                id[j] = kNone;
                nxt[i] = nxt[j];
                if (nxt[j] < n) prv[nxt[j]] = i;
                if (tiktoken_) {  // tiktoken: the new pairs compete at once (see the notes on top)
                    push(prv[i]);
                    push(i);
                } else {
                    merged.push_back(i);
                }
            }
            // the pairs the round created enter only now, as in the spec's next rescan
            for (uint32_t i : merged) {
                if (id[i] == kNone) continue;
                push(prv[i]);
                push(i);
            }
        }
        for (uint32_t i = 0; i < n; i = nxt[i]) out.push_back(id[i]);
    }

    // Special-free text -> ids: the pattern's split, then BPE per piece.
    void encode_plain(const uint8_t *s, size_t n, PieceCache &cache, std::vector<size_t> &ends,
                      std::vector<uint32_t> &out) const {
        ends.clear();
        bpe::detail::scan_pattern(pattern_, s, n, [&](size_t, size_t e) { ends.push_back(e); });
        size_t prev = 0;
        for (size_t e : ends) {
            bpe(s + prev, e - prev, cache, out);
            prev = e;
        }
    }

    // Cut text into its special tokens and, between them, blocks of about `target` bytes at
    // the pattern's local cuts (splitter.h). Text without one (a single pre-token) stays one block.
    // `ordinary`: special tokens are plain text (tiktoken's encode_ordinary).
    std::vector<Block> plan(std::string_view s, size_t target, bool ordinary = false) const {
        std::vector<Block> blocks;
        const auto *u = reinterpret_cast<const uint8_t *>(s.data());
        (ordinary ? no_specials_ : specials_).split(
            u, s.size(),
            [&](size_t a, size_t b) {
                while (b - a > target) {
                    size_t found = 0;
                    for (size_t q = a + target; q < b; ++q) {
                        if (bpe::detail::pattern_local_cut(pattern_, u + a, b - a, q - a)) {
                            found = q;
                            break;
                        }
                    }
                    if (!found) break;
                    blocks.push_back({a, found, kNone});
                    a = found;
                }
                if (b > a) blocks.push_back({a, b, kNone});
            },
            [&](size_t at, size_t len, size_t k) { blocks.push_back({at, at + len, special_ids_[k]}); });
        return blocks;
    }

    // Encode the blocks of `s` on `threads` threads; the ids in order.
    std::vector<uint32_t> run_blocks(std::string_view s, const std::vector<Block> &blocks, int threads) const {
        const auto *u = reinterpret_cast<const uint8_t *>(s.data());
        if (threads <= 1 || blocks.size() <= 1) {
            PieceCache &cache = thread_cache(uid);
            std::vector<size_t> ends;
            std::vector<uint32_t> out;
            out.reserve(s.size() / 3 + 16);
            for (const Block &b : blocks) {
                if (b.special != kNone) out.push_back(b.special);
                else encode_plain(u + b.start, b.end - b.start, cache, ends, out);
            }
            return out;
        }
        std::vector<std::vector<uint32_t>> parts(blocks.size());
        std::atomic<size_t> next{0};
        auto work = [&]() {
            PieceCache &cache = thread_cache(uid);
            std::vector<size_t> ends;
            for (size_t i; (i = next.fetch_add(1)) < blocks.size();) {
                const Block &b = blocks[i];
                auto &out = parts[i];
                if (b.special != kNone) {
                    out.push_back(b.special);
                } else {
                    out.reserve((b.end - b.start) / 3 + 16);
                    encode_plain(u + b.start, b.end - b.start, cache, ends, out);
                }
            }
        };
        run_threads(std::min<size_t>(threads, blocks.size()), work);
        size_t total = 0;
        for (const auto &p : parts) total += p.size();
        std::vector<uint32_t> out;
        out.reserve(total);
        for (auto &p : parts) {
            out.insert(out.end(), p.begin(), p.end());
            std::vector<uint32_t>().swap(p);
        }
        return out;
    }

    std::vector<uint32_t> encode_text(std::string_view s, int threads, size_t block, bool ordinary = false) const {
        return run_blocks(s, plan(s, block, ordinary), threads);
    }

    template <class F>
    static void run_threads(size_t n, F &work) {
        if (n <= 1) {
            work();
            return;
        }
        pool().run(n, std::function<void()>(std::ref(work)));
    }

  private:
    std::vector<nb::object> ints_;

  public:
    // list[int] of ids, with the GIL held
    nb::list to_list(const std::vector<uint32_t> &ids) const {
        PyObject *l = PyList_New(Py_ssize_t(ids.size()));
        if (!l) throw nb::python_error();
        for (size_t j = 0; j < ids.size(); ++j) {
            PyObject *o;
            if (ids[j] < ints_.size()) {
                o = ints_[ids[j]].ptr();
                Py_INCREF(o);
            } else if (!(o = PyLong_FromUnsignedLong(ids[j]))) {
                Py_DECREF(l);
                throw nb::python_error();
            }
            PyList_SET_ITEM(l, Py_ssize_t(j), o);
        }
        return nb::steal<nb::list>(l);
    }

  private:
    uint32_t byte_id_[256];
    MergeTable table_;
    bool tiktoken_ = false;  // tiktoken's rules (use_tiktoken_rules)
    TokenIndex whole_;       // tiktoken: the tokens, for a piece that is one
    bpe::detail::SpecialSplitter specials_;
    const bpe::detail::SpecialSplitter no_specials_{std::vector<std::string>{}};  // encode_ordinary's
    std::vector<uint32_t> special_ids_;  // the id of each special, in the order given
};

int default_threads(int threads) {
    if (threads > 0) return threads;
    unsigned hc = std::thread::hardware_concurrency();
    return hc ? int(hc) : 1;
}

// ids as a 1-d uint32 NumPy array that owns its buffer (no copy)
nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>> to_array(std::vector<uint32_t> &&ids) {
    auto *v = new std::vector<uint32_t>(std::move(ids));
    nb::capsule owner(v, [](void *p) noexcept { delete static_cast<std::vector<uint32_t> *>(p); });
    return nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>>(v->data(), {v->size()}, owner);
}

// document lengths (ids per document) as a 1-d uint64 NumPy array that owns its buffer
nb::ndarray<nb::numpy, uint64_t, nb::ndim<1>> to_array64(std::vector<uint64_t> &&v0) {
    auto *v = new std::vector<uint64_t>(std::move(v0));
    nb::capsule owner(v, [](void *p) noexcept { delete static_cast<std::vector<uint64_t> *>(p); });
    return nb::ndarray<nb::numpy, uint64_t, nb::ndim<1>>(v->data(), {v->size()}, owner);
}

std::string_view utf8_of(const nb::handle &h) {
    if (PyUnicode_Check(h.ptr())) {
        Py_ssize_t n;
        const char *p = PyUnicode_AsUTF8AndSize(h.ptr(), &n);
        if (!p) throw nb::python_error();
        return {p, size_t(n)};
    }
    if (PyBytes_Check(h.ptr())) return {PyBytes_AS_STRING(h.ptr()), size_t(PyBytes_GET_SIZE(h.ptr()))};
    throw nb::type_error("expected str or bytes");
}

// A tuple of the items of a list (or any sequence), each held by a reference. Why: the views
// taken into the items' UTF-8 buffers are read with the GIL released, when another thread may
// change the caller's list and free an item; the tuple keeps every item alive until the call
// returns (it is released after the GIL is taken back). Costs one pointer copy per item.
nb::tuple snapshot(nb::handle seq) {
    PyObject *t = PySequence_Tuple(seq.ptr());
    if (!t) throw nb::python_error();
    return nb::steal<nb::tuple>(t);
}

constexpr size_t kBlock = 1 << 18;  // 256 KB of text per parallel work unit

// Encoder.encode_pieces: the Python-regex path; pre-tokens come from Python, BPE happens here.
nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>> encode_pieces(const Encoder &e, nb::handle pieces) {
    nb::tuple items = snapshot(pieces);  // holds every piece while the GIL is released
    std::vector<std::string_view> views;
    views.reserve(items.size());
    for (nb::handle h : items) views.push_back(utf8_of(h));
    std::vector<uint32_t> out;
    {
        nb::gil_scoped_release release;
        PieceCache &cache = thread_cache(e.uid);
        out.reserve(views.size() * 2);
        for (auto v : views)
            if (!v.empty()) e.bpe(reinterpret_cast<const uint8_t *>(v.data()), v.size(), cache, out);
    }
    return to_array(std::move(out));
}

// Encoder.encode: one text, parallel over blocks; UTF-8 bytes are checked first.
nb::ndarray<nb::numpy, uint32_t, nb::ndim<1>> encode(const Encoder &e, nb::handle text, int threads, bool ordinary) {
    if (!e.native_split) throw std::logic_error("this encoder has no native pre-tokenizer");
    std::string_view s = utf8_of(text);
    std::vector<uint32_t> out;
    size_t bad = s.size();
    {
        nb::gil_scoped_release release;
        if (PyBytes_Check(text.ptr()))  // a str is valid by construction
            bad = bpe::utf8_invalid_at(reinterpret_cast<const uint8_t *>(s.data()), s.size());
        if (bad == s.size()) out = e.encode_text(s, default_threads(threads), kBlock, ordinary);
    }
    if (bad != s.size())
        throw nb::value_error(("invalid UTF-8 at byte " + std::to_string(bad)).c_str());
    return to_array(std::move(out));
}

// Encoder.encode_list: one str, on this thread, as a list.
nb::list encode_list(const Encoder &e, nb::handle text, bool ordinary) {
    if (!e.native_split) throw std::logic_error("this encoder has no native pre-tokenizer");
    std::string_view s = utf8_of(text);
    if (PyBytes_Check(text.ptr())) throw nb::type_error("encode_list takes str");
    std::vector<uint32_t> out;
    {
        nb::gil_scoped_release release;
        out = e.encode_text(s, 1, kBlock, ordinary);
    }
    return e.to_list(out);
}

// Encodes views[i] into outs[i] for every i, on `threads` threads taking documents in turn.
void encode_documents(const Encoder &e, const std::vector<std::string_view> &views,
                      std::vector<std::vector<uint32_t>> &outs, int threads, bool ordinary = false) {
    std::atomic<size_t> next{0};
    auto work = [&]() {
        PieceCache &cache = thread_cache(e.uid);
        std::vector<size_t> ends;
        for (size_t i; (i = next.fetch_add(1)) < views.size();) {
            auto s = views[i];
            auto blocks = e.plan(s, s.size() + 1, ordinary);
            const auto *u = reinterpret_cast<const uint8_t *>(s.data());
            for (const Block &b : blocks) {
                if (b.special != kNone) outs[i].push_back(b.special);
                else e.encode_plain(u + b.start, b.end - b.start, cache, ends, outs[i]);
            }
        }
    };
    Encoder::run_threads(std::min<size_t>(default_threads(threads), std::max<size_t>(views.size(), 1)), work);
}

// Encoder.encode_batch: many documents, parallel over documents.
nb::list encode_batch(const Encoder &e, nb::handle texts, int threads, bool ordinary) {
    if (!e.native_split) throw std::logic_error("this encoder has no native pre-tokenizer");
    nb::tuple items = snapshot(texts);  // holds every text while the GIL is released
    std::vector<std::string_view> views;
    views.reserve(items.size());
    for (nb::handle h : items) views.push_back(utf8_of(h));
    std::vector<std::vector<uint32_t>> outs(views.size());
    {
        nb::gil_scoped_release release;
        encode_documents(e, views, outs, threads, ordinary);
    }
    nb::list result;
    for (auto &o : outs) {
        result.append(e.to_list(o));
        std::vector<uint32_t>().swap(o);
    }
    return result;
}

// The documents of a blob joined by the byte 0xFF (bpe_store.text.inputs.DOC_SEP: never in
// valid UTF-8): what a jsonl or parquet block holds.
std::vector<std::string_view> split_documents(const char *p, size_t n) {
    std::vector<std::string_view> docs;
    for (size_t start = 0;;) {
        const void *hit = std::memchr(p + start, 0xFF, n - start);
        size_t end = hit ? size_t(static_cast<const char *>(hit) - p) : n;
        docs.emplace_back(p + start, end - start);
        if (!hit) break;
        start = end + 1;
    }
    return docs;
}

// Encoder.encode_documents: each document of the blob encoded on its own, so no pre-token crosses
// a document's end. Why not encode_batch: one array of ids and one of lengths, not a list of ints
// per document (a block holds thousands of them).
nb::tuple encode_blob_documents(const Encoder &e, nb::bytes blob, int threads) {
    if (!e.native_split) throw std::logic_error("this encoder has no native pre-tokenizer");
    const char *p = blob.c_str();
    const size_t n = blob.size();
    std::vector<std::string_view> docs = split_documents(p, n);
    std::vector<std::vector<uint32_t>> outs(docs.size());
    std::vector<uint64_t> lengths(docs.size());
    std::vector<uint32_t> ids;
    size_t bad = n;  // offset in the blob of the first byte that is not UTF-8
    {
        nb::gil_scoped_release release;
        for (const auto &d : docs) {
            size_t at = bpe::utf8_invalid_at(reinterpret_cast<const uint8_t *>(d.data()), d.size());
            if (at != d.size()) {
                bad = size_t(d.data() - p) + at;
                break;
            }
        }
        if (bad == n) encode_documents(e, docs, outs, threads);
        size_t total = 0;
        for (const auto &o : outs) total += o.size();
        ids.reserve(total);
        for (size_t i = 0; i < outs.size(); ++i) {
            lengths[i] = outs[i].size();
            ids.insert(ids.end(), outs[i].begin(), outs[i].end());
            std::vector<uint32_t>().swap(outs[i]);
        }
    }
    if (bad != n) throw nb::value_error(("invalid UTF-8 at byte " + std::to_string(bad)).c_str());
    return nb::make_tuple(to_array(std::move(ids)), to_array64(std::move(lengths)));
}

}  // namespace

void register_encoder(nb::module_ &m) {
    nb::class_<Encoder>(m, "Encoder",
                        "Byte-level BPE encoder by merge rank (see bpe_store/tokenizer/tokenizer.py for the spec).")
        .def(nb::init<const std::vector<uint32_t> &, const std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> &,
                      const std::vector<std::pair<nb::bytes, uint32_t>> &, const std::string &>(),
             nb::arg("byte_ids"), nb::arg("merges"), nb::arg("specials"), nb::arg("pattern"),
             "``byte_ids``: the id of each byte 0..255; ``merges``: ``(left, right, merged)`` ids in rank "
             "order; ``specials``: ``(bytes, id)``; ``pattern``: the native scanner to pre-tokenize with "
             "(``pretokenize.NATIVE_SCANNERS``' values), or '' for a pattern without one (then only "
             "``encode_pieces`` works: pre-tokens come from Python).")
        .def_static("from_tiktoken_ranks", &Encoder::from_tiktoken_ranks, nb::arg("ranks"), nb::arg("specials"),
                    nb::arg("pattern"), nb::rv_policy::take_ownership,
                    "An encoder by tiktoken's rules from ``TiktokenRanks`` (as ``use_tiktoken_rules``), its pair "
                    "table built natively.")
        .def_ro("native_split", &Encoder::native_split)
        .def("use_tiktoken_rules", &Encoder::use_tiktoken_rules, nb::arg("tokens"),
             "Encode by tiktoken's rules from now on: a piece that is one of ``tokens`` (``(bytes, id)``) is "
             "that token, else merge one pair at a time, the leftmost whose merged id is lowest (ids being "
             "tiktoken's ranks). Call before encoding.")
        .def("encode_pieces", &encode_pieces, nb::arg("pieces"),
             "ids of a sequence of pre-tokens (str or bytes), as a uint32 array. Releases the GIL.")
        .def("encode", &encode, nb::arg("text"), nb::arg("threads") = 1, nb::arg("ordinary") = false,
             "ids of ``text`` (str, or UTF-8 bytes: checked, ValueError 'invalid UTF-8 at byte N') with "
             "special tokens, as a uint32 array; parallel over blocks with ``threads`` (0 = all "
             "cores); ``ordinary``: special tokens are plain text. Releases the GIL.")
        .def("encode_list", &encode_list, nb::arg("text"), nb::arg("ordinary") = false,
             "list[int] of ``text`` (str) with special tokens (``ordinary``: as plain text), on this thread.")
        .def("encode_batch", &encode_batch, nb::arg("texts"), nb::arg("threads") = 0, nb::arg("ordinary") = false,
             "list[list[int]] of many documents, parallel over documents. Releases the GIL.")
        .def("encode_documents", &encode_blob_documents, nb::arg("blob"), nb::arg("threads") = 0,
             "(ids, lengths): the documents of ``blob`` (UTF-8 joined by the byte 0xFF) encoded one by one, "
             "as one uint32 array and each document's number of ids (uint64); parallel over documents. "
             "Releases the GIL.");
}
