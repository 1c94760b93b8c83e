// Native reading of `.tiktoken` ranks files and tiktoken's pair table (tiktoken_ranks.h says why),
// and their Python face, `bpe_store._core.TiktokenRanks`.
#include "tiktoken_ranks.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "word_table.h"

namespace nb = nanobind;

namespace bpe {
namespace {

// the value of a standard base64 character, 64 for '=', 255 for anything else
struct B64Table {
    uint8_t v[256];
    B64Table() {
        std::memset(v, 255, sizeof v);
        const char *a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (int i = 0; i < 64; ++i) v[uint8_t(a[i])] = uint8_t(i);
        v[uint8_t('=')] = 64;
    }
};
const B64Table kB64;

// Canonical base64 of a non-empty token (padding only at the end, unused bits zero) appended to
// `out`; false for anything else.
bool decode_b64(const uint8_t *p, size_t n, std::string &out) {
    if (n == 0 || n % 4) return false;
    size_t pad = p[n - 1] == '=' ? (p[n - 2] == '=' ? 2 : 1) : 0;
    for (size_t i = 0; i < n - pad; ++i)
        if (kB64.v[p[i]] >= 64) return false;
    for (size_t i = 0; i + 4 <= n; i += 4) {
        uint32_t a = kB64.v[p[i]], b = kB64.v[p[i + 1]], c = kB64.v[p[i + 2]], d = kB64.v[p[i + 3]];
        const bool last = i + 4 == n;
        if (!last || pad == 0) {
            uint32_t w = (a << 18) | (b << 12) | (c << 6) | d;
            out.push_back(char(w >> 16)), out.push_back(char(w >> 8)), out.push_back(char(w));
        } else if (pad == 1) {
            if (c & 3) return false;
            uint32_t w = (a << 18) | (b << 12) | (c << 6);
            out.push_back(char(w >> 16)), out.push_back(char(w >> 8));
        } else {
            if (b & 15) return false;
            out.push_back(char((a << 2) | (b >> 4)));
        }
    }
    return true;
}

inline uint64_t hash_of(const uint8_t *p, size_t n) { return detail::key_of(p, n).hash; }

}  // namespace

bool TiktokenRanks::parse(const uint8_t *p, size_t n, uint64_t max_id) {
    arena_.clear();
    arena_.reserve(n / 2);
    at_.assign(1, 0);
    id_.clear();
    for (size_t i = 0; i < n;) {
        size_t e = i;
        while (e < n && p[e] != '\n' && p[e] != '\r') ++e;
        size_t next = e < n && p[e] == '\r' && e + 1 < n && p[e + 1] == '\n' ? e + 2 : e + 1;
        if (e > i) {  // a line `base64 rank`, one space between (anything else: Python's reader)
            const uint8_t *sp = static_cast<const uint8_t *>(std::memchr(p + i, ' ', e - i));
            if (!sp) return false;
            size_t k = size_t(sp - p);
            if (!decode_b64(p + i, k - i, arena_)) return false;
            size_t digits = e - k - 1;
            if (digits == 0 || digits > 10) return false;
            uint64_t r = 0;
            for (size_t j = k + 1; j < e; ++j) {
                if (p[j] < '0' || p[j] > '9') return false;
                r = r * 10 + (p[j] - '0');
            }
            if (r > max_id || r >= kNone) return false;
            at_.push_back(arena_.size());
            id_.push_back(uint32_t(r));
        }
        i = next;
    }
    return finish(max_id);
}

bool TiktokenRanks::assign(const std::vector<std::pair<std::string, uint32_t>> &items, uint64_t max_id) {
    arena_.clear();
    at_.assign(1, 0);
    id_.clear();
    for (const auto &[t, r] : items) {
        if (t.empty() || r > max_id || r >= kNone) return false;
        arena_ += t;
        at_.push_back(arena_.size());
        id_.push_back(r);
    }
    return finish(max_id);
}

bool TiktokenRanks::finish(uint64_t) {
    const size_t n = id_.size();
    if (n == 0) return false;
    size_t cap = 16;
    while (cap < 2 * n + 2) cap <<= 1;
    mask_ = cap - 1;
    slots_.assign(cap, Slot{0, 0});
    max_ = 0;
    for (size_t i = 0; i < n; ++i) {
        auto t = token(i);
        const auto *q = reinterpret_cast<const uint8_t *>(t.data());
        uint64_t h = hash_of(q, t.size());
        if (find_hashed(q, t.size(), h) != kNone) return false;  // a token listed twice
        size_t s = h & mask_;
        while (slots_[s].index1) s = (s + 1) & mask_;
        slots_[s] = Slot{uint32_t(h >> 32), uint32_t(i + 1)};
        max_ = std::max(max_, id_[i]);
    }
    std::vector<uint32_t> sorted(id_);  // ranks distinct: sorted, no two equal
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return false;
    for (int b = 0; b < 256; ++b) {
        uint8_t c = uint8_t(b);
        if (find(&c, 1) == kNone) return false;
    }
    return true;
}

uint32_t TiktokenRanks::find(const uint8_t *p, size_t n) const { return find_hashed(p, n, hash_of(p, n)); }

uint32_t TiktokenRanks::find_hashed(const uint8_t *p, size_t n, uint64_t h) const {
    if (slots_.empty()) return kNone;
    const uint32_t tag = uint32_t(h >> 32);
    for (size_t s = h & mask_;; s = (s + 1) & mask_) {
        const Slot slot = slots_[s];
        if (!slot.index1) return kNone;
        const size_t k = slot.index1 - 1;
        if (slot.tag == tag && at_[k + 1] - at_[k] == n &&
            detail::equal_bytes(reinterpret_cast<const uint8_t *>(arena_.data()) + at_[k], p, n))
            return id_[k];
    }
}

uint32_t TiktokenRanks::candidate(uint64_t h) const {
    const uint32_t tag = uint32_t(h >> 32);
    for (size_t s = h & mask_;; s = (s + 1) & mask_) {
        const Slot slot = slots_[s];
        if (!slot.index1) return kNone;
        if (slot.tag == tag) return slot.index1 - 1;
    }
}

uint32_t TiktokenRanks::resolve(const uint8_t *p, size_t n, uint64_t h, uint32_t k) const {
    if (k == kNone) return kNone;  // no slot of the chain has the tag: not a token
    if (at_[k + 1] - at_[k] == n && detail::equal_bytes(reinterpret_cast<const uint8_t *>(arena_.data()) + at_[k], p, n))
        return id_[k];
    return find_hashed(p, n, h);  // a tag shared by another token (rare): the whole chain
}

std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> TiktokenRanks::pairs() const {
    std::vector<uint32_t> order(size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = uint32_t(i);
    std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return id_[a] < id_[b]; });
    std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> out;
    out.reserve(size() * 5 / 2);
    // Why in batches and stages: every lookup is cache misses in tables far larger than the cache
    // (3 M tokens: 64 MiB of slots, the offsets, the bytes), and one at a time each waits for the
    // last. A batch of tokens hashes all its prefixes and suffixes and prefetches their slots, then
    // reads the slots and prefetches each candidate's offsets and id, then its bytes, and only then
    // compares: the misses of a stage overlap (a 3 M-token file: 13.4 -> 6.4 CPU s, bench/RESULTS-tiktoken.md).
    constexpr size_t kBatch = 32;
    struct Probe {
        const uint8_t *p;
        uint32_t n, k;
        uint64_t h;
    };
    std::vector<Probe> probes;
    const auto *arena = reinterpret_cast<const uint8_t *>(arena_.data());
    for (size_t first = 0; first < order.size(); first += kBatch) {
        const size_t last = std::min(order.size(), first + kBatch);
        probes.clear();
        for (size_t j = first; j < last; ++j) {  // a prefix and its suffix, side by side
            auto t = token(order[j]);
            const auto *q = reinterpret_cast<const uint8_t *>(t.data());
            for (size_t k = 1; k < t.size(); ++k)
                for (auto [p, n] : {std::pair{q, k}, std::pair{q + k, t.size() - k}}) {
                    const uint64_t h = hash_of(p, n);
                    detail::prefetch(&slots_[h & mask_]);
                    probes.push_back({p, uint32_t(n), 0, h});
                }
        }
        for (auto &pr : probes)
            if ((pr.k = candidate(pr.h)) != kNone) detail::prefetch(&at_[pr.k]), detail::prefetch(&id_[pr.k]);
        for (const auto &pr : probes)
            if (pr.k != kNone) detail::prefetch(arena + at_[pr.k]);
        size_t i = 0;
        for (size_t j = first; j < last; ++j)
            for (size_t k = 1; k < token(order[j]).size(); ++k, i += 2) {
                const Probe &a = probes[i], &b = probes[i + 1];
                const uint32_t left = resolve(a.p, a.n, a.h, a.k);
                if (left == kNone) continue;
                const uint32_t right = resolve(b.p, b.n, b.h, b.k);
                if (right != kNone) out.emplace_back(left, right, id_[order[j]]);
            }
    }
    return out;
}

