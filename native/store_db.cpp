// bpe_store._core.StoreDb: the store's native bulk path, a SQLite connection driven from C++ so
// that a checkpoint's hundreds of thousands of rows go from the engine's memory to
// sqlite3_bind_* without a Python tuple per row (bpe_store/store_db.py is its Python face).
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

#include <atomic>
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
using Destructor = void (*)(void *);

constexpr int kOk = 0, kRow = 100, kDone = 101;
constexpr int kOpenReadWrite = 0x00000002;
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

class StoreDb {
  public:
    // Opens `path` (an existing store; never creates one) with the pragmas of store._configure.
    StoreDb(const std::string &path, int busy_timeout_ms, const std::string &synchronous, i64 cache_kib,
            i64 journal_size_limit) {
        if (!api_loaded) throw std::runtime_error("StoreDb: store_db_load() was not called");
        int rc;
        {
            nb::gil_scoped_release unlocked;
            rc = api.open_v2(path.c_str(), &db_, kOpenReadWrite, nullptr);
        }
        if (rc != kOk) {
            SqliteFailure f{rc, db_ ? api.errmsg(db_) : "unable to open database file"};
            if (db_) api.close_v2(db_);
            db_ = nullptr;
            throw f;
        }
        api.extended_result_codes(db_, 1);
        try {
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

    // The statement once per row of `rows`: a merge engine's checkpoint stream (bound straight
    // from its arrays, the GIL released) or any iterable of parameter tuples. Returns the rows.
    size_t executemany(const std::string &sql, nb::handle rows) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        CheckpointRowsView v;
        if (checkpoint_rows_view(rows, v)) {
            write_view(st, v);
            return v.n;
        }
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

    // INSERT of a counting flush's new words from packed counts (``WordCounter.pack``,
    // ``WordIds.pack``): parameters (id, bytes, count), ids first_id, first_id + 1, ... in order.
    // Why packed: 7 M words at OpenWebText scale would each be a Python tuple otherwise.
    size_t insert_packed_words(const std::string &sql, nb::bytes packed, i64 first_id) {
        Busy busy(this);
        sqlite3_stmt *st = prepare(sql);
        Reset reset(st);
        if (api.bind_parameter_count(st) != 3) throw nb::value_error("the statement must take (id, bytes, count)");
        const auto *data = static_cast<const uint8_t *>(packed.data());
        const size_t size = packed.size();
        try {
            bpe::unpack_counts(data, size, [](const uint8_t *, size_t, uint64_t) {});  // valid: all or nothing
        } catch (const std::invalid_argument &e) {
            throw nb::value_error(e.what());
        }
        size_t n = 0;
        int failed = kOk;
        {
            nb::gil_scoped_release unlocked;  // `packed` is immutable and held by the caller
            bpe::unpack_counts(data, size, [&](const uint8_t *w, size_t len, uint64_t count) {
                if (failed != kOk) return;
                if (count > uint64_t(INT64_MAX)) {
                    failed = -1;
                    return;
                }
                api.bind_int64(st, 1, first_id + i64(n));
                api.bind_blob(st, 2, len ? static_cast<const void *>(w) : kEmpty, int(len), kStatic);
                api.bind_int64(st, 3, i64(count));
                int rc = api.step(st);
                api.reset(st);
                if (rc != kDone && rc != kRow) failed = rc;
                ++n;
            });
        }
        if (failed == -1) throw std::overflow_error("a word count does not fit in 64 bits");
        if (failed != kOk) fail(failed);
        return n;
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
                const std::string where = "word row " + std::to_string(out.n) + ": ";
                const int tt = api.column_type(st, 3);
                if (api.column_type(st, 0) != kInteger || api.column_type(st, 2) != kInteger) {
                    bad = where + "ids and counts must be 64-bit integers";
                } else if (api.column_type(st, 1) != kBlob) {
                    bad = where + "word bytes must be bytes";
                } else if (tt != kBlob && tt != 5) {  // 5: SQLITE_NULL
                    bad = where + "tokens must be bytes or None";
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

    // A checkpoint stream's rows, bound from its arrays with the GIL released (the stream object
    // is held by the caller's arguments). Why here and not in Python: binding is ~50-100 ns a value
    // this way, against a tuple, a PyLong per value and the driver's type dispatch per row.
    void write_view(sqlite3_stmt *st, const CheckpointRowsView &v) {
        static const int arity[] = {2, 2, 3, 3};
        if (api.bind_parameter_count(st) != arity[v.kind])
            throw nb::value_error("the statement's parameters do not match the checkpoint rows");
        int failed = kOk;
        {
            nb::gil_scoped_release unlocked;
#if !(defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__)
            std::vector<uint8_t> le;  // the stored blob is little-endian uint32 ids
#endif
            for (size_t i = 0; i < v.n && failed == kOk; ++i) {
                switch (v.kind) {
                    case CheckpointRowsView::kWords: {
                        const size_t lo = v.a[i], hi = v.a[i + 1];
                        const size_t bytes = (hi - lo) * 4;
                        if (bytes > size_t(INT32_MAX)) {
                            failed = -1;
                            break;
                        }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
                        // the engine's tokens ARE the blob's bytes here: bound in place, no copy
                        const void *p = bytes ? static_cast<const void *>(v.toks + lo) : kEmpty;
#else
                        le.resize(bytes);
                        for (size_t k = lo; k < hi; ++k)
                            for (int s = 0; s < 4; ++s) le[(k - lo) * 4 + s] = uint8_t(v.toks[k] >> (8 * s));
                        const void *p = bytes ? static_cast<const void *>(le.data()) : kEmpty;
#endif
                        api.bind_blob(st, 1, p, int(bytes), kStatic);
                        api.bind_int64(st, 2, v.c[i]);
                        break;
                    }
                    case CheckpointRowsView::kDeletes:
                        api.bind_int64(st, 1, i64(v.a[i]));
                        api.bind_int64(st, 2, i64(v.b[i]));
                        break;
                    case CheckpointRowsView::kInserts:
                        api.bind_int64(st, 1, i64(v.a[i]));
                        api.bind_int64(st, 2, i64(v.b[i]));
                        api.bind_int64(st, 3, v.c[i]);  // counts are 64-bit
                        break;
                    case CheckpointRowsView::kUpdates:
                        api.bind_int64(st, 1, v.c[i]);
                        api.bind_int64(st, 2, i64(v.a[i]));
                        api.bind_int64(st, 3, i64(v.b[i]));
                        break;
                }
                if (failed != kOk) break;
                int rc = api.step(st);
                api.reset(st);
                if (rc != kDone && rc != kRow) failed = rc;
            }
        }
        if (failed == -1) throw nb::value_error("a word's tokens are 2 GiB or more");
        if (failed != kOk) fail(failed);
    }

    sqlite3 *db_ = nullptr;
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
    m.def("store_db_load", &load_api, nb::arg("sqlite3_module_file"),
          "Resolve SQLite from the library Python's _sqlite3 (this file, already loaded) uses; "
          "returns sqlite3_libversion_number(). RuntimeError when that is not possible.");
    nb::class_<WordRows>(m, "WordRows", "A store's word rows in one buffer (StoreDb.read_word_rows).")
        .def("__len__", [](const WordRows &r) { return r.n; })
        .def_prop_ro("nbytes", [](const WordRows &r) { return r.data.size(); }, "Bytes of the buffer.");
    nb::class_<StoreDb>(m, "StoreDb", "A native connection to a store for its bulk writes (bpe_store.store_db).")
        .def(nb::init<const std::string &, int, const std::string &, i64, i64>(), nb::arg("path"),
             nb::arg("busy_timeout_ms"), nb::arg("synchronous"), nb::arg("cache_kib"), nb::arg("journal_size_limit"))
        .def("execute", &StoreDb::execute, nb::arg("sql"), nb::arg("params") = nb::tuple(),
             "Run one statement; its rows as tuples.")
        .def("executemany", &StoreDb::executemany, nb::arg("sql"), nb::arg("rows"),
             "Run the statement for each row: a checkpoint RowStream (bound from its arrays) or tuples.")
        .def("insert_packed_words", &StoreDb::insert_packed_words, nb::arg("sql"), nb::arg("packed"),
             nb::arg("first_id"), "INSERT (id, bytes, count) for each word of packed counts, ids from first_id.")
        .def("read_word_rows", &StoreDb::read_word_rows, nb::arg("sql"),
             "Every row of sql (id, bytes, count, tokens or NULL) as one WordRows buffer, for MergeEngine.")
        .def("close", &StoreDb::close)
        .def_prop_ro("in_transaction", &StoreDb::in_transaction);
}
