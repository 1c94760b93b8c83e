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
// objects are made once per flush instead of once per chunk. The loops live in scanner_impl.h
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
#include "store_db.h"

namespace nb = nanobind;

// ---- Python API -----------------------------------------------------------------------------

bpe::detail::Pattern pattern_of(const std::string &name);  // splitter.cpp

namespace {

// The scanner of a pattern name for the counting functions, which need one ('' refused).
bpe::detail::Pattern scanner_of(const std::string &name) {
    const bpe::detail::Pattern p = pattern_of(name);
    if (p == bpe::detail::Pattern::kNone) throw nb::value_error("a pattern with a native scanner is needed");
    return p;
}

// bytes(view) for the result; raises (via nanobind) on allocation failure.
nb::object py_bytes(const uint8_t *p, size_t n) {
    return nb::steal(PyBytes_FromStringAndSize(reinterpret_cast<const char *>(p), Py_ssize_t(n)));
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

// The word counts of one chunk, still native: entries are views into `data`, which this object
// keeps alive. Handing this to a WordCounter instead of building a dict keeps the GIL free: a
// dict of ~95 k words per 8 MB chunk costs ~10 ms with the GIL held, and adding it into the
// flush's Counter ~12 ms more, which is what limits Python threads.
// The memory one chunk's count needs when the chunk is read natively (`count_file_range`): the
// chunk's bytes and its table's vectors. Why reused: malloc maps blocks over 1 MiB on their own
// (merge.release_free_memory), so every 8 MB chunk read into a new bytes object, and its new
// table, was ~3300 page faults and as many zeroed pages (enwiki-100M: ~50 K faults, ~0.2 s of
// kernel time in counting). Taken from `ChunkMemoryPool` and given back when the ChunkCounts
// viewing it is freed; the pool is emptied when counting ends (`release_chunk_memory`).
struct ChunkMemory {
    std::unique_ptr<uint8_t[]> bytes;  // not zeroed: every byte used is read into first
    size_t capacity = 0;
    bpe::detail::WordTable::Storage table;
};

class ChunkMemoryPool {
  public:
    // Memory for a chunk of `n` bytes: a free one (grown if it is too small) or a new one.
    std::unique_ptr<ChunkMemory> take(size_t n) {
        std::unique_ptr<ChunkMemory> m;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!free_.empty()) {
                m = std::move(free_.back());
                free_.pop_back();
            }
        }
        if (!m) m = std::make_unique<ChunkMemory>();
        if (m->capacity < n) {
            // rounded up to 1 MiB: chunks planned at one size differ by a few bytes
            const size_t cap = (n + (size_t(1) << 20) - 1) & ~((size_t(1) << 20) - 1);
            m->bytes.reset();
            m->bytes.reset(new uint8_t[cap ? cap : 1]);
            m->capacity = cap;
        }
        return m;
    }

    // Keeps `m` for the next chunk; at most kKeep are kept (as many as chunks counted at once).
    void give(std::unique_ptr<ChunkMemory> m) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (free_.size() < kKeep) free_.push_back(std::move(m));
    }

    // Frees everything kept (counting is over).
    void clear() {
        std::vector<std::unique_ptr<ChunkMemory>> drop;
        std::lock_guard<std::mutex> lock(mutex_);
        drop.swap(free_);
    }

  private:
    static constexpr size_t kKeep = 16;
    std::mutex mutex_;
    std::vector<std::unique_ptr<ChunkMemory>> free_;
};

ChunkMemoryPool &chunk_memory_pool() {
    static ChunkMemoryPool *pool = new ChunkMemoryPool();  // never destroyed: freed at exit anyway
    return *pool;
}

// The word counts of one chunk, still native: entries are views into `data` (count_chunk) or
// into `memory` (count_file_range), which this object keeps alive. Handing this to a
// WordCounter instead of building a dict keeps the GIL free: a dict of ~95 k words per 8 MB
// chunk costs ~10 ms with the GIL held, and adding it into the flush's Counter ~12 ms more,
// which is what limits Python threads.
struct ChunkCounts {
    nb::object data;
    std::unique_ptr<ChunkMemory> memory;
    bpe::detail::WordTable table;
    uint64_t total = 0;
    // XXH3-128 of the bytes counted, canonical (big-endian) as xxhash.xxh3_128_digest gives it;
    // set by count_file_range only (the fingerprint of a work unit, fingerprint.py)
    std::optional<std::array<uint8_t, 16>> digest;

