// The native pre-tokenizers and word counter: the hot loop of the counting phase, and its
// Python functions (registered into bpe_store._core by `register_scanner`).
//
// `pretokenize` splits special-free UTF-8 text exactly as `regex.finditer(PATTERN, text)` does for
// each pattern with a native scanner (GPT-2's, cl100k, o200k, Llama 3's, Qwen2's: scanner_impl.h),
// with the character classes generated from the `regex` module (unicode_tables.h).
// `count_words` splits a chunk at special tokens, splits each piece with the same scanner and
// counts the pieces in a hash table keyed by views into the input, so no word is copied until
// the result is handed to Python. `count_chunk` does the same but keeps the counts native
// (ChunkCounts), and a WordCounter sums chunks natively: that is what `train` uses, so Python
// objects are made once per flush instead of once per chunk (both types and the packed form of
// counts: word_counts.h; the store's words they feed: word_ids.cpp). The loops live in scanner_impl.h
// (see its performance notes); here, everything between reading the arguments and building a
// Python result runs with the GIL released, so Python threads count chunks at the same time.
#include "scanner.h"
#include "utf8.h"

// XXH3-128, vendored (BSD-2, xxHash 0.8.3): the fingerprint of a unit is taken in the read that
// counts it (count_file_range), the same function as the Python `xxhash` package's xxh3_128.
#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#include "third_party/xxhash.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "scanner_impl.h"
#include "splitter.h"
#include "word_counts.h"

namespace nb = nanobind;

// ---- Python API -----------------------------------------------------------------------------

bpe::detail::Pattern pattern_of(const std::string &name);  // splitter.cpp

namespace {

using namespace bpe::counting;

// The scanner of a pattern name for the counting functions, which need one ('' refused).
bpe::detail::Pattern scanner_of(const std::string &name) {
    const bpe::detail::Pattern p = pattern_of(name);
    if (p == bpe::detail::Pattern::kNone) throw nb::value_error("a pattern with a native scanner is needed");
    return p;
}


nb::list py_pretokenize(nb::bytes data, const std::string &pattern) {
    const auto *s = static_cast<const uint8_t *>(data.data());
    const size_t n = data.size();
    const bpe::detail::Pattern p = scanner_of(pattern);
    std::vector<size_t> ends;
    {
        nb::gil_scoped_release release;
        ends.reserve(n / 4 + 1);
        bpe::detail::scan_pattern(p, s, n, [&](size_t, size_t e) { ends.push_back(e); });
    }
    nb::list out;
    size_t prev = 0;
    for (size_t e : ends) {
        out.append(py_bytes(s + prev, e - prev));
        prev = e;
    }
    return out;
}


}  // namespace

// The special tokens of a Python call as strings; empty ones refused (they would match
// everywhere). Shared with splitter.cpp.
std::vector<std::string> special_list(const std::vector<nb::bytes> &specials) {
    std::vector<std::string> toks;
    toks.reserve(specials.size());
    for (const nb::bytes &t : specials) {
        if (t.size() == 0) throw nb::value_error("special tokens must be non-empty");
        toks.emplace_back(t.c_str(), t.size());
    }
    return toks;
}

