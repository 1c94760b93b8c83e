// Word counts held natively, what counting hands on without a Python object per word: one
// chunk's counts (ChunkCounts, in reused memory), their sum (WordCounter) and the packed form in
// which counts cross a process or a machine. Used by scanner.cpp (which counts chunks and
// registers these types) and word_ids.cpp (the store's words, fed from a WordCounter).
#pragma once

#include <nanobind/nanobind.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "word_table.h"

namespace bpe::counting {

namespace nb = nanobind;

// bytes(view) for the result; raises (via nanobind) on allocation failure.
inline nb::object py_bytes(const uint8_t *p, size_t n) {
    return nb::steal(PyBytes_FromStringAndSize(reinterpret_cast<const char *>(p), Py_ssize_t(n)));
}

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

inline ChunkMemoryPool &chunk_memory_pool() {
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

// ---- packed counts: how counts cross a process or a machine (Ray tasks, combiners) ----------
// One bytes object instead of a dict per word: pickling ~95 k-word dicts per 8 MB chunk costs
// more than counting them (bench/RESULTS-count.md), a packed buffer is one memcpy to send.
// Layout (versioned, little-endian LEB128 varints, ~8 bytes per word on English text):
//     "BPC1" varint(n) then n times: varint(len) word-bytes varint(count)
constexpr char kPackMagic[4] = {'B', 'P', 'C', '1'};

inline void put_varint(std::string &out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(char(uint8_t(v) | 0x80));
        v >>= 7;
    }
    out.push_back(char(v));
}

inline std::string pack_entries(const std::vector<bpe::detail::WordTable::Entry> &entries) {
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

inline nb::bytes to_bytes(const std::string &s) { return nb::bytes(s.data(), s.size()); }

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

}  // namespace bpe::counting
