// bpe_store._core.StoreDb: the store's native bulk path, a SQLite connection driven from C++ so
// that a checkpoint's hundreds of thousands of rows go from the engine's memory to
// sqlite3_bind_* without a Python tuple per row (bpe_store/store/native_connection.py is its Python face).
//
// Why: on enwiki-100M -> 32K the Python driver's executemany was ~1.9 of ~4.7 CPU s (binding one
// tuple per row, plus making those tuples); the same statements fed inside SQLite cost a third.
//
// Why no sqlite3.h and no link against libsqlite3: the process must use ONE copy of SQLite. Two
// copies in one process that open the same file each keep their own table of POSIX locks per
// inode, and closing a file descriptor in one drops the other's locks (fcntl locks are per process):
// silent corruption. So this file declares the few prototypes it needs and resolves them at run
// time from the library Python's own `_sqlite3` module uses: dlopen(_sqlite3.__file__,
// RTLD_NOLOAD) finds the already-loaded module, and dlsym on it searches its dependencies too
// (libsqlite3.so when linked dynamically; the module itself when SQLite is built in and its symbols
// are visible). Python checks the version matches sqlite3.sqlite_version_info and falls back to
// executemany when anything is missing (store_db.py).
//
// Error reporting: a failing statement raises _core.SqliteError((extended code, sqlite3_errmsg)),
// the two things Python's driver reports, which store_db.py turns into the same sqlite3 exception.
// Native code never prints.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "scanner.h"
#include "store_db.h"

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#define BPE_STORE_HAVE_DLOPEN 1
#endif

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace nb = nanobind;

