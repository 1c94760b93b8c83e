// The Python face of the native encoder: `bpe_store._core.Encoder` (encoder.h) and its entry
// points, `encode`, `encode_list`, `encode_batch`, `encode_documents` and `encode_pieces`.
//
// * Every entry point reads its arguments with the GIL held, then encodes with it released.
// * Results go back as a NumPy array owning the C++ buffer (no copy), or as lists (encoder.h).
// * Bytes from a file are checked as UTF-8 here, with the GIL released, instead of being decoded
//   to a str in Python (which costs 1-4 bytes a character and a UTF-8 copy back).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "encoder.h"
#include "utf8.h"

namespace nb = nanobind;

namespace {

using bpe::enc::Block;
using bpe::enc::Encoder;
using bpe::enc::kNone;
using bpe::enc::PieceCache;
using bpe::enc::thread_cache;

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
        size_t total = 0;
        for (auto v : views) total += v.size();
        PieceCache &cache = thread_cache(e.uid, total);
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
    size_t total = 0;
    for (auto v : views) total += v.size();
    auto work = [&]() {
        PieceCache &cache = thread_cache(e.uid, total);
        for (size_t i; (i = next.fetch_add(1)) < views.size();) {
            auto s = views[i];
            auto blocks = e.plan(s, s.size() + 1, ordinary);
            const auto *u = reinterpret_cast<const uint8_t *>(s.data());
            for (const Block &b : blocks) {
                if (b.special != kNone) outs[i].push_back(b.special);
                else e.encode_plain(u + b.start, b.end - b.start, cache, outs[i]);
            }
        }
    };
    bpe::enc::run_threads(std::min<size_t>(default_threads(threads), std::max<size_t>(views.size(), 1)), work);
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
        .def_static("from_packed_merges", &Encoder::from_packed_merges, nb::arg("byte_ids"), nb::arg("merges"),
                    nb::arg("specials"), nb::arg("pattern"), nb::rv_policy::take_ownership,
                    "As the constructor, with ``merges`` packed as native uint32 (left, right, merged) triples "
                    "(``MergeLog.encoder_tables``).")
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