    ChunkCounts(nb::object d, std::unique_ptr<ChunkMemory> m, bpe::detail::WordTable t)
        : data(std::move(d)), memory(std::move(m)), table(std::move(t)) {}
    ChunkCounts(ChunkCounts &&) = default;
    ChunkCounts &operator=(ChunkCounts &&) = delete;
    ~ChunkCounts() {
        if (memory) {  // the table's vectors and the bytes go back to the pool together
            memory->table = table.release();
            chunk_memory_pool().give(std::move(memory));
        }
    }
};

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

// ---- packed counts: how counts cross a process or a machine (Ray tasks, combiners) ----------
// One bytes object instead of a dict per word: pickling ~95 k-word dicts per 8 MB chunk costs
// more than counting them (bench/RESULTS-count.md), a packed buffer is one memcpy to send.
// Layout (versioned, little-endian LEB128 varints, ~8 bytes per word on English text):
//     "BPC1" varint(n) then n times: varint(len) word-bytes varint(count)
constexpr char kPackMagic[4] = {'B', 'P', 'C', '1'};

void put_varint(std::string &out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(char(uint8_t(v) | 0x80));
        v >>= 7;
    }
    out.push_back(char(v));
}

std::string pack_entries(const std::vector<bpe::detail::WordTable::Entry> &entries) {
    size_t bytes = 4 + 10;
    for (const auto &e : entries) bytes += e.len + 20;  // upper bound: never reallocates
    std::string out;
    out.reserve(bytes);
    out.append(kPackMagic, 4);
    put_varint(out, entries.size());
    for (const auto &e : entries) {
        put_varint(out, e.len);
        out.append(reinterpret_cast<const char *>(e.ptr), e.len);
        put_varint(out, e.count);
    }
    return out;
}

nb::bytes to_bytes(const std::string &s) { return nb::bytes(s.data(), s.size()); }

// Reads packed counts, calling f(ptr, len, count) per word; throws on anything malformed (a
// truncated or foreign buffer must never add wrong counts silently).
template <class F>
void unpack(const uint8_t *p, size_t n, F &&f) {
    const uint8_t *end = p + n;
    auto varint = [&]() -> uint64_t {
        uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p == end) throw std::invalid_argument("packed counts: truncated");
            const uint8_t b = *p++;
            v |= uint64_t(b & 0x7F) << shift;
            if (!(b & 0x80)) return v;
        }
        throw std::invalid_argument("packed counts: bad varint");
    };
    if (n < 4 || std::memcmp(p, kPackMagic, 4) != 0) throw std::invalid_argument("packed counts: bad header");
    p += 4;
    const uint64_t count = varint();
    for (uint64_t i = 0; i < count; ++i) {
        const uint64_t len = varint();
        if (uint64_t(end - p) < len) throw std::invalid_argument("packed counts: truncated");
        const uint8_t *word = p;
        p += len;
        f(word, size_t(len), varint());
    }
    if (p != end) throw std::invalid_argument("packed counts: trailing bytes");
}

// Calls f(word, length, count) for each item of a {bytes: count} dict (the `regex` counting
// path's counts), in the dict's order, with the GIL held; `what` names the caller in errors.
// TypeError for a key that is not bytes; OverflowError (or TypeError) for a count that is not a
// non-negative 64-bit int. The words stay views into the dict's keys.
template <class F>
void for_each_dict_count(nb::dict counts, const char *what, F &&f) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(counts.ptr(), &pos, &key, &value)) {
        if (!PyBytes_Check(key)) throw nb::type_error((std::string(what) + ": keys must be bytes").c_str());
        const unsigned long long c = PyLong_AsUnsignedLongLong(value);
        if (c == (unsigned long long)-1 && PyErr_Occurred()) throw nb::python_error();
        f(reinterpret_cast<const uint8_t *>(PyBytes_AS_STRING(key)), size_t(PyBytes_GET_SIZE(key)), uint64_t(c));
    }
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