namespace {

using namespace bpe::counting;

// English text has ~1 distinct word per 90 bytes in an 8 MB chunk (enwiki: 95 k), fewer per
// byte in larger chunks; 1 per 64 bytes rarely needs a rehash.
size_t expected_words(size_t n) { return n / 64; }

// Counts the words of s[0, n) into `out` (the GIL released by the caller).
void count_into(ChunkCounts &out, const uint8_t *s, size_t n, std::vector<std::string> toks, size_t max_bytes,
                bpe::detail::Pattern pattern) {
    const bpe::detail::SpecialSplitter splitter(std::move(toks));
    bpe::detail::CountSink sink(out.table, nullptr, s + n);  // lookups prefetched a few tokens ahead
    uint64_t total = 0;
    splitter.split(s, n, [&](size_t a, size_t b) {
        const uint8_t *piece = s + a;
        bpe::detail::scan_pattern(pattern, piece, b - a, [&](size_t x, size_t y) {
            // a pre-token longer than max_bytes counts as pieces (pretokenize.split_long_pretoken)
            bpe::detail::split_long(piece, x, y, max_bytes, [&](size_t p, size_t q) {
                sink.add(piece + p, q - p);
                ++total;
            });
        });
    });
    sink.finish();
    out.total = total;
}

ChunkCounts count_chunk(nb::bytes data, const std::vector<nb::bytes> &specials, size_t max_bytes,
                        const std::string &pattern) {
    std::vector<std::string> toks = special_list(specials);
    const bpe::detail::Pattern p = scanner_of(pattern);
    const auto *s = static_cast<const uint8_t *>(data.data());
    const size_t n = data.size();
    ChunkCounts out(data, nullptr, bpe::detail::WordTable(expected_words(n)));
    // `data` is immutable and referenced by `out`, so it outlives the scan
    nb::gil_scoped_release release;
    count_into(out, s, n, std::move(toks), max_bytes, p);
    return out;
}

// count_chunk of the bytes [offset, offset + length) of the open file `fd`, read here into
// reused memory (ChunkMemory) with the GIL released. None if the file ends before them or they
// are not valid UTF-8: the caller then reads them itself, to report that or to replace.
std::optional<ChunkCounts> count_file_range(int fd, uint64_t offset, size_t length,
                                            const std::vector<nb::bytes> &specials, size_t max_bytes,
                                            const std::string &pattern) {
    std::vector<std::string> toks = special_list(specials);
    const bpe::detail::Pattern p = scanner_of(pattern);
    std::unique_ptr<ChunkMemory> memory = chunk_memory_pool().take(length);
    uint8_t *s = memory->bytes.get();
    int err = 0;
    bool ok = true;
    std::optional<ChunkCounts> out;
    {
        nb::gil_scoped_release release;
        // Why in pieces, each digested as soon as it is read: the piece is still in this core's
        // cache, so the fingerprint costs no pass over memory of its own (an 8 MB unit is not).
        constexpr size_t kPiece = size_t(256) << 10;
        XXH3_state_t state;
        XXH3_128bits_reset(&state);
        size_t got = 0;
        while (got < length) {
            const size_t want = std::min(kPiece, length - got);
            size_t in_piece = 0;
            while (in_piece < want) {
                const ssize_t r = ::pread(fd, s + got + in_piece, want - in_piece, off_t(offset + got + in_piece));
                if (r < 0 && errno == EINTR) continue;
                if (r <= 0) {
                    err = r < 0 ? errno : 0;
                    break;
                }
                in_piece += size_t(r);
            }
            XXH3_128bits_update(&state, s + got, in_piece);
            got += in_piece;
            if (in_piece < want) break;
        }
        ok = got == length && bpe::valid_utf8(s, length);
        if (ok) {
            bpe::detail::WordTable table(expected_words(length), std::move(memory->table));
            out.emplace(nb::object(), std::move(memory), std::move(table));  // a null object: no refcount touched
            XXH128_canonical_t canon;
            XXH128_canonicalFromHash(&canon, XXH3_128bits_digest(&state));
            std::array<uint8_t, 16> d;
            std::memcpy(d.data(), canon.digest, 16);
            out->digest = d;
            count_into(*out, s, length, std::move(toks), max_bytes, p);
        }
    }
    if (err != 0) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        throw nb::python_error();
    }
    if (!ok) chunk_memory_pool().give(std::move(memory));
    return out;
}

// dict[bytes, int] built with the C API: nb::dict's operator[] would go through two extra
// temporaries per word, and this loop runs once per distinct word with the GIL held.
nb::dict to_dict(const bpe::detail::WordTable &table) {
    nb::object counts = nb::steal(PyDict_New());
    if (!counts.is_valid()) throw nb::python_error();
    for (const auto &entry : table.entries()) {
        nb::object key = py_bytes(entry.ptr, entry.len);
        nb::object value = nb::steal(PyLong_FromUnsignedLongLong(entry.count));
        if (!key.is_valid() || !value.is_valid() || PyDict_SetItem(counts.ptr(), key.ptr(), value.ptr()) != 0)
            throw nb::python_error();
    }
    return nb::borrow<nb::dict>(counts);
}


