// {token bytes: id}, for tiktoken's rule that a piece which is a token is that token: open
// addressing over (hash tag, place in one arena of bytes, length, id); no allocation per lookup.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "huge_pages.h"
#include "pair_table.h"
#include "piece_cache.h"
#include "tiktoken_ranks.h"

namespace bpe::enc {

class TokenIndex {
  public:
    void build(const std::vector<std::pair<std::string_view, uint32_t>> &tokens) {
        size_t cap = 16;
        while (cap < tokens.size() * 2 + 2) cap <<= 1;
        mask_ = cap - 1;
        slots_.assign(cap, Slot{0, 0, 0, kNone});
        long_.assign(kFilterBits / 64, 0);
        arena_.clear();
        size_t total = 0;
        for (const auto &t : tokens) total += t.first.size();
        if (total >= kNone) throw std::invalid_argument("the tokens hold 4 GiB or more");
        for (const auto &[b, id] : tokens) {
            const auto *p = reinterpret_cast<const uint8_t *>(b.data());
            if (id == kNone) throw std::invalid_argument("token id out of range");
            uint64_t h = piece_hash(p, b.size());
            if (find(p, b.size(), h) != kNone) continue;  // a repeated token keeps its first id
            size_t i = h & mask_;
            while (slots_[i].id != kNone) i = (i + 1) & mask_;
            slots_[i] = Slot{uint32_t(h >> 32), uint32_t(arena_.size()), uint32_t(b.size()), id};
            if (b.size() > kFiltered) long_[filter_bit(h) >> 6] |= uint64_t(1) << (filter_bit(h) & 63);
            arena_.append(b.data(), b.size());
        }
    }
    void build(const bpe::TiktokenRanks &ranks) {
        std::vector<std::pair<std::string_view, uint32_t>> tokens;
        tokens.reserve(ranks.size());
        for (size_t i = 0; i < ranks.size(); ++i) tokens.emplace_back(ranks.token(i), ranks.id(i));
        build(tokens);
    }
    bool empty() const { return arena_.empty(); }
    // the id of the token p[0..n) (h = piece_hash(p, n)), or kNone
    inline uint32_t find(const uint8_t *p, size_t n, uint64_t h) const {
        if (slots_.empty()) return kNone;
        if (n > kFiltered && !((long_[filter_bit(h) >> 6] >> (filter_bit(h) & 63)) & 1)) return kNone;
        for (size_t i = h & mask_;; i = (i + 1) & mask_) {
            const Slot &s = slots_[i];
            if (s.id == kNone) return kNone;
            if (s.tag == uint32_t(h >> 32) && s.len == n &&
                bpe::detail::equal_bytes(reinterpret_cast<const uint8_t *>(arena_.data()) + s.at, p, n))
                return s.id;
        }
    }

  private:
    // Tokens longer than kFiltered bytes are few (cl100k_base: ~1 %), but long pieces are many in
    // Chinese text and almost never a token: a bit per hash of the long tokens (8 KiB, stays in L1)
    // answers most of them without a probe into the slots (a miss into 4 MiB).
    static constexpr size_t kFiltered = 16, kFilterBits = size_t(1) << 16;
    std::vector<uint64_t> long_;
    static inline size_t filter_bit(uint64_t h) { return size_t(h >> 20) & (kFilterBits - 1); }
    // 16 bytes: cl100k_base's 100 K tokens take 4 MiB of slots instead of 8 (a probe is a cache
    // miss into this table on every piece the piece cache misses); the slot is the hash's low
    // bits, the tag its high ones
    struct Slot {
        uint32_t tag, at, len;
        uint32_t id;  // kNone = empty
    };
    std::vector<Slot, HugeAlloc<Slot>> slots_;  // on huge pages (huge_pages.h: why)
    std::string arena_;
    size_t mask_ = 0;
};

}  // namespace bpe::enc