// The in-memory reduce of counting, native: sums ChunkCounts (GIL released), owning copies of
// the words so that the chunks can be freed; Python sees the words only at a flush (`items`).
// `train` adds from one thread; the mutex only makes concurrent use safe, not fast. (`items`
// takes it while holding the GIL; `add` takes it after releasing the GIL: no lock-order cycle.)
class WordCounter {
  public:
    void add(const ChunkCounts &chunk) {
        nb::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(mutex_);
        bpe::detail::add_table(table_, chunk.table, &arena_);
    }

    // Add another counter's words: the counts of a work unit read in several blocks (a
    // compressed file, a parquet row group), summed on their own until the unit is whole.
    void add_counter(const WordCounter &other) {
        if (&other == this) throw nb::value_error("cannot add a WordCounter to itself");
        nb::gil_scoped_release release;
        std::scoped_lock lock(mutex_, other.mutex_);
        bpe::detail::add_table(table_, other.table_, &arena_);
    }

    // Adds packed counts (``ChunkCounts.pack``, ``pack_counts``, ``WordCounter.pack``); the
    // words are copied, so the buffer may be freed after. A malformed buffer adds nothing.
    void add_packed(nb::bytes packed) {
        const auto *p = static_cast<const uint8_t *>(packed.data());
        const size_t n = packed.size();
        nb::gil_scoped_release release;
        std::lock_guard<std::mutex> lock(mutex_);
        unpack(p, n, [](const uint8_t *, size_t, uint64_t) {});  // validate first: all or nothing
        bpe::detail::CountSink sink(table_, &arena_);
        unpack(p, n, [&](const uint8_t *w, size_t len, uint64_t c) { sink.add(w, len, c); });
        sink.finish();
    }

    nb::bytes pack() const {
        std::string out;
        {
            nb::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(mutex_);
            out = pack_entries(table_.entries());
        }
        return to_bytes(out);
    }

    // The counts as `parts` packed buffers (``pack``'s format), word w in part
    // fnv1a64(w) % parts: the same word lands in the same part in every process and on every
    // machine. Why: the node counters of a Ray count (bpe_store.counting.ray_count) hand their
    // counts over in parts, part j of every node is summed by one task, and the driver then
    // receives each distinct word once per flush, however many nodes counted it.
    nb::list pack_parts(size_t parts) const {
        if (parts == 0) throw nb::value_error("pack_parts: parts must be at least 1");
        std::vector<std::string> out(parts);
        {
            nb::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(mutex_);
            const auto &entries = table_.entries();
            std::vector<uint32_t> part(entries.size());
            std::vector<size_t> n(parts, 0), bytes(parts, 14);
            for (size_t k = 0; k < entries.size(); ++k) {
                const auto &e = entries[k];
                uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, 64-bit: stable across processes
                for (size_t i = 0; i < e.len; ++i) h = (h ^ e.ptr[i]) * 0x100000001b3ULL;
                part[k] = uint32_t(h % parts);
                ++n[part[k]];
                bytes[part[k]] += e.len + 20;
            }
            for (size_t j = 0; j < parts; ++j) {
                out[j].reserve(bytes[j]);
                out[j].append(kPackMagic, 4);
                put_varint(out[j], n[j]);
            }
            for (size_t k = 0; k < entries.size(); ++k) {
                const auto &e = entries[k];
                std::string &o = out[part[k]];
                put_varint(o, e.len);
                o.append(reinterpret_cast<const char *>(e.ptr), e.len);
                put_varint(o, e.count);
            }
        }
        nb::list result;
        for (const auto &o : out) result.append(to_bytes(o));
        return result;
    }

    // [(word, count)] in first-seen order, for one executemany.
    nb::list items() const {
        std::lock_guard<std::mutex> lock(mutex_);
        nb::list out;
        for (const auto &e : table_.entries()) {
            nb::object key = py_bytes(e.ptr, e.len);
            nb::object value = nb::steal(PyLong_FromUnsignedLongLong(e.count));
            if (!key.is_valid() || !value.is_valid()) throw nb::python_error();
            out.append(nb::make_tuple(key, value));
        }
        return out;
    }