std::vector<uint32_t> TiktokenRanks::byte_ids() const {
    std::vector<uint32_t> out(256);
    for (int b = 0; b < 256; ++b) {
        uint8_t c = uint8_t(b);
        out[b] = find(&c, 1);
    }
    return out;
}

}  // namespace bpe

namespace {

// TiktokenRanks.parse: the ranks of a whole file's bytes, or None where Python's reader must read it
nb::object parse_ranks(nb::bytes data, uint64_t max_id) {
    auto r = std::make_unique<bpe::TiktokenRanks>();
    bool ok;
    {
        nb::gil_scoped_release release;
        ok = r->parse(reinterpret_cast<const uint8_t *>(data.c_str()), data.size(), max_id);
    }
    if (!ok) return nb::none();
    return nb::cast(r.release(), nb::rv_policy::take_ownership);
}

nb::object ranks_from_items(const std::vector<std::pair<nb::bytes, uint32_t>> &items, uint64_t max_id) {
    std::vector<std::pair<std::string, uint32_t>> copied;
    copied.reserve(items.size());
    for (const auto &[b, id] : items) copied.emplace_back(std::string(b.c_str(), b.size()), id);
    auto r = std::make_unique<bpe::TiktokenRanks>();
    if (!r->assign(copied, max_id)) return nb::none();
    return nb::cast(r.release(), nb::rv_policy::take_ownership);
}

// {rank: token bytes}, in file order
nb::dict ranks_vocab(const bpe::TiktokenRanks &r) {
    nb::dict d;
    for (size_t i = 0; i < r.size(); ++i) {
        auto t = r.token(i);
        d[nb::int_(r.id(i))] = nb::bytes(t.data(), t.size());
    }
    return d;
}

// {token bytes: rank}, in file order (tiktoken's `mergeable_ranks`)
nb::dict ranks_mergeable(const bpe::TiktokenRanks &r) {
    nb::dict d;
    for (size_t i = 0; i < r.size(); ++i) {
        auto t = r.token(i);
        d[nb::bytes(t.data(), t.size())] = nb::int_(r.id(i));
    }
    return d;
}

nb::object ranks_get(const bpe::TiktokenRanks &r, nb::bytes token) {
    uint32_t id = r.find(reinterpret_cast<const uint8_t *>(token.c_str()), token.size());
    if (id == bpe::TiktokenRanks::kNone) return nb::none();
    return nb::int_(id);
}

}  // namespace

