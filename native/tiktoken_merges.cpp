// tiktoken's rule put in merge form, for a run that extends a `.tiktoken` base
// (bpe_store/formats/bases.py): for each token longer than one byte, in rank order, the two parts
// tiktoken's own rule reaches on the token's bytes with the ranks below the token's (merge the
// leftmost adjacent pair whose concatenation ranks lowest, one at a time). Merge order with those
// merges encodes every text as tiktoken does (see bases.py). Why native: in Python this took
// 3-4 CPU s for o200k_base (200 K tokens, a hash lookup per adjacent pair per step), the whole of
// loading the base; here the lookups are TiktokenRanks::find on the bytes in place.
#include <nanobind/nanobind.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tiktoken_ranks.h"

namespace nb = nanobind;

namespace {

// The cut of token `i` into the two parts tiktoken's rule reaches with ranks below its own: the
// length of the left part, or 0 when the rule stops with more than two parts. cut: scratch, the
// parts' boundaries (0 = b[0] < b[1] < ... < b[k] = length); rk: scratch, rk[j] the rank of parts
// j and j + 1 joined (kNone: not a token). Why rk: a merge changes only the two joins beside it, so
// those are looked up again, not every join of the token at every step (o200k_base: ~0.35 ->
// ~0.2 CPU s for its 200 K tokens, each lookup hashing the bytes).
// two: the rank of each two-byte token by its bytes (kNone: none), a dense table: the first joins
// of every token are of two bytes, a third of all its lookups, and the table (256 KiB) stays in
// cache where a find hashes the bytes and probes a table of all the tokens.
uint32_t split_of(const bpe::TiktokenRanks &r, size_t i, std::vector<uint32_t> &cut, std::vector<uint32_t> &rk,
                  const std::vector<uint32_t> &two) {
    const auto t = r.token(i);
    const auto *p = reinterpret_cast<const uint8_t *>(t.data());
    const uint32_t rank = r.id(i);
    cut.resize(t.size() + 1);
    for (uint32_t j = 0; j <= t.size(); ++j) cut[j] = j;
    const auto join = [&](size_t j) { return r.find(p + cut[j], cut[j + 2] - cut[j]); };
    rk.resize(t.size() - 1);
    for (size_t j = 0; j + 2 < cut.size(); ++j) rk[j] = two[size_t(p[j]) << 8 | p[j + 1]];
    while (cut.size() > 3) {
        uint32_t best = rank;
        size_t at = cut.size();
        for (size_t j = 0; j + 2 < cut.size(); ++j) {  // the pair of parts j, j + 1
            if (rk[j] < best) {  // kNone is above every rank; strictly lower: the leftmost wins ties
                best = rk[j];
                at = j;
            }
        }
        if (at == cut.size()) break;
        cut.erase(cut.begin() + ptrdiff_t(at) + 1);
        rk.erase(rk.begin() + ptrdiff_t(at));
        if (at > 0) rk[at - 1] = join(at - 1);
        if (at + 2 < cut.size()) rk[at] = join(at);
    }
    return cut.size() == 3 ? cut[1] : 0;
}

// The rank of every two-byte token, by its bytes (split_of's `two`).
std::vector<uint32_t> two_byte_ranks(const bpe::TiktokenRanks &r) {
    std::vector<uint32_t> two(size_t(1) << 16, bpe::TiktokenRanks::kNone);
    for (size_t i = 0; i < r.size(); ++i) {
        const auto t = r.token(i);
        if (t.size() == 2) two[size_t(uint8_t(t[0])) << 8 | uint8_t(t[1])] = r.id(i);
    }
    return two;
}

// (rank, left length) u32 pairs, little-endian, in rank order, for every token longer than a byte.
nb::bytes merge_splits(const bpe::TiktokenRanks &r) {
    std::vector<uint32_t> order;
    for (size_t i = 0; i < r.size(); ++i)
        if (r.token(i).size() > 1) order.push_back(uint32_t(i));
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return r.id(a) < r.id(b); });
    std::vector<uint8_t> out(order.size() * 8);
    {
        nb::gil_scoped_release unlocked;
        std::vector<uint32_t> cut, rk;
        const std::vector<uint32_t> two = two_byte_ranks(r);
        for (size_t k = 0; k < order.size(); ++k) {
            const uint32_t v[2] = {r.id(order[k]), split_of(r, order[k], cut, rk, two)};
            for (int w = 0; w < 2; ++w)
                for (int b = 0; b < 4; ++b) out[8 * k + 4 * size_t(w) + size_t(b)] = uint8_t(v[w] >> (8 * b));
        }
    }
    return nb::bytes(reinterpret_cast<const char *>(out.data()), out.size());
}