    // [(id, word, count)] in first-seen order, ids first_id, first_id + 1, ...: the rows of the
    // `words` table (tokens NULL) when every word is new (the first flush into an empty store),
    // built with the C API straight into their final shape. The same rows feed the INSERT and
    // then the merge engine, so the store is not read back. Why bytearray words and no tokens
    // column: Python's sqlite3 binds exact int and bytearray directly but sends bytes and None
    // through its adapter lookup; inserting enwiki-100M's 445 K words took 0.59 s as
    // (id, bytes, count, None) and 0.29 s as (id, bytearray, count).
    nb::list rows(int64_t first_id) const {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto &entries = table_.entries();
        nb::object out = nb::steal(PyList_New(Py_ssize_t(entries.size())));
        if (!out.is_valid()) throw nb::python_error();
        Py_ssize_t k = 0;
        for (const auto &e : entries) {
            PyObject *row = row_of(e, first_id + int64_t(k)).release().ptr();
            PyList_SET_ITEM(out.ptr(), k++, row);
        }
        return nb::borrow<nb::list>(out);
    }

    // One row (id, word as bytearray, count); the tuple is freed if any part fails.
    static nb::object row_of(const bpe::detail::WordTable::Entry &e, int64_t id) {
        nb::object row = nb::steal(PyTuple_New(3));
        if (!row.is_valid()) throw nb::python_error();
        PyObject *items[3] = {
            PyLong_FromLongLong(id),
            PyByteArray_FromStringAndSize(reinterpret_cast<const char *>(e.ptr), Py_ssize_t(e.len)),
            PyLong_FromUnsignedLongLong(e.count)};
        for (int k = 0; k < 3; ++k) PyTuple_SET_ITEM(row.ptr(), k, items[k]);  // a NULL is fine in a freed tuple
        if (!items[0] || !items[1] || !items[2]) throw nb::python_error();
        return row;
    }

    // The same rows as ``rows``, made one at a time as they are iterated: an executemany over
    // them never holds more than one row (as a list, enwiki-100M's 445 K rows were ~90 MB).
    // The counter must not change while its rows are iterated (each row checks).
    class RowStream {
      public:
        RowStream(nb::object owner, const WordCounter &counter, int64_t first_id)
            : owner_(std::move(owner)), counter_(counter), first_id_(first_id), size_(counter.size()) {}
        size_t size() const { return size_; }
        nb::object next() {
            std::lock_guard<std::mutex> lock(counter_.mutex_);
            const auto &entries = counter_.table_.entries();
            if (entries.size() != size_) throw std::runtime_error("WordCounter changed while its rows were read");
            if (pos_ >= size_) throw nb::stop_iteration();
            const auto &e = entries[pos_];
            nb::object row = row_of(e, first_id_ + int64_t(pos_));
            ++pos_;
            return row;
        }

      private:
        nb::object owner_;  // keeps the counter alive
        const WordCounter &counter_;
        int64_t first_id_;
        size_t size_, pos_ = 0;
    };

    size_t size() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return table_.entries().size();
    }

  private:
    friend class WordIds;  // reads a flush's counts in place
    mutable std::mutex mutex_;
    bpe::detail::ByteArena arena_;
    bpe::detail::WordTable table_{size_t(1) << 16};
};

