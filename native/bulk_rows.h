// The rows a bulk statement reads (StoreDb::bulk, store_db.cpp): the eponymous virtual table
// bpe_store_rows over rows in native memory (a checkpoint's arrays, packed words, count deltas,
// Python rows copied once) and the function bpe_store_lookup. Included by store_db.cpp only.
//
//
// Why: a statement stepped once per row costs ~1-1.5 us of SQLite's own work per row beyond the
// row's b-tree work (sqlite3VdbeHalt, BtreeBeginTrans, opening and closing cursors, re-running the
// statement's OP_Once parts: a CHECK ... IN (...) builds an ephemeral table every time, which made
// vocab's INSERT ~4-6 us a row), plus a mutex and a call per bound value. A bulk statement
// (StoreDb::bulk) runs ONCE and reads every row from the eponymous virtual table bpe_store_rows,
// whose columns p1, p2, ... are the parameters 1, 2, ... of the per-row statement it replaces:
//     INSERT INTO t (a, b, c) SELECT p1, p2, p3 FROM bpe_store_rows
// The rows are those of the call running it (registered on this connection only; a statement
// run outside such a call fails). Same rows, same order, same constraints as executemany.
#pragma once

#include <nanobind/nanobind.h>

#include "sqlite_api.h"
#include "store_db.h"

#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace bpe::bulk_rows {

namespace nb = nanobind;
using namespace bpe::sqlite;

// Where a bpe_store_rows cursor is: row i, and for packed words the byte offset of the next one
// and the current word.
struct RowsCursorState {
    size_t i = 0, off = 0;
    const uint8_t *word = nullptr;
    size_t len = 0;
    uint64_t count = 0;
#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
    std::vector<uint8_t> le;  // a word's tokens as the stored little-endian blob
#endif
};

// One bulk statement's rows. Read with the GIL released: nothing here touches Python.
struct Rows {
    virtual ~Rows() = default;
    virtual size_t size() const = 0;
    virtual void start(RowsCursorState &c) const { c.i = 0; }
    virtual void next(RowsCursorState &c) const { ++c.i; }
    // parameter k (0-based) of the cursor's row, as sqlite3_result_* into ctx
    virtual void column(RowsCursorState &c, sqlite3_context *ctx, int k) const = 0;
    // row i's parameter 2 when it is an integer (the key bpe_store_lookup finds rows by); false
    // when these rows have no such key
    virtual bool key(size_t, i64 &) const { return false; }
    // every row's key as one array, when the rows hold them so (else nullptr: key() per row)
    virtual const i64 *keys() const { return nullptr; }
};

inline void no_such_parameter(sqlite3_context *ctx) {
    api.result_error(ctx, "bpe_store_rows: the rows have no such parameter", -1);
}

// A merge engine's checkpoint stream (CheckpointRowsView: parameters in the order it documents).
struct ViewRows final : Rows {
    CheckpointRowsView v;
    explicit ViewRows(const CheckpointRowsView &view) : v(view) {}
    size_t size() const override { return v.n; }
    void column(RowsCursorState &c, sqlite3_context *ctx, int k) const override {
        const size_t i = c.i;
        switch (v.kind) {
            case CheckpointRowsView::kWords: {
                if (k == 1) return api.result_int64(ctx, v.c[i]);
                if (k != 0) return no_such_parameter(ctx);
                const size_t lo = v.a[i], hi = v.a[i + 1], bytes = (hi - lo) * 4;
                if (bytes > size_t(INT32_MAX)) return api.result_error(ctx, "a word's tokens are 2 GiB or more", -1);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                // the engine's tokens ARE the blob's bytes here: no copy (SQLite copies into its record)
                return api.result_blob(ctx, bytes ? static_cast<const void *>(v.toks + lo) : kEmpty, int(bytes),
                                       kStatic);
#else
                c.le.resize(bytes);
                for (size_t t = lo; t < hi; ++t)
                    for (int s = 0; s < 4; ++s) c.le[(t - lo) * 4 + s] = uint8_t(v.toks[t] >> (8 * s));
                return api.result_blob(ctx, bytes ? static_cast<const void *>(c.le.data()) : kEmpty, int(bytes),
                                       kStatic);
#endif
            }
            case CheckpointRowsView::kDeletes:
            case CheckpointRowsView::kInserts:
                if (k == 0) return api.result_int64(ctx, i64(v.a[i]));
                if (k == 1) return api.result_int64(ctx, i64(v.b[i]));
                if (k == 2 && v.kind == CheckpointRowsView::kInserts) return api.result_int64(ctx, v.c[i]);
                return no_such_parameter(ctx);
            case CheckpointRowsView::kUpdates:
                if (k == 0) return api.result_int64(ctx, v.c[i]);
                if (k == 1) return api.result_int64(ctx, i64(v.a[i]));
                if (k == 2) return api.result_int64(ctx, i64(v.b[i]));
                return no_such_parameter(ctx);
        }
        no_such_parameter(ctx);
    }
    bool key(size_t i, i64 &out) const override {
        if (v.kind != CheckpointRowsView::kWords) return false;
        out = v.c[i];
        return true;
    }
    const i64 *keys() const override {
        static_assert(sizeof(i64) == sizeof(int64_t), "word ids are 64-bit");
        return v.kind == CheckpointRowsView::kWords ? reinterpret_cast<const i64 *>(v.c) : nullptr;
    }
};

