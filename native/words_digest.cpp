// bpe_store._core.words_digest: the digest of a store's words, natively; its spec and plain-Python
// twin is bpe_store/store/digest.py (`word_terms`, `add_words`), which the tests hold it equal to.
//
// Per word (id, bytes, count), modulo each prime P (2^61 - 1 and 2^64 - 59):
//     term = ((bytes + 0x01 read as a little-endian number) + id * K_id) * (count + K_count)
// and the digest is (rows, sum of terms mod P1, sum of terms mod P2).
//
// Performance notes (why the code looks the way it does): a resume of a 12 GB corpus's store
// digests 7 M words (~60 MB of bytes) before it merges, so no division: both primes reduce a
// 128-bit product by folding (2^61 = 1 mod 2^61 - 1; 2^64 = 59 mod 2^64 - 59), and a word's
// number is read 7 bytes at a time from its top (Horner's rule).
#include <nanobind/nanobind.h>
#include <nanobind/stl/tuple.h>

#include "scanner.h"
#include "store_db.h"

#include <cstdint>
#include <tuple>

namespace nb = nanobind;

namespace {

using u64 = uint64_t;
using u128 = unsigned __int128;

struct Mersenne61 {
    static constexpr u64 P = (u64(1) << 61) - 1;
    static u64 reduce(u128 x) {
        u128 r = (x & P) + (x >> 61);
        r = (r & P) + (r >> 61);
        u64 v = u64(r);
        return v >= P ? v - P : v;
    }
};

struct Prime64 {
    static constexpr u64 P = ~u64(0) - 58;  // 2^64 - 59
    static u64 reduce(u128 x) {
        while (x >> 64) x = u128(u64(x >> 64)) * 59 + u64(x);
        u64 v = u64(x);
        return v >= P ? v - P : v;
    }
};

// v mod P for a signed 64-bit v (Python's %: never negative)
template <class M>
u64 signed_mod(int64_t v) {
    if (v >= 0) return u64(v) % M::P;
    const u64 m = (u64(-(v + 1)) + 1) % M::P;  // |v| without overflow at INT64_MIN
    return m == 0 ? 0 : M::P - m;
}

// (bytes + 0x01 as a little-endian number) mod P, 7 bytes at a time from the top
template <class M>
u64 word_number(const uint8_t *b, size_t n) {
    u64 h = 1;  // the 0x01 above the word's top byte
    size_t i = n;
    while (i > 0) {
        const size_t k = i < 7 ? i : 7;
        i -= k;
        u64 chunk = 0;
        for (size_t j = k; j-- > 0;) chunk = (chunk << 8) | b[i + j];
        h = M::reduce((u128(h) << (8 * k)) + chunk);
    }
    return h;
}

template <class M>
u64 term(const WordRows::Row &r, u64 k_id, u64 k_count) {
    const u64 id_part = M::reduce(u128(signed_mod<M>(r.id)) * (k_id % M::P));
    const u64 fingerprint = M::reduce(u128(word_number<M>(r.bytes, r.nbytes)) + id_part);
    const u64 count_part = M::reduce(u128(signed_mod<M>(r.count)) + k_count % M::P);
    return M::reduce(u128(fingerprint) * count_part);
}

// The constants of digest.py (hexadecimal digits of pi).
constexpr u64 kId1 = 0x243F6A8885A308D3ull, kId2 = 0x13198A2E03707344ull;
constexpr u64 kCount1 = 0xA4093822299F31D0ull, kCount2 = 0x082EFA98EC4E6C89ull;

std::tuple<u64, u64, u64> words_digest(const WordRows &rows) {
    u64 s1 = 0, s2 = 0;
    {
        nb::gil_scoped_release unlocked;
        for (size_t i = 0; i < rows.n; ++i) {
            const WordRows::Row r = rows.row(i);
            s1 = Mersenne61::reduce(u128(s1) + term<Mersenne61>(r, kId1, kCount1));
            s2 = Prime64::reduce(u128(s2) + term<Prime64>(r, kId2, kCount2));
        }
    }
    return {rows.n, s1, s2};
}

// The same of packed counts (WordCounter.pack), their ids first_id, first_id + 1, ... in order.
// Why: a run's last counting flush writes such a counter whole into an empty store, which then
// holds exactly these words; digesting the counter spares reading them back (zhwiki-20M's 515 K
// words, ~0.2 CPU s of a 16 K store extended on it).
std::tuple<u64, u64, u64> words_digest_packed(nb::bytes packed, int64_t first_id) {
    u64 s1 = 0, s2 = 0, n = 0;
    const auto *data = static_cast<const uint8_t *>(packed.data());
    const size_t size = packed.size();
    {
        nb::gil_scoped_release unlocked;
        bpe::unpack_counts(data, size, [&](const uint8_t *bytes, size_t len, uint64_t count) {
            const WordRows::Row r{first_id + int64_t(n++), int64_t(count), bytes, nullptr, len, 0};
            s1 = Mersenne61::reduce(u128(s1) + term<Mersenne61>(r, kId1, kCount1));
            s2 = Prime64::reduce(u128(s2) + term<Prime64>(r, kId2, kCount2));
        });
    }
    return {n, s1, s2};
}

}  // namespace

void register_words_digest(nb::module_ &m) {
    m.def("words_digest", &words_digest, nb::arg("rows"),
          "(rows, sum 1, sum 2) of every word of a ``WordRows`` (id, bytes, count; tokens ignored): "
          "bpe_store.store.digest.add_words natively.");
    m.def("words_digest_packed", &words_digest_packed, nb::arg("packed"), nb::arg("first_id"),
          "The same of packed counts (WordCounter.pack), ids first_id, first_id + 1, ... in order.");
}