// The store's `words` while counting, native: word -> id and total count. Ids are dense and in
// first-seen order (id = entry number + 1), as the store assigns them, so no id is stored.
// Why native: a flush adds ~1-2 M distinct words into a table of up to ~7 M (OpenWebText); a
// Python {bytes: id} dict cost ~5-7 us per word in lookups and tuples and ~120 bytes per word
// (~0.85 GB at 7 M), against ~0.1 us and ~45 bytes here. `add` returns exactly the rows the
// flush's two statements bind: new words as appended rows, known ones as count deltas sorted
// by id, so SQLite visits each page of `words` once, in order.
class WordIds {
  public:
    // Appends the store's rows [(id, bytes, count)] (in id order; id must be len + 1).
    void load(nb::list rows) {
        PyObject *const *items = PySequence_Fast_ITEMS(rows.ptr());
        const Py_ssize_t n = PyList_GET_SIZE(rows.ptr());
        for (Py_ssize_t i = 0; i < n; ++i) {
            PyObject *row = items[i];
            if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 3)
                throw nb::type_error("word rows must be (id, bytes, count) tuples");
            PyObject *id = PyTuple_GET_ITEM(row, 0), *word = PyTuple_GET_ITEM(row, 1), *count = PyTuple_GET_ITEM(row, 2);
            if (!PyLong_Check(id) || !PyBytes_Check(word) || !PyLong_Check(count))
                throw nb::type_error("word rows must be (int id, bytes, int count)");
            const long long want = (long long)table_.entries().size() + 1;
            if (PyLong_AsLongLong(id) != want)
                throw nb::value_error("word ids are not 1, 2, 3, ... in order");
            const long long c = PyLong_AsLongLong(count);
            if (c < 0 || (c == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                throw nb::value_error("a word count is negative or not 64-bit");
            }
            const size_t k = table_.add(reinterpret_cast<const uint8_t *>(PyBytes_AS_STRING(word)),
                                        size_t(PyBytes_GET_SIZE(word)), uint64_t(c), &arena_);
            if (k + 1 != size_t(want)) throw nb::value_error("a word is stored twice");
        }
    }

    // The same from rows the native connection read (StoreDb.read_word_rows; their tokens are
    // ignored), with the GIL released. Why: a resume's first counting flush loads every word of
    // the store (4.7 M at half of a 12 GB OWT-like corpus) on the writer thread: through Python
    // tuples 2.76 CPU s with the GIL held, this way 1.57 CPU s.
    void load_rows(const WordRows &rows) {
        nb::gil_scoped_release unlocked;  // errors are C++ exceptions, raised once the GIL is back
        for (size_t i = 0; i < rows.n; ++i) {
            const WordRows::Row r = rows.row(i);
            const int64_t want = int64_t(table_.entries().size()) + 1;
            if (r.id != want) throw nb::value_error("word ids are not 1, 2, 3, ... in order");
            if (r.count < 0) throw nb::value_error("a word count is negative");
            const size_t k = table_.add(r.bytes, r.nbytes, uint64_t(r.count), &arena_);
            if (k + 1 != size_t(want)) throw nb::value_error("a word is stored twice");
        }
    }

    // Adds a flush's counts (a WordCounter); returns (new rows [(id, bytearray, count)],
    // count deltas [(count, id)] sorted by id). Applied at once: if the flush's transaction
    // fails, the caller drops this object (the store is the truth; see Store.add_word_counts).
    nb::tuple add(const WordCounter &delta) {
        const size_t first_new = table_.entries().size();
        std::vector<std::pair<uint32_t, uint64_t>> known;
        {
            nb::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(delta.mutex_);
            for (const auto &e : delta.table_.entries()) add_one(e.ptr, e.len, e.count, first_new, known);
            std::sort(known.begin(), known.end());
        }
        return result(first_new, known);
    }

    // Takes over the words of `counter` (left empty) as this table's, ids 1, 2, ... in its
    // order: the rows a first counting flush wrote from that counter, without hashing them again
    // (a Ray driver's second flush rebuilt ~1.4 M words this way for ~0.25 CPU s). This table
    // must be empty.
    void adopt(WordCounter &counter) {
        if (table_.entries().size() != 0) throw nb::value_error("WordIds.adopt: the table is not empty");
        std::lock_guard<std::mutex> lock(counter.mutex_);
        std::swap(table_, counter.table_);
        std::swap(arena_, counter.arena_);
    }