// Packed word counts (WordCounter.pack, validated before): (id, bytes, count), ids first, first + 1, ...
// Layout (scanner.cpp, pack_entries): "BPC1" varint(n) then n times varint(len) bytes varint(count).
// Why decoded here rather than by bpe::unpack_counts: that calls back for every word at once,
// while SQLite asks for one row at a time (an index of all words would be 24 bytes a word).
struct PackedWordRows final : Rows {
    const uint8_t *data;
    size_t bytes, n = 0, first_off = 0;
    i64 first_id;
    PackedWordRows(const uint8_t *d, size_t size, i64 first) : data(d), bytes(size), first_id(first) {
        size_t off = 4;
        n = size_t(varint(off));
        first_off = off;
    }
    uint64_t varint(size_t &off) const {  // the buffer was validated: every varint is whole
        uint64_t v = 0;
        for (int shift = 0; off < bytes; shift += 7) {
            const uint8_t b = data[off++];
            v |= uint64_t(b & 0x7F) << shift;
            if (!(b & 0x80)) break;
        }
        return v;
    }
    void read(RowsCursorState &c) const {
        if (c.i >= n) return;
        c.len = size_t(varint(c.off));
        c.word = data + c.off;
        c.off += c.len;
        c.count = varint(c.off);
    }
    size_t size() const override { return n; }
    void start(RowsCursorState &c) const override {
        c.i = 0;
        c.off = first_off;
        read(c);
    }
    void next(RowsCursorState &c) const override {
        ++c.i;
        read(c);
    }
    void column(RowsCursorState &c, sqlite3_context *ctx, int k) const override {
        if (k == 0) return api.result_int64(ctx, first_id + i64(c.i));
        if (k == 1) return api.result_blob(ctx, c.len ? static_cast<const void *>(c.word) : kEmpty, int(c.len), kStatic);
        if (k == 2) return api.result_int64(ctx, i64(c.count));  // <= INT64_MAX: checked before
        no_such_parameter(ctx);
    }
};

// A counting flush's count deltas (WordIds.add_native): n int64 ids ascending, then their n
// int64 deltas; rows (p1 delta, p2 id) as _COUNT_DELTAS binds them, keyed by id.
struct DeltaRows final : Rows {
    const i64 *ids, *deltas;
    size_t n;
    DeltaRows(const uint8_t *data, size_t bytes)
        : ids(reinterpret_cast<const i64 *>(data)), deltas(ids + bytes / 16), n(bytes / 16) {}
    size_t size() const override { return n; }
    void column(RowsCursorState &c, sqlite3_context *ctx, int k) const override {
        if (k == 0) return api.result_int64(ctx, deltas[c.i]);
        if (k == 1) return api.result_int64(ctx, ids[c.i]);
        no_such_parameter(ctx);
    }
    bool key(size_t i, i64 &out) const override {
        out = ids[i];
        return true;
    }
    const i64 *keys() const override { return ids; }
};