namespace {

using i64 = long long;

// ---- the SQLite C API, declared here (see the file comment for why) ---------------------------

struct sqlite3;
struct sqlite3_stmt;
struct sqlite3_context;
struct sqlite3_value;
using Destructor = void (*)(void *);

constexpr int kOk = 0, kError = 1, kRow = 100, kDone = 101;
constexpr int kOpenReadWrite = 0x00000002;
// SQLITE_OPEN_NOMUTEX: no connection mutex taken by every bind/step/reset/column call (perf: ~4 %
// of enwiki-100M -> 32K was pthread mutex lock/unlock). Safe because this connection is used by
// one thread at a time: every call holds Busy (a second concurrent call is refused, never run).
constexpr int kOpenNoMutex = 0x00008000;
constexpr int kVtabDirectOnly = 3;  // SQLITE_VTAB_DIRECTONLY: never usable from a schema's views/triggers

// The virtual table API (sqlite3.h's sqlite3_module, version 1, and what it passes): its layout is
// part of SQLite's stable ABI since 3.9 (estimatedRows 3.8.2, idxFlags 3.9, colUsed 3.10).
struct sqlite3_vtab;
struct sqlite3_vtab_cursor;
struct sqlite3_index_info {
    int nConstraint;
    struct Constraint {
        int iColumn;
        unsigned char op, usable;
        int iTermOffset;
    } *aConstraint;
    int nOrderBy;
    struct OrderBy {
        int iColumn;
        unsigned char desc;
    } *aOrderBy;
    struct Usage {
        int argvIndex;
        unsigned char omit;
    } *aConstraintUsage;
    int idxNum;
    char *idxStr;
    int needToFreeIdxStr;
    int orderByConsumed;
    double estimatedCost;
    long long estimatedRows;
    int idxFlags;
    unsigned long long colUsed;
};
struct sqlite3_module {
    int iVersion;
    int (*xCreate)(sqlite3 *, void *, int, const char *const *, sqlite3_vtab **, char **);
    int (*xConnect)(sqlite3 *, void *, int, const char *const *, sqlite3_vtab **, char **);
    int (*xBestIndex)(sqlite3_vtab *, sqlite3_index_info *);
    int (*xDisconnect)(sqlite3_vtab *);
    int (*xDestroy)(sqlite3_vtab *);
    int (*xOpen)(sqlite3_vtab *, sqlite3_vtab_cursor **);
    int (*xClose)(sqlite3_vtab_cursor *);
    int (*xFilter)(sqlite3_vtab_cursor *, int, const char *, int, sqlite3_value **);
    int (*xNext)(sqlite3_vtab_cursor *);
    int (*xEof)(sqlite3_vtab_cursor *);
    int (*xColumn)(sqlite3_vtab_cursor *, sqlite3_context *, int);
    int (*xRowid)(sqlite3_vtab_cursor *, long long *);
    void *xUpdate, *xBegin, *xSync, *xCommit, *xRollback, *xFindFunction, *xRename;  // unused: NULL
};
struct sqlite3_vtab {
    const sqlite3_module *pModule;
    int nRef;
    char *zErrMsg;
};
struct sqlite3_vtab_cursor {
    sqlite3_vtab *pVtab;
};
constexpr int kInteger = 1, kFloat = 2, kText = 3, kBlob = 4;
const Destructor kStatic = nullptr;  // SQLITE_STATIC: the value outlives the statement's step

struct Api {
    int (*open_v2)(const char *, sqlite3 **, int, const char *);
    int (*close_v2)(sqlite3 *);
    int (*prepare_v2)(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
    int (*step)(sqlite3_stmt *);
    int (*reset)(sqlite3_stmt *);
    int (*finalize)(sqlite3_stmt *);
    int (*bind_parameter_count)(sqlite3_stmt *);
    int (*bind_int64)(sqlite3_stmt *, int, i64);
    int (*bind_double)(sqlite3_stmt *, int, double);
    int (*bind_blob)(sqlite3_stmt *, int, const void *, int, Destructor);
    int (*bind_text)(sqlite3_stmt *, int, const char *, int, Destructor);
    int (*bind_null)(sqlite3_stmt *, int);
    int (*column_count)(sqlite3_stmt *);
    int (*column_type)(sqlite3_stmt *, int);
    i64 (*column_int64)(sqlite3_stmt *, int);
    double (*column_double)(sqlite3_stmt *, int);
    const void *(*column_blob)(sqlite3_stmt *, int);
    const unsigned char *(*column_text)(sqlite3_stmt *, int);
    int (*column_bytes)(sqlite3_stmt *, int);
    const char *(*errmsg)(sqlite3 *);
    int (*extended_errcode)(sqlite3 *);
    int (*extended_result_codes)(sqlite3 *, int);
    int (*get_autocommit)(sqlite3 *);
    int (*libversion_number)();
    const char *(*column_name)(sqlite3_stmt *, int);
    int (*limit)(sqlite3 *, int, int);
    void (*progress_handler)(sqlite3 *, int, int (*)(void *), void *);
    int (*create_module_v2)(sqlite3 *, const char *, const sqlite3_module *, void *, Destructor);
    int (*create_function_v2)(sqlite3 *, const char *, int, int, void *,
                              void (*)(sqlite3_context *, int, sqlite3_value **),
                              void (*)(sqlite3_context *, int, sqlite3_value **), void (*)(sqlite3_context *),
                              Destructor);
    void *(*user_data)(sqlite3_context *);
    int (*value_type)(sqlite3_value *);
    i64 (*value_int64)(sqlite3_value *);
    int (*declare_vtab)(sqlite3 *, const char *);
    int (*vtab_config)(sqlite3 *, int, ...);
    void (*result_int64)(sqlite3_context *, i64);
    void (*result_double)(sqlite3_context *, double);
    void (*result_blob)(sqlite3_context *, const void *, int, Destructor);
    void (*result_text)(sqlite3_context *, const char *, int, Destructor);
    void (*result_null)(sqlite3_context *);
    void (*result_error)(sqlite3_context *, const char *, int);
};

Api api;
bool api_loaded = false;

// Resolves the API from the SQLite that `module_file` (Python's _sqlite3 extension, already
// loaded) uses; returns sqlite3_libversion_number(). Throws RuntimeError saying what is missing.
int load_api(const std::string &module_file) {
#ifdef BPE_STORE_HAVE_DLOPEN
    if (api_loaded) return api.libversion_number();
    void *h = dlopen(module_file.c_str(), RTLD_NOLOAD | RTLD_LAZY);  // never loads a second copy
    if (h == nullptr) throw std::runtime_error("_sqlite3 is not loaded from " + module_file);
    Api a{};
    auto need = [&](auto &fn, const char *name) {
        void *p = dlsym(h, name);
        if (p == nullptr) throw std::runtime_error(std::string("SQLite symbol not visible: ") + name);
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    need(a.open_v2, "sqlite3_open_v2");
    need(a.close_v2, "sqlite3_close_v2");
    need(a.prepare_v2, "sqlite3_prepare_v2");
    need(a.step, "sqlite3_step");
    need(a.reset, "sqlite3_reset");
    need(a.finalize, "sqlite3_finalize");
    need(a.bind_parameter_count, "sqlite3_bind_parameter_count");
    need(a.bind_int64, "sqlite3_bind_int64");
    need(a.bind_double, "sqlite3_bind_double");
    need(a.bind_blob, "sqlite3_bind_blob");
    need(a.bind_text, "sqlite3_bind_text");
    need(a.bind_null, "sqlite3_bind_null");
    need(a.column_count, "sqlite3_column_count");
    need(a.column_type, "sqlite3_column_type");
    need(a.column_int64, "sqlite3_column_int64");
    need(a.column_double, "sqlite3_column_double");
    need(a.column_blob, "sqlite3_column_blob");
    need(a.column_text, "sqlite3_column_text");
    need(a.column_bytes, "sqlite3_column_bytes");
    need(a.errmsg, "sqlite3_errmsg");
    need(a.extended_errcode, "sqlite3_extended_errcode");
    need(a.extended_result_codes, "sqlite3_extended_result_codes");
    need(a.get_autocommit, "sqlite3_get_autocommit");
    need(a.libversion_number, "sqlite3_libversion_number");
    need(a.column_name, "sqlite3_column_name");
    need(a.limit, "sqlite3_limit");
    need(a.progress_handler, "sqlite3_progress_handler");
    need(a.create_module_v2, "sqlite3_create_module_v2");
    need(a.create_function_v2, "sqlite3_create_function_v2");
    need(a.user_data, "sqlite3_user_data");
    need(a.value_type, "sqlite3_value_type");
    need(a.value_int64, "sqlite3_value_int64");
    need(a.declare_vtab, "sqlite3_declare_vtab");
    need(a.vtab_config, "sqlite3_vtab_config");
    need(a.result_int64, "sqlite3_result_int64");
    need(a.result_double, "sqlite3_result_double");
    need(a.result_blob, "sqlite3_result_blob");
    need(a.result_text, "sqlite3_result_text");
    need(a.result_null, "sqlite3_result_null");
    need(a.result_error, "sqlite3_result_error");
    api = a;
    api_loaded = true;
    return api.libversion_number();
#else
    (void)module_file;
    throw std::runtime_error("no dlopen on this platform");
#endif
}

// A failed SQLite call: turned into _core.SqliteError((code, message)) by the translator below.
struct SqliteFailure {
    int code;
    std::string message;
};

PyObject *sqlite_error_type = nullptr;

// A zero-length blob must still have a non-NULL pointer: sqlite3_bind_blob(NULL) binds NULL.
const char kEmpty[1] = {0};

// ---- bulk statements: rows read by SQLite from native memory -------------------------------------
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

void no_such_parameter(sqlite3_context *ctx) {
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

int rows_connect(sqlite3 *db, void *aux, int, const char *const *, sqlite3_vtab **out, char **) {
    int rc = api.declare_vtab(db, "CREATE TABLE x(p1, p2, p3, p4, p5)");
    if (rc != kOk) return rc;
    api.vtab_config(db, kVtabDirectOnly);
    auto *t = new (std::nothrow) RowsVtab{};
    if (t == nullptr) return 7;  // SQLITE_NOMEM
    t->slot = static_cast<RowsSlot *>(aux);
    *out = &t->base;
    return kOk;
}
int rows_disconnect(sqlite3_vtab *t) {
    delete reinterpret_cast<RowsVtab *>(t);
    return kOk;
}
int rows_best_index(sqlite3_vtab *, sqlite3_index_info *info) {
    // Only a whole scan: no constraint is used (SQLite tests them itself). The estimate makes
    // any join read bpe_store_rows once, outside (UPDATE ... FROM bpe_store_rows WHERE id = p2).
    info->estimatedCost = 1e5;
    info->estimatedRows = 100000;
    return kOk;
}
int rows_open(sqlite3_vtab *t, sqlite3_vtab_cursor **out) {
    auto *c = new (std::nothrow) RowsCursor{};
    if (c == nullptr) return 7;
    c->rows = reinterpret_cast<RowsVtab *>(t)->slot->rows;
    *out = &c->base;
    return kOk;
}
int rows_close(sqlite3_vtab_cursor *c) {
    delete reinterpret_cast<RowsCursor *>(c);
    return kOk;
}
int rows_filter(sqlite3_vtab_cursor *cur, int, const char *, int, sqlite3_value **) {
    auto *c = reinterpret_cast<RowsCursor *>(cur);
    if (c->rows == nullptr) return kError;  // run outside StoreDb::bulk: a bug
    c->rows->start(c->at);
    return kOk;
}
int rows_next(sqlite3_vtab_cursor *cur) {
    auto *c = reinterpret_cast<RowsCursor *>(cur);
    c->rows->next(c->at);
    return kOk;
}
int rows_eof(sqlite3_vtab_cursor *cur) {
    auto *c = reinterpret_cast<RowsCursor *>(cur);
    return c->rows == nullptr || c->at.i >= c->rows->size();
}
int rows_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int k) {
    auto *c = reinterpret_cast<RowsCursor *>(cur);
    c->rows->column(c->at, ctx, k);
    return kOk;
}
int rows_rowid(sqlite3_vtab_cursor *cur, long long *out) {
    *out = i64(reinterpret_cast<RowsCursor *>(cur)->at.i) + 1;
    return kOk;
}

const sqlite3_module kRowsModule = {
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
size_t lookup_lower_bound(size_t n, i64 key, const KeyAt &key_at) {
    size_t lo = 0, hi = n;
    while (lo < hi) {  // the first row whose key is >= `key`
        const size_t mid = lo + (hi - lo) / 2;
        if (key_at(mid) < key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void rows_lookup(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
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

// ---- sql --format csv|json|jsonl: rows formatted here, as Python's csv / json write them ------------

// Why native: `bpe-store sql` made a Python tuple per row and formatted each value in Python
// (csv.writer, json), ~4x the CPU of `sqlite3 -csv` for 1 M rows. Here each value goes from the
// statement to an output buffer, with the same text as bpe_store.cli.main.write_rows makes.

// Length of the valid UTF-8 sequence at s (as Python's strict decoder accepts: no overlong form,
// no surrogate, nothing past U+10FFFF), or 0 when none starts there.
size_t utf8_seq(const unsigned char *s, size_t n) {
    const unsigned char b = s[0];
    auto cont = [&](size_t k) { return k < n && (s[k] & 0xC0) == 0x80; };
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return cont(1) ? 2 : 0;
    if (b >= 0xE0 && b <= 0xEF) {
        if (n < 2) return 0;
        const unsigned char c = s[1];
        const bool ok1 = b == 0xE0 ? (c >= 0xA0 && c <= 0xBF) : b == 0xED ? (c >= 0x80 && c <= 0x9F) : cont(1);
        return ok1 && cont(2) ? 3 : 0;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (n < 2) return 0;
        const unsigned char c = s[1];
        const bool ok1 = b == 0xF0 ? (c >= 0x90 && c <= 0xBF) : b == 0xF4 ? (c >= 0x80 && c <= 0x8F) : cont(1);
        return ok1 && cont(2) && cont(3) ? 4 : 0;
    }
    return 0;
}

// display.plain: UTF-8 as it is, each byte of an invalid sequence as \xNN (Python's backslashreplace)
void put_plain(std::string &out, const unsigned char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t i = 0;
    while (i < n) {
        size_t run = i;  // a run of valid sequences, copied at once (ASCII: no call per byte)
        for (size_t k; run < n;) {
            if (s[run] < 0x80) {
                ++run;
                continue;
            }
            if ((k = utf8_seq(s + run, n - run)) == 0) break;
            run += k;
        }
        out.append(reinterpret_cast<const char *>(s + i), run - i);
        i = run;
        if (i < n) {
            const char esc[4] = {'\\', 'x', hex[s[i] >> 4], hex[s[i] & 15]};
            out.append(esc, 4);
            ++i;
        }
    }
}

// A JSON string as json.dumps(ensure_ascii=False) writes one
void put_json_string(std::string &out, const std::string &v) {
    static const char hex[] = "0123456789abcdef";
    out.push_back('"');
    size_t done = 0;  // v[done..i) needs no escape: appended at once
    for (size_t i = 0; i < v.size(); ++i) {
        const unsigned char c = static_cast<unsigned char>(v[i]);
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        out.append(v, done, i - done);
        done = i + 1;
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
            const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            out.append(esc, 6);
        }
    }
    out.append(v, done, v.size() - done);
    out.push_back('"');
}

// A CSV field as csv.writer (QUOTE_MINIMAL, lineterminator "\n") writes it; `quote_cr`: whether
// this Python's csv quotes a field holding "\r" (probed by the caller).
void put_csv_field(std::string &out, const std::string &v, bool quote_cr) {
    bool quote = false;
    for (char c : v)
        if (c == ',' || c == '"' || c == '\n' || (c == '\r' && quote_cr)) {
            quote = true;
            break;
        }
    if (!quote) {
        out += v;
        return;
    }
    out.push_back('"');
    for (char c : v) {
        if (c == '"') out.push_back('"');
        out.push_back(c);
    }
    out.push_back('"');
}

// repr(float) (csv), and json's spelling of the non-finite ones
std::string float_text(double d, bool json) {
    if (std::isnan(d)) return json ? "NaN" : "nan";
    if (std::isinf(d)) return d > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf");
    nb::gil_scoped_acquire gil;  // PyOS_double_to_string allocates with PyMem
    char *p = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);
    if (p == nullptr) throw nb::python_error();
    std::string s(p);
    PyMem_Free(p);
    return s;
}

void write_all(int fd, std::string &buf) {
    size_t at = 0;
    while (at < buf.size()) {
        ssize_t w = ::write(fd, buf.data() + at, buf.size() - at);
        if (w < 0) {
            if (errno == EINTR) {
                nb::gil_scoped_acquire gil;
                if (PyErr_CheckSignals() != 0) throw nb::python_error();
                continue;
            }
            nb::gil_scoped_acquire gil;
            PyErr_SetFromErrno(PyExc_OSError);  // EPIPE: BrokenPipeError
            throw nb::python_error();
        }
        at += size_t(w);
    }
    buf.clear();
}

// A read-only connection to a store and the one statement `write_query` runs on it; both closed
// with it (after the GIL is taken back, as the caller's scope ends).
struct QueryConn {
    sqlite3 *db = nullptr;
    sqlite3_stmt *st = nullptr;
    bool signalled = false;  // the progress handler saw a Python signal's exception

    QueryConn() = default;
    QueryConn(const QueryConn &) = delete;
    QueryConn &operator=(const QueryConn &) = delete;
    ~QueryConn() {
        if (st) api.finalize(st);
        if (db) api.close_v2(db);
    }
    SqliteFailure failed(int rc) const { return {rc, db ? api.errmsg(db) : "unable to open database file"}; }
    // a step's failure: the signal handler's exception (KeyboardInterrupt) if it stopped the step
    SqliteFailure failed_step(int rc) const {
        if (signalled) {
            nb::gil_scoped_acquire gil;
            throw nb::python_error();
        }
        return failed(rc);
    }

    // Opens `path` read-only, values at most `max_value_bytes`, nothing attachable, no trust in the
    // schema's functions, and Ctrl-C seen while SQLite works between rows (a sort before the first):
    // a Python signal handler runs every ~100 K virtual machine steps, and an exception stops it.
    void open(const std::string &path, int max_value_bytes) {
        int rc = api.open_v2(path.c_str(), &db, 0x00000001 /* READONLY */ | kOpenNoMutex, nullptr);
        if (rc != kOk) throw failed(rc);
        api.extended_result_codes(db, 1);
        api.limit(db, 0 /* SQLITE_LIMIT_LENGTH */, max_value_bytes);
        api.limit(db, 7 /* SQLITE_LIMIT_ATTACHED */, 0);
        for (const char *pragma : {"PRAGMA trusted_schema = OFF", "PRAGMA query_only = ON", "PRAGMA busy_timeout = 10000"}) {
            sqlite3_stmt *p = nullptr;
            rc = api.prepare_v2(db, pragma, -1, &p, nullptr);
            if (rc == kOk) rc = api.step(p);
            if (p) api.finalize(p);
            if (rc != kOk && rc != kDone && rc != kRow) throw failed(rc);
        }
        api.progress_handler(db, 100000, [](void *flag) -> int {
            nb::gil_scoped_acquire gil;
            if (PyErr_CheckSignals() == 0) return 0;
            *static_cast<bool *>(flag) = true;
            return 1;  // SQLITE_INTERRUPT
        }, &signalled);
    }

    void prepare(const std::string &sql) {
        int rc = api.prepare_v2(db, sql.c_str(), int(sql.size()), &st, nullptr);
        if (rc != kOk) throw failed(rc);
        if (st == nullptr) throw SqliteFailure{kError, "not a statement"};
    }
};

// How `write_query` spells rows: csv as Python's csv.writer, json/jsonl as json.dumps of
// {column: value} (display.plain's text for TEXT and BLOB values).
struct RowFormat {
    bool csv, json_array;  // json_array: "json" (one array), else "jsonl" (an object a line)
    bool quote_cr, quote_lone_empty;  // what this Python's csv does (probed by the caller)
    int ncol = 0;
    std::vector<std::string> names;
    std::vector<std::pair<std::string, int>> keys;  // json: `"name": ` and the column it takes
    std::string field;  // scratch for one value's text

    // The statement's column names; json: a key per distinct name, where it first appears, with
    // the value of its last column (what {c: v for c, v in zip(columns, row)} makes)
    void columns(sqlite3_stmt *st) {
        ncol = api.column_count(st);
        names.assign(size_t(std::max(ncol, 0)), std::string());
        for (int c = 0; c < ncol; ++c) {
            const char *nm = api.column_name(st, c);
            names[c] = nm ? nm : "";
        }
        if (csv) return;
        std::unordered_map<std::string, size_t> at;
        for (int c = 0; c < ncol; ++c) {
            auto it = at.find(names[c]);
            if (it == at.end()) {
                at.emplace(names[c], keys.size());
                keys.emplace_back(names[c], c);
            } else {
                keys[it->second].second = c;
            }
        }
        for (auto &k : keys) {  // the key's text as JSON once
            std::string quoted;
            put_json_string(quoted, k.first);
            k.first = quoted + ": ";
        }
    }

    void csv_header(std::string &buf) const {
        for (int c = 0; c < ncol; ++c) {
            if (c) buf.push_back(',');
            put_csv_field(buf, names[c], quote_cr);
        }
        if (ncol == 1 && names[0].empty() && quote_lone_empty) buf += "\"\"";
        buf.push_back('\n');
    }

    // A TEXT or BLOB value: the common case (printable ASCII, nothing to escape) as it is
    void put_text(const unsigned char *p, int n, std::string &out) {
        bool simple = true;
        for (int k = 0; k < n && simple; ++k)
            simple = p[k] >= 0x20 && p[k] < 0x7F && p[k] != '"' && p[k] != '\\' && p[k] != ',';
        if (simple && n > 0) {
            if (!csv) out.push_back('"');
            out.append(reinterpret_cast<const char *>(p), size_t(n));
            if (!csv) out.push_back('"');
            return;
        }
        field.clear();
        if (p) put_plain(field, p, size_t(n));
        if (!csv) put_json_string(out, field);
        else if (ncol == 1 && field.empty() && quote_lone_empty) out += "\"\"";
        else put_csv_field(out, field, quote_cr);
    }

    void put_value(sqlite3_stmt *st, int c, std::string &out) {
        switch (api.column_type(st, c)) {
        case kInteger: {
            char num[24];  // why to_chars: no string allocated per value
            auto r = std::to_chars(num, num + sizeof num, api.column_int64(st, c));
            out.append(num, size_t(r.ptr - num));
            break;
        }
        case kFloat: out += float_text(api.column_double(st, c), !csv); break;
        case kText:
        case kBlob:  // the bytes as stored
            put_text(static_cast<const unsigned char *>(api.column_blob(st, c)), api.column_bytes(st, c), out);
            break;
        default:  // NULL
            if (!csv) out += "null";
            else if (ncol == 1 && quote_lone_empty) out += "\"\"";
        }
    }

    // the current row of `st`, the `index`-th written
    void put_row(sqlite3_stmt *st, i64 index, std::string &buf) {
        if (csv) {
            for (int c = 0; c < ncol; ++c) {
                if (c) buf.push_back(',');
                put_value(st, c, buf);
            }
            buf.push_back('\n');
            return;
        }
        buf += json_array ? (index ? ",\n {" : "[\n {") : "{";
        for (size_t k = 0; k < keys.size(); ++k) {
            if (k) buf += ", ";
            buf += keys[k].first;
            put_value(st, keys[k].second, buf);
        }
        buf += json_array ? "}" : "}\n";
    }
};

// Runs `sql` (one statement the caller checked is read-only) on the store at `path`, opened
// read-only, and writes its rows to `fd` as csv, json or jsonl; at most `limit` rows (-1: all).
// Returns the number of rows. Ctrl-C is seen every 1024 rows (KeyboardInterrupt).
i64 write_query(const std::string &path, const std::string &sql, int fd, const std::string &format, i64 limit,
                int max_value_bytes, bool quote_cr, bool quote_lone_empty) {
    if (!api_loaded) throw std::runtime_error("write_query: store_db_load() was not called");
    if (format != "csv" && format != "json" && format != "jsonl") throw nb::value_error("format: csv, json or jsonl");
    RowFormat f{format == "csv", format == "json", quote_cr, quote_lone_empty};
    QueryConn q;
    i64 rows = 0;
    std::string buf;
    {
        nb::gil_scoped_release unlocked;
        q.open(path, max_value_bytes);
        q.prepare(sql);
        f.columns(q.st);
        if (f.csv) f.csv_header(buf);
        while (limit < 0 || rows < limit) {
            const int rc = api.step(q.st);
            if (rc == kDone) break;
            if (rc != kRow) throw q.failed_step(rc);
            f.put_row(q.st, rows, buf);
            ++rows;
            if (buf.size() >= (1u << 20)) write_all(fd, buf);
            if ((rows & 1023) == 0) {
                nb::gil_scoped_acquire gil;
                if (PyErr_CheckSignals() != 0) throw nb::python_error();
            }
        }
        if (f.json_array) buf += rows ? "\n]\n" : "[]\n";
        write_all(fd, buf);
    }
    return rows;
}

class StoreDb {
  public:
    // Opens `path` (an existing store; never creates one) with the pragmas of store._configure.
    StoreDb(const std::string &path, int busy_timeout_ms, const std::string &synchronous, i64 cache_kib,
            i64 journal_size_limit) {
        if (!api_loaded) throw std::runtime_error("StoreDb: store_db_load() was not called");
        int rc;
        {
            nb::gil_scoped_release unlocked;
            rc = api.open_v2(path.c_str(), &db_, kOpenReadWrite | kOpenNoMutex, nullptr);
        }
        if (rc != kOk) {
            SqliteFailure f{rc, db_ ? api.errmsg(db_) : "unable to open database file"};
            if (db_) api.close_v2(db_);
            db_ = nullptr;
            throw f;
        }
        api.extended_result_codes(db_, 1);
        try {
            rc = api.create_module_v2(db_, "bpe_store_rows", &kRowsModule, &slot_, nullptr);
            if (rc != kOk) fail(rc);
            // SQLITE_UTF8 | SQLITE_DIRECTONLY: never callable from a schema's views or triggers
            rc = api.create_function_v2(db_, "bpe_store_lookup", 1, 1 | 0x00080000, &slot_, rows_lookup, nullptr,
                                        nullptr, nullptr);
            if (rc != kOk) fail(rc);
            configure(busy_timeout_ms, synchronous, cache_kib, journal_size_limit);
        } catch (...) {
            release();  // a constructor that throws runs no destructor
            throw;
        }
    }

    ~StoreDb() { release(); }  // no call can be running: each holds a reference to this object

    // Refused while a call runs (with the GIL released on another thread, or a generator of rows
    // calling back into it): finalizing its statement under it would be a use after free.
    void close() {
        if (busy_.exchange(true)) throw std::runtime_error("StoreDb is in use: it cannot be closed now");
        release();
        busy_.store(false);
    }

  private:
    void release() {
        if (db_ == nullptr) return;
        for (auto &kv : stmts_) api.finalize(kv.second);
        stmts_.clear();
        api.close_v2(db_);
        db_ = nullptr;
    }

    void configure(int busy_timeout_ms, const std::string &synchronous, i64 cache_kib, i64 journal_size_limit) {
        if (synchronous != "FULL" && synchronous != "OFF" && synchronous != "NORMAL")
            throw nb::value_error("synchronous must be FULL, NORMAL or OFF");
        run("PRAGMA trusted_schema = OFF");  // no schema-defined code with side effects, ever
        run("PRAGMA busy_timeout = " + std::to_string(busy_timeout_ms));
        run("PRAGMA synchronous = " + synchronous);
        run("PRAGMA journal_size_limit = " + std::to_string(journal_size_limit));
        // 0: SQLite's default cache (2 MB). Why the caller decides: a merge checkpoint wants a
        // larger one (store.CHECKPOINT_CACHE_KIB), but held from counting's first flush on it
        // would stay resident through merging, the engine's peak.
        if (cache_kib > 0) run("PRAGMA cache_size = -" + std::to_string(cache_kib));
    }

  public:
    bool in_transaction() const { return db_ != nullptr && api.get_autocommit(db_) == 0; }

    // One statement with Python parameters; returns its rows as tuples (small statements only:
    // BEGIN/COMMIT, the run and checkpoints rows, tests' queries).
    nb::list execute(const std::string &sql, nb::handle params) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        bind_python(st, params);
        nb::list out;
        const int ncol = api.column_count(st);
        while (true) {
            int rc;
            {
                nb::gil_scoped_release unlocked;  // BEGIN IMMEDIATE may wait for busy_timeout
                rc = api.step(st);
            }
            if (rc == kDone) break;
            if (rc != kRow) fail(rc);
            nb::list row;
            for (int k = 0; k < ncol; ++k) row.append(column(st, k));
            out.append(nb::tuple(row));
        }
        return out;
    }

    // The statement once per row of `rows`, any iterable of parameter tuples (a counting flush's
    // count deltas and chunk marks; a checkpoint's large writes are bulk statements). Returns
    // the number of rows.
    size_t executemany(const std::string &sql, nb::handle rows) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        size_t n = 0;
        for (nb::handle row : nb::iter(rows)) {
            bind_python(st, row);
            int rc = api.step(st);  // GIL held: each row was just made by Python anyway
            if (rc != kDone && rc != kRow) fail(rc);
            api.reset(st);
            ++n;
        }
        return n;
    }

    // A bulk statement (see bpe_store_rows above): `sql` runs once, reading `rows` as the table
    // bpe_store_rows (p1, p2, ... = a row's parameters 1, 2, ...): a merge engine's checkpoint
    // stream (read from its arrays) or any iterable of parameter tuples (copied first). Returns the
    // number of rows. The GIL is released while it runs.
    size_t bulk(const std::string &sql, nb::handle rows) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        CheckpointRowsView v;
        if (checkpoint_rows_view(rows, v)) return run_bulk(st, ViewRows(v));
        return run_bulk(st, PyRows(rows));
    }

    // A bulk statement over a counting flush's new words as packed counts (``WordCounter.pack``,
    // ``WordIds.pack``): rows (id, bytes, count), ids first_id, first_id + 1, ... in order.
    // Why packed: 7 M words at OpenWebText scale would each be a Python tuple otherwise.
    size_t bulk_packed_words(const std::string &sql, nb::bytes packed, i64 first_id) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        const auto *data = static_cast<const uint8_t *>(packed.data());
        const size_t size = packed.size();
        bool too_big = false;
        try {  // valid: all or nothing, before any row is written
            bpe::unpack_counts(data, size, [&](const uint8_t *, size_t, uint64_t count) {
                too_big = too_big || count > uint64_t(INT64_MAX);
            });
        } catch (const std::invalid_argument &e) {
            throw nb::value_error(e.what());
        }
        if (too_big) throw std::overflow_error("a word count does not fit in 64 bits");
        return run_bulk(st, PackedWordRows(data, size, first_id));  // `packed` is immutable, held by the caller
    }

    // A bulk statement over a counting flush's count deltas (WordIds.add_native's buffer: n int64
    // ids ascending, then n int64 deltas): rows (p1 delta, p2 id), keyed by id for bpe_store_lookup.
    size_t bulk_deltas(const std::string &sql, nb::bytes deltas) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        if (deltas.size() % 16 != 0) throw nb::value_error("count deltas: the buffer is not n ids and n deltas");
        if (reinterpret_cast<uintptr_t>(deltas.data()) % alignof(i64) != 0) {  // CPython's bytes are aligned
            std::vector<i64> aligned(deltas.size() / 8);
            std::memcpy(aligned.data(), deltas.data(), deltas.size());
            return run_bulk(st, DeltaRows(reinterpret_cast<const uint8_t *>(aligned.data()), deltas.size()));
        }
        return run_bulk(st, DeltaRows(static_cast<const uint8_t *>(deltas.data()), deltas.size()));
    }