// pack_counts({word: count}): the regex path's dict, packed (GIL held: it reads the dict). The
// keys of a dict are distinct, so its items are the entries as they are (no table).
nb::bytes py_pack_counts(nb::dict counts) {
    std::vector<bpe::detail::WordTable::Entry> entries;
    entries.reserve(size_t(PyDict_Size(counts.ptr())));
    for_each_dict_count(counts, "pack_counts", [&](const uint8_t *p, size_t n, uint64_t c) {
        entries.push_back({p, n, c, 0});
    });
    return to_bytes(pack_entries(entries));
}

// The counts of pre-tokens a Python regex found (a list of str): the `regex` path's Counter,
// native. Why: for a user's own pattern, Counter(findall(...)) held the GIL for ~40 % of counting
// (it hashes every match as a Python str), so threads could not overlap it; here the GIL is held
// only to take each match's UTF-8 view (no copy for ASCII: CPython keeps compact ASCII strings as
// UTF-8), and the table is built with it released. Empty matches are not words (as count_words).
ChunkCounts count_strings(nb::handle pieces) {
    PyObject *t = PySequence_Tuple(pieces.ptr());  // holds every piece while the GIL is released
    if (!t) throw nb::python_error();
    nb::tuple items = nb::steal<nb::tuple>(t);
    std::vector<std::pair<const uint8_t *, size_t>> views;
    views.reserve(items.size());
    for (nb::handle h : items) {
        Py_ssize_t n;
        const char *p = PyUnicode_Check(h.ptr()) ? PyUnicode_AsUTF8AndSize(h.ptr(), &n) : nullptr;
        if (!p) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "count_strings: pieces must be str");
            throw nb::python_error();
        }
        if (n > 0) views.emplace_back(reinterpret_cast<const uint8_t *>(p), size_t(n));
    }
    ChunkCounts out(items, nullptr, bpe::detail::WordTable(views.size() / 8));
    nb::gil_scoped_release release;
    bpe::detail::CountSink sink(out.table);
    for (const auto &v : views) sink.add(v.first, v.second);
    sink.finish();
    out.total = views.size();
    return out;
}

nb::tuple py_count_words(nb::bytes data, const std::vector<nb::bytes> &specials, size_t max_bytes,
                         const std::string &pattern) {
    ChunkCounts chunk = count_chunk(data, specials, max_bytes, pattern);
    return nb::make_tuple(to_dict(chunk.table), nb::steal(PyLong_FromUnsignedLongLong(chunk.total)));
}



// A read-only view of any bytes-like object (bytes, bytearray, a contiguous memoryview),
// released with this object.
class ByteView {
  public:
    explicit ByteView(nb::handle obj) {
        if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0) throw nb::python_error();
    }
    ByteView(const ByteView &) = delete;
    ByteView &operator=(const ByteView &) = delete;
    ~ByteView() { PyBuffer_Release(&view_); }
    const uint8_t *data() const { return static_cast<const uint8_t *>(view_.buf); }
    size_t size() const { return size_t(view_.len); }

  private:
    Py_buffer view_;
};

// Any bytes-like object: scan_source checks blocks read into reused buffers (memoryviews of
// bytearrays), without a bytes copy of each. The view holds the buffer's export, so the caller
// cannot resize it meanwhile.
bool py_utf8_valid(nb::handle data) {
    const ByteView view(data);
    nb::gil_scoped_release release;
    return bpe::valid_utf8(view.data(), view.size());
}

// total[word] += count for every word of `counts`: the in-memory reduce, with the GIL held (it
// touches Python dicts) but as a C loop, several times faster than Counter.update's Python loop,
// so the GIL stays free for the counting threads most of the time.
void py_add_counts(nb::dict total, nb::dict counts) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(counts.ptr(), &pos, &key, &value)) {
        PyObject *old = PyDict_GetItemWithError(total.ptr(), key);  // borrowed
        if (old == nullptr) {
            if (PyErr_Occurred()) throw nb::python_error();
            if (PyDict_SetItem(total.ptr(), key, value) != 0) throw nb::python_error();
            continue;
        }
        nb::object sum = nb::steal(PyNumber_Add(old, value));
        if (!sum.is_valid() || PyDict_SetItem(total.ptr(), key, sum.ptr()) != 0) throw nb::python_error();
    }
}