void register_tiktoken_ranks(nb::module_ &m) {
    nb::class_<bpe::TiktokenRanks>(m, "TiktokenRanks",
                                   "The ranks of a .tiktoken file, read natively (native/tiktoken_ranks.h).")
        .def_static("parse", &parse_ranks, nb::arg("data"), nb::arg("max_id"),
                    "The ranks of a whole file's (gunzipped) bytes, or None if a line is not canonical "
                    "(``base64 rank``), a token or rank repeats, a rank passes ``max_id`` or a single byte has "
                    "none: Python's strict reader then says which line. Releases the GIL.")
        .def_static("from_items", &ranks_from_items, nb::arg("items"), nb::arg("max_id"),
                    "The ranks of ``(token bytes, rank)`` items, or None on the same problems as ``parse``.")
        .def("__len__", &bpe::TiktokenRanks::size)
        .def_prop_ro("max_id", &bpe::TiktokenRanks::max_id, "the largest rank")
        .def("vocab", &ranks_vocab, "{rank: token bytes}")
        .def("mergeable", &ranks_mergeable, "{token bytes: rank}")
        .def("get", &ranks_get, nb::arg("token"), "the rank of ``token``, or None")
        .def("n_pairs", [](const bpe::TiktokenRanks &r) { return r.pairs().size(); },
             "how many ways there are of writing a token as two tokens (tiktoken's pair table)");
}