    // ``add`` without a Python object per word: (new words packed in id order (``pack``'s
    // format), the first new word's id, count deltas of known words as one buffer: n int64 ids
    // ascending, then their n int64 deltas), for StoreDb.bulk_packed_words and bulk_deltas.
    // Why: the Python rows (a tuple and a bytearray per new word, a tuple per delta) and their
    // copy into the bulk statement cost ~0.2-0.3 us a word, a third of a Ray driver's flush.
    nb::tuple add_native(const WordCounter &delta) {
        const size_t first_new = table_.entries().size();
        std::vector<std::pair<uint32_t, uint64_t>> known;
        std::string fresh, deltas;
        {
            nb::gil_scoped_release release;
            std::lock_guard<std::mutex> lock(delta.mutex_);
            for (const auto &e : delta.table_.entries()) add_one(e.ptr, e.len, e.count, first_new, known);
            native_result(first_new, known, fresh, deltas);
        }
        return nb::make_tuple(to_bytes(fresh), int64_t(first_new) + 1, to_bytes(deltas));
    }

    // The same for packed counts (``WordCounter.pack``, ``pack_parts``), any number of buffers,
    // added in order (a word may be in several: its counts are summed). Why: a Ray driver
    // receives its flush as packed parts; summing them into a WordCounter first, only to add
    // that into this table, hashed every word twice (~0.15 us a word).
    nb::tuple add_packed(const std::vector<nb::bytes> &parts) {
        for (const auto &p : parts) {  // validate first: all or nothing
            try {
                unpack(static_cast<const uint8_t *>(p.data()), p.size(), [](const uint8_t *, size_t, uint64_t) {});
            } catch (const std::invalid_argument &e) {
                throw nb::value_error(e.what());
            }
        }
        const size_t first_new = table_.entries().size();
        std::vector<std::pair<uint32_t, uint64_t>> known;
        std::string fresh, deltas;
        {
            nb::gil_scoped_release release;
            for (const auto &p : parts)
                unpack(static_cast<const uint8_t *>(p.data()), p.size(),
                       [&](const uint8_t *w, size_t len, uint64_t c) { add_one(w, len, c, first_new, known); });
            native_result(first_new, known, fresh, deltas);
        }
        return nb::make_tuple(to_bytes(fresh), int64_t(first_new) + 1, to_bytes(deltas));
    }

    // The same for a {bytes: count} dict (the `regex` counting path).
    nb::tuple add_dict(nb::dict counts) {
        const size_t first_new = table_.entries().size();
        std::vector<std::pair<uint32_t, uint64_t>> known;
        for_each_dict_count(counts, "word counts", [&](const uint8_t *p, size_t n, uint64_t c) {
            add_one(p, n, c, first_new, known);
        });
        std::sort(known.begin(), known.end());
        return result(first_new, known);
    }

    // Every word as (id, bytearray, total count), ids first_id, first_id + 1, ... in order.
    nb::list rows(int64_t first_id) const { return new_rows(0, first_id - 1); }

    // Every word with its total, packed (``WordCounter.pack``'s format) in id order: what the
    // native merge engine starts from after counting, without a Python object per word (7 M
    // row tuples were ~1.3 GB at OpenWebText scale) and without reading the store back.
    nb::bytes pack() const {
        std::string out;
        {
            nb::gil_scoped_release release;
            out = pack_entries(table_.entries());
        }
        return to_bytes(out);
    }

    size_t size() const { return table_.entries().size(); }

  private:
    // add_native's buffers: the words from entry `first_new` on, packed, and the known words'
    // deltas (summed per word: a word may come more than once) as n ids then n deltas.
    void native_result(size_t first_new, std::vector<std::pair<uint32_t, uint64_t>> &known, std::string &fresh,
                       std::string &deltas) const {
        std::sort(known.begin(), known.end());
        size_t m = 0;  // same word twice (several packed parts): one row, the sum
        for (size_t i = 0; i < known.size(); ++i) {
            if (m > 0 && known[m - 1].first == known[i].first) known[m - 1].second += known[i].second;
            else known[m++] = known[i];
        }
        known.resize(m);
        const auto &entries = table_.entries();
        size_t bytes = 14;
        for (size_t k = first_new; k < entries.size(); ++k) bytes += entries[k].len + 20;
        fresh.reserve(bytes);
        fresh.append(kPackMagic, 4);
        put_varint(fresh, entries.size() - first_new);
        for (size_t k = first_new; k < entries.size(); ++k) {
            put_varint(fresh, entries[k].len);
            fresh.append(reinterpret_cast<const char *>(entries[k].ptr), entries[k].len);
            put_varint(fresh, entries[k].count);
        }
        deltas.resize(known.size() * 16);
        char *out = deltas.data();
        for (size_t i = 0; i < known.size(); ++i) {
            const int64_t id = int64_t(known[i].first) + 1, c = int64_t(known[i].second);
            std::memcpy(out + i * 8, &id, 8);
            std::memcpy(out + (known.size() + i) * 8, &c, 8);
        }
    }

