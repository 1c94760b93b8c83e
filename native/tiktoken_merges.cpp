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
// parts' boundaries (0 = b[0] < b[1] < ... < b[k] = length).
uint32_t split_of(const bpe::TiktokenRanks &r, size_t i, std::vector<uint32_t> &cut) {
    const auto t = r.token(i);
    const auto *p = reinterpret_cast<const uint8_t *>(t.data());
    const uint32_t rank = r.id(i);
    cut.resize(t.size() + 1);
    for (uint32_t j = 0; j <= t.size(); ++j) cut[j] = j;
    while (cut.size() > 3) {
        uint32_t best = rank;
        size_t at = cut.size();
        for (size_t j = 0; j + 2 < cut.size(); ++j) {  // the pair of parts j, j + 1
            const uint32_t q = r.find(p + cut[j], cut[j + 2] - cut[j]);
            if (q < best) {  // kNone is above every rank; strictly lower: the leftmost wins ties
                best = q;
                at = j;
            }
        }
        if (at == cut.size()) break;
        cut.erase(cut.begin() + ptrdiff_t(at) + 1);
    }
    return cut.size() == 3 ? cut[1] : 0;
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
        std::vector<uint32_t> cut;
        for (size_t k = 0; k < order.size(); ++k) {
            const uint32_t v[2] = {r.id(order[k]), split_of(r, order[k], cut)};
            for (int w = 0; w < 2; ++w)
                for (int b = 0; b < 4; ++b) out[8 * k + 4 * size_t(w) + size_t(b)] = uint8_t(v[w] >> (8 * b));
        }
    }
    return nb::bytes(reinterpret_cast<const char *>(out.data()), out.size());
}

}  // namespace

void register_tiktoken_merges(nb::module_ &m) {
    m.def("tiktoken_merge_splits", &merge_splits, nb::arg("ranks"),
          "For each token of a TiktokenRanks longer than one byte, in rank order: (rank, left length) "
          "little-endian u32 pairs, the two parts tiktoken's rule reaches on its bytes with the ranks "
          "below its own (left length 0: it stops with more than two parts).");
}