// Rows given as columns of native buffers (StoreDb::bulk_columns): n rows whose parameter k is
// column k: the row's number from a start, a little-endian uint32 read every `stride` of a
// buffer (packed (left, right, token) triples are three such columns), or a blob cut from one
// buffer by n + 1 int64 offsets. Why: a base's 600 K rows (o200k_base: its ids, merges and tokens)
// as Python tuples, copied into PyRows, were ~0.1 CPU s of its load beyond SQLite's own work.
// The buffers were checked to hold n rows (bulk_columns) and stay alive through the call.
struct ColumnRows final : Rows {
    struct Column {
        enum Kind { kIndex, kU32, kBlob } kind;
        i64 start = 0;                     // kIndex: row i is start + i
        const uint8_t *data = nullptr;     // kU32: the uint32s; kBlob: the blobs' bytes
        size_t stride = 1, at = 0;         // kU32: row i is uint32 number i * stride + at
        const uint8_t *offsets = nullptr;  // kBlob: n + 1 int64, row i is data[off[i], off[i + 1])
    };
    size_t n;
    std::vector<Column> cols;
    ColumnRows(size_t rows, std::vector<Column> columns) : n(rows), cols(std::move(columns)) {}
    size_t size() const override { return n; }
    static i64 i64_at(const uint8_t *p, size_t i) {
        i64 v;
        std::memcpy(&v, p + 8 * i, 8);
        return v;
    }
    void column(RowsCursorState &c, sqlite3_context *ctx, int k) const override {
        if (k < 0 || size_t(k) >= cols.size()) return no_such_parameter(ctx);
        const Column &col = cols[size_t(k)];
        const size_t i = c.i;
        if (col.kind == Column::kIndex) return api.result_int64(ctx, col.start + i64(i));
        if (col.kind == Column::kU32) {
            const uint8_t *p = col.data + 4 * (i * col.stride + col.at);
            return api.result_int64(ctx, i64(uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
                                             uint32_t(p[3]) << 24));
        }
        const i64 lo = i64_at(col.offsets, i), hi = i64_at(col.offsets, i + 1);
        return api.result_blob(ctx, hi > lo ? static_cast<const void *>(col.data + lo) : kEmpty, int(hi - lo),
                               kStatic);
    }
};

// Python rows (tuples or lists), copied first with the GIL held, as bind_python binds them.
struct PyRows final : Rows {
    struct Cell {
        int type;  // kInteger, kFloat, kText, kBlob, or 5 (NULL)
        i64 i;
        double d;
        size_t off, len;  // text and blobs: in `bytes`
    };
    size_t n = 0, arity = 0;
    std::vector<Cell> cells;
    std::string bytes;

    explicit PyRows(nb::handle rows) {
        for (nb::handle row : nb::iter(rows)) {
            PyObject *seq = row.ptr();
            if (!PyTuple_Check(seq) && !PyList_Check(seq)) throw nb::type_error("parameters must be a tuple or list");
            const size_t have = size_t(PySequence_Fast_GET_SIZE(seq));
            if (n == 0) arity = have;
            if (have != arity) throw nb::value_error("every row must have as many parameters as the first");
            PyObject **items = PySequence_Fast_ITEMS(seq);
            for (size_t k = 0; k < have; ++k) cells.push_back(cell(items[k]));
            ++n;
        }
    }
    Cell cell(PyObject *o) {
        Cell c{5, 0, 0.0, 0, 0};
        if (o == Py_None) return c;
        if (PyLong_Check(o)) {
            c.type = kInteger;
            c.i = PyLong_AsLongLong(o);
            if (c.i == -1 && PyErr_Occurred()) throw nb::python_error();
        } else if (PyFloat_Check(o)) {
            c.type = kFloat;
            c.d = PyFloat_AS_DOUBLE(o);
        } else if (PyUnicode_Check(o)) {
            Py_ssize_t len;
            const char *s = PyUnicode_AsUTF8AndSize(o, &len);
            if (s == nullptr) throw nb::python_error();
            c.type = kText;
            c.off = bytes.size(), c.len = size_t(len);
            bytes.append(s, size_t(len));
        } else if (PyBytes_Check(o) || PyByteArray_Check(o)) {
            const bool b = PyBytes_Check(o);
            c.type = kBlob;
            c.off = bytes.size(), c.len = size_t(b ? PyBytes_GET_SIZE(o) : PyByteArray_GET_SIZE(o));
            bytes.append(b ? PyBytes_AS_STRING(o) : PyByteArray_AS_STRING(o), c.len);
        } else {
            throw nb::type_error(("cannot store a " + std::string(Py_TYPE(o)->tp_name) + " value").c_str());
        }
        return c;
    }
    size_t size() const override { return n; }
    void column(RowsCursorState &c, sqlite3_context *ctx, int k) const override {
        if (k < 0 || size_t(k) >= arity) return no_such_parameter(ctx);
        const Cell &x = cells[c.i * arity + size_t(k)];
        const char *p = x.len ? bytes.data() + x.off : kEmpty;
        switch (x.type) {
            case kInteger: return api.result_int64(ctx, x.i);
            case kFloat: return api.result_double(ctx, x.d);
            case kText: return api.result_text(ctx, p, int(x.len), kStatic);
            case kBlob: return api.result_blob(ctx, p, int(x.len), kStatic);
            default: return api.result_null(ctx);
        }
    }
    bool key(size_t i, i64 &out) const override {
        if (arity < 2 || cells[i * arity + 1].type != kInteger) return false;
        out = cells[i * arity + 1].i;
        return true;
    }
};

