// A `.tiktoken` ranks file read natively (`base64(token) rank` per line): the tokens' bytes back to
// back in one arena, their ranks, and an index from bytes to rank. Why native: reading OpenAI's
// cl100k_base in Python (a base64 decode, two dict inserts and four checks per line) and listing
// every split of every token into two tokens (the pair table tiktoken's rule needs) took ~1.2 s,
// six times tiktoken's whole load; here both take a few tens of milliseconds.
//
// `parse` accepts only canonical lines (standard base64 with its padding, a decimal rank), distinct
// tokens and ranks, and all 256 single bytes: anything else returns false and Python's strict
// reader (bpe_store/openai_ranks.py) reads the file instead, to name the line that is wrong. So the
// native path never accepts a file the Python reader refuses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

namespace bpe {

class TiktokenRanks {
  public:
    static constexpr uint32_t kNone = 0xFFFFFFFFu;

    // Reads `data` (a whole file, already gunzipped); false if any line is not canonical or a
    // token or rank repeats, or a single byte has no rank. `max_id` bounds the ranks.
    bool parse(const uint8_t *p, size_t n, uint64_t max_id);
    // From (token, rank) items (an in-memory `mergeable_ranks`, or a pickled state); false as above.
    bool assign(const std::vector<std::pair<std::string, uint32_t>> &items, uint64_t max_id);

    size_t size() const { return id_.size(); }
    std::string_view token(size_t i) const { return {arena_.data() + at_[i], size_t(at_[i + 1] - at_[i])}; }
    uint32_t id(size_t i) const { return id_[i]; }
    uint32_t max_id() const { return max_; }
    // the rank of the token p[0..n), or kNone
    uint32_t find(const uint8_t *p, size_t n) const;
    // every split t = a + b of a token into two tokens, as (a, b, t) ids, by t's rank then a's length
    std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> pairs() const;
    // the rank of each single byte 0..255
    std::vector<uint32_t> byte_ids() const;

  private:
    bool finish(uint64_t max_id);  // index, distinct tokens and ranks, the 256 bytes
    std::string arena_;
    std::vector<uint64_t> at_{0};
    std::vector<uint32_t> id_;
    // open addressing: a slot holds a token's hash's top 32 bits (the tag) and its index + 1 (0 =
    // empty). Why the tag in the slot: `pairs` looks up every prefix and suffix of every token (a
    // 3 M-token file: ~140 M lookups, most of them misses); with the tag a miss reads one cache line,
    // not the token's bytes and offsets too.
    struct Slot {
        uint32_t tag, index1;
    };
    std::vector<Slot> slots_;
    size_t mask_ = 0;
    uint32_t find_hashed(const uint8_t *p, size_t n, uint64_t h) const;
    // the index of the first token of `h`'s chain with its tag, or kNone (no token has hash h)
    uint32_t candidate(uint64_t h) const;
    // the rank of p[0..n) given its hash and `candidate(h)`
    uint32_t resolve(const uint8_t *p, size_t n, uint64_t h, uint32_t k) const;
    uint32_t max_ = 0;
};

}  // namespace bpe