void put_u32(std::vector<uint8_t> &out, size_t at, uint32_t v) {
    for (int b = 0; b < 4; ++b) out[at + size_t(b)] = uint8_t(v >> (8 * b));
}

// A ranks base as a store records it (bpe_store/training/extend.py): the store's ids are the
// special tokens 0 .. n-1, byte b at n + b, and the k-th token longer than a byte (rank order) at
// n + 256 + k. Returns (merges: (left, right, token) store ids, model ids: the rank of each store
// id from n on, unreached: the rank of the first token tiktoken's rule does not build from two
// parts, or -1), the arrays as little-endian u32 bytes. Why: the same from merge_splits' cuts in
// Python (the parts' bytes, a dict lookup each, the checks of a merge list) was ~1 CPU s of the
// ~1.5 a run extending o200k_base spent before counting.
nb::tuple base_merges(const bpe::TiktokenRanks &r, uint32_t n_specials) {
    std::vector<uint32_t> order;
    for (size_t i = 0; i < r.size(); ++i)
        if (r.token(i).size() > 1) order.push_back(uint32_t(i));
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return r.id(a) < r.id(b); });
    std::vector<uint8_t> merges(order.size() * 12), model((256 + order.size()) * 4);
    int64_t unreached = -1;
    {
        nb::gil_scoped_release unlocked;
        std::vector<uint32_t> store_of(size_t(r.max_id()) + 1, 0);  // rank -> store id
        for (size_t i = 0; i < r.size(); ++i) {
            const auto t = r.token(i);
            if (t.size() == 1) {
                store_of[r.id(i)] = n_specials + uint8_t(t[0]);
                put_u32(model, 4 * size_t(uint8_t(t[0])), r.id(i));
            }
        }
        for (size_t k = 0; k < order.size(); ++k) {
            store_of[r.id(order[k])] = n_specials + 256 + uint32_t(k);
            put_u32(model, 4 * (256 + k), r.id(order[k]));
        }
        std::vector<uint32_t> cut, rk;
        const std::vector<uint32_t> two = two_byte_ranks(r);
        for (size_t k = 0; k < order.size(); ++k) {
            const uint32_t c = split_of(r, order[k], cut, rk, two);
            if (c == 0) {
                unreached = r.id(order[k]);
                break;
            }
            const auto t = r.token(order[k]);
            const auto *p = reinterpret_cast<const uint8_t *>(t.data());
            // both parts are tokens ranked below t's: the rule merged them (split_of)
            put_u32(merges, 12 * k, store_of[r.find(p, c)]);
            put_u32(merges, 12 * k + 4, store_of[r.find(p + c, t.size() - c)]);
            put_u32(merges, 12 * k + 8, n_specials + 256 + uint32_t(k));
        }
    }
    return nb::make_tuple(nb::bytes(reinterpret_cast<const char *>(merges.data()), merges.size()),
                          nb::bytes(reinterpret_cast<const char *>(model.data()), model.size()), unreached);
}

}  // namespace

void register_tiktoken_merges(nb::module_ &m) {
    m.def("tiktoken_base_merges", &base_merges, nb::arg("ranks"), nb::arg("n_specials"),
          "A ranks base's merges in a store's ids (special tokens 0 .. n_specials - 1, byte b at n_specials + b, "
          "the k-th token longer than a byte in rank order at n_specials + 256 + k): (merges as (left, right, "
          "token) little-endian u32 triples, the rank of each store id from n_specials on as u32, the rank of "
          "the first token tiktoken's rule does not build from two lower-ranked parts or -1).");
    m.def("tiktoken_merge_splits", &merge_splits, nb::arg("ranks"),
          "For each token of a TiktokenRanks longer than one byte, in rank order: (rank, left length) "
          "little-endian u32 pairs, the two parts tiktoken's rule reaches on its bytes with the ranks "
          "below its own (left length 0: it stops with more than two parts).");
}