// The rows of the bulk statement running on a connection (nullptr between them), and where
// bpe_store_lookup last found one (keys_checked: the rows' keys were found ascending).
struct RowsSlot {
    const Rows *rows = nullptr;
    RowsCursorState at;
    bool keys_checked = false;
};

// bpe_store_rows: an eponymous-only virtual table (no xCreate: nothing in the schema) over *slot.
struct RowsVtab {
    sqlite3_vtab base;  // first: SQLite sees a sqlite3_vtab *
    RowsSlot *slot;
};
struct RowsCursor {
    sqlite3_vtab_cursor base;
    const Rows *rows = nullptr;
    RowsCursorState at;
};
constexpr int kRowsColumns = 5;  // p1 .. p5: the widest per-row statement (merges) has 5 parameters

inline int rows_connect(sqlite3 *db, void *aux, int, const char *const *, sqlite3_vtab **out, char **) {
    int rc = api.declare_vtab(db, "CREATE TABLE x(p1, p2, p3, p4, p5)");
    if (rc != kOk) return rc;
    api.vtab_config(db, kVtabDirectOnly);
    auto *t = new (std::nothrow) RowsVtab{};
    if (t == nullptr) return 7;  // SQLITE_NOMEM
    t->slot = static_cast<RowsSlot *>(aux);
    *out = &t->base;
    return kOk;
}
inline int rows_disconnect(sqlite3_vtab *t) {
    delete reinterpret_cast<RowsVtab *>(t);
    return kOk;
}
inline int rows_best_index(sqlite3_vtab *, sqlite3_index_info *info) {
    // Only a whole scan: no constraint is used (SQLite tests them itself). The estimate makes
    // any join read bpe_store_rows once, outside (UPDATE ... FROM bpe_store_rows WHERE id = p2).
    info->estimatedCost = 1e5;
    info->estimatedRows = 100000;
    return kOk;
}
inline int rows_open(sqlite3_vtab *t, sqlite3_vtab_cursor **out) {
    auto *c = new (std::nothrow) RowsCursor{};
    if (c == nullptr) return 7;
    c->rows = reinterpret_cast<RowsVtab *>(t)->slot->rows;
    *out = &c->base;
    return kOk;
}
inline int rows_close(sqlite3_vtab_cursor *c) {
    delete reinterpret_cast<RowsCursor *>(c);
    return kOk;
}
inline int rows_filter(sqlite3_vtab_cursor *cur, int, const char *, int, sqlite3_value **) {
    auto *c = reinterpret_cast<RowsCursor *>(cur);
    if (c->rows == nullptr) return kError;  // run outside StoreDb::bulk: a bug
    c->rows->start(c->at);
    return kOk;
}
inline int rows_next(sqlite3_vtab_cursor *cur) {
    auto *c = reinterpret_cast<RowsCursor *>(cur);
    c->rows->next(c->at);
    return kOk;
}
inline int rows_eof(sqlite3_vtab_cursor *cur) {
    auto *c = reinterpret_cast<RowsCursor *>(cur);
    return c->rows == nullptr || c->at.i >= c->rows->size();
}
inline int rows_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int k) {
    auto *c = reinterpret_cast<RowsCursor *>(cur);
    c->rows->column(c->at, ctx, k);
    return kOk;
}
inline int rows_rowid(sqlite3_vtab_cursor *cur, long long *out) {
    *out = i64(reinterpret_cast<RowsCursor *>(cur)->at.i) + 1;
    return kOk;
}