int py_char_class(int64_t cp) {
    if (cp < 0 || cp >= 0x110000) throw nb::value_error("code point out of range 0..0x10FFFF");
    return bpe::detail::class_of(uint32_t(cp));
}

int py_char_flags(int64_t cp) {
    if (cp < 0 || cp >= 0x110000) throw nb::value_error("code point out of range 0..0x10FFFF");
    return bpe::detail::flags_of(uint32_t(cp));
}

}  // namespace

void bpe::unpack_counts(const uint8_t *p, size_t n,
                        const std::function<void(const uint8_t *, size_t, uint64_t)> &f) {
    unpack(p, n, [](const uint8_t *, size_t, uint64_t) {});  // validate first: all or nothing
    unpack(p, n, f);
}

// The pre-tokenizer and the counting of one chunk (ChunkCounts and the functions making it).
static void register_chunk_counting(nb::module_ &m) {
    m.def("pretokenize", &py_pretokenize, nb::arg("data"), nb::arg("pattern") = "gpt2",
          "Pre-tokens of special-free UTF-8 ``data`` under ``pattern`` (a name in "
          "``pretokenize.NATIVE_SCANNERS``' values), as ``regex.finditer`` splits it: list[bytes]. "
          "Releases the GIL while scanning.");
    m.def("count_words", &py_count_words, nb::arg("data"), nb::arg("specials"), nb::arg("max_bytes") = 0,
          nb::arg("pattern") = "gpt2",
          "``({word bytes: count}, pre-tokens)`` of UTF-8 ``data`` split at ``specials`` (leftmost, "
          "longest at one position; never counted), then by ``pattern``'s native scanner; a pre-token "
          "longer than ``max_bytes`` (0: no limit) counts as pieces (pretokenize.split_long_pretoken). "
          "Releases the GIL.");
    nb::class_<ChunkCounts>(m, "ChunkCounts",
                            "Word counts of one chunk, kept native (see ``count_chunk``); add it to a WordCounter.")
        .def_ro("total", &ChunkCounts::total, "Number of pre-tokens.")
        .def_prop_rw(
            "digest",
            [](const ChunkCounts &c) -> nb::object {
                if (!c.digest) return nb::none();
                return nb::bytes(reinterpret_cast<const char *>(c.digest->data()), 16);
            },
            [](ChunkCounts &c, nb::object d) {
                if (d.is_none()) {
                    c.digest.reset();
                    return;
                }
                const nb::bytes b = nb::cast<nb::bytes>(d);
                if (b.size() != 16) throw nb::value_error("a digest is 16 bytes");
                std::array<uint8_t, 16> v;
                std::memcpy(v.data(), b.c_str(), 16);
                c.digest = v;
            },
            "XXH3-128 of the bytes counted (16 bytes, as ``xxhash.xxh3_128_digest``): set by "
            "``count_file_range`` (or by the caller that read them); None otherwise.")
        .def("__len__", [](const ChunkCounts &c) { return c.table.entries().size(); })
        .def("to_dict", [](const ChunkCounts &c) { return to_dict(c.table); }, "``{word bytes: count}``.")
        .def("pack", [](const ChunkCounts &c) {
                 std::string out;
                 {
                     nb::gil_scoped_release release;
                     out = pack_entries(c.table.entries());
                 }
                 return to_bytes(out);
             },
             "The counts as one compact bytes object (see ``WordCounter.add_packed``). Releases the GIL.");
    m.def("count_chunk", &count_chunk, nb::arg("data"), nb::arg("specials"), nb::arg("max_bytes") = 0,
          nb::arg("pattern") = "gpt2",
          "``count_words`` without building the dict: a ChunkCounts. Releases the GIL.");
    m.def("count_strings", &count_strings, nb::arg("pieces"),
          "Counts of a sequence of pre-tokens (str, e.g. a regex's findall) as a ChunkCounts; empty ones are not "
          "counted. Releases the GIL while counting.");
    m.def("count_file_range", &count_file_range, nb::arg("fd"), nb::arg("offset"), nb::arg("length"),
          nb::arg("specials"), nb::arg("max_bytes") = 0, nb::arg("pattern") = "gpt2",
          "``count_chunk`` of bytes ``[offset, offset + length)`` of the open file ``fd``, read natively into "
          "reused memory, with their XXH3-128 (``ChunkCounts.digest``); None if the file ends before them or they "
          "are not valid UTF-8. Releases the GIL.");
    m.def("release_chunk_memory", [] { chunk_memory_pool().clear(); },
          "Free the memory ``count_file_range`` keeps for the next chunk (call when counting ends).");
}

