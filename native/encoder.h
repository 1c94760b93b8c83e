// The encoder of `Tokenizer.encode`, `encode_batch` and `bpe-store encode`: a text cut at its
// special tokens and into blocks, each block pre-tokenized by the pattern's native scanner and each
// piece encoded by PieceBpe (piece_bpe.h); the Python bindings are in encoder.cpp.
//
// Why it looks the way it does:
// * Special tokens, the pattern's scan and the cut points come from the one splitter (splitter.h);
//   everything between reading the arguments and building the result runs with the GIL released.
// * Parallelism: a text is cut at its special tokens and into blocks at points no pre-token crosses
//   (the pattern's local cut; GPT-2's is found every few characters in English and in Chinese
//   alike, so CJK text runs on every thread in bounded blocks too), blocks go to threads through
//   one atomic counter, and each block's ids are concatenated in order, so the result does not
//   depend on the number of threads. The threads are a persistent pool (encode_pool.h), so their
//   piece caches stay warm from one call (one 16 MB block of a file) to the next.
// * Lists are built from one cached Python int per id (an INCREF each, no allocation).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>

#include "encode_pool.h"
#include "pair_table.h"
#include "piece_bpe.h"
#include "piece_cache.h"
#include "splitter.h"
#include "tiktoken_ranks.h"

bpe::detail::Pattern pattern_of(const std::string &name);  // splitter.cpp

namespace bpe::enc {

namespace nb = nanobind;

inline std::atomic<uint64_t> next_encoder_uid{1};

inline std::vector<std::string> special_strings(const std::vector<std::pair<nb::bytes, uint32_t>> &specials) {
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
        bpe_.build(byte_ids, merges);
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
    uint64_t uid;  // identifies this encoder (and its rules) to the per-thread caches

    // Switch to tiktoken's rules (piece_bpe.h); `tokens` are the ranks file's (bytes, id).
    // Called once, before any encoding: the new uid empties the per-thread caches of old ids.
    void use_tiktoken_rules(const std::vector<std::pair<nb::bytes, uint32_t>> &tokens) {
        std::vector<std::pair<std::string_view, uint32_t>> views;
        views.reserve(tokens.size());
        for (const auto &[b, id] : tokens) views.emplace_back(std::string_view(b.c_str(), b.size()), id);
        bpe_.whole().build(views);
        bpe_.use_tiktoken(true);
        uid = next_encoder_uid.fetch_add(1);
    }

    // tiktoken's rules from ranks read natively (Tokenizer.from_tiktoken): the bytes' ids, the pair
    // table of every split of a token into two, and the tokens, without a Python object per pair.
    static Encoder *from_tiktoken_ranks(const bpe::TiktokenRanks &ranks,
                                        const std::vector<std::pair<nb::bytes, uint32_t>> &specials,
                                        const std::string &pattern) {
        auto *e = new Encoder(ranks.byte_ids(), ranks.pairs(), specials, pattern);
        e->bpe_.whole().build(ranks);
        e->bpe_.use_tiktoken(true);
        return e;
    }

    // An encoder by merge rank from ids packed natively (a store's merge log, merge_log_reader.cpp):
    // `merges` holds (left, right, merged) uint32 triples in rank order, no Python tuple each.
    static Encoder *from_packed_merges(const std::vector<uint32_t> &byte_ids, nb::bytes merges,
                                       const std::vector<std::pair<nb::bytes, uint32_t>> &specials,
                                       const std::string &pattern) {
        if (merges.size() % 12) throw std::invalid_argument("merges must be packed uint32 triples");
        std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> rows(merges.size() / 12);
        const auto *p = reinterpret_cast<const uint32_t *>(merges.c_str());
        for (size_t r = 0; r < rows.size(); ++r) rows[r] = {p[3 * r], p[3 * r + 1], p[3 * r + 2]};
        return new Encoder(byte_ids, rows, specials, pattern);
    }

    // BPE of one piece, appended to `out`.
    void bpe(const uint8_t *p, size_t n, PieceCache &cache, std::vector<uint32_t> &out) const {
        bpe_.bpe(p, n, cache, out);
    }

    // Special-free text -> ids: the pattern's split, then BPE per piece, in one pass: the scan hands
    // each piece to a ring, where its cache key is made and its cache line asked for, and the piece
    // kAhead before it is encoded. Why: the slot loads of 16 pieces overlap (a slot is usually a
    // miss on a first pass), and no vector of the pieces' ends is written and read back (it was
    // 8 bytes a piece, 0.5 MB for a 256 KB block: out of L2 by the time it was read).
    void encode_plain(const uint8_t *s, size_t n, PieceCache &cache, std::vector<uint32_t> &out) const {
        constexpr size_t kAhead = 16;  // a power of two
        struct Pending {
            size_t at, len;
            PieceBpe::Ask ask;
        };
        Pending ring[kAhead];
        size_t seen = 0;
        const uint8_t *end = s + n;
        bpe::detail::scan_pattern(pattern_, s, n, [&](size_t a, size_t e) {
            Pending &slot = ring[seen % kAhead];
            if (seen >= kAhead) bpe_.bpe(s + slot.at, slot.len, slot.ask, cache, out);
            slot = Pending{a, e - a, PieceBpe::ask(s + a, e - a, end, cache)};
            ++seen;
        });
        for (size_t i = seen > kAhead ? seen - kAhead : 0; i < seen; ++i) {
            const Pending &q = ring[i % kAhead];
            bpe_.bpe(s + q.at, q.len, q.ask, cache, out);
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
            PieceCache &cache = thread_cache(uid, s.size());
            std::vector<uint32_t> out;
            out.reserve(s.size() / 3 + 16);
            for (const Block &b : blocks) {
                if (b.special != kNone) out.push_back(b.special);
                else encode_plain(u + b.start, b.end - b.start, cache, out);
            }
            return out;
        }
        std::vector<std::vector<uint32_t>> parts(blocks.size());
        std::atomic<size_t> next{0};
        auto work = [&]() {
            PieceCache &cache = thread_cache(uid, s.size());
            for (size_t i; (i = next.fetch_add(1)) < blocks.size();) {
                const Block &b = blocks[i];
                auto &out = parts[i];
                if (b.special != kNone) {
                    out.push_back(b.special);
                } else {
                    out.reserve((b.end - b.start) / 3 + 16);
                    encode_plain(u + b.start, b.end - b.start, cache, out);
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
    std::vector<nb::object> ints_;
    PieceBpe bpe_;
    bpe::detail::SpecialSplitter specials_;
    const bpe::detail::SpecialSplitter no_specials_{std::vector<std::string>{}};  // encode_ordinary's
    std::vector<uint32_t> special_ids_;  // the id of each special, in the order given
};

}  // namespace bpe::enc