    // Every row of `sql` (id, bytes, count, tokens or NULL), into one buffer for the merge engine,
    // with the GIL released. A row of the wrong types is a ValueError naming it, as the engine
    // gives for Python rows (the store is damaged).
    WordRows read_word_rows(const std::string &sql) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        if (api.column_count(st) != 4) throw nb::value_error("the query must give (id, bytes, count, tokens)");
        WordRows out;
        std::string bad;
        int rc;
        {
            nb::gil_scoped_release unlocked;
            while ((rc = api.step(st)) == kRow) {
                // the message's prefix only once a row is bad (a string per row cost ~0.1 us each)
                const auto where = [&] { return "word row " + std::to_string(out.n) + ": "; };
                const int tt = api.column_type(st, 3);
                if (api.column_type(st, 0) != kInteger || api.column_type(st, 2) != kInteger) {
                    bad = where() + "ids and counts must be 64-bit integers";
                } else if (api.column_type(st, 1) != kBlob) {
                    bad = where() + "word bytes must be bytes";
                } else if (tt != kBlob && tt != 5) {  // 5: SQLITE_NULL
                    bad = where() + "tokens must be bytes or None";
                }
                if (!bad.empty()) break;
                const i64 id = api.column_int64(st, 0), count = api.column_int64(st, 2);
                const void *bytes = api.column_blob(st, 1);
                const uint32_t nb = uint32_t(api.column_bytes(st, 1));
                const void *toks = tt == kBlob ? api.column_blob(st, 3) : nullptr;
                const uint32_t nt = tt == kBlob ? uint32_t(api.column_bytes(st, 3)) : WordRows::kNull;
                const size_t at = out.data.size();
                out.data.resize(at + WordRows::kHeader + nb + (tt == kBlob ? nt : 0));
                uint8_t *p = out.data.data() + at;
                std::memcpy(p, &id, 8);
                std::memcpy(p + 8, &count, 8);
                std::memcpy(p + 16, &nb, 4);
                std::memcpy(p + 20, &nt, 4);
                if (nb) std::memcpy(p + WordRows::kHeader, bytes, nb);
                if (tt == kBlob && nt) std::memcpy(p + WordRows::kHeader + nb, toks, nt);
                ++out.n;
            }
        }
        if (!bad.empty()) throw nb::value_error(bad.c_str());
        if (rc != kDone) fail(rc);
        return out;
    }