// The counter that sums chunks (WordCounter, its row stream); the store's word ids are word_ids.cpp's.
static void register_counters(nb::module_ &m) {
    nb::class_<WordCounter::RowStream>(m, "WordRowStream", "WordCounter.row_stream: rows made as they are iterated.")
        .def("__len__", &WordCounter::RowStream::size)
        .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
        .def("__next__", &WordCounter::RowStream::next);
    nb::class_<WordCounter>(m, "WordCounter", "Sum of ChunkCounts, native; Python sees words at ``items()``.")
        .def(nb::init<>())
        .def("add", &WordCounter::add, nb::arg("chunk"), "Add a chunk's counts (releases the GIL).")
        .def("add", &WordCounter::add_counter, nb::arg("chunk"),
             "Add another WordCounter's counts (releases the GIL).")
        .def("items", &WordCounter::items, "``[(word bytes, count)]`` in first-seen order.")
        .def("rows", &WordCounter::rows, nb::arg("first_id"),
             "``[(id, word bytearray, count)]`` in first-seen order, ids counting from ``first_id``.")
        .def("row_stream", [](nb::handle self, int64_t first_id) {
                 return WordCounter::RowStream(nb::borrow(self), nb::cast<const WordCounter &>(self), first_id);
             }, nb::arg("first_id"),
             "The rows of ``rows(first_id)``, made one at a time as they are iterated (once).")
        .def("add_packed", &WordCounter::add_packed, nb::arg("packed"),
             "Add packed counts (``ChunkCounts.pack``, ``pack_counts``, ``pack``); ValueError if malformed.")
        .def("pack", &WordCounter::pack, "All counts as one compact bytes object, first-seen order.")
        .def("pack_parts", &WordCounter::pack_parts, nb::arg("parts"),
             "The counts as ``parts`` packed buffers, each word in part fnv1a64(word) % parts.")
        .def("__len__", &WordCounter::size);
}

// Small helpers: packing and adding counts, UTF-8 validity, a code point's classes.
static void register_helpers(nb::module_ &m) {
    m.def("pack_counts", &py_pack_counts, nb::arg("counts"),
          "A ``{word bytes: count}`` dict as packed counts (for ``WordCounter.add_packed``).");
    m.def("utf8_valid", &py_utf8_valid, nb::arg("data"),
          "Whether ``data`` (any bytes-like object) is well-formed UTF-8 (as ``bytes.decode('utf-8')`` "
          "accepts). Releases the GIL.");
    m.def("add_counts", &py_add_counts, nb::arg("total"), nb::arg("counts"),
          "``total[w] += c`` for each ``w, c`` in ``counts`` (dicts of bytes -> int; a Counter is a dict).");
    m.def("char_class", &py_char_class, nb::arg("cp"),
          "GPT-2 class of a code point: 0 other, 1 \\p{L}, 2 \\p{N}, 3 \\s (as `regex` defines them).");
    m.def("char_flags", &py_char_flags, nb::arg("cp"),
          "tiktoken flags of a code point (bits: 1 \\p{L}, 2 \\p{N}, 4 \\s, 8 [\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}], "
          "16 [\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}], 32 [\\r\\n]), as `regex` defines them.");
}

void register_scanner(nb::module_ &m) {
    register_chunk_counting(m);
    register_counters(m);
    register_helpers(m);
}