inline const sqlite3_module kRowsModule = {
    1,       nullptr,     rows_connect, rows_best_index, rows_disconnect, rows_disconnect, rows_open,
    rows_close, rows_filter, rows_next, rows_eof,        rows_column,     rows_rowid,
    nullptr, nullptr,     nullptr,      nullptr,         nullptr,         nullptr,         nullptr,
};

// bpe_store_lookup(key): parameter 1 of the running bulk statement's row whose parameter 2 is
// `key`, or NULL when no row has it. Why: an UPDATE ... FROM bpe_store_rows first copies every row
// into an ephemeral table, then seeks each target row in the table's B-tree; when most of a table's
// rows change (the final checkpoint rewrites nearly every word's tokens: 7 M at OpenWebText scale),
//     UPDATE words SET tokens = bpe_store_lookup(id) WHERE bpe_store_lookup(id) IS NOT NULL
// is ONE pass over the table in rowid order that updates each row where the scan stands.
// The rows must be in ascending key order (checked on first use); a scan in key order finds each
// in O(1) (the next row, or the one after the last found), any other order by binary search.
template <class KeyAt>
inline size_t lookup_lower_bound(size_t n, i64 key, const KeyAt &key_at) {
    size_t lo = 0, hi = n;
    while (lo < hi) {  // the first row whose key is >= `key`
        const size_t mid = lo + (hi - lo) / 2;
        if (key_at(mid) < key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

inline void rows_lookup(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
    auto *slot = static_cast<RowsSlot *>(api.user_data(ctx));
    if (slot->rows == nullptr) return api.result_error(ctx, "bpe_store_lookup: no bulk statement is running", -1);
    const Rows &rows = *slot->rows;
    const size_t n = rows.size();
    const i64 *keys = rows.keys();  // why: two calls a row over 7 M words; a virtual call per key adds up
    const auto key_at = [&rows, keys](size_t j) {
        if (keys != nullptr) return keys[j];
        i64 k = 0;
        rows.key(j, k);
        return k;
    };
    if (!slot->keys_checked) {
        for (size_t j = 0; j < n; ++j) {
            i64 k = 0;
            if (!rows.key(j, k)) return api.result_error(ctx, "bpe_store_lookup: the rows have no integer key (p2)", -1);
            if (j > 0 && k <= key_at(j - 1))
                return api.result_error(ctx, "bpe_store_lookup: the rows are not in ascending key (p2) order", -1);
        }
        slot->keys_checked = true;  // the cursor starts at row 0: run_bulk reset it
    }
    if (argc != 1 || api.value_type(argv[0]) != kInteger) return api.result_null(ctx);
    const i64 want = api.value_int64(argv[0]);
    // i: the first row whose key is >= want. The cursor holds the last call's; in a scan in key
    // order it is that one or the next.
    size_t i = slot->at.i;
    if (i < n && key_at(i) == want) {
        // the last call's row: an UPDATE's SET after its WHERE
    } else if (n == 0 || key_at(n - 1) < want) {
        i = n;  // past the last row
    } else if (i < n && key_at(i) > want && (i == 0 || key_at(i - 1) < want)) {
        // between the last call's row and the next: a word without a row
    } else if (i + 1 < n && key_at(i) < want && key_at(i + 1) >= want) {
        ++i;  // the next row (or, past `want`, a word without a row)
    } else {
        i = lookup_lower_bound(n, want, key_at);
    }
    if (i >= n || key_at(i) != want) {
        if (i < n) slot->at.i = i;
        return api.result_null(ctx);
    }
    slot->at.i = i;
    rows.column(slot->at, ctx, 0);
}

}  // namespace bpe::bulk_rows
