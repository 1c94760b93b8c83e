// The GPT-2 pre-tokenizer and word counter: the hot loop of the counting phase, and its
// Python functions (registered into bpe_store._core by `register_scanner`).
//
// `gpt2_split` splits special-free UTF-8 text exactly as
//     regex.finditer(r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""", text)
// does, with the character classes generated from the `regex` module (unicode_tables.h).
// `count_words` splits a chunk at special tokens, splits each piece with the same scanner and
// counts the pieces in a hash table keyed by views into the input, so no word is copied until
// the result is handed to Python. The loops live in scanner_impl.h (see its performance notes);
// here, everything between reading the arguments and building the result runs with the GIL
// released, so Python threads can count different chunks at the same time.
#include "scanner.h"

#include <cstdint>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/stl/vector.h>

#include "scanner_impl.h"

namespace nb = nanobind;

namespace bpe {

void gpt2_split(std::string_view text, std::vector<size_t> &ends) {
    detail::scan(reinterpret_cast<const uint8_t *>(text.data()), text.size(),
                 [&](size_t, size_t e) { ends.push_back(e); });
}

}  // namespace bpe

// ---- Python API -----------------------------------------------------------------------------

namespace {

// bytes(view) for the result; raises (via nanobind) on allocation failure.
nb::object py_bytes(const uint8_t *p, size_t n) {
    return nb::steal(PyBytes_FromStringAndSize(reinterpret_cast<const char *>(p), Py_ssize_t(n)));
}

nb::list py_pretokenize(nb::bytes data) {
    const auto *s = static_cast<const uint8_t *>(data.data());
    const size_t n = data.size();
    std::vector<size_t> ends;
    {
        nb::gil_scoped_release release;
        ends.reserve(n / 4 + 1);
        bpe::gpt2_split(std::string_view(reinterpret_cast<const char *>(s), n), ends);
    }
    nb::list out;
    size_t prev = 0;
    for (size_t e : ends) {
        out.append(py_bytes(s + prev, e - prev));
        prev = e;
    }
    return out;
}

nb::tuple py_count_words(nb::bytes data, const std::vector<nb::bytes> &specials) {
    std::vector<std::string> toks;
    toks.reserve(specials.size());
    for (const nb::bytes &t : specials) {
        if (t.size() == 0) throw nb::value_error("special tokens must be non-empty");
        toks.emplace_back(t.c_str(), t.size());
    }
    const auto *s = static_cast<const uint8_t *>(data.data());
    const size_t n = data.size();
    // English text has ~1 distinct word per 90 bytes in an 8 MB chunk (enwiki: 95 k), fewer
    // per byte in larger chunks; 1 per 64 bytes rarely needs a rehash.
    bpe::detail::WordTable table(n / 64);
    uint64_t total = 0;
    {
        // `data` is immutable and referenced by the caller's frame, so it outlives this block.
        nb::gil_scoped_release release;
        const bpe::detail::SpecialSplitter splitter(std::move(toks));
        splitter.split(s, n, [&](size_t a, size_t b) {
            bpe::detail::scan(s + a, b - a, [&](size_t x, size_t y) {
                table.add(s + a + x, y - x);
                ++total;
            });
        });
    }
    // dict[bytes, int] built with the C API: nb::dict's operator[] would go through two extra
    // temporaries per word, and this loop runs once per distinct word with the GIL held.
    nb::object counts = nb::steal(PyDict_New());
    if (!counts.is_valid()) throw nb::python_error();
    for (const auto &entry : table.entries()) {
        nb::object key = py_bytes(entry.ptr, entry.len);
        nb::object value = nb::steal(PyLong_FromUnsignedLongLong(entry.count));
        if (!key.is_valid() || !value.is_valid() || PyDict_SetItem(counts.ptr(), key.ptr(), value.ptr()) != 0)
            throw nb::python_error();
    }
    return nb::make_tuple(counts, nb::steal(PyLong_FromUnsignedLongLong(total)));
}

bool py_utf8_valid(nb::bytes data) {
    const auto *s = static_cast<const uint8_t *>(data.data());
    const size_t n = data.size();
    nb::gil_scoped_release release;
    return bpe::detail::valid_utf8(s, n);
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

}  // namespace

void register_scanner(nb::module_ &m) {
    m.def("pretokenize", &py_pretokenize, nb::arg("data"),
          "GPT-2 pre-tokens of special-free UTF-8 ``data``, as ``regex.finditer(GPT2_PATTERN)`` "
          "splits it: list[bytes]. Releases the GIL while scanning.");
    m.def("count_words", &py_count_words, nb::arg("data"), nb::arg("specials"),
          "``({word bytes: count}, pre-tokens)`` of UTF-8 ``data`` split at ``specials`` (leftmost, "
          "longest at one position; never counted), then by the GPT-2 pattern. Releases the GIL.");
    m.def("utf8_valid", &py_utf8_valid, nb::arg("data"),
          "Whether ``data`` is well-formed UTF-8 (as ``bytes.decode('utf-8')`` accepts). Releases the GIL.");
    m.def("add_counts", &py_add_counts, nb::arg("total"), nb::arg("counts"),
          "``total[w] += c`` for each ``w, c`` in ``counts`` (dicts of bytes -> int; a Counter is a dict).");
    m.def("char_class", &py_char_class, nb::arg("cp"),
          "GPT-2 class of a code point: 0 other, 1 \\p{L}, 2 \\p{N}, 3 \\s (as `regex` defines them).");
}