  private:
    size_t run_bulk(sqlite3_stmt *st, const Rows &rows) {
        if (api.bind_parameter_count(st) != 0)
            throw nb::value_error("a bulk statement takes no parameters: it reads bpe_store_rows");
        struct Clear {
            RowsSlot &slot;
            ~Clear() { slot.rows = nullptr; }
        } clear{slot_};
        slot_.rows = &rows;
        slot_.keys_checked = false;
        slot_.at = RowsCursorState{};
        int rc;
        {
            nb::gil_scoped_release unlocked;
            while ((rc = api.step(st)) == kRow) {
            }
        }
        if (rc != kDone) fail(rc);
        return rows.size();
    }

    // Refuses a second call while one runs with the GIL released (another Python thread).
    struct Busy {
        StoreDb *d;
        explicit Busy(StoreDb *db) : d(db) {
            if (d->db_ == nullptr) throw std::runtime_error("StoreDb is closed");
            if (d->busy_.exchange(true)) throw std::runtime_error("StoreDb is in use by another thread");
        }
        ~Busy() { d->busy_.store(false); }
    };
    // Leaves a statement reset (no read or write lock kept by it) however the call ends.
    struct Reset {
        sqlite3_stmt *st;
        explicit Reset(sqlite3_stmt *s) : st(s) {}
        ~Reset() { api.reset(st); }
    };

