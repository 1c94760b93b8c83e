// bpe_store._core.WordIds: the store's `words` while counting, native (Store.add_word_counts and
// the counting rows of bpe_store/store/counting_rows.py are its Python face), fed a flush's
// counts from a WordCounter (word_counts.h), packed counts or a dict, and loaded from the store's
// rows (store_db.h's WordRows).
#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "store_db.h"
#include "word_counts.h"

namespace nb = nanobind;

namespace bpe::counting {

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

}  // namespace bpe::counting

using bpe::counting::WordIds;

void register_word_ids(nb::module_ &m) {
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