    void add_one(const uint8_t *p, size_t n, uint64_t c, size_t first_new,
                 std::vector<std::pair<uint32_t, uint64_t>> &known) {
        const size_t k = table_.add(p, n, c, &arena_);
        if (k < first_new) known.emplace_back(uint32_t(k), c);
    }

    nb::tuple result(size_t first_new, const std::vector<std::pair<uint32_t, uint64_t>> &known) const {
        nb::list fresh = new_rows(first_new);
        nb::object deltas = nb::steal(PyList_New(Py_ssize_t(known.size())));
        if (!deltas.is_valid()) throw nb::python_error();
        Py_ssize_t i = 0;
        for (const auto &[k, c] : known) {
            PyObject *row = Py_BuildValue("(KK)", (unsigned long long)c, (unsigned long long)k + 1);
            if (row == nullptr) throw nb::python_error();
            PyList_SET_ITEM(deltas.ptr(), i++, row);
        }
        return nb::make_tuple(fresh, deltas);
    }

    // (id, bytearray, count) of entries [from, size), id = entry number + 1 + shift.
    nb::list new_rows(size_t from, int64_t shift = 0) const {
        const auto &entries = table_.entries();
        nb::object out = nb::steal(PyList_New(Py_ssize_t(entries.size() - from)));
        if (!out.is_valid()) throw nb::python_error();
        for (size_t k = from; k < entries.size(); ++k)
            PyList_SET_ITEM(out.ptr(), Py_ssize_t(k - from),
                            WordCounter::row_of(entries[k], int64_t(k) + 1 + shift).release().ptr());
        return nb::borrow<nb::list>(out);
    }

    bpe::detail::ByteArena arena_;
    bpe::detail::WordTable table_{size_t(1) << 16};
};

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

// The counters that sum chunks (WordCounter, its row stream) and the store's word ids (WordIds).
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
    nb::class_<WordIds>(m, "WordIds",
                        "The store's words while counting: word -> dense id and total count (see Store.add_word_counts).")
        .def(nb::init<>())
        .def("load", &WordIds::load, nb::arg("rows"), "Append the store's ``[(id, bytes, count)]`` rows, in id order.")
        .def("load_rows", &WordIds::load_rows, nb::arg("rows"),
             "The same from a ``WordRows`` (``StoreDb.read_word_rows``; tokens ignored). Releases the GIL.")
        .def("add", &WordIds::add, nb::arg("counts"),
             "Add a flush's WordCounter: ``(new rows [(id, bytearray, count)], deltas [(count, id)] by id)``.")
        .def("add", &WordIds::add_dict, nb::arg("counts"), "The same for a ``{bytes: count}`` dict.")
        .def("adopt", &WordIds::adopt, nb::arg("counter"),
             "Take over a WordCounter's words (it is left empty) into this empty table, ids 1, 2, ... in its order.")
        .def("add_packed", &WordIds::add_packed, nb::arg("parts"),
             "add_native for a list of packed counts (their words summed).")
        .def("add_native", &WordIds::add_native, nb::arg("counts"),
             "Add a flush's WordCounter: ``(new words packed, first new id, deltas: int64 ids then int64 counts)``.")
        .def("rows", &WordIds::rows, nb::arg("first_id") = 1,
             "Every word as ``(id, bytearray, total count)`` in id order, ids counting from ``first_id``.")
        .def("pack", &WordIds::pack, "Every word with its total count, packed, in id order.")
        .def("__len__", &WordIds::size);
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