    // Runs a parameterless statement, ignoring rows (the pragmas).
    void run(const std::string &sql) {
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        int rc;
        while ((rc = api.step(st)) == kRow) {
        }
        if (rc != kDone) fail(rc);
    }

    // Statements are prepared once and kept: a run writes the same dozen statements each batch.
    sqlite3_stmt *prepare(const std::string &sql) {
        auto it = stmts_.find(sql);
        if (it != stmts_.end()) return it->second;
        sqlite3_stmt *st = nullptr;
        const char *tail = nullptr;
        int rc = api.prepare_v2(db_, sql.c_str(), int(sql.size()) + 1, &st, &tail);
        if (rc != kOk) fail(rc);
        if (st == nullptr) throw nb::value_error("an empty statement");
        while (tail != nullptr && (*tail == ' ' || *tail == '\n' || *tail == ';')) ++tail;
        if (tail != nullptr && *tail != 0) {
            api.finalize(st);
            throw nb::value_error("one statement at a time");
        }
        stmts_.emplace(sql, st);
        return st;
    }

    [[noreturn]] void fail(int rc) {
        int code = api.extended_errcode(db_);
        throw SqliteFailure{code != kOk ? code : rc, api.errmsg(db_)};
    }

    // Binds a Python tuple/list as the statement's parameters, as the sqlite3 driver would for
    // None, int (64-bit; OverflowError past that), float, str and bytes-like values.
    void bind_python(sqlite3_stmt *st, nb::handle params) {
        const int want = api.bind_parameter_count(st);
        PyObject *seq = params.ptr();
        if (!PyTuple_Check(seq) && !PyList_Check(seq)) throw nb::type_error("parameters must be a tuple or list");
        const Py_ssize_t have = PySequence_Fast_GET_SIZE(seq);
        if (have != want)
            throw nb::value_error(("the statement takes " + std::to_string(want) + " parameters, " +
                                   std::to_string(have) + " given").c_str());
        PyObject **items = PySequence_Fast_ITEMS(seq);
        for (int k = 0; k < want; ++k) {
            PyObject *o = items[k];
            int rc;
            if (o == Py_None) {
                rc = api.bind_null(st, k + 1);
            } else if (PyLong_Check(o)) {
                long long x = PyLong_AsLongLong(o);
                if (x == -1 && PyErr_Occurred()) throw nb::python_error();
                rc = api.bind_int64(st, k + 1, x);
            } else if (PyFloat_Check(o)) {
                rc = api.bind_double(st, k + 1, PyFloat_AS_DOUBLE(o));
            } else if (PyUnicode_Check(o)) {
                Py_ssize_t len;
                const char *s = PyUnicode_AsUTF8AndSize(o, &len);  // cached in the str: lives with it
                if (s == nullptr) throw nb::python_error();
                rc = api.bind_text(st, k + 1, s, int(len), kStatic);
            } else if (PyBytes_Check(o)) {
                rc = api.bind_blob(st, k + 1, PyBytes_AS_STRING(o), int(PyBytes_GET_SIZE(o)), kStatic);
            } else if (PyByteArray_Check(o)) {
                Py_ssize_t len = PyByteArray_GET_SIZE(o);
                rc = api.bind_blob(st, k + 1, len ? PyByteArray_AS_STRING(o) : kEmpty, int(len), kStatic);
            } else {
                throw nb::type_error(("cannot store a " + std::string(Py_TYPE(o)->tp_name) + " value").c_str());
            }
            if (rc != kOk) fail(rc);
        }
    }

    nb::object column(sqlite3_stmt *st, int k) {
        switch (api.column_type(st, k)) {
            case kInteger: return nb::steal(PyLong_FromLongLong(api.column_int64(st, k)));
            case kFloat: return nb::steal(PyFloat_FromDouble(api.column_double(st, k)));
            case kText: {
                const char *s = reinterpret_cast<const char *>(api.column_text(st, k));
                return nb::steal(PyUnicode_FromStringAndSize(s, api.column_bytes(st, k)));
            }
            case kBlob: {
                const char *p = static_cast<const char *>(api.column_blob(st, k));
                return nb::steal(PyBytes_FromStringAndSize(p, api.column_bytes(st, k)));
            }
            default: return nb::none();
        }
    }

    sqlite3 *db_ = nullptr;
    RowsSlot slot_;  // bpe_store_rows's rows while bulk() runs (the module's pAux: lives as long as db_)
    std::unordered_map<std::string, sqlite3_stmt *> stmts_;
    std::atomic<bool> busy_{false};
};

}  // namespace

void register_store_db(nb::module_ &m) {
    sqlite_error_type = PyErr_NewExceptionWithDoc(
        "bpe_store._core.SqliteError", "A SQLite call of StoreDb failed: args are (extended code, message).",
        PyExc_Exception, nullptr);
    m.attr("SqliteError") = nb::handle(sqlite_error_type);
    nb::register_exception_translator([](const std::exception_ptr &p, void *) {
        try {
            std::rethrow_exception(p);
        } catch (const SqliteFailure &f) {
            nb::object args = nb::make_tuple(f.code, nb::str(f.message.c_str()));
            PyErr_SetObject(sqlite_error_type, args.ptr());
        }
    });
    m.def("write_query", &write_query, nb::arg("path"), nb::arg("sql"), nb::arg("fd"), nb::arg("format"),
          nb::arg("limit"), nb::arg("max_value_bytes"), nb::arg("quote_cr"), nb::arg("quote_lone_empty"),
          "Run a read-only statement on the store at path (opened read-only) and write its rows to fd as "
          "csv, json or jsonl, as bpe_store.cli.main.write_rows writes them; returns the number of rows.");
    m.def("store_db_load", &load_api, nb::arg("sqlite3_module_file"),
          "Resolve SQLite from the library Python's _sqlite3 (this file, already loaded) uses; "
          "returns sqlite3_libversion_number(). RuntimeError when that is not possible.");
    nb::class_<WordRows>(m, "WordRows", "A store's word rows in one buffer (StoreDb.read_word_rows).")
        .def("__len__", [](const WordRows &r) { return r.n; })
        .def_prop_ro("nbytes", [](const WordRows &r) { return r.data.size(); }, "Bytes of the buffer.")
        .def(
            "extend",
            [](WordRows &r, WordRows &more) {
                r.data.insert(r.data.end(), more.data.begin(), more.data.end());
                r.n += more.n;
                std::vector<uint8_t>().swap(more.data);  // its rows are in r now
                more.n = 0;
            },
            nb::arg("more"), "Append the rows of more (which is emptied): read in parts, loaded as one.");
    nb::class_<StoreDb>(m, "StoreDb", "A native connection to a store for its bulk writes (bpe_store.store.native_connection).")
        .def(nb::init<const std::string &, int, const std::string &, i64, i64>(), nb::arg("path"),
             nb::arg("busy_timeout_ms"), nb::arg("synchronous"), nb::arg("cache_kib"), nb::arg("journal_size_limit"))
        .def("execute", &StoreDb::execute, nb::arg("sql"), nb::arg("params") = nb::tuple(),
             "Run one statement; its rows as tuples.")
        .def("executemany", &StoreDb::executemany, nb::arg("sql"), nb::arg("rows"),
             "Run the statement for each row of parameter tuples.")
        .def("bulk", &StoreDb::bulk, nb::arg("sql"), nb::arg("rows"),
             "Run sql once over rows read as the table bpe_store_rows (p1, p2, ... = a row's parameters): "
             "a checkpoint RowStream (from its arrays) or tuples. Returns the number of rows.")
        .def("bulk_packed_words", &StoreDb::bulk_packed_words, nb::arg("sql"), nb::arg("packed"),
             nb::arg("first_id"),
             "Run sql once over the words of packed counts as bpe_store_rows (p1 id from first_id, p2 bytes, "
             "p3 count).")
        .def("bulk_deltas", &StoreDb::bulk_deltas, nb::arg("sql"), nb::arg("deltas"),
             "Run sql once over count deltas (WordIds.add_native) as bpe_store_rows (p1 delta, p2 id).")
        .def("read_word_rows", &StoreDb::read_word_rows, nb::arg("sql"),
             "Every row of sql (id, bytes, count, tokens or NULL) as one WordRows buffer, for MergeEngine.")
        .def("close", &StoreDb::close)
        .def_prop_ro("in_transaction", &StoreDb::in_transaction);
}
